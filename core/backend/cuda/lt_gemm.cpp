#include "backend/cuda/lt_gemm.hpp"

#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_ops.hpp"
#include "backend/cuda/cuda_stream.hpp"
#include "backend/elementwise_math.hpp"

namespace tb::cuda {

namespace {

template <class T>
void setAttribute(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t what, const T& value) {
    TB_CUDA(cublasLtMatmulDescSetAttribute(op, what, &value, sizeof value));
}

// cublasLtMatmulAlgoGetHeuristic on a handle for the queries alone, one per GPU: plans are made on
// any tower's thread, and the streams' handles belong to the streams' threads. Made once and kept
// for the process (never destroyed): cublasLtDestroy synchronises the whole device, which would
// stall another tower's work on it, or break the recording of its step (ggml met the latter with
// cuBLAS handles). Queries from several threads take turns.
cublasStatus_t heuristic(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                         cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref,
                         cublasLtMatmulHeuristicResult_t* found, int* count) {
    static std::mutex mutex;
    static std::map<int, cublasLtHandle_t> handles;
    int device = 0;
    TB_CUDA(cudaGetDevice(&device));
    std::lock_guard lock(mutex);
    cublasLtHandle_t& h = handles[device];
    if (!h) TB_CUDA(cublasLtCreate(&h));
    return cublasLtMatmulAlgoGetHeuristic(h, op, a, b, d, d, pref, 1, found, count);
}

struct Preference {
    cublasLtMatmulPreference_t p = nullptr;
    Preference() {
        TB_CUDA(cublasLtMatmulPreferenceCreate(&p));
        const uint64_t workspace = kCublasWorkspaceBytes;
        TB_CUDA(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                     sizeof workspace));
        const uint32_t aligned = uint32_t(LtGemm::kAlignment);
        for (const auto what : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
            TB_CUDA(cublasLtMatmulPreferenceSetAttribute(p, what, &aligned, sizeof aligned));
    }
    ~Preference() { cublasLtMatmulPreferenceDestroy(p); }
};

const char* epilogueName(cublasLtEpilogue_t e) {
    switch (e) {
        case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
        case CUBLASLT_EPILOGUE_RELU_BIAS: return "RELU_BIAS";
        case CUBLASLT_EPILOGUE_RELU_AUX_BIAS: return "RELU_AUX_BIAS";
        case CUBLASLT_EPILOGUE_DRELU: return "DRELU";
        case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
        default: return "another epilogue";
    }
}

// Says once per process and kind of GEMM that cuBLASLt has no algorithm for its epilogue: the
// caller does without (a plainer epilogue and kernels: the dense layer's own fallbacks), the op
// check passes either way, and a kernel profile alone would show it.
void sayUnplanned(cublasLtEpilogue_t e, int m, int n, int k, bool bf16, bool tf32) {
    static std::mutex mutex;
    static std::set<std::tuple<int, int, int, int, bool, bool>> said;
    std::lock_guard lock(mutex);
    if (!said.insert({int(e), m, n, k, bf16, tf32}).second) return;
    std::fprintf(stderr, "CUDA backend: cuBLASLt offers no %s GEMM of %d x %d x %d (m x n x k, %s); the layer does "
                         "without that epilogue\n", epilogueName(e), m, n, k, bf16 ? "bf16" : tf32 ? "TF32" : "fp32");
}

}  // namespace

// Any failure to plan leaves the plan unfused (the dense layer's separate calls still work),
// rather than failing the layer.
LtGemm::LtGemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb, int ldc, bool bf16,
               bool tf32, cublasLtEpilogue_t epilogue) {
    try {
        const cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
        TB_CUDA(cublasLtMatmulDescCreate(&op_, !bf16 && tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                         CUDA_R_32F));
        setAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(ta));
        setAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(tb));
        setAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(epilogue));
        vector_ = epilogue != CUBLASLT_EPILOGUE_DRELU;
        mask_ = epilogue == CUBLASLT_EPILOGUE_RELU_AUX_BIAS || epilogue == CUBLASLT_EPILOGUE_DRELU;
        if (vector_)  // fp32 like the variables
            setAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(CUDA_R_32F));
        if (mask_) setAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ew::reluMaskLd(m));
        // The stored matrices, before op: A is (k x m) where transposed, B (n x k).
        const bool at = ta != CUBLAS_OP_N, bt = tb != CUBLAS_OP_N;
        TB_CUDA(cublasLtMatrixLayoutCreate(&a_, in, at ? k : m, at ? m : k, lda));
        TB_CUDA(cublasLtMatrixLayoutCreate(&b_, in, bt ? n : k, bt ? k : n, ldb));
        TB_CUDA(cublasLtMatrixLayoutCreate(&d_, CUDA_R_32F, m, n, ldc));
        // The heuristic reads the vector's and the mask's alignment from their pointers, and a null
        // one looks aligned to anything: stand-ins aligned to kAlignment exactly, which fits()
        // holds each call to.
        const void* standIn = reinterpret_cast<const void*>(kAlignment);
        if (vector_) setAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, standIn);
        if (mask_) setAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, standIn);
        const Preference pref;
        cublasLtMatmulHeuristicResult_t found{};
        int count = 0;
        // A refusal (NOT_SUPPORTED, or INVALID_VALUE where this cuBLASLt takes no such epilogue for
        // these types or orders) leaves the plan unfused; the kernel profile shows which ran.
        const cublasStatus_t s = heuristic(op_, a_, b_, d_, pref.p, &found, &count);
        planned_ = s == CUBLAS_STATUS_SUCCESS && count > 0 && found.state == CUBLAS_STATUS_SUCCESS;
        if (planned_) algo_ = found.algo;
    } catch (const Error&) {
        planned_ = false;
    }
    if (!planned_) {
        release();
        sayUnplanned(epilogue, m, n, k, bf16, tf32);
    }
}

LtGemm& LtGemm::operator=(LtGemm&& o) noexcept {
    if (this == &o) return *this;
    release();
    op_ = o.op_, a_ = o.a_, b_ = o.b_, d_ = o.d_, algo_ = o.algo_, planned_ = o.planned_;
    vector_ = o.vector_, mask_ = o.mask_;
    o.op_ = nullptr, o.a_ = o.b_ = o.d_ = nullptr, o.planned_ = false;
    return *this;
}

LtGemm::~LtGemm() { release(); }

void LtGemm::release() noexcept {
    if (a_) cublasLtMatrixLayoutDestroy(a_);
    if (b_) cublasLtMatrixLayoutDestroy(b_);
    if (d_) cublasLtMatrixLayoutDestroy(d_);
    if (op_) cublasLtMatmulDescDestroy(op_);
    op_ = nullptr, a_ = b_ = d_ = nullptr;
}

bool LtGemm::run(Stream st, const void* a, const void* b, float* d, const float* vector, const void* mask) {
    const cudaStream_t q = queueOf(st);
    // (The plan is its tower's: no other thread sets these between here and the call.)
    if (vector_) setAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, vector);
    if (mask_) setAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, mask);
    const float one = 1.f, zero = 0.f;
    const cublasStatus_t s = cublasLtMatmul(reinterpret_cast<cublasLtHandle_t>(st->cublas), op_, &one, a, a_, b, b_,
                                            &zero, d, d_, d, d_, &algo_, st->cublasWorkspace, kCublasWorkspaceBytes, q);
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    std::fprintf(stderr, "CUDA backend: cuBLASLt refused the fused GEMM it had planned (%s); the dense layer's "
                         "separate calls run it from now on\n", cublasGetStatusString(s));
    planned_ = false;
    release();
    return false;
}

}  // namespace tb::cuda
