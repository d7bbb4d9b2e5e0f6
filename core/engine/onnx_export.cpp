#include "engine/onnx_export.hpp"

#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/inference.hpp"
#include "engine/run_setup.hpp"
#include "util/atomic_file.hpp"
#include "nn/model_spec.hpp"
#include "onnx/onnx_graph.hpp"
#include "util/error.hpp"

namespace tb {
namespace {

constexpr int kOpset = 13;

// TensorFlow's "same" padding along one axis of n: the output ceil(n / s), the padding split with
// the extra pixel at the end; "valid": none.
std::pair<int64_t, int64_t> tfPads(int n, int k, int s, bool same) {
    if (!same) return {0, 0};
    const int64_t out = (n + s - 1) / s, total = std::max<int64_t>((out - 1) * s + k - n, 0);
    return {total / 2, total - total / 2};
}

std::vector<OnnxAttribute> windowAttributes(const LayerSpec& l, Dims in) {
    const auto [top, bottom] = tfPads(in.h, l.kernel, l.stride, l.samePadding);
    const auto [left, right] = tfPads(in.w, l.kernel, l.stride, l.samePadding);
    return {{"kernel_shape", std::vector<int64_t>{l.kernel, l.kernel}},
            {"strides", std::vector<int64_t>{l.stride, l.stride}},
            {"pads", std::vector<int64_t>{top, left, bottom, right}}};
}

// The run's evaluation input as ONNX operators, from "pixels" on; returns the value the first
// layer reads.
std::string addEvaluationInput(OnnxGraph& g, const EvaluationInput& in, const ModelSpec& spec, const ChannelStatistics& channels,
                               const std::string& checkpointPath) {
    std::string x = "pixels";
    if (in.cifar) {  // pipelineFor: the central crop of the evaluation input
        const int y0 = (in.height - spec.inH) / 2, x0 = (in.width - spec.inW) / 2;
        x = g.node("Slice", {x, g.ints("crop_starts", {y0, x0}), g.ints("crop_ends", {y0 + spec.inH, x0 + spec.inW}),
                             g.ints("crop_axes", {2, 3})},
                   "cropped");
    }
    x = g.node("Mul", {x, g.scalar("pixel_multiply", spec.pixels.multiply)}, "scaled");
    if (spec.pixels.add != 0.0f) x = g.node("Add", {x, g.scalar("pixel_add", spec.pixels.add)}, "shifted");
    if (standardizes(in.config.normalise, in.cifar)) {
        // (x - mean) / max(stddev, 1 / sqrt(N)) over each image's c x h x w values.
        const std::vector<int64_t> image = {1, 2, 3};
        const std::string mean = g.node("ReduceMean", {x}, "image_mean", {{"axes", image}, {"keepdims", int64_t(1)}});
        const std::string centred = g.node("Sub", {x, mean}, "centred");
        const std::string sq = g.node("Mul", {centred, centred}, "centred_squared");
        const std::string var = g.node("ReduceMean", {sq}, "image_variance", {{"axes", image}, {"keepdims", int64_t(1)}});
        const std::string sd = g.node("Sqrt", {var}, "image_stddev");
        const float floor = 1.0f / std::sqrt(float(spec.inC * spec.inH * spec.inW));
        // max(stddev, floor), exactly, with the floor as a tensor of stddev's shape (stddev x 0 + floor):
        // OpenCV's importer takes Max only between tensors, and Clip only in its opset-6 form.
        const std::string zero = g.node("Mul", {sd, g.scalar("zero", 0.0f)}, "stddev_zeroed");
        const std::string floorTensor = g.node("Add", {zero, g.scalar("stddev_floor", floor)}, "stddev_floor_tensor");
        const std::string adjusted = g.node("Max", {sd, floorTensor}, "adjusted_stddev");
        x = g.node("Div", {centred, adjusted}, "standardised");
    }

    if (in.config.normalise == "mean-std") {
        // (x - mean[c]) / std[c] per channel: constants of shape (1, c, 1, 1).
        const ChannelStatistics& st = channels;
        if (st.mean.size() != size_t(spec.inC))
            throw Error("export: " + checkpointPath + " normalised by channel (--normalise mean-std) but keeps no statistics for its " +
                        std::to_string(spec.inC) + " channels");
        const std::vector<int64_t> dims = {1, spec.inC, 1, 1};
        x = g.node("Sub", {x, g.floats("channel_mean", dims, st.mean.data())}, "channel_centred");
        x = g.node("Div", {x, g.floats("channel_std", dims, st.stddev.data())}, "channel_normalised");
    }
    return x;
}

// The layers in NCHW, reading `input`; returns the logits' value, flat (batch, classes).
std::string addLayers(OnnxGraph& g, const Network& net, const std::string& input,
                      const std::function<const float*(const std::string&)>& values) {
    const ModelSpec& spec = net.spec();
    // Each layer's output: its value name and whether it is still an image (rank 4) or flat (rank 2).
    struct Value {
        std::string name;
        bool image = true;
    };
    std::vector<Value> out(spec.layers.size());
    const Value first{input, true};
    for (size_t i = 0; i < spec.layers.size(); ++i) {
        const LayerSpec& l = spec.layers[i];
        const Layer& layer = *net.layers()[i];
        std::vector<Value> in;
        for (int k : l.inputs) in.push_back(k < 0 ? first : out[size_t(k)]);
        const Dims d = layer.inputDims();
        const std::string& n = l.name;
        Value& y = out[i];
        y.image = in.front().image;
        auto flat = [&](const Value& v) { return v.image ? g.node("Flatten", {v.name}, n + "/flat") : v.name; };
        switch (l.type) {
            case LayerType::Conv2d: {
                const std::vector<int64_t> w = {l.filters, d.c, l.kernel, l.kernel};
                std::vector<std::string> inputs = {in[0].name, g.floats(n + "/weights", w, values(n + "/weights"))};
                if (l.bias) inputs.push_back(g.floats(n + "/biases", {l.filters}, values(n + "/biases")));
                y.name = g.node("Conv", inputs, n, windowAttributes(l, d));
                break;
            }
            case LayerType::MaxPool: y.name = g.node("MaxPool", {in[0].name}, n, windowAttributes(l, d)); break;
            case LayerType::AvgPool: {
                std::vector<OnnxAttribute> a = windowAttributes(l, d);
                a.push_back({"count_include_pad", int64_t(0)});
                y.name = g.node("AveragePool", {in[0].name}, n, a);
                break;
            }
            case LayerType::GlobalAvgPool: y.name = g.node("GlobalAveragePool", {in[0].name}, n); break;
            case LayerType::Relu: y.name = g.node("Relu", {in[0].name}, n); break;
            case LayerType::Lrn: {
                const int64_t size = 2 * int64_t(l.depthRadius) + 1;
                y.name = g.node("LRN", {in[0].name}, n,
                                {{"size", size}, {"alpha", l.alpha * float(size)}, {"beta", l.beta}, {"bias", l.lrnBias}});
                break;
            }
            case LayerType::Flatten: {
                std::string v = in[0].name;
                // The engine's activations are (n, h, w, c): its flatten orders a sample (h, w, c).
                if (in[0].image && d.c > 1 && d.h * d.w > 1)
                    v = g.node("Transpose", {v}, n + "/nhwc", {{"perm", std::vector<int64_t>{0, 2, 3, 1}}});
                y.name = in[0].image ? g.node("Flatten", {v}, n) : v;
                y.image = false;
                break;
            }
            case LayerType::Dense: {
                const std::string a = flat(in[0]);
                y.name = g.node("Gemm",
                                {a, g.floats(n + "/weights", {l.units, d.c}, values(n + "/weights")),
                                 g.floats(n + "/biases", {l.units}, values(n + "/biases"))},
                                n, {{"transB", int64_t(1)}});
                y.image = false;
                break;
            }
            case LayerType::Dropout: y.name = in[0].name; break;  // the identity at inference
            case LayerType::BatchNorm:
                y.name = g.node("BatchNormalization",
                                {in[0].name, g.floats(n + "/gamma", {d.c}, values(n + "/gamma")),
                                 g.floats(n + "/beta", {d.c}, values(n + "/beta")),
                                 g.floats(n + "/moving_mean", {d.c}, values(n + "/moving_mean")),
                                 g.floats(n + "/moving_variance", {d.c}, values(n + "/moving_variance"))},
                                n, {{"epsilon", l.epsilon}});
                break;
            case LayerType::Add:
            case LayerType::Concat: {
                std::vector<std::string> names;
                for (const Value& v : in) names.push_back(v.name);
                y.name = l.type == LayerType::Add ? g.node("Add", names, n) : g.node("Concat", names, n, {{"axis", int64_t(1)}});
                break;
            }
        }
    }
    const Value& logits = out.back();
    return logits.image ? g.node("Flatten", {logits.name}, "logits") : logits.name;
}

}  // namespace

OnnxExportResult exportOnnx(const std::string& checkpointPath, const std::string& outPath) {
    InferenceModel m(checkpointPath, 1, 1);
    Network& net = m.network();
    const ModelSpec& spec = net.spec();
    Backend& be = net.backend();
    std::vector<float> params(size_t(net.paramCount())), stats(size_t(net.statisticCount()));
    be.copyToHost(m.stream(), params.data(), net.params(), params.size() * sizeof(float));
    if (!stats.empty()) be.copyToHost(m.stream(), stats.data(), net.statistics(), stats.size() * sizeof(float));
    be.synchronize(m.stream());
    std::map<std::string, const float*> tensor;  // variable name -> its values
    for (size_t i = 0; i < net.paramInfos().size(); ++i) tensor[net.paramInfos()[i].name] = params.data() + net.paramOffsets()[i];
    for (size_t i = 0; i < net.statisticInfos().size(); ++i)
        tensor[net.statisticInfos()[i].name] = stats.data() + net.statisticOffsets()[i];
    auto values = [&](const std::string& name) {
        const auto it = tensor.find(name);
        if (it == tensor.end()) throw Error("export: " + checkpointPath + " has no tensor " + name);
        return it->second;
    };

    const EvaluationInput in = m.evaluationInput();
    OnnxExportResult r;
    r.checkpoint = checkpointPath;
    r.path = outPath;
    r.opset = kOpset;
    r.classes = net.outputs();
    r.channels = in.channels;
    r.height = in.height;
    r.width = in.width;

    OnnxGraph g(spec.name);
    g.input("pixels", {-1, r.channels, r.height, r.width});
    const std::string x = addEvaluationInput(g, in, spec, m.checkpoint().meta().channels, checkpointPath);
    g.node("Softmax", {addLayers(g, net, x, values)}, "probabilities", {{"axis", int64_t(1)}});
    g.output("probabilities", {-1, r.classes});
    const CheckpointMeta& meta = m.checkpoint().meta();
    const std::string bytes =
        g.serialize(kOpset, TB_VERSION,
                    {{"model", spec.name},
                     {"class_names", nlohmann::json(meta.classNames).dump()},
                     {"step", std::to_string(meta.step)},
                     {"weights", m.averaged() ? "moving average" : "trained"},
                     {"input", "pixels: (batch, " + std::to_string(r.channels) + ", " + std::to_string(r.height) + ", " +
                                   std::to_string(r.width) + ") floats 0-255, NCHW"}});
    AtomicFile file(outPath);
    file.write(bytes.data(), bytes.size());
    file.commit();
    r.nodes = g.nodeCount();
    r.bytes = bytes.size();
    return r;
}

}  // namespace tb
