// tst_backend_ops: the cross-backend op check (backend/backend_check.hpp) as a test.
//   tst_backend_ops cpu   the CPU backend passes every case; and a backend with one planted
//                         fault (ReLU that lets negatives through) is caught, so the check can fail
//   tst_backend_ops gpu   every GPU's backend passes every case; skipped (77) without a GPU
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "backend/backend_check.hpp"
#include "backend/registry.hpp"
#include "plain_check.hpp"

namespace {

// Reports every failing case; returns how many there were.
int failedCases(tb::Backend& be) {
    int failed = 0;
    const auto results = tb::checkBackendOps(be);
    for (const tb::OpCheck& c : results)
        if (!c.passed) {
            ++failed;
            std::fprintf(stderr, "  %s: %s [%s] error %g > %g %s\n", be.name().c_str(), c.op.c_str(), c.shape.c_str(),
                         c.error, c.tolerance, c.failure.c_str());
        }
    std::printf("%s: %zu cases, %d failed\n", be.name().c_str(), results.size(), failed);
    return failed;
}

// The CPU backend with one planted fault.
class LeakyRelu final : public tb::Backend {
public:
    LeakyRelu() : be_(tb::makeCpuBackend(1)) {}
    std::string name() const override { return "cpu with a planted ReLU fault"; }
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
    tb::Stream createStream() override { return be_->createStream(); }
    void destroyStream(tb::Stream s) override { be_->destroyStream(s); }
    void synchronize(tb::Stream s) override { be_->synchronize(s); }
    tb::Event createEvent() override { return be_->createEvent(); }
    void destroyEvent(tb::Event e) override { be_->destroyEvent(e); }
    void recordEvent(tb::Event e, tb::Stream s) override { be_->recordEvent(e, s); }
    void waitEvent(tb::Stream s, tb::Event e) override { be_->waitEvent(s, e); }
    double elapsedSeconds(tb::Event a, tb::Event b) override { return be_->elapsedSeconds(a, b); }
    std::unique_ptr<tb::ConvOp> makeConv(const tb::ConvDesc& d) override { return be_->makeConv(d); }
    std::unique_ptr<tb::PoolOp> makeMaxPool(const tb::PoolDesc& d) override { return be_->makeMaxPool(d); }
    std::unique_ptr<tb::LrnOp> makeLrn(const tb::LrnDesc& d) override { return be_->makeLrn(d); }
    std::unique_ptr<tb::DenseOp> makeDense(const tb::DenseDesc& d) override { return be_->makeDense(d); }
    void fill(tb::Stream s, float* x, float v, size_t n) override { be_->fill(s, x, v, n); }
    void scale(tb::Stream s, float* x, float a, size_t n) override { be_->scale(s, x, a, n); }
    void axpy(tb::Stream s, float a, const float* x, float* y, size_t n) override { be_->axpy(s, a, x, y, n); }
    void addSumSquares(tb::Stream s, const float* x, size_t n, float a, float* o) override {
        be_->addSumSquares(s, x, n, a, o);
    }
    void reluForward(tb::Stream s, const float* x, float* y, size_t n) override { be_->copy(s, y, x, n * 4); }
    void reluBackward(tb::Stream s, const float* y, const float* dy, float* dx, size_t n) override {
        be_->reluBackward(s, y, dy, dx, n);
    }
    void dropoutForward(tb::Stream s, const float* x, float* y, float* m, size_t n, float k, uint64_t seed) override {
        be_->dropoutForward(s, x, y, m, n, k, seed);
    }
    void dropoutBackward(tb::Stream s, const float* dy, const float* m, float* dx, size_t n) override {
        be_->dropoutBackward(s, dy, m, dx, n);
    }
    void softmaxCrossEntropy(tb::Stream s, const float* z, const int32_t* y, float* p, int n, int k,
                             float* st) override {
        be_->softmaxCrossEntropy(s, z, y, p, n, k, st);
    }
    void softmaxCrossEntropyBackward(tb::Stream s, const float* p, const int32_t* y, float* d, int n, int k,
                                     float sc) override {
        be_->softmaxCrossEntropyBackward(s, p, y, d, n, k, sc);
    }
    void applyUpdate(tb::Stream s, tb::UpdateRule r, const tb::UpdateParams& h, float* p, const float* g, float* m,
                     float* v, size_t n) override {
        be_->applyUpdate(s, r, h, p, g, m, v, n);
    }
    void emaUpdate(tb::Stream s, float* sh, const float* p, float d, size_t n) override { be_->emaUpdate(s, sh, p, d, n); }

private:
    std::unique_ptr<tb::Backend> be_;
};

}  // namespace

int main(int argc, char** argv) {
    const std::string which = argc > 1 ? argv[1] : "cpu";
    if (which == "cpu") {
        auto cpu = tb::makeCpuBackend(0);
        CHECK(failedCases(*cpu) == 0, "the CPU backend must pass every case");
        LeakyRelu faulty;
        const int caught = failedCases(faulty);
        CHECK(caught >= 1, "the planted ReLU fault went unnoticed");
        return tbcheck::exitStatus();
    }
    if (which != "gpu") {
        std::fprintf(stderr, "usage: %s cpu|gpu\n", argv[0]);
        return 2;
    }
    const tb::GpuRuntime& rt = tb::gpuRuntime();
    if (!rt.available) return tbcheck::skip(rt.whyNot.c_str());
    for (const tb::GpuInfo& g : rt.gpus) {
        auto be = tb::makeBackend(tb::Device{tb::DeviceType::Cuda, g.index});
        CHECK(failedCases(*be) == 0, "gpu:%d must pass every case", g.index);
    }
    return tbcheck::exitStatus();
}
