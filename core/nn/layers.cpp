#include "nn/layers.hpp"

#include <algorithm>
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

class Conv2dLayer final : public Layer {
public:
    using Layer::Layer;
    Dims configure(Dims in) override {
        in_ = in;
        if (!tfWindow(spec_, in, ph_, pw_))
            throw Error("layer '" + name() + "': a " + std::to_string(spec_.kernel) + "x" + std::to_string(spec_.kernel) +
                        " VALID convolution does not fit its input " + in.str());
        out_ = {spec_.filters, ph_.out, pw_.out};
        return out_;
    }
    std::vector<ParamInfo> params() const override {
        const int64_t k = spec_.kernel * spec_.kernel;
        return {{name() + "/weights", Shape{spec_.filters, in_.c, spec_.kernel, spec_.kernel}, spec_.init, in_.c * k,
                 spec_.filters * k, spec_.weightDecay},
                {name() + "/biases", Shape{spec_.filters}, spec_.biasInit, 0, 0, 0.f}};
    }
    void prepare(Backend& be, int n) override {
        n_ = n;
        ConvDesc d{n, in_.c, in_.h, in_.w, spec_.filters, spec_.kernel, spec_.kernel, spec_.stride, spec_.stride,
                   ph_.before, pw_.before, ph_.after, pw_.after};
        op_ = be.makeConv(d);
    }
    size_t workspaceBytes() const override { return op_->workspaceBytes(); }
    int64_t forwardFlops() const override {
        return 2 * out_.size() * in_.c * spec_.kernel * spec_.kernel;
    }
    void forward(const LayerContext& c, const float* x, float* y) override {
        op_->forward(c.stream, x, w[0], w[1], y, c.workspace);
    }
    void backward(const LayerContext& c, const float* x, const float*, const float* dy, float* dx) override {
        op_->backwardWeights(c.stream, x, dy, dw[0], dw[1], c.workspace);
        if (dx) op_->backwardData(c.stream, dy, w[0], dx, c.workspace);
    }

private:
    AxisPadding ph_, pw_;
    std::unique_ptr<ConvOp> op_;
};

// Pooling and LRN: a backend plan whose forward saves what its backward reads.
template <class Op>
class SavedOpLayer : public Layer {
public:
    using Layer::Layer;
    size_t savedBytes() const override { return op_->savedBytes(); }
    void forward(const LayerContext& c, const float* x, float* y) override { op_->forward(c.stream, x, y, saved); }
    void backward(const LayerContext& c, const float* x, const float* y, const float* dy, float* dx) override {
        if (dx) op_->backward(c.stream, x, y, dy, dx, saved);
    }

protected:
    std::unique_ptr<Op> op_;
};

// Max and average pooling over TF's window (size, stride, SAME or VALID); global average pooling
// is the window of the whole input, one value per channel: (c, h, w) -> (c, 1, 1).
class PoolLayer final : public SavedOpLayer<PoolOp> {
public:
    using SavedOpLayer::SavedOpLayer;
    Dims configure(Dims in) override {
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
        op_ = be.makePool(d);
    }

private:
    AxisPadding ph_, pw_;
    int kh_ = 0, kw_ = 0;
};

class LrnLayer final : public SavedOpLayer<LrnOp> {
public:
    using SavedOpLayer::SavedOpLayer;
    Dims configure(Dims in) override { return in_ = out_ = in; }
    void prepare(Backend& be, int n) override {
        op_ = be.makeLrn({n, in_.c, in_.h, in_.w, spec_.depthRadius, spec_.lrnBias, spec_.alpha, spec_.beta});
    }
};

class ReluLayer final : public Layer {
public:
    using Layer::Layer;
    Dims configure(Dims in) override { return in_ = out_ = in; }
    void prepare(Backend&, int n) override { n_ = n; }
    void forward(const LayerContext& c, const float* x, float* y) override {
        c.backend.reluForward(c.stream, x, y, size_t(n_ * in_.size()));
    }
    void backward(const LayerContext& c, const float*, const float* y, const float* dy, float* dx) override {
        if (dx) c.backend.reluBackward(c.stream, y, dy, dx, size_t(n_ * in_.size()));
    }
};

class FlattenLayer final : public Layer {
public:
    using Layer::Layer;
    Dims configure(Dims in) override { return out_ = {int(in.size()), 1, 1}; }
    bool aliasesInput() const override { return true; }
    void forward(const LayerContext&, const float*, float*) override {}
    void backward(const LayerContext&, const float*, const float*, const float*, float*) override {}
};

class DenseLayer final : public Layer {
public:
    using Layer::Layer;
    Dims configure(Dims in) override {
        if (in.h != 1 || in.w != 1)
            throw Error("layer '" + name() + "': input " + in.str() + " is not flat; add a flatten layer before it");
        in_ = in;
        return out_ = {spec_.units, 1, 1};
    }
    std::vector<ParamInfo> params() const override {
        return {{name() + "/weights", Shape{spec_.units, in_.c}, spec_.init, in_.c, spec_.units, spec_.weightDecay},
                {name() + "/biases", Shape{spec_.units}, spec_.biasInit, 0, 0, 0.f}};
    }
    void prepare(Backend& be, int n) override { op_ = be.makeDense({n, in_.c, spec_.units}); }
    int64_t forwardFlops() const override { return 2 * int64_t(in_.c) * spec_.units; }
    void forward(const LayerContext& c, const float* x, float* y) override {
        op_->forward(c.stream, x, w[0], rounded(), w[1], y);
    }
    void backward(const LayerContext& c, const float* x, const float*, const float* dy, float* dx) override {
        op_->backwardWeights(c.stream, x, dy, dw[0], dw[1]);
        if (dx) op_->backwardData(c.stream, dy, w[0], rounded(), dx);
    }

private:
    const uint16_t* rounded() const { return wBf16.empty() ? nullptr : wBf16[0]; }  // the weights'

    std::unique_ptr<DenseOp> op_;
};

class DropoutLayer final : public Layer {
public:
    using Layer::Layer;
    Dims configure(Dims in) override { return in_ = out_ = in; }
    void prepare(Backend&, int n) override { n_ = n; }
    size_t savedBytes() const override { return size_t(n_ * in_.size()) * sizeof(float); }  // the mask
    void forward(const LayerContext& c, const float* x, float* y) override {
        const size_t count = size_t(n_ * in_.size());
        if (c.training && spec_.keep < 1.f)
            c.backend.dropoutForward(c.stream, x, y, static_cast<float*>(saved), count, spec_.keep, c.seed);
        else
            c.backend.copy(c.stream, y, x, count * sizeof(float));  // evaluation: identity
    }
    void backward(const LayerContext& c, const float*, const float*, const float* dy, float* dx) override {
        const size_t count = size_t(n_ * in_.size());
        if (!dx) return;
        if (spec_.keep < 1.f) c.backend.dropoutBackward(c.stream, dy, static_cast<const float*>(saved), dx, count);
        else c.backend.copy(c.stream, dx, dy, count * sizeof(float));
    }
};

}  // namespace

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
    }
    throw Error("unknown layer type");
}

}  // namespace tb
