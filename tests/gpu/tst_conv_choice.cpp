// tst_conv_choice: the rule that picks a convolution's cuDNN algorithm from its timed results
// (backend/cuda/conv_choice.hpp), on made-up results, without a GPU (cuDNN's header only):
//   - fp32 takes plain FMA results only, --tf32 any, bf16 tensor-core ones only
//   - deterministic (the default) skips nondeterministic results however fast; --deterministic
//     false takes the fastest
//   - failed results never count; nothing usable is a NoUsableAlgorithm naming what is missing
//   - per direction the faster layout (NCHW's time includes its transpositions), NHWC on a tie;
//     TB_CONV_LAYOUT's values, a wrong one refused in one sentence
//   - graph-API engines are held to the same rule through their numerical notes; TB_CONV_API
//   - a choice kept from an earlier run is held to the same rule (math; determinism as cuDNN
//     lists its algorithm), and its key tells every shape, rule and GPU apart
#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

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

using AlgoChoiceT = tb::cuda::AlgoChoice;
AlgoChoiceT algoChoice(int algo, cudnnMathType_t math, tb::cuda::ConvLayout layout = tb::cuda::ConvLayout::Nhwc,
                       float ms = 0.f) {
    AlgoChoiceT a;
    a.algo = algo, a.math = math, a.layout = layout, a.ms = ms;
    return a;
}

int chosen(ConvRule rule, int count = kCount) { return tb::cuda::choose(kFound, count, rule, "filter gradient").algo; }

}  // namespace

int main() {
    // Deterministic (the default) in each precision.
    CHECK(chosen({ConvMath::Fma, true}) == 3, "fp32: the deterministic FMA algorithm, got %d", chosen({ConvMath::Fma, true}));
    CHECK(chosen({ConvMath::Any, true}) == 3,
          "tf32: the fastest deterministic one that converts nothing to 16 bits (not 1's ALLOW_CONVERSION), got %d",
          chosen({ConvMath::Any, true}));
    CHECK(chosen({ConvMath::TensorOp, true}) == 1, "bf16: the deterministic tensor-core one, got %d",
          chosen({ConvMath::TensorOp, true}));
    // --deterministic false: the fastest that succeeded, of the precision's math.
    CHECK(chosen({ConvMath::Any, false}) == 0, "tf32, nondeterministic: the fastest, got %d", chosen({ConvMath::Any, false}));
    CHECK(chosen({ConvMath::TensorOp, false}) == 0, "bf16, nondeterministic: the fastest tensor-core one, got %d",
          chosen({ConvMath::TensorOp, false}));
    CHECK(chosen({ConvMath::Fma, false}) == 3, "fp32, nondeterministic: the fastest FMA one (0.30 < 0.50), got %d",
          chosen({ConvMath::Fma, false}));
    const tb::cuda::AlgoChoice c = tb::cuda::choose(kFound, kCount, {ConvMath::TensorOp, true}, "filter gradient");
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
    // Layouts: per direction the faster of NHWC's and NCHW's best (NCHW's time includes its
    // transpositions); NHWC on a tie or where NCHW was not tried; TB_CONV_LAYOUT's values.
    using tb::cuda::ConvLayout;
    const AlgoChoiceT nhwc = algoChoice(1, CUDNN_FMA_MATH, ConvLayout::Nhwc, 0.30f),
                      nchw = algoChoice(6, CUDNN_FMA_MATH, ConvLayout::Nchw, 0.20f);
    CHECK(tb::cuda::faster(nhwc, nchw)->layout == ConvLayout::Nchw, "NCHW at 0.20 ms beats NHWC at 0.30");
    AlgoChoiceT slow = nchw;
    slow.ms = 0.30f;
    CHECK(tb::cuda::faster(nhwc, slow)->layout == ConvLayout::Nhwc, "a tie keeps NHWC (no transposition)");
    CHECK(tb::cuda::faster(nhwc, std::nullopt)->algo == 1 && tb::cuda::faster(std::nullopt, nchw)->algo == 6,
          "one layout alone stands");
    CHECK(!tb::cuda::forcedLayout(nullptr) && !tb::cuda::forcedLayout("") && !tb::cuda::forcedLayout("measured") &&
              tb::cuda::forcedLayout("nchw") == ConvLayout::Nchw && tb::cuda::forcedLayout("nhwc") == ConvLayout::Nhwc,
          "TB_CONV_LAYOUT: unset, measured, nchw, nhwc");
    try {
        tb::cuda::forcedLayout("NCHW");
        CHECK(false, "TB_CONV_LAYOUT=NCHW was taken");
    } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()) == "TB_CONV_LAYOUT=NCHW: expected nhwc, nchw or measured", "%s", e.what());
    }
    CHECK(tb::cuda::choose(kFound, kCount, {ConvMath::Fma, true}, "x").ms == 0.30f, "a choice carries its time");

    // Graph-API engines by their numerical notes: the same rule as the legacy algorithms'.
    using tb::cuda::engineObeys;
    using Notes = std::vector<cudnnBackendNumericalNote_t>;
    const Notes plain{}, tensorCore{CUDNN_NUMERICAL_NOTE_TENSOR_CORE},
        tensorCoreConverting{CUDNN_NUMERICAL_NOTE_TENSOR_CORE, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS},
        atomics{CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC}, winograd{CUDNN_NUMERICAL_NOTE_WINOGRAD},
        reducedSums{CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION};
    CHECK(engineObeys(plain, {ConvMath::Fma, true}) && engineObeys(winograd, {ConvMath::Fma, true}),
          "fp32 takes an engine on the FMA units");
    CHECK(!engineObeys(tensorCore, {ConvMath::Fma, true}) && !engineObeys(reducedSums, {ConvMath::Fma, true}) &&
              !engineObeys(Notes{CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS}, {ConvMath::Fma, true}),
          "fp32 without TF32 refuses tensor cores (TF32 on fp32 data), rounded inputs and reduced sums");
    CHECK(engineObeys(tensorCore, {ConvMath::Any, true}) && engineObeys(plain, {ConvMath::Any, true}), "--tf32 takes either");
    CHECK(!engineObeys(tensorCoreConverting, {ConvMath::Any, true}) &&
              !engineObeys(Notes{CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS}, {ConvMath::Any, true}),
          "--tf32 refuses an engine converting its fp32 inputs to a 16-bit format");
    CHECK(engineObeys(tensorCore, {ConvMath::TensorOp, true}) && engineObeys(tensorCoreConverting, {ConvMath::TensorOp, true}) &&
              !engineObeys(plain, {ConvMath::TensorOp, true}) &&
              !engineObeys(Notes{CUDNN_NUMERICAL_NOTE_TENSOR_CORE, CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION},
                           {ConvMath::TensorOp, true}),
          "bf16 takes tensor-core engines only, summing in fp32");
    CHECK(!engineObeys(atomics, {ConvMath::Fma, true}) && engineObeys(atomics, {ConvMath::Fma, false}) &&
              !engineObeys(Notes{CUDNN_NUMERICAL_NOTE_TENSOR_CORE, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC},
                           {ConvMath::TensorOp, true}),
          "a deterministic run refuses an engine marked nondeterministic; --deterministic false takes it");
    CHECK(tb::cuda::forcedApi(nullptr) == tb::cuda::ConvApi::Measured && tb::cuda::forcedApi("measured") == tb::cuda::ConvApi::Measured &&
              tb::cuda::forcedApi("legacy") == tb::cuda::ConvApi::Legacy && tb::cuda::forcedApi("graph") == tb::cuda::ConvApi::Graph,
          "TB_CONV_API: unset, measured, legacy, graph");
    try {
        tb::cuda::forcedApi("backend");
        CHECK(false, "TB_CONV_API=backend was taken");
    } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()) == "TB_CONV_API=backend: expected legacy, graph or measured", "%s", e.what());
    }

    // A choice kept from an earlier run (a file anyone may edit) is checked against the rule: its
    // math, and under a deterministic rule its algorithm's determinism as cuDNN lists it.
    using tb::cuda::AlgoChoice;
    using tb::cuda::keptChoiceObeys;
    CHECK(keptChoiceObeys(algoChoice(3, CUDNN_FMA_MATH), kFound, kCount, {ConvMath::Fma, true}),
          "fp32: a deterministic FMA algorithm kept is taken");
    CHECK(!keptChoiceObeys(algoChoice(3, CUDNN_TENSOR_OP_MATH), kFound, kCount, {ConvMath::Fma, true}),
          "fp32 without TF32 refuses a kept tensor-core math");
    CHECK(!keptChoiceObeys(algoChoice(1, CUDNN_FMA_MATH), kFound, kCount, {ConvMath::TensorOp, true}),
          "bf16 refuses a kept FMA math");
    CHECK(!keptChoiceObeys(algoChoice(0, CUDNN_TENSOR_OP_MATH), kFound, kCount, {ConvMath::TensorOp, true}),
          "a deterministic run refuses a kept algorithm that sums with atomics");
    CHECK(keptChoiceObeys(algoChoice(0, CUDNN_TENSOR_OP_MATH), kFound, kCount, {ConvMath::TensorOp, false}),
          "--deterministic false takes it");
    CHECK(!keptChoiceObeys(algoChoice(7, CUDNN_FMA_MATH), kFound, kCount, {ConvMath::Fma, true}),
          "an algorithm cuDNN does not list is refused");
    const cudnnConvolutionBwdFilterAlgoPerf_t twice[] = {
        result(4, CUDNN_STATUS_SUCCESS, CUDNN_NON_DETERMINISTIC, CUDNN_TENSOR_OP_MATH, 0.1f),
        result(4, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC, CUDNN_FMA_MATH, 0.2f),
    };
    CHECK(keptChoiceObeys(algoChoice(4, CUDNN_FMA_MATH), twice, 2, {ConvMath::Fma, true}) &&
              !keptChoiceObeys(algoChoice(4, CUDNN_TENSOR_OP_MATH), twice, 2, {ConvMath::TensorOp, true}),
          "an algorithm listed once per math type: its determinism with the kept math");
    // Keys: every part of the shape and the rule tells two entries apart.
    const std::string dev = "NVIDIA H100 80GB HBM3, sm 9.0, 132 SMs, cuDNN 9.19.0";
    const std::string key = tb::cuda::choiceKey(dev, 128, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2, false, false, {ConvMath::Fma, true});
    CHECK(key == dev + " | conv n128 c1 28x28 k32 5x5 stride 1x1 pad 2x2 | fp32 fma deterministic", "%s", key.c_str());
    std::set<std::string> keys{key};
    const int base[11] = {128, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2};
    for (int i = 0; i < 11; ++i) {
        int v[11];
        std::copy(base, base + 11, v);
        ++v[i];
        keys.insert(tb::cuda::choiceKey(dev, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], false,
                                        false, {ConvMath::Fma, true}));
    }
    for (auto [bf16, rule] : {std::pair{true, ConvRule{ConvMath::TensorOp, true}}, std::pair{false, ConvRule{ConvMath::Any, true}},
                              std::pair{false, ConvRule{ConvMath::Fma, false}}})
        keys.insert(tb::cuda::choiceKey(dev, 128, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2, false, bf16, rule));
    const std::string noBias =
        tb::cuda::choiceKey(dev, 128, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2, false, false, {ConvMath::Fma, true}, false);
    CHECK(noBias == dev + " | conv n128 c1 28x28 k32 5x5 stride 1x1 pad 2x2 no bias | fp32 fma deterministic", "%s",
          noBias.c_str());
    keys.insert(noBias);
    const std::string noDx =
        tb::cuda::choiceKey(dev, 128, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2, false, false, {ConvMath::Fma, true}, true, false);
    CHECK(noDx == dev + " | conv n128 c1 28x28 k32 5x5 stride 1x1 pad 2x2 no input gradient | fp32 fma deterministic",
          "%s", noDx.c_str());
    keys.insert(noDx);
    keys.insert(tb::cuda::choiceKey("NVIDIA H200, sm 9.0, 132 SMs, cuDNN 9.19.0", 128, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2, false,
                                    false, {ConvMath::Fma, true}));
    // A VALID convolution on 33x33 and a SAME one on 32x32 padded by hand to 33x33: cuDNN sees
    // one problem, but only the first may run NCHW.
    const std::string valid = tb::cuda::choiceKey(dev, 128, 8, 33, 33, 16, 2, 2, 2, 2, 0, 0, false, false, {ConvMath::Fma, true});
    const std::string byHand = tb::cuda::choiceKey(dev, 128, 8, 33, 33, 16, 2, 2, 2, 2, 0, 0, true, false, {ConvMath::Fma, true});
    CHECK(valid != byHand && byHand.find("pad by hand") != std::string::npos, "%s", byHand.c_str());
    CHECK(keys.size() == 18, "%zu distinct keys of 18", keys.size());
    return tbcheck::exitStatus();
}
