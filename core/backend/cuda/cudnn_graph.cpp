#include "backend/cuda/cudnn_graph.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace tb::cuda {

// The graph's and the plan's handle attributes are deprecated from cuDNN 9.x on, in favour of a
// device-properties descriptor; every 9.x still takes them, and they are what binds a plan to the
// device its handle is on.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
constexpr cudnnBackendAttributeName_t kGraphHandle = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
constexpr cudnnBackendAttributeName_t kPlanHandle = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
#pragma GCC diagnostic pop

// One backend descriptor. A refused call throws GraphRefused naming what was being built.
class BackendDescriptor {
public:
    BackendDescriptor(cudnnBackendDescriptorType_t type, std::string what) : what_(std::move(what)) {
        check(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor");
    }
    ~BackendDescriptor() {
        if (d_) cudnnBackendDestroyDescriptor(d_);
    }
    BackendDescriptor(const BackendDescriptor&) = delete;
    BackendDescriptor& operator=(const BackendDescriptor&) = delete;

    BackendDescriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                           const void* values) {
        check(cudnnBackendSetAttribute(d_, name, type, count, values), "attribute " + std::to_string(int(name)));
        return *this;
    }
    BackendDescriptor& set(cudnnBackendAttributeName_t name, const BackendDescriptor& d) {
        return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d.d_);
    }
    BackendDescriptor& set(cudnnBackendAttributeName_t name, int64_t v) { return set(name, CUDNN_TYPE_INT64, 1, &v); }
    void finalize() { check(cudnnBackendFinalize(d_), "cudnnBackendFinalize"); }
    // One value of `name`, or nothing where cuDNN does not give it.
    template <class T>
    bool get(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, T& out) const {
        int64_t got = 0;
        return cudnnBackendGetAttribute(d_, name, type, 1, &got, &out) == CUDNN_STATUS_SUCCESS && got == 1;
    }
    cudnnBackendDescriptor_t raw() const { return d_; }
    const std::string& what() const { return what_; }

private:
    void check(cudnnStatus_t s, const std::string& call) const {
        if (s != CUDNN_STATUS_SUCCESS)
            throw GraphRefused("cuDNN's graph API: " + what_ + ": " + call + " answered " + cudnnGetErrorString(s),
                               lastingRefusal(s));
    }

    cudnnBackendDescriptor_t d_ = nullptr;
    std::string what_;
};

using DescPtr = std::shared_ptr<BackendDescriptor>;

namespace {

// The tensors' ids in a variant pack.
enum : int64_t { kX = 1, kW = 2, kConvOut = 3, kBias = 4, kY = 5, kDy = 6, kDx = 7, kDw = 8 };

DescPtr make(cudnnBackendDescriptorType_t type, const std::string& what) {
    return std::make_shared<BackendDescriptor>(type, what);
}

// A 4-d tensor (dims as cuDNN orders them: n, c, h, w or k, c, r, s) laid out channels-last:
// activations NHWC, filters (k, r, s, c), a bias (1, k, 1, 1).
DescPtr tensor(int64_t uid, cudnnDataType_t type, std::array<int64_t, 4> dims, int64_t alignment, bool isVirtual,
               const char* what) {
    const auto [n, c, h, w] = dims;
    const std::array<int64_t, 4> strides{c * h * w, 1, w * c, c};
    (void)n;
    DescPtr t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    t->set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data())
        .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data())
        .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
        .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, alignment);
    const bool v = isVirtual;
    t->set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    t->finalize();
    return t;
}

// The numerical notes cuDNN gives an engine.
std::vector<cudnnBackendNumericalNote_t> notesOf(const BackendDescriptor& engine) {
    std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
    int64_t got = 0;
    if (cudnnBackendGetAttribute(engine.raw(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 int64_t(notes.size()), &got, notes.data()) != CUDNN_STATUS_SUCCESS)
        throw GraphRefused("cuDNN's graph API: " + engine.what() + ": its numerical notes cannot be read");
    return {notes.begin(), notes.begin() + got};
}

}  // namespace

struct GraphConvPlan::Pack {
    std::array<const void*, 4> pointers{};
    void* workspace = nullptr;
    BackendDescriptor descriptor{CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack"};
};

GraphConvPlan::GraphConvPlan(std::vector<DescPtr> owners, GraphEngine engine, ConvDirection direction, bool bias)
    : owners_(std::move(owners)), engine_(std::move(engine)), direction_(direction), bias_(bias) {}

cudnnStatus_t GraphConvPlan::run(cudnnHandle_t h, const void* a, const void* b, const float* bias, void* out,
                                 void* workspace) const {
    if ((bias != nullptr) != bias_) return CUDNN_STATUS_BAD_PARAM;
    const std::array<const void*, 4> pointers{a, b, bias, out};
    if (!pack_ || pack_->pointers != pointers || pack_->workspace != workspace) {
        std::array<int64_t, 4> uids{};
        switch (direction_) {
        case ConvDirection::Forward: uids = {kX, kW, kBias, kY}; break;
        case ConvDirection::BackwardData: uids = {kDy, kW, 0, kDx}; break;
        case ConvDirection::BackwardFilter: uids = {kX, kDy, 0, kDw}; break;
        }
        std::array<int64_t, 4> ids{};
        std::array<void*, 4> data{};
        int64_t count = 0;
        for (size_t i = 0; i < 4; ++i)
            if (uids[i] != 0 && (uids[i] != kBias || bias)) {
                ids[size_t(count)] = uids[i];
                data[size_t(count++)] = const_cast<void*>(pointers[i]);
            }
        try {
            auto pack = std::make_shared<Pack>();
            pack->descriptor.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, count, ids.data())
                .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, count, data.data())
                .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
            pack->descriptor.finalize();
            pack->pointers = pointers;
            pack->workspace = workspace;
            pack_ = std::move(pack);
        } catch (const GraphRefused&) {
            return CUDNN_STATUS_BAD_PARAM;
        }
    }
    return cudnnBackendExecute(h, owners_.front()->raw(), pack_->descriptor.raw());
}

GraphConv::GraphConv(cudnnHandle_t h, const GraphConvShape& s, ConvDirection direction)
    : handle_(h), direction_(direction), bias_(direction == ConvDirection::Forward && s.bias) {
    const cudnnDataType_t in = s.bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT, out = CUDNN_DATA_FLOAT;
    const int64_t a = int64_t(GraphConvPlan::kAlignment);
    const std::array<int64_t, 4> xDims{s.n, s.c, s.h, s.w}, wDims{s.k, s.c, s.r, s.s},
        yDims{s.n, s.k, s.outH(), s.outW()};
    const auto keep = [&](DescPtr d) {
        parts_.push_back(d);
        return d;
    };

    DescPtr conv = keep(make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "the convolution"));
    const int64_t dims = 2;
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const std::array<int64_t, 2> dilations{1, 1}, strides{s.strideH, s.strideW}, pads{s.padH, s.padW};
    conv->set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, dims)
        .set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute)
        .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode)
        .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilations.data())
        .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, strides.data())
        .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads.data())
        .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads.data());
    conv->finalize();

    // The direction's operation: its descriptor and its three tensors, each set as one of its
    // attributes (id, data type, dims as cuDNN orders them, virtual or not).
    struct Operand {
        cudnnBackendAttributeName_t attribute;
        int64_t uid;
        cudnnDataType_t type;
        std::array<int64_t, 4> dims;
        bool isVirtual;
        const char* name;
    };
    struct Operation {
        cudnnBackendDescriptorType_t type;
        const char* what;
        cudnnBackendAttributeName_t alpha, beta, conv;
        std::array<Operand, 3> operands;
    };
    const Operation operation =
        direction == ConvDirection::Forward
            ? Operation{CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, "the forward convolution",
                        CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                        CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                        {{{CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, kX, in, xDims, false, "x"},
                          {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, kW, in, wDims, false, "w"},
                          // with a bias, the convolution's y is virtual: the add's input
                          {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, s.bias ? kConvOut : kY, out, yDims, s.bias,
                           "the convolution's y"}}}}
        : direction == ConvDirection::BackwardData
            ? Operation{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, "the input gradient",
                        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
                        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                        {{{CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, kDy, in, yDims, false, "dy"},
                          {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, kW, in, wDims, false, "w"},
                          {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, kDx, out, xDims, false, "dx"}}}}
            : Operation{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, "the filter gradient",
                        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
                        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                        {{{CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, kX, in, xDims, false, "x"},
                          {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, kDy, in, yDims, false, "dy"},
                          {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, kDw, out, wDims, false, "dw"}}}};
    const float alpha = 1.f, beta = 0.f;
    DescPtr op = keep(make(operation.type, operation.what));
    std::array<DescPtr, 3> tensors;
    for (size_t i = 0; i < 3; ++i) {
        const Operand& o = operation.operands[i];
        tensors[i] = keep(tensor(o.uid, o.type, o.dims, a, o.isVirtual, o.name));
        op->set(o.attribute, *tensors[i]);
    }
    op->set(operation.conv, *conv)
        .set(operation.alpha, CUDNN_TYPE_FLOAT, 1, &alpha)
        .set(operation.beta, CUDNN_TYPE_FLOAT, 1, &beta);
    op->finalize();
    std::vector<cudnnBackendDescriptor_t> ops{op->raw()};
    if (direction == ConvDirection::Forward && s.bias) {
        // y = conv + b, b broadcast over n, h, w; b is a slice of a flat buffer: 4-byte aligned
        DescPtr b = keep(tensor(kBias, out, {1, s.k, 1, 1}, 4, false, "b"));
        DescPtr yb = keep(tensor(kY, out, yDims, a, false, "y"));
        DescPtr add = keep(make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "the bias's add"));
        const cudnnPointwiseMode_t pw = CUDNN_POINTWISE_ADD;
        add->set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &pw)
            .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute);
        add->finalize();
        DescPtr addOp = keep(make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "the bias's add operation"));
        addOp->set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, *add)
            .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, *tensors[2])
            .set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b)
            .set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, *yb);
        addOp->finalize();
        ops.push_back(addOp->raw());
    }
    graph_ = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "the operation graph");
    graph_->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()), ops.data());
    if (handle_) graph_->set(kGraphHandle, CUDNN_TYPE_HANDLE, 1, &handle_);
    graph_->finalize();
    parts_.push_back(graph_);
}

GraphConv::~GraphConv() = default;

std::vector<GraphConvPlan> GraphConv::candidates(ConvRule rule, int most, size_t maxWorkspace, Counts& counts) const {
    counts = {};
    if (!handle_) return {};  // (a graph built to be checked: no device to list engines for)
    BackendDescriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "the engine heuristics");
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, *graph_)
        .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    heuristics.finalize();
    int64_t count = 0;
    if (cudnnBackendGetAttribute(heuristics.raw(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                 &count, nullptr) != CUDNN_STATUS_SUCCESS)
        throw GraphRefused("cuDNN's graph API: the engine heuristics give no results");
    std::vector<DescPtr> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
        configs.push_back(make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine configuration " + std::to_string(i)));
        raw.push_back(configs.back()->raw());
    }
    int64_t got = 0;
    if (count > 0 && cudnnBackendGetAttribute(heuristics.raw(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()) !=
                         CUDNN_STATUS_SUCCESS)
        throw GraphRefused("cuDNN's graph API: the engine heuristics' results cannot be read");
    counts.listed = int(got);
    std::vector<GraphConvPlan> plans;
    for (int64_t i = 0; i < got && int(plans.size()) < most; ++i) {
        std::string why;
        bool obeyed = false;
        std::unique_ptr<GraphConvPlan> p = plan(configs[size_t(i)], {}, rule, why, &obeyed);
        counts.obeying += obeyed;
        counts.built += p != nullptr;
        if (p && p->engine().workspace <= maxWorkspace) plans.push_back(std::move(*p));
    }
    counts.fitting = int(plans.size());
    return plans;
}

std::unique_ptr<GraphConvPlan> GraphConv::rebuild(const GraphEngine& kept, ConvRule rule, std::string& why) const {
    try {
        DescPtr engine = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine " + std::to_string(kept.id));
        engine->set(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, *graph_).set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, kept.id);
        engine->finalize();
        std::vector<DescPtr> knobs;
        std::vector<cudnnBackendDescriptor_t> raw;
        for (const auto& [type, value] : kept.knobs) {
            DescPtr k = make(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, "knob " + std::to_string(type));
            const auto knobType = cudnnBackendKnobType_t(type);
            k->set(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &knobType)
                .set(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, value);
            k->finalize();
            knobs.push_back(k);
            raw.push_back(k->raw());
        }
        DescPtr config = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "the kept engine's configuration");
        config->set(CUDNN_ATTR_ENGINECFG_ENGINE, *engine);
        if (!raw.empty())
            config->set(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(raw.size()), raw.data());
        config->finalize();
        knobs.push_back(engine);
        std::unique_ptr<GraphConvPlan> p = plan(config, std::move(knobs), rule, why);
        std::vector<std::array<int64_t, 2>> keptKnobs = kept.knobs;
        std::sort(keptKnobs.begin(), keptKnobs.end());
        if (p && (p->engine().id != kept.id || p->engine().knobs != keptKnobs)) {
            why = "cuDNN built another engine or knobs than those kept";
            return nullptr;
        }
        return p;
    } catch (const GraphRefused& e) {
        why = e.what();
        return nullptr;
    }
}

std::unique_ptr<GraphConvPlan> GraphConv::plan(const DescPtr& config, std::vector<DescPtr> owners, ConvRule rule,
                                               std::string& why, bool* obeyed) const {
    try {
        // The configuration's engine (its index and notes) and knob choices, read back.
        BackendDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "an engine");
        cudnnBackendDescriptor_t e = engine.raw();
        int64_t got = 0;
        if (cudnnBackendGetAttribute(config->raw(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                                     &e) != CUDNN_STATUS_SUCCESS)
            throw GraphRefused("cuDNN's graph API: an engine configuration names no engine");
        GraphEngine id;
        if (!engine.get(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, id.id))
            throw GraphRefused("cuDNN's graph API: an engine has no global index");
        if (!engineObeys(notesOf(engine), rule)) {
            why = "engine " + std::to_string(id.id) + " breaks the run's rule (math or determinism)";
            return nullptr;
        }
        if (obeyed) *obeyed = true;
        // The knob choices, into as many descriptors as there are knob types (cudnn-frontend reads
        // them alike); only the `got` that cuDNN filled count. Unread knobs would rebuild another
        // kernel than the one timed, so an engine whose knobs cannot be read is dropped.
        std::vector<DescPtr> knobs;
        std::vector<cudnnBackendDescriptor_t> raw;
        for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
            knobs.push_back(make(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, "a knob choice"));
            raw.push_back(knobs.back()->raw());
        }
        int64_t knobCount = 0;
        if (cudnnBackendGetAttribute(config->raw(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                     int64_t(raw.size()), &knobCount, raw.data()) != CUDNN_STATUS_SUCCESS ||
            knobCount < 0 || knobCount > int64_t(raw.size()))
            throw GraphRefused("cuDNN's graph API: engine " + std::to_string(id.id) + "'s knob choices cannot be read");
        if (knobCount > kMaxGraphKnobs) {
            why = "engine " + std::to_string(id.id) + " has more knobs than are kept";
            return nullptr;
        }
        knobs.resize(size_t(knobCount));
        for (const DescPtr& k : knobs) {
            cudnnBackendKnobType_t type{};
            int64_t value = 0;
            if (!k->get(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, type) ||
                !k->get(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, value))
                throw GraphRefused("cuDNN's graph API: engine " + std::to_string(id.id) + " has an unreadable knob");
            id.knobs.push_back({int64_t(type), value});
        }
        std::sort(id.knobs.begin(), id.knobs.end());  // as they are kept, whatever order cuDNN lists them in
        auto plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "engine " + std::to_string(id.id) + "'s plan");
        plan->set(kPlanHandle, CUDNN_TYPE_HANDLE, 1, &handle_).set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *config);
        plan->finalize();
        int64_t workspace = 0;
        if (!plan->get(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, workspace) || workspace < 0)
            throw GraphRefused("cuDNN's graph API: engine " + std::to_string(id.id) + "'s plan has no workspace size");
        id.workspace = size_t(workspace);
        owners.insert(owners.begin(), {plan, config});
        owners.insert(owners.end(), parts_.begin(), parts_.end());
        return std::make_unique<GraphConvPlan>(std::move(owners), std::move(id), direction_, bias_);
    } catch (const GraphRefused& e) {
        why = e.what();
        return nullptr;
    }
}

}  // namespace tb::cuda
