// One direction of one convolution on cuDNN's graph API: the operation graph, the engines cuDNN's
// heuristics rank for it (filtered by the run's rule through each engine's numerical notes,
// conv_choice.hpp's engineObeys), and execution plans built from them for the caller to time.
// Every activation is NHWC and every filter (k, r, s, c), as the legacy calls see them; x, w and
// dy are fp32 or bf16, and the results y, dx and dw always fp32 (sums in fp32): where the legacy
// API writes bf16 results that a kernel then widens, the graph writes them widened, and the
// forward adds the bias in the same operation (a pointwise add after the convolution, which
// cuDNN's runtime-fusion engines run in the convolution's epilogue), so neither the widening nor
// the bias kernel is launched.
#pragma once
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/conv_choice.hpp"
#include "util/error.hpp"

namespace tb::cuda {

enum class ConvDirection { Forward = 0, BackwardData = 1, BackwardFilter = 2 };

// The convolution as cuDNN sees it: x (n, h, w, c), already padded where the padding was
// asymmetric (then padH = padW = 0), k filters (r, s, c), symmetric padding.
struct GraphConvShape {
    int n = 0, c = 0, h = 0, w = 0, k = 0, r = 0, s = 0, strideH = 1, strideW = 1, padH = 0, padW = 0;
    bool bf16 = false;  // x, w and dy in bf16
    bool bias = false;  // Forward only: y = conv(x, w) + b, b fp32 (k)
    int outH() const { return (h + 2 * padH - r) / strideH + 1; }
    int outW() const { return (w + 2 * padW - s) / strideW + 1; }
};

// cuDNN refused the graph, an engine or a plan: the direction runs on the legacy calls. `lasting`:
// the refusal is cuDNN's answer about the graph itself (a bad parameter, not supported), which a
// run may keep ("none") until cuDNN changes; not lasting (cuDNN's internal errors, its host memory
// exhausted, a failed execution): the next run tries again.
struct GraphRefused : Error {
    explicit GraphRefused(const std::string& what, bool lasting = true) : Error(what), lasting(lasting) {}
    bool lasting;
};
inline bool lastingRefusal(cudnnStatus_t s) {
    const int category = int(s) / 1000 * 1000;  // (CUDNN_STATUS_CATEGORY)
    return category == CUDNN_STATUS_BAD_PARAM || category == CUDNN_STATUS_NOT_SUPPORTED;
}

class BackendDescriptor;

// One execution plan, ready to run on any handle of its device; used by one thread at a time (it
// keeps the variant pack of its last call).
class GraphConvPlan {
public:
    // `owners`: the plan first, then every descriptor it was built from (cuDNN's descriptors may
    // refer to those set into them, so they live as long as the plan).
    GraphConvPlan(std::vector<std::shared_ptr<BackendDescriptor>> owners, GraphEngine engine, ConvDirection direction,
                  bool bias);
    // Forward: (a, b) = (x, w), out = y, bias b (null exactly where the graph has none);
    // BackwardData: (dy, w) -> dx; BackwardFilter: (x, dy) -> dw. On the handle's stream;
    // `workspace` of engine().workspace bytes. CUDNN_STATUS_BAD_PARAM for a bias the graph lacks
    // (or one missing) and for a variant pack cuDNN refuses.
    cudnnStatus_t run(cudnnHandle_t h, const void* a, const void* b, const float* bias, void* out, void* workspace) const;
    // Whether a call's pointers have the alignment the plan was made for (the bias needs none).
    static bool fits(const void* a, const void* b, const void* out) {
        return ((uintptr_t(a) | uintptr_t(b) | uintptr_t(out)) & (kAlignment - 1)) == 0;
    }
    const GraphEngine& engine() const { return engine_; }
    static constexpr uintptr_t kAlignment = 16;

private:
    std::vector<std::shared_ptr<BackendDescriptor>> owners_;
    GraphEngine engine_;
    ConvDirection direction_;
    bool bias_;
    // The variant pack of the last call's pointers: a step calls with the same ones every time
    // (and a recorded step is replayed without calling at all), so it is made once.
    struct Pack;
    mutable std::shared_ptr<Pack> pack_;
};

// The operation graph of one direction, built once; its plans share it.
class GraphConv {
public:
    // Throws GraphRefused where cuDNN cannot express it (the handle's device is the plan's). A null
    // handle builds and checks the graph alone, with no GPU (tst_cudnn_graph): it lists no engines.
    GraphConv(cudnnHandle_t h, const GraphConvShape& shape, ConvDirection direction);
    ~GraphConv();
    GraphConv(const GraphConv&) = delete;
    GraphConv& operator=(const GraphConv&) = delete;

    // How many engines the heuristics listed, how many of them obey the rule, how many built, and
    // how many of those want no more workspace than allowed.
    struct Counts {
        int listed = 0, obeying = 0, built = 0, fitting = 0;
    };
    // Up to `most` plans of the engines cuDNN's heuristics (mode A) rank for the graph, in their
    // order, that obey `rule`, that cuDNN builds and whose workspace is at most `maxWorkspace`
    // bytes; none where it offers none.
    std::vector<GraphConvPlan> candidates(ConvRule rule, int most, size_t maxWorkspace, Counts& counts) const;
    // The plan of a kept engine and its knobs, if it obeys `rule` and cuDNN builds it now; else
    // why not, in `why`.
    std::unique_ptr<GraphConvPlan> rebuild(const GraphEngine& kept, ConvRule rule, std::string& why) const;

private:
    // The plan of `config`, or null and why not; `owners` are the descriptors the configuration
    // was built from; *obeyed (if given) says whether its engine obeys the rule.
    std::unique_ptr<GraphConvPlan> plan(const std::shared_ptr<BackendDescriptor>& config,
                                        std::vector<std::shared_ptr<BackendDescriptor>> owners, ConvRule rule,
                                        std::string& why, bool* obeyed = nullptr) const;

    cudnnHandle_t handle_;
    ConvDirection direction_;
    bool bias_;
    std::shared_ptr<BackendDescriptor> graph_;
    std::vector<std::shared_ptr<BackendDescriptor>> parts_;  // the graph, its tensors and operations
};

}  // namespace tb::cuda
