// The CUDA backend's own kernels: element-wise work, reductions, softmax cross-entropy, the
// optimiser rules and the moving average (one fused pass each, arithmetic shared with the CPU
// backend through backend/elementwise_math.hpp), and the layout work cuDNN does not do for us:
// TF-style max-pooling with asymmetric SAME padding, TF's LRN, bias adds, filter transposes and
// explicit padding. Every launcher enqueues on `s` and checks the launch.
// Layouts as in backend.hpp: activations (n, h, w, c), channels contiguous.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/backend.hpp"
#include "backend/cuda/update_args.hpp"

namespace tb::cuda {

void fill(cudaStream_t s, float* x, float v, size_t n);
// Keeps `s` busy for `microseconds` (one thread reading the GPU's clock): work enqueued behind it
// meanwhile starts back to back, as a recorded step's does, so timings taken after it leave out
// the host's time to enqueue (plan_trials.cpp's medianTimes).
void holdStream(cudaStream_t s, unsigned microseconds);
void scale(cudaStream_t s, float* x, float a, size_t n);
void axpy(cudaStream_t s, float a, const float* x, float* y, size_t n);
// out[0] += a * sum(x^2); scratch holds kScratchFloats partial sums (deterministic order).
void addSumSquares(cudaStream_t s, const float* x, size_t n, float a, float* out, float* scratch);
void reluForward(cudaStream_t s, const float* x, float* y, size_t n);
void reluBackward(cudaStream_t s, const float* y, const float* dy, float* dx, size_t n);
// A fused dense ReLU's mask (ew::reluMaskBit) where cuBLASLt's epilogue does not write or read it:
// mask := the bits of y (n, units) > 0; x (n, units) := 0 where its bit is clear.
void reluMaskWrite(cudaStream_t s, const float* y, int n, int units, uint32_t* mask);
void reluMaskApply(cudaStream_t s, float* x, int n, int units, const uint32_t* mask);
void dropoutForward(cudaStream_t s, const float* x, float* y, float* mask, size_t n, float keep, uint64_t seed);
void multiply(cudaStream_t s, const float* a, const float* b, float* out, size_t n);  // out = a * b
void softmaxCrossEntropy(cudaStream_t s, const float* logits, const int32_t* labels, float* probs, int n, int k,
                         float* stats);
void softmaxCrossEntropyBackward(cudaStream_t s, const float* probs, const int32_t* labels, float* dlogits, int n,
                                 int k, float scale);
void applyUpdate(cudaStream_t s, UpdateRule rule, const UpdateArgs& a);  // one kernel (none where a.n is 0)
void emaUpdate(cudaStream_t s, float* shadow, const float* p, float decay, size_t n);

// y (rows, k) += b (k) broadcast over rows: the bias of a channels-last conv or a dense layer.
void addBias(cudaStream_t s, float* y, const float* b, size_t rows, int k);

// Mixed precision (--precision bf16): the matrix ops' inputs rounded to bf16 (nearest even, as
// the CPU backend rounds), and bf16 results widened back to fp32.
using bf16 = __nv_bfloat16;
void fill(cudaStream_t s, bf16* x, float v, size_t n);
void roundToBf16(cudaStream_t s, const float* x, bf16* y, size_t n);
void widen(cudaStream_t s, const bf16* x, float* y, size_t n);
// y (rows, k) = yb + b: a convolution's bf16 output widened, with its fp32 bias added.
void widenAddBias(cudaStream_t s, const bf16* yb, const float* b, float* y, size_t rows, int k);

// The layout work below converts as it moves (In, Out: float or bf16; instantiated for
// float -> float and for the bf16 path's float -> bf16 on the way in, bf16 -> float on the way out).
// w (k, c, r, s) -> out (k, r, s, c), the filter layout cuDNN takes with NHWC activations; and back.
template <class In, class Out>
void filterToKrsc(cudaStream_t s, const In* w, Out* out, int k, int c, int r, int sz);
template <class In, class Out>
void filterFromKrsc(cudaStream_t s, const In* in, Out* w, int k, int c, int r, int sz);
// x (n, h, w, c) -> xp (n, h + top + bottom, w + left + right, c) with zeros around; and the
// gradient's crop back (dx = the interior of dxp).
template <class In, class Out>
void padNhwc(cudaStream_t s, const In* x, Out* xp, int n, int h, int w, int c, int top, int left, int bottom,
             int right);
template <class In, class Out>
void cropNhwc(cudaStream_t s, const In* xp, Out* x, int n, int h, int w, int c, int top, int left, int bottom,
              int right);

// dx's sums per channel, written by a gradient kernel below as it writes dx (PoolDesc::sumDx,
// LrnDesc::sumDx): blocks of 32 channels x 32 row lanes over `chunks` chunks of rowsPerChunk rows
// (channelSumChunks) each write their sums into `partial` (chunks x c floats); the last block to
// finish, counted in `arrived` (0 between calls: it sets it back), adds them in chunk order into
// `out` (c). No atomics on the sums, so the bits do not depend on scheduling.
struct ChannelSums {
    int chunks = 1;
    int64_t rowsPerChunk = 0;
    float* partial = nullptr;
    unsigned* arrived = nullptr;
    float* out = nullptr;
};
// The chunks for rows (n h w) of c channels (the same on every GPU, so the sums' bits are).
ChannelSums channelSumChunks(int64_t rows, int c);

// Max-pooling as TensorFlow computes it: padding is never the maximum; argmax (int32, one per
// output) is the flat index into x of the winner, and the backward gathers (no atomics, so the
// result does not depend on scheduling).
void maxPoolForward(cudaStream_t s, const PoolDesc& d, const float* x, float* y, int32_t* argmax);
// d.relu: the ReLU before the pooling folded in (PoolDesc): y = relu(max), and dy flows back only
// where y > 0. sums: dx's channel sums as well (null: none).
void maxPoolBackward(cudaStream_t s, const PoolDesc& d, const float* y, const float* dy, const int32_t* argmax,
                     float* dx, const ChannelSums* sums);
// Average pooling as TensorFlow computes it: the mean of the window's elements inside the input
// (padding not counted); the backward gathers each input's share of every window holding it.
void avgPoolForward(cudaStream_t s, const PoolDesc& d, const float* x, float* y);
void avgPoolBackward(cudaStream_t s, const PoolDesc& d, const float* dy, float* dx, const ChannelSums* sums);

// TensorFlow's LRN: scale = bias + alpha * sum_{|i-j|<=r} x_i^2, y = x * scale^-beta; saved
// holds y / scale (the backward's window sums read it, one division per value instead of one per
// value and window place) and scale^-beta, (2, n, h, w, c).
void lrnForward(cudaStream_t s, const LrnDesc& d, const float* x, float* y, float* saved);
void lrnBackward(cudaStream_t s, const LrnDesc& d, const float* x, const float* dy, float* dx, const float* saved,
                 const ChannelSums* sums);

// Batch normalisation (backend.hpp's BatchNormOp) over (rows, c): the sums in two passes, each chunk
// of rows into `partial` (chunks x 2c floats, batchNormChunks), then the chunks added in order;
// saved (4c): the batch's mean and 1/sqrt(var + eps), then the forward's scale (and a spare c);
// `coefficients`: scratch of 3c floats; inference's `scale`: scratch of c.
struct BatchNormChunks {
    int chunks = 1;
    int64_t rowsPerChunk = 0;
};
BatchNormChunks batchNormChunks(int64_t rows);
void batchNormSums(cudaStream_t s, const BatchNormDesc& d, const float* x, const float* shift, float* sums,
                   float* partial);
void batchNormForward(cudaStream_t s, const BatchNormDesc& d, const float* x, const float* sums, const float* shift,
                      double count, const float* gamma, const float* beta, float* y, float* moving, float decay,
                      float* saved);
void batchNormInference(cudaStream_t s, const BatchNormDesc& d, const float* x, const float* moving,
                        const float* gamma, const float* beta, float* y, float* scale);
void batchNormGradientSums(cudaStream_t s, const BatchNormDesc& d, const float* x, const float* y, const float* dy,
                           const float* saved, float* partial, float* dgamma, float* dbeta);
void batchNormBackwardData(cudaStream_t s, const BatchNormDesc& d, const float* x, const float* y, const float* dy,
                           const float* gamma, const float* sumDyXhat, const float* sumDy, double count, float* dx,
                           const float* saved, float* coefficients);
// y = a + b (relu'd where asked).
void add(cudaStream_t s, const float* a, const float* b, float* y, size_t n, bool relu);

}  // namespace tb::cuda
