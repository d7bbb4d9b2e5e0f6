#include "backend/cuda/cuda_ops.hpp"

#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_stream.hpp"
#include "backend/cuda/kernels.cuh"

namespace tb::cuda {

cudaStream_t queueOf(Stream s) {
    if (!s) throw Error("CUDA backend: a call without a stream (every GPU call names the stream it runs on)");
    return s->stream;
}

namespace {

// Device memory a plan keeps for its lifetime.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(DeviceAllocator* a, size_t bytes) : alloc_(a), p_(a->allocate(bytes)) {}
    ~DeviceBuffer() {
        if (alloc_) alloc_->deallocate(p_);
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        std::swap(alloc_, o.alloc_);
        std::swap(p_, o.p_);
        return *this;
    }
    float* f() const { return static_cast<float*>(p_); }

private:
    DeviceAllocator* alloc_ = nullptr;
    void* p_ = nullptr;
};

// A vector of ones (n) for the bias gradients, db = dY^T 1, as one cuBLAS gemv.
DeviceBuffer onesVector(const PlanContext& ctx, size_t n) {
    DeviceBuffer b(ctx.allocator, n * sizeof(float));
    fill(ctx.setup->stream, b.f(), 1.f, n);
    TB_CUDA(cudaStreamSynchronize(ctx.setup->stream));
    return b;
}

// db (k) = sum over rows of dy (rows, k), row-major: in cuBLAS's column-major view dy is a
// (k x rows) matrix, so db = dy * ones.
void biasGradient(Stream st, const float* dy, const float* ones, float* db, int rows, int k) {
    const float one = 1.f, zero = 0.f;
    TB_CUDA(cublasSgemv(st->cublas, CUBLAS_OP_N, k, rows, &one, dy, k, ones, 1, &zero, db, 1));
}

template <class T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class CudnnDesc {
public:
    CudnnDesc() { TB_CUDA(Create(&d_)); }
    ~CudnnDesc() { Destroy(d_); }
    CudnnDesc(const CudnnDesc&) = delete;
    CudnnDesc& operator=(const CudnnDesc&) = delete;
    operator T() const { return d_; }

private:
    T d_{};
};
using TensorDesc = CudnnDesc<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnDesc<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDesc =
    CudnnDesc<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

// What cuDNN's search chose for one direction of one convolution shape.
struct AlgoChoice {
    int algo = 0;
    size_t workspace = 0;
    cudnnMathType_t math = CUDNN_FMA_MATH;
};
struct ConvChoice {
    AlgoChoice fwd, bwdData, bwdFilter;
};

// The first usable result of a search sorted by time, but a deterministic algorithm when one is
// within 25% of it, so that two runs of one configuration give the same numbers. Without TF32
// allowed only plain FMA results count (cuDNN's "default" math permits TF32 on Ampere and later).
template <class Perf>
AlgoChoice choose(const Perf* perf, int count, bool allowTf32, const char* what) {
    int fastest = -1;
    for (int i = 0; i < count; ++i) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
        if (!allowTf32 && perf[i].mathType != CUDNN_FMA_MATH) continue;
        if (fastest < 0) fastest = i;
        if (perf[i].determinism == CUDNN_DETERMINISTIC && perf[i].time <= 1.25f * perf[fastest].time)
            return {int(perf[i].algo), perf[i].memory, perf[i].mathType};
    }
    if (fastest < 0) throw Error(std::string("CUDA backend: cuDNN has no usable algorithm for the ") + what);
    return {int(perf[fastest].algo), perf[fastest].memory, perf[fastest].mathType};
}

// One search per convolution shape and device, shared by every plan of that shape (towers on one
// GPU and the evaluation network would otherwise search again).
class ConvChoiceCache {
public:
    using Key = std::tuple<int, int, int, int, int, int, int, int, int, int, int, bool>;
    std::mutex mutex;
    std::map<Key, ConvChoice> choices;
};
ConvChoiceCache& choiceCache() {
    static ConvChoiceCache cache;
    return cache;
}

class CudaConv final : public ConvOp {
public:
    CudaConv(const PlanContext& ctx, const ConvDesc& d) : ctx_(ctx), d_(d) {
        symmetric_ = d.padTop == d.padBottom && d.padLeft == d.padRight;
        // Asymmetric SAME padding (even kernels, strides > 1): cuDNN pads symmetrically only, so
        // the input is padded explicitly into the workspace and cuDNN runs a VALID convolution.
        hp_ = symmetric_ ? d.h : d.h + d.padTop + d.padBottom;
        wp_ = symmetric_ ? d.w : d.w + d.padLeft + d.padRight;
        const int ph = symmetric_ ? d.padTop : 0, pw = symmetric_ ? d.padLeft : 0;
        TB_CUDA(cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, d.n, d.c, hp_, wp_));
        TB_CUDA(cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, d.n, d.k, d.outH(), d.outW()));
        // Filters in (k, r, s, c), the layout cuDNN pairs with NHWC activations; the network's
        // weights stay (k, c, r, s) and are transposed on the way in and out (tiny next to the conv).
        TB_CUDA(cudnnSetFilter4dDescriptor(w_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, d.k, d.c, d.r, d.s));
        for (cudnnConvolutionDescriptor_t c : {cudnnConvolutionDescriptor_t(fwdConv_), cudnnConvolutionDescriptor_t(bwdDataConv_),
                                               cudnnConvolutionDescriptor_t(bwdFilterConv_)})
            TB_CUDA(cudnnSetConvolution2dDescriptor(c, ph, pw, d.strideH, d.strideW, 1, 1, CUDNN_CROSS_CORRELATION,
                                                    CUDNN_DATA_FLOAT));
        int on, oc, oh, ow;
        TB_CUDA(cudnnGetConvolution2dForwardOutputDim(fwdConv_, x_, w_, &on, &oc, &oh, &ow));
        if (on != d.n || oc != d.k || oh != d.outH() || ow != d.outW())
            throw Error("CUDA backend: cuDNN's convolution output " + std::to_string(oh) + "x" + std::to_string(ow) +
                        " differs from the plan's " + std::to_string(d.outH()) + "x" + std::to_string(d.outW()));
        choice_ = search();
        TB_CUDA(cudnnSetConvolutionMathType(fwdConv_, choice_.fwd.math));
        TB_CUDA(cudnnSetConvolutionMathType(bwdDataConv_, choice_.bwdData.math));
        TB_CUDA(cudnnSetConvolutionMathType(bwdFilterConv_, choice_.bwdFilter.math));
        const size_t filter = size_t(d.k) * d.c * d.r * d.s;
        wKrsc_ = DeviceBuffer(ctx.allocator, filter * sizeof(float));
        rows_ = d.n * d.outH() * d.outW();
        ones_ = onesVector(ctx, size_t(rows_));
        padBytes_ = symmetric_ ? 0 : (size_t(d.n) * hp_ * wp_ * d.c * sizeof(float) + 255) / 256 * 256;
        cudnnBytes_ = std::max({choice_.fwd.workspace, choice_.bwdData.workspace, choice_.bwdFilter.workspace});
    }

    size_t workspaceBytes() const override { return padBytes_ + cudnnBytes_; }

    void forward(Stream st, const float* x, const float* w, const float* b, float* y, void* ws) override {
        cudaStream_t q = queueOf(st);
        filterToKrsc(q, w, wKrsc_.f(), d_.k, d_.c, d_.r, d_.s);
        const float one = 1.f, zero = 0.f;
        TB_CUDA(cudnnConvolutionForward(st->cudnn, &one, x_, input(q, x, ws), w_, wKrsc_.f(), fwdConv_,
                                        cudnnConvolutionFwdAlgo_t(choice_.fwd.algo), cudnnWs(ws), cudnnBytes_, &zero,
                                        y_, y));
        addBias(q, y, b, size_t(rows_), d_.k);
    }
    void backwardData(Stream st, const float* dy, const float* w, float* dx, void* ws) override {
        cudaStream_t q = queueOf(st);
        filterToKrsc(q, w, wKrsc_.f(), d_.k, d_.c, d_.r, d_.s);
        const float one = 1.f, zero = 0.f;
        float* out = symmetric_ ? dx : static_cast<float*>(ws);  // the padded gradient, then cropped
        TB_CUDA(cudnnConvolutionBackwardData(st->cudnn, &one, w_, wKrsc_.f(), y_, dy, bwdDataConv_,
                                             cudnnConvolutionBwdDataAlgo_t(choice_.bwdData.algo), cudnnWs(ws),
                                             cudnnBytes_, &zero, x_, out));
        if (!symmetric_) cropNhwc(q, out, dx, d_.n, d_.h, d_.w, d_.c, d_.padTop, d_.padLeft, d_.padBottom, d_.padRight);
    }
    void backwardWeights(Stream st, const float* x, const float* dy, float* dw, float* db, void* ws) override {
        cudaStream_t q = queueOf(st);
        const float one = 1.f, zero = 0.f;
        // wKrsc_ doubles as the (k, r, s, c) filter gradient: backwardData, which reads the
        // filter from it, transposes it afresh.
        TB_CUDA(cudnnConvolutionBackwardFilter(st->cudnn, &one, x_, input(q, x, ws), y_, dy, bwdFilterConv_,
                                               cudnnConvolutionBwdFilterAlgo_t(choice_.bwdFilter.algo), cudnnWs(ws),
                                               cudnnBytes_, &zero, w_, wKrsc_.f()));
        filterFromKrsc(q, wKrsc_.f(), dw, d_.k, d_.c, d_.r, d_.s);
        biasGradient(st, dy, ones_.f(), db, rows_, d_.k);
    }

private:
    // x as cuDNN sees it: itself, or padded into the front of the workspace.
    const float* input(cudaStream_t q, const float* x, void* ws) const {
        if (symmetric_) return x;
        padNhwc(q, x, static_cast<float*>(ws), d_.n, d_.h, d_.w, d_.c, d_.padTop, d_.padLeft, d_.padBottom,
                d_.padRight);
        return static_cast<const float*>(ws);
    }
    void* cudnnWs(void* ws) const { return static_cast<char*>(ws) + padBytes_; }

    ConvChoice search() {
        ConvChoiceCache& cache = choiceCache();
        const ConvChoiceCache::Key key{ctx_.device, d_.n, d_.c, hp_, wp_, d_.k, d_.r, d_.s, d_.strideH * 1000 + d_.strideW,
                                       symmetric_ ? d_.padTop : 0, symmetric_ ? d_.padLeft : 0, ctx_.allowTf32};
        std::lock_guard lock(cache.mutex);
        if (auto it = cache.choices.find(key); it != cache.choices.end()) return it->second;
        for (cudnnConvolutionDescriptor_t c : {cudnnConvolutionDescriptor_t(fwdConv_), cudnnConvolutionDescriptor_t(bwdDataConv_),
                                               cudnnConvolutionDescriptor_t(bwdFilterConv_)})
            TB_CUDA(cudnnSetConvolutionMathType(c, ctx_.allowTf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
        // Real buffers for the timed trials (made once per shape, at set-up, outside any step).
        const size_t xs = size_t(d_.n) * d_.c * hp_ * wp_, ys = size_t(d_.n) * d_.k * d_.outH() * d_.outW(),
                     ws = size_t(d_.k) * d_.c * d_.r * d_.s;
        DeviceBuffer x(ctx_.allocator, xs * 4), y(ctx_.allocator, ys * 4), w(ctx_.allocator, ws * 4);
        cudaStream_t q = ctx_.setup->stream;
        fill(q, x.f(), 0.5f, xs);
        fill(q, y.f(), 0.25f, ys);
        fill(q, w.f(), 0.125f, ws);
        // Trials may use up to a quarter of the free memory, at most 1 GiB, so that a fast
        // algorithm with a large workspace is not missed.
        size_t freeBytes = 0, total = 0;
        TB_CUDA(cudaMemGetInfo(&freeBytes, &total));
        size_t trialBytes = std::min<size_t>(size_t(1) << 30, freeBytes / 4);
        void* trial = nullptr;
        while (trialBytes > 0 && cudaMalloc(&trial, trialBytes) != cudaSuccess) {
            cudaGetLastError();
            trialBytes /= 2;
        }
        ConvChoice c;
        try {
            cudnnHandle_t h = ctx_.setup->cudnn;
            int count = 0;
            cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
            TB_CUDA(cudnnFindConvolutionForwardAlgorithmEx(h, x_, x.f(), w_, w.f(), fwdConv_, y_, y.f(),
                                                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, fwd, trial,
                                                           trialBytes));
            c.fwd = choose(fwd, count, ctx_.allowTf32, "forward convolution");
            cudnnConvolutionBwdDataAlgoPerf_t bd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
            TB_CUDA(cudnnFindConvolutionBackwardDataAlgorithmEx(h, w_, w.f(), y_, y.f(), bwdDataConv_, x_, x.f(),
                                                                CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, bd,
                                                                trial, trialBytes));
            c.bwdData = choose(bd, count, ctx_.allowTf32, "convolution's input gradient");
            cudnnConvolutionBwdFilterAlgoPerf_t bf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
            TB_CUDA(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, x_, x.f(), y_, y.f(), bwdFilterConv_, w_, w.f(),
                                                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, bf,
                                                                  trial, trialBytes));
            c.bwdFilter = choose(bf, count, ctx_.allowTf32, "convolution's filter gradient");
            TB_CUDA(cudaStreamSynchronize(q));
        } catch (...) {
            cudaFree(trial);
            throw;
        }
        cudaFree(trial);
        cache.choices.emplace(key, c);
        return c;
    }

    PlanContext ctx_;
    ConvDesc d_;
    bool symmetric_ = true;
    int hp_ = 0, wp_ = 0, rows_ = 0;
    TensorDesc x_, y_;
    FilterDesc w_;
    ConvolutionDesc fwdConv_, bwdDataConv_, bwdFilterConv_;
    ConvChoice choice_;
    DeviceBuffer wKrsc_;  // (k, r, s, c) the filter, or its gradient
    DeviceBuffer ones_;   // (rows) for the bias gradient
    size_t padBytes_ = 0, cudnnBytes_ = 0;
};

// x (n, in) -> y (n, out) = x W^T + b with W (out, in), all row-major. In cuBLAS's column-major
// view a row-major (a, b) matrix is its (b x a) transpose, which gives the operand orders below.
class CudaDense final : public DenseOp {
public:
    CudaDense(const PlanContext& ctx, const DenseDesc& d) : owner_(ctx.owner), d_(d), ones_(onesVector(ctx, size_t(d.n))) {}
    void forward(Stream st, const float* x, const float* w, const float* b, float* y) override {
        const float one = 1.f, zero = 0.f;
        // y^T (out x n) = W (out x in) x^T (in x n): W is stored as W^T (in x out) in column-major.
        TB_CUDA(cublasSgemm(st->cublas, CUBLAS_OP_T, CUBLAS_OP_N, d_.out, d_.n, d_.in, &one, w, d_.in, x, d_.in, &zero,
                            y, d_.out));
        addBias(queueOf(st), y, b, size_t(d_.n), d_.out);
    }
    void backwardData(Stream st, const float* dy, const float* w, float* dx) override {
        const float one = 1.f, zero = 0.f;
        // dx^T (in x n) = W^T (in x out) dy^T (out x n)
        TB_CUDA(cublasSgemm(st->cublas, CUBLAS_OP_N, CUBLAS_OP_N, d_.in, d_.n, d_.out, &one, w, d_.in, dy, d_.out,
                            &zero, dx, d_.in));
    }
    void backwardWeights(Stream st, const float* x, const float* dy, float* dw, float* db) override {
        const float one = 1.f, zero = 0.f;
        // dW^T (in x out) = x^T (in x n) dy (n x out)
        TB_CUDA(cublasSgemm(st->cublas, CUBLAS_OP_N, CUBLAS_OP_T, d_.in, d_.out, d_.n, &one, x, d_.in, dy, d_.out,
                            &zero, dw, d_.in));
        biasGradient(st, dy, ones_.f(), db, d_.n, d_.out);
    }

private:
    std::shared_ptr<Backend> owner_;
    DenseDesc d_;
    DeviceBuffer ones_;  // (n)
};

// Max-pooling on our own kernel: cuDNN pads symmetrically only, and TF's SAME pooling pads the
// odd pixel after (e.g. 3x3 stride 2 on 24x24: 0 before, 1 after), which TF itself runs on its
// own NHWC kernel.
class CudaMaxPool final : public PoolOp {
public:
    CudaMaxPool(const PlanContext& ctx, const PoolDesc& d) : owner_(ctx.owner), d_(d) {
        if (int64_t(d.n) * d.h * d.w * d.c >= INT32_MAX)
            throw Error("CUDA backend: a max-pooling input of " + std::to_string(int64_t(d.n) * d.h * d.w * d.c) +
                        " elements is too large for its 32-bit argmax");
    }
    size_t savedBytes() const override { return size_t(d_.n) * d_.outH() * d_.outW() * d_.c * sizeof(int32_t); }
    void forward(Stream st, const float* x, float* y, void* saved) override {
        maxPoolForward(queueOf(st), d_, x, y, static_cast<int32_t*>(saved));
    }
    void backward(Stream st, const float*, const float*, const float* dy, float* dx, const void* saved) override {
        maxPoolBackward(queueOf(st), d_, dy, static_cast<const int32_t*>(saved), dx);
    }

private:
    std::shared_ptr<Backend> owner_;
    PoolDesc d_;
};

// TF's LRN on our own kernel: TF's formula differs from cuDNN's (which divides alpha by the
// window and allows windows of at most 16 channels), and in (n, h, w, c) the window runs along
// contiguous channels, so one thread per element reads a cached neighbourhood.
class CudaLrn final : public LrnOp {
public:
    CudaLrn(const PlanContext& ctx, const LrnDesc& d) : owner_(ctx.owner), d_(d) {}
    size_t savedBytes() const override { return 2 * size_t(d_.n) * d_.c * d_.h * d_.w * sizeof(float); }
    void forward(Stream st, const float* x, float* y, void* saved) override {
        lrnForward(queueOf(st), d_, x, y, static_cast<float*>(saved));
    }
    void backward(Stream st, const float* x, const float* y, const float* dy, float* dx, const void* saved) override {
        lrnBackward(queueOf(st), d_, x, y, dy, dx, static_cast<const float*>(saved));
    }

private:
    std::shared_ptr<Backend> owner_;
    LrnDesc d_;
};

}  // namespace

std::unique_ptr<ConvOp> makeConv(const PlanContext& ctx, const ConvDesc& d) { return std::make_unique<CudaConv>(ctx, d); }
std::unique_ptr<PoolOp> makeMaxPool(const PlanContext& ctx, const PoolDesc& d) {
    return std::make_unique<CudaMaxPool>(ctx, d);
}
std::unique_ptr<LrnOp> makeLrn(const PlanContext& ctx, const LrnDesc& d) { return std::make_unique<CudaLrn>(ctx, d); }
std::unique_ptr<DenseOp> makeDense(const PlanContext& ctx, const DenseDesc& d) {
    return std::make_unique<CudaDense>(ctx, d);
}

}  // namespace tb::cuda
