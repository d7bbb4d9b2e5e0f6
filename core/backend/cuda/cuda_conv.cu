// Convolutions on cuDNN: each direction's algorithm and layout chosen by timing (conv_choice.hpp's
// rule), kept across runs (backend/algorithm_store.hpp) and shared by the plans of one shape.
#include <cudnn.h>
#include <nvtx3/nvToolsExt.h>  // header-only: costs nothing unless a profiler is attached

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "backend/cuda/conv_choice.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_ops.hpp"
#include "backend/cuda/cuda_stream.hpp"
#include "backend/cuda/cudnn_graph.hpp"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/plan_memory.hpp"
#include "backend/cuda/plan_trials.hpp"

namespace tb::cuda {

static_assert(kMaxGraphKnobs == TB_MAX_GRAPH_KNOBS, "a kept engine's knobs fit cuda_module.h's TbGraphEngine");

namespace {

// Prints a line to stderr the first time this process meets it.
void noteOnce(const std::string& line) {
    static std::mutex mutex;
    static std::set<std::string> said;
    std::lock_guard lock(mutex);
    if (said.insert(line).second) std::fprintf(stderr, "%s\n", line.c_str());
}

size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

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
struct ConvChoice {
    AlgoChoice fwd, bwdData, bwdFilter;
    std::string failure;  // why this shape has no algorithm in this precision (cached too)
};

// cuDNN has no algorithm for a convolution in the precision asked (no successful search result,
// or its calls answer NOT_SUPPORTED or BAD_PARAM for those descriptors): the one failure a bf16
// plan falls back to fp32 for. Anything else (memory, a fault) is an Error like any other.
// `lasting`: cuDNN's answer for the shape (nothing listed or usable in the precision), which a
// bf16 run keeps across runs (it then runs the shape in fp32); not lasting: the candidates listed
// all failed when run, which the next run tries again.
struct NoAlgorithm : Error {
    explicit NoAlgorithm(const std::string& what, bool lasting = true) : Error(what), lasting(lasting) {}
    bool lasting;
};
// A set-up call's refusal that means "not in this precision" (NoAlgorithm), where any other
// failure is an Error like any other.
inline bool refusedForPrecision(cudnnStatus_t status) {
    return status == CUDNN_STATUS_NOT_SUPPORTED || status == CUDNN_STATUS_BAD_PARAM;
}
// TB_CUDA for the set-up calls whose refusal means "not in this precision".
#define TB_CUDNN_OR_NO_ALGORITHM(call)                                                                  \
    do {                                                                                                \
        const cudnnStatus_t status_ = (call);                                                           \
        if (refusedForPrecision(status_))                                                               \
            throw NoAlgorithm(std::string("CUDA backend: ") + #call + ": " + cudnnGetErrorString(status_)); \
        TB_CUDA(status_);                                                                               \
    } while (0)

// cudnnFind*Ex times each algorithm once, too noisy on small convolutions (docs/gpus.md), so
// Find's usable candidates within 3x of its fastest (at most kCandidates) are timed again
// (medianTimes), then ranked by choose()'s rule (conv_choice.hpp). call(algo, workspaceBytes) runs
// the operation once on `q`; a candidate whose call fails is left out, and the next usable one
// beyond 3x is tried while none has run. None that runs: NoAlgorithm (a bf16 plan then runs that
// shape in fp32), never an algorithm that just failed.
template <class Perf, class Call>
AlgoChoice retimed(const Perf* perf, int count, ConvRule rule, cudnnConvolutionDescriptor_t conv, cudaStream_t q,
                   Call call, const char* what) {
    constexpr int kCandidates = 6;
    // Runs candidate p `calls` times; false if cuDNN refuses it.
    const auto run = [&](const Perf& p, int calls) {
        if (cudnnSetConvolutionMathType(conv, p.mathType) != CUDNN_STATUS_SUCCESS) return false;
        for (int k = 0; k < calls; ++k)
            if (call(int(p.algo), p.memory) != CUDNN_STATUS_SUCCESS) return false;
        return true;
    };
    std::vector<Perf> candidates;
    float fastest = -1.f;  // Find's results come sorted by its time
    for (int i = 0; i < count && int(candidates.size()) < kCandidates; ++i) {
        const Perf& p = perf[i];
        if (!usable(p, rule)) continue;
        if (fastest < 0) fastest = p.time;
        if (p.time > 3.f * fastest && !candidates.empty()) continue;
        if (run(p, 1)) candidates.push_back(p);
        else cudaGetLastError();  // (a refused call may leave its error for the next launch's check)
    }
    std::vector<std::function<bool(int)>> runs;
    for (const Perf& p : candidates) runs.push_back([&, p](int calls) { return run(p, calls); });
    const std::vector<std::optional<float>> times = medianTimes(q, runs);
    std::vector<Perf> timed;
    for (size_t j = 0; j < candidates.size(); ++j)
        if (times[j]) {
            timed.push_back(candidates[j]);
            timed.back().time = *times[j];
        }
    try {
        if (timed.empty() && fastest < 0) return choose(perf, count, rule, what);  // (says why none is usable)
        if (timed.empty())
            throw NoAlgorithm(std::string("CUDA backend: no ") + what + " algorithm of cuDNN's search ran", false);
        std::sort(timed.begin(), timed.end(), [](const Perf& a, const Perf& b) { return a.time < b.time; });
        return choose(timed.data(), int(timed.size()), rule, what);
    } catch (const NoUsableAlgorithm& e) {
        throw NoAlgorithm(std::string("CUDA backend: ") + e.what());
    }
}

// One search per convolution shape, precision and device, shared by every plan of that shape
// (towers on one GPU and the evaluation network would otherwise search again).
class ConvChoiceCache {
public:
    using Key = std::tuple<int, int, int, int, int, int, int, int, int, int, int, bool, bool, bool, bool, bool, bool>;
    std::mutex mutex;
    std::map<Key, ConvChoice> choices;
    // The graph engines TB_CONV_API=graph took, shared by the plans of a shape like the choices
    // above, never kept in the file.
    std::map<Key, ConvChoice> forcedGraph;
};
ConvChoiceCache& choiceCache() {
    static ConvChoiceCache cache;
    return cache;
}

// A convolution on cuDNN. In fp32 its operands are the caller's (padded into the workspace where
// the padding is asymmetric). In bf16 (PSEUDO_BFLOAT16: bf16 tensors, fp32 accumulation) x, the
// filter and dy are rounded into the plan's own copies once a step (StepCopy); cuDNN's results
// (y, dx, dw) come out in bf16 too (its legacy API has no bf16-in fp32-out form; PyTorch's
// autocast rounds them alike) into the front of the workspace (the stage) and are widened into
// the fp32 outputs; the bias and its gradient stay fp32.
class CudaConv final : public ConvOp {
public:
    CudaConv(const PlanContext& ctx, const ConvDesc& d) : ctx_(ctx), d_(d), bf16_(ctx.bf16) {
        symmetric_ = d.padTop == d.padBottom && d.padLeft == d.padRight;
        // Asymmetric SAME padding (even kernels, strides > 1): cuDNN pads symmetrically only, so
        // the input is padded explicitly and cuDNN runs a VALID convolution.
        hp_ = symmetric_ ? d.h : d.h + d.padTop + d.padBottom;
        wp_ = symmetric_ ? d.w : d.w + d.padLeft + d.padRight;
        xElems_ = size_t(d.n) * hp_ * wp_ * d.c;
        rows_ = d.n * d.outH() * d.outW();
        if (bf16_) {
            try {
                configure();
            } catch (const NoAlgorithm& e) {
                // cuDNN may have no bf16 kernel for a shape (a first layer of one channel, say):
                // that convolution alone runs in fp32, said once per shape, not a failed run.
                noteOnce("gpu:" + std::to_string(ctx.device) + ": no bf16 convolution for n" + std::to_string(d.n) +
                         " c" + std::to_string(d.c) + " " + std::to_string(d.h) + "x" + std::to_string(d.w) + " k" +
                         std::to_string(d.k) + " " + std::to_string(d.r) + "x" + std::to_string(d.s) + " (" + e.what() +
                         "); it runs in fp32");
                bf16_ = false;
            }
        }
        if (!bf16_) configure();
        const size_t filter = size_t(d.k) * d.c * d.r * d.s;
        wKrsc_ = DeviceBuffer(ctx.allocator, filter * sizeof(float));  // (bf16: freed below unless a graph needs it)
        if (bf16_) {
            xb_ = StepCopy(ctx.allocator, xElems_ * sizeof(bf16));
            wb_ = StepCopy(ctx.allocator, filter * sizeof(bf16));
            dyb_ = StepCopy(ctx.allocator, size_t(rows_) * d.k * sizeof(bf16));
            // (The stage takes y, dx and dw in bf16 in turn; dx only where it is ever asked for.)
            const size_t dx = d.inputGradient ? xElems_ : 0;
            stageBytes_ = aligned(std::max({size_t(rows_) * d.k, dx, filter}) * sizeof(bf16));
        } else {
            stageBytes_ = symmetric_ ? 0 : aligned(xElems_ * sizeof(float));
            if (anyNchw()) {  // x and dy transposed once a step; y and dx come out of cuDNN into the stage
                xT_ = StepCopy(ctx.allocator, xElems_ * sizeof(float));
                dyT_ = StepCopy(ctx.allocator, size_t(rows_) * d.k * sizeof(float));
                stageBytes_ = aligned(std::max(size_t(rows_) * d.k, d.inputGradient ? xElems_ : 0) * sizeof(float));
            }
        }
        if (d.writesBiasGradient()) ones_ = onesVector(ctx, size_t(rows_));
        cudnnBytes_ = std::max({choice_.fwd.workspace, choice_.bwdData.workspace, choice_.bwdFilter.workspace});
        if (symmetric_ && api_ != ConvApi::Legacy && !forced_) chooseGraphs();  // (a forced layout is legacy's)
        if (bf16_ && !graph_[2]) wKrsc_ = DeviceBuffer();  // only the graph's bf16 filter gradient needs it
        for (const auto& g : graph_)
            if (g) cudnnBytes_ = std::max(cudnnBytes_, g->engine().workspace);
    }

    size_t workspaceBytes() const override { return stageBytes_ + cudnnBytes_; }

    void forward(Stream st, const float* x, const float* w, const float* b, float* y, void* ws) override {
        cudaStream_t q = queueOf(st);
        forgetCopies();
        if (const GraphConvPlan* g = graphNow_[0]; g && (b != nullptr) == d_.bias) {  // y = conv + b in one
            const void* xin = input(q, x, ws);
            const void* filt = filter(q, w);
            if (GraphConvPlan::fits(xin, filt, y)) {
                TB_CUDA(g->run(st->cudnn, xin, filt, b, y, cudnnWs(ws)));
                return;
            }
        }
        const float one = 1.f, zero = 0.f;
        if (nchw(choice_.fwd)) {  // x to NCHW, y (NCHW) out in the stage, then to NHWC; w as it is
            float* yT = static_cast<float*>(ws);
            TB_CUDA(cudnnConvolutionForward(st->cudnn, &one, xc_, transposedInput(st, x), wc_, w, fwdConv_,
                                            cudnnConvolutionFwdAlgo_t(choice_.fwd.algo), cudnnWs(ws), cudnnBytes_,
                                            &zero, yc_, yT));
            TB_CUDA(cudnnTransformTensor(st->cudnn, &one, yc_, yT, &zero, y_, y));
            if (b) addBias(q, y, b, size_t(rows_), d_.k);
            return;
        }
        const void* xin = input(q, x, ws);
        const void* filt = filter(q, w);
        void* out = bf16_ ? ws : y;
        TB_CUDA(cudnnConvolutionForward(st->cudnn, &one, x_, xin, w_, filt, fwdConv_,
                                        cudnnConvolutionFwdAlgo_t(choice_.fwd.algo), cudnnWs(ws), cudnnBytes_, &zero,
                                        y_, out));
        if (bf16_) {
            if (b) widenAddBias(q, static_cast<const bf16*>(out), b, y, size_t(rows_), d_.k);
            else widen(q, static_cast<const bf16*>(out), y, size_t(rows_) * size_t(d_.k));
        } else if (b) {
            addBias(q, y, b, size_t(rows_), d_.k);
        }
    }
    void backwardData(Stream st, const float* dy, const float* w, float* dx, void* ws) override {
        d_.checkInputGradientCall();
        cudaStream_t q = queueOf(st);
        if (const GraphConvPlan* g = graphNow_[1]) {  // dx written in fp32 by cuDNN itself
            const void* filt = filter(q, w);
            const void* grad = gradient(q, dy);
            if (GraphConvPlan::fits(grad, filt, dx)) {
                TB_CUDA(g->run(st->cudnn, grad, filt, nullptr, dx, cudnnWs(ws)));
                return;
            }
        }
        const float one = 1.f, zero = 0.f;
        if (nchw(choice_.bwdData)) {  // dy to NCHW, dx (NCHW) out in the stage, then to NHWC
            float* dxT = static_cast<float*>(ws);
            TB_CUDA(cudnnConvolutionBackwardData(st->cudnn, &one, wc_, w, yc_, transposedGradient(st, dy), bwdDataConv_,
                                                 cudnnConvolutionBwdDataAlgo_t(choice_.bwdData.algo), cudnnWs(ws),
                                                 cudnnBytes_, &zero, xc_, dxT));
            TB_CUDA(cudnnTransformTensor(st->cudnn, &one, xc_, dxT, &zero, x_, dx));
            return;
        }
        const void* filt = filter(q, w);  // fp32: transposed afresh, as wKrsc_ also holds dw
        const void* grad = gradient(q, dy);
        void* out = bf16_ || !symmetric_ ? ws : dx;  // the (padded) gradient in the stage, then cropped or widened
        TB_CUDA(cudnnConvolutionBackwardData(st->cudnn, &one, w_, filt, y_, grad, bwdDataConv_,
                                             cudnnConvolutionBwdDataAlgo_t(choice_.bwdData.algo), cudnnWs(ws),
                                             cudnnBytes_, &zero, x_, out));
        if (bf16_) toDx(q, static_cast<const bf16*>(out), dx);
        else toDx(q, static_cast<const float*>(out), dx);
    }
    void backwardWeights(Stream st, const float* x, const float* dy, float* dw, float* db, void* ws) override {
        d_.checkBiasGradientArgument(db);
        weights(st, x, dy, dw, db, ws);
    }

private:
    // dw, and db where given (the set-up's trials leave it out: runDirection).
    void weights(Stream st, const float* x, const float* dy, float* dw, float* db, void* ws) {
        cudaStream_t q = queueOf(st);
        if (const GraphConvPlan* g = graphNow_[2]) {  // dw (k, r, s, c) in fp32 by cuDNN itself
            const void* xin = input(q, x, ws);
            const void* grad = gradient(q, dy);
            if (GraphConvPlan::fits(xin, grad, wKrsc_.raw())) {
                TB_CUDA(g->run(st->cudnn, xin, grad, nullptr, wKrsc_.f(), cudnnWs(ws)));
                filterFromKrsc(q, wKrsc_.f(), dw, d_.k, d_.c, d_.r, d_.s);
                if (db) biasGradient(st, dy, ones_.f(), db, rows_, d_.k);
                return;
            }
        }
        if (nchw(choice_.bwdFilter)) {  // x and dy in NCHW (made once a step); dw comes out (k, c, r, s)
            const float one = 1.f, zero = 0.f;
            TB_CUDA(cudnnConvolutionBackwardFilter(st->cudnn, &one, xc_, transposedInput(st, x), yc_,
                                                   transposedGradient(st, dy), bwdFilterConv_,
                                                   cudnnConvolutionBwdFilterAlgo_t(choice_.bwdFilter.algo), cudnnWs(ws),
                                                   cudnnBytes_, &zero, wc_, dw));
            if (db) biasGradient(st, dy, ones_.f(), db, rows_, d_.k);
            return;
        }
        const void* xin = input(q, x, ws);
        const void* grad = gradient(q, dy);
        // fp32: wKrsc_ doubles as the (k, r, s, c) filter gradient (backwardData transposes the
        // filter afresh); bf16: the stage.
        void* out = bf16_ ? ws : static_cast<void*>(wKrsc_.f());
        const float one = 1.f, zero = 0.f;
        TB_CUDA(cudnnConvolutionBackwardFilter(st->cudnn, &one, x_, xin, y_, grad, bwdFilterConv_,
                                               cudnnConvolutionBwdFilterAlgo_t(choice_.bwdFilter.algo), cudnnWs(ws),
                                               cudnnBytes_, &zero, w_, out));
        if (bf16_) filterFromKrsc(q, static_cast<const bf16*>(out), dw, d_.k, d_.c, d_.r, d_.s);
        else filterFromKrsc(q, wKrsc_.f(), dw, d_.k, d_.c, d_.r, d_.s);
        if (db) biasGradient(st, dy, ones_.f(), db, rows_, d_.k);
    }
    void forgetCopies() {
        for (StepCopy* c : {&xb_, &wb_, &dyb_, &xT_, &dyT_}) c->forget();
    }

    // Descriptors in this plan's precision, and its algorithms.
    void configure() {
        const cudnnDataType_t type = bf16_ ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
        const int ph = symmetric_ ? d_.padTop : 0, pw = symmetric_ ? d_.padLeft : 0;
        TB_CUDNN_OR_NO_ALGORITHM(cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NHWC, type, d_.n, d_.c, hp_, wp_));
        TB_CUDNN_OR_NO_ALGORITHM(cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NHWC, type, d_.n, d_.k, d_.outH(), d_.outW()));
        // Filters in (k, r, s, c), the layout cuDNN pairs with NHWC activations; the network's
        // weights stay (k, c, r, s) and are transposed on the way in and out (tiny next to the conv).
        TB_CUDNN_OR_NO_ALGORITHM(cudnnSetFilter4dDescriptor(w_, type, CUDNN_TENSOR_NHWC, d_.k, d_.c, d_.r, d_.s));
        if (nchwPossible()) {  // the same shapes in NCHW, the filter (k, c, r, s) as the network keeps it
            TB_CUDA(cudnnSetTensor4dDescriptor(xc_, CUDNN_TENSOR_NCHW, type, d_.n, d_.c, hp_, wp_));
            TB_CUDA(cudnnSetTensor4dDescriptor(yc_, CUDNN_TENSOR_NCHW, type, d_.n, d_.k, d_.outH(), d_.outW()));
            TB_CUDA(cudnnSetFilter4dDescriptor(wc_, type, CUDNN_TENSOR_NCHW, d_.k, d_.c, d_.r, d_.s));
        }
        for (cudnnConvolutionDescriptor_t c : convs())  // fp32 accumulation in both precisions
            TB_CUDNN_OR_NO_ALGORITHM(cudnnSetConvolution2dDescriptor(c, ph, pw, d_.strideH, d_.strideW, 1, 1, CUDNN_CROSS_CORRELATION,
                                                    CUDNN_DATA_FLOAT));
        int on, oc, oh, ow;
        TB_CUDNN_OR_NO_ALGORITHM(cudnnGetConvolution2dForwardOutputDim(fwdConv_, x_, w_, &on, &oc, &oh, &ow));
        if (on != d_.n || oc != d_.k || oh != d_.outH() || ow != d_.outW())
            throw Error("CUDA backend: cuDNN's convolution output " + std::to_string(oh) + "x" + std::to_string(ow) +
                        " differs from the plan's " + std::to_string(d_.outH()) + "x" + std::to_string(d_.outW()));
        choice_ = search();
        TB_CUDA(cudnnSetConvolutionMathType(fwdConv_, choice_.fwd.math));
        TB_CUDA(cudnnSetConvolutionMathType(bwdDataConv_, choice_.bwdData.math));
        TB_CUDA(cudnnSetConvolutionMathType(bwdFilterConv_, choice_.bwdFilter.math));
    }
    std::array<cudnnConvolutionDescriptor_t, 3> convs() const { return {fwdConv_, bwdDataConv_, bwdFilterConv_}; }

    // NCHW is tried for fp32 plans without explicit padding (conv_choice.hpp's ConvLayout), unless
    // TB_CONV_LAYOUT holds every plan to NHWC.
    bool nchwPossible() const { return !bf16_ && symmetric_ && forced_ != ConvLayout::Nhwc; }
    static bool nchw(const AlgoChoice& a) { return a.layout == ConvLayout::Nchw; }
    bool anyNchw() const { return nchw(choice_.fwd) || nchw(choice_.bwdData) || nchw(choice_.bwdFilter); }
    // x (NHWC) in NCHW, and dy (NHWC) in NCHW: made by the first call of a step that reads them.
    const float* transposedInput(Stream st, const float* x) {
        return xT_.of<float>(x, [&](float* t) {
            const float one = 1.f, zero = 0.f;
            TB_CUDA(cudnnTransformTensor(st->cudnn, &one, x_, x, &zero, xc_, t));
        });
    }
    const float* transposedGradient(Stream st, const float* dy) {
        return dyT_.of<float>(dy, [&](float* t) {
            const float one = 1.f, zero = 0.f;
            TB_CUDA(cudnnTransformTensor(st->cudnn, &one, y_, dy, &zero, yc_, t));
        });
    }

    // x as cuDNN sees it. bf16: rounded (and padded) into xb_; fp32: itself, or padded into the stage.
    const void* input(cudaStream_t q, const float* x, void* ws) {
        if (bf16_)
            return xb_.of<bf16>(x, [&](bf16* xb) {
                if (symmetric_) roundToBf16(q, x, xb, xElems_);
                else padNhwc(q, x, xb, d_.n, d_.h, d_.w, d_.c, d_.padTop, d_.padLeft, d_.padBottom, d_.padRight);
            });
        if (symmetric_) return x;
        padNhwc(q, x, static_cast<float*>(ws), d_.n, d_.h, d_.w, d_.c, d_.padTop, d_.padLeft, d_.padBottom,
                d_.padRight);
        return ws;
    }
    // The filter in (k, r, s, c), rounded to bf16 or not.
    const void* filter(cudaStream_t q, const float* w) {
        if (bf16_) return wb_.of<bf16>(w, [&](bf16* wb) { filterToKrsc(q, w, wb, d_.k, d_.c, d_.r, d_.s); });
        filterToKrsc(q, w, wKrsc_.f(), d_.k, d_.c, d_.r, d_.s);
        return wKrsc_.f();
    }
    const void* gradient(cudaStream_t q, const float* dy) {
        if (!bf16_) return dy;
        return dyb_.of<bf16>(dy, [&](bf16* b) { roundToBf16(q, dy, b, size_t(rows_) * d_.k); });
    }
    // dx from cuDNN's gradient `out`: cropped where the input was padded, widened from bf16
    // (fp32 without padding: cuDNN wrote dx itself).
    template <class T>
    void toDx(cudaStream_t q, const T* out, float* dx) const {
        if (!symmetric_) cropNhwc(q, out, dx, d_.n, d_.h, d_.w, d_.c, d_.padTop, d_.padLeft, d_.padBottom, d_.padRight);
        else if constexpr (std::is_same_v<T, bf16>) widen(q, out, dx, xElems_);
    }
    void* cudnnWs(void* ws) const { return static_cast<char*>(ws) + stageBytes_; }

    // This shape's algorithms: this process's search of it, else the choice kept from an earlier
    // run (backend/algorithm_store.hpp) where cuDNN still runs it under the rule, else a search,
    // which is kept for the next run. A bf16 shape without an algorithm is remembered alike.
    ConvChoice search() {
        // Named for profilers: Nsight Compute leaves the search's timed trials out with
        // --nvtx --nvtx-exclude "tb: cuDNN algorithm search/" (profiled, they are slowed, and the
        // search picks other algorithms than an unprofiled run would).
        struct NvtxRange {
            NvtxRange() { nvtxRangePushA("tb: cuDNN algorithm search"); }
            ~NvtxRange() { nvtxRangePop(); }
        } range;
        ConvChoiceCache& cache = choiceCache();
        cacheKey_ = {ctx_.device, d_.n, d_.c, hp_, wp_, d_.k, d_.r, d_.s, d_.strideH * 1000 + d_.strideW,
                     symmetric_ ? d_.padTop : 0, symmetric_ ? d_.padLeft : 0, ctx_.allowTf32, bf16_,
                     ctx_.deterministic, symmetric_, d_.bias, d_.inputGradient};  // (padded by hand: no NCHW)
        const ConvChoiceCache::Key& key = cacheKey_;
        rule_ = {bf16_ ? ConvMath::TensorOp : ctx_.allowTf32 ? ConvMath::Any : ConvMath::Fma, ctx_.deterministic};
        const ConvRule rule = rule_;
        storeKey_ = choiceKey(ctx_.deviceKey, d_.n, d_.c, hp_, wp_, d_.k, d_.r, d_.s, d_.strideH, d_.strideW,
                              symmetric_ ? d_.padTop : 0, symmetric_ ? d_.padLeft : 0, !symmetric_, bf16_, rule, d_.bias,
                              d_.inputGradient);
        const std::string& storeKey = storeKey_;
        std::lock_guard lock(cache.mutex);
        if (auto it = cache.choices.find(key); it != cache.choices.end()) {
            if (!it->second.failure.empty()) throw NoAlgorithm(it->second.failure);
            return it->second;
        }
        if (std::optional<ConvChoice> kept = forced_ ? std::nullopt : keptChoice(storeKey, rule)) {
            cache.choices.emplace(key, *kept);
            if (!kept->failure.empty()) throw NoAlgorithm(kept->failure);
            return *kept;
        }
        ConvChoice c;
        try {
            c = timedChoice(rule);
        } catch (const NoAlgorithm& e) {
            if (bf16_) {  // remembered, so that the other plans of this shape do not search again
                c.failure = e.what();
                cache.choices.emplace(key, c);
                if (!forced_ && e.lasting) keep(storeKey, c);  // (across runs: cuDNN's answer only)
            }
            throw;
        }
        cache.choices.emplace(key, c);
        if (!forced_) keep(storeKey, c);  // (a layout held by TB_CONV_LAYOUT is no choice to keep)
        return c;
    }

    // The choice kept for `storeKey` by an earlier run, if cuDNN still runs it under `rule` (its
    // workspaces as cuDNN gives them now); otherwise nothing, said once, and the shape is searched.
    std::optional<ConvChoice> keptChoice(const std::string& storeKey, ConvRule rule) {
        const TbAlgorithmStore* store = ctx_.algorithms;
        TbConvChoice t{};
        if (!store || !store->find(store->context, storeKey.c_str(), &t)) return std::nullopt;
        ConvChoice c;
        c.failure.assign(t.failure, strnlen(t.failure, sizeof t.failure));
        if (!c.failure.empty() && bf16_) return c;  // (fp32 shapes do not fall back: none is kept)
        const auto from = [](const TbConvAlgorithm& a) {
            AlgoChoice c;
            c.algo = a.algorithm;
            c.workspace = size_t(a.workspaceBytes);
            c.math = cudnnMathType_t(a.math);
            c.layout = a.layout == 1 ? ConvLayout::Nchw : ConvLayout::Nhwc;
            c.graphState = a.graph.state >= TB_GRAPH_NOT_TRIED && a.graph.state <= TB_GRAPH_NONE
                               ? AlgoChoice::Graph(a.graph.state)
                               : AlgoChoice::Graph::NotTried;
            if (a.graph.state == TB_GRAPH_ENGINE) {
                GraphEngine g;
                g.id = a.graph.engine;
                for (int i = 0; i < std::clamp(a.graph.knobCount, 0, TB_MAX_GRAPH_KNOBS); ++i)
                    g.knobs.push_back({a.graph.knobs[i][0], a.graph.knobs[i][1]});
                g.workspace = size_t(a.graph.workspaceBytes);
                c.graph = g;
            }
            return c;
        };
        c.fwd = from(t.forward);
        // (A plan never asked for dx kept none: whatever the file holds there is not read.)
        if (d_.inputGradient) c.bwdData = from(t.backwardData);
        c.bwdFilter = from(t.backwardFilter);
        cudnnHandle_t h = ctx_.setup->cudnn;
        std::string why = c.failure.empty() ? std::string() : "record a failure, which only bf16 shapes have";
        if (why.empty() && !nchwPossible() && (nchw(c.fwd) || nchw(c.bwdData) || nchw(c.bwdFilter)))
            why = "name NCHW, which this plan does not run";
        // The descriptors of the layout each direction runs in.
        const auto xd = [&](const AlgoChoice& a) -> cudnnTensorDescriptor_t { return nchw(a) ? xc_ : x_; };
        const auto yd = [&](const AlgoChoice& a) -> cudnnTensorDescriptor_t { return nchw(a) ? yc_ : y_; };
        const auto wd = [&](const AlgoChoice& a) -> cudnnFilterDescriptor_t { return nchw(a) ? wc_ : w_; };
        if (why.empty())
            why = keptProblem<cudnnConvolutionFwdAlgoPerf_t>(
            c.fwd, rule, fwdConv_, "forward convolution", CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
            [&](int n, int* count, cudnnConvolutionFwdAlgoPerf_t* perf) {
                return cudnnGetConvolutionForwardAlgorithm_v7(h, xd(c.fwd), wd(c.fwd), fwdConv_, yd(c.fwd), n, count, perf);
            },
            [&](int algo, size_t* bytes) {
                return cudnnGetConvolutionForwardWorkspaceSize(h, xd(c.fwd), wd(c.fwd), fwdConv_, yd(c.fwd),
                                                               cudnnConvolutionFwdAlgo_t(algo), bytes);
            });
        if (why.empty() && d_.inputGradient)  // (else nothing is kept for it: timedChoice)
            why = keptProblem<cudnnConvolutionBwdDataAlgoPerf_t>(
                c.bwdData, rule, bwdDataConv_, "convolution's input gradient", CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                [&](int n, int* count, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
                    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd(c.bwdData), yd(c.bwdData), bwdDataConv_,
                                                                       xd(c.bwdData), n, count, perf);
                },
                [&](int algo, size_t* bytes) {
                    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd(c.bwdData), yd(c.bwdData), bwdDataConv_,
                                                                        xd(c.bwdData),
                                                                        cudnnConvolutionBwdDataAlgo_t(algo), bytes);
                });
        if (why.empty())
            why = keptProblem<cudnnConvolutionBwdFilterAlgoPerf_t>(
                c.bwdFilter, rule, bwdFilterConv_, "convolution's filter gradient", CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                [&](int n, int* count, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
                    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd(c.bwdFilter), yd(c.bwdFilter),
                                                                         bwdFilterConv_, wd(c.bwdFilter), n, count, perf);
                },
                [&](int algo, size_t* bytes) {
                    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xd(c.bwdFilter), yd(c.bwdFilter),
                                                                          bwdFilterConv_, wd(c.bwdFilter),
                                                                          cudnnConvolutionBwdFilterAlgo_t(algo), bytes);
                });
        if (why.empty()) return c;
        noteOnce("gpu:" + std::to_string(ctx_.device) + ": the cuDNN algorithms kept for \"" + storeKey + "\" " + why +
                 "; that shape is searched again");
        return std::nullopt;
    }
    // Why one direction of a kept choice cannot run as it stands ("" when it can; its workspace is
    // then cuDNN's answer). Leaves the descriptor's math as the choice's.
    template <class Perf, class Heuristics, class WorkspaceSize>
    static std::string keptProblem(AlgoChoice& a, ConvRule rule, cudnnConvolutionDescriptor_t conv, const char* what,
                                   int algorithms, Heuristics heuristics, WorkspaceSize workspaceSize) {
        if (cudnnSetConvolutionMathType(conv, a.math) != CUDNN_STATUS_SUCCESS)
            return std::string("name a math cuDNN refuses for the ") + what;
        std::vector<Perf> listed(static_cast<size_t>(algorithms));
        int count = 0;
        if (heuristics(algorithms, &count, listed.data()) != CUDNN_STATUS_SUCCESS)
            return std::string("cannot be checked: cuDNN lists no algorithm for the ") + what;
        if (!keptChoiceObeys(a, listed.data(), count, rule))
            return std::string("break the run's rule (math or determinism) for the ") + what;
        size_t bytes = 0;
        if (const cudnnStatus_t st = workspaceSize(a.algo, &bytes); st != CUDNN_STATUS_SUCCESS)
            return std::string("are refused by cuDNN for the ") + what + " (" + cudnnGetErrorString(st) + ")";
        a.workspace = bytes;
        return {};
    }
    // `c` kept for the next run under `storeKey` (nothing where the program keeps no choices).
    void keep(const std::string& storeKey, const ConvChoice& c) const {
        const TbAlgorithmStore* store = ctx_.algorithms;
        if (!store) return;
        TbConvChoice t{};
        const auto to = [](const AlgoChoice& a) {
            TbConvAlgorithm t{a.algo, int(a.math), nchw(a) ? 1 : 0, uint64_t(a.workspace), {}};
            t.graph.state = int(a.graphState);
            if (a.graph) {
                t.graph.engine = a.graph->id;
                t.graph.knobCount = int(a.graph->knobs.size());  // (at most kMaxGraphKnobs: cudnn_graph.cpp)
                for (size_t i = 0; i < a.graph->knobs.size(); ++i)
                    t.graph.knobs[i][0] = a.graph->knobs[i][0], t.graph.knobs[i][1] = a.graph->knobs[i][1];
                t.graph.workspaceBytes = uint64_t(a.graph->workspace);
            }
            return t;
        };
        t.forward = to(c.fwd);
        t.backwardData = to(c.bwdData);
        t.backwardFilter = to(c.bwdFilter);
        std::strncpy(t.failure, c.failure.c_str(), sizeof t.failure - 1);
        store->remember(store->context, storeKey.c_str(), &t);
    }

    // Find's candidates for each direction, re-timed (retimed()), on buffers made for the trials:
    // in NHWC, and where the plan may (nchwPossible()) in NCHW with the transpositions timed in each
    // call; per direction the faster layout (conv_choice.hpp's faster()).
    ConvChoice timedChoice(ConvRule rule) {
        const bool tryNchw = nchwPossible();
        const Trials t(*this, tryNchw);
        cudaStream_t q = ctx_.setup->stream;
        // Each layout's search starts from the rule's math (a re-timing leaves its last candidate's).
        const auto ruleMath = [&](cudnnConvolutionDescriptor_t conv) {
            TB_CUDA(cudnnSetConvolutionMathType(conv, rule.math == ConvMath::Fma ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
        };
        ConvChoice c;
        cudnnHandle_t h = ctx_.setup->cudnn;
        const float one = 1.f, zero = 0.f;
        // x and y in a layout: the network's buffers (NHWC), or their NCHW copies.
        const auto xIn = [&](ConvLayout l) { return l == ConvLayout::Nchw ? t.xt.raw() : t.x.raw(); };
        const auto yIn = [&](ConvLayout l) { return l == ConvLayout::Nchw ? t.yt.raw() : t.y.raw(); };
        const auto xd = [&](ConvLayout l) -> cudnnTensorDescriptor_t { return l == ConvLayout::Nchw ? xc_ : x_; };
        const auto yd = [&](ConvLayout l) -> cudnnTensorDescriptor_t { return l == ConvLayout::Nchw ? yc_ : y_; };
        const auto wd = [&](ConvLayout l) -> cudnnFilterDescriptor_t { return l == ConvLayout::Nchw ? wc_ : w_; };
        // NHWC <-> NCHW as a step does it (a no-op in NHWC).
        const auto toNchw = [&](ConvLayout l, cudnnTensorDescriptor_t from, const DeviceBuffer& a,
                                cudnnTensorDescriptor_t to, const DeviceBuffer& b) {
            return l == ConvLayout::Nhwc ? CUDNN_STATUS_SUCCESS
                                         : cudnnTransformTensor(h, &one, from, a.raw(), &zero, to, b.raw());
        };
        const auto then = [](cudnnStatus_t a, auto b) { return a == CUDNN_STATUS_SUCCESS ? b() : a; };
        // Where the layouts are compared, NHWC's calls also run the filter's transposition a step
        // makes for each (filter(), and the filter gradient's back), which NCHW spares.
        const auto toKrsc = [&](ConvLayout l) {
            if (l == ConvLayout::Nhwc && tryNchw) filterToKrsc(q, t.wk.f(), t.w.f(), d_.k, d_.c, d_.r, d_.s);
        };
        const auto fromKrsc = [&](ConvLayout l) {
            if (l == ConvLayout::Nhwc && tryNchw) filterFromKrsc(q, t.w.f(), t.wk.f(), d_.k, d_.c, d_.r, d_.s);
            return CUDNN_STATUS_SUCCESS;
        };
        if (tryNchw) {  // the NCHW copies hold x's and y's values from the first Find on
            TB_CUDNN_OR_NO_ALGORITHM(cudnnTransformTensor(h, &one, x_, t.x.raw(), &zero, xc_, t.xt.raw()));
            TB_CUDNN_OR_NO_ALGORITHM(cudnnTransformTensor(h, &one, y_, t.y.raw(), &zero, yc_, t.yt.raw()));
        }
        // One direction: in each layout Find's candidates (find(l, n, &count, perf)), re-timed
        // with call(l, algo, workspaceBytes), which transposes where a step would.
        const auto direction = [&](auto* perfType, cudnnConvolutionDescriptor_t conv, int algorithms, const char* what,
                                   auto find, auto call) {
            // Each layout's winner, run as its re-timing ran it; times both side by side.
            const auto runOf = [&](const AlgoChoice& a) -> std::function<bool(int)> {
                return [&, a](int calls) {
                    if (cudnnSetConvolutionMathType(conv, a.math) != CUDNN_STATUS_SUCCESS) return false;
                    for (int k = 0; k < calls; ++k)
                        if (call(a.layout, a.algo, a.workspace) != CUDNN_STATUS_SUCCESS) return false;
                    return true;
                };
            };
            const auto both = [&](std::optional<AlgoChoice>& nhwc, std::optional<AlgoChoice>& nchw) {
                const std::vector<std::optional<float>> times = medianTimes(q, {runOf(*nhwc), runOf(*nchw)});
                for (auto [choice, time] : {std::pair{&nhwc, times[0]}, std::pair{&nchw, times[1]}}) {
                    if (time) (*choice)->ms = *time;
                    else choice->reset();
                }
            };
            return bestLayout(tryNchw, [&](ConvLayout l) {
                std::vector<std::remove_pointer_t<decltype(perfType)>> perf(static_cast<size_t>(algorithms));
                int count = 0;
                ruleMath(conv);
                const cudnnStatus_t found = find(l, algorithms, &count, perf.data());
                if (refusedForPrecision(found))
                    throw NoAlgorithm(std::string("CUDA backend: cuDNN's search for the ") + what + ": " +
                                      cudnnGetErrorString(found));
                TB_CUDA(found);
                AlgoChoice a = retimed(perf.data(), count, rule, conv, q,
                                       [&](int algo, size_t bytes) { return call(l, algo, bytes); }, what);
                a.layout = l;
                return a;
            }, both);
        };
        c.fwd = direction(
            static_cast<cudnnConvolutionFwdAlgoPerf_t*>(nullptr), fwdConv_, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
            "forward convolution",
            [&](ConvLayout l, int n, int* count, cudnnConvolutionFwdAlgoPerf_t* perf) {
                return cudnnFindConvolutionForwardAlgorithmEx(h, xd(l), xIn(l), wd(l), t.w.raw(), fwdConv_, yd(l), yIn(l),
                                                              n, count, perf, t.space, t.bytes);
            },
            [&](ConvLayout l, int algo, size_t bytes) {
                toKrsc(l);
                return then(toNchw(l, x_, t.x, xc_, t.xt), [&] {
                    return then(cudnnConvolutionForward(h, &one, xd(l), xIn(l), wd(l), t.w.raw(), fwdConv_,
                                                        cudnnConvolutionFwdAlgo_t(algo), t.space, bytes, &zero, yd(l),
                                                        yIn(l)),
                                [&] { return toNchw(l, yc_, t.yt, y_, t.y); });
                });
            });
        // (A plan that is never asked for dx leaves its direction unsearched: ConvDesc::inputGradient.)
        if (d_.inputGradient)
            c.bwdData = direction(
                static_cast<cudnnConvolutionBwdDataAlgoPerf_t*>(nullptr), bwdDataConv_, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                "convolution's input gradient",
                [&](ConvLayout l, int n, int* count, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
                    return cudnnFindConvolutionBackwardDataAlgorithmEx(h, wd(l), t.w.raw(), yd(l), yIn(l), bwdDataConv_,
                                                                       xd(l), xIn(l), n, count, perf, t.space, t.bytes);
                },
                [&](ConvLayout l, int algo, size_t bytes) {
                    toKrsc(l);
                    return then(toNchw(l, y_, t.y, yc_, t.yt), [&] {
                        return then(cudnnConvolutionBackwardData(h, &one, wd(l), t.w.raw(), yd(l), yIn(l), bwdDataConv_,
                                                                 cudnnConvolutionBwdDataAlgo_t(algo), t.space, bytes, &zero,
                                                                 xd(l), xIn(l)),
                                    [&] { return toNchw(l, xc_, t.xt, x_, t.x); });
                    });
                });
        // Both transpositions counted, though a step whose input gradient also runs in NCHW
        // shares dy's.
        c.bwdFilter = direction(
            static_cast<cudnnConvolutionBwdFilterAlgoPerf_t*>(nullptr), bwdFilterConv_,
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, "convolution's filter gradient",
            [&](ConvLayout l, int n, int* count, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
                return cudnnFindConvolutionBackwardFilterAlgorithmEx(h, xd(l), xIn(l), yd(l), yIn(l), bwdFilterConv_,
                                                                     wd(l), t.w.raw(), n, count, perf, t.space, t.bytes);
            },
            [&](ConvLayout l, int algo, size_t bytes) {
                return then(toNchw(l, x_, t.x, xc_, t.xt), [&] {
                    return then(toNchw(l, y_, t.y, yc_, t.yt), [&] {
                        return then(cudnnConvolutionBackwardFilter(h, &one, xd(l), xIn(l), yd(l), yIn(l),
                                                                   bwdFilterConv_, cudnnConvolutionBwdFilterAlgo_t(algo),
                                                                   t.space, bytes, &zero, wd(l), t.w.raw()),
                                    [&] { return fromKrsc(l); });
                    });
                });
            });
        TB_CUDA(cudaStreamSynchronize(q));
        return c;
    }


    // What the timed trials run on (made once per shape, at set-up, outside any step): x, y (also
    // dy) and w as the network holds them, filled with constants, their NCHW copies and the filter
    // in (k, c, r, s) (wk, which NHWC's calls transpose) where NCHW is tried, and cuDNN's workspace, up to a quarter of the free memory and at most 1 GiB so that a
    // fast algorithm with a large workspace is not missed. Freed once the set-up stream is idle.
    struct Trials {
        DeviceBuffer x, y, w, xt, yt, wk;
        void* space = nullptr;
        size_t bytes = 0;
        cudaStream_t q;
        Trials(const CudaConv& c, bool nchw) : q(c.ctx_.setup->stream) {
            const size_t xs = c.xElems_, ys = size_t(c.rows_) * c.d_.k, ws = size_t(c.d_.k) * c.d_.c * c.d_.r * c.d_.s;
            const size_t es = c.bf16_ ? sizeof(bf16) : sizeof(float);
            DeviceAllocator* a = c.ctx_.allocator;
            x = DeviceBuffer(a, xs * es), y = DeviceBuffer(a, ys * es), w = DeviceBuffer(a, ws * es);
            if (nchw) {  // (fp32 only)
                xt = DeviceBuffer(a, xs * es), yt = DeviceBuffer(a, ys * es), wk = DeviceBuffer(a, ws * es);
                fill(q, wk.f(), 0.125f, ws);
            }
            for (auto [buf, n, v] : {std::tuple{&x, xs, 0.5f}, std::tuple{&y, ys, 0.25f}, std::tuple{&w, ws, 0.125f}}) {
                if (c.bf16_) fill(q, buf->h(), v, n);
                else fill(q, buf->f(), v, n);
            }
            bytes = searchWorkspaceCap();
            while (bytes > 0 && cudaMalloc(&space, bytes) != cudaSuccess) {
                cudaGetLastError();
                bytes /= 2;
            }
        }
        ~Trials() {
            cudaStreamSynchronize(q);  // before the buffers go back to the allocator
            cudaFree(space);
        }
        Trials(const Trials&) = delete;
        Trials& operator=(const Trials&) = delete;
    };

    // Each direction's engine on cuDNN's graph API where one runs the direction as a step runs it
    // faster than its legacy algorithm (conversions, widening and the bias included: the graph
    // writes fp32 results and adds the bias itself), or the fastest engine under TB_CONV_API=graph.
    // Decided once per shape and process under the cache's lock, kept across runs with the
    // algorithms; the other plans of the shape rebuild the same engines (a plan is bound to its
    // handle's device and keeps a variant pack of its own). TB_CONV_API=graph's decisions are
    // shared alike and never kept; a trial that failed for want of memory or the like decides
    // nothing and is tried again by the shape's next plan.
    void chooseGraphs() {
        ConvChoiceCache& cache = choiceCache();
        std::lock_guard lock(cache.mutex);
        const bool keepable = api_ == ConvApi::Measured;
        ConvChoice& c = keepable ? cache.choices.at(cacheKey_) : cache.forcedGraph.try_emplace(cacheKey_, choice_).first->second;
        using Graph = AlgoChoice::Graph;
        bool changed = false;
        for (int i = 0; i < 3; ++i) {
            const auto dir = ConvDirection(i);
            if (dir == ConvDirection::BackwardData && !d_.inputGradient) continue;  // (never run)
            AlgoChoice& a = directionOf(c, dir);
            // (TB_CONV_API=graph takes an engine where a measured run kept "not faster".)
            if ((a.graphState == Graph::NotFaster && keepable) || a.graphState == Graph::None) continue;
            std::string why;
            std::unique_ptr<GraphConv> g;
            try {
                g = std::make_unique<GraphConv>(ctx_.setup->cudnn, graphShape(dir), dir);
            } catch (const GraphRefused& e) {
                why = e.what();
                if (!e.lasting) {  // (not cuDNN's answer about the graph: nothing kept)
                    noteOnce(where(dir) + ": its cuDNN graph could not be built (" + why + "); it runs on the legacy calls");
                    continue;
                }
            }
            if (a.graphState == Graph::Engine && g) {
                if ((graph_[size_t(i)] = g->rebuild(*a.graph, rule_, why))) continue;
                noteOnce(where(dir) + ": the cuDNN graph engine kept for it cannot be used (" + why +
                         "); it is timed again");
                why.clear();
            }
            GraphPick pick;
            if (g) pick = fastestGraph(*g, dir);
            else pick.why = why;  // cuDNN refused the graph itself
            if (pick.outcome == Graph::NotTried) {  // the trials failed (memory, a fault): nothing kept
                noteOnce(where(dir) + ": its cuDNN graph engines could not be timed (" + pick.why +
                         "); it runs on the legacy calls");
                continue;
            }
            if (pick.outcome == Graph::None && std::getenv("TB_CONV_API"))  // (the legacy calls are no fault)
                noteOnce(where(dir) + ": no cuDNN graph engine (" + pick.why + "); it runs on the legacy calls");
            graph_[size_t(i)] = std::move(pick.plan);
            a.graphState = pick.outcome;
            a.graph.reset();
            if (graph_[size_t(i)]) a.graph = graph_[size_t(i)]->engine();
            changed = true;
        }
        for (const ConvDirection dir : {ConvDirection::Forward, ConvDirection::BackwardData, ConvDirection::BackwardFilter}) {
            AlgoChoice& mine = directionOf(choice_, dir);  // (the legacy choice stays this plan's own)
            mine.graphState = directionOf(c, dir).graphState;
            mine.graph = directionOf(c, dir).graph;
        }
        if (keepable && changed) keep(storeKey_, c);
        for (size_t i = 0; i < 3; ++i) graphNow_[i] = graph_[i].get();
        forgetCopies();  // (the trials' buffers are gone)
    }
    static AlgoChoice& directionOf(ConvChoice& c, ConvDirection dir) {
        return dir == ConvDirection::Forward ? c.fwd : dir == ConvDirection::BackwardData ? c.bwdData : c.bwdFilter;
    }
    // "gpu:0: the forward convolution of NVIDIA H100 ... | conv n128 ... | fp32 fma deterministic"
    std::string where(ConvDirection dir) const {
        const char* name = dir == ConvDirection::Forward        ? "forward convolution"
                           : dir == ConvDirection::BackwardData ? "input gradient"
                                                                : "filter gradient";
        return "gpu:" + std::to_string(ctx_.device) + ": the " + name + " of \"" + storeKey_ + "\"";
    }
    GraphConvShape graphShape(ConvDirection dir) const {
        GraphConvShape g;
        g.n = d_.n, g.c = d_.c, g.h = hp_, g.w = wp_, g.k = d_.k, g.r = d_.r, g.s = d_.s;
        g.strideH = d_.strideH, g.strideW = d_.strideW, g.padH = d_.padTop, g.padW = d_.padLeft;  // (symmetric)
        g.bf16 = bf16_;
        g.bias = dir == ConvDirection::Forward && d_.bias;
        return g;
    }

    // What fastestGraph found: the engine that won (Engine), the legacy algorithm faster
    // (NotFaster), no candidate (None: refused, none listed that obeys the rule and builds, none
    // that records or runs), or trials that failed themselves (NotTried); `why` for the last two.
    struct GraphPick {
        AlgoChoice::Graph outcome = AlgoChoice::Graph::None;
        std::unique_ptr<GraphConvPlan> plan;
        std::string why;
    };
    // Of `g`'s candidates (heuristics' order, the rule's, a workspace within the legacy search's
    // cap), those that can be recorded into a CUDA Graph as a step is, timed as a step runs the
    // direction beside the legacy algorithm (medianTimes); the fastest. With TB_CONV_API set, says
    // each decision on stderr (the device check's record of what cuDNN offered).
    GraphPick fastestGraph(const GraphConv& g, ConvDirection dir) {
        using Graph = AlgoChoice::Graph;
        constexpr int kGraphCandidates = 6;
        GraphPick pick;
        GraphConv::Counts counts;
        std::vector<GraphConvPlan> plans;
        try {
            plans = g.candidates(rule_, kGraphCandidates, searchWorkspaceCap(), counts);
        } catch (const GraphRefused& e) {
            pick.why = e.what();
            if (!e.lasting) pick.outcome = Graph::NotTried;
            return pick;
        } catch (const Error& e) {  // (the free memory unread)
            pick.outcome = Graph::NotTried;
            pick.why = e.what();
            return pick;
        }
        const auto counted = [&] {
            return std::to_string(counts.listed) + " listed, " + std::to_string(counts.obeying) + " obey the rule, " +
                   std::to_string(counts.built) + " built, " + std::to_string(counts.fitting) +
                   " within the workspace cap, " + std::to_string(plans.size()) + " recordable";
        };
        if (plans.empty()) {  // (no trial buffers made for nothing to try)
            pick.why = "of cuDNN's engines " + counted();
            // Built but none within the cap: a matter of the memory free now, not of cuDNN.
            if (counts.built > 0) pick.outcome = Graph::NotTried;
            return pick;
        }
        try {
            size_t workspace = cudnnBytes_;
            for (const GraphConvPlan& p : plans) workspace = std::max(workspace, p.engine().workspace);
            const StepTrials t(*this, workspace);
            {
                ProbeStream probe(ctx_.device);
                plans.erase(std::remove_if(plans.begin(), plans.end(),
                                           [&](const GraphConvPlan& p) {
                                               graphNow_[size_t(dir)] = &p;
                                               const bool ok = recordable(probe, [&](Stream st) { runDirection(dir, t, st); });
                                               graphNow_[size_t(dir)] = nullptr;
                                               return !ok;
                                           }),
                            plans.end());
            }
            if (plans.empty()) {
                pick.why = "of cuDNN's engines " + counted();
                return pick;
            }
            const size_t i = size_t(dir);
            const auto runWith = [&](const GraphConvPlan* plan) -> std::function<bool(int)> {
                return [&, plan](int calls) {
                    graphNow_[i] = plan;
                    bool ran = true;
                    try {
                        for (int k = 0; k < calls; ++k) runDirection(dir, t, ctx_.setup);
                    } catch (const Error&) {
                        ran = false;
                    }
                    graphNow_[i] = nullptr;
                    return ran;
                };
            };
            std::vector<std::function<bool(int)>> runs{runWith(nullptr)};  // the legacy algorithm first
            for (const GraphConvPlan& p : plans) runs.push_back(runWith(&p));
            const std::vector<std::optional<float>> times = medianTimes(ctx_.setup->stream, runs);
            std::optional<size_t> best;  // of the graph engines
            for (size_t j = 1; j < times.size(); ++j)
                if (times[j] && (!best || *times[j] < *times[*best])) best = j;
            if (!best) {  // (recorded and replayed, then failed: not cuDNN's answer to keep)
                pick.outcome = Graph::NotTried;
                pick.why = "every engine of cuDNN's failed when run (" + counted() + ")";
                return pick;
            }
            const bool wins = api_ == ConvApi::Graph || !times[0] || *times[*best] < *times[0];
            if (std::getenv("TB_CONV_API")) {
                const auto ms = [](float v) {
                    char text[32];
                    std::snprintf(text, sizeof text, "%.4f ms", double(v));
                    return std::string(text);
                };
                noteOnce(where(dir) + ": graph engine " + std::to_string(plans[*best - 1].engine().id) + " " +
                         ms(*times[*best]) + ", legacy algorithm " + (times[0] ? ms(*times[0]) : std::string("failed")) +
                         " (" + counted() + "): " + (wins ? "the graph engine runs" : "the legacy algorithm runs"));
            }
            pick.outcome = wins ? Graph::Engine : Graph::NotFaster;
            if (wins) pick.plan = std::make_unique<GraphConvPlan>(std::move(plans[*best - 1]));
            return pick;
        } catch (const Error& e) {  // the trials' memory, or a fault: nothing is concluded
            pick.outcome = Graph::NotTried;
            pick.why = e.what();
            return pick;
        }
    }

    // What fastestGraph's trials run a step's direction on (made once per shape, at set-up, outside
    // any step): the network's fp32 tensors filled with constants, and the plan's workspace with
    // `workspace` bytes for cuDNN. Freed once the set-up stream is idle.
    struct StepTrials {
        DeviceBuffer x, w, b, y, dy, dx, dw;
        void* ws = nullptr;  // cudaMalloc'd, as the legacy search's: up to 1 GiB the allocator should not keep
        cudaStream_t q;
        StepTrials(const CudaConv& c, size_t workspace) : q(c.ctx_.setup->stream) {
            const ConvDesc& d = c.d_;
            const size_t xs = size_t(d.n) * d.h * d.w * d.c, ys = size_t(c.rows_) * d.k, fs = size_t(d.k) * d.c * d.r * d.s;
            DeviceAllocator* a = c.ctx_.allocator;
            const auto made = [&](size_t n, float v) {
                DeviceBuffer buf(a, n * sizeof(float));
                fill(q, buf.f(), v, n);
                return buf;
            };
            x = made(xs, 0.5f), w = made(fs, 0.125f), b = made(size_t(d.k), 0.f), y = made(ys, 0.f);
            dy = made(ys, 0.25f), dx = made(xs, 0.f), dw = made(fs, 0.f);
            TB_CUDA(cudaMalloc(&ws, c.stageBytes_ + workspace));
            TB_CUDA(cudaStreamSynchronize(q));  // filled before the probe's stream reads them
        }
        ~StepTrials() {
            cudaStreamSynchronize(q);  // before the buffers go back to the allocator
            cudaFree(ws);
        }
        StepTrials(const StepTrials&) = delete;
        StepTrials& operator=(const StepTrials&) = delete;
    };
    // One direction as a step runs it, on `st`, its inputs' copies made afresh (the bias gradient,
    // the same cuBLAS call on either side, is left out: the set-up stream has no cuBLAS).
    void runDirection(ConvDirection dir, const StepTrials& t, Stream st) {
        forgetCopies();
        switch (dir) {
        case ConvDirection::Forward: forward(st, t.x.f(), t.w.f(), d_.bias ? t.b.f() : nullptr, t.y.f(), t.ws); break;
        case ConvDirection::BackwardData: backwardData(st, t.dy.f(), t.w.f(), t.dx.f(), t.ws); break;
        case ConvDirection::BackwardFilter: weights(st, t.x.f(), t.dy.f(), t.dw.f(), nullptr, t.ws); break;
        }
    }
    // One direction in both layouts: in(layout) searches and re-times it in that layout, and
    // where both have a choice, both(nhwc, nchw) times the two side by side (one medianTimes, so
    // no drift of the clock between the layouts' searches decides) and resets one that no longer
    // runs. A layout without a usable algorithm leaves the other; TB_CONV_LAYOUT=nchw tries NHWC
    // only where NCHW has none.
    template <class In, class Both>
    AlgoChoice bestLayout(bool tryNchw, In in, Both both) const {
        std::optional<AlgoChoice> nhwc, nchwChoice;
        std::optional<NoAlgorithm> none;
        const auto attempt = [&](ConvLayout l, std::optional<AlgoChoice>& into) {
            try {
                into = in(l);
            } catch (const NoAlgorithm& e) {
                none = e;
            } catch (const Error& e) {  // NCHW's own failure (its Find, a transposition) leaves NHWC
                if (l == ConvLayout::Nhwc) throw;
                cudaGetLastError();
                none = NoAlgorithm(std::string("CUDA backend: in NCHW: ") + e.what(), false);
            }
        };
        if (tryNchw) attempt(ConvLayout::Nchw, nchwChoice);
        if (forced_ != ConvLayout::Nchw || !nchwChoice) attempt(ConvLayout::Nhwc, nhwc);
        if (nhwc && nchwChoice) both(nhwc, nchwChoice);
        if (!nhwc && !nchwChoice) throw none.value_or(NoAlgorithm("CUDA backend: no algorithm ran in either layout", false));
        return *faster(nhwc, nchwChoice);
    }

    PlanContext ctx_;
    ConvDesc d_;
    bool bf16_ = false, symmetric_ = true;
    int hp_ = 0, wp_ = 0, rows_ = 0;
    size_t xElems_ = 0;  // of the (padded) input cuDNN reads
    TensorDesc x_, y_;            // NHWC, as the network's activations
    FilterDesc w_;                // (k, r, s, c)
    TensorDesc xc_, yc_;          // NCHW, where a direction runs in NCHW
    FilterDesc wc_;               // (k, c, r, s), the network's own
    std::optional<ConvLayout> forced_ = forcedLayout(std::getenv("TB_CONV_LAYOUT"));
    ConvApi api_ = forcedApi(std::getenv("TB_CONV_API"));
    ConvChoiceCache::Key cacheKey_;
    std::string storeKey_;
    ConvRule rule_;
    std::array<std::unique_ptr<GraphConvPlan>, 3> graph_;  // by ConvDirection: the engine it runs on, if any
    std::array<const GraphConvPlan*, 3> graphNow_{};       // what the calls run: graph_'s, or a trial's
    ConvolutionDesc fwdConv_, bwdDataConv_, bwdFilterConv_;
    ConvChoice choice_;
    DeviceBuffer wKrsc_;          // (k, r, s, c) fp32: the filter, or its gradient (bf16: the graph's dw)
    StepCopy xb_, wb_, dyb_;      // bf16: the (padded) input, the (k, r, s, c) filter, dy (rows, k)
    StepCopy xT_, dyT_;           // fp32 in NCHW: x (n, c, h, w), dy (n, k, outH, outW)
    DeviceBuffer ones_;       // (rows) for the bias gradient, where the plan writes it
    size_t stageBytes_ = 0, cudnnBytes_ = 0;
};

}  // namespace

std::unique_ptr<ConvOp> makeConv(const PlanContext& ctx, const ConvDesc& d) { return std::make_unique<CudaConv>(ctx, d); }

}  // namespace tb::cuda
