// tst_conv_choice: the rule that picks a convolution's cuDNN algorithm from its timed results
// (backend/cuda/conv_choice.hpp), on made-up results, without a GPU (cuDNN's header only):
//   - fp32 takes plain FMA results only, --tf32 any, bf16 tensor-core ones only
//   - deterministic (the default) skips nondeterministic results however fast; --deterministic
//     false takes the fastest
//   - failed results never count; nothing usable is a NoUsableAlgorithm naming what is missing
#include <string>

#include "backend/cuda/conv_choice.hpp"
#include "plain_check.hpp"

using tb::cuda::ConvMath;
using tb::cuda::ConvRule;

namespace {

// Results as cudnnFind*Ex gives them, fastest first: a failure, then a nondeterministic
// tensor-core algorithm (atomics), a deterministic tensor-core one, a deterministic FMA one, a
// nondeterministic FMA one.
cudnnConvolutionBwdFilterAlgoPerf_t result(int algo, cudnnStatus_t status, cudnnDeterminism_t det, cudnnMathType_t math,
                                           float ms) {
    cudnnConvolutionBwdFilterAlgoPerf_t p{};
    p.algo = cudnnConvolutionBwdFilterAlgo_t(algo);
    p.status = status;
    p.determinism = det;
    p.mathType = math;
    p.time = ms;
    p.memory = size_t(algo) * 1024;
    return p;
}
const cudnnConvolutionBwdFilterAlgoPerf_t kFound[] = {
    result(5, CUDNN_STATUS_NOT_SUPPORTED, CUDNN_DETERMINISTIC, CUDNN_TENSOR_OP_MATH, 0.01f),
    result(0, CUDNN_STATUS_SUCCESS, CUDNN_NON_DETERMINISTIC, CUDNN_TENSOR_OP_MATH, 0.10f),
    result(1, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, 0.20f),
    result(3, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC, CUDNN_FMA_MATH, 0.30f),
    result(2, CUDNN_STATUS_SUCCESS, CUDNN_NON_DETERMINISTIC, CUDNN_FMA_MATH, 0.05f * 10),
};
constexpr int kCount = int(sizeof kFound / sizeof kFound[0]);

int chosen(ConvRule rule, int count = kCount) { return tb::cuda::choose(kFound, count, rule, "filter gradient").algo; }

}  // namespace

int main() {
    // Deterministic (the default) in each precision.
    CHECK(chosen({ConvMath::Fma, true}) == 3, "fp32: the deterministic FMA algorithm, got %d", chosen({ConvMath::Fma, true}));
    CHECK(chosen({ConvMath::Any, true}) == 1, "tf32: the fastest deterministic one, got %d", chosen({ConvMath::Any, true}));
    CHECK(chosen({ConvMath::TensorOp, true}) == 1, "bf16: the deterministic tensor-core one, got %d",
          chosen({ConvMath::TensorOp, true}));
    // --deterministic false: the fastest that succeeded, of the precision's math.
    CHECK(chosen({ConvMath::Any, false}) == 0, "tf32, nondeterministic: the fastest, got %d", chosen({ConvMath::Any, false}));
    CHECK(chosen({ConvMath::TensorOp, false}) == 0, "bf16, nondeterministic: the fastest tensor-core one, got %d",
          chosen({ConvMath::TensorOp, false}));
    CHECK(chosen({ConvMath::Fma, false}) == 3, "fp32, nondeterministic: the fastest FMA one (0.30 < 0.50), got %d",
          chosen({ConvMath::Fma, false}));
    const tb::cuda::AlgoChoice c = tb::cuda::choose(kFound, kCount, {ConvMath::Any, true}, "filter gradient");
    CHECK(c.workspace == 1024 && c.math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, "the choice carries its workspace and math");
    // Nothing usable: bf16 among FMA results only (the first three left out), or only a failure.
    try {
        tb::cuda::choose(kFound + 3, 2, {ConvMath::TensorOp, true}, "filter gradient");
        CHECK(false, "bf16 took an FMA algorithm");
    } catch (const tb::cuda::NoUsableAlgorithm& e) {
        CHECK(std::string(e.what()) == "cuDNN has no deterministic tensor-core algorithm for the filter gradient", "%s",
              e.what());
    }
    try {
        tb::cuda::choose(kFound, 1, {ConvMath::Any, false}, "forward convolution");
        CHECK(false, "a failed result was taken");
    } catch (const tb::cuda::NoUsableAlgorithm& e) {
        CHECK(std::string(e.what()) == "cuDNN has no algorithm for the forward convolution", "%s", e.what());
    }
    return tbcheck::exitStatus();
}
