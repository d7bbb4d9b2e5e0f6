// towerbench-run export RUN_DIR --onnx FILE: a checkpoint's model as an ONNX inference graph that
// another program runs with nothing but the file. The graph:
//   input   "pixels" (batch, c, h, w) floats 0-255, NCHW, any batch: the data's images as they
//           are (a CIFAR-10 run's 32x32, another run's the model's input size)
//   then    the run's evaluation input, as ONNX operators: a CIFAR-10 run's central 24x24 crop
//           (Slice), the model's input normalisation x * multiply + add (Mul, Add), and where the
//           run standardized (--normalise) tf.image.per_image_standardization (ReduceMean, Sub,
//           Mul, Sqrt, Max, Div), or with --normalise mean-std (x - mean[c]) / std[c] (Sub, Div of
//           (1, c, 1, 1) constants, the checkpoint's input_mean and input_std)
//   layers  in NCHW with explicit pads equal to TensorFlow's "same" (conv, pools; average pools
//           exclude the padding, count_include_pad 0); LRN with ONNX's size 2r+1 and alpha x size
//           (ONNX divides alpha by the size, TensorFlow does not); batch norm as is
//           (BatchNormalization with the moving statistics); dense layers as Gemm (transB); a
//           flatten of an image as Transpose to NHWC then Flatten (the engine flattens (h, w, c));
//           dropout is the identity at inference
//   output  "probabilities" (batch, classes): the softmax of the logits
// Opset 13; the weights are the run's moving average where it kept one (as its evaluation), and
// the metadata holds the class names, the model's name and the checkpoint's step.
#pragma once
#include <cstddef>
#include <string>

namespace tb {

struct OnnxExportResult {
    std::string path, checkpoint;
    size_t nodes = 0, bytes = 0;
    int opset = 0, classes = 0;
    int channels = 0, height = 0, width = 0;  // the input's, per image
};

OnnxExportResult exportOnnx(const std::string& checkpointPath, const std::string& outPath);

}  // namespace tb
