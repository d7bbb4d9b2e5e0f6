// One GEMM with a fused epilogue on cuBLASLt, planned once per shape: D (m x n) = op(A) op(B),
// column-major, A and B fp32 or bf16, D fp32, sums in fp32 (TF32 where the run allows it), and the
// epilogue's vector and ReLU mask (the bits of ew::reluMaskBit over D, leading dimension
// ew::reluMaskLd(m)):
//   CUBLASLT_EPILOGUE_BIAS    the vector (m) added to every column of D (a dense layer's bias)
//   CUBLASLT_EPILOGUE_RELU_BIAS  the same, then D = max(D, 0) (the ReLU after the layer, fused)
//   CUBLASLT_EPILOGUE_RELU_AUX_BIAS  the same, and the mask written: which of D are positive
//   CUBLASLT_EPILOGUE_DRELU   D masked by the mask read (that ReLU's backward, in the data-gradient
//                             GEMM of the dense layer after it)
//   CUBLASLT_EPILOGUE_BGRADB  the vector (n) written: op(B)'s sums over k (a bias gradient, as the
//                             dense layer's dW GEMM reads dy for it anyway)
// so that the separate bias kernel, the ReLU's passes and the ones-vector GEMV of the bias
// gradient are not launched.
// planned() is false where cuBLASLt offers no algorithm for the shape and epilogue (or the plan
// could not be made); fits() is false
// for a call whose pointers are less aligned than the algorithm was chosen for (the layers' tensors
// are slices of flat buffers, at any multiple of 4 bytes). The caller runs its unfused calls then.
#pragma once
#include <cublasLt.h>

#include <cstdint>

#include "backend/backend.hpp"

namespace tb::cuda {

class LtGemm {
public:
    // The alignment the algorithm is chosen for, in bytes: most of a model's slices have it.
    static constexpr uintptr_t kAlignment = 16;

    LtGemm() = default;
    LtGemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb, int ldc, bool bf16,
           bool tf32, cublasLtEpilogue_t epilogue);
    ~LtGemm();
    LtGemm(LtGemm&& o) noexcept { *this = static_cast<LtGemm&&>(o); }
    LtGemm& operator=(LtGemm&& o) noexcept;
    LtGemm(const LtGemm&) = delete;
    LtGemm& operator=(const LtGemm&) = delete;

    bool planned() const { return planned_; }
    bool hasMask() const { return mask_; }  // the epilogue writes or reads a ReLU mask
    static bool fits(const void* a, const void* b, const void* d, const void* vector, const void* mask = nullptr) {
        return ((uintptr_t(a) | uintptr_t(b) | uintptr_t(d) | uintptr_t(vector) | uintptr_t(mask)) &
                (kAlignment - 1)) == 0;
    }
    // On the stream's cuBLAS handle (a cuBLAS handle serves as cuBLASLt's) and its workspace. false
    // where cuBLASLt refuses the call after all (nothing is enqueued then): the plan is dropped,
    // says so once, and the caller runs its unfused calls, now and from then on. vector and mask:
    // as the epilogue reads or writes them (nullptr where it has none).
    bool run(Stream st, const void* a, const void* b, float* d, const float* vector, const void* mask = nullptr);

private:
    void release() noexcept;

    cublasLtMatmulDesc_t op_ = nullptr;
    cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
    cublasLtMatmulAlgo_t algo_{};
    bool planned_ = false;
    bool vector_ = false, mask_ = false;  // the epilogue's: a bias or its gradient; a ReLU mask
};

}  // namespace tb::cuda
