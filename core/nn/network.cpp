#include "nn/network.hpp"

#include <algorithm>

#include "util/error.hpp"

namespace tb {

namespace {
Tensor bytesTensor(Backend& be, size_t bytes) {  // scratch of `bytes`, rounded up to floats
    return be.empty(Shape{int64_t(std::max<size_t>((bytes + 3) / 4, 1))});
}
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

NetworkMemory estimateNetworkMemory(const ModelSpec& spec, int batch) {
    const ConfiguredLayers c = configureLayers(spec);
    const size_t b = size_t(batch), f = sizeof(float);
    NetworkMemory m;
    m.params = m.grads = size_t(std::max<int64_t>(c.paramCount, 1)) * f;
    Dims in{spec.inC, spec.inH, spec.inW};
    size_t maxAct = 0;
    for (size_t i = 0; i < c.layers.size(); ++i) {
        const size_t out = b * size_t(c.outDims[i].size());
        if (!c.layers[i]->aliasesInput()) m.activations += out * f;
        const LayerType t = spec.layers[i].type;
        if (t == LayerType::MaxPool || t == LayerType::Dropout) m.saved += out * f;  // argmax / mask
        if (t == LayerType::Lrn) m.saved += 2 * out * f;  // oneDNN's LRN workspace: two floats per output
        maxAct = std::max({maxAct, out, b * size_t(in.size())});
        in = c.outDims[i];
    }
    // The two gradient buffers, input, probabilities, logit gradients and labels.
    m.activations += (2 * maxAct + b * size_t(Dims{spec.inC, spec.inH, spec.inW}.size()) + 2 * b * size_t(c.output.c) + b) * f;
    return m;
}

Network::Network(const ModelSpec& spec, Backend& backend, int batch)
    : spec_(spec), backend_(backend), batch_(batch), input_{spec.inC, spec.inH, spec.inW} {
    if (batch < 1) throw Error("batch size must be at least 1, got " + std::to_string(batch));
    ConfiguredLayers configured = configureLayers(spec);
    layers_ = std::move(configured.layers);
    infos_ = std::move(configured.infos);
    offsets_ = std::move(configured.offsets);
    paramCount_ = configured.paramCount;
    outputs_ = configured.output.c;
    const std::vector<Dims>& outDims = configured.outDims;

    own_params_ = backend.empty(Shape{std::max<int64_t>(paramCount_, 1)});
    params_ = own_params_.data();
    grads_ = backend.empty(Shape{std::max<int64_t>(paramCount_, 1)});
    input_buf_ = backend.empty(Shape{batch, input_.h, input_.w, input_.c});
    probs_ = backend.empty(Shape{batch, outputs_});
    dlogits_ = backend.empty(Shape{batch, outputs_});
    labels_ = backend.empty(Shape{batch});  // int32 labels in float-sized slots

    size_t ws = 0;
    int64_t maxAct = 0;
    size_t pi = 0;
    const float* prev = input_buf_.data();
    Dims in = input_;
    for (size_t li = 0; li < layers_.size(); ++li) {
        Layer* layer = layers_[li].get();
        layer->prepare(backend, batch);
        ws = std::max(ws, layer->workspaceBytes());
        for (size_t k = layer->params().size(); k-- > 0;) {
            layer->w.push_back(params_ + offsets_[pi]);
            layer->dw.push_back(grads_.data() + offsets_[pi]);
            ++pi;
        }
        if (size_t s = layer->savedBytes()) {
            saved_.push_back(bytesTensor(backend, s));
            layer->saved = saved_.back().data();
        }
        const Dims out = outDims[li];
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
        // Each tensor draws from its own stream, so adding a layer does not reshuffle the others.
        initialise(infos_[i].init, one, infos_[i].fanIn, infos_[i].fanOut, seed * 1000003ull + i);
        std::copy(one.begin(), one.end(), all.begin() + offsets_[i]);
    }
    return all;
}

NetworkMemory Network::memoryUse() const {
    NetworkMemory m;
    m.params = own_params_.empty() ? 0 : own_params_.bytes();
    m.grads = grads_.bytes();
    for (const Tensor& t : activations_) m.activations += t.bytes();
    m.activations += gradA_.bytes() + gradB_.bytes() + input_buf_.bytes() + probs_.bytes() + dlogits_.bytes() +
                     labels_.bytes();
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

void Network::forward(Stream s, bool training, uint64_t seed, int valid, float* stats) {
    if (!training) useRoundedParams(nullptr);  // a training step's alone
    LayerContext ctx{backend_, s, training, seed, workspace_.data()};
    const float* x = input_buf_.data();
    for (size_t i = 0; i < layers_.size(); ++i) {
        ctx.seed = seed * 131ull + i;
        if (!layers_[i]->aliasesInput()) layers_[i]->forward(ctx, x, const_cast<float*>(outputs_of_[i]));
        x = outputs_of_[i];
    }
    backend_.softmaxCrossEntropy(s, x, labels(), probs_.data(), std::min(valid, batch_), outputs_, stats);
    if (!training) return;
    for (size_t i = 0; i < infos_.size(); ++i)
        if (infos_[i].weightDecay > 0)  // tf.nn.l2_loss(W) * wd = wd * sum(W^2) / 2
            backend_.addSumSquares(s, params_ + offsets_[i], size_t(infos_[i].shape.numel()),
                                   0.5f * infos_[i].weightDecay, stats + 2);
}

void Network::backward(Stream s) {
    LayerContext ctx{backend_, s, true, 0, workspace_.data()};
    backend_.softmaxCrossEntropyBackward(s, probs_.data(), labels(), dlogits_.data(), batch_, outputs_,
                                         1.f / float(batch_));
    const float* dy = dlogits_.data();
    float* bufs[2] = {gradA_.data(), gradB_.data()};
    // No input gradient is needed at or below the first layer that computes anything.
    size_t first = 0;
    while (first < layers_.size() && layers_[first]->aliasesInput()) ++first;
    int next = 0;
    for (size_t i = layers_.size(); i-- > 0;) {
        Layer& layer = *layers_[i];
        const float* x = i == 0 ? input_buf_.data() : outputs_of_[i - 1];
        if (layer.aliasesInput()) continue;  // Flatten: the gradient passes through unchanged
        float* dx = i <= first ? nullptr : bufs[next];
        layer.backward(ctx, x, outputs_of_[i], dy, dx);
        if (dx) {
            dy = dx;
            next ^= 1;
        }
    }
    for (size_t i = 0; i < infos_.size(); ++i)
        if (infos_[i].weightDecay > 0)
            backend_.axpy(s, infos_[i].weightDecay, params_ + offsets_[i], grads_.data() + offsets_[i],
                          size_t(infos_[i].shape.numel()));
    useRoundedParams(nullptr);  // the update about to come changes the parameters
}

}  // namespace tb
