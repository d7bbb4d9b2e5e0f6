#include "backend/cuda/kernels.cuh"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_stream.hpp"
#include "backend/elementwise_math.hpp"
#include "backend/fast_divmod.hpp"

namespace tb::cuda {

namespace {

constexpr int kThreads = 256;

// Grid of a grid-stride loop over n elements: enough blocks to fill the GPU, no more than needed.
unsigned blocksFor(size_t n) { return unsigned(std::clamp<size_t>((n + kThreads - 1) / kThreads, 1, 1 << 16)); }

#define TB_GRID_STRIDE(i, n) \
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += size_t(gridDim.x) * blockDim.x)

__global__ void holdKernel(uint64_t nanoseconds) {
    // %globaltimer: nanoseconds, the same on every SM (clock64 counts cycles, whose rate varies).
    uint64_t start = 0, now = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    while (now - start < nanoseconds);
}
__global__ void fillKernel(float* x, float v, size_t n) {
    TB_GRID_STRIDE(i, n) x[i] = v;
}
__global__ void scaleKernel(float* x, float a, size_t n) {
    TB_GRID_STRIDE(i, n) x[i] *= a;
}
__global__ void axpyKernel(float a, const float* __restrict__ x, float* __restrict__ y, size_t n) {
    TB_GRID_STRIDE(i, n) y[i] += a * x[i];
}
__global__ void reluForwardKernel(const float* __restrict__ x, float* __restrict__ y, size_t n) {
    TB_GRID_STRIDE(i, n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
__global__ void reluBackwardKernel(const float* __restrict__ y, const float* __restrict__ dy, float* __restrict__ dx,
                                   size_t n) {
    TB_GRID_STRIDE(i, n) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
}
// One thread per 32-bit word of the mask (ld / 32 per example).
__global__ void reluMaskWriteKernel(const float* __restrict__ y, int units, int64_t wordsPerExample, size_t total,
                                    uint32_t* __restrict__ mask) {
    TB_GRID_STRIDE(i, total) {
        mask[i] = ew::reluMaskWord(y, units, int64_t(i) / wordsPerExample, int64_t(i) % wordsPerExample);
    }
}
__global__ void reluMaskApplyKernel(float* __restrict__ x, FastDivmod units, int64_t ld, size_t total,
                                    const uint32_t* __restrict__ mask) {
    TB_GRID_STRIDE(i, total) {
        const int u = lastAt(units, i);
        if (!ew::reluMaskBit(mask, ld, int64_t(i - size_t(u)) / int64_t(units.d), u)) x[i] = 0.f;
    }
}
__global__ void dropoutForwardKernel(const float* __restrict__ x, float* __restrict__ y, float* __restrict__ mask,
                                     size_t n, float keep, uint64_t seed) {
    TB_GRID_STRIDE(i, n) {
        mask[i] = ew::dropoutMask(seed, i, keep);
        y[i] = x[i] * mask[i];
    }
}
__global__ void multiplyKernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
                               size_t n) {
    TB_GRID_STRIDE(i, n) out[i] = a[i] * b[i];
}

// Sum of a block's values in thread 0 (blockDim.x == kThreads).
template <class T>
__device__ T blockSum(T v) {
    __shared__ T part[kThreads];
    part[threadIdx.x] = v;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w /= 2) {
        if (int(threadIdx.x) < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    return part[0];
}

__global__ void sumSquaresPartial(const float* __restrict__ x, size_t n, float* __restrict__ partial) {
    float acc = 0.f;
    TB_GRID_STRIDE(i, n) acc += x[i] * x[i];
    const float total = blockSum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}
__global__ void sumPartials(const float* __restrict__ partial, int count, float a, float* out) {
    float acc = 0.f;
    for (int i = int(threadIdx.x); i < count; i += kThreads) acc += partial[i];
    const float total = blockSum(acc);
    if (threadIdx.x == 0) out[0] += a * total;
}

// One block: each thread takes whole rows; the loss sum and the count of right answers are
// reduced in double in a fixed order, as the CPU backend sums them.
__global__ void softmaxCrossEntropyKernel(const float* __restrict__ logits, const int32_t* __restrict__ labels,
                                          float* __restrict__ probs, int n, int k, float* stats) {
    double loss = 0, correct = 0;
    for (int i = int(threadIdx.x); i < n; i += kThreads) {
        bool right = false;
        loss += ew::softmaxRow(logits + int64_t(i) * k, probs + int64_t(i) * k, k, labels[i], right);
        correct += right;
    }
    const double l = blockSum(loss);
    __syncthreads();
    const double c = blockSum(correct);
    if (threadIdx.x == 0) {
        stats[0] += float(l);
        stats[1] += float(c);
    }
}
__global__ void softmaxCrossEntropyBackwardKernel(const float* __restrict__ probs, const int32_t* __restrict__ labels,
                                                  float* __restrict__ d, int n, int k, float scale) {
    TB_GRID_STRIDE(i, size_t(n) * k) {
        const int row = int(i / size_t(k)), j = int(i % size_t(k));
        d[i] = scale * (probs[i] - (j == labels[row] ? 1.f : 0.f));
    }
}

// The update rules take their one argument by value (update_args.hpp says why).
__global__ void sgdKernel(UpdateArgs a) {
    TB_GRID_STRIDE(i, a.n) a.p[i] -= a.rate * a.g[i];
}
__global__ void momentumKernel(UpdateArgs a) {
    TB_GRID_STRIDE(i, a.n) ew::momentumStep(a.p[i], a.m[i], a.g[i], a.rate, a.mu);
}
__global__ void nesterovKernel(UpdateArgs a) {
    TB_GRID_STRIDE(i, a.n) ew::nesterovStep(a.p[i], a.m[i], a.g[i], a.rate, a.mu);
}
__global__ void adamKernel(UpdateArgs a) {
    TB_GRID_STRIDE(i, a.n) ew::adamStep(a.p[i], a.m[i], a.v[i], a.g[i], a.rate, a.b1, a.b2, a.eps);
}
__global__ void emaKernel(float* __restrict__ shadow, const float* __restrict__ p, float decay, size_t n) {
    TB_GRID_STRIDE(i, n) shadow[i] = ew::emaStep(shadow[i], p[i], decay);
}

__global__ void addBiasKernel(float* __restrict__ y, const float* __restrict__ b, size_t total, FastDivmod k) {
    TB_GRID_STRIDE(i, total) y[i] += b[lastAt(k, i)];
}

// Element conversions of the mixed-precision path: to bf16 rounds to nearest even (NaN kept),
// as the CPU backend's tensor/bf16.cpp does; back to float is exact.
__device__ inline float toFloat(float v) { return v; }
__device__ inline float toFloat(bf16 v) { return __bfloat162float(v); }
template <class T>
__device__ T fromFloat(float v);
template <>
__device__ inline float fromFloat<float>(float v) { return v; }
template <>
__device__ inline bf16 fromFloat<bf16>(float v) { return __float2bfloat16_rn(v); }

template <class In, class Out>
__global__ void convertKernel(const In* __restrict__ x, Out* __restrict__ y, size_t n) {
    TB_GRID_STRIDE(i, n) y[i] = fromFloat<Out>(toFloat(x[i]));
}
__global__ void fillBf16Kernel(bf16* x, float v, size_t n) {
    TB_GRID_STRIDE(i, n) x[i] = __float2bfloat16_rn(v);
}
__global__ void widenAddBiasKernel(const bf16* __restrict__ yb, const float* __restrict__ b, float* __restrict__ y,
                                   size_t total, FastDivmod k) {
    TB_GRID_STRIDE(i, total) y[i] = __bfloat162float(yb[i]) + b[lastAt(k, i)];
}

// to == true: (k, c, r, s) -> (k, r, s, c); else the inverse. One thread per element.
template <class In, class Out>
__global__ void filterTransposeKernel(const In* __restrict__ in, Out* __restrict__ out, int k, int c, int r, int sz,
                                      NhwcDivisors krsc, bool toKrsc) {
    const size_t total = size_t(k) * c * r * sz;
    TB_GRID_STRIDE(i, total) {
        // i indexes the KRSC layout, i = ((kk * r + rr) * sz + ss) * c + cc: an (n, h, w, c) index.
        const NhwcAt at = nhwcAt(krsc, i);
        const size_t kcrs = ((at.n * c + at.c) * r + at.y) * sz + at.x;
        if (toKrsc) out[i] = fromFloat<Out>(toFloat(in[kcrs]));
        else out[kcrs] = fromFloat<Out>(toFloat(in[i]));
    }
}

// One thread per padded element: interior copies, border zeros (pad) or interior gathers (crop).
template <class In, class Out>
__global__ void padKernel(const In* __restrict__ x, Out* __restrict__ xp, int n, int h, int w, int c, int top,
                          int left, int hp, int wp, NhwcDivisors padded) {
    const size_t total = size_t(n) * hp * wp * c;
    TB_GRID_STRIDE(i, total) {
        const NhwcAt at = nhwcAt(padded, i);
        const int x1 = at.x - left, y1 = at.y - top;
        xp[i] = fromFloat<Out>((y1 >= 0 && y1 < h && x1 >= 0 && x1 < w)
                                   ? toFloat(x[((at.n * h + y1) * w + x1) * c + at.c])
                                   : 0.f);
    }
}
template <class In, class Out>
__global__ void cropKernel(const In* __restrict__ xp, Out* __restrict__ x, int n, int h, int w, int c, int top,
                           int left, int hp, int wp, NhwcDivisors cropped) {
    const size_t total = size_t(n) * h * w * c;
    TB_GRID_STRIDE(i, total) {
        const NhwcAt at = nhwcAt(cropped, i);
        x[i] = fromFloat<Out>(toFloat(xp[((at.n * hp + at.y + top) * wp + at.x + left) * c + at.c]));
    }
}

// Output element i of (n, oh, ow, c) and its window's rows and columns inside the input, [lo, hi).
struct PoolWindow {
    int n, c;
    int2 rows, cols;
};
__device__ inline int2 windowSpan(int o, int stride, int pad, int k, int size) {
    const int start = o * stride - pad;
    return make_int2(max(start, 0), min(start + k, size));
}
// `out`: the output's (oh, ow, c) divisors.
__device__ inline PoolWindow poolWindow(const PoolDesc& d, const NhwcDivisors& out, size_t i) {
    const NhwcAt at = nhwcAt(out, i);
    return {int(at.n), at.c, windowSpan(at.y, d.strideH, d.padTop, d.r, d.h), windowSpan(at.x, d.strideW, d.padLeft, d.s, d.w)};
}
// Input element i of (n, h, w, c) and the outputs whose windows hold it, rows x columns.
struct PoolInput {
    int n, c;
    WindowRange rows, cols;
};
// The input's (h, w, c) divisors and the strides': an input's windows by fast division too (four
// integer divisions an element otherwise).
struct PoolInputDivisors {
    NhwcDivisors in;
    FastDivmod strideH, strideW;
    explicit PoolInputDivisors(const PoolDesc& d)
        : in(d.h, d.w, d.c), strideH(uint32_t(d.strideH)), strideW(uint32_t(d.strideW)) {}
};
static_assert(std::is_trivially_copyable_v<PoolInputDivisors>, "a kernel's argument is copied byte for byte");
__device__ inline PoolInput poolInput(const PoolDesc& d, const PoolInputDivisors& dv, int oh, int ow, size_t i) {
    const NhwcAt at = nhwcAt(dv.in, i);
    return {int(at.n), at.c, windowsHolding(at.y, d.padTop, d.r, dv.strideH, oh),
            windowsHolding(at.x, d.padLeft, d.s, dv.strideW, ow)};
}

__global__ void maxPoolForwardKernel(PoolDesc d, int oh, int ow, NhwcDivisors out, const float* __restrict__ x,
                                     float* __restrict__ y, int32_t* __restrict__ argmax) {
    const size_t total = size_t(d.n) * oh * ow * d.c;
    TB_GRID_STRIDE(i, total) {
        const PoolWindow p = poolWindow(d, out, i);
        float best = -INFINITY;
        int32_t at = -1;
        for (int a = p.rows.x; a < p.rows.y; ++a)
            for (int b = p.cols.x; b < p.cols.y; ++b) {
                const int32_t idx = int32_t(((int64_t(p.n) * d.h + a) * d.w + b) * d.c + p.c);
                if (at < 0 || x[idx] > best) {
                    best = x[idx];
                    at = idx;
                }
            }
        y[i] = d.relu && !(best > 0.f) ? 0.f : best;  // (the folded ReLU: the CPU backend's x > 0 ? x : 0)
        argmax[i] = at;
    }
}
// The gradients below compute one element of dx (n, h, w, c) from its flat index i; the kernels
// after them (gradient kernels) write dx with them, and with dx's channel sums where asked.
struct MaxPoolGradient {
    PoolDesc d;
    int oh, ow;
    PoolInputDivisors in;
    const float* y;
    const float* dy;
    const int32_t* argmax;
    __device__ float operator()(size_t i) const {
        const PoolInput p = poolInput(d, in, oh, ow, i);
        float g = 0.f;
        for (int oy = p.rows.lo; oy <= p.rows.hi; ++oy)
            for (int ox = p.cols.lo; ox <= p.cols.hi; ++ox) {
                const size_t o = ((size_t(p.n) * oh + oy) * ow + ox) * d.c + p.c;
                if (__ldg(argmax + o) == int32_t(i) && (!d.relu || __ldg(y + o) > 0.f)) g += __ldg(dy + o);
            }
        return g;
    }
};
__global__ void avgPoolForwardKernel(PoolDesc d, int oh, int ow, NhwcDivisors out, const float* __restrict__ x,
                                     float* __restrict__ y) {
    const size_t total = size_t(d.n) * oh * ow * d.c;
    TB_GRID_STRIDE(i, total) {
        const PoolWindow p = poolWindow(d, out, i);
        float sum = 0.f;
        for (int a = p.rows.x; a < p.rows.y; ++a)
            for (int b = p.cols.x; b < p.cols.y; ++b) sum += x[((size_t(p.n) * d.h + a) * d.w + b) * d.c + p.c];
        y[i] = sum / float(max(1, (p.rows.y - p.rows.x) * (p.cols.y - p.cols.x)));
    }
}
struct AvgPoolGradient {
    PoolDesc d;
    int oh, ow;
    PoolInputDivisors in;
    const float* dy;
    __device__ float operator()(size_t i) const {
        const PoolInput p = poolInput(d, in, oh, ow, i);
        float g = 0.f;
        for (int oy = p.rows.lo; oy <= p.rows.hi; ++oy) {
            const int2 ys = windowSpan(oy, d.strideH, d.padTop, d.r, d.h);
            for (int ox = p.cols.lo; ox <= p.cols.hi; ++ox) {
                const int2 xs = windowSpan(ox, d.strideW, d.padLeft, d.s, d.w);
                g += __ldg(dy + ((size_t(p.n) * oh + oy) * ow + ox) * d.c + p.c) / float((ys.y - ys.x) * (xs.y - xs.x));
            }
        }
        return g;
    }
};

// s^-beta as the CPU backend computes it (square roots for TF's common 0.75 and 0.5).
__device__ float lrnPower(float s, float beta) {
    if (beta == 0.75f) {
        const float q = sqrtf(s);
        return 1.f / (q * sqrtf(q));
    }
    if (beta == 0.5f) return 1.f / sqrtf(s);
    return powf(s, -beta);
}

// The input as the normalisation reads it: relu(x) where the ReLU before is folded in (LrnDesc).
__device__ float lrnInput(const LrnDesc& d, float x) { return d.relu && !(x > 0.f) ? 0.f : x; }

__global__ void lrnForwardKernel(LrnDesc d, FastDivmod channels, size_t total, const float* __restrict__ x,
                                 float* __restrict__ y, float* __restrict__ ratio, float* __restrict__ power) {
    TB_GRID_STRIDE(i, total) {
        const int j = lastAt(channels, i);
        const float* px = x + (i - size_t(j));
        float sum = 0.f;  // ascending over the window, as the CPU's sliding sum
        for (int q = max(0, j - d.depthRadius); q <= min(d.c - 1, j + d.depthRadius); ++q) {
            const float v = lrnInput(d, px[q]);
            sum += v * v;
        }
        const float s = d.bias + d.alpha * sum;
        const float pw = lrnPower(s, d.beta);
        const float out = lrnInput(d, x[i]) * pw;
        ratio[i] = out / s;
        power[i] = pw;
        y[i] = out;
    }
}
// dx_j = dy_j scale_j^-beta - 2 alpha beta x_j sum_{|i-j|<=r} dy_i y_i / scale_i, y_i / scale_i
// as the forward kept it (ratio).
struct LrnGradient {
    LrnDesc d;
    FastDivmod channels;
    const float* x;
    const float* dy;
    const float* ratio;
    const float* power;
    __device__ float operator()(size_t i) const {
        const int j = lastAt(channels, i);
        const size_t base = i - size_t(j);
        float sum = 0.f;
        for (int q = max(0, j - d.depthRadius); q <= min(d.c - 1, j + d.depthRadius); ++q)
            sum += __ldg(dy + base + q) * __ldg(ratio + base + q);
        // (A folded ReLU passes the gradient back only where its input was positive.)
        const float xi = __ldg(x + i);
        return d.relu && !(xi > 0.f) ? 0.f : __ldg(dy + i) * __ldg(power + i) - 2.f * d.alpha * d.beta * xi * sum;
    }
};

// dx (rows, c) := g(i) for every element.
template <class Gradient>
__device__ void writeGradient(const Gradient& g, size_t total, float* __restrict__ dx) {
    TB_GRID_STRIDE(i, total) dx[i] = g(i);
}
// The same, and dx's channel sums (ChannelSums): block (kSumChannels, kSumLanes) of grid (channel
// tiles, chunks) writes its tile of its chunk's rows and their sums into `partial` (chunk, c); the
// last block to finish adds the chunks' sums in chunk order (each lane every kSumLanes-th chunk,
// then the lanes in order, in double): no atomics on the sums, the same bits every run. Blocks of
// 1024 threads, so that the last block's share of the partials is a few loads a thread (8 at the
// models' shapes), where blocks of 256 left it some 64 dependent L2 reads a thread, microseconds
// against the GEMV of about 3.7 us it replaces.
constexpr int kSumChannels = 32, kSumLanes = 32;
struct ChannelSumArgs {
    int64_t rows, rowsPerChunk;
    int c;
    float* partial;
    unsigned* arrived;
    float* out;
};
template <class Gradient>
__device__ void writeGradientAndSums(const Gradient& g, const ChannelSumArgs& a, float* __restrict__ dx) {
    __shared__ float lanes[kSumLanes][kSumChannels];
    __shared__ double totals[kSumLanes][kSumChannels];
    __shared__ bool last;
    const int j = blockIdx.x * kSumChannels + threadIdx.x;
    const int64_t begin = int64_t(blockIdx.y) * a.rowsPerChunk, end = min(a.rows, begin + a.rowsPerChunk);
    float sum = 0.f;
    if (j < a.c)
        for (int64_t r = begin + threadIdx.y; r < end; r += kSumLanes) {
            const size_t i = size_t(r) * a.c + j;
            const float v = g(i);
            dx[i] = v;
            sum += v;
        }
    lanes[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && j < a.c) {
        for (int l = 1; l < kSumLanes; ++l) sum += lanes[l][threadIdx.x];
        a.partial[size_t(blockIdx.y) * a.c + j] = sum;
    }
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        __threadfence();  // the block's partials (ordered before by the barrier) reach every SM first
        last = atomicAdd(a.arrived, 1u) == gridDim.x * gridDim.y - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (unsigned tile = 0; tile < gridDim.x; ++tile) {
        const int jj = int(tile) * kSumChannels + threadIdx.x;
        double t = 0;
        if (jj < a.c)
#pragma unroll 4
            for (unsigned k = threadIdx.y; k < gridDim.y; k += kSumLanes) t += __ldcg(a.partial + size_t(k) * a.c + jj);
        __syncthreads();  // (the last tile's readers are done)
        totals[threadIdx.y][threadIdx.x] = t;
        __syncthreads();
        if (threadIdx.y == 0 && jj < a.c) {
            for (int l = 1; l < kSumLanes; ++l) t += totals[l][threadIdx.x];
            a.out[jj] = float(t);
        }
    }
    if (threadIdx.x == 0 && threadIdx.y == 0) *a.arrived = 0;  // for the next call (or replay)
}
// dx (rows, c) from g by one of its two kernels: one thread an element, or with the channel sums
// as ChannelSums lays them out.
template <class Gradient>
void launchGradient(cudaStream_t s, void (*plain)(Gradient, size_t, float*),
                    void (*summing)(Gradient, ChannelSumArgs, float*), const char* name, const Gradient& g, int64_t rows, int c, float* dx, const ChannelSums* sums) {
    const size_t total = size_t(rows) * size_t(c);
    if (total == 0) {  // (no rows: the sums are 0)
        if (sums && c > 0) TB_CUDA(cudaMemsetAsync(sums->out, 0, size_t(c) * sizeof(float), s));
        return;
    }
    if (!sums) {
        plain<<<blocksFor(total), kThreads, 0, s>>>(g, total, dx);
    } else {
        const dim3 grid(unsigned((c + kSumChannels - 1) / kSumChannels), unsigned(sums->chunks));
        const ChannelSumArgs a{rows, sums->rowsPerChunk, c, sums->partial, sums->arrived, sums->out};
        summing<<<grid, dim3(kSumChannels, kSumLanes), 0, s>>>(g, a, dx);
    }
    TB_CUDA_LAUNCHED(name);
}
// Each gradient's two kernels, named after it (kernel profiles name kernels without their
// template arguments), and name##Launch(s, g, rows, c, dx, sums), which runs one of them.
#define TB_GRADIENT_KERNELS(name, Gradient)                                                                   \
    __global__ void name##Kernel(Gradient g, size_t total, float* __restrict__ dx) {                          \
        writeGradient(g, total, dx);                                                                          \
    }                                                                                                         \
    __global__ void __launch_bounds__(kSumChannels* kSumLanes)                                                \
        name##SumsKernel(Gradient g, ChannelSumArgs a, float* __restrict__ dx) {                              \
        writeGradientAndSums(g, a, dx);                                                                       \
    }                                                                                                         \
    void name##Launch(cudaStream_t s, const Gradient& g, int64_t rows, int c, float* dx, const ChannelSums* sums) { \
        launchGradient(s, name##Kernel, name##SumsKernel, sums ? #name "SumsKernel" : #name "Kernel", g, rows, c, dx,  \
                       sums);                                                                                 \
    }
TB_GRADIENT_KERNELS(maxPoolBackward, MaxPoolGradient)
TB_GRADIENT_KERNELS(avgPoolBackward, AvgPoolGradient)
TB_GRADIENT_KERNELS(lrnBackward, LrnGradient)
#undef TB_GRADIENT_KERNELS

// Batch normalisation over (rows, c), channels contiguous: per-channel sums in two passes without
// atomics (a fixed order, so the same bits every run). Pass one: block (x: 32 channels, y: 8 row
// lanes) of grid (channel tiles, chunks) sums its chunk's rows; pass two adds the chunks in order.
// Mode 0 sums x - shift and its square (shift: the moving mean, or null for 0); mode 1 dy and
// dy (x - mean), with the mean from saved (passed as `shift`).
constexpr int kBnChannels = 32, kBnLanes = 8;
template <int Mode>
__global__ void batchNormPartialKernel(const float* __restrict__ x, const float* __restrict__ y,
                                       const float* __restrict__ dy, const float* __restrict__ mean, int64_t rows,
                                       int c, int64_t rowsPerChunk, float* __restrict__ partial) {
    __shared__ float sa[kBnLanes][kBnChannels], sq[kBnLanes][kBnChannels];
    const int j = blockIdx.x * kBnChannels + threadIdx.x;
    const int64_t begin = int64_t(blockIdx.y) * rowsPerChunk;
    const int64_t end = min(rows, begin + rowsPerChunk);
    float a = 0.f, q = 0.f;
    if (j < c) {
        const float m = mean ? mean[j] : 0.f;
        for (int64_t r = begin + threadIdx.y; r < end; r += kBnLanes) {
            const float v = x[r * c + j] - m;
            if (Mode == 0) {
                a += v;
                q += v * v;
            } else {
                const float g = y ? ew::reluGradient(y[r * c + j], dy[r * c + j]) : dy[r * c + j];
                a += g;
                q += g * v;
            }
        }
    }
    sa[threadIdx.y][threadIdx.x] = a;
    sq[threadIdx.y][threadIdx.x] = q;
    __syncthreads();
    if (threadIdx.y == 0 && j < c) {
        for (int l = 1; l < kBnLanes; ++l) {
            a += sa[l][threadIdx.x];
            q += sq[l][threadIdx.x];
        }
        partial[size_t(blockIdx.y) * 2 * c + j] = a;
        partial[size_t(blockIdx.y) * 2 * c + c + j] = q;
    }
}
// out0 (c) := the chunks' first sums added in order, out1 (c) := their second sums times
// scale1[j] (mode 1: 1/sqrt(var + eps), which makes dy (x - mean) into dy x^) or as they are.
__global__ void batchNormFinishKernel(const float* __restrict__ partial, int chunks, int c,
                                      const float* __restrict__ scale1, float* __restrict__ out0,
                                      float* __restrict__ out1) {
    TB_GRID_STRIDE(j, size_t(c)) {
        double a = 0, q = 0;
        for (int k = 0; k < chunks; ++k) {
            a += partial[size_t(k) * 2 * c + j];
            q += partial[size_t(k) * 2 * c + c + j];
        }
        out0[j] = float(a);
        out1[j] = float(scale1 ? q * scale1[j] : q);
    }
}
// Per channel: the batch's statistics into saved (mean, invStd, scale) and the moving ones (after
// the shift was read: it may be the moving mean itself).
__global__ void batchNormStatisticsKernel(const float* __restrict__ sums, const float* shift, double count, float eps,
                                          int c, const float* __restrict__ gamma, float* __restrict__ saved,
                                          float* moving, float decay) {
    TB_GRID_STRIDE(j, size_t(c)) {
        float mean = 0, invStd = 0, unbiased = 0;
        ew::batchNormStatistics(sums[j], sums[c + j], shift ? shift[j] : 0.f, count, eps, mean, invStd, unbiased);
        saved[j] = mean;
        saved[c + j] = invStd;
        saved[2 * c + j] = gamma[j] * invStd;
        if (moving) {
            moving[j] = ew::emaStep(moving[j], mean, decay);
            moving[c + j] = ew::emaStep(moving[c + j], unbiased, decay);
        }
    }
}
// Inference: the moving variance's scale into scale (c).
__global__ void batchNormInferenceScaleKernel(const float* __restrict__ moving, float eps, int c,
                                              const float* __restrict__ gamma, float* __restrict__ scale) {
    TB_GRID_STRIDE(j, size_t(c)) scale[j] = ew::batchNormInferenceScale(moving[c + j], eps, gamma[j]);
}
// y = (x - mean) scale + beta, each (c) per channel, relu'd where asked.
__global__ void batchNormApplyKernel(const float* __restrict__ x, const float* __restrict__ mean,
                                     const float* __restrict__ scale, const float* __restrict__ beta,
                                     float* __restrict__ y, FastDivmod c, size_t n, bool relu) {
    TB_GRID_STRIDE(i, n) {
        const int j = lastAt(c, i);
        const float v = ew::batchNormApply(x[i], mean[j], scale[j], beta[j]);
        y[i] = relu ? fmaxf(v, 0.f) : v;
    }
}
// Per channel: the input gradient's coefficients (k1, meanDy, k2) into coefficients (3c).
__global__ void batchNormGradientCoefficientsKernel(const float* __restrict__ saved, const float* __restrict__ gamma,
                                                    const float* __restrict__ sumDyXhat,
                                                    const float* __restrict__ sumDy, double count, int c,
                                                    float* __restrict__ coefficients) {
    TB_GRID_STRIDE(j, size_t(c)) {
        ew::batchNormGradientCoefficients(gamma[j], saved[c + j], sumDy[j], sumDyXhat[j], count, coefficients[j],
                                          coefficients[c + j], coefficients[2 * c + j]);
    }
}
__global__ void batchNormGradientKernel(const float* __restrict__ x, const float* __restrict__ y,
                                        const float* __restrict__ dy, const float* __restrict__ mean,
                                        const float* __restrict__ coefficients, float* __restrict__ dx, int c,
                                        FastDivmod channels, size_t n) {
    TB_GRID_STRIDE(i, n) {
        const int j = lastAt(channels, i);
        const float g = y ? ew::reluGradient(y[i], dy[i]) : dy[i];
        dx[i] = ew::batchNormGradient(x[i], g, mean[j], coefficients[j], coefficients[c + j], coefficients[2 * c + j]);
    }
}
__global__ void addKernel(const float* a, const float* b, float* y, size_t n, bool relu) {
    TB_GRID_STRIDE(i, n) {
        const float v = a[i] + b[i];
        y[i] = relu ? fmaxf(v, 0.f) : v;
    }
}

}  // namespace

#define TB_LAUNCH(kernel, n, s, ...)                                     \
    do {                                                                 \
        if ((n) == 0) break;                                             \
        kernel<<<blocksFor(n), kThreads, 0, s>>>(__VA_ARGS__);           \
        TB_CUDA_LAUNCHED(#kernel);                                       \
    } while (0)

void fill(cudaStream_t s, float* x, float v, size_t n) { TB_LAUNCH(fillKernel, n, s, x, v, n); }
void holdStream(cudaStream_t s, unsigned microseconds) {
    holdKernel<<<1, 1, 0, s>>>(uint64_t(microseconds) * 1000);
    TB_CUDA_LAUNCHED("holdKernel");
}
void scale(cudaStream_t s, float* x, float a, size_t n) { TB_LAUNCH(scaleKernel, n, s, x, a, n); }
void axpy(cudaStream_t s, float a, const float* x, float* y, size_t n) { TB_LAUNCH(axpyKernel, n, s, a, x, y, n); }
void reluForward(cudaStream_t s, const float* x, float* y, size_t n) { TB_LAUNCH(reluForwardKernel, n, s, x, y, n); }
void reluBackward(cudaStream_t s, const float* y, const float* dy, float* dx, size_t n) {
    TB_LAUNCH(reluBackwardKernel, n, s, y, dy, dx, n);
}
void reluMaskWrite(cudaStream_t s, const float* y, int n, int units, uint32_t* mask) {
    const int64_t perExample = ew::reluMaskLd(units) / 32;
    const size_t total = size_t(n) * size_t(perExample);
    TB_LAUNCH(reluMaskWriteKernel, total, s, y, units, perExample, total, mask);
}
void reluMaskApply(cudaStream_t s, float* x, int n, int units, const uint32_t* mask) {
    const size_t total = size_t(n) * size_t(units);
    TB_LAUNCH(reluMaskApplyKernel, total, s, x, FastDivmod(uint32_t(units)), ew::reluMaskLd(units), total, mask);
}
void dropoutForward(cudaStream_t s, const float* x, float* y, float* mask, size_t n, float keep, uint64_t seed) {
    TB_LAUNCH(dropoutForwardKernel, n, s, x, y, mask, n, keep, seed);
}
void multiply(cudaStream_t s, const float* a, const float* b, float* out, size_t n) {
    TB_LAUNCH(multiplyKernel, n, s, a, b, out, n);
}

void addSumSquares(cudaStream_t s, const float* x, size_t n, float a, float* out, float* scratch) {
    if (n == 0) return;
    const unsigned blocks = std::min<unsigned>(blocksFor(n), unsigned(kScratchFloats));
    sumSquaresPartial<<<blocks, kThreads, 0, s>>>(x, n, scratch);
    TB_CUDA_LAUNCHED("sumSquaresPartial");
    sumPartials<<<1, kThreads, 0, s>>>(scratch, int(blocks), a, out);
    TB_CUDA_LAUNCHED("sumPartials");
}

void softmaxCrossEntropy(cudaStream_t s, const float* logits, const int32_t* labels, float* probs, int n, int k,
                         float* stats) {
    if (n <= 0) return;
    softmaxCrossEntropyKernel<<<1, kThreads, 0, s>>>(logits, labels, probs, n, k, stats);
    TB_CUDA_LAUNCHED("softmaxCrossEntropyKernel");
}
void softmaxCrossEntropyBackward(cudaStream_t s, const float* probs, const int32_t* labels, float* dlogits, int n,
                                 int k, float scale) {
    TB_LAUNCH(softmaxCrossEntropyBackwardKernel, size_t(n) * size_t(k), s, probs, labels, dlogits, n, k, scale);
}

void applyUpdate(cudaStream_t s, UpdateRule rule, const UpdateArgs& a) {
    switch (rule) {
    case UpdateRule::Sgd: TB_LAUNCH(sgdKernel, a.n, s, a); break;
    case UpdateRule::Momentum: TB_LAUNCH(momentumKernel, a.n, s, a); break;
    case UpdateRule::Nesterov: TB_LAUNCH(nesterovKernel, a.n, s, a); break;
    case UpdateRule::Adam: TB_LAUNCH(adamKernel, a.n, s, a); break;
    }
}
void emaUpdate(cudaStream_t s, float* shadow, const float* p, float decay, size_t n) {
    TB_LAUNCH(emaKernel, n, s, shadow, p, decay, n);
}

void addBias(cudaStream_t s, float* y, const float* b, size_t rows, int k) {
    TB_LAUNCH(addBiasKernel, rows * size_t(k), s, y, b, rows * size_t(k), FastDivmod(uint32_t(k)));
}
void fill(cudaStream_t s, bf16* x, float v, size_t n) { TB_LAUNCH(fillBf16Kernel, n, s, x, v, n); }
void roundToBf16(cudaStream_t s, const float* x, bf16* y, size_t n) { TB_LAUNCH(convertKernel, n, s, x, y, n); }
void widen(cudaStream_t s, const bf16* x, float* y, size_t n) { TB_LAUNCH(convertKernel, n, s, x, y, n); }
void widenAddBias(cudaStream_t s, const bf16* yb, const float* b, float* y, size_t rows, int k) {
    TB_LAUNCH(widenAddBiasKernel, rows * size_t(k), s, yb, b, y, rows * size_t(k), FastDivmod(uint32_t(k)));
}

template <class In, class Out>
void filterToKrsc(cudaStream_t s, const In* w, Out* out, int k, int c, int r, int sz) {
    TB_LAUNCH((filterTransposeKernel<In, Out>), size_t(k) * c * r * sz, s, w, out, k, c, r, sz, NhwcDivisors(r, sz, c),
              true);
}
template <class In, class Out>
void filterFromKrsc(cudaStream_t s, const In* in, Out* w, int k, int c, int r, int sz) {
    TB_LAUNCH((filterTransposeKernel<In, Out>), size_t(k) * c * r * sz, s, in, w, k, c, r, sz, NhwcDivisors(r, sz, c),
              false);
}
template <class In, class Out>
void padNhwc(cudaStream_t s, const In* x, Out* xp, int n, int h, int w, int c, int top, int left, int bottom, int right) {
    const int hp = h + top + bottom, wp = w + left + right;
    TB_LAUNCH((padKernel<In, Out>), size_t(n) * hp * wp * c, s, x, xp, n, h, w, c, top, left, hp, wp,
              NhwcDivisors(hp, wp, c));
}
template <class In, class Out>
void cropNhwc(cudaStream_t s, const In* xp, Out* x, int n, int h, int w, int c, int top, int left, int bottom, int right) {
    const int hp = h + top + bottom, wp = w + left + right;
    TB_LAUNCH((cropKernel<In, Out>), size_t(n) * h * w * c, s, xp, x, n, h, w, c, top, left, hp, wp,
              NhwcDivisors(h, w, c));
}
// The pairs the plans use: fp32 throughout, and the bf16 path's ways in and out.
template void filterToKrsc(cudaStream_t, const float*, float*, int, int, int, int);
template void filterToKrsc(cudaStream_t, const float*, bf16*, int, int, int, int);
template void filterFromKrsc(cudaStream_t, const float*, float*, int, int, int, int);
template void filterFromKrsc(cudaStream_t, const bf16*, float*, int, int, int, int);
template void padNhwc(cudaStream_t, const float*, float*, int, int, int, int, int, int, int, int);
template void padNhwc(cudaStream_t, const float*, bf16*, int, int, int, int, int, int, int, int);
template void cropNhwc(cudaStream_t, const float*, float*, int, int, int, int, int, int, int, int);
template void cropNhwc(cudaStream_t, const bf16*, float*, int, int, int, int, int, int, int, int);

void maxPoolForward(cudaStream_t s, const PoolDesc& d, const float* x, float* y, int32_t* argmax) {
    const int oh = d.outH(), ow = d.outW();
    TB_LAUNCH(maxPoolForwardKernel, size_t(d.n) * oh * ow * d.c, s, d, oh, ow, NhwcDivisors(oh, ow, d.c), x, y, argmax);
}
void maxPoolBackward(cudaStream_t s, const PoolDesc& d, const float* y, const float* dy, const int32_t* argmax,
                     float* dx, const ChannelSums* sums) {
    maxPoolBackwardLaunch(s, MaxPoolGradient{d, d.outH(), d.outW(), PoolInputDivisors(d), y, dy, argmax},
                          int64_t(d.n) * d.h * d.w, d.c, dx, sums);
}

void avgPoolForward(cudaStream_t s, const PoolDesc& d, const float* x, float* y) {
    const int oh = d.outH(), ow = d.outW();
    TB_LAUNCH(avgPoolForwardKernel, size_t(d.n) * oh * ow * d.c, s, d, oh, ow, NhwcDivisors(oh, ow, d.c), x, y);
}
void avgPoolBackward(cudaStream_t s, const PoolDesc& d, const float* dy, float* dx, const ChannelSums* sums) {
    avgPoolBackwardLaunch(s, AvgPoolGradient{d, d.outH(), d.outW(), PoolInputDivisors(d), dy}, int64_t(d.n) * d.h * d.w,
                          d.c, dx, sums);
}

void lrnForward(cudaStream_t s, const LrnDesc& d, const float* x, float* y, float* saved) {
    const size_t total = size_t(d.n) * d.c * d.h * d.w;
    TB_LAUNCH(lrnForwardKernel, total, s, d, FastDivmod(uint32_t(d.c)), total, x, y, saved, saved + total);
}
void lrnBackward(cudaStream_t s, const LrnDesc& d, const float* x, const float* dy, float* dx, const float* saved,
                 const ChannelSums* sums) {
    const size_t total = size_t(d.n) * d.c * d.h * d.w;
    lrnBackwardLaunch(s, LrnGradient{d, FastDivmod(uint32_t(d.c)), x, dy, saved, saved + total},
                      int64_t(d.n) * d.h * d.w, d.c, dx, sums);
}

ChannelSums channelSumChunks(int64_t rows, int c) {
    // About 256 blocks of 1024 threads (two per SM of an H100's 132: all its threads), for the
    // bandwidth, each lane at least 8 rows; fixed, not the GPU's count, so that the sums' order,
    // and so their bits, are the same on every GPU.
    constexpr int64_t kMinRows = 8 * kSumLanes;
    ChannelSums k;
    if (rows <= 0 || c <= 0) return k;
    const int64_t tiles = (c + kSumChannels - 1) / kSumChannels;
    const int64_t target = (256 + tiles - 1) / tiles;
    k.chunks = int(std::clamp<int64_t>(target, 1, (rows + kMinRows - 1) / kMinRows));
    k.rowsPerChunk = (rows + k.chunks - 1) / k.chunks;
    k.chunks = int((rows + k.rowsPerChunk - 1) / k.rowsPerChunk);
    return k;
}

BatchNormChunks batchNormChunks(int64_t rows) {
    // Enough chunks to fill the GPU with the channel tiles of a ResNet's 16-64 channels, each
    // chunk at least 64 rows.
    BatchNormChunks k;
    if (rows <= 0) return {1, 0};  // (nothing to sum; the sums return before reading it)
    k.chunks = int(std::clamp<int64_t>((rows + 63) / 64, 1, 256));
    k.rowsPerChunk = (rows + k.chunks - 1) / k.chunks;
    k.chunks = int((rows + k.rowsPerChunk - 1) / k.rowsPerChunk);
    return k;
}

namespace {
void batchNormSumsOf(cudaStream_t s, int mode, const BatchNormDesc& d, const float* x, const float* y,
                     const float* dy, const float* saved, float* partial, float* out0, float* out1) {
    if (d.rows == 0 || d.c == 0) return;
    const BatchNormChunks k = batchNormChunks(d.rows);
    const dim3 grid(unsigned((d.c + kBnChannels - 1) / kBnChannels), unsigned(k.chunks)), block(kBnChannels, kBnLanes);
    // mode 0: `saved` is the shift (or null); mode 1: the forward's saved statistics, the mean first.
    if (mode == 0)
        batchNormPartialKernel<0><<<grid, block, 0, s>>>(x, nullptr, nullptr, saved, d.rows, d.c, k.rowsPerChunk, partial);
    else
        batchNormPartialKernel<1><<<grid, block, 0, s>>>(x, d.relu ? y : nullptr, dy, saved, d.rows, d.c,
                                                         k.rowsPerChunk, partial);
    TB_CUDA_LAUNCHED("batchNormPartialKernel");
    batchNormFinishKernel<<<blocksFor(size_t(d.c)), kThreads, 0, s>>>(partial, k.chunks, d.c,
                                                                      mode == 1 ? saved + d.c : nullptr, out0, out1);
    TB_CUDA_LAUNCHED("batchNormFinishKernel");
}
}  // namespace

void batchNormSums(cudaStream_t s, const BatchNormDesc& d, const float* x, const float* shift, float* sums,
                   float* partial) {
    batchNormSumsOf(s, 0, d, x, nullptr, nullptr, shift, partial, sums, sums + d.c);
}
void batchNormForward(cudaStream_t s, const BatchNormDesc& d, const float* x, const float* sums, const float* shift,
                      double count, const float* gamma, const float* beta, float* y, float* moving, float decay,
                      float* saved) {
    TB_LAUNCH(batchNormStatisticsKernel, size_t(d.c), s, sums, shift, count, d.epsilon, d.c, gamma, saved, moving,
              decay);
    const size_t n = size_t(d.rows) * size_t(d.c);
    TB_LAUNCH(batchNormApplyKernel, n, s, x, saved, saved + 2 * d.c, beta, y, FastDivmod(uint32_t(d.c)), n, d.relu);
}
void batchNormInference(cudaStream_t s, const BatchNormDesc& d, const float* x, const float* moving,
                        const float* gamma, const float* beta, float* y, float* scale) {
    TB_LAUNCH(batchNormInferenceScaleKernel, size_t(d.c), s, moving, d.epsilon, d.c, gamma, scale);
    const size_t n = size_t(d.rows) * size_t(d.c);
    TB_LAUNCH(batchNormApplyKernel, n, s, x, moving, scale, beta, y, FastDivmod(uint32_t(d.c)), n, d.relu);
}
void batchNormGradientSums(cudaStream_t s, const BatchNormDesc& d, const float* x, const float* y, const float* dy,
                           const float* saved, float* partial, float* dgamma, float* dbeta) {
    batchNormSumsOf(s, 1, d, x, y, dy, saved, partial, dbeta, dgamma);
}
void batchNormBackwardData(cudaStream_t s, const BatchNormDesc& d, const float* x, const float* y, const float* dy,
                           const float* gamma, const float* sumDyXhat, const float* sumDy, double count, float* dx,
                           const float* saved, float* coefficients) {
    TB_LAUNCH(batchNormGradientCoefficientsKernel, size_t(d.c), s, saved, gamma, sumDyXhat, sumDy, count, d.c,
              coefficients);
    const size_t n = size_t(d.rows) * size_t(d.c);
    TB_LAUNCH(batchNormGradientKernel, n, s, x, d.relu ? y : nullptr, dy, saved, coefficients, dx, d.c,
              FastDivmod(uint32_t(d.c)), n);
}
void add(cudaStream_t s, const float* a, const float* b, float* y, size_t n, bool relu) {
    TB_LAUNCH(addKernel, n, s, a, b, y, n, relu);
}

}  // namespace tb::cuda
