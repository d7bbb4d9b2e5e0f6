#include "nn/layers.hpp"

#include <algorithm>
#include <limits>
#include <cstdio>

#include "util/error.hpp"

namespace tb {

std::string Dims::str() const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "(%d, %d, %d)", c, h, w);
    return buf;
}

AxisPadding tfPadding(int in, int kernel, int stride, bool same) {
    AxisPadding p;
    if (same) {
        p.out = (in + stride - 1) / stride;
        const int total = std::max((p.out - 1) * stride + kernel - in, 0);
        p.before = total / 2;  // TF puts the odd pixel after
        p.after = total - p.before;
    } else {
        p.out = in >= kernel ? (in - kernel) / stride + 1 : 0;
    }
    return p;
}

namespace {

// TF padding of a square kernel / window along both axes; false when it does not fit.
bool tfWindow(const LayerSpec& s, Dims in, AxisPadding& ph, AxisPadding& pw) {
    ph = tfPadding(in.h, s.kernel, s.stride, s.samePadding);
    pw = tfPadding(in.w, s.kernel, s.stride, s.samePadding);
    return ph.out >= 1 && pw.out >= 1;
}

class Conv2dLayer final : public OneInputLayer {
public:
    using OneInputLayer::OneInputLayer;
    Dims configureOne(Dims in) override {
        in_ = in;
        if (!tfWindow(spec_, in, ph_, pw_))
            throw Error("layer '" + name() + "': a " + std::to_string(spec_.kernel) + "x" + std::to_string(spec_.kernel) +
                        " VALID convolution does not fit its input " + in.str());
        out_ = {spec_.filters, ph_.out, pw_.out};
        return out_;
    }
    std::vector<ParamInfo> params() const override {
        const int64_t k = spec_.kernel * spec_.kernel;
        std::vector<ParamInfo> p{{name() + "/weights", Shape{spec_.filters, in_.c, spec_.kernel, spec_.kernel},
                                  spec_.init, in_.c * k, spec_.filters * k, spec_.weightDecay}};
        if (spec_.bias) p.push_back({name() + "/biases", Shape{spec_.filters}, spec_.biasInit, 0, 0, 0.f});
        return p;
    }
    void prepare(Backend& be, int n) override {
        n_ = n;
        ConvDesc d{n, in_.c, in_.h, in_.w, spec_.filters, spec_.kernel, spec_.kernel, spec_.stride, spec_.stride,
                   ph_.before, pw_.before, ph_.after, pw_.after};
        d.bias = spec_.bias;
        d.biasGradient = !biasBySuccessor_;  // (linked before prepare: Network's constructor)
        d.inputGradient = inputGradient_;
        op_ = be.makeConv(d);
    }
    size_t workspaceBytes() const override { return op_->workspaceBytes(); }
    int64_t forwardFlops() const override {
        return 2 * out_.size() * in_.c * spec_.kernel * spec_.kernel;
    }
    void forwardOne(const LayerContext& c, const float* x, float* y) override {
        op_->forward(c.stream, x, w[0], spec_.bias ? w[1] : nullptr, y, c.workspace);
    }
    void backwardOne(const LayerContext& c, const float* x, const float*, const float* dy, float* dx) override {
        op_->backwardWeights(c.stream, x, dy, dw[0], spec_.bias && !biasBySuccessor_ ? dw[1] : nullptr, c.workspace);
        if (dx) op_->backwardData(c.stream, dy, w[0], dx, c.workspace);
    }
    // The layer after it writes its bias gradient (Layer::sumInputGradient): false without a bias.
    bool leaveBiasGradient() { return biasBySuccessor_ = spec_.bias; }
    float* biasGradient() const { return dw[1]; }
    void skipInputGradients() override { inputGradient_ = false; }

private:
    AxisPadding ph_, pw_;
    std::unique_ptr<ConvOp> op_;
    bool biasBySuccessor_ = false;  // the layer after it writes db (leaveBiasGradient)
    bool inputGradient_ = true;     // false: dx is never asked for (skipInputGradients)
};

// Pooling and LRN: a backend plan whose forward saves what its backward reads, and which can sum
// its input gradient per channel for the convolution before it (PoolDesc::sumDx).
template <class Op>
class SavedOpLayer : public OneInputLayer {
public:
    using OneInputLayer::OneInputLayer;
    size_t savedBytes() const override { return op_->savedBytes(); }
    bool sumInputGradient(Layer& before) override {
        auto* conv = dynamic_cast<Conv2dLayer*>(&before);
        if (!conv || !conv->leaveBiasGradient()) return false;
        sumsFor_ = conv;
        return true;
    }
    void forwardOne(const LayerContext& c, const float* x, float* y) override { op_->forward(c.stream, x, y, saved); }
    void backwardOne(const LayerContext& c, const float* x, const float* y, const float* dy, float* dx) override {
        // (dx is always wanted where the convolution before is in the network: its gradients read it.)
        if (dx) op_->backward(c.stream, x, y, dy, dx, saved, sumsFor_ ? sumsFor_->biasGradient() : nullptr);
    }

protected:
    std::unique_ptr<Op> op_;
    const Conv2dLayer* sumsFor_ = nullptr;  // whose bias gradient the backward writes (sumInputGradient)
};

// Max and average pooling over TF's window (size, stride, SAME or VALID); global average pooling
// is the window of the whole input, one value per channel: (c, h, w) -> (c, 1, 1).
class PoolLayer final : public SavedOpLayer<PoolOp> {
public:
    using SavedOpLayer::SavedOpLayer;
    Dims configureOne(Dims in) override {
        in_ = in;
        if (spec_.type == LayerType::GlobalAvgPool) {
            ph_ = {1, 0, 0}, pw_ = {1, 0, 0};
            kh_ = in.h, kw_ = in.w;
        } else if (!tfWindow(spec_, in, ph_, pw_)) {
            throw Error("layer '" + name() + "': the pooling window does not fit its input " + in.str());
        } else {
            kh_ = kw_ = spec_.kernel;
        }
        out_ = {in.c, ph_.out, pw_.out};
        return out_;
    }
    void prepare(Backend& be, int n) override {
        const int stride = spec_.type == LayerType::GlobalAvgPool ? 1 : spec_.stride;
        PoolDesc d{n, in_.c, in_.h, in_.w, kh_, kw_, stride, stride, ph_.before, pw_.before, ph_.after, pw_.after};
        d.mode = spec_.type == LayerType::MaxPool ? PoolMode::Max : PoolMode::Average;
        d.relu = relu_;
        d.sumDx = sumsFor_ != nullptr;
        op_ = be.makePool(d);
    }
    bool fuseReluBefore() override { return relu_ = spec_.type == LayerType::MaxPool; }

private:
    AxisPadding ph_, pw_;
    int kh_ = 0, kw_ = 0;
    bool relu_ = false;  // the ReLU before it folded in (max pooling)
};

class LrnLayer final : public SavedOpLayer<LrnOp> {
public:
    using SavedOpLayer::SavedOpLayer;
    Dims configureOne(Dims in) override { return in_ = out_ = in; }
    void prepare(Backend& be, int n) override {
        LrnDesc d{n, in_.c, in_.h, in_.w, spec_.depthRadius, spec_.lrnBias, spec_.alpha, spec_.beta};
        d.relu = relu_;
        d.sumDx = sumsFor_ != nullptr;
        op_ = be.makeLrn(d);
    }
    bool fuseReluBefore() override { return relu_ = true; }

private:
    bool relu_ = false;  // the ReLU before it folded in
};

class ReluLayer final : public OneInputLayer {
public:
    using OneInputLayer::OneInputLayer;
    Dims configureOne(Dims in) override { return in_ = out_ = in; }
    bool aliasesInput() const override { return folded_; }
    void fold() override { folded_ = true; }
    void prepare(Backend&, int n) override { n_ = n; }
    void forwardOne(const LayerContext& c, const float* x, float* y) override {
        c.backend.reluForward(c.stream, x, y, size_t(n_ * in_.size()));
    }
    void backwardOne(const LayerContext& c, const float*, const float* y, const float* dy, float* dx) override {
        if (dx) c.backend.reluBackward(c.stream, y, dy, dx, size_t(n_ * in_.size()));
    }

private:
    bool folded_ = false;  // the layer before applies it (fuseRelu)
};

class FlattenLayer final : public OneInputLayer {
public:
    using OneInputLayer::OneInputLayer;
    Dims configureOne(Dims in) override {
        // A layer's dimensions are ints (as cuDNN's and oneDNN's descriptors): a flattened input
        // of 2^31 values or more would wrap.
        if (in.size() > std::numeric_limits<int>::max())
            throw Error("layer '" + name() + "': flattening " + in.str() + " gives " + std::to_string(in.size()) +
                        " values, more than the 2,147,483,647 a layer's size can hold");
        return out_ = {int(in.size()), 1, 1};
    }
    bool aliasesInput() const override { return true; }
    void forwardOne(const LayerContext&, const float*, float*) override {}
    void backwardOne(const LayerContext&, const float*, const float*, const float*, float*) override {}
};

class DenseLayer final : public OneInputLayer {
public:
    using OneInputLayer::OneInputLayer;
    Dims configureOne(Dims in) override {
        if (in.h != 1 || in.w != 1)
            throw Error("layer '" + name() + "': input " + in.str() + " is not flat; add a flatten layer before it");
        in_ = in;
        return out_ = {spec_.units, 1, 1};
    }
    std::vector<ParamInfo> params() const override {
        return {{name() + "/weights", Shape{spec_.units, in_.c}, spec_.init, in_.c, spec_.units, spec_.weightDecay},
                {name() + "/biases", Shape{spec_.units}, spec_.biasInit, 0, 0, 0.f}};
    }
    void prepare(Backend& be, int n) override {
        n_ = n;
        desc_ = {n, in_.c, spec_.units, relu_, maskedByNext_, maskFrom_ != nullptr};
        op_ = be.makeDense(desc_);
    }
    // The ReLU after it: applied by the forward GEMM's epilogue (DenseDesc::relu); the backward
    // takes dy where y > 0 into the workspace (n, units), as the ReLU's own backward would, unless
    // the dense layer after the ReLU gives dy masked already (maskInputGradient).
    bool fuseRelu() override { return relu_ = true; }
    bool maskInputGradient(Layer& before) override {
        auto* dense = dynamic_cast<DenseLayer*>(&before);
        if (!dense || !dense->relu_) return false;
        dense->maskedByNext_ = true;
        maskFrom_ = dense;
        return true;
    }
    size_t workspaceBytes() const override {
        return relu_ && !maskedByNext_ ? size_t(n_) * size_t(spec_.units) * sizeof(float) : 0;
    }
    size_t savedBytes() const override { return desc_.maskBytes(); }  // the ReLU's mask, for the layer after
    int64_t forwardFlops() const override { return 2 * int64_t(in_.c) * spec_.units; }
    void forwardOne(const LayerContext& c, const float* x, float* y) override {
        op_->forward(c.stream, x, w[0], rounded(), w[1], y, saved);
    }
    void backwardOne(const LayerContext& c, const float* x, const float* y, const float* dy, float* dx) override {
        if (relu_ && !maskedByNext_) {
            auto* masked = static_cast<float*>(c.workspace);
            c.backend.reluBackward(c.stream, y, dy, masked, size_t(n_) * size_t(spec_.units));
            dy = masked;
        }
        op_->backwardWeights(c.stream, x, dy, dw[0], dw[1]);
        if (dx) op_->backwardData(c.stream, dy, w[0], rounded(), dx, maskFrom_ ? maskFrom_->saved : nullptr);
    }

private:
    const uint16_t* rounded() const { return wBf16.empty() ? nullptr : wBf16[0]; }  // the weights'

    DenseDesc desc_;
    std::unique_ptr<DenseOp> op_;
    bool relu_ = false;          // the ReLU after it fused (fuseRelu)
    bool maskedByNext_ = false;  // ... and the dense layer after it masks its dy (maskInputGradient)
    const DenseLayer* maskFrom_ = nullptr;  // the dense layer whose ReLU mask this one's dx takes
};

class DropoutLayer final : public OneInputLayer {
public:
    using OneInputLayer::OneInputLayer;
    Dims configureOne(Dims in) override { return in_ = out_ = in; }
    void prepare(Backend&, int n) override { n_ = n; }
    size_t savedBytes() const override { return size_t(n_ * in_.size()) * sizeof(float); }  // the mask
    void forwardOne(const LayerContext& c, const float* x, float* y) override {
        const size_t count = size_t(n_ * in_.size());
        if (c.training && spec_.keep < 1.f)
            c.backend.dropoutForward(c.stream, x, y, static_cast<float*>(saved), count, spec_.keep, c.seed);
        else
            c.backend.copy(c.stream, y, x, count * sizeof(float));  // evaluation: identity
    }
    void backwardOne(const LayerContext& c, const float*, const float*, const float* dy, float* dx) override {
        const size_t count = size_t(n_ * in_.size());
        if (!dx) return;
        if (spec_.keep < 1.f) c.backend.dropoutBackward(c.stream, dy, static_cast<const float*>(saved), dx, count);
        else c.backend.copy(c.stream, dx, dy, count * sizeof(float));
    }
};

// Batch normalisation per channel: training normalises with the batch's statistics (this tower's,
// or with --sync-bn every tower's: LayerContext::sync) and updates the moving mean and variance
// (its statistics); evaluation normalises with those. gamma (c) and beta (c), adjacent in the
// flat buffers, so their gradients are one buffer of 2c. saved: the plan's, then the batch's sums
// (2c) and, synchronised, the gradient sums every tower adds (2c).
class BatchNormLayer final : public OneInputLayer {
public:
    using OneInputLayer::OneInputLayer;
    Dims configureOne(Dims in) override { return in_ = out_ = in; }
    std::vector<ParamInfo> params() const override {
        const InitSpec one{InitSpec::Kind::Constant, 0.f, 1.f}, zero{InitSpec::Kind::Constant, 0.f, 0.f};
        return {{name() + "/gamma", Shape{in_.c}, one, 0, 0, spec_.weightDecay},
                {name() + "/beta", Shape{in_.c}, zero, 0, 0, spec_.weightDecay}};
    }
    std::vector<ParamInfo> statistics() const override {
        const InitSpec one{InitSpec::Kind::Constant, 0.f, 1.f}, zero{InitSpec::Kind::Constant, 0.f, 0.f};
        return {{name() + "/moving_mean", Shape{in_.c}, zero, 0, 0, 0.f},
                {name() + "/moving_variance", Shape{in_.c}, one, 0, 0, 0.f}};
    }
    bool fuseRelu() override { return relu_ = true; }
    void prepare(Backend& be, int n) override {
        n_ = n;
        op_ = be.makeBatchNorm({rows(), in_.c, spec_.epsilon, relu_});
    }
    size_t savedBytes() const override { return op_->savedBytes() + 4 * size_t(in_.c) * sizeof(float); }
    int64_t forwardFlops() const override { return 0; }  // element-wise: not counted (conv and dense only)
    void forwardOne(const LayerContext& c, const float* x, float* y) override {
        if (!c.training) {
            op_->inference(c.stream, x, stats, w[0], w[1], y);
            return;
        }
        // A tower's batch of one value per channel has no variance to normalise by.
        if (!c.sync && rows() < 2)
            throw Error("layer '" + name() + "': batch normalisation in training needs more than one value per "
                        "channel, and a batch of " + std::to_string(n_) + " of " + in_.str() + " has one");
        float* sums = extra();
        op_->sums(c.stream, x, stats, sums, saved);
        double count = double(rows());
        if (c.sync) {
            c.sync->sum(c.stream, sums, 2 * size_t(in_.c));
            count *= c.sync->replicas();
        }
        op_->forward(c.stream, x, sums, stats, count, w[0], w[1], y, stats, spec_.momentum, saved);
    }
    void backwardOne(const LayerContext& c, const float* x, const float* y, const float* dy, float* dx) override {
        // This tower's gamma and beta gradients; the input gradient from every tower's sums.
        op_->gradientSums(c.stream, x, y, dy, dw[0], dw[1], saved);
        if (!dx) return;
        const float *sumDyXhat = dw[0], *sumDy = dw[1];
        double count = double(rows());
        if (c.sync) {
            float* every = extra() + 2 * in_.c;
            c.backend.copy(c.stream, every, dw[0], size_t(in_.c) * sizeof(float));
            c.backend.copy(c.stream, every + in_.c, dw[1], size_t(in_.c) * sizeof(float));
            c.sync->sum(c.stream, every, 2 * size_t(in_.c));
            sumDyXhat = every, sumDy = every + in_.c;
            count *= c.sync->replicas();
        }
        op_->backwardData(c.stream, x, y, dy, w[0], sumDyXhat, sumDy, count, dx, saved);
    }

private:
    int64_t rows() const { return int64_t(n_) * in_.h * in_.w; }
    bool relu_ = false;  // a ReLU fused after it
    float* extra() const { return reinterpret_cast<float*>(static_cast<char*>(saved) + op_->savedBytes()); }

    std::unique_ptr<BatchNormOp> op_;
};

// add: y = the sum of its inputs, all of one shape (a residual connection), relu'd where a ReLU is
// fused after it; each input's gradient is dy (where y > 0, with the ReLU).
class AddLayer final : public Layer {
public:
    using Layer::Layer;
    Dims configure(const std::vector<Dims>& in) override {
        for (const Dims& d : in)
            if (!(d == in.front()))
                throw Error("layer '" + name() + "': add needs inputs of one shape, got " + shapes(in));
        return in_ = out_ = in.front();
    }
    bool fuseRelu() override { return relu_ = true; }
    void prepare(Backend&, int n) override { n_ = n; }
    void forward(const LayerContext& c, const LayerInputs& x, float* y) override {
        const size_t count = size_t(n_) * size_t(out_.size());
        for (size_t i = 1; i < x.size(); ++i) c.backend.add(c.stream, i == 1 ? x[0] : y, x[i], y, count, relu_ && i + 1 == x.size());
    }
    void backward(const LayerContext& c, const LayerInputs&, const float* y, const float* dy,
                  const LayerInputGrads& dx) override {
        const size_t count = size_t(n_) * size_t(out_.size());
        const float* g = dy;  // the gradient every input gets
        for (float* d : dx) {
            if (!d) continue;
            if (relu_ && g == dy) {
                c.backend.reluBackward(c.stream, y, dy, d, count);
                g = d;
            } else {
                c.backend.copy(c.stream, d, g, count * sizeof(float));
            }
        }
    }
    static std::string shapes(const std::vector<Dims>& in) {
        std::string s;
        for (const Dims& d : in) s += (s.empty() ? "" : " and ") + d.str();
        return s;
    }

private:
    bool relu_ = false;  // a ReLU fused after it
};

// concat: the inputs (of one height and width) side by side along the channels, in their order;
// in (n, h, w, c) each input's channels are a column block of the output's rows.
class ConcatLayer final : public Layer {
public:
    using Layer::Layer;
    Dims configure(const std::vector<Dims>& in) override {
        in_ = in.front();
        out_ = {0, in.front().h, in.front().w};
        channels_.clear();
        for (const Dims& d : in) {
            if (d.h != out_.h || d.w != out_.w)
                throw Error("layer '" + name() + "': concat needs inputs of one height and width, got " +
                            AddLayer::shapes(in));
            channels_.push_back(d.c);
            out_.c += d.c;
        }
        return out_;
    }
    void prepare(Backend&, int n) override { n_ = n; }
    void forward(const LayerContext& c, const LayerInputs& x, float* y) override {
        int offset = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            c.backend.copy2d(c.stream, y + offset, pitch(out_.c), x[i], pitch(channels_[i]), pitch(channels_[i]), rows());
            offset += channels_[i];
        }
    }
    void backward(const LayerContext& c, const LayerInputs&, const float*, const float* dy,
                  const LayerInputGrads& dx) override {
        int offset = 0;
        for (size_t i = 0; i < dx.size(); ++i) {
            if (dx[i])
                c.backend.copy2d(c.stream, dx[i], pitch(channels_[i]), dy + offset, pitch(out_.c), pitch(channels_[i]),
                                 rows());
            offset += channels_[i];
        }
    }

private:
    static size_t pitch(int channels) { return size_t(channels) * sizeof(float); }
    size_t rows() const { return size_t(n_) * size_t(out_.h) * size_t(out_.w); }

    std::vector<int> channels_;
};

}  // namespace

Dims OneInputLayer::configure(const std::vector<Dims>& in) {
    if (in.size() != 1)
        throw Error("layer '" + name() + "' reads one input, not " + std::to_string(in.size()));
    in_ = in.front();
    return configureOne(in.front());
}

std::unique_ptr<Layer> makeLayer(const LayerSpec& spec) {
    switch (spec.type) {
    case LayerType::Conv2d: return std::make_unique<Conv2dLayer>(spec);
    case LayerType::MaxPool:
    case LayerType::AvgPool:
    case LayerType::GlobalAvgPool: return std::make_unique<PoolLayer>(spec);
    case LayerType::Relu: return std::make_unique<ReluLayer>(spec);
    case LayerType::Lrn: return std::make_unique<LrnLayer>(spec);
    case LayerType::Dense: return std::make_unique<DenseLayer>(spec);
    case LayerType::Flatten: return std::make_unique<FlattenLayer>(spec);
    case LayerType::Dropout: return std::make_unique<DropoutLayer>(spec);
    case LayerType::BatchNorm: return std::make_unique<BatchNormLayer>(spec);
    case LayerType::Add: return std::make_unique<AddLayer>(spec);
    case LayerType::Concat: return std::make_unique<ConcatLayer>(spec);
    }
    throw Error("unknown layer type");
}

}  // namespace tb
