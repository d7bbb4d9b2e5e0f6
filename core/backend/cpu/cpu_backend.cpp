// The CPU backend, the reference every other backend is checked against: oneDNN primitives
// (convolution, pooling, inner product), our own LRN and batch norm (cpu_batch_norm.cpp), OpenMP loops for
// the element-wise work and the vector arithmetic. Each heavy op is built once per shape; oneDNN's scratch
// memory is user-managed (scratchpad_mode::user) and comes in as the explicit workspace.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>
#include <oneapi/dnnl/dnnl.hpp>

#include "backend/backend.hpp"
#include "backend/cpu/channel_sums.hpp"
#include "backend/cpu/cpu_batch_norm.hpp"
#include "backend/elementwise_math.hpp"
#include "tensor/bf16.hpp"
#include "util/cpu_clones.hpp"
#include "util/error.hpp"

namespace tb {

struct StreamImpl {
    dnnl::stream stream;
};

// The CPU backend runs every call to completion before returning, so an event is the moment it
// was recorded.
struct EventImpl {
    std::chrono::steady_clock::time_point at;
};

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;
// Activations are (n, h, w, c) as in TensorFlow: oneDNN's AVX2 convolution and pooling kernels
// run on it directly, so no reorders are needed between layers (only conv weights are blocked).
constexpr tag kAct = tag::nhwc;

// f(begin, end) over [0, n) split evenly over the team (one call each; alone below kParallelMin),
// for loops compiled per instruction set (TB_CPU_CLONES), which an OpenMP loop's outlined body
// cannot be.
template <class F>
void parallelRanges(int64_t n, F&& f) {
#pragma omp parallel if (n > kParallelMin)
    {
        const int64_t t = omp_get_thread_num(), k = omp_get_num_threads();
        f(n * t / k, n * (t + 1) / k);
    }
}

// One argument of a primitive as the caller lays it out (user) and as the primitive wants it
// (prim). Where they differ the argument owns a buffer in the primitive's layout and the
// reorders between the two, made once.
class Arg {
public:
    Arg() = default;
    Arg(const dnnl::engine& eng, const memory::desc& user, const memory::desc& prim)
        : eng_(eng), user_(user), prim_(prim), reorder_(user != prim), cast_(castOnly(user, prim)) {
        if (!reorder_) return;
        primMem_ = memory(prim_, eng_);  // owns its buffer
        memory um(user_, eng_, nullptr);
        toPrim_ = dnnl::reorder(um, primMem_);
        toUser_ = dnnl::reorder(primMem_, um);
    }
    // The memory to hand the primitive; for inputs, reorders user data into it first.
    memory in(dnnl::stream& s, const float* p) {
        memory um(user_, eng_, const_cast<float*>(p));
        if (!reorder_) return um;
        if (cast_) castToBf16(p, static_cast<uint16_t*>(primMem_.get_data_handle()), user_.get_size() / sizeof(float));
        else run(toPrim_, s, um, primMem_);
        return primMem_;
    }
    // The memory the primitive writes into; call out() afterwards to land it in user layout.
    memory dst(float* p) { return reorder_ ? primMem_ : memory(user_, eng_, p); }
    void out(dnnl::stream& s, float* p) {
        if (!reorder_) return;
        run(toUser_, s, primMem_, memory(user_, eng_, p));
    }

    const memory::desc& prim() const { return prim_; }

private:
    // f32 to bf16 in the same plain layout: our own rounding pass (tensor/bf16.hpp), faster than
    // oneDNN's reorder.
    static bool castOnly(const memory::desc& user, const memory::desc& prim) {
        const dnnl_memory_desc_t& u = user.data;
        if (user.data_type() != dt::f32 || prim.data_type() != dt::bf16 || u.format_kind != dnnl_blocked ||
            u.format_desc.blocking.inner_nblks != 0)
            return false;
        const memory::dims strides(u.format_desc.blocking.strides, u.format_desc.blocking.strides + u.ndims);
        return memory::desc(user.dims(), dt::bf16, strides) == prim;
    }
    static void castToBf16(const float* from, uint16_t* to, size_t n) {
        if (n * sizeof(float) < kAlone) roundToBf16(from, to, n);
        else parallelRanges(int64_t(n), [&](int64_t b, int64_t e) { roundToBf16(from + b, to + b, size_t(e - b)); });
    }

    dnnl::engine eng_;
    memory::desc user_, prim_;
    bool reorder_ = false, cast_ = false;
    memory primMem_;
    dnnl::reorder toPrim_, toUser_;

    // A small reorder is memory bound and short: on one thread, cheaper than waking the team.
    static constexpr size_t kAlone = 1 << 20;  // bytes read
    static void run(dnnl::reorder& r, dnnl::stream& s, memory from, memory to) {
        const int team = omp_get_max_threads();
        const bool alone = from.get_desc().get_size() < kAlone;
        if (alone) omp_set_num_threads(1);
        struct Restore {
            bool alone;
            int team;
            ~Restore() {
                if (alone) omp_set_num_threads(team);
            }
        } restore{alone, team};
        r.execute(s, from, to);
    }
};

// An input that several calls of one training step read (x: forward and backwardWeights; dy:
// both backward calls; a dense layer's w: forward and backwardData), where those calls want it
// in the same format (sharedOr): put in that format (bf16: rounded) once per step, by the first
// call that reads it. forget() starts a step.
// The Op contract (backend.hpp) keeps what a step's calls share unchanged between them.
class StepInput {
public:
    StepInput() = default;
    explicit StepInput(Arg arg) : arg_(std::move(arg)) {}
    memory in(dnnl::stream& s, const float* p) {
        if (p != last_) {
            mem_ = arg_.in(s, p);
            last_ = p;
        }
        return mem_;
    }
    void forget() { last_ = nullptr; }
    const memory::desc& prim() const { return arg_.prim(); }

private:
    Arg arg_;
    const float* last_ = nullptr;
    memory mem_;
};

// The StepInput that a later call reads: the earlier call's where both want the same format.
StepInput* sharedOr(StepInput& earlier, StepInput& own) { return earlier.prim() == own.prim() ? &earlier : &own; }

dnnl::primitive_attr userScratchpad() {
    dnnl::primitive_attr a;
    a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return a;
}

memory::dims dims4(int n, int c, int h, int w) { return {n, c, h, w}; }

// Makes the calling thread use the backend's thread count in oneDNN's and our OpenMP regions.
void useThreads(int threads) {
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
}

// What a plan gets from its backend: the engine, the backend's default queue, its thread count,
// and the backend itself, which the plan holds so that it cannot outlive it.
struct CpuContext {
    dnnl::engine eng;
    dnnl::stream* defaultStream;
    int threads;
    std::shared_ptr<Backend> owner;
    dt matmul;  // what convolutions and inner products read (f32, or bf16: they return f32)
};

// What every oneDNN plan holds.
class OneDnnOp {
protected:
    explicit OneDnnOp(const CpuContext& c) : eng_(c.eng), default_(*c.defaultStream), threads_(c.threads), owner_(c.owner) {}
    dnnl::stream& pick(Stream st) {
        useThreads(threads_);
        return st ? st->stream : default_;
    }
    memory wrap(const memory::desc& md, const void* p) const { return memory(md, eng_, const_cast<void*>(p)); }

    dnnl::engine eng_;
    dnnl::stream& default_;
    int threads_;
    std::shared_ptr<Backend> owner_;
};

class CpuConv final : public ConvOp, OneDnnOp {
public:
    // Bf16: x, w and dy are read as bf16 (each Arg below rounds the fp32 tensor into a buffer of
    // the primitive's); y, dx, dw and db are written in fp32.
    CpuConv(const CpuContext& c, const ConvDesc& d) : OneDnnOp(c) {
        memory::desc x = {dims4(d.n, d.c, d.h, d.w), dt::f32, kAct};
        memory::desc w = {dims4(d.k, d.c, d.r, d.s), dt::f32, tag::oihw};
        memory::desc b = {{d.k}, dt::f32, tag::x};
        memory::desc y = {dims4(d.n, d.k, d.outH(), d.outW()), dt::f32, kAct};
        const dt in = c.matmul;
        const memory::desc xIn = {x.dims(), in, kAct}, yIn = {y.dims(), in, kAct};
        auto any = [](const memory::desc& m, dt type) { return memory::desc(m.dims(), type, tag::any); };
        memory::dims strides = {d.strideH, d.strideW}, padL = {d.padTop, d.padLeft}, padR = {d.padBottom, d.padRight};
        auto attr = userScratchpad();
        using namespace dnnl;
        // Without a bias (before batch norm) the primitives have none: an empty bias descriptor.
        if (!d.bias) b = memory::desc();
        fwdPd_ = convolution_forward::primitive_desc(
            convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, xIn, any(w, in), b,
                                      y, strides, padL, padR),
            attr, eng_);
        // Where no input gradient is asked for (ConvDesc::inputGradient false), no data-gradient primitive.
        if (d.inputGradient)
            bwdDataPd_ = convolution_backward_data::primitive_desc(
                convolution_backward_data::desc(algorithm::convolution_direct, x, any(w, in), yIn, strides, padL, padR),
                attr, eng_, fwdPd_);
        // Where the layer after writes db (ConvDesc::biasGradient false), dw alone: no bias term.
        bwdWeightsPd_ = convolution_backward_weights::primitive_desc(
            convolution_backward_weights::desc(algorithm::convolution_direct, xIn, any(w, dt::f32),
                                               d.writesBiasGradient() ? b : memory::desc(), yIn, strides, padL, padR),
            attr, eng_, fwdPd_);
        fwd_ = convolution_forward(fwdPd_);
        bwdWeights_ = convolution_backward_weights(bwdWeightsPd_);
        fx_ = StepInput(Arg(eng_, x, fwdPd_.src_desc()));
        fw_ = Arg(eng_, w, fwdPd_.weights_desc());
        fy_ = Arg(eng_, y, fwdPd_.dst_desc());
        workspace_ = std::max(fwdPd_.scratchpad_desc().get_size(), bwdWeightsPd_.scratchpad_desc().get_size());
        if (d.inputGradient) {
            bwdData_ = convolution_backward_data(bwdDataPd_);
            ddy_ = StepInput(Arg(eng_, y, bwdDataPd_.diff_dst_desc()));
            dw_ = Arg(eng_, w, bwdDataPd_.weights_desc());
            ddx_ = Arg(eng_, x, bwdDataPd_.diff_src_desc());
            workspace_ = std::max(workspace_, bwdDataPd_.scratchpad_desc().get_size());
        }
        wx_ = StepInput(Arg(eng_, x, bwdWeightsPd_.src_desc()));
        wdy_ = StepInput(Arg(eng_, y, bwdWeightsPd_.diff_dst_desc()));
        wdw_ = Arg(eng_, w, bwdWeightsPd_.diff_weights_desc());
        weightsX_ = sharedOr(fx_, wx_);
        weightsDy_ = sharedOr(ddy_, wdy_);
        bias_ = b;
        desc_ = d;
    }
    size_t workspaceBytes() const override { return workspace_; }

    void forward(Stream st, const float* x, const float* w, const float* b, float* y, void* ws) override {
        auto& s = pick(st);
        for (StepInput* i : {&fx_, &ddy_, &wx_, &wdy_}) i->forget();
        memory out = fy_.dst(y);
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, fx_.in(s, x)},
                                             {DNNL_ARG_WEIGHTS, fw_.in(s, w)},
                                             {DNNL_ARG_DST, out},
                                             {DNNL_ARG_SCRATCHPAD, scratch(fwdPd_, ws)}};
        if (b) args.emplace(DNNL_ARG_BIAS, wrap(bias_, b));
        fwd_.execute(s, args);
        fy_.out(s, y);
    }
    void backwardData(Stream st, const float* dy, const float* w, float* dx, void* ws) override {
        desc_.checkInputGradientCall();
        auto& s = pick(st);
        memory out = ddx_.dst(dx);
        bwdData_.execute(s, {{DNNL_ARG_DIFF_DST, ddy_.in(s, dy)},
                             {DNNL_ARG_WEIGHTS, dw_.in(s, w)},
                             {DNNL_ARG_DIFF_SRC, out},
                             {DNNL_ARG_SCRATCHPAD, scratch(bwdDataPd_, ws)}});
        ddx_.out(s, dx);
    }
    void backwardWeights(Stream st, const float* x, const float* dy, float* dw, float* db, void* ws) override {
        desc_.checkBiasGradientArgument(db);
        auto& s = pick(st);
        memory out = wdw_.dst(dw);
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, weightsX_->in(s, x)},
                                             {DNNL_ARG_DIFF_DST, weightsDy_->in(s, dy)},
                                             {DNNL_ARG_DIFF_WEIGHTS, out},
                                             {DNNL_ARG_SCRATCHPAD, scratch(bwdWeightsPd_, ws)}};
        if (db) args.emplace(DNNL_ARG_DIFF_BIAS, wrap(bias_, db));
        bwdWeights_.execute(s, args);
        wdw_.out(s, dw);
    }

private:
    memory scratch(const dnnl::primitive_desc& pd, void* ws) { return wrap(pd.scratchpad_desc(), ws); }

    dnnl::convolution_forward::primitive_desc fwdPd_;
    dnnl::convolution_backward_data::primitive_desc bwdDataPd_;
    dnnl::convolution_backward_weights::primitive_desc bwdWeightsPd_;
    dnnl::convolution_forward fwd_;
    dnnl::convolution_backward_data bwdData_;
    dnnl::convolution_backward_weights bwdWeights_;
    StepInput fx_, ddy_, wx_, wdy_;
    StepInput *weightsX_ = nullptr, *weightsDy_ = nullptr;  // what backwardWeights reads x and dy from
    Arg fw_, fy_, dw_, ddx_, wdw_;
    memory::desc bias_;
    ConvDesc desc_;
    size_t workspace_ = 0;
};

// Pooling runs in (n, h, w, c), where oneDNN's AVX2 kernels work directly; max-pooling's forward
// saves the argmax (oneDNN's workspace) that the backward reads; average pooling (padding
// excluded, as TF's) saves nothing. A ReLU folded into max pooling (PoolDesc::relu) is the
// backend's own ReLU over the output, and over the output's gradient before oneDNN's backward
// (masked_: (n, outH, outW, c)). dx's channel sums (PoolDesc::sumDx) are those of the gradient
// the backward takes: max pooling hands each output's gradient to one input, average pooling
// shares it out in parts that add up to it, so dx sums as dy does, over 4x fewer rows.
class CpuPool final : public PoolOp, OneDnnOp {
public:
    CpuPool(const CpuContext& c, const PoolDesc& d)
        : OneDnnOp(c), sums_(d.c, c.threads), outRows_(int64_t(d.n) * d.outH() * d.outW()), c_(d.c) {
        using namespace dnnl;
        const algorithm how = d.mode == PoolMode::Max ? algorithm::pooling_max : algorithm::pooling_avg_exclude_padding;
        x_ = {dims4(d.n, d.c, d.h, d.w), dt::f32, kAct};
        y_ = {dims4(d.n, d.c, d.outH(), d.outW()), dt::f32, kAct};
        memory::dims strides = {d.strideH, d.strideW}, kernel = {d.r, d.s}, padL = {d.padTop, d.padLeft},
                     padR = {d.padBottom, d.padRight};
        fwdPd_ = pooling_forward::primitive_desc(
            pooling_forward::desc(prop_kind::forward_training, how, x_, y_, strides, kernel, padL, padR), eng_);
        fwd_ = pooling_forward(fwdPd_);
        bwd_ = pooling_backward(pooling_backward::primitive_desc(
            pooling_backward::desc(how, x_, y_, strides, kernel, padL, padR), eng_, fwdPd_));
        if (d.relu) {
            if (d.mode != PoolMode::Max) throw Error("cpu: a ReLU folds only into max pooling");
            masked_.resize(size_t(d.n) * d.outH() * d.outW() * d.c);
        }
    }
    size_t savedBytes() const override { return fwdPd_.workspace_desc().get_size(); }
    void forward(Stream st, const float* x, float* y, void* saved) override {
        std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, wrap(x_, x)}, {DNNL_ARG_DST, wrap(y_, y)}};
        if (savedBytes() > 0) args.emplace(DNNL_ARG_WORKSPACE, wrap(fwdPd_.workspace_desc(), saved));
        fwd_.execute(pick(st), args);
        if (!masked_.empty()) owner_->reluForward(st, y, y, masked_.size());
    }
    void backward(Stream st, const float*, const float* y, const float* dy, float* dx, const void* saved,
                  float* dxSum) override {
        if (!masked_.empty()) {
            owner_->reluBackward(st, y, dy, masked_.data(), masked_.size());
            dy = masked_.data();
        }
        if (dxSum)
            sums_.run(
                outRows_,
                [&](int64_t b, int64_t e, ChannelSums::Adder& sum) {
                    for (int64_t r = b; r < e; ++r) sum.add(dy + r * c_);
                },
                dxSum);
        std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_DIFF_DST, wrap(y_, dy)}, {DNNL_ARG_DIFF_SRC, wrap(x_, dx)}};
        if (savedBytes() > 0) args.emplace(DNNL_ARG_WORKSPACE, wrap(fwdPd_.workspace_desc(), saved));
        bwd_.execute(pick(st), args);
    }

private:
    std::vector<float> masked_;  // the output's gradient where the folded ReLU passes it
    ChannelSums sums_;
    int64_t outRows_;  // n outH outW
    int c_;
    memory::desc x_, y_;
    dnnl::pooling_forward::primitive_desc fwdPd_;
    dnnl::pooling_forward fwd_;
    dnnl::pooling_backward bwd_;
};

// LRN is our own kernel: oneDNN 2.6's AVX2 LRN handles only a window of 5 channels (CIFAR-10's 9
// falls back to its slow reference loop). In (n, h, w, c) the window runs along the contiguous
// channels of one pixel, so both directions are vectorised sliding sums. A folded ReLU (LrnDesc)
// is applied as each pixel's channels are read; dx's channel sums (LrnDesc::sumDx) are added as
// its pixels are written.
class CpuLrn final : public LrnOp {
public:
    CpuLrn(const CpuContext& c, const LrnDesc& d) : threads_(c.threads), d_(d), sums_(d.c, c.threads), owner_(c.owner) {}
    // scale = bias + alpha * window sum of x^2, and scale^-beta: (2, n, h, w, c).
    size_t savedBytes() const override { return 2 * count() * sizeof(float); }
    void forward(Stream, const float* x, float* y, void* saved) override {
        useThreads(threads_);
        float* scale = static_cast<float*>(saved);
        float* power = scale + count();
        const int64_t pixels = int64_t(d_.n) * d_.h * d_.w;
        const int c = d_.c, r = d_.depthRadius;
#pragma omp parallel
        {
            std::vector<float> pad(size_t(c + 2 * r), 0.f);  // x^2 with r zeros each side
            std::vector<float> in(d_.relu ? size_t(c) : 0);  // a pixel's relu(x)
#pragma omp for
            for (int64_t p = 0; p < pixels; ++p) {
                const float* xp = readable(x + p * c, in.data());
                float* sp = scale + p * c;
                float* pp = power + p * c;
                for (int j = 0; j < c; ++j) pad[size_t(j + r)] = xp[j] * xp[j];
                windowSum(pad.data(), sp, c, r);
                for (int j = 0; j < c; ++j) sp[j] = d_.bias + d_.alpha * sp[j];
                negPow(sp, pp, c, d_.beta);
                float* yp = y + p * c;
                for (int j = 0; j < c; ++j) yp[j] = xp[j] * pp[j];
            }
        }
    }
    // dx_j = dy_j scale_j^-beta - 2 alpha beta x_j sum_{|i-j|<=r} dy_i y_i / scale_i
    void backward(Stream, const float* x, const float* y, const float* dy, float* dx, const void* saved,
                  float* dxSum) override {
        useThreads(threads_);
        const float* scale = static_cast<const float*>(saved);
        const float* power = scale + count();
        const int64_t pixels = int64_t(d_.n) * d_.h * d_.w;
        const int c = d_.c, r = d_.depthRadius;
        const float k = 2.f * d_.alpha * d_.beta;
        // The pixels [b, e), their dx added to `sum` where given.
        const auto pixelsOf = [&](int64_t b, int64_t e, ChannelSums::Adder* sum) {
            std::vector<float> pad(size_t(c + 2 * r), 0.f), window(static_cast<size_t>(c));
            for (int64_t p = b; p < e; ++p) {
                const int64_t o = p * c;
                for (int j = 0; j < c; ++j) pad[size_t(j + r)] = dy[o + j] * y[o + j] / scale[o + j];
                windowSum(pad.data(), window.data(), c, r);
                if (!d_.relu) {
                    for (int j = 0; j < c; ++j)
                        dx[o + j] = dy[o + j] * power[o + j] - k * x[o + j] * window[size_t(j)];
                } else {
                    for (int j = 0; j < c; ++j)  // (the ReLU's gradient: only where its input was positive)
                        dx[o + j] = x[o + j] > 0.f ? dy[o + j] * power[o + j] - k * x[o + j] * window[size_t(j)] : 0.f;
                }
                if (sum) sum->add(dx + o);
            }
        };
        if (dxSum) {
            sums_.run(pixels, [&](int64_t b, int64_t e, ChannelSums::Adder& sum) { pixelsOf(b, e, &sum); }, dxSum);
            return;
        }
#pragma omp parallel
        {
            const int64_t t = omp_get_thread_num(), team = omp_get_num_threads();
            pixelsOf(pixels * t / team, pixels * (t + 1) / team, nullptr);
        }
    }

private:
    size_t count() const { return size_t(d_.n) * d_.c * d_.h * d_.w; }
    // A pixel's channels as the normalisation reads them: x itself, or relu(x) written into `in`.
    const float* readable(const float* x, float* in) const {
        if (!d_.relu) return x;
        for (int j = 0; j < d_.c; ++j) in[j] = x[j] > 0.f ? x[j] : 0.f;
        return in;
    }
    // out_j = sum_{k=0..2r} pad_{j+k}, for j < c.
    static void windowSum(const float* pad, float* out, int c, int r) {
        for (int j = 0; j < c; ++j) out[j] = 0.f;
        for (int k = 0; k <= 2 * r; ++k)
#pragma omp simd
            for (int j = 0; j < c; ++j) out[j] += pad[j + k];
    }
    // out = s^-beta, with square roots for TF's common beta of 0.75 and 0.5 (pow is ~10x dearer).
    static void negPow(const float* s, float* out, int c, float beta) {
        if (beta == 0.75f) {
#pragma omp simd
            for (int j = 0; j < c; ++j) {
                const float q = std::sqrt(s[j]);
                out[j] = 1.f / (q * std::sqrt(q));
            }
        } else if (beta == 0.5f) {
#pragma omp simd
            for (int j = 0; j < c; ++j) out[j] = 1.f / std::sqrt(s[j]);
        } else {
            for (int j = 0; j < c; ++j) out[j] = std::pow(s[j], -beta);
        }
    }

    int threads_;
    LrnDesc d_;
    ChannelSums sums_;
    std::shared_ptr<Backend> owner_;  // held so that the plan cannot outlive its backend
};

class CpuDense final : public DenseOp, OneDnnOp {
public:
    CpuDense(const CpuContext& c, const DenseDesc& d) : OneDnnOp(c), d_(d), ys_(size_t(d.n) * d.out) {
        using namespace dnnl;
        // Plain layouts throughout: oneDNN runs these as GEMMs, and a reorder of the (out, in)
        // weights would cost about a GEMM pass (bf16: x, w, dy rounded into bf16 buffers of the
        // same layouts; y, dx, dw, db stay fp32).
        x_ = {{d.n, d.in}, dt::f32, tag::nc};
        w_ = {{d.out, d.in}, dt::f32, tag::oi};
        b_ = {{d.out}, dt::f32, tag::x};
        y_ = {{d.n, d.out}, dt::f32, tag::nc};
        // Bf16: the weights stay plain too, rounded by our own pass (Arg::castOnly): reordering
        // them into brgemm's blocked layout cost as much as the GEMM it fed. The weight gradient
        // stays plain fp32, where the GEMM kernel beat brgemm's and needs no reorder.
        const memory::desc xIn = {x_.dims(), c.matmul, tag::nc}, wIn = {w_.dims(), c.matmul, tag::oi},
                           yIn = {y_.dims(), c.matmul, tag::nc};
        wBf16_ = {w_.dims(), dt::bf16, tag::oi};
        fwdPd_ = inner_product_forward::primitive_desc(
            inner_product_forward::desc(prop_kind::forward_training, xIn, wIn, b_, y_), eng_);
        bwdDataPd_ = inner_product_backward_data::primitive_desc(inner_product_backward_data::desc(x_, wIn, yIn),
                                                                 eng_, fwdPd_);
        bwdWeightsPd_ = inner_product_backward_weights::primitive_desc(
            inner_product_backward_weights::desc(xIn, w_, b_, yIn), eng_, fwdPd_);
        fwd_ = inner_product_forward(fwdPd_);
        bwdData_ = inner_product_backward_data(bwdDataPd_);
        bwdWeights_ = inner_product_backward_weights(bwdWeightsPd_);
        // Each input once per step (fp32: the caller's own memory, no copy).
        xIn_ = StepInput(Arg(eng_, x_, xIn));
        wIn_ = StepInput(Arg(eng_, w_, fwdPd_.weights_desc()));
        wData_ = StepInput(Arg(eng_, w_, bwdDataPd_.weights_desc()));
        dataW_ = sharedOr(wIn_, wData_);
        dyIn_ = StepInput(Arg(eng_, y_, yIn));
    }
    void forward(Stream st, const float* x, const float* w, const uint16_t* wBf16, const float* b, float* y,
                 void* mask) override {
        auto& s = pick(st);
        for (StepInput* i : {&xIn_, &wIn_, &wData_, &dyIn_}) i->forget();
        fwd_.execute(s, {{DNNL_ARG_SRC, xIn_.in(s, x)}, {DNNL_ARG_WEIGHTS, weights(s, wIn_, w, wBf16)},
                         {DNNL_ARG_BIAS, m(b_, b)}, {DNNL_ARG_DST, m(y_, y)}});
        // The fused ReLU: the backend's own pass, as the ReLU layer's (oneDNN's post-op writes -0).
        if (d_.relu) owner_->reluForward(st, y, y, ys_);
        if (d_.maskBytes() == 0) return;
        if (!mask) throw Error("CPU backend: an inner product that keeps its ReLU's mask was given no memory for it");
        // Its mask, word by word (ew::reluMaskWord; y > 0 after the ReLU where it was before).
        useThreads(threads_);
        auto* words = static_cast<uint32_t*>(mask);
        const int64_t perExample = ew::reluMaskLd(d_.out) / 32, count = d_.n * perExample;
#pragma omp parallel for if (count * 32 > kParallelMin)
        for (int64_t i = 0; i < count; ++i) words[i] = ew::reluMaskWord(y, d_.out, i / perExample, i % perExample);
    }
    void backwardData(Stream st, const float* dy, const float* w, const uint16_t* wBf16, float* dx,
                      const void* mask) override {
        auto& s = pick(st);
        bwdData_.execute(s, {{DNNL_ARG_DIFF_DST, dyIn_.in(s, dy)}, {DNNL_ARG_WEIGHTS, weights(s, *dataW_, w, wBf16)},
                             {DNNL_ARG_DIFF_SRC, m(x_, dx)}});
        if (!d_.reluMaskIn) return;
        if (!mask) throw Error("CPU backend: an inner product that masks its input gradient was given no mask");
        // dx where the layer before's ReLU output was positive, as that ReLU's backward would pass it.
        useThreads(threads_);
        const auto* words = static_cast<const uint32_t*>(mask);
        const int64_t ld = ew::reluMaskLd(d_.in);
#pragma omp parallel for if (int64_t(d_.n) * d_.in > kParallelMin)
        for (int64_t e = 0; e < d_.n; ++e) {
            float* row = dx + e * d_.in;
            for (int u = 0; u < d_.in; ++u) row[u] = ew::reluMaskBit(words, ld, e, u) ? row[u] : 0.f;
        }
    }
    void backwardWeights(Stream st, const float* x, const float* dy, float* dw, float* db) override {
        auto& s = pick(st);
        bwdWeights_.execute(s, {{DNNL_ARG_SRC, xIn_.in(s, x)}, {DNNL_ARG_DIFF_DST, dyIn_.in(s, dy)},
                                {DNNL_ARG_DIFF_WEIGHTS, m(w_, dw)}, {DNNL_ARG_DIFF_BIAS, m(b_, db)}});
    }

private:
    memory m(const memory::desc& md, const float* p) const { return wrap(md, p); }
    // The weights as primitive `in` reads them: the update's bf16 rounding where given and it is
    // the plain (out, in) bf16 the primitive wants (the memory only wraps it), else `in`'s own.
    memory weights(dnnl::stream& s, StepInput& in, const float* w, const uint16_t* wBf16) {
        if (wBf16 && in.prim() == wBf16_) return memory(wBf16_, eng_, const_cast<uint16_t*>(wBf16));
        return in.in(s, w);
    }

    DenseDesc d_;
    size_t ys_;  // y's values
    memory::desc x_, w_, b_, y_;
    memory::desc wBf16_;  // (out, in) bf16, plain: the layout of the update's rounding
    StepInput xIn_, wIn_, wData_, dyIn_;
    StepInput* dataW_ = nullptr;  // what backwardData reads w from
    dnnl::inner_product_forward::primitive_desc fwdPd_;
    dnnl::inner_product_backward_data::primitive_desc bwdDataPd_;
    dnnl::inner_product_backward_weights::primitive_desc bwdWeightsPd_;
    dnnl::inner_product_forward fwd_;
    dnnl::inner_product_backward_data bwdData_;
    dnnl::inner_product_backward_weights bwdWeights_;
};

// The optimisers' updates of elements [b, e): memory and instruction bound, so cloned (the
// baseline build moves four floats an instruction). Formulas in elementwise_math.hpp. `step(i)`
// updates p[i]; where r is given, the same pass stores p[i] rounded to bf16 in r[i] (the next
// step's weights for bf16 matrix work: no second pass reading the weights again).
template <class Step>
[[gnu::always_inline]] inline void updateLoop(Step&& step, const float* p, uint16_t* r, int64_t b, int64_t e) {
    if (r) {
#pragma omp simd
        for (int64_t i = b; i < e; ++i) {
            step(i);
            r[i] = floatToBf16(p[i]);
        }
    } else {
#pragma omp simd
        for (int64_t i = b; i < e; ++i) step(i);
    }
}
TB_CPU_CLONES void sgdRange(float* p, const float* g, uint16_t* r, float lr, int64_t b, int64_t e) {
    updateLoop([&](int64_t i) { p[i] -= lr * g[i]; }, p, r, b, e);
}
TB_CPU_CLONES void momentumRange(float* p, float* m, const float* g, uint16_t* r, float lr, float mu, int64_t b,
                                 int64_t e) {
    updateLoop([&](int64_t i) { ew::momentumStep(p[i], m[i], g[i], lr, mu); }, p, r, b, e);
}
TB_CPU_CLONES void nesterovRange(float* p, float* m, const float* g, uint16_t* r, float lr, float mu, int64_t b,
                                 int64_t e) {
    updateLoop([&](int64_t i) { ew::nesterovStep(p[i], m[i], g[i], lr, mu); }, p, r, b, e);
}
TB_CPU_CLONES void adamRange(float* p, float* m, float* v, const float* g, uint16_t* r, float lrT, float b1, float b2,
                             float eps, int64_t b, int64_t e) {
    updateLoop([&](int64_t i) { ew::adamStep(p[i], m[i], v[i], g[i], lrT, b1, b2, eps); }, p, r, b, e);
}

// y += a x, x *= a and x.x: memory-bound vector arithmetic on the calling thread alone (the
// communicator's reductions call axpy from every tower thread at once). As fast as OpenBLAS's
// kernels at 1K, 64K and 3.2M floats (measured 2026-12-05), without its thread pool, which spun on
// a core for 0.1 s at the start of every process.
TB_CPU_CLONES void axpyRange(float a, const float* x, float* y, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
TB_CPU_CLONES void scaleRange(float a, float* x, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) x[i] *= a;
}
// In 16 double lanes, lane j summing the elements j mod 16: the same order, and so the same bits,
// in every clone (a simd reduction would follow the vector width).
TB_CPU_CLONES double sumSquares(const float* x, int64_t n) {
    constexpr int kLanes = 16;
    double lane[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
#pragma omp simd
        for (int j = 0; j < kLanes; ++j) lane[j] += double(x[i + j]) * double(x[i + j]);
    for (int j = 0; i < n; ++i, ++j) lane[j] += double(x[i]) * double(x[i]);
    double s = 0;
    for (const double v : lane) s += v;
    return s;
}

class CpuBackend final : public Backend {
public:
    CpuBackend(int threads, int index, MatmulPrecision precision)
        : threads_(threads > 0 ? threads : omp_get_num_procs()),
          index_(index),
          precision_(precision),
          eng_(dnnl::engine::kind::cpu, 0),
          default_(eng_) {
        if (precision_ == MatmulPrecision::Bf16)
            if (const std::string why = cpuBf16Missing(); !why.empty()) throw Error(why);
        useThreads(threads_);
    }

    std::string name() const override {
        const dnnl_version_t* v = dnnl_version();
        return "cpu (oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
               std::to_string(v->patch) + ", " + std::to_string(threads_) + " threads" +
               (precision_ == MatmulPrecision::Bf16 ? ", bf16 matrix work" : "") + ")";
    }
    Device device() const override { return Device{DeviceType::Cpu, index_}; }
    MemoryInfo memoryInfo() const override { return {}; }

    void* allocate(size_t bytes) override {
        // 64-byte alignment suits AVX-512 loads and oneDNN's expectations.
        void* p = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
        if (!p) throw Error("out of host memory allocating " + std::to_string(bytes) + " bytes");
        return p;
    }
    void deallocate(void* p) override { std::free(p); }
    void* allocateHost(size_t bytes) override { return allocate(bytes); }
    void deallocateHost(void* p) override { std::free(p); }
    AllocatorStats allocatorStats() const override { return {}; }
    void copyFromHost(Stream, void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
    void copyToHost(Stream, void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
    void copy(Stream, void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
    void copy2d(Stream, void* dst, size_t dstPitch, const void* src, size_t srcPitch, size_t width,
                size_t rows) override {
        useThreads(threads_);
        auto* d = static_cast<char*>(dst);
        const auto* s = static_cast<const char*>(src);
        const int64_t n = int64_t(rows);
#pragma omp parallel for if (int64_t(rows * width) > kParallelMin * 4)
        for (int64_t r = 0; r < n; ++r) std::memcpy(d + size_t(r) * dstPitch, s + size_t(r) * srcPitch, width);
    }

    Stream createStream() override { return new StreamImpl{dnnl::stream(eng_)}; }
    void destroyStream(Stream s) override { delete s; }
    void synchronize(Stream s) override { (s ? s->stream : default_).wait(); }
    Event createEvent() override { return new EventImpl{}; }
    void destroyEvent(Event e) override { delete e; }
    void recordEvent(Event e, Stream) override { e->at = std::chrono::steady_clock::now(); }
    void waitEvent(Stream, Event) override {}
    void synchronizeEvent(Event) override {}  // (every call has run when it returns)
    double elapsedSeconds(Event a, Event b) override { return std::chrono::duration<double>(b->at - a->at).count(); }

    std::unique_ptr<ConvOp> makeConv(const ConvDesc& d) override {
        return std::make_unique<CpuConv>(context(), d);
    }
    std::unique_ptr<PoolOp> makePool(const PoolDesc& d) override {
        return std::make_unique<CpuPool>(context(), d);
    }
    std::unique_ptr<LrnOp> makeLrn(const LrnDesc& d) override {
        return std::make_unique<CpuLrn>(context(), d);
    }
    std::unique_ptr<DenseOp> makeDense(const DenseDesc& d) override {
        return std::make_unique<CpuDense>(context(), d);
    }
    std::unique_ptr<BatchNormOp> makeBatchNorm(const BatchNormDesc& d) override {
        return makeCpuBatchNorm(d, threads_, shared_from_this());
    }

    void fill(Stream, float* x, float value, size_t n) override {
        useThreads(threads_);
        const int64_t m = int64_t(n);
#pragma omp parallel for simd if (m > kParallelMin)
        for (int64_t i = 0; i < m; ++i) x[i] = value;
    }
    void scale(Stream, float* x, float a, size_t n) override { scaleRange(a, x, int64_t(n)); }
    void axpy(Stream, float a, const float* x, float* y, size_t n) override { axpyRange(a, x, y, int64_t(n)); }
    void addSumSquares(Stream, const float* x, size_t n, float a, float* out) override {
        out[0] += a * float(sumSquares(x, int64_t(n)));
    }
    void reluForward(Stream, const float* x, float* y, size_t n) override {
        useThreads(threads_);
        const int64_t m = int64_t(n);
#pragma omp parallel for simd if (m > kParallelMin)
        for (int64_t i = 0; i < m; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
    }
    void add(Stream, const float* a, const float* b, float* y, size_t n, bool relu) override {
        useThreads(threads_);
        const int64_t m = int64_t(n);
        if (relu) {
#pragma omp parallel for simd if (m > kParallelMin)
            for (int64_t i = 0; i < m; ++i) y[i] = std::max(a[i] + b[i], 0.f);
        } else {
#pragma omp parallel for simd if (m > kParallelMin)
            for (int64_t i = 0; i < m; ++i) y[i] = a[i] + b[i];
        }
    }
    void reluBackward(Stream, const float* y, const float* dy, float* dx, size_t n) override {
        useThreads(threads_);
        const int64_t m = int64_t(n);
#pragma omp parallel for simd if (m > kParallelMin)
        for (int64_t i = 0; i < m; ++i) {
            // dy read whatever y is: a select the compiler vectorises, not a mispredicted branch.
            const float g = dy[i];
            dx[i] = y[i] > 0.f ? g : 0.f;
        }
    }
    void dropoutForward(Stream, const float* x, float* y, float* mask, size_t n, float keep, uint64_t seed) override {
        useThreads(threads_);
        const int64_t m = int64_t(n);
#pragma omp parallel for if (m > kParallelMin)
        for (int64_t i = 0; i < m; ++i) {
            mask[i] = ew::dropoutMask(seed, uint64_t(i), keep);
            y[i] = x[i] * mask[i];
        }
    }
    void dropoutBackward(Stream, const float* dy, const float* mask, float* dx, size_t n) override {
        useThreads(threads_);
        const int64_t m = int64_t(n);
#pragma omp parallel for simd if (m > kParallelMin)
        for (int64_t i = 0; i < m; ++i) dx[i] = dy[i] * mask[i];
    }
    void softmaxCrossEntropy(Stream, const float* logits, const int32_t* labels, float* probs, int n, int k,
                             float* stats) override {
        double loss = 0, correct = 0;
        for (int i = 0; i < n; ++i) {
            bool right = false;
            loss += ew::softmaxRow(logits + int64_t(i) * k, probs + int64_t(i) * k, k, labels[i], right);
            correct += right;
        }
        stats[0] += float(loss);
        stats[1] += float(correct);
    }
    void softmaxCrossEntropyBackward(Stream, const float* probs, const int32_t* labels, float* dlogits, int n, int k,
                                     float scale) override {
        for (int i = 0; i < n; ++i) {
            const float* p = probs + int64_t(i) * k;
            float* d = dlogits + int64_t(i) * k;
            for (int j = 0; j < k; ++j) d[j] = scale * (p[j] - (j == labels[i] ? 1.f : 0.f));
        }
    }

    void applyUpdate(Stream, UpdateRule rule, const UpdateParams& h, float* p, const float* g, float* m, float* v,
                     uint16_t* r, size_t count) override {
        useThreads(threads_);
        const int64_t n = int64_t(count);
        const float lr = h.lr, mu = h.momentum;
        switch (rule) {
        case UpdateRule::Sgd:
            parallelRanges(n, [&](int64_t b, int64_t e) { sgdRange(p, g, r, lr, b, e); });
            break;
        case UpdateRule::Momentum:  // TF MomentumOptimizer: a = mu a + g; p -= lr a
            parallelRanges(n, [&](int64_t b, int64_t e) { momentumRange(p, m, g, r, lr, mu, b, e); });
            break;
        case UpdateRule::Nesterov:  // TF use_nesterov: a = mu a + g; p -= lr (g + mu a)
            parallelRanges(n, [&](int64_t b, int64_t e) { nesterovRange(p, m, g, r, lr, mu, b, e); });
            break;
        case UpdateRule::Adam: {  // Kingma & Ba with TF's epsilon placement
            const float b1 = h.beta1, b2 = h.beta2, eps = h.epsilon;
            const float lrT = ew::adamStepSize(lr, b1, b2, h.step);
            parallelRanges(n, [&](int64_t b, int64_t e) { adamRange(p, m, v, g, r, lrT, b1, b2, eps, b, e); });
            break;
        }
        }
    }
    void emaUpdate(Stream, float* shadow, const float* p, float decay, size_t count) override {
        useThreads(threads_);
        const int64_t n = int64_t(count);
#pragma omp parallel for simd if (n > kParallelMin)
        for (int64_t i = 0; i < n; ++i) shadow[i] = ew::emaStep(shadow[i], p[i], decay);
    }
    // Over the backend's team: these convert whole gradients (megabytes) for the wire.
    void roundToBf16(Stream, const float* x, uint16_t* y, size_t n) override {
        useThreads(threads_);
        parallelRanges(int64_t(n), [&](int64_t b, int64_t e) { tb::roundToBf16(x + b, y + b, size_t(e - b)); });
    }
    void widenBf16(Stream, const uint16_t* x, float* y, size_t n) override {
        useThreads(threads_);
        parallelRanges(int64_t(n), [&](int64_t b, int64_t e) { tb::widenBf16(x + b, y + b, size_t(e - b)); });
    }

private:
    CpuContext context() {
        return {eng_, &default_, threads_, shared_from_this(), precision_ == MatmulPrecision::Bf16 ? dt::bf16 : dt::f32};
    }

    int threads_;
    int index_;
    MatmulPrecision precision_;
    dnnl::engine eng_;
    dnnl::stream default_;
};

}  // namespace

std::shared_ptr<Backend> makeCpuBackend(int threads, int index, MatmulPrecision precision) {
    return std::make_shared<CpuBackend>(threads, index, precision);
}

std::string cpuIsaName() {
    using dnnl::cpu_isa;
    const cpu_isa isa = dnnl::get_effective_cpu_isa();
    // From the richest down: each level's bits include those below it.
    const std::pair<cpu_isa, const char*> names[] = {
        {cpu_isa::avx512_core_amx, "avx512_core_amx"}, {cpu_isa::avx512_core_bf16, "avx512_core_bf16"},
        {cpu_isa::avx512_core_vnni, "avx512_core_vnni"}, {cpu_isa::avx512_core, "avx512_core"},
        {cpu_isa::avx2_vnni, "avx2_vnni"}, {cpu_isa::avx2, "avx2"}, {cpu_isa::avx, "avx"}, {cpu_isa::sse41, "sse41"}};
    for (const auto& [level, name] : names)
        if ((unsigned(isa) & unsigned(level)) == unsigned(level)) return name;
    return "generic";
}

std::string cpuBf16Missing() {
    const unsigned need = unsigned(dnnl::cpu_isa::avx512_core_bf16);
    if ((unsigned(dnnl::get_effective_cpu_isa()) & need) == need) return "";
    return "--precision bf16: this processor has no AVX512-BF16 or AMX instructions (oneDNN's instruction set here: " +
           cpuIsaName() + "), which bf16 matrix work needs to be fast; use --precision fp32";
}


}  // namespace tb
