// ForwardingBackend: a Backend that hands every call to another one. Tests derive from it to
// plant a fault in one op or to watch every call (which thread makes it, in which mode).
#pragma once
#include <memory>
#include <string>

#include "backend/backend.hpp"

namespace tbtest {

class ForwardingBackend : public tb::Backend {
public:
    explicit ForwardingBackend(std::shared_ptr<tb::Backend> inner) : be_(std::move(inner)) {}
    // Called before every call that runs arithmetic (all but memory, streams and events).
    virtual void onCompute(const char* /*op*/) {}

    std::string name() const override { return be_->name(); }
    tb::Device device() const override { return be_->device(); }
    tb::MemoryInfo memoryInfo() const override { return be_->memoryInfo(); }
    void* allocate(size_t b) override { return be_->allocate(b); }
    void deallocate(void* p) override { be_->deallocate(p); }
    void* allocateHost(size_t b) override { return be_->allocateHost(b); }
    void deallocateHost(void* p) override { be_->deallocateHost(p); }
    tb::AllocatorStats allocatorStats() const override { return be_->allocatorStats(); }
    void copyFromHost(tb::Stream s, void* d, const void* h, size_t b) override { be_->copyFromHost(s, d, h, b); }
    void copyToHost(tb::Stream s, void* h, const void* d, size_t b) override { be_->copyToHost(s, h, d, b); }
    void copy(tb::Stream s, void* d, const void* x, size_t b) override { be_->copy(s, d, x, b); }
    void copy2d(tb::Stream s, void* d, size_t dp, const void* x, size_t xp, size_t w, size_t rows) override {
        be_->copy2d(s, d, dp, x, xp, w, rows);
    }
    tb::Stream createStream() override { return be_->createStream(); }
    void destroyStream(tb::Stream s) override { be_->destroyStream(s); }
    void synchronize(tb::Stream s) override { be_->synchronize(s); }
    tb::Event createEvent() override { return be_->createEvent(); }
    void destroyEvent(tb::Event e) override { be_->destroyEvent(e); }
    void recordEvent(tb::Event e, tb::Stream s) override { be_->recordEvent(e, s); }
    void waitEvent(tb::Stream s, tb::Event e) override { be_->waitEvent(s, e); }
    void synchronizeEvent(tb::Event e) override { be_->synchronizeEvent(e); }
    double elapsedSeconds(tb::Event a, tb::Event b) override { return be_->elapsedSeconds(a, b); }
    std::unique_ptr<tb::ConvOp> makeConv(const tb::ConvDesc& d) override;
    std::unique_ptr<tb::PoolOp> makePool(const tb::PoolDesc& d) override;
    std::unique_ptr<tb::LrnOp> makeLrn(const tb::LrnDesc& d) override;
    std::unique_ptr<tb::DenseOp> makeDense(const tb::DenseDesc& d) override;
    std::unique_ptr<tb::BatchNormOp> makeBatchNorm(const tb::BatchNormDesc& d) override;
    void fill(tb::Stream s, float* x, float v, size_t n) override {
        onCompute("fill");
        be_->fill(s, x, v, n);
    }
    void scale(tb::Stream s, float* x, float a, size_t n) override {
        onCompute("scale");
        be_->scale(s, x, a, n);
    }
    void axpy(tb::Stream s, float a, const float* x, float* y, size_t n) override {
        onCompute("axpy");
        be_->axpy(s, a, x, y, n);
    }
    void addSumSquares(tb::Stream s, const float* x, size_t n, float a, float* o) override {
        onCompute("addSumSquares");
        be_->addSumSquares(s, x, n, a, o);
    }
    void reluForward(tb::Stream s, const float* x, float* y, size_t n) override {
        onCompute("reluForward");
        be_->reluForward(s, x, y, n);
    }
    void reluBackward(tb::Stream s, const float* y, const float* dy, float* dx, size_t n) override {
        onCompute("reluBackward");
        be_->reluBackward(s, y, dy, dx, n);
    }
    void add(tb::Stream s, const float* a, const float* b, float* y, size_t n, bool relu) override {
        onCompute("add");
        be_->add(s, a, b, y, n, relu);
    }
    void dropoutForward(tb::Stream s, const float* x, float* y, float* m, size_t n, float k, uint64_t seed) override {
        onCompute("dropoutForward");
        be_->dropoutForward(s, x, y, m, n, k, seed);
    }
    void dropoutBackward(tb::Stream s, const float* dy, const float* m, float* dx, size_t n) override {
        onCompute("dropoutBackward");
        be_->dropoutBackward(s, dy, m, dx, n);
    }
    void softmaxCrossEntropy(tb::Stream s, const float* z, const int32_t* y, float* p, int n, int k,
                             float* st) override {
        onCompute("softmaxCrossEntropy");
        be_->softmaxCrossEntropy(s, z, y, p, n, k, st);
    }
    void softmaxCrossEntropyBackward(tb::Stream s, const float* p, const int32_t* y, float* d, int n, int k,
                                     float sc) override {
        onCompute("softmaxCrossEntropyBackward");
        be_->softmaxCrossEntropyBackward(s, p, y, d, n, k, sc);
    }
    void applyUpdate(tb::Stream s, tb::UpdateRule r, const tb::UpdateParams& h, float* p, const float* g, float* m,
                     float* v, uint16_t* rounded, size_t n) override {
        onCompute("applyUpdate");
        be_->applyUpdate(s, r, h, p, g, m, v, rounded, n);
    }
    void emaUpdate(tb::Stream s, float* sh, const float* p, float d, size_t n) override {
        onCompute("emaUpdate");
        be_->emaUpdate(s, sh, p, d, n);
    }
    void roundToBf16(tb::Stream s, const float* x, uint16_t* y, size_t n) override {
        onCompute("roundToBf16");
        be_->roundToBf16(s, x, y, n);
    }
    void widenBf16(tb::Stream s, const uint16_t* x, float* y, size_t n) override {
        onCompute("widenBf16");
        be_->widenBf16(s, x, y, n);
    }

protected:
    tb::Backend& inner() { return *be_; }
    std::shared_ptr<ForwardingBackend> self();

private:
    std::shared_ptr<tb::Backend> be_;
};

// The heavy ops' plans, forwarding too, so that onCompute sees their calls; like every plan they
// hold their backend.
namespace detail {
class ConvFwd final : public tb::ConvOp {
public:
    ConvFwd(std::shared_ptr<ForwardingBackend> b, std::unique_ptr<tb::ConvOp> op) : b_(std::move(b)), op_(std::move(op)) {}
    size_t workspaceBytes() const override { return op_->workspaceBytes(); }
    void forward(tb::Stream s, const float* x, const float* w, const float* bb, float* y, void* ws) override {
        b_->onCompute("conv.forward");
        op_->forward(s, x, w, bb, y, ws);
    }
    void backwardData(tb::Stream s, const float* dy, const float* w, float* dx, void* ws) override {
        b_->onCompute("conv.backwardData");
        op_->backwardData(s, dy, w, dx, ws);
    }
    void backwardWeights(tb::Stream s, const float* x, const float* dy, float* dw, float* db, void* ws) override {
        b_->onCompute("conv.backwardWeights");
        op_->backwardWeights(s, x, dy, dw, db, ws);
    }

private:
    std::shared_ptr<ForwardingBackend> b_;
    std::unique_ptr<tb::ConvOp> op_;
};
template <class Op>
class SavedFwd final : public Op {
public:
    SavedFwd(std::shared_ptr<ForwardingBackend> b, std::unique_ptr<Op> op, const char* name)
        : b_(std::move(b)), op_(std::move(op)), name_(name) {}
    size_t savedBytes() const override { return op_->savedBytes(); }
    void forward(tb::Stream s, const float* x, float* y, void* saved) override {
        b_->onCompute(name_);
        op_->forward(s, x, y, saved);
    }
    void backward(tb::Stream s, const float* x, const float* y, const float* dy, float* dx, const void* saved,
                  float* dxSum) override {
        b_->onCompute(name_);
        op_->backward(s, x, y, dy, dx, saved, dxSum);
    }

private:
    std::shared_ptr<ForwardingBackend> b_;
    std::unique_ptr<Op> op_;
    const char* name_;
};
class DenseFwd final : public tb::DenseOp {
public:
    DenseFwd(std::shared_ptr<ForwardingBackend> b, std::unique_ptr<tb::DenseOp> op) : b_(std::move(b)), op_(std::move(op)) {}
    void forward(tb::Stream s, const float* x, const float* w, const uint16_t* wb, const float* bb, float* y,
                 void* mask) override {
        b_->onCompute("dense.forward");
        op_->forward(s, x, w, wb, bb, y, mask);
    }
    void backwardData(tb::Stream s, const float* dy, const float* w, const uint16_t* wb, float* dx,
                      const void* mask) override {
        b_->onCompute("dense.backwardData");
        op_->backwardData(s, dy, w, wb, dx, mask);
    }
    void backwardWeights(tb::Stream s, const float* x, const float* dy, float* dw, float* db) override {
        b_->onCompute("dense.backwardWeights");
        op_->backwardWeights(s, x, dy, dw, db);
    }

private:
    std::shared_ptr<ForwardingBackend> b_;
    std::unique_ptr<tb::DenseOp> op_;
};
class BatchNormFwd final : public tb::BatchNormOp {
public:
    BatchNormFwd(std::shared_ptr<ForwardingBackend> b, std::unique_ptr<tb::BatchNormOp> op)
        : b_(std::move(b)), op_(std::move(op)) {}
    size_t savedBytes() const override { return op_->savedBytes(); }
    void sums(tb::Stream s, const float* x, const float* shift, float* out, void* saved) override {
        b_->onCompute("batchnorm.sums");
        op_->sums(s, x, shift, out, saved);
    }
    void forward(tb::Stream s, const float* x, const float* sums, const float* shift, double count, const float* g,
                 const float* bb, float* y, float* moving, float decay, void* saved) override {
        b_->onCompute("batchnorm.forward");
        op_->forward(s, x, sums, shift, count, g, bb, y, moving, decay, saved);
    }
    void inference(tb::Stream s, const float* x, const float* moving, const float* g, const float* bb,
                   float* y) override {
        b_->onCompute("batchnorm.inference");
        op_->inference(s, x, moving, g, bb, y);
    }
    void gradientSums(tb::Stream s, const float* x, const float* y, const float* dy, float* dg, float* db,
                      void* saved) override {
        b_->onCompute("batchnorm.gradientSums");
        op_->gradientSums(s, x, y, dy, dg, db, saved);
    }
    void backwardData(tb::Stream s, const float* x, const float* y, const float* dy, const float* g,
                      const float* sdx, const float* sd, double count, float* dx, void* saved) override {
        b_->onCompute("batchnorm.backwardData");
        op_->backwardData(s, x, y, dy, g, sdx, sd, count, dx, saved);
    }

private:
    std::shared_ptr<ForwardingBackend> b_;
    std::unique_ptr<tb::BatchNormOp> op_;
};
}  // namespace detail

inline std::shared_ptr<ForwardingBackend> ForwardingBackend::self() {
    return std::static_pointer_cast<ForwardingBackend>(shared_from_this());
}
inline std::unique_ptr<tb::ConvOp> ForwardingBackend::makeConv(const tb::ConvDesc& d) {
    return std::make_unique<detail::ConvFwd>(self(), be_->makeConv(d));
}
inline std::unique_ptr<tb::PoolOp> ForwardingBackend::makePool(const tb::PoolDesc& d) {
    return std::make_unique<detail::SavedFwd<tb::PoolOp>>(self(), be_->makePool(d), "maxpool");
}
inline std::unique_ptr<tb::LrnOp> ForwardingBackend::makeLrn(const tb::LrnDesc& d) {
    return std::make_unique<detail::SavedFwd<tb::LrnOp>>(self(), be_->makeLrn(d), "lrn");
}
inline std::unique_ptr<tb::DenseOp> ForwardingBackend::makeDense(const tb::DenseDesc& d) {
    return std::make_unique<detail::DenseFwd>(self(), be_->makeDense(d));
}
inline std::unique_ptr<tb::BatchNormOp> ForwardingBackend::makeBatchNorm(const tb::BatchNormDesc& d) {
    return std::make_unique<detail::BatchNormFwd>(self(), be_->makeBatchNorm(d));
}

}  // namespace tbtest
