#include "backend/cuda/cuda_ops.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_stream.hpp"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/lt_gemm.hpp"
#include "backend/cuda/plan_memory.hpp"
#include "backend/elementwise_math.hpp"

namespace tb::cuda {

cudaStream_t queueOf(Stream s) {
    if (!s) throw Error("CUDA backend: a call without a stream (every GPU call names the stream it runs on)");
    return s->stream;
}

namespace {

// x (n, in) -> y (n, out) = x W^T + b with W (out, in), all row-major. In cuBLAS's column-major
// view a row-major (a, b) matrix is its (b x a) transpose, which gives the operand orders below.
// bf16: x, W and dy are rounded into the plan's copies once a step (StepCopy); cuBLAS multiplies
// bf16 on the tensor cores with fp32 sums and fp32 results. The bias rides in the GEMMs'
// epilogues (cuBLASLt, lt_gemm.hpp): added by the forward GEMM, its gradient summed by the weight
// gradient's from the dy it reads (in bf16: the rounded dy, as autocast's bias gradient is); a
// fused ReLU after the layer (DenseDesc::relu) rides in the forward's epilogue too (RELU_BIAS,
// or RELU_AUX_BIAS writing its mask for the dense layer after it, whose data-gradient GEMM masks
// dx by it in its epilogue, DRELU: DenseDesc::reluMaskIn); where cuBLASLt has no such algorithm,
// or a call's slices are less aligned, a bias kernel (and the ReLU's, and the mask's) and a GEMV.
class CudaDense final : public DenseOp {
public:
    CudaDense(const PlanContext& ctx, const DenseDesc& d)
        : owner_(ctx.owner), d_(d), bf16_(ctx.bf16),
          withBias_(forwardGemm(ctx, d, !d.relu         ? CUBLASLT_EPILOGUE_BIAS
                                        : d.reluMaskOut ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS
                                                        : CUBLASLT_EPILOGUE_RELU_BIAS)),
          withBiasGradient_(CUBLAS_OP_N, CUBLAS_OP_T, d.in, d.out, d.n, d.in, d.out, d.in, ctx.bf16, ctx.allowTf32,
                            CUBLASLT_EPILOGUE_BGRADB),
          ones_(onesVector(ctx, size_t(d.n))) {
        // Where cuBLASLt writes no mask, the ReLU still rides in the epilogue and a kernel writes
        // the mask from y (forward).
        if (d.relu && d.reluMaskOut && !withBias_.planned())
            withBias_ = forwardGemm(ctx, d, CUBLASLT_EPILOGUE_RELU_BIAS);
        // (A GEMM of k = 1, an output of one unit, has no DRELU: nvmath-python finds cuBLAS refuses it.)
        if (d.reluMaskIn && d.out > 1)
            withMask_ = LtGemm(CUBLAS_OP_N, CUBLAS_OP_N, d.in, d.n, d.out, d.in, d.out, d.in, ctx.bf16, ctx.allowTf32,
                               CUBLASLT_EPILOGUE_DRELU);
        if (!bf16_) return;
        xb_ = StepCopy(ctx.allocator, size_t(d.n) * d.in * sizeof(bf16));
        wb_ = StepCopy(ctx.allocator, size_t(d.out) * d.in * sizeof(bf16));
        dyb_ = StepCopy(ctx.allocator, size_t(d.n) * d.out * sizeof(bf16));
    }
    void forward(Stream st, const float* x, const float* w, const uint16_t* wBf16, const float* b, float* y,
                 void* mask) override {
        if (d_.maskBytes() && !mask)
            throw Error("CUDA backend: an inner product that keeps its ReLU's mask was given no memory for it");
        for (StepCopy* c : {&xb_, &wb_, &dyb_}) c->forget();
        // y^T (out x n) = W (out x in) x^T (in x n): W is stored as W^T (in x out) in column-major.
        const void* wIn = weights(st, w, wBf16);
        const void* xIn = in(st, xb_, x, size_t(d_.n) * d_.in);
        void* keep = d_.maskBytes() ? mask : nullptr;
        void* epilogueMask = withBias_.hasMask() ? keep : nullptr;
        const bool fused = withBias_.planned() && LtGemm::fits(wIn, xIn, y, b, epilogueMask) &&
                           withBias_.run(st, wIn, xIn, y, b, epilogueMask);
        if (!fused) {
            gemm(st, CUBLAS_OP_T, CUBLAS_OP_N, d_.out, d_.n, d_.in, wIn, d_.in, xIn, d_.in, y, d_.out);
            addBias(queueOf(st), y, b, size_t(d_.n), d_.out);
            if (d_.relu) reluForward(queueOf(st), y, y, size_t(d_.n) * d_.out);
        }
        if (keep && !(fused && epilogueMask)) reluMaskWrite(queueOf(st), y, d_.n, d_.out, static_cast<uint32_t*>(keep));
    }
    void backwardData(Stream st, const float* dy, const float* w, const uint16_t* wBf16, float* dx,
                      const void* mask) override {
        // dx^T (in x n) = W^T (in x out) dy^T (out x n), masked by the layer before's ReLU (reluMaskIn)
        const void* wIn = weights(st, w, wBf16);
        const void* dyIn = in(st, dyb_, dy, size_t(d_.n) * d_.out);
        if (!d_.reluMaskIn) {
            gemm(st, CUBLAS_OP_N, CUBLAS_OP_N, d_.in, d_.n, d_.out, wIn, d_.in, dyIn, d_.out, dx, d_.in);
            return;
        }
        if (!mask) throw Error("CUDA backend: an inner product that masks its input gradient was given no mask");
        if (withMask_.planned() && LtGemm::fits(wIn, dyIn, dx, nullptr, mask) &&
            withMask_.run(st, wIn, dyIn, dx, nullptr, mask))
            return;
        gemm(st, CUBLAS_OP_N, CUBLAS_OP_N, d_.in, d_.n, d_.out, wIn, d_.in, dyIn, d_.out, dx, d_.in);
        reluMaskApply(queueOf(st), dx, d_.n, d_.in, static_cast<const uint32_t*>(mask));
    }
    void backwardWeights(Stream st, const float* x, const float* dy, float* dw, float* db) override {
        // dW^T (in x out) = x^T (in x n) dy (n x out); db (out) = dy's sums over the n rows.
        const void* xIn = in(st, xb_, x, size_t(d_.n) * d_.in);
        const void* dyIn = in(st, dyb_, dy, size_t(d_.n) * d_.out);
        if (withBiasGradient_.planned() && LtGemm::fits(xIn, dyIn, dw, db) && withBiasGradient_.run(st, xIn, dyIn, dw, db))
            return;
        gemm(st, CUBLAS_OP_N, CUBLAS_OP_T, d_.in, d_.out, d_.n, xIn, d_.in, dyIn, d_.out, dw, d_.in);
        biasGradient(st, dy, ones_.f(), db, d_.n, d_.out);
    }

private:
    // y^T (out x n) = W x^T with the epilogue's bias (and ReLU, and mask).
    static LtGemm forwardGemm(const PlanContext& ctx, const DenseDesc& d, cublasLtEpilogue_t epilogue) {
        return LtGemm(CUBLAS_OP_T, CUBLAS_OP_N, d.out, d.n, d.in, d.in, d.in, d.out, ctx.bf16, ctx.allowTf32, epilogue);
    }
    // An operand as the GEMM reads it: p itself (fp32) or its bf16 copy of this step.
    const void* in(Stream st, StepCopy& copy, const float* p, size_t n) {
        if (!bf16_) return p;
        return copy.of<bf16>(p, [&](bf16* b) { roundToBf16(queueOf(st), p, b, n); });
    }
    // The weights as the GEMM reads them: rounded by the update already where given.
    const void* weights(Stream st, const float* w, const uint16_t* wBf16) {
        return bf16_ && wBf16 ? static_cast<const void*>(wBf16) : in(st, wb_, w, size_t(d_.out) * d_.in);
    }
    // c (m x n) = op(a) op(b), column-major; a and b bf16 or fp32 as the plan is, c fp32.
    void gemm(Stream st, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* a, int lda,
              const void* b, int ldb, float* c, int ldc) const {
        const float one = 1.f, zero = 0.f;
        queueOf(st);
        if (bf16_)
            TB_CUDA(cublasGemmEx(st->cublas, ta, tb, m, n, k, &one, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &zero, c,
                                 CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        else
            TB_CUDA(cublasSgemm(st->cublas, ta, tb, m, n, k, &one, static_cast<const float*>(a), lda,
                                static_cast<const float*>(b), ldb, &zero, c, ldc));
    }

    std::shared_ptr<Backend> owner_;
    DenseDesc d_;
    bool bf16_;
    LtGemm withBias_, withBiasGradient_;  // the forward and weight-gradient GEMMs with their epilogues
    LtGemm withMask_;                     // reluMaskIn: the data-gradient GEMM, masking dx
    DeviceBuffer ones_;      // (n) the unfused bias gradient's
    StepCopy xb_, wb_, dyb_; // bf16: x (n, in), W (out, in), dy (n, out)
};

// dx's channel sums where a pooling or LRN plan writes them (PoolDesc::sumDx): the chunks' partial
// sums and the count of blocks done (kernels.cuh's ChannelSums), the count zeroed once here (each
// call's last block sets it back).
class DxSums {
public:
    DxSums(const PlanContext& ctx, int64_t rows, int c, bool wanted) {
        if (!wanted) return;
        k_ = channelSumChunks(rows, c);
        const size_t partial = size_t(k_.chunks) * size_t(c) * sizeof(float);
        buf_ = DeviceBuffer(ctx.allocator, partial + sizeof(unsigned));
        k_.partial = buf_.f();
        k_.arrived = reinterpret_cast<unsigned*>(static_cast<char*>(buf_.raw()) + partial);
        TB_CUDA(cudaMemsetAsync(k_.arrived, 0, sizeof(unsigned), ctx.setup->stream));
        TB_CUDA(cudaStreamSynchronize(ctx.setup->stream));
    }
    // The sums into out (c) for one call, or null where the plan writes none.
    const ChannelSums* into(float* out) {
        if (!k_.partial) {
            if (out) throw Error("CUDA backend: a pooling or LRN plan made without sumDx was asked for dx's sums");
            return nullptr;
        }
        if (!out) throw Error("CUDA backend: a pooling or LRN plan made to sum dx was given nowhere to write the sums");
        k_.out = out;
        return &k_;
    }

private:
    DeviceBuffer buf_;
    ChannelSums k_;
};

// Max-pooling on our own kernel: cuDNN pads symmetrically only, and TF's SAME pooling pads the
// odd pixel after (e.g. 3x3 stride 2 on 24x24: 0 before, 1 after), which TF itself runs on its
// own NHWC kernel.
class CudaMaxPool final : public PoolOp {
public:
    CudaMaxPool(const PlanContext& ctx, const PoolDesc& d)
        : owner_(ctx.owner), d_(d), sums_(ctx, int64_t(d.n) * d.h * d.w, d.c, d.sumDx) {
        if (int64_t(d.n) * d.h * d.w * d.c >= INT32_MAX)
            throw Error("CUDA backend: a max-pooling input of " + std::to_string(int64_t(d.n) * d.h * d.w * d.c) +
                        " elements is too large for its 32-bit argmax");
    }
    size_t savedBytes() const override { return size_t(d_.n) * d_.outH() * d_.outW() * d_.c * sizeof(int32_t); }
    void forward(Stream st, const float* x, float* y, void* saved) override {
        maxPoolForward(queueOf(st), d_, x, y, static_cast<int32_t*>(saved));
    }
    void backward(Stream st, const float*, const float* y, const float* dy, float* dx, const void* saved,
                  float* dxSum) override {
        maxPoolBackward(queueOf(st), d_, y, dy, static_cast<const int32_t*>(saved), dx, sums_.into(dxSum));
    }

private:
    std::shared_ptr<Backend> owner_;
    PoolDesc d_;
    DxSums sums_;
};

// Average pooling on our own kernel, for the same reason (TF's asymmetric SAME padding, which
// the mean leaves out).
class CudaAvgPool final : public PoolOp {
public:
    CudaAvgPool(const PlanContext& ctx, const PoolDesc& d)
        : owner_(ctx.owner), d_(d), sums_(ctx, int64_t(d.n) * d.h * d.w, d.c, d.sumDx) {}
    size_t savedBytes() const override { return 0; }
    void forward(Stream st, const float* x, float* y, void*) override { avgPoolForward(queueOf(st), d_, x, y); }
    void backward(Stream st, const float*, const float*, const float* dy, float* dx, const void*,
                  float* dxSum) override {
        avgPoolBackward(queueOf(st), d_, dy, dx, sums_.into(dxSum));
    }

private:
    std::shared_ptr<Backend> owner_;
    PoolDesc d_;
    DxSums sums_;
};

// TF's LRN on our own kernel: TF's formula differs from cuDNN's (which divides alpha by the
// window and allows windows of at most 16 channels), and in (n, h, w, c) the window runs along
// contiguous channels, so one thread per element reads a cached neighbourhood.
class CudaLrn final : public LrnOp {
public:
    CudaLrn(const PlanContext& ctx, const LrnDesc& d)
        : owner_(ctx.owner), d_(d), sums_(ctx, int64_t(d.n) * d.h * d.w, d.c, d.sumDx) {}
    size_t savedBytes() const override { return 2 * size_t(d_.n) * d_.c * d_.h * d_.w * sizeof(float); }
    void forward(Stream st, const float* x, float* y, void* saved) override {
        lrnForward(queueOf(st), d_, x, y, static_cast<float*>(saved));
    }
    void backward(Stream st, const float* x, const float*, const float* dy, float* dx, const void* saved,
                  float* dxSum) override {
        lrnBackward(queueOf(st), d_, x, dy, dx, static_cast<const float*>(saved), sums_.into(dxSum));
    }

private:
    std::shared_ptr<Backend> owner_;
    LrnDesc d_;
    DxSums sums_;
};

// Batch normalisation on our own kernels (kernels.cuh): cuDNN's batch norm computes the batch's
// statistics and normalises in one call, which leaves no point at which synchronised batch norm
// could add the other towers' sums (PyTorch's SyncBatchNorm runs kernels of its own for the same
// reason). saved: (4c) the statistics and the forward's coefficients, the sums' partials (chunks
// x 2c), the inference's and backward's coefficients (3c).
class CudaBatchNorm final : public BatchNormOp {
public:
    CudaBatchNorm(const PlanContext& ctx, const BatchNormDesc& d)
        : owner_(ctx.owner),
          d_(d),
          partialFloats_(size_t(batchNormChunks(d.rows).chunks) * 2 * size_t(d.c)),
          inferenceScale_(ctx.allocator, size_t(d.c) * sizeof(float)) {}
    size_t savedBytes() const override { return (7 * size_t(d_.c) + partialFloats_) * sizeof(float); }
    void sums(Stream st, const float* x, const float* shift, float* out, void* saved) override {
        batchNormSums(queueOf(st), d_, x, shift, out, partial(saved));
    }
    void forward(Stream st, const float* x, const float* sums, const float* shift, double count, const float* gamma,
                 const float* beta, float* y, float* moving, float decay, void* saved) override {
        batchNormForward(queueOf(st), d_, x, sums, shift, count, gamma, beta, y, moving, decay,
                         static_cast<float*>(saved));
    }
    void inference(Stream st, const float* x, const float* moving, const float* gamma, const float* beta,
                   float* y) override {
        // Inference has no saved buffer (BatchNormOp's contract), so its scale has one of the plan's own.
        batchNormInference(queueOf(st), d_, x, moving, gamma, beta, y, inferenceScale_.f());
    }
    void gradientSums(Stream st, const float* x, const float* y, const float* dy, float* dgamma, float* dbeta,
                      void* saved) override {
        batchNormGradientSums(queueOf(st), d_, x, y, dy, static_cast<const float*>(saved), partial(saved), dgamma, dbeta);
    }
    void backwardData(Stream st, const float* x, const float* y, const float* dy, const float* gamma,
                      const float* sumDyXhat, const float* sumDy, double count, float* dx, void* saved) override {
        batchNormBackwardData(queueOf(st), d_, x, y, dy, gamma, sumDyXhat, sumDy, count, dx,
                              static_cast<const float*>(saved), coefficients(saved));
    }

private:
    float* partial(void* saved) const { return static_cast<float*>(saved) + 4 * size_t(d_.c); }
    float* coefficients(void* saved) const { return partial(saved) + partialFloats_; }

    std::shared_ptr<Backend> owner_;
    BatchNormDesc d_;
    size_t partialFloats_;
    DeviceBuffer inferenceScale_;  // (c) gamma / sqrt(moving var + eps)
};

}  // namespace

std::unique_ptr<PoolOp> makePool(const PlanContext& ctx, const PoolDesc& d) {
    if (d.mode == PoolMode::Average) {
        if (d.relu) throw Error("CUDA backend: a ReLU folds only into max pooling");
        return std::make_unique<CudaAvgPool>(ctx, d);
    }
    return std::make_unique<CudaMaxPool>(ctx, d);
}
std::unique_ptr<LrnOp> makeLrn(const PlanContext& ctx, const LrnDesc& d) { return std::make_unique<CudaLrn>(ctx, d); }
std::unique_ptr<DenseOp> makeDense(const PlanContext& ctx, const DenseDesc& d) {
    return std::make_unique<CudaDense>(ctx, d);
}
std::unique_ptr<BatchNormOp> makeBatchNorm(const PlanContext& ctx, const BatchNormDesc& d) {
    return std::make_unique<CudaBatchNorm>(ctx, d);
}

}  // namespace tb::cuda
