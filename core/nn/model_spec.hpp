// ModelSpec: a network described in JSON (resources/models/*.json, or a user's file), parsed
// and checked before anything is built. Schema (one object):
//   { "name": "mnist_cnn", "description": "...", "input": [c, h, w],
//     "layers": [ {"type": "conv2d", "filters": 32, "kernel": 5, "stride": 1, "padding": "same",
//                  "init": {"type": "truncated_normal", "stddev": 0.1}, "bias": 0.1, "weight_decay": 0},
//                 {"type": "relu"}, {"type": "maxpool", "size": 2, "stride": 2, "padding": "same"},
//                 {"type": "avgpool", "size": 2, "stride": 2, "padding": "same"}, {"type": "global_avgpool"},
//                 {"type": "lrn", "depth_radius": 4, "bias": 1.0, "alpha": 0.000111, "beta": 0.75},
//                 {"type": "flatten"}, {"type": "dense", "units": 10, ...}, {"type": "dropout", "keep": 0.5},
//                 {"type": "batch_norm", "momentum": 0.9, "epsilon": 1e-5},
//                 {"type": "add", "inputs": ["bn2", "block1"]}, {"type": "concat", "inputs": ["a", "b"]} ] }
// A model is a graph: each layer reads the layers named in its "inputs" ("input": the model's
// input), by default the layer before it, so a straight line needs no "inputs" at all. add sums
// its inputs (of one shape), concat joins them along the channels (of one height and width);
// every other layer reads one. The layers run in a topological order (the file's order where it
// is one); the one layer no other reads gives the class logits; the loss is softmax cross-entropy.
// batch_norm's "momentum" is TensorFlow's: moving = momentum moving + (1 - momentum) batch
// (PyTorch's momentum 0.1 is 0.9 here, the default; epsilon 1e-5 as PyTorch's); conv2d's
// "bias": false leaves the bias out (before a batch norm, whose beta does its work).
#pragma once
#include <string>
#include <vector>

#include "nn/init.hpp"

namespace tb {

enum class LayerType { Conv2d, MaxPool, Relu, Lrn, Dense, Flatten, Dropout, AvgPool, GlobalAvgPool, BatchNorm, Add, Concat };

struct LayerSpec {
    LayerType type = LayerType::Relu;
    std::string name;                 // "conv1"; defaults to type + index
    std::vector<int> inputs;          // the layers it reads: indices into ModelSpec::layers (-1: the model's input)
    int filters = 0, units = 0;       // conv2d, dense
    int kernel = 1, stride = 1;       // conv2d, maxpool (square)
    bool samePadding = true;          // "same" (TF) or "valid"
    InitSpec init;                    // weights
    InitSpec biasInit{InitSpec::Kind::Constant, 0.f, 0.f};
    bool bias = true;                 // conv2d: false for none
    float weightDecay = 0.f;          // adds weightDecay * l2_loss(weights) to the loss
    int depthRadius = 5;              // lrn
    float lrnBias = 1.f, alpha = 1.f, beta = 0.5f;
    float keep = 1.f;                 // dropout keep probability
    float momentum = 0.9f, epsilon = 1e-5f;  // batch_norm (its weight_decay applies to gamma and beta)
};

// How image pixels (bytes 0..255) become the model's inputs: x = pixel x multiply + add. The
// default is [0, 1]; the second seed's MNIST network takes x / 255 - 0.5 ("input_normalisation":
// {"multiply": 0.00392156862745098, "add": -0.5}). Part of the model, so its checkpoints and run
// folders (which keep the model's JSON) carry it; datasets of features are read as they are.
struct InputNormalisation {
    float multiply = 1.0f / 255.0f, add = 0.0f;
};

struct ModelSpec {
    std::string name, description, source;  // source: the file it came from
    std::string json;                        // the text it was parsed from (run folders keep it)
    int inC = 0, inH = 0, inW = 0;
    InputNormalisation pixels;
    std::vector<LayerSpec> layers;    // in a topological order: every layer after the layers it reads
};

// The layer types' names in model files ("conv2d", "batch_norm", ...).
std::string layerTypeName(LayerType);

// Parses JSON text; `source` names the file in error messages.
ModelSpec parseModelSpec(const std::string& jsonText, const std::string& source);
ModelSpec loadModelSpec(const std::string& path);

// Resolves --model: a path to a .json file, or a name looked up as NAME.json in the models
// folders (TOWERBENCH_MODELS_DIR entries, ~/.local/share/towerbench/models, the installed and
// source resources/models).
ModelSpec findModel(const std::string& nameOrPath);
std::vector<std::string> modelSearchPath();
// The names findModel finds (NAME.json in the search path, the first folder's where two have one),
// sorted.
std::vector<std::string> modelNames();

}  // namespace tb
