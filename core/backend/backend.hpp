// Backend: what a device can do for training, in the shape the CUDA backend needs too.
// - Queues are opaque handles (Stream); every call is enqueued on one and may return before
//   it has run. synchronize() is the only host wait; nothing else blocks the host. The engine
//   names the stream of every call; the CUDA backend refuses a null one. The CPU backend runs
//   each call to completion on the calling thread, so its tests and tools may pass null.
// - Heavy ops are plans made once per shape (like cuDNN descriptors with a chosen algorithm):
//   each reports the scratch it needs, and the caller passes that workspace explicitly.
// - Reductions write into device memory (e.g. a loss scalar), never return host values.
// - Streams, events and graphs belong to the backend that made them; so do the op plans, which
//   must be used on that backend's streams only. Backends are shared: tensors and op plans hold
//   their backend, so none can outlive it (streams and events are handed back to it explicitly).
// Layouts: activations are (n, h, w, c) row-major (TensorFlow's NHWC; descriptors still give
// the sizes as n, c, h, w); conv weights (out, in, kh, kw); dense weights (out, in). Pointers are device pointers of this backend unless named host*.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/elementwise_math.hpp"
#include "tensor/tensor.hpp"
#include "util/error.hpp"

namespace tb {

struct StreamImpl;
using Stream = StreamImpl*;   // an in-order queue of work on one backend
struct EventImpl;
using Event = EventImpl*;     // a point in a stream's work that others can wait for and time
struct GraphImpl;
using Graph = GraphImpl*;     // a recorded sequence of a stream's work, replayed as one launch

struct MemoryInfo {
    size_t freeBytes = 0, totalBytes = 0;
};

// What the backend's allocator holds (device memory; zeros where it keeps no books).
struct AllocatorStats {
    size_t inUseBytes = 0;      // handed out now
    size_t peakInUseBytes = 0;  // the most ever handed out at once
    size_t reservedBytes = 0;   // taken from the device, in use or cached for reuse
    int64_t deviceMallocs = 0;  // calls to the device's own allocator (cudaMalloc) so far
};

struct ConvDesc {
    int n = 0, c = 0, h = 0, w = 0;       // input sizes; laid out (n, h, w, c)
    int k = 0, r = 0, s = 0;              // k filters of (c, r, s)
    int strideH = 1, strideW = 1;
    int padTop = 0, padLeft = 0, padBottom = 0, padRight = 0;  // asymmetric, as TF's SAME needs
    bool bias = true;  // false: y = conv(x, w) alone (a convolution before batch norm), db untouched
    // With a bias: false where the layer after writes db (PoolDesc::sumDx, LrnDesc::sumDx), so the
    // plan computes dw alone and keeps nothing for db (the GPU's ones vector, oneDNN's bias term).
    bool biasGradient = true;
    // false where backwardData is never called (a convolution reading the model's input, whose
    // gradient nothing needs): the plan leaves that direction out (no search, no workspace for it).
    bool inputGradient = true;
    int outH() const { return (h + padTop + padBottom - r) / strideH + 1; }
    int outW() const { return (w + padLeft + padRight - s) / strideW + 1; }
    bool writesBiasGradient() const { return bias && biasGradient; }
    // ConvOp::backwardWeights's db: given exactly where the plan writes the bias gradient.
    void checkBiasGradientArgument(const float* db) const {
        if (db && !writesBiasGradient())
            throw Error(std::string("a convolution planned without a bias gradient (") +
                        (bias ? "the layer after writes it" : "it has no bias") + ") was asked for one");
        if (!db && writesBiasGradient())
            throw Error("a convolution planned with a bias gradient was given nowhere to write it");
    }
    // ConvOp::backwardData: refused where the plan left that direction out.
    void checkInputGradientCall() const {
        if (!inputGradient) throw Error("a convolution planned without an input gradient was asked for one");
    }
};

// Max: the window's largest element (padding never wins). Average: the mean of the window's
// elements inside the input (padding not counted, as TensorFlow's avg_pool and PyTorch's
// count_include_pad=False); global average pooling is the window of the whole input.
enum class PoolMode { Max = 0, Average = 1 };

struct PoolDesc {
    int n = 0, c = 0, h = 0, w = 0;
    int r = 0, s = 0, strideH = 1, strideW = 1;
    int padTop = 0, padLeft = 0, padBottom = 0, padRight = 0;
    PoolMode mode = PoolMode::Max;
    // Max pooling only: the ReLU before it, folded in. relu(max(x)) is max(relu(x)), the same
    // argmax where the maximum is positive: y = relu(max), and the gradient flows back only where
    // y > 0, so the ReLU's passes over the 4x larger input are not made at all. (Only a NaN in a
    // window can tell them apart: the ReLU first would have made it 0; training has diverged by then.)
    bool relu = false;
    // The backward also writes dxSum (c), the sum of dx over (n, h, w) per channel: the bias
    // gradient of the convolution whose output x is (the ReLU between folded in, or none), which
    // then makes no pass over its output's gradient of its own (on the GPU a separate reduction
    // of that gradient, 4x the pooled size).
    bool sumDx = false;
    int outH() const { return (h + padTop + padBottom - r) / strideH + 1; }
    int outW() const { return (w + padLeft + padRight - s) / strideW + 1; }
};

// TensorFlow's local response normalisation across channels:
// y = x / (bias + alpha * sum_{c-r..c+r} x^2) ^ beta, with r = depthRadius.
struct LrnDesc {
    int n = 0, c = 0, h = 0, w = 0;
    int depthRadius = 5;
    float bias = 1.f, alpha = 1.f, beta = 0.5f;
    // The ReLU before it, folded in: x is the ReLU's input, the normalisation reads relu(x) (as
    // x > 0 ? x : 0, as the ReLU would write it), and the gradient goes back only where x > 0, so
    // the ReLU's passes are not made (cifar10_cnn's conv2, relu, norm2).
    bool relu = false;
    bool sumDx = false;  // as PoolDesc's: the backward also writes the convolution before's bias gradient
};

struct DenseDesc {
    int n = 0, in = 0, out = 0;           // x (n, in) -> y (n, out) = x W^T + b, W (out, in)
    // The ReLU after it, fused: the forward writes relu(x W^T + b) (as x > 0 ? x : 0, as the ReLU
    // would), on the GPU in the GEMM's epilogue (cuBLASLt's RELU_BIAS), so the ReLU's own pass over
    // y is not made. The backward ops take the gradient as it is: the layer passes them dy where
    // y > 0 (reluBackward), as the ReLU's backward would, or the layer after masked it already
    // (reluMaskIn below).
    bool relu = false;
    // With relu, for a dense layer after the ReLU that masks the gradient for it (reluMaskIn): the
    // forward also writes which outputs are positive into `mask` (maskBytes(), the layout of
    // ew::reluMaskBit, which every backend writes and reads), on the GPU in the same epilogue
    // (RELU_AUX_BIAS).
    bool reluMaskOut = false;
    // x is the fused ReLU output of a dense layer with reluMaskOut: backwardData writes dx already
    // masked by that layer's mask (dx = 0 where its output was not positive), on the GPU in the
    // data-gradient GEMM's epilogue (cuBLASLt's DRELU), so neither the ReLU's backward pass nor a
    // separate mask pass runs between the two GEMMs.
    bool reluMaskIn = false;

    size_t maskBytes() const { return relu && reluMaskOut ? ew::reluMaskBytes(n, out) : 0; }  // 0: none kept
};

// Batch normalisation of x (rows, c) per channel: activations (n, h, w, c) are rows = n h w of c
// contiguous channels.
struct BatchNormDesc {
    int64_t rows = 0;
    int c = 0;
    float epsilon = 1e-5f;
    // A ReLU after it, fused: forward and inference write relu(y), and the gradient calls read
    // that output (`y`) to take dy only where it is positive, so the ReLU costs no pass of its own.
    bool relu = false;
};

// A convolution plan: y = conv(x, w) + b and its two gradients (b and db are null for a plan
// without a bias, ConvDesc::bias false). As in a training step (and in
// every autograd), the backward calls after a forward read that forward's x and w, and both read
// the same dy, unchanged in between: a plan may keep what it made of them (bf16 copies).
class ConvOp {
public:
    virtual ~ConvOp() = default;
    virtual size_t workspaceBytes() const = 0;
    virtual void forward(Stream, const float* x, const float* w, const float* b, float* y, void* ws) = 0;
    // dx = conv^T(dy, w); skipped by callers for a network's first layer, and refused by a plan made
    // with ConvDesc::inputGradient false.
    virtual void backwardData(Stream, const float* dy, const float* w, float* dx, void* ws) = 0;
    // dw = x ⋆ dy, db = sum over (n, h, w) of dy; both overwritten. db is given exactly where
    // ConvDesc::writesBiasGradient(), else null (checkBiasGradientArgument).
    virtual void backwardWeights(Stream, const float* x, const float* dy, float* dw, float* db, void* ws) = 0;
};

// A pooling plan; `saved` (savedBytes) keeps what backward needs (max: the argmax; average:
// nothing). dxSum: with PoolDesc::sumDx, (c) overwritten with dx's sum per channel; else null.
// A plan that sums keeps scratch for it: one backward call at a time (as every plan is used).
class PoolOp {
public:
    virtual ~PoolOp() = default;
    virtual size_t savedBytes() const = 0;
    virtual void forward(Stream, const float* x, float* y, void* saved) = 0;
    virtual void backward(Stream, const float* x, const float* y, const float* dy, float* dx, const void* saved,
                          float* dxSum) = 0;
};

// An LRN plan; `saved` keeps the normalisers for backward; dxSum as PoolOp's.
class LrnOp {
public:
    virtual ~LrnOp() = default;
    virtual size_t savedBytes() const = 0;
    virtual void forward(Stream, const float* x, float* y, void* saved) = 0;
    virtual void backward(Stream, const float* x, const float* y, const float* dy, float* dx, const void* saved,
                          float* dxSum) = 0;
};

// An inner-product plan; the backward calls follow their forward as ConvOp's do. wBf16: w
// already rounded to bf16 (the optimiser's update wrote it: Backend::applyUpdate), which a bf16
// plan reads instead of rounding w itself; nullptr: none. An fp32 plan ignores it. mask: the
// ReLU mask (DenseDesc::maskBytes()) that forward writes with reluMaskOut, and backwardData reads
// with reluMaskIn (the layer before's, written by its forward); else unused.
class DenseOp {
public:
    virtual ~DenseOp() = default;
    virtual void forward(Stream, const float* x, const float* w, const uint16_t* wBf16, const float* b, float* y,
                         void* mask) = 0;
    virtual void backwardData(Stream, const float* dy, const float* w, const uint16_t* wBf16, float* dx,
                              const void* mask) = 0;
    virtual void backwardWeights(Stream, const float* x, const float* dy, float* dw, float* db) = 0;  // overwrites
};

// A batch-normalisation plan in the split form that synchronised batch norm needs (the kernels of
// PyTorch's SyncBatchNorm): this batch's sums, then the normalisation from sums that may be every
// tower's (the caller adds the other towers' between the two calls); likewise backward: this
// batch's gradient sums, then the input gradient from sums that may be every tower's. `count` is
// the rows the sums cover (this batch's, or every tower's). saved (savedBytes) keeps the batch's
// mean and 1/sqrt(var + eps) from forward for backward, with any scratch the plan needs.
// The sums are of x - shift, a per-channel value near the mean (the moving mean; the same on
// every tower whose sums are added): fp32 sums of x and x^2 would lose the variance to
// cancellation where the mean is large against the spread.
class BatchNormOp {
public:
    virtual ~BatchNormOp() = default;
    virtual size_t savedBytes() const = 0;
    // sums (2c) := [sum of x - shift, sum of (x - shift)^2] per channel over this batch's rows
    // (overwritten); shift (c), or nullptr for 0.
    virtual void sums(Stream, const float* x, const float* shift, float* sums, void* saved) = 0;
    // With the same shift: mean = shift + s1 / count, var = s2 / count - (s1 / count)^2 (biased,
    // as normalisation uses): y = gamma (x - mean) / sqrt(var + eps) + beta. moving (2c: means,
    // then variances; nullptr: none kept; it may hold the shift) := decay moving + (1 - decay)
    // (mean, var count / (count - 1)), the unbiased variance as TensorFlow's fused batch norm and
    // PyTorch keep it.
    virtual void forward(Stream, const float* x, const float* sums, const float* shift, double count,
                         const float* gamma, const float* beta, float* y, float* moving, float decay,
                         void* saved) = 0;
    // Inference: y = gamma (x - moving mean) / sqrt(moving var + eps) + beta (relu'd if fused).
    virtual void inference(Stream, const float* x, const float* moving, const float* gamma, const float* beta,
                           float* y) = 0;
    // dgamma (c) := sum of dy x^, dbeta (c) := sum of dy over this batch's rows, x^ = (x - mean) / sqrt(var +
    // eps) with the forward's statistics (overwritten). y: the forward's output (read where a ReLU
    // is fused: dy counts where y > 0; else ignored, and may be null).
    virtual void gradientSums(Stream, const float* x, const float* y, const float* dy, float* dgamma, float* dbeta,
                              void* saved) = 0;
    // dx = gamma / sqrt(var + eps) (dy - sumDy / count - x^ sumDyXhat / count), the sums (c each)
    // over `count` rows (dy masked by y > 0 where a ReLU is fused).
    virtual void backwardData(Stream, const float* x, const float* y, const float* dy, const float* gamma,
                              const float* sumDyXhat, const float* sumDy, double count, float* dx, void* saved) = 0;
};

// Hyper-parameters of one optimiser step; lr already includes the schedule.
struct UpdateParams {
    float lr = 0.01f;
    float momentum = 0.9f;
    float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
    int64_t step = 1;                    // 1-based, for Adam's bias correction
};

enum class UpdateRule { Sgd, Momentum, Nesterov, Adam };

class Backend : public std::enable_shared_from_this<Backend> {
public:
    virtual ~Backend() = default;

    virtual std::string name() const = 0;                  // "cpu (oneDNN 2.6.3, 2 threads)"
    virtual Device device() const = 0;
    virtual MemoryInfo memoryInfo() const = 0;             // (optional) zeros where unknown

    // Memory: allocate never initialises; tensors own memory (and hold the backend) through empty().
    virtual void* allocate(size_t bytes) = 0;
    virtual void deallocate(void* p) = 0;
    Tensor empty(const Shape& shape);
    // Host memory the device can copy from and to asynchronously (pinned on a GPU; plain on the CPU).
    virtual void* allocateHost(size_t bytes) = 0;
    virtual void deallocateHost(void* p) = 0;
    virtual AllocatorStats allocatorStats() const = 0;
    virtual void copyFromHost(Stream, void* dst, const void* hostSrc, size_t bytes) = 0;
    virtual void copyToHost(Stream, void* hostDst, const void* src, size_t bytes) = 0;
    virtual void copy(Stream, void* dst, const void* src, size_t bytes) = 0;
    // `rows` rows of `width` bytes from src (rows `srcPitch` bytes apart) to dst (`dstPitch`
    // apart), as cudaMemcpy2D: a channel concatenation's parts, (rows, c_i) into (rows, sum c_i).
    virtual void copy2d(Stream, void* dst, size_t dstPitch, const void* src, size_t srcPitch, size_t width,
                        size_t rows) = 0;

    // Queues: work on one stream runs in order; synchronize waits for all of it.
    virtual Stream createStream() = 0;
    // A queue for copies alone (no library handles or workspaces where those cost memory): it
    // moves a tower's next input while the tower's own stream computes.
    virtual Stream createCopyStream() { return createStream(); }
    virtual void destroyStream(Stream) = 0;
    virtual void synchronize(Stream) = 0;
    // Events: record marks the stream's work so far; waitEvent makes later work on another
    // stream of this backend wait for it; synchronizeEvent makes the host wait for it (and for
    // nothing after it, where synchronize would wait for the whole stream); elapsedSeconds times
    // two completed events. An event never recorded counts as completed.
    virtual Event createEvent() = 0;
    virtual void destroyEvent(Event) = 0;
    virtual void recordEvent(Event, Stream) = 0;
    virtual void waitEvent(Stream, Event) = 0;
    virtual void synchronizeEvent(Event) = 0;
    virtual double elapsedSeconds(Event start, Event end) = 0;
    // (optional) Graphs: the work enqueued on a stream between beginCapture and endCapture is
    // recorded, not run, and launchGraph replays it with the same pointers and arguments; except
    // that, where `update` is given, every optimiser update recorded in it (applyUpdate) applies
    // update's hyper-parameters (the step's learning rate, Adam's step count) at this replay and
    // those after it, so that a recorded step can hold its own update. nullptr: as recorded.
    virtual bool canCapture() const { return false; }
    virtual void beginCapture(Stream) { throw Error(name() + ": this backend cannot record graphs"); }
    virtual Graph endCapture(Stream) { throw Error(name() + ": this backend cannot record graphs"); }
    virtual void launchGraph(Graph, Stream, const UpdateParams* /*update*/) {
        throw Error(name() + ": this backend cannot record graphs");
    }
    // Ends a recording that failed part-way (an op threw inside it): whatever was recorded is
    // dropped, the stream runs work again, and nothing throws, so the caller keeps the error that
    // stopped the recording rather than endCapture's "capture invalidated" (TowerSet says it and
    // runs the step unrecorded).
    virtual void abortCapture(Stream) noexcept {}
    virtual void destroyGraph(Graph) {}

    // Plans for the heavy ops.
    virtual std::unique_ptr<ConvOp> makeConv(const ConvDesc&) = 0;
    virtual std::unique_ptr<PoolOp> makePool(const PoolDesc&) = 0;
    virtual std::unique_ptr<LrnOp> makeLrn(const LrnDesc&) = 0;
    virtual std::unique_ptr<DenseOp> makeDense(const DenseDesc&) = 0;
    virtual std::unique_ptr<BatchNormOp> makeBatchNorm(const BatchNormDesc&) = 0;

    // Element-wise and small ops.
    virtual void fill(Stream, float* x, float value, size_t n) = 0;
    virtual void scale(Stream, float* x, float a, size_t n) = 0;                     // x *= a
    virtual void axpy(Stream, float a, const float* x, float* y, size_t n) = 0;     // y += a x
    // out[0] += a * sum(x^2) (TF's l2_loss is a = 1/2).
    virtual void addSumSquares(Stream, const float* x, size_t n, float a, float* out) = 0;
    virtual void reluForward(Stream, const float* x, float* y, size_t n) = 0;
    // y = a + b, element-wise (a residual connection's sum), relu'd where `relu`; y may be a or b.
    virtual void add(Stream, const float* a, const float* b, float* y, size_t n, bool relu) = 0;
    virtual void reluBackward(Stream, const float* y, const float* dy, float* dx, size_t n) = 0;
    // Inverted dropout: keeps each element with probability keep and scales it by 1/keep.
    // The mask is a pure function of (seed, element index), so every backend draws the same one.
    virtual void dropoutForward(Stream, const float* x, float* y, float* mask, size_t n, float keep, uint64_t seed) = 0;
    virtual void dropoutBackward(Stream, const float* dy, const float* mask, float* dx, size_t n) = 0;
    // Softmax cross-entropy over logits (n, k): probs (n, k); stats[0] += sum of per-example
    // losses, stats[1] += number of correct argmax predictions.
    virtual void softmaxCrossEntropy(Stream, const float* logits, const int32_t* labels, float* probs,
                                     int n, int k, float* stats) = 0;
    // dlogits = scale * (probs - onehot(labels)); scale is 1/global batch for the mean loss.
    virtual void softmaxCrossEntropyBackward(Stream, const float* probs, const int32_t* labels,
                                             float* dlogits, int n, int k, float scale) = 0;

    // Optimiser step on flat buffers: params (n), grads (n), slots m, v (n each, as needed).
    // rounded (n bf16, or nullptr): also the updated params rounded as roundToBf16 does, in the
    // same pass, for the next step's bf16 matrix work (DenseOp's wBf16), which then reads 2 bytes
    // a weight instead of rounding 4.
    virtual void applyUpdate(Stream, UpdateRule, const UpdateParams&, float* params, const float* grads,
                             float* m, float* v, uint16_t* rounded, size_t n) = 0;
    // shadow = decay * shadow + (1 - decay) * params (the weights' moving average).
    virtual void emaUpdate(Stream, float* shadow, const float* params, float decay, size_t n) = 0;

    // bf16 as its 16 bits (the gradients' wire format, --comm-precision bf16): y := x rounded to
    // the nearest bf16 (ties to even, NaN kept, as tensor/bf16.hpp rounds on the host); and back,
    // exactly.
    virtual void roundToBf16(Stream, const float* x, uint16_t* y, size_t n) = 0;
    virtual void widenBf16(Stream, const uint16_t* x, float* y, size_t n) = 0;
};

// The number format of the matrix work (convolutions and inner products). Bf16: mixed precision
// as in PyTorch's autocast: each op rounds its inputs (activations, weights, incoming gradients)
// to bf16 and accumulates and returns fp32, so the variables, the optimiser and every other op
// stay fp32 (the master weights).
enum class MatmulPrecision { Fp32, Bf16 };

// The always-available CPU backend (oneDNN and our OpenMP loops) as device cpu:index; threads = 0 means all
// cores. CPU towers are virtual devices: cpu:1 is a backend of its own, not cpu:0. Bf16 throws
// tb::Error where cpuBf16Missing() says why it cannot run.
std::shared_ptr<Backend> makeCpuBackend(int threads = 0, int index = 0,
                                        MatmulPrecision precision = MatmulPrecision::Fp32);
// Why this processor cannot run bf16 matrix work at full speed (oneDNN 2.6 needs AVX512-BF16 or
// AMX; it would emulate it slowly otherwise), one sentence; empty where it can.
std::string cpuBf16Missing();
// oneDNN's instruction set here ("avx512_core_bf16"), as ONEDNN_MAX_CPU_ISA may cap it.
std::string cpuIsaName();

}  // namespace tb
