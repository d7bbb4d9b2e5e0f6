// How a convolution's cuDNN algorithm is chosen from timed results (cudnnFind*Ex's, re-timed):
// which math each precision accepts, and whether only deterministic algorithms count. Pure
// functions of the results over cuDNN's own result types, so tst_conv_choice checks the rule on
// any machine with cuDNN's header, no GPU needed.
#pragma once
#include <cudnn.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace tb::cuda {

struct AlgoChoice {
    int algo = 0;
    size_t workspace = 0;
    cudnnMathType_t math = CUDNN_FMA_MATH;
};

// fp32 without TF32 takes plain FMA results only (cuDNN's "default" math permits TF32 on Ampere
// and later); --tf32 true takes any; bf16 takes tensor-core results only: an engine that reads
// bf16 but computes on the FMA units is what held bf16 to 0.9x-2.2x of fp32 on an H200.
enum class ConvMath { Fma, Any, TensorOp };

struct ConvRule {
    ConvMath math = ConvMath::Fma;
    // Only CUDNN_DETERMINISTIC algorithms (the default: two runs give the same numbers); false:
    // the fastest, those whose gradients sum with atomics included.
    bool deterministic = true;
};

// No usable result: the caller's NoAlgorithm (a bf16 plan then falls back to fp32 for that shape).
struct NoUsableAlgorithm : std::runtime_error {
    using std::runtime_error::runtime_error;
};

template <class Perf>
bool usable(const Perf& p, ConvRule rule) {
    if (p.status != CUDNN_STATUS_SUCCESS) return false;
    if (rule.deterministic && p.determinism != CUDNN_DETERMINISTIC) return false;
    switch (rule.math) {
    case ConvMath::Fma: return p.mathType == CUDNN_FMA_MATH;
    case ConvMath::TensorOp:
        return p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    case ConvMath::Any: return true;
    }
    return false;
}

// The fastest usable result of `perf` (its first `count`, sorted by time as cuDNN sorts them).
template <class Perf>
AlgoChoice choose(const Perf* perf, int count, ConvRule rule, const char* what) {
    for (int i = 0; i < count; ++i)
        if (usable(perf[i], rule)) return {int(perf[i].algo), perf[i].memory, perf[i].mathType};
    std::string why = std::string("cuDNN has no ") + (rule.deterministic ? "deterministic " : "") +
                      (rule.math == ConvMath::TensorOp ? "tensor-core " : rule.math == ConvMath::Fma ? "plain-FP32 " : "") +
                      "algorithm for the " + what;
    throw NoUsableAlgorithm(why);
}

}  // namespace tb::cuda
