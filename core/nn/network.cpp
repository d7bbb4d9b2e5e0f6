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
}  // namespace

namespace {
// The layers of a spec, configured for its input: their output shapes and parameters.
struct ConfiguredLayers {
    std::vector<std::unique_ptr<Layer>> layers;
    std::vector<Dims> outDims;
    std::vector<ParamInfo> infos;
    std::vector<int64_t> offsets;
    int64_t paramCount = 0;
    Dims output;
};

ConfiguredLayers configureLayers(const ModelSpec& spec) {
    ConfiguredLayers c;
    Dims d{spec.inC, spec.inH, spec.inW};
    for (const LayerSpec& ls : spec.layers) {
        auto layer = makeLayer(ls);
        try {
            d = layer->configure(d);
        } catch (const Error& e) {
            throw Error(spec.source + ": " + e.what());
        }
        c.outDims.push_back(d);
        for (auto& p : layer->params()) {
            c.offsets.push_back(c.paramCount);
            c.paramCount += p.shape.numel();
            c.infos.push_back(std::move(p));
        }
        c.layers.push_back(std::move(layer));
    }
    if (d.h != 1 || d.w != 1)
        throw Error(spec.source + ": the last layer must output a flat vector of class logits, not " + d.str());
    c.output = d;
    return c;
}
}  // namespace

ModelShape shapeOf(const ModelSpec& spec) {
    const ConfiguredLayers c = configureLayers(spec);
    return {Dims{spec.inC, spec.inH, spec.inW}, c.output.c, c.paramCount};
}

Dims layerOutputDims(const ModelSpec& spec, int layer) {
    if (layer < 0) return Dims{spec.inC, spec.inH, spec.inW};
    const ConfiguredLayers c = configureLayers(spec);
    if (layer >= int(c.outDims.size()))
        throw Error(spec.source + ": layer " + std::to_string(layer) + " is past the model's " +
                    std::to_string(c.outDims.size()) + " layers");
    return c.outDims[size_t(layer)];
}

NetworkMemory estimateNetworkMemory(const ModelSpec& spec, int batch, LayerRange range) {
    const ConfiguredLayers c = configureLayers(spec);
    const int total = int(c.layers.size());
    if (range.last < 0) range.last = total - 1;
    if (range.first < 0 || range.first > range.last || range.last >= total)
        throw Error(spec.source + ": layers " + std::to_string(range.first) + " to " + std::to_string(range.last) +
                    " are not a range of the model's " + std::to_string(total) + " layers");
    const size_t b = size_t(batch), f = sizeof(float);
    NetworkMemory m;
    int64_t params = 0;
    for (int l = range.first; l <= range.last; ++l)
        for (const ParamInfo& p : c.layers[size_t(l)]->params()) params += p.shape.numel();
    m.params = m.grads = size_t(std::max<int64_t>(params, 1)) * f;
    const Dims input{spec.inC, spec.inH, spec.inW};
    Dims in = range.first == 0 ? input : c.outDims[size_t(range.first) - 1];
    size_t maxAct = 0;
    for (int i = range.first; i <= range.last; ++i) {
        const size_t out = b * size_t(c.outDims[size_t(i)].size());
        if (!c.layers[size_t(i)]->aliasesInput()) m.activations += out * f;
        const LayerType t = spec.layers[size_t(i)].type;
        if (t == LayerType::MaxPool || t == LayerType::Dropout) m.saved += out * f;  // argmax / mask
        if (t == LayerType::Lrn) m.saved += 2 * out * f;  // oneDNN's LRN workspace: two floats per output
        maxAct = std::max({maxAct, out, b * size_t(in.size())});
        in = c.outDims[size_t(i)];
    }
    // The two gradient buffers; the input where the range starts the model (a later stage reads
    // the stage before's output in place); probabilities, logit gradients and labels where it ends it.
    m.activations += 2 * maxAct * f;
    if (range.first == 0) m.activations += b * size_t(input.size()) * f;
    if (range.last == total - 1) m.activations += (2 * b * size_t(c.output.c) + b) * f;
    return m;
}

Network::Network(const ModelSpec& spec, Backend& backend, int batch, LayerRange range)
    : spec_(spec), backend_(backend), batch_(batch), range_(range) {
    if (batch < 1) throw Error("batch size must be at least 1, got " + std::to_string(batch));
    ConfiguredLayers configured = configureLayers(spec);
    const int total = int(configured.layers.size());
    if (range_.last < 0) range_.last = total - 1;
    if (range_.first < 0 || range_.first > range_.last || range_.last >= total)
        throw Error(spec.source + ": layers " + std::to_string(range_.first) + " to " + std::to_string(range_.last) +
                    " are not a range of the model's " + std::to_string(total) + " layers");
    // The stage's parameters: its layers' tensors, a contiguous run of the model's.
    size_t firstTensor = 0, tensors = 0;
    for (int l = 0; l < range_.last + 1; ++l)
        (l < range_.first ? firstTensor : tensors) += configured.layers[size_t(l)]->params().size();
    modelParamIndex_ = firstTensor;
    modelOffset_ = firstTensor < configured.offsets.size() ? configured.offsets[firstTensor] : configured.paramCount;
    for (size_t k = firstTensor; k < firstTensor + tensors; ++k) {
        offsets_.push_back(configured.offsets[k] - modelOffset_);
        paramCount_ += configured.infos[k].shape.numel();
        infos_.push_back(std::move(configured.infos[k]));
    }
    for (int l = range_.first; l <= range_.last; ++l) {
        layers_.push_back(std::move(configured.layers[size_t(l)]));
        outDims_.push_back(configured.outDims[size_t(l)]);
    }
    input_ = range_.first == 0 ? Dims{spec.inC, spec.inH, spec.inW} : configured.outDims[size_t(range_.first) - 1];
    output_ = outDims_.back();
    outputs_ = range_.last == total - 1 ? configured.output.c : 0;

    own_params_ = backend.empty(Shape{std::max<int64_t>(paramCount_, 1)});
    params_ = own_params_.data();
    grads_ = backend.empty(Shape{std::max<int64_t>(paramCount_, 1)});
    grads_ptr_ = grads_.data();
    if (range_.first == 0) input_buf_ = backend.empty(Shape{batch, input_.h, input_.w, input_.c});
    inputPtr_ = input_buf_.data();
    if (endsInLoss()) {
        probs_ = backend.empty(Shape{batch, outputs_});
        dlogits_ = backend.empty(Shape{batch, outputs_});
        labels_ = backend.empty(Shape{batch});  // int32 labels in float-sized slots
    }

    size_t ws = 0;
    int64_t maxAct = 0;
    size_t pi = 0;
    const float* prev = inputPtr_;
    Dims in = input_;
    for (size_t li = 0; li < layers_.size(); ++li) {
        Layer* layer = layers_[li].get();
        layer->prepare(backend, batch);
        ws = std::max(ws, layer->workspaceBytes());
        for (size_t k = layer->params().size(); k-- > 0;) {
            layer->w.push_back(params_ + offsets_[pi]);
            layer->dw.push_back(grads_ptr_ + offsets_[pi]);
            ++pi;
        }
        if (size_t s = layer->savedBytes()) {
            saved_.push_back(bytesTensor(backend, s));
            layer->saved = saved_.back().data();
        }
        const Dims out = outDims_[li];
        if (layer->aliasesInput()) {
            outputs_of_.push_back(prev);
        } else {
            activations_.push_back(backend.empty(Shape{batch, out.h, out.w, out.c}));
            prev = activations_.back().data();
            outputs_of_.push_back(prev);
        }
        maxAct = std::max({maxAct, int64_t(batch) * out.size(), int64_t(batch) * in.size()});
        in = out;
    }
    workspace_ = bytesTensor(backend, ws);
    gradA_ = backend.empty(Shape{maxAct});
    gradB_ = backend.empty(Shape{maxAct});
}

void Network::setInput(const float* x) {
    inputPtr_ = x ? x : input_buf_.data();
    for (size_t i = 0; i < layers_.size() && layers_[i]->aliasesInput(); ++i) outputs_of_[i] = inputPtr_;
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

void Network::useRoundedParams(const uint16_t* rounded) {
    size_t pi = 0;
    for (auto& layer : layers_) {
        layer->wBf16.clear();
        for (size_t k = 0; k < layer->w.size(); ++k, ++pi)
            if (rounded) layer->wBf16.push_back(rounded + offsets_[pi]);
    }
}

std::vector<float> Network::initialParams(uint64_t seed) const {
    std::vector<float> all(static_cast<size_t>(paramCount_));
    std::vector<float> one;
    for (size_t i = 0; i < infos_.size(); ++i) {
        one.resize(size_t(infos_[i].shape.numel()));
        // Each tensor draws from its own stream, so adding a layer does not reshuffle the others
        // (and a stage's tensors draw what they draw in the whole model).
        initialise(infos_[i].init, one, infos_[i].fanIn, infos_[i].fanOut, seed * 1000003ull + modelParamIndex_ + i);
        std::copy(one.begin(), one.end(), all.begin() + offsets_[i]);
    }
    return all;
}

NetworkMemory Network::memoryUse() const {
    NetworkMemory m;
    m.params = bytesOf(own_params_);
    m.grads = bytesOf(grads_);
    for (const Tensor& t : activations_) m.activations += t.bytes();
    m.activations += gradA_.bytes() + gradB_.bytes() + bytesOf(input_buf_) + bytesOf(probs_) + bytesOf(dlogits_) +
                     bytesOf(labels_);
    for (const Tensor& t : saved_) m.saved += t.bytes();
    m.workspace = workspace_.bytes();
    return m;
}

bool Network::drawsRandomNumbers() const {
    for (const auto& l : layers_)
        if (l->spec().type == LayerType::Dropout && l->spec().keep < 1.f) return true;
    return false;
}

int64_t Network::trainFlopsPerExample() const {
    // Forward, the weight gradient (as many multiply-adds as forward) and the input gradient
    // (as many again), except at the first layer that computes anything: backward() skips its
    // input gradient, which nothing needs.
    int64_t f = 0;
    bool first = true;
    for (const auto& l : layers_) {
        if (l->aliasesInput()) continue;
        f += (first ? 2 : 3) * l->forwardFlops();
        first = false;
    }
    return f;
}

void Network::forward(Stream s, bool training, uint64_t seed, int valid, float* stats, const MicroBatch& part) {
    if (!training) useRoundedParams(nullptr);  // a training step's alone
    if (!inputPtr_) throw Error("a stage's forward was asked before the stage before it gave its input");
    LayerContext ctx{backend_, s, training, seed, workspace_.data()};
    const float* x = inputPtr_;
    for (size_t i = 0; i < layers_.size(); ++i) {
        // The whole model's layer index, and this micro-batch's place in the step's batch: its
        // dropout mask is the rows of the mask the whole batch would draw.
        ctx.seed = ew::seedFrom(seed * 131ull + uint64_t(range_.first) + i,
                                uint64_t(part.firstExample) * uint64_t(outDims_[i].size()));
        if (!layers_[i]->aliasesInput()) layers_[i]->forward(ctx, x, const_cast<float*>(outputs_of_[i]));
        x = outputs_of_[i];
    }
    if (endsInLoss())
        backend_.softmaxCrossEntropy(s, x, labels(), probs_.data(), std::min(valid, batch_), outputs_, stats);
    if (!training || !part.once) return;
    for (size_t i = 0; i < infos_.size(); ++i)
        if (infos_[i].weightDecay > 0)  // tf.nn.l2_loss(W) * wd = wd * sum(W^2) / 2
            backend_.addSumSquares(s, params_ + offsets_[i], size_t(infos_[i].shape.numel()),
                                   0.5f * infos_[i].weightDecay, stats + 2);
}

void Network::backward(Stream s, const MicroBatch& part) {
    if (!grads_ptr_) throw Error("this network only evaluates: its gradient buffer was released");
    LayerContext ctx{backend_, s, true, 0, workspace_.data()};
    const float* dy = outputGrad_;
    if (endsInLoss()) {
        backend_.softmaxCrossEntropyBackward(s, probs_.data(), labels(), dlogits_.data(), batch_, outputs_,
                                             1.f / float(part.stepBatch > 0 ? part.stepBatch : batch_));
        dy = dlogits_.data();
    } else if (!dy) {
        throw Error("a stage's backward was asked before the stage after it gave its output's gradient");
    }
    float* bufs[2] = {gradA_.data(), gradB_.data()};
    // The lowest layer that computes anything writes the input's gradient where the stage before
    // reads it (setInputGrad); the model's first layer writes none (nothing needs it).
    size_t first = 0;
    while (first < layers_.size() && layers_[first]->aliasesInput()) ++first;
    int next = 0;
    for (size_t i = layers_.size(); i-- > 0;) {
        Layer& layer = *layers_[i];
        const float* x = i == 0 ? inputPtr_ : outputs_of_[i - 1];
        if (layer.aliasesInput()) continue;  // Flatten: the gradient passes through unchanged
        float* dx = i == first ? inputGrad_ : bufs[next];
        layer.backward(ctx, x, outputs_of_[i], dy, dx);
        if (dx) {
            dy = dx;
            next ^= 1;
        }
    }
    if (first == layers_.size() && inputGrad_)  // a stage of Flatten alone passes its gradient on
        backend_.copy(s, inputGrad_, dy, size_t(batch_ * input_.size()) * sizeof(float));
    if (part.once)
        for (size_t i = 0; i < infos_.size(); ++i)
            if (infos_[i].weightDecay > 0)
                backend_.axpy(s, infos_[i].weightDecay, params_ + offsets_[i], grads_ptr_ + offsets_[i],
                              size_t(infos_[i].shape.numel()));
    useRoundedParams(nullptr);  // the update about to come changes the parameters
}

}  // namespace tb
