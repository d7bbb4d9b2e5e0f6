// Batch normalisation on the CPU. oneDNN 2.6 computes a batch's statistics and normalises in one
// primitive, which leaves no point at which synchronised batch norm can add the other towers'
// sums, so the split form of backend.hpp runs as our own loops (as PyTorch's SyncBatchNorm runs
// kernels of its own). Each is memory bound: one pass reads x for the sums, one normalises; one
// reads x and dy for the gradient sums, one writes dx. The rows are split over the team, each
// thread summing its rows in double, and the threads' sums are added in thread order, so a plan
// gives the same bits every call. A ReLU after the batch norm runs in its passes (fused). The per-channel arithmetic is elementwise_math.hpp's, shared
// with the CUDA kernels.
#include "backend/cpu/cpu_batch_norm.hpp"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/channel_sums.hpp"
#include "backend/elementwise_math.hpp"
#include "util/cpu_clones.hpp"

namespace tb {

namespace {

// The loops below sum each block of kBlock rows in float (vectorised at full width) and add the
// block's sums into doubles: fp32 error over 32 rows, double over the batch.
constexpr int64_t kBlock = 32;

// a (c) += sum over rows [b, e) of x - shift, q (c) += of its square (x: rows of c floats).
TB_CPU_CLONES void sumRows(const float* x, const float* shift, int c, int64_t b, int64_t e, double* a, double* q,
                           float* fa, float* fq) {
    for (int64_t r0 = b; r0 < e; r0 += kBlock) {
        for (int j = 0; j < c; ++j) fa[j] = fq[j] = 0.f;
        for (int64_t r = r0; r < std::min(e, r0 + kBlock); ++r) {
            const float* xr = x + r * c;
#pragma omp simd
            for (int j = 0; j < c; ++j) {
                const float v = xr[j] - shift[j];
                fa[j] += v;
                fq[j] += v * v;
            }
        }
        for (int j = 0; j < c; ++j) a[j] += fa[j], q[j] += fq[j];
    }
}

// a (c) += sum of dy, q (c) += sum of dy (x - mean) over rows [b, e); with y (a fused ReLU's
// output), dy only where y > 0.
template <bool Relu>
[[gnu::always_inline]] inline void gradientRowsOf(const float* x, const float* y, const float* dy, const float* mean,
                                                  int c, int64_t b, int64_t e, double* a, double* q, float* fa,
                                                  float* fq) {
    for (int64_t r0 = b; r0 < e; r0 += kBlock) {
        for (int j = 0; j < c; ++j) fa[j] = fq[j] = 0.f;
        for (int64_t r = r0; r < std::min(e, r0 + kBlock); ++r) {
            const float* xr = x + r * c;
            const float* gr = dy + r * c;
            const float* yr = Relu ? y + r * c : nullptr;
#pragma omp simd
            for (int j = 0; j < c; ++j) {
                const float g = Relu ? ew::reluGradient(yr[j], gr[j]) : gr[j];
                fa[j] += g;
                fq[j] += g * (xr[j] - mean[j]);
            }
        }
        for (int j = 0; j < c; ++j) a[j] += fa[j], q[j] += fq[j];
    }
}
TB_CPU_CLONES void gradientRows(const float* x, const float* y, const float* dy, const float* mean, int c, int64_t b,
                                int64_t e, double* a, double* q, float* fa, float* fq) {
    if (y) gradientRowsOf<true>(x, y, dy, mean, c, b, e, a, q, fa, fq);
    else gradientRowsOf<false>(x, y, dy, mean, c, b, e, a, q, fa, fq);
}

// y = (x - mean) scale + beta per channel over rows [b, e) (ew::batchNormApply), relu'd where asked.
TB_CPU_CLONES void normaliseRows(const float* x, const float* mean, const float* scale, const float* beta, float* y,
                                 int c, int64_t b, int64_t e, bool relu) {
    for (int64_t r = b; r < e; ++r) {
        const float* xr = x + r * c;
        float* yr = y + r * c;
        if (relu) {
#pragma omp simd
            for (int j = 0; j < c; ++j) yr[j] = std::max(ew::batchNormApply(xr[j], mean[j], scale[j], beta[j]), 0.f);
        } else {
#pragma omp simd
            for (int j = 0; j < c; ++j) yr[j] = ew::batchNormApply(xr[j], mean[j], scale[j], beta[j]);
        }
    }
}

// dx = k1 (dy - meanDy) - k2 (x - mean) per channel over rows [b, e) (ew::batchNormGradient), dy
// masked by a fused ReLU's output y where given.
TB_CPU_CLONES void gradientApplyRows(const float* x, const float* y, const float* dy, const float* mean,
                                     const float* k1, const float* meanDy, const float* k2, float* dx, int c,
                                     int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
        const float* xr = x + r * c;
        const float* gr = dy + r * c;
        float* dr = dx + r * c;
        if (y) {
            const float* yr = y + r * c;
#pragma omp simd
            for (int j = 0; j < c; ++j)
                dr[j] = ew::batchNormGradient(xr[j], ew::reluGradient(yr[j], gr[j]), mean[j], k1[j], meanDy[j], k2[j]);
        } else {
#pragma omp simd
            for (int j = 0; j < c; ++j) dr[j] = ew::batchNormGradient(xr[j], gr[j], mean[j], k1[j], meanDy[j], k2[j]);
        }
    }
}

class CpuBatchNorm final : public BatchNormOp {
public:
    CpuBatchNorm(const BatchNormDesc& d, int threads, std::shared_ptr<Backend> owner)
        : d_(d), threads_(threads), owner_(std::move(owner)) {}

    // (4, c): the batch's mean and 1/sqrt(var + eps), then two per-channel coefficients of the
    // pass that follows (forward: the scale; backward: k1 and k2 of the input gradient).
    size_t savedBytes() const override { return 4 * size_t(d_.c) * sizeof(float); }

    void sums(Stream, const float* x, const float* shift, float* out, void*) override {
        const std::vector<float> zero(shift ? 0 : size_t(d_.c), 0.f);
        const float* k = shift ? shift : zero.data();
        const std::vector<double> s =
            reduceRows([&](int64_t b, int64_t e, double* pa, double* pq, float* fa, float* fq) {
                sumRows(x, k, d_.c, b, e, pa, pq, fa, fq);
            });
        for (size_t j = 0; j < s.size(); ++j) out[j] = float(s[j]);
    }

    void forward(Stream, const float* x, const float* sums, const float* shift, double count, const float* gamma,
                 const float* beta, float* y, float* moving, float decay, void* saved) override {
        const int c = d_.c;
        float* mean = static_cast<float*>(saved);
        float *invStd = mean + c, *scale = mean + 2 * c;
        for (int j = 0; j < c; ++j) {
            float unbiased = 0;
            ew::batchNormStatistics(sums[j], sums[c + j], shift ? shift[j] : 0.f, count, d_.epsilon, mean[j],
                                    invStd[j], unbiased);
            scale[j] = gamma[j] * invStd[j];
            if (moving) {  // after the shift was read: it may be the moving mean itself
                moving[j] = ew::emaStep(moving[j], mean[j], decay);
                moving[c + j] = ew::emaStep(moving[c + j], unbiased, decay);
            }
        }
        overRows([&](int64_t b, int64_t e) { normaliseRows(x, mean, scale, beta, y, c, b, e, d_.relu); });
    }

    void inference(Stream, const float* x, const float* moving, const float* gamma, const float* beta,
                   float* y) override {
        const int c = d_.c;
        std::vector<float> scale(static_cast<size_t>(c));
        for (int j = 0; j < c; ++j) scale[size_t(j)] = ew::batchNormInferenceScale(moving[c + j], d_.epsilon, gamma[j]);
        overRows([&](int64_t b, int64_t e) { normaliseRows(x, moving, scale.data(), beta, y, c, b, e, d_.relu); });
    }

    void gradientSums(Stream, const float* x, const float* y, const float* dy, float* dgamma, float* dbeta,
                      void* saved) override {
        const float* mean = static_cast<const float*>(saved);
        const float* invStd = mean + d_.c;
        const float* relu = d_.relu ? y : nullptr;
        const std::vector<double> s =
            reduceRows([&](int64_t b, int64_t e, double* pa, double* pq, float* fa, float* fq) {
                gradientRows(x, relu, dy, mean, d_.c, b, e, pa, pq, fa, fq);
            });
        for (int j = 0; j < d_.c; ++j) {
            dbeta[j] = float(s[size_t(j)]);
            dgamma[j] = float(s[size_t(d_.c + j)] * invStd[j]);
        }
    }

    void backwardData(Stream, const float* x, const float* y, const float* dy, const float* gamma,
                      const float* sumDyXhat, const float* sumDy, double count, float* dx, void* saved) override {
        const int c = d_.c;
        float* mean = static_cast<float*>(saved);
        float *invStd = mean + c, *k1 = mean + 2 * c, *k2 = mean + 3 * c;
        std::vector<float> meanDy(static_cast<size_t>(c));
        for (int j = 0; j < c; ++j)
            ew::batchNormGradientCoefficients(gamma[j], invStd[j], sumDy[j], sumDyXhat[j], count, k1[j],
                                              meanDy[size_t(j)], k2[j]);
        const float* relu = d_.relu ? y : nullptr;
        overRows([&](int64_t b, int64_t e) { gradientApplyRows(x, relu, dy, mean, k1, meanDy.data(), k2, dx, c, b, e); });
    }

private:
    bool parallel() const { return d_.rows * d_.c > kParallelMin; }
    void useTeam() const {
        if (omp_get_max_threads() != threads_) omp_set_num_threads(threads_);
    }
    // f(begin, end) over the rows, split evenly over the team.
    template <class F>
    void overRows(F&& f) const {
        useTeam();
        const int64_t n = d_.rows;
#pragma omp parallel if (parallel())
        {
            const int64_t t = omp_get_thread_num(), k = omp_get_num_threads();
            f(n * t / k, n * (t + 1) / k);
        }
    }
    // (a, q) (2c: c each) := the sums f adds over every row, f(begin, end, a, q, fa, fq) once per
    // thread with fa, fq (c each) as float scratch for its blocks (sumOverTeam).
    template <class F>
    std::vector<double> reduceRows(F&& f) const {
        useTeam();
        const size_t c = size_t(d_.c);
        const int team = parallel() ? threads_ : 1;
        return sumOverTeam(d_.rows, 2 * c, team, [&](int64_t b, int64_t e, double* sums, float* block) {
            f(b, e, sums, sums + c, block, block + c);
        });
    }

    BatchNormDesc d_;
    int threads_;
    std::shared_ptr<Backend> owner_;
};

}  // namespace

std::unique_ptr<BatchNormOp> makeCpuBatchNorm(const BatchNormDesc& d, int threads, std::shared_ptr<Backend> owner) {
    return std::make_unique<CpuBatchNorm>(d, threads, std::move(owner));
}

}  // namespace tb
