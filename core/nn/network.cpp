#include "nn/network.hpp"

#include <algorithm>

#include "backend/elementwise_math.hpp"
#include "util/error.hpp"

namespace tb {

namespace {
Tensor bytesTensor(Backend& be, size_t bytes) {  // scratch of `bytes`, rounded up to floats
    return be.empty(Shape{int64_t(std::max<size_t>((bytes + 3) / 4, 1))});
}
size_t bytesOf(const Tensor& t) { return t.empty() ? 0 : t.bytes(); }

// The layers of a spec, configured for its input: their output shapes, parameters and statistics.
struct ConfiguredLayers {
    std::vector<std::unique_ptr<Layer>> layers;
    std::vector<Dims> outDims;
    std::vector<ParamInfo> infos, statInfos;
    std::vector<int64_t> offsets, statOffsets;
    std::vector<size_t> firstTensor, firstStat;  // per layer: its first parameter / statistic tensor
    int64_t paramCount = 0, statCount = 0;
    Dims output;
};

// The inputs of layer `layer` as the spec gives them (the layer before where it names none).
std::vector<int> inputsOf(const ModelSpec& spec, int layer) {
    const std::vector<int>& in = spec.layers[size_t(layer)].inputs;
    return in.empty() ? std::vector<int>{layer - 1} : in;
}

// Per layer: how many layers read its output.
std::vector<int> readerCounts(const ModelSpec& spec) {
    std::vector<int> readers(spec.layers.size(), 0);
    for (size_t l = 0; l < spec.layers.size(); ++l)
        for (int k : inputsOf(spec, int(l)))
            if (k >= 0) ++readers[size_t(k)];
    return readers;
}

ConfiguredLayers configureLayers(const ModelSpec& spec) {
    ConfiguredLayers c;
    const Dims input{spec.inC, spec.inH, spec.inW};
    for (const LayerSpec& ls : spec.layers) {
        auto layer = makeLayer(ls);
        std::vector<Dims> in;
        for (int k : ls.inputs) {
            if (k >= int(c.outDims.size()))  // parseModelSpec orders the layers; a spec made in code may not
                throw Error(spec.source + ": layer '" + ls.name + "' reads a layer that comes after it");
            in.push_back(k < 0 ? input : c.outDims[size_t(k)]);
        }
        if (in.empty()) in.push_back(c.outDims.empty() ? input : c.outDims.back());
        Dims d;
        try {
            d = layer->configure(in);
        } catch (const Error& e) {
            throw Error(spec.source + ": " + e.what());
        }
        c.outDims.push_back(d);
        c.firstTensor.push_back(c.infos.size());
        for (auto& p : layer->params()) {
            c.offsets.push_back(c.paramCount);
            c.paramCount += p.shape.numel();
            c.infos.push_back(std::move(p));
        }
        c.firstStat.push_back(c.statInfos.size());
        for (auto& p : layer->statistics()) {
            c.statOffsets.push_back(c.statCount);
            c.statCount += p.shape.numel();
            c.statInfos.push_back(std::move(p));
        }
        c.layers.push_back(std::move(layer));
    }
    c.firstTensor.push_back(c.infos.size());
    c.firstStat.push_back(c.statInfos.size());
    // A ReLU that alone reads a layer able to apply it (batch norm, add, dense) is fused into that
    // layer: a pass over the activations fewer (each way for batch norm and add; the forward for
    // dense, whose GEMM epilogue applies it), and no buffer of its own. One not fused so
    // whose output only a max pooling reads is applied by the pooling, to its 4x smaller output (a
    // convolution, its ReLU, then the pooling: mnist_cnn, cifar10_cnn). (Layer k < l: its own
    // fusion was decided first.)
    const std::vector<int> readers = readerCounts(spec);
    for (size_t l = 0; l < spec.layers.size(); ++l) {
        const std::vector<int> in = inputsOf(spec, int(l));
        const int k = in.front();
        if (in.size() > 1 || k < 0 || readers[size_t(k)] != 1) continue;
        Layer& read = *c.layers[size_t(k)];
        if (spec.layers[l].type == LayerType::Relu && read.fuseRelu())
            c.layers[l]->fold();
        else if (spec.layers[size_t(k)].type == LayerType::Relu && !read.aliasesInput() && c.layers[l]->fuseReluBefore())
            read.fold();
    }
    const Dims last = c.outDims.back();
    if (last.h != 1 || last.w != 1)
        throw Error(spec.source + ": the last layer must output a flat vector of class logits, not " + last.str());
    c.output = last;
    return c;
}

LayerRange checkedRange(const ModelSpec& spec, LayerRange range) {
    const int total = int(spec.layers.size());
    if (range.last < 0) range.last = total - 1;
    if (range.first < 0 || range.first > range.last || range.last >= total)
        throw Error(spec.source + ": layers " + std::to_string(range.first) + " to " + std::to_string(range.last) +
                    " are not a range of the model's " + std::to_string(total) + " layers");
    return range;
}

}  // namespace

std::string cutProblem(const ModelSpec& spec, int first) {
    if (first <= 0 || first >= int(spec.layers.size())) return "";
    for (int l = first; l < int(spec.layers.size()); ++l)
        for (int k : inputsOf(spec, l))
            if (k < first - 1)
                return "the model cannot be cut before layer '" + spec.layers[size_t(first)].name + "': layer '" +
                       spec.layers[size_t(l)].name + "' reads '" +
                       (k < 0 ? std::string("input") : spec.layers[size_t(k)].name) +
                       "' across the cut (a cut must cross one tensor, between blocks)";
    return "";
}

RangeGraph rangeGraph(const ModelSpec& spec, LayerRange range) {
    range = checkedRange(spec, range);
    if (const std::string why = cutProblem(spec, range.first); !why.empty()) throw Error(spec.source + ": " + why);
    if (const std::string why = cutProblem(spec, range.last + 1); !why.empty()) throw Error(spec.source + ": " + why);
    RangeGraph g;
    const int n = range.last - range.first + 1;
    g.inputs.resize(size_t(n));
    for (int l = range.first; l <= range.last; ++l)
        for (int k : inputsOf(spec, l)) g.inputs[size_t(l - range.first)].push_back(k < range.first ? -1 : k - range.first);
    return g;
}

GradientPlan planGradients(const RangeGraph& g, const std::vector<bool>& aliases, const std::vector<bool>& hasParams,
                           bool inputNeedsGrad) {
    const int n = int(g.inputs.size());
    GradientPlan plan;
    // Whose gradient anything needs: a tensor after a layer with parameters, or after an input that needs one.
    plan.needed.assign(size_t(n), false);
    auto needs = [&](int t) { return t < 0 ? inputNeedsGrad : bool(plan.needed[size_t(t)]); };
    for (int t = 0; t < n; ++t) {
        bool any = hasParams[size_t(t)];
        for (int k : g.inputs[size_t(t)]) any = any || needs(k);
        plan.needed[size_t(t)] = any;
    }
    std::vector<int> readers(size_t(n), 0);
    for (int t = 0; t < n; ++t)
        for (int k : g.inputs[size_t(t)])
            if (k >= 0) ++readers[size_t(k)];

    // Buffers of the pool, taken when a gradient starts and given back when its layer has used it.
    std::vector<int> freeSlots;
    auto take = [&] {
        if (freeSlots.empty()) return plan.buffers++;
        const int s = freeSlots.back();
        freeSlots.pop_back();
        return s;
    };
    auto give = [&](int s) {
        if (s >= 0) freeSlots.push_back(s);
    };
    std::vector<int> slot(size_t(n), GradientPlan::kUnset);
    slot[size_t(n - 1)] = GradientPlan::kOutput;
    bool inputWritten = false;
    // Where a gradient of tensor k goes: written in place (the first writer of a tensor with one
    // reader or of a fresh slot), or into a scratch slot that is then added into k's.
    auto target = [&](int k, int& write, int& addInto) {
        addInto = GradientPlan::kUnset;
        if (!needs(k)) {
            write = GradientPlan::kNone;
            return;
        }
        if (k < 0) {
            if (!inputWritten) write = GradientPlan::kInput, inputWritten = true;
            else write = take(), addInto = GradientPlan::kInput;
            return;
        }
        if (slot[size_t(k)] == GradientPlan::kUnset) write = slot[size_t(k)] = take();
        else write = take(), addInto = slot[size_t(k)];
    };
    for (int t = n - 1; t >= 0; --t) {
        const int dy = slot[size_t(t)];
        if (!plan.needed[size_t(t)] || dy == GradientPlan::kUnset) continue;  // nothing after it needs it
        GradientPlan::Step step;
        step.layer = t;
        step.dy = dy;
        const std::vector<int>& in = g.inputs[size_t(t)];
        if (aliases[size_t(t)]) {
            // Flatten: its gradient is its input's. Handed over where the input has no other reader
            // and the buffer is the pool's; else copied or added where the input's gradient goes.
            const int k = in.front();
            if (!needs(k)) {
                give(dy);
                continue;
            }
            if (k >= 0 && readers[size_t(k)] == 1 && dy >= 0) {
                slot[size_t(k)] = dy;
                continue;
            }
            step.kind = GradientPlan::Step::Pass;
            bool add = false;
            int to = 0;
            if (k < 0) {
                to = GradientPlan::kInput;
                add = inputWritten;
                inputWritten = true;
            } else if (slot[size_t(k)] == GradientPlan::kUnset) {
                to = slot[size_t(k)] = take();
            } else {
                to = slot[size_t(k)];
                add = true;
            }
            step.dx = {to};
            step.add = {add};
            plan.steps.push_back(step);
            give(dy);
            continue;
        }
        std::vector<int> scratch;
        for (int k : in) {
            int write = 0, addInto = 0;
            target(k, write, addInto);
            step.dx.push_back(write);
            step.addInto.push_back(addInto);
            if (addInto != GradientPlan::kUnset) scratch.push_back(write);
        }
        plan.steps.push_back(step);
        for (int s : scratch) give(s);
        give(dy);
    }
    return plan;
}

ModelShape shapeOf(const ModelSpec& spec) {
    const ConfiguredLayers c = configureLayers(spec);
    return {Dims{spec.inC, spec.inH, spec.inW}, c.output.c, c.paramCount};
}

std::vector<LayerSummary> summarizeLayers(const ModelSpec& spec) {
    ConfiguredLayers c = configureLayers(spec);
    std::vector<LayerSummary> out;
    for (size_t l = 0; l < c.layers.size(); ++l) {
        LayerSummary s;
        s.name = spec.layers[l].name;
        s.type = spec.layers[l].type;
        s.inputs = inputsOf(spec, int(l));
        s.output = c.outDims[l];
        for (size_t k = c.firstTensor[l]; k < c.firstTensor[l + 1]; ++k) s.params += c.infos[k].shape.numel();
        s.forwardFlops = c.layers[l]->forwardFlops();
        s.fused = spec.layers[l].type == LayerType::Relu && c.layers[l]->aliasesInput();
        out.push_back(std::move(s));
    }
    return out;
}

Dims layerOutputDims(const ModelSpec& spec, int layer) {
    if (layer < 0) return Dims{spec.inC, spec.inH, spec.inW};
    const ConfiguredLayers c = configureLayers(spec);
    if (layer >= int(c.outDims.size()))
        throw Error(spec.source + ": layer " + std::to_string(layer) + " is past the model's " +
                    std::to_string(c.outDims.size()) + " layers");
    return c.outDims[size_t(layer)];
}

namespace {
// The pool buffers' size: the largest tensor of the range (its input included), per example.
int64_t largestTensor(const ConfiguredLayers& c, const ModelSpec& spec, LayerRange range) {
    int64_t m = range.first == 0 ? Dims{spec.inC, spec.inH, spec.inW}.size() : c.outDims[size_t(range.first) - 1].size();
    for (int l = range.first; l <= range.last; ++l) m = std::max(m, c.outDims[size_t(l)].size());
    return m;
}
// Layer l's one input where it is in the range, else -1.
int soleInput(const ModelSpec& spec, int l, LayerRange range) {
    const std::vector<int> in = inputsOf(spec, l);
    return in.size() == 1 && in[0] >= range.first ? in[0] : -1;
}
// Per layer of the range: the layer before it whose fused ReLU's mask its input gradient takes
// (Layer::maskInputGradient), or -1. A dense layer whose one input is a ReLU fused into the dense
// layer before it, with the three in the range and nothing else reading the ReLU: mnist_cnn's fc1,
// relu, fc2. (A ReLU read twice gets two gradients, which only together are masked.)
std::vector<int> reluMaskSources(const ConfiguredLayers& c, const ModelSpec& spec, LayerRange range) {
    const std::vector<int> readers = readerCounts(spec);
    std::vector<int> sources;
    for (int l = range.first; l <= range.last; ++l) {
        const int k = soleInput(spec, l, range), j = k >= 0 ? soleInput(spec, k, range) : -1;
        const bool linked = j >= 0 && spec.layers[size_t(l)].type == LayerType::Dense &&
                            spec.layers[size_t(k)].type == LayerType::Relu && c.layers[size_t(k)]->aliasesInput() &&
                            readers[size_t(k)] == 1 && spec.layers[size_t(j)].type == LayerType::Dense;
        sources.push_back(linked ? j : -1);
    }
    return sources;
}
// Per layer of the range: the convolution whose bias gradient it writes (Layer::sumInputGradient),
// or -1. A pooling or LRN layer whose one input is a convolution with a bias, directly or through
// a ReLU folded into it, each read by nothing else and all in the range: mnist_cnn's conv1, relu,
// pool1; cifar10_cnn's conv2, relu, norm2. (A convolution read twice gets two gradients, and its
// bias gradient is the sum of both.)
std::vector<int> biasSumSources(const ConfiguredLayers& c, const ModelSpec& spec, LayerRange range) {
    const std::vector<int> readers = readerCounts(spec);
    std::vector<int> sources;
    for (int l = range.first; l <= range.last; ++l) {
        const LayerType t = spec.layers[size_t(l)].type;
        int j = soleInput(spec, l, range);
        if (j >= 0 && spec.layers[size_t(j)].type == LayerType::Relu && c.layers[size_t(j)]->aliasesInput() &&
            readers[size_t(j)] == 1)
            j = soleInput(spec, j, range);
        const bool linked = (t == LayerType::MaxPool || t == LayerType::AvgPool || t == LayerType::GlobalAvgPool ||
                             t == LayerType::Lrn) &&
                            j >= 0 && spec.layers[size_t(j)].type == LayerType::Conv2d && spec.layers[size_t(j)].bias &&
                            readers[size_t(j)] == 1;
        sources.push_back(linked ? j : -1);
    }
    return sources;
}
// Per layer of the range (`layers` of them): whether its backward is asked for any input's
// gradient. Not where it reads only the model's input, in the first stage, or is not run backward
// at all: its plans leave that direction out (Layer::skipInputGradients).
std::vector<bool> givesInputGradients(const GradientPlan& plan, int layers) {
    std::vector<bool> gives(size_t(layers), false);
    for (const GradientPlan::Step& step : plan.steps)
        for (int slot : step.dx)
            if (slot != GradientPlan::kNone) gives[size_t(step.layer)] = true;
    return gives;
}
GradientPlan planOf(const ConfiguredLayers& c, const ModelSpec& spec, LayerRange range) {
    std::vector<bool> aliases, hasParams;
    for (int l = range.first; l <= range.last; ++l) {
        aliases.push_back(c.layers[size_t(l)]->aliasesInput());
        hasParams.push_back(c.firstTensor[size_t(l) + 1] > c.firstTensor[size_t(l)]);
    }
    return planGradients(rangeGraph(spec, range), aliases, hasParams, range.first > 0);
}
}  // namespace

NetworkMemory estimateNetworkMemory(const ModelSpec& spec, int batch, LayerRange range) {
    const ConfiguredLayers c = configureLayers(spec);
    range = checkedRange(spec, range);
    const int total = int(c.layers.size());
    const size_t b = size_t(batch), f = sizeof(float);
    NetworkMemory m;
    int64_t params = 0;
    for (size_t k = c.firstTensor[size_t(range.first)]; k < c.firstTensor[size_t(range.last) + 1]; ++k)
        params += c.infos[k].shape.numel();
    m.params = m.grads = size_t(std::max<int64_t>(params, 1)) * f;
    for (size_t k = c.firstStat[size_t(range.first)]; k < c.firstStat[size_t(range.last) + 1]; ++k)
        m.statistics += size_t(c.statInfos[k].shape.numel()) * f;
    const Dims input{spec.inC, spec.inH, spec.inW};
    // The fused ReLUs whose masks the dense layer after takes (their bits, ew::reluMaskBytes).
    std::vector<bool> keepsMask(spec.layers.size(), false);
    for (int j : reluMaskSources(c, spec, range))
        if (j >= 0) {
            keepsMask[size_t(j)] = true;
            m.saved += ew::reluMaskBytes(batch, c.outDims[size_t(j)].c);
        }
    for (int i = range.first; i <= range.last; ++i) {
        const size_t out = b * size_t(c.outDims[size_t(i)].size());
        if (!c.layers[size_t(i)]->aliasesInput()) m.activations += out * f;
        const LayerType t = spec.layers[size_t(i)].type;
        if (t == LayerType::MaxPool || t == LayerType::Dropout) m.saved += out * f;  // argmax / mask
        if (t == LayerType::Lrn) m.saved += 2 * out * f;  // oneDNN's LRN workspace: two floats per output
        if (t == LayerType::BatchNorm) m.saved += 8 * size_t(c.outDims[size_t(i)].c) * f;  // statistics, sums
        // An inner product with the ReLU after it fused (that ReLU in this range or the next):
        // its backward masks its output's gradient into the workspace (b x units floats), unless
        // the dense layer after it masks it.
        if (t == LayerType::Dense && !keepsMask[size_t(i)])
            for (int l = i + 1; l < total; ++l)
                if (spec.layers[size_t(l)].type == LayerType::Relu && c.layers[size_t(l)]->aliasesInput() &&
                    inputsOf(spec, l) == std::vector<int>{i})
                    m.workspace = std::max(m.workspace, out * f);
    }
    // The gradient buffers the backward holds at once; the input where the range starts the model
    // (a later stage reads the stage before's output in place); probabilities, logit gradients and
    // labels where it ends it.
    m.activations += size_t(planOf(c, spec, range).buffers) * b * size_t(largestTensor(c, spec, range)) * f;
    if (range.first == 0) m.activations += b * size_t(input.size()) * f;
    if (range.last == total - 1) m.activations += (2 * b * size_t(c.output.c) + b) * f;
    return m;
}

Network::Network(const ModelSpec& spec, Backend& backend, int batch, LayerRange range)
    : spec_(spec), backend_(backend), batch_(batch), range_(range) {
    if (batch < 1) throw Error("batch size must be at least 1, got " + std::to_string(batch));
    ConfiguredLayers configured = configureLayers(spec);
    range_ = checkedRange(spec, range_);
    const int total = int(configured.layers.size());
    graph_ = rangeGraph(spec, range_);
    // The stage's parameters and statistics: its layers' tensors, a contiguous run of the model's.
    const size_t firstTensor = configured.firstTensor[size_t(range_.first)];
    const size_t endTensor = configured.firstTensor[size_t(range_.last) + 1];
    modelParamIndex_ = firstTensor;
    modelOffset_ = firstTensor < configured.offsets.size() ? configured.offsets[firstTensor] : configured.paramCount;
    for (size_t k = firstTensor; k < endTensor; ++k) {
        offsets_.push_back(configured.offsets[k] - modelOffset_);
        paramCount_ += configured.infos[k].shape.numel();
        infos_.push_back(std::move(configured.infos[k]));
    }
    const size_t firstStat = configured.firstStat[size_t(range_.first)];
    const size_t endStat = configured.firstStat[size_t(range_.last) + 1];
    statModelOffset_ = firstStat < configured.statOffsets.size() ? configured.statOffsets[firstStat] : configured.statCount;
    for (size_t k = firstStat; k < endStat; ++k) {
        statOffsets_.push_back(configured.statOffsets[k] - statModelOffset_);
        statCount_ += configured.statInfos[k].shape.numel();
        statInfos_.push_back(std::move(configured.statInfos[k]));
    }
    const GradientPlan plan = planOf(configured, spec, range_);
    // The links between layers (before prepare): layer l takes over work of layer j, its source.
    const auto link = [&](const std::vector<int>& sources, bool (Layer::*take)(Layer&), const char* what) {
        for (int l = range_.first; l <= range_.last; ++l)
            if (const int j = sources[size_t(l - range_.first)];
                j >= 0 && !(configured.layers[size_t(l)].get()->*take)(*configured.layers[size_t(j)]))
                throw Error(spec.source + ": layer '" + spec.layers[size_t(l)].name + "' cannot " + what + " layer '" +
                            spec.layers[size_t(j)].name + "'");
    };
    link(reluMaskSources(configured, spec, range_), &Layer::maskInputGradient, "mask its input's gradient for");
    link(biasSumSources(configured, spec, range_), &Layer::sumInputGradient, "write the bias gradient of");
    const std::vector<bool> givesDx = givesInputGradients(plan, range_.last - range_.first + 1);
    for (int l = range_.first; l <= range_.last; ++l)
        if (!givesDx[size_t(l - range_.first)]) configured.layers[size_t(l)]->skipInputGradients();
    for (int l = range_.first; l <= range_.last; ++l) {
        layers_.push_back(std::move(configured.layers[size_t(l)]));
        outDims_.push_back(configured.outDims[size_t(l)]);
    }
    input_ = range_.first == 0 ? Dims{spec.inC, spec.inH, spec.inW} : configured.outDims[size_t(range_.first) - 1];
    output_ = outDims_.back();
    outputs_ = range_.last == total - 1 ? configured.output.c : 0;
    plan_ = plan;

    own_params_ = backend.empty(Shape{std::max<int64_t>(paramCount_, 1)});
    params_ = own_params_.data();
    grads_ = backend.empty(Shape{std::max<int64_t>(paramCount_, 1)});
    grads_ptr_ = grads_.data();
    if (statCount_ > 0) {
        own_stats_ = backend.empty(Shape{statCount_});
        stats_ = own_stats_.data();
        const std::vector<float> initial = initialStatistics();
        const Stream s = backend.createCopyStream();
        backend.copyFromHost(s, stats_, initial.data(), initial.size() * sizeof(float));
        backend.synchronize(s);
        backend.destroyStream(s);
    }
    if (range_.first == 0) input_buf_ = backend.empty(Shape{batch, input_.h, input_.w, input_.c});
    inputPtr_ = input_buf_.data();
    if (endsInLoss()) {
        probs_ = backend.empty(Shape{batch, outputs_});
        dlogits_ = backend.empty(Shape{batch, outputs_});
        labels_ = backend.empty(Shape{batch});  // int32 labels in float-sized slots
    }

    size_t ws = 0;
    size_t pi = 0, si = 0;
    for (size_t li = 0; li < layers_.size(); ++li) {
        Layer* layer = layers_[li].get();
        layer->prepare(backend, batch);
        ws = std::max(ws, layer->workspaceBytes());
        for (size_t k = layer->params().size(); k-- > 0;) {
            layer->w.push_back(params_ + offsets_[pi]);
            layer->dw.push_back(grads_ptr_ + offsets_[pi]);
            ++pi;
        }
        if (!layer->statistics().empty()) layer->stats = stats_ + statOffsets_[si];
        si += layer->statistics().size();
        if (size_t s = layer->savedBytes()) {
            saved_.push_back(bytesTensor(backend, s));
            layer->saved = saved_.back().data();
        }
        activations_.push_back(layer->aliasesInput() ? Tensor()
                                                     : backend.empty(Shape{batch, outDims_[li].h, outDims_[li].w,
                                                                           outDims_[li].c}));
    }
    if (ws > 0) workspace_ = bytesTensor(backend, ws);  // (none where no layer asks: layers' calls get nullptr)
    const int64_t largest = largestTensor(configured, spec, range_);
    for (int b = 0; b < plan_.buffers; ++b) gradPool_.push_back(backend.empty(Shape{int64_t(batch) * largest}));
    wire();
}

Network::~Network() {
    for (std::vector<Event>* marks : {&forwardMarks_, &backwardMarks_})
        for (Event e : *marks) backend_.destroyEvent(e);
}

void Network::wire() {
    outputs_of_.assign(layers_.size(), nullptr);
    inputs_of_.assign(layers_.size(), {});
    for (size_t i = 0; i < layers_.size(); ++i) {
        for (int k : graph_.inputs[i]) inputs_of_[i].push_back(k < 0 ? inputPtr_ : outputs_of_[size_t(k)]);
        outputs_of_[i] = layers_[i]->aliasesInput() ? inputs_of_[i].front() : activations_[i].data();
    }
}

void Network::setInput(const float* x) {
    inputPtr_ = x ? x : input_buf_.data();
    wire();
}

void Network::bindGrads(float* external) {
    grads_ptr_ = external;
    size_t pi = 0;
    for (auto& layer : layers_)
        for (float*& dw : layer->dw) dw = grads_ptr_ + offsets_[pi++];
    grads_ = Tensor();
}

void Network::releaseGradients() {
    grads_ = Tensor();
    grads_ptr_ = nullptr;
    for (auto& layer : layers_)
        for (float*& dw : layer->dw) dw = nullptr;
}

void Network::releaseParams() {
    own_params_ = Tensor();
    params_ = nullptr;
    for (auto& layer : layers_)
        for (float*& w : layer->w) w = nullptr;
}

void Network::bindParams(float* external) {
    viewParams(external);
    own_params_ = Tensor();  // not needed any more
}

void Network::viewParams(float* p) {
    params_ = p ? p : own_params_.data();
    size_t pi = 0;
    for (auto& layer : layers_)
        for (float*& w : layer->w) w = params_ + offsets_[pi++];
}

void Network::bindStatistics(float* external) {
    if (statCount_ == 0) return;
    stats_ = external;
    size_t si = 0;
    for (auto& layer : layers_) {
        if (!layer->statistics().empty()) layer->stats = stats_ + statOffsets_[si];
        si += layer->statistics().size();
    }
    own_stats_ = Tensor();
}

void Network::useRoundedParams(const uint16_t* rounded) {
    size_t pi = 0;
    for (auto& layer : layers_) {
        layer->wBf16.clear();
        for (size_t k = 0; k < layer->w.size(); ++k, ++pi)
            if (rounded) layer->wBf16.push_back(rounded + offsets_[pi]);
    }
}

namespace {
std::vector<float> initialValues(const std::vector<ParamInfo>& infos, const std::vector<int64_t>& offsets,
                                 int64_t count, uint64_t seedOf0, size_t firstIndex) {
    std::vector<float> all(static_cast<size_t>(count));
    std::vector<float> one;
    for (size_t i = 0; i < infos.size(); ++i) {
        one.resize(size_t(infos[i].shape.numel()));
        // Each tensor draws from its own stream, so adding a layer does not reshuffle the others
        // (and a stage's tensors draw what they draw in the whole model).
        initialise(infos[i].init, one, infos[i].fanIn, infos[i].fanOut, seedOf0 + firstIndex + i);
        std::copy(one.begin(), one.end(), all.begin() + offsets[i]);
    }
    return all;
}
}  // namespace

std::vector<float> Network::initialParams(uint64_t seed) const {
    return initialValues(infos_, offsets_, paramCount_, seed * 1000003ull, modelParamIndex_);
}

std::vector<float> Network::initialStatistics() const {
    return initialValues(statInfos_, statOffsets_, statCount_, 0, 0);  // constants: no seed
}

NetworkMemory Network::memoryUse() const {
    NetworkMemory m;
    m.params = bytesOf(own_params_);
    m.grads = bytesOf(grads_);
    m.statistics = bytesOf(own_stats_);
    for (const Tensor& t : activations_) m.activations += bytesOf(t);
    for (const Tensor& t : gradPool_) m.activations += t.bytes();
    m.activations += bytesOf(input_buf_) + bytesOf(probs_) + bytesOf(dlogits_) + bytesOf(labels_);
    for (const Tensor& t : saved_) m.saved += t.bytes();
    m.workspace = bytesOf(workspace_);
    return m;
}

bool Network::drawsRandomNumbers() const {
    for (const auto& l : layers_)
        if (l->spec().type == LayerType::Dropout && l->spec().keep < 1.f) return true;
    return false;
}

int64_t Network::trainFlopsPerExample() const {
    // Forward, the weight gradient (as many multiply-adds as forward) and, where some input's
    // gradient is needed, the input gradient (as many again): backward() skips those nothing needs
    // (the first layer's).
    int64_t f = 0;
    for (size_t t = 0; t < layers_.size(); ++t) {
        bool inputGrad = false;
        for (int k : graph_.inputs[t]) inputGrad = inputGrad || (k >= 0 && plan_.needed[size_t(k)]);
        f += (inputGrad ? 3 : 2) * layers_[t]->forwardFlops();
    }
    return f;
}

void Network::mark(std::vector<Event>& marks, size_t i, Stream s) {
    if (!profiling_) return;
    while (marks.size() <= i) marks.push_back(backend_.createEvent());
    backend_.recordEvent(marks[i], s);
}

LayerTimes Network::takeLayerTimes() {
    LayerTimes t;
    if (!profiled_) return t;
    profiled_ = false;
    t.forward.assign(layers_.size(), 0.0);
    t.backward.assign(layers_.size(), 0.0);
    for (size_t i = 0; i < layers_.size(); ++i)
        t.forward[i] = backend_.elapsedSeconds(forwardMarks_[i], forwardMarks_[i + 1]);
    for (size_t k = 0; k < plan_.steps.size(); ++k)
        t.backward[size_t(plan_.steps[k].layer)] += backend_.elapsedSeconds(backwardMarks_[k], backwardMarks_[k + 1]);
    return t;
}

void Network::forward(Stream s, bool training, uint64_t seed, int valid, float* stats, const MicroBatch& part) {
    if (!training) useRoundedParams(nullptr);  // a training step's alone
    if (!inputPtr_) throw Error("a stage's forward was asked before the stage before it gave its input");
    LayerContext ctx{backend_, s, training, seed, workspace_.data(), sync_};
    profiling_ = training && profileNext_;
    for (size_t i = 0; i < layers_.size(); ++i) {
        mark(forwardMarks_, i, s);
        // The whole model's layer index, and this micro-batch's place in the step's batch: its
        // dropout mask is the rows of the mask the whole batch would draw.
        ctx.seed = ew::seedFrom(seed * 131ull + uint64_t(range_.first) + i,
                                uint64_t(part.firstExample) * uint64_t(outDims_[i].size()));
        if (!layers_[i]->aliasesInput()) layers_[i]->forward(ctx, inputs_of_[i], const_cast<float*>(outputs_of_[i]));
    }
    mark(forwardMarks_, layers_.size(), s);
    if (endsInLoss())
        backend_.softmaxCrossEntropy(s, outputs_of_.back(), labels(), probs_.data(), std::min(valid, batch_), outputs_,
                                     stats);
    if (!training || !part.once) return;
    for (size_t i = 0; i < infos_.size(); ++i)
        if (infos_[i].weightDecay > 0)  // tf.nn.l2_loss(W) * wd = wd * sum(W^2) / 2
            backend_.addSumSquares(s, params_ + offsets_[i], size_t(infos_[i].shape.numel()),
                                   0.5f * infos_[i].weightDecay, stats + 2);
}

void Network::backward(Stream s, const MicroBatch& part) {
    if (!grads_ptr_) throw Error("this network only evaluates: its gradient buffer was released");
    LayerContext ctx{backend_, s, true, 0, workspace_.data(), sync_};
    const float* dOutput = outputGrad_;
    if (endsInLoss()) {
        backend_.softmaxCrossEntropyBackward(s, probs_.data(), labels(), dlogits_.data(), batch_, outputs_,
                                             1.f / float(part.stepBatch > 0 ? part.stepBatch : batch_));
        dOutput = dlogits_.data();
    } else if (!dOutput) {
        throw Error("a stage's backward was asked before the stage after it gave its output's gradient");
    }
    // The plan's slots: a pool buffer, the output's gradient, the stage's input gradient (nullptr
    // where the stage before reads none).
    auto at = [&](int slot) -> float* {
        if (slot >= 0) return gradPool_[size_t(slot)].data();
        if (slot == GradientPlan::kOutput) return const_cast<float*>(dOutput);
        if (slot == GradientPlan::kInput) return inputGrad_;
        return nullptr;
    };
    auto count = [&](int layer, int input) {
        const int k = graph_.inputs[size_t(layer)][size_t(input)];
        return size_t(batch_) * size_t(k < 0 ? input_.size() : outDims_[size_t(k)].size());
    };
    LayerInputGrads dx;
    for (size_t k = 0; k < plan_.steps.size(); ++k) {
        const GradientPlan::Step& step = plan_.steps[k];
        mark(backwardMarks_, k, s);
        const float* dy = at(step.dy);
        if (step.kind == GradientPlan::Step::Pass) {  // Flatten: its gradient is its input's
            float* to = at(step.dx.front());
            if (!to) continue;
            const size_t n = count(step.layer, 0);
            if (step.add.front()) backend_.axpy(s, 1.f, dy, to, n);
            else backend_.copy(s, to, dy, n * sizeof(float));
            continue;
        }
        const int t = step.layer;
        dx.clear();
        for (int slot : step.dx) dx.push_back(at(slot));
        layers_[size_t(t)]->backward(ctx, inputs_of_[size_t(t)], outputs_of_[size_t(t)], dy, dx);
        for (size_t i = 0; i < step.addInto.size(); ++i)
            if (step.addInto[i] != GradientPlan::kUnset && dx[i] && at(step.addInto[i]))
                backend_.axpy(s, 1.f, dx[i], at(step.addInto[i]), count(t, int(i)));
    }
    mark(backwardMarks_, plan_.steps.size(), s);
    if (profiling_) profileNext_ = false, profiled_ = true;
    profiling_ = false;
    if (part.once)
        for (size_t i = 0; i < infos_.size(); ++i)
            if (infos_[i].weightDecay > 0)
                backend_.axpy(s, infos_[i].weightDecay, params_ + offsets_[i], grads_ptr_ + offsets_[i],
                              size_t(infos_[i].shape.numel()));
    useRoundedParams(nullptr);  // the update about to come changes the parameters
}

}  // namespace tb
