#include "backend/module_backend.hpp"

#include <cstring>
#include <string>

#include "cuda_module_abi.h"
#include "util/error.hpp"

namespace tb {

void checkModuleCall(int rc, const TbError& err) {
    if (rc != TB_OK) throw Error(std::string(err.message, strnlen(err.message, sizeof err.message)));
}

namespace {

// Calls a table row that reports failure, throwing its message.
#define TB_MODULE_CALL(row, ...)                      \
    do {                                              \
        TbError err_;                                 \
        checkModuleCall(t_.row(__VA_ARGS__, &err_), err_); \
    } while (0)

class ModuleConv final : public ConvOp {
public:
    ModuleConv(std::shared_ptr<Backend> owner, const TbBackendInterface& t, TbConv* op, size_t ws)
        : owner_(std::move(owner)), t_(t), op_(op), ws_(ws) {}
    ~ModuleConv() override { t_.destroyConv(op_); }
    size_t workspaceBytes() const override { return ws_; }
    void forward(Stream s, const float* x, const float* w, const float* b, float* y, void* ws) override {
        TB_MODULE_CALL(convForward, op_, handleOf(s), x, w, b, y, ws);
    }
    void backwardData(Stream s, const float* dy, const float* w, float* dx, void* ws) override {
        TB_MODULE_CALL(convBackwardData, op_, handleOf(s), dy, w, dx, ws);
    }
    void backwardWeights(Stream s, const float* x, const float* dy, float* dw, float* db, void* ws) override {
        TB_MODULE_CALL(convBackwardWeights, op_, handleOf(s), x, dy, dw, db, ws);
    }

private:
    std::shared_ptr<Backend> owner_;  // the plan may not outlive its backend
    const TbBackendInterface& t_;
    TbConv* op_;
    size_t ws_;
};

// PoolOp and LrnOp: the same three calls (savedBytes, forward, backward), each over its own rows.
template <class Base, class Handle, auto Forward, auto Backward, auto Destroy>
class ModuleSavedOp final : public Base {
public:
    ModuleSavedOp(std::shared_ptr<Backend> owner, const TbBackendInterface& t, Handle* op, size_t saved)
        : owner_(std::move(owner)), t_(t), op_(op), saved_(saved) {}
    ~ModuleSavedOp() override { (t_.*Destroy)(op_); }
    size_t savedBytes() const override { return saved_; }
    void forward(Stream s, const float* x, float* y, void* saved) override {
        TbError err;
        checkModuleCall((t_.*Forward)(op_, handleOf(s), x, y, saved, &err), err);
    }
    void backward(Stream s, const float* x, const float* y, const float* dy, float* dx, const void* saved,
                  float* dxSum) override {
        TbError err;
        checkModuleCall((t_.*Backward)(op_, handleOf(s), x, y, dy, dx, saved, dxSum, &err), err);
    }

private:
    std::shared_ptr<Backend> owner_;
    const TbBackendInterface& t_;
    Handle* op_;
    size_t saved_;
};
using ModulePool = ModuleSavedOp<PoolOp, TbPool, &TbBackendInterface::poolForward, &TbBackendInterface::poolBackward,
                                 &TbBackendInterface::destroyPool>;
using ModuleLrn = ModuleSavedOp<LrnOp, TbLrn, &TbBackendInterface::lrnForward, &TbBackendInterface::lrnBackward,
                                &TbBackendInterface::destroyLrn>;

class ModuleDense final : public DenseOp {
public:
    ModuleDense(std::shared_ptr<Backend> owner, const TbBackendInterface& t, TbDense* op)
        : owner_(std::move(owner)), t_(t), op_(op) {}
    ~ModuleDense() override { t_.destroyDense(op_); }
    void forward(Stream s, const float* x, const float* w, const uint16_t* wBf16, const float* b, float* y,
                 void* mask) override {
        TB_MODULE_CALL(denseForward, op_, handleOf(s), x, w, wBf16, b, y, mask);
    }
    void backwardData(Stream s, const float* dy, const float* w, const uint16_t* wBf16, float* dx,
                      const void* mask) override {
        TB_MODULE_CALL(denseBackwardData, op_, handleOf(s), dy, w, wBf16, dx, mask);
    }
    void backwardWeights(Stream s, const float* x, const float* dy, float* dw, float* db) override {
        TB_MODULE_CALL(denseBackwardWeights, op_, handleOf(s), x, dy, dw, db);
    }

private:
    std::shared_ptr<Backend> owner_;
    const TbBackendInterface& t_;
    TbDense* op_;
};

class ModuleBatchNorm final : public BatchNormOp {
public:
    ModuleBatchNorm(std::shared_ptr<Backend> owner, const TbBackendInterface& t, TbBatchNorm* op, size_t saved)
        : owner_(std::move(owner)), t_(t), op_(op), saved_(saved) {}
    ~ModuleBatchNorm() override { t_.destroyBatchNorm(op_); }
    size_t savedBytes() const override { return saved_; }
    void sums(Stream s, const float* x, const float* shift, float* sums, void* saved) override {
        TB_MODULE_CALL(batchNormSums, op_, handleOf(s), x, shift, sums, saved);
    }
    void forward(Stream s, const float* x, const float* sums, const float* shift, double count, const float* gamma,
                 const float* beta, float* y, float* moving, float decay, void* saved) override {
        TB_MODULE_CALL(batchNormForward, op_, handleOf(s), x, sums, shift, count, gamma, beta, y, moving, decay, saved);
    }
    void inference(Stream s, const float* x, const float* moving, const float* gamma, const float* beta,
                   float* y) override {
        TB_MODULE_CALL(batchNormInference, op_, handleOf(s), x, moving, gamma, beta, y);
    }
    void gradientSums(Stream s, const float* x, const float* y, const float* dy, float* dgamma, float* dbeta,
                      void* saved) override {
        TB_MODULE_CALL(batchNormGradientSums, op_, handleOf(s), x, y, dy, dgamma, dbeta, saved);
    }
    void backwardData(Stream s, const float* x, const float* y, const float* dy, const float* gamma,
                      const float* sumDyXhat, const float* sumDy, double count, float* dx, void* saved) override {
        TB_MODULE_CALL(batchNormBackwardData, op_, handleOf(s), x, y, dy, gamma, sumDyXhat, sumDy, count, dx, saved);
    }

private:
    std::shared_ptr<Backend> owner_;
    const TbBackendInterface& t_;
    TbBatchNorm* op_;
    size_t saved_;
};

int ruleOf(UpdateRule r) {
    switch (r) {
    case UpdateRule::Sgd: return TB_RULE_SGD;
    case UpdateRule::Momentum: return TB_RULE_MOMENTUM;
    case UpdateRule::Nesterov: return TB_RULE_NESTEROV;
    case UpdateRule::Adam: return TB_RULE_ADAM;
    }
    return TB_RULE_MOMENTUM;
}

TbUpdateParams paramsOf(const UpdateParams& h) { return {h.lr, h.momentum, h.beta1, h.beta2, h.epsilon, h.step}; }

class ModuleBackend final : public Backend {
public:
    ModuleBackend(const TbBackendInterface& t, TbBackend* be, int index) : t_(t), be_(be), index_(index) {}
    ~ModuleBackend() override { t_.destroy(be_); }

    std::string name() const override {
        char text[512] = {};
        t_.name(be_, text, sizeof text);
        return text;
    }
    Device device() const override { return Device{DeviceType::Cuda, index_}; }
    MemoryInfo memoryInfo() const override {
        TbMemoryInfo m{};
        TB_MODULE_CALL(memoryInfo, be_, &m);
        return {m.freeBytes, m.totalBytes};
    }
    void* allocate(size_t bytes) override {
        void* p = nullptr;
        TB_MODULE_CALL(allocate, be_, bytes, &p);
        return p;
    }
    void deallocate(void* p) override { t_.deallocate(be_, p); }
    void* allocateHost(size_t bytes) override {
        void* p = nullptr;
        TB_MODULE_CALL(allocateHost, be_, bytes, &p);
        return p;
    }
    void deallocateHost(void* p) override { t_.deallocateHost(be_, p); }
    AllocatorStats allocatorStats() const override {
        TbAllocatorStats s{};
        t_.allocatorStats(be_, &s);
        return {s.inUseBytes, s.peakInUseBytes, s.reservedBytes, s.deviceMallocs};
    }
    void copyFromHost(Stream s, void* dst, const void* src, size_t bytes) override { copy(s, dst, src, bytes); }
    void copyToHost(Stream s, void* dst, const void* src, size_t bytes) override { copy(s, dst, src, bytes); }
    void copy(Stream s, void* dst, const void* src, size_t bytes) override {
        TB_MODULE_CALL(copy, be_, handleOf(s), dst, src, bytes);
    }
    void copy2d(Stream s, void* dst, size_t dstPitch, const void* src, size_t srcPitch, size_t width,
                size_t rows) override {
        TB_MODULE_CALL(copy2d, be_, handleOf(s), dst, dstPitch, src, srcPitch, width, rows);
    }

    Stream createStream() override { return makeStream(0); }
    Stream createCopyStream() override { return makeStream(1); }
    void destroyStream(Stream s) override { t_.destroyStream(be_, handleOf(s)); }
    void synchronize(Stream s) override { TB_MODULE_CALL(synchronize, be_, handleOf(s)); }
    Event createEvent() override {
        TbEvent* e = nullptr;
        TB_MODULE_CALL(createEvent, be_, &e);
        return eventOf(e);
    }
    void destroyEvent(Event e) override { t_.destroyEvent(be_, handleOf(e)); }
    void recordEvent(Event e, Stream s) override { TB_MODULE_CALL(recordEvent, be_, handleOf(e), handleOf(s)); }
    void waitEvent(Stream s, Event e) override { TB_MODULE_CALL(waitEvent, be_, handleOf(s), handleOf(e)); }
    void synchronizeEvent(Event e) override { TB_MODULE_CALL(synchronizeEvent, be_, handleOf(e)); }
    double elapsedSeconds(Event a, Event b) override {
        double seconds = 0;
        TB_MODULE_CALL(elapsedSeconds, be_, handleOf(a), handleOf(b), &seconds);
        return seconds;
    }
    bool canCapture() const override { return t_.canCapture(be_) != 0; }
    void beginCapture(Stream s) override { TB_MODULE_CALL(beginCapture, be_, handleOf(s)); }
    Graph endCapture(Stream s) override {
        TbGraph* g = nullptr;
        TB_MODULE_CALL(endCapture, be_, handleOf(s), &g);
        return graphOf(g);
    }
    void launchGraph(Graph g, Stream s, const UpdateParams* update) override {
        const TbUpdateParams u = update ? paramsOf(*update) : TbUpdateParams{};
        TB_MODULE_CALL(launchGraph, be_, handleOf(g), handleOf(s), update ? &u : nullptr);
    }
    void destroyGraph(Graph g) override { t_.destroyGraph(be_, handleOf(g)); }
    void abortCapture(Stream s) noexcept override { t_.abortCapture(be_, handleOf(s)); }

    std::unique_ptr<ConvOp> makeConv(const ConvDesc& d) override {
        const TbConvDesc c{d.n,       d.c,       d.h,      d.w,       d.k,         d.r,       d.s,
                           d.strideH, d.strideW, d.padTop, d.padLeft, d.padBottom, d.padRight, d.bias ? 1 : 0,
                           d.biasGradient ? 1 : 0, d.inputGradient ? 1 : 0};
        TbConv* op = nullptr;
        size_t ws = 0;
        TB_MODULE_CALL(makeConv, be_, &c, &op, &ws);
        return std::make_unique<ModuleConv>(shared_from_this(), t_, op, ws);
    }
    std::unique_ptr<PoolOp> makePool(const PoolDesc& d) override {
        const TbPoolDesc p{d.n,       d.c,       d.h,      d.w,       d.r,         d.s,           d.strideH,
                           d.strideW, d.padTop, d.padLeft, d.padBottom, d.padRight, int(d.mode), d.relu ? 1 : 0,
                           d.sumDx ? 1 : 0};
        TbPool* op = nullptr;
        size_t saved = 0;
        TB_MODULE_CALL(makePool, be_, &p, &op, &saved);
        return std::make_unique<ModulePool>(shared_from_this(), t_, op, saved);
    }
    std::unique_ptr<LrnOp> makeLrn(const LrnDesc& d) override {
        const TbLrnDesc l{d.n, d.c, d.h, d.w, d.depthRadius, d.bias, d.alpha, d.beta, d.relu ? 1 : 0, d.sumDx ? 1 : 0};
        TbLrn* op = nullptr;
        size_t saved = 0;
        TB_MODULE_CALL(makeLrn, be_, &l, &op, &saved);
        return std::make_unique<ModuleLrn>(shared_from_this(), t_, op, saved);
    }
    std::unique_ptr<DenseOp> makeDense(const DenseDesc& d) override {
        const TbDenseDesc dd{d.n, d.in, d.out, d.relu ? 1 : 0, d.reluMaskOut ? 1 : 0, d.reluMaskIn ? 1 : 0};
        TbDense* op = nullptr;
        TB_MODULE_CALL(makeDense, be_, &dd, &op);
        return std::make_unique<ModuleDense>(shared_from_this(), t_, op);
    }
    std::unique_ptr<BatchNormOp> makeBatchNorm(const BatchNormDesc& d) override {
        const TbBatchNormDesc b{d.rows, d.c, d.epsilon, d.relu ? 1 : 0};
        TbBatchNorm* op = nullptr;
        size_t saved = 0;
        TB_MODULE_CALL(makeBatchNorm, be_, &b, &op, &saved);
        return std::make_unique<ModuleBatchNorm>(shared_from_this(), t_, op, saved);
    }

    void fill(Stream s, float* x, float v, size_t n) override { TB_MODULE_CALL(fill, be_, handleOf(s), x, v, n); }
    void scale(Stream s, float* x, float a, size_t n) override { TB_MODULE_CALL(scale, be_, handleOf(s), x, a, n); }
    void axpy(Stream s, float a, const float* x, float* y, size_t n) override {
        TB_MODULE_CALL(axpy, be_, handleOf(s), a, x, y, n);
    }
    void addSumSquares(Stream s, const float* x, size_t n, float a, float* out) override {
        TB_MODULE_CALL(addSumSquares, be_, handleOf(s), x, n, a, out);
    }
    void reluForward(Stream s, const float* x, float* y, size_t n) override {
        TB_MODULE_CALL(reluForward, be_, handleOf(s), x, y, n);
    }
    void reluBackward(Stream s, const float* y, const float* dy, float* dx, size_t n) override {
        TB_MODULE_CALL(reluBackward, be_, handleOf(s), y, dy, dx, n);
    }
    void add(Stream s, const float* a, const float* b, float* y, size_t n, bool relu) override {
        TB_MODULE_CALL(add, be_, handleOf(s), a, b, y, n, relu ? 1 : 0);
    }
    void dropoutForward(Stream s, const float* x, float* y, float* mask, size_t n, float keep, uint64_t seed) override {
        TB_MODULE_CALL(dropoutForward, be_, handleOf(s), x, y, mask, n, keep, seed);
    }
    void dropoutBackward(Stream s, const float* dy, const float* mask, float* dx, size_t n) override {
        TB_MODULE_CALL(dropoutBackward, be_, handleOf(s), dy, mask, dx, n);
    }
    void softmaxCrossEntropy(Stream s, const float* logits, const int32_t* labels, float* probs, int n, int k,
                             float* stats) override {
        TB_MODULE_CALL(softmaxCrossEntropy, be_, handleOf(s), logits, labels, probs, n, k, stats);
    }
    void softmaxCrossEntropyBackward(Stream s, const float* probs, const int32_t* labels, float* dlogits, int n, int k,
                                     float scale) override {
        TB_MODULE_CALL(softmaxCrossEntropyBackward, be_, handleOf(s), probs, labels, dlogits, n, k, scale);
    }
    void applyUpdate(Stream s, UpdateRule rule, const UpdateParams& h, float* p, const float* g, float* m, float* v,
                     uint16_t* rounded, size_t n) override {
        const TbUpdateParams u = paramsOf(h);
        TB_MODULE_CALL(applyUpdate, be_, handleOf(s), ruleOf(rule), &u, p, g, m, v, rounded, n);
    }
    void emaUpdate(Stream s, float* shadow, const float* p, float decay, size_t n) override {
        TB_MODULE_CALL(emaUpdate, be_, handleOf(s), shadow, p, decay, n);
    }
    void roundToBf16(Stream s, const float* x, uint16_t* y, size_t n) override {
        TB_MODULE_CALL(roundToBf16, be_, handleOf(s), x, y, n);
    }
    void widenBf16(Stream s, const uint16_t* x, float* y, size_t n) override {
        TB_MODULE_CALL(widenBf16, be_, handleOf(s), x, y, n);
    }

private:
    Stream makeStream(int copiesOnly) {
        TbStream* s = nullptr;
        TB_MODULE_CALL(createStream, be_, copiesOnly, &s);
        return streamOf(s);
    }

    const TbBackendInterface& t_;
    TbBackend* be_;
    int index_;
};

#undef TB_MODULE_CALL

}  // namespace

std::shared_ptr<Backend> wrapModuleBackend(const TbCudaModule& m, TbBackend* handle, int index) {
    return std::make_shared<ModuleBackend>(*m.backend, handle, index);
}

std::string moduleAbiProblem(const TbCudaModule& m, const std::string& path) {
    static const TbCudaAbi mine = TB_CUDA_ABI;
    const TbCudaAbi& theirs = m.abi;
    const size_t n = sizeof mine.headerSha256;
    const std::string theirHash(theirs.headerSha256, strnlen(theirs.headerSha256, n));
    if (theirHash != mine.headerSha256)
        return path + " was built from another backend/cuda_module.h (SHA-256 " + theirHash.substr(0, 12) +
               "..., this program's " + std::string(mine.headerSha256).substr(0, 12) + "...); rebuild the module";
    const uint32_t a[] = {theirs.moduleBytes,  theirs.backendInterfaceBytes, theirs.errorBytes,
                          theirs.gpuInfoBytes, theirs.convDescBytes,         theirs.updateParamsBytes};
    const uint32_t b[] = {mine.moduleBytes,  mine.backendInterfaceBytes, mine.errorBytes,
                          mine.gpuInfoBytes, mine.convDescBytes,         mine.updateParamsBytes};
    if (std::memcmp(a, b, sizeof a) != 0)
        return path + " lays out backend/cuda_module.h's structs in other sizes than this program (another compiler "
                      "or its options); rebuild the module with this program";
    return {};
}

}  // namespace tb
