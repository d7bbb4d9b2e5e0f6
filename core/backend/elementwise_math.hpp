// The per-element arithmetic that every backend shares: the counter-based dropout draw, the
// optimiser rules, the weights' moving average, batch normalisation's per-channel arithmetic and
// a ReLU mask's bits. The CPU loops and the CUDA kernels call the same functions (DESIGN.md
// example 19), so both backends compute the same rule in the same order and the cross-backend
// test checks this arithmetic on machines without a GPU. Not bit for bit:
// the host build keeps every multiply and add apart (-ffp-contract=off), while nvcc fuses them
// into FMAs (its --fmad default), which round once; the op check allows for the last bits.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TB_HD __host__ __device__ __forceinline__
#else
#define TB_HD inline
#endif

namespace tb::ew {

// A counter-based uniform in [0, 1): the same (seed, index) gives the same number on every
// backend and thread, so dropout masks do not depend on scheduling (SplitMix64 finaliser).
TB_HD float uniformAt(uint64_t seed, uint64_t i) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return float(z >> 40) * (1.0f / 16777216.0f);
}

// The seed whose draws at 0, 1, ... are `seed`'s at offset, offset + 1, ...: a micro-batch whose
// elements start at `offset` in its step's batch draws with it the very mask the whole batch
// draws for its rows (uniformAt adds the index times one odd constant to the seed).
TB_HD uint64_t seedFrom(uint64_t seed, uint64_t offset) { return seed + 0x9E3779B97F4A7C15ull * offset; }

// The inverted-dropout mask value of element i: 1/keep where kept, else 0.
TB_HD float dropoutMask(uint64_t seed, uint64_t i, float keep) { return uniformAt(seed, i) < keep ? 1.f / keep : 0.f; }

// TF MomentumOptimizer: a = mu a + g; p -= lr a.
TB_HD void momentumStep(float& p, float& a, float g, float lr, float mu) {
    a = mu * a + g;
    p -= lr * a;
}

// TF MomentumOptimizer(use_nesterov=True): a = mu a + g; p -= lr (g + mu a).
TB_HD void nesterovStep(float& p, float& a, float g, float lr, float mu) {
    a = mu * a + g;
    p -= lr * (g + mu * a);
}

// Adam (Kingma & Ba) with TF's epsilon placement; lrT = lr sqrt(1 - b2^t) / (1 - b1^t) is made
// once per step on the host (adamStepSize), so the kernel does no pow.
TB_HD void adamStep(float& p, float& m, float& v, float g, float lrT, float b1, float b2, float eps) {
    m = b1 * m + (1.f - b1) * g;
    v = b2 * v + (1.f - b2) * g * g;
    p -= lrT * m / (sqrtf(v) + eps);
}

// Adam's step size at 1-based step t, computed once per update on the host.
inline float adamStepSize(float lr, float b1, float b2, int64_t t) {
    return lr * std::sqrt(1.f - std::pow(b2, float(t))) / (1.f - std::pow(b1, float(t)));
}

// One row of softmax cross-entropy: p = softmax(z) over k logits; returns this example's loss in
// the log-sum-exp form (-log softmax_y = log(sum) - (z_y - max), exact even where p_y underflows)
// and sets `right` when the argmax is the label. A label outside [0, k) scores NaN, so a run with
// such data fails loudly instead of reading past the row.
TB_HD double softmaxRow(const float* z, float* p, int k, int label, bool& right) {
    int arg = 0;
    for (int j = 1; j < k; ++j)
        if (z[j] > z[arg]) arg = j;
    const float mx = z[arg];
    double sum = 0;
    for (int j = 0; j < k; ++j) {
        p[j] = expf(z[j] - mx);
        sum += p[j];
    }
    const float inv = float(1.0 / sum);
    for (int j = 0; j < k; ++j) p[j] *= inv;
    right = arg == label;
    return (label >= 0 && label < k) ? log(sum) - double(z[label] - mx) : nan("");
}

// shadow = decay * shadow + (1 - decay) * params.
TB_HD float emaStep(float shadow, float p, float decay) { return decay * shadow + (1.f - decay) * p; }

// Batch normalisation, per channel, from the sums of x - shift and of its square over `count`
// rows: the mean, the biased variance's 1 / sqrt(var + eps) that normalises, and the unbiased
// variance (Bessel's correction) that the moving average keeps. A variance that rounding made
// negative counts as 0.
TB_HD void batchNormStatistics(float sum, float sumSquares, float shift, double count, float eps, float& mean,
                               float& invStd, float& unbiasedVar) {
    const double m = double(sum) / count;
    double var = double(sumSquares) / count - m * m;
    if (var < 0) var = 0;
    mean = float(double(shift) + m);
    invStd = float(1.0 / sqrt(var + double(eps)));
    unbiasedVar = float(count > 1 ? var * count / (count - 1) : var);
}

// Normalisation per element: y = (x - mean) scale + beta, scale = gamma / sqrt(var + eps) (the
// difference first: x scale + (beta - mean scale) would cancel where the mean is large).
TB_HD float batchNormApply(float x, float mean, float scale, float beta) { return (x - mean) * scale + beta; }
// Inference's scale from the moving variance.
TB_HD float batchNormInferenceScale(float movingVar, float eps, float gamma) {
    return float(double(gamma) / sqrt(double(movingVar) + double(eps)));
}

// The input gradient dx = gamma invStd (dy - sumDy / count - x^ sumDyXhat / count), x^ = (x - mean)
// invStd, as dx = k1 (dy - meanDy) - k2 (x - mean): the coefficients once per channel...
TB_HD void batchNormGradientCoefficients(float gamma, float invStd, float sumDy, float sumDyXhat, double count,
                                         float& k1, float& meanDy, float& k2) {
    k1 = gamma * invStd;
    meanDy = float(double(sumDy) / count);
    k2 = float(double(k1) * invStd * (double(sumDyXhat) / count));
}
// ...and per element.
TB_HD float batchNormGradient(float x, float dy, float mean, float k1, float meanDy, float k2) {
    return k1 * (dy - meanDy) - k2 * (x - mean);
}
// A fused ReLU's gradient: dy where the output is positive.
TB_HD float reluGradient(float y, float dy) { return y > 0.f ? dy : 0.f; }

// A ReLU's mask as cuBLASLt's ReLU epilogues keep it (RELU_AUX_BIAS writes it, DRELU reads it),
// which every backend writes and reads alike: one bit per value of y (n, units), row-major (n,
// units) being cuBLASLt's column-major (units x n), with each example's bits padded to the
// leading dimension cuBLASLt asks for, a multiple of 128; bit u of example i is bit (i ld + u),
// counted from the lowest bit of the mask's first 32-bit word, set where y > 0.
TB_HD int64_t reluMaskLd(int units) { return (int64_t(units) + 127) / 128 * 128; }  // bits
TB_HD size_t reluMaskBytes(int n, int units) { return size_t(reluMaskLd(units) / 8) * size_t(n); }
TB_HD bool reluMaskBit(const uint32_t* mask, int64_t ld, int64_t example, int unit) {
    const int64_t bit = example * ld + unit;
    return (mask[bit >> 5] >> (bit & 31)) & 1u;
}
// Word w of example i's bits (ld / 32 words each) from y (n, units): bit b where y[i, 32 w + b] > 0.
TB_HD uint32_t reluMaskWord(const float* y, int units, int64_t example, int64_t word) {
    uint32_t bits = 0;
    const int64_t first = word * 32;
    for (int b = 0; b < 32 && first + b < units; ++b)
        if (y[example * units + first + b] > 0.f) bits |= 1u << b;
    return bits;
}

}  // namespace tb::ew
