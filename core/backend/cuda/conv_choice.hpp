// How a convolution's cuDNN algorithm is chosen from timed results (cudnnFind*Ex's, re-timed):
// which math each precision accepts, and whether only deterministic algorithms count. Pure
// functions of the results over cuDNN's own result types, so tst_conv_choice checks the rule on
// any machine with cuDNN's header, no GPU needed.
#pragma once
#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tb::cuda {

// The activations' layout a convolution's cuDNN call reads and writes. The network's are NHWC;
// NCHW costs a transposition of x and dy on the way in and of y and dx on the way out, and spares
// the filter's (the weights are (k, c, r, s)): fp32 has well-tuned NCHW kernels where NHWC fell to
// cuDNN's generic engines on an H100, so fp32 plans time both, transpositions included.
enum class ConvLayout { Nhwc = 0, Nchw = 1 };

// One direction on cuDNN's graph API (cudnn_graph.hpp): the engine's global index and its knob
// choices, which build the same execution plan again in another run, and the plan's workspace.
struct GraphEngine {
    int64_t id = 0;
    std::vector<std::array<int64_t, 2>> knobs;  // (cudnnBackendKnobType_t, value)
    size_t workspace = 0;
};
// At most this many knob choices are kept per engine (cuDNN's engines have a handful).
constexpr int kMaxGraphKnobs = 16;

struct AlgoChoice {
    int algo = 0;
    size_t workspace = 0;
    cudnnMathType_t math = CUDNN_FMA_MATH;
    ConvLayout layout = ConvLayout::Nhwc;
    float ms = 0.f;  // its time per call as measured (Find's, or the re-timing's median)
    // The graph API, where the plan tries it (cuda_module.h's TB_GRAPH_*): not tried; the legacy
    // algorithm was faster as a step runs them (conversions and the bias included); no engine could
    // run it; or `graph`, the engine that beat it. The algorithm stays the fallback for a call whose
    // pointers are less aligned than the engine's plan was made for.
    enum class Graph { NotTried = 0, NotFaster = 1, Engine = 2, None = 3 };
    Graph graphState = Graph::NotTried;
    std::optional<GraphEngine> graph;
};

// fp32 without TF32 takes plain FMA results only (cuDNN's "default" math permits TF32 on Ampere
// and later); --tf32 true takes FMA or TF32 tensor cores, never a conversion of its fp32 inputs to
// a 16-bit format (legacy ALLOW_CONVERSION math, an engine noted DOWN_CONVERT_INPUTS: fp16's range
// or bf16's 8 bits of precision, below TF32's; PyTorch's engine filter refuses them too); bf16
// takes tensor-core results only: an engine that reads bf16 but computes on the FMA units is what
// held bf16 to 0.9x-2.2x of fp32 on an H200.
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

inline bool mathAllowed(cudnnMathType_t math, ConvRule rule) {
    switch (rule.math) {
    case ConvMath::Fma: return math == CUDNN_FMA_MATH;
    case ConvMath::TensorOp: return math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    case ConvMath::Any: return math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    }
    return false;
}

template <class Perf>
bool usable(const Perf& p, ConvRule rule) {
    if (p.status != CUDNN_STATUS_SUCCESS) return false;
    if (rule.deterministic && p.determinism != CUDNN_DETERMINISTIC) return false;
    return mathAllowed(p.mathType, rule);
}

// Whether a graph-API engine with these numerical notes (CUDNN_ATTR_ENGINE_NUMERICAL_NOTE) obeys
// the rule, as mathAllowed and CUDNN_DETERMINISTIC do for the legacy algorithms: bf16 takes engines
// on the tensor cores only, summing in fp32; fp32 without TF32 none that uses them (on fp32 data
// that is TF32) or rounds its inputs or sums down; the deterministic rule none marked nondeterministic.
inline bool engineObeys(const std::vector<cudnnBackendNumericalNote_t>& notes, ConvRule rule) {
    const auto has = [&](cudnnBackendNumericalNote_t n) {
        for (cudnnBackendNumericalNote_t m : notes)
            if (m == n) return true;
        return false;
    };
    if (rule.deterministic && has(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)) return false;
    switch (rule.math) {
    case ConvMath::TensorOp:
        return has(CUDNN_NUMERICAL_NOTE_TENSOR_CORE) && !has(CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION);
    case ConvMath::Fma:
        return !has(CUDNN_NUMERICAL_NOTE_TENSOR_CORE) && !has(CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) &&
               !has(CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION);
    case ConvMath::Any: return !has(CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS);
    }
    return false;
}

// TB_CONV_API (tests and measurements): "legacy" keeps every direction on the legacy calls,
// "graph" takes a graph-API engine wherever the rule leaves one, timed or not; unset or
// "measured" takes whichever runs a step's direction faster. Anything else is refused.
enum class ConvApi { Measured, Legacy, Graph };
inline ConvApi forcedApi(const char* env) {
    const std::string v = env ? env : "";
    if (v.empty() || v == "measured") return ConvApi::Measured;
    if (v == "legacy") return ConvApi::Legacy;
    if (v == "graph") return ConvApi::Graph;
    throw std::invalid_argument("TB_CONV_API=" + v + ": expected legacy, graph or measured");
}

// Of one direction's best choice in each layout (either may be missing: none usable, or a layout
// the plan does not try), the faster; NHWC where they tie, as it needs no transposition.
inline std::optional<AlgoChoice> faster(const std::optional<AlgoChoice>& nhwc, const std::optional<AlgoChoice>& nchw) {
    if (!nchw) return nhwc;
    if (!nhwc) return nchw;
    return nchw->ms < nhwc->ms ? nchw : nhwc;
}

// TB_CONV_LAYOUT (tests and measurements): "nhwc" holds every fp32 plan to NHWC, "nchw" every one
// that can take it to NCHW (a direction NCHW has no algorithm for stays NHWC); unset or "measured"
// lets each plan time both. Anything else is refused.
inline std::optional<ConvLayout> forcedLayout(const char* env) {
    const std::string v = env ? env : "";
    if (v.empty() || v == "measured") return std::nullopt;
    if (v == "nhwc") return ConvLayout::Nhwc;
    if (v == "nchw") return ConvLayout::Nchw;
    throw std::invalid_argument("TB_CONV_LAYOUT=" + v + ": expected nhwc, nchw or measured");
}

// Whether a choice kept from an earlier run (backend/algorithm_store.hpp: a file anyone may edit)
// still obeys the rule: its math, and under a deterministic rule its algorithm as cuDNN's
// heuristics (cudnnGet*Algorithm_v7, every algorithm listed, no timing) describe it. Whether cuDNN
// still runs it with that workspace is asked of cuDNN itself.
template <class Perf>
bool keptChoiceObeys(const AlgoChoice& kept, const Perf* heuristics, int count, ConvRule rule) {
    if (!mathAllowed(kept.math, rule)) return false;
    if (!rule.deterministic) return true;
    // The entry of the kept algorithm with the kept math, else its first (cuDNN may list an
    // algorithm once per math type).
    const Perf* entry = nullptr;
    for (int i = 0; i < count; ++i)
        if (int(heuristics[i].algo) == kept.algo && (!entry || (heuristics[i].mathType == kept.math && entry->mathType != kept.math)))
            entry = &heuristics[i];
    return entry && entry->determinism == CUDNN_DETERMINISTIC;  // (none: an algorithm cuDNN does not list)
}

// The key a convolution's choices are kept under across runs: the GPU and cuDNN (`device`, e.g.
// "NVIDIA H100 80GB HBM3, sm 9.0, 132 SMs, cuDNN 9.19.0"), the shape cuDNN sees (the input padded
// by hand where the padding was asymmetric: `paddedByHand`, which runs NHWC only) and the rule.
// A convolution without a bias ("no bias") is told apart: its forward graph differs; so is one
// never asked for its input gradient ("no input gradient"), whose choice leaves that direction out.
inline std::string choiceKey(const std::string& device, int n, int c, int h, int w, int k, int r, int s, int strideH,
                             int strideW, int padH, int padW, bool paddedByHand, bool bf16, ConvRule rule, bool bias = true,
                             bool inputGradient = true) {
    auto i = [](int v) { return std::to_string(v); };
    return device + " | conv n" + i(n) + " c" + i(c) + " " + i(h) + "x" + i(w) + " k" + i(k) + " " + i(r) + "x" + i(s) +
           " stride " + i(strideH) + "x" + i(strideW) + " pad " + (paddedByHand ? std::string("by hand") : i(padH) + "x" + i(padW)) +
           (bias ? "" : " no bias") + (inputGradient ? "" : " no input gradient") + " | " +
           (bf16 ? "bf16 tensor-op" : rule.math == ConvMath::Any ? "fp32 tf32-allowed" : "fp32 fma") +
           (rule.deterministic ? " deterministic" : " fastest");
}

// The fastest usable result of `perf` (its first `count`, sorted by time as cuDNN sorts them).
template <class Perf>
AlgoChoice choose(const Perf* perf, int count, ConvRule rule, const char* what) {
    for (int i = 0; i < count; ++i)
        if (usable(perf[i], rule)) {
            AlgoChoice a;
            a.algo = int(perf[i].algo);
            a.workspace = perf[i].memory;
            a.math = perf[i].mathType;
            a.ms = perf[i].time;
            return a;
        }
    std::string why = std::string("cuDNN has no ") + (rule.deterministic ? "deterministic " : "") +
                      (rule.math == ConvMath::TensorOp ? "tensor-core " : rule.math == ConvMath::Fma ? "plain-FP32 " : "") +
                      "algorithm for the " + what;
    throw NoUsableAlgorithm(why);
}

}  // namespace tb::cuda
