// tst_backend_ops: the cross-backend op check (backend/backend_check.hpp) as a test.
//   tst_backend_ops cpu   the CPU backend passes every case; and a backend with one planted
//                         fault (ReLU that lets negatives through) is caught, so the check can fail;
//                         bf16 matrix work passes within its tolerance, and rounds (where the
//                         processor has bf16)
//   tst_backend_ops bf16-refused  (ONEDNN_MAX_CPU_ISA=AVX2) bf16 refused in one sentence
//   tst_backend_ops gpu   every GPU's backend passes every case, in fp32 and in bf16 (within its
//                         tolerance, and rounded); skipped (77) without a GPU
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>

#include "backend/backend_check.hpp"
#include "backend/registry.hpp"
#include "tensor/bf16.hpp"
#include "forwarding_backend.hpp"
#include "plain_check.hpp"

namespace {

// Reports every failing case; returns how many there were (`ops`: the failing ops' names).
int failedCases(tb::Backend& be, std::set<std::string>* ops = nullptr) {
    int failed = 0;
    const auto results = tb::checkBackendOps(be);
    for (const tb::OpCheck& c : results)
        if (!c.passed) {
            ++failed;
            if (ops) ops->insert(c.op);
            std::fprintf(stderr, "  %s: %s [%s] error %g > %g %s\n", be.name().c_str(), c.op.c_str(), c.shape.c_str(),
                         c.error, c.tolerance, c.failure.c_str());
        }
    std::printf("%s: %zu cases, %d failed\n", be.name().c_str(), results.size(), failed);
    return failed;
}

// The CPU backend with one planted fault: ReLU lets negatives through.
class LeakyRelu final : public tbtest::ForwardingBackend {
public:
    LeakyRelu() : ForwardingBackend(tb::makeCpuBackend(1)) {}
    std::string name() const override { return "cpu with a planted ReLU fault"; }
    void reluForward(tb::Stream s, const float* x, float* y, size_t n) override { inner().copy(s, y, x, n * 4); }
};

// The CPU backend with a planted device fault as CUDA reports one: the ReLU's kernel faults, and
// every synchronisation from then on throws (a sticky error).
class StickyFault final : public tbtest::ForwardingBackend {
public:
    StickyFault() : ForwardingBackend(tb::makeCpuBackend(1)) {}
    std::string name() const override { return "cpu with a planted sticky device fault"; }
    void reluForward(tb::Stream s, const float* x, float* y, size_t n) override {
        faulted_ = true;
        ForwardingBackend::reluForward(s, x, y, n);
    }
    void synchronize(tb::Stream s) override {
        if (faulted_) throw tb::Error("planted: an illegal memory access was encountered");
        ForwardingBackend::synchronize(s);
    }

private:
    bool faulted_ = false;
};

// A fault that every later synchronisation reports fails its case and those after it, and the
// check returns them: it used to throw again from the case's clean-up, which ended the process
// with no case named (seen failing: std::terminate).
void aStickyFaultFailsItsCaseAndTheCheckReturns() {
    const auto be = std::make_shared<StickyFault>();  // (plans hold their backend)
    const auto results = tb::checkBackendOps(*be);
    size_t first = results.size();
    for (size_t i = 0; i < results.size() && first == results.size(); ++i)
        if (!results[i].passed) first = i;
    CHECK(first < results.size() && results[first].op == "relu.forward+backward" &&
              results[first].failure.find("illegal memory access") != std::string::npos,
          "the first failing case is the ReLU's, with the fault's message");
    size_t after = 0;
    for (size_t i = first; i < results.size(); ++i) after += results[i].passed ? 0 : 1;
    CHECK(first > 0 && after == results.size() - first, "the cases before it pass (%zu), every one from it fails (%zu of %zu)",
          first, after, results.size() - first);
    std::printf("%s: the first of %zu failing cases is %s (%s)\n", be->name().c_str(), after,
                first < results.size() ? results[first].op.c_str() : "none",
                first < results.size() ? results[first].failure.c_str() : "");
}

// Notes when it is destroyed.
class Watched final : public tbtest::ForwardingBackend {
public:
    explicit Watched(bool* destroyed) : ForwardingBackend(tb::makeCpuBackend(1)), destroyed_(destroyed) {}
    ~Watched() override { *destroyed_ = true; }

private:
    bool* destroyed_;
};

// Tensors and op plans hold their backend: dropping the last other reference to it leaves it
// alive until they are gone.
void tensorsAndPlansKeepTheirBackend() {
    bool destroyed = false;
    std::shared_ptr<tb::Backend> be = std::make_shared<Watched>(&destroyed);
    tb::Tensor t = be->empty(tb::Shape{16});
    std::unique_ptr<tb::DenseOp> plan = be->makeDense({2, 4, 2});
    be.reset();
    CHECK(!destroyed, "the backend went while a tensor and a plan still used it");
    t = tb::Tensor();
    CHECK(!destroyed, "the backend went while a plan still used it");
    plan.reset();
    CHECK(destroyed, "the backend outlived everything that used it");
    // And the CPU backend reports the device it stands for.
    CHECK(tb::makeCpuBackend(1, 3)->device() == (tb::Device{tb::DeviceType::Cpu, 3}), "cpu:3 does not say cpu:3");
}

// Bf16 matrix work on `bf16` (a CPU backend where the processor has it, every GPU): every case
// within the bf16 tolerance, and the convolutions and inner products really rounded (they fail
// fp32's), so bf16 is not fp32 named so.
void bf16MatrixWork(tb::Backend& bf16) {
    std::set<std::string> rounded;  // the ops over fp32's tolerance, from the same run's errors
    for (const tb::OpCheck& c : tb::checkBackendOps(bf16, tb::kBf16MatmulTolerance)) {
        CHECK(c.passed, "%s: %s [%s] error %g > %g %s", bf16.name().c_str(), c.op.c_str(), c.shape.c_str(), c.error,
              c.tolerance, c.failure.c_str());
        if (c.error > tb::kFp32MatmulTolerance) rounded.insert(c.op);
    }
    CHECK(rounded == (std::set<std::string>{"conv.forward", "conv.backward_data", "conv.backward_weights",
                                            "dense.forward", "dense.backward", "dense.unaligned",
                                            "dense.bf16_weights_given", "dense.relu_mask", "dense.relu_mask_at_zero"}),
          "%s: %zu ops outside fp32's tolerance, not the 9 matrix ops", bf16.name().c_str(), rounded.size());
    std::printf("%s: bf16 cases within %g\n", bf16.name().c_str(), tb::kBf16MatmulTolerance);
}

// A bf16 inner product given the weights the update rounded (wBf16) reads them, not w: with w
// all NaN it gives what it gives rounding a true w itself.
void readsTheUpdatesBf16Weights(tb::Backend& bf16) {
    const tb::DenseDesc d{4, 40, 3};
    const size_t xs = size_t(d.n) * d.in, ws = size_t(d.out) * d.in, ys = size_t(d.n) * d.out;
    std::vector<float> x(xs), w(ws), b(size_t(d.out), 0.5f), dy(ys), nan(ws, std::nanf(""));
    for (size_t i = 0; i < xs; ++i) x[i] = float(i % 7) * 0.25f - 0.7f;
    for (size_t i = 0; i < ws; ++i) w[i] = float(i % 5) * 0.3f - 0.55f;
    for (size_t i = 0; i < ys; ++i) dy[i] = float(i % 3) * 0.5f - 0.4f;
    std::vector<uint16_t> rounded(ws);
    tb::roundToBf16(w.data(), rounded.data(), ws);
    const tb::Stream s = bf16.createStream();
    std::vector<void*> owned;
    auto up = [&](const void* p, size_t bytes) {
        owned.push_back(bf16.allocate(bytes));
        bf16.copyFromHost(s, owned.back(), p, bytes);
        return owned.back();
    };
    auto* xd = static_cast<float*>(up(x.data(), xs * 4));
    auto* bd = static_cast<float*>(up(b.data(), b.size() * 4));
    auto* dyd = static_cast<float*>(up(dy.data(), ys * 4));
    auto* wd = static_cast<float*>(up(w.data(), ws * 4));
    auto* nand = static_cast<float*>(up(nan.data(), ws * 4));
    auto* wbd = static_cast<uint16_t*>(up(rounded.data(), ws * 2));
    auto run = [&](const float* weights, const uint16_t* given) {
        auto op = bf16.makeDense(d);
        auto* y = static_cast<float*>(bf16.allocate(ys * 4));
        auto* dx = static_cast<float*>(bf16.allocate(xs * 4));
        owned.push_back(y);
        owned.push_back(dx);
        op->forward(s, xd, weights, given, bd, y, nullptr);
        op->backwardData(s, dyd, weights, given, dx, nullptr);
        std::vector<float> out(ys + xs);
        bf16.copyToHost(s, out.data(), y, ys * 4);
        bf16.copyToHost(s, out.data() + ys, dx, xs * 4);
        bf16.synchronize(s);
        return out;
    };
    const std::vector<float> itself = run(wd, nullptr), given = run(nand, wbd);
    for (size_t i = 0; i < itself.size(); ++i)
        CHECK(std::isfinite(given[i]) && given[i] == itself[i], "%s: output %zu is %g with the update's bf16 weights "
              "and a poisoned w, %g rounding w itself", bf16.name().c_str(), i, given[i], itself[i]);
    for (void* p : owned) bf16.deallocate(p);
    bf16.destroyStream(s);
}

// Run with ONEDNN_MAX_CPU_ISA=AVX2 (tests/gpu/CMakeLists.txt): bf16 is refused in one sentence
// naming what is missing, never emulated.
void bf16Refused() {
    try {
        tb::makeCpuBackend(1, 0, tb::MatmulPrecision::Bf16);
        CHECK(false, "bf16 was not refused with oneDNN held to AVX2");
    } catch (const tb::Error& e) {
        const std::string what = e.what();
        std::printf("refused: %s\n", what.c_str());
        CHECK(what.find("--precision bf16: this processor has no AVX512-BF16 or AMX") == 0 &&
                  what.find("avx2") != std::string::npos,
              "the refusal does not say what is missing: %s", what.c_str());
    }
}

}  // namespace

int main(int argc, char** argv) {
    const std::string which = argc > 1 ? argv[1] : "cpu";
    if (which == "cpu") {
        tensorsAndPlansKeepTheirBackend();
        auto cpu = tb::makeCpuBackend(0);
        CHECK(failedCases(*cpu) == 0, "the CPU backend must pass every case");
        std::set<std::string> failing;
        failedCases(*std::make_shared<LeakyRelu>(), &failing);
        CHECK(failing == std::set<std::string>{"relu.forward+backward"}, "the planted ReLU fault was not caught, or "
              "other ops failed too (%zu ops failed)", failing.size());
        aStickyFaultFailsItsCaseAndTheCheckReturns();
        if (const std::string why = tb::cpuBf16Missing(); !why.empty()) std::printf("bf16 not checked: %s\n", why.c_str());
        else {
            auto bf16 = tb::makeCpuBackend(0, 0, tb::MatmulPrecision::Bf16);
            bf16MatrixWork(*bf16);
            readsTheUpdatesBf16Weights(*bf16);
        }
        return tbcheck::exitStatus();
    }
    if (which == "bf16-refused") {
        bf16Refused();
        return tbcheck::exitStatus();
    }
    if (which != "gpu") {
        std::fprintf(stderr, "usage: %s cpu|gpu|bf16-refused\n", argv[0]);
        return 2;
    }
    const tb::GpuRuntime& rt = tb::gpuRuntime();
    if (!rt.available) return tbcheck::skip(rt.whyNot.c_str());
    for (const tb::GpuInfo& g : rt.gpus) {
        auto be = tb::makeBackend(tb::Device{tb::DeviceType::Cuda, g.index});
        CHECK(failedCases(*be) == 0, "gpu:%d must pass every case", g.index);
        tb::BackendOptions o;
        o.precision = tb::MatmulPrecision::Bf16;
        auto bf16 = tb::makeBackend(tb::Device{tb::DeviceType::Cuda, g.index}, o);
        bf16MatrixWork(*bf16);
        readsTheUpdatesBf16Weights(*bf16);
    }
    return tbcheck::exitStatus();
}
