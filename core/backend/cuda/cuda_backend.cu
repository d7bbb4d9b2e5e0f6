// The CUDA backend: the Backend interface on one GPU with cuDNN, cuBLAS and our own kernels,
// a caching allocator, streams with their own library handles, events and CUDA Graphs; and the
// module's C entry point, which the registry loads (cuda_module.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/backend_export.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_ops.hpp"
#include "backend/cuda/cuda_stream.hpp"
#include "backend/cuda/device_allocator.hpp"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda_module.h"
#include "cuda_module_abi.h"

namespace tb::cuda {

namespace {

std::string versionText(int v, int major, int minor) {  // 91000, 10000, 100 -> "9.10.0"
    return std::to_string(v / major) + "." + std::to_string(v % major / minor) + "." + std::to_string(v % minor);
}

// The update a capturing stream has just recorded: the kernel node that its launch became, which
// the stream's next work depends on alone.
RecordedUpdate recordedUpdate(cudaStream_t s, UpdateRule rule, const cuda::UpdateArgs& a) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaGraphNode_t* last = nullptr;
    size_t count = 0;
    TB_CUDA(cudaStreamGetCaptureInfo(s, &status, nullptr, nullptr, &last, nullptr, &count));
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    if (status == cudaStreamCaptureStatusActive && count == 1) TB_CUDA(cudaGraphNodeGetType(last[0], &type));
    if (type != cudaGraphNodeTypeKernel)
        throw Error("internal: the optimiser's update was recorded, but its kernel node was not found in the recording "
                    "(capture status " + std::to_string(int(status)) + ", " + std::to_string(count) +
                    " dependencies after it)");
    RecordedUpdate u;  // (its launch is read once the recording has ended: endCapture)
    u.node = last[0];
    u.rule = rule;
    u.args = a;
    return u;
}

class CudaBackend final : public Backend {
public:
    CudaBackend(int device, const TbCudaOptions& options)
        : device_(device), tf32_(options.allowTf32 != 0), bf16_(options.bf16 != 0),
          deterministic_(options.nondeterministic == 0), allocator_(device) {
        use();
        cudaDeviceProp prop{};
        TB_CUDA(cudaGetDeviceProperties(&prop, device));
        gpuName_ = prop.name;
        if (bf16_ && prop.major < 8)
            throw Error("--precision bf16: gpu:" + std::to_string(device) + " (" + gpuName_ + ") has compute capability " +
                        std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                        ", and bf16 tensor cores need 8.0 (Ampere) or later");
        setup_ = makeStream(StreamUse::Setup);
        const std::string deviceKey = gpuName_ + ", sm " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                                      ", " + std::to_string(prop.multiProcessorCount) + " SMs, cuDNN " +
                                      versionText(int(cudnnGetVersion()), 10000, 100);
        ctx_ = PlanContext{nullptr, device_, &allocator_, setup_, tf32_, bf16_, deterministic_, options.algorithms, deviceKey};
    }
    ~CudaBackend() override {
        if (cuda::useDeviceForTeardown(device_, "its set-up stream")) destroyStream(setup_);
    }

    std::string name() const override {
        return "gpu:" + std::to_string(device_) + " " + gpuName_ + " (cuDNN " +
               versionText(int(cudnnGetVersion()), 10000, 100) + (bf16_ ? ", bf16 matrix work" : tf32_ ? ", TF32" : ", FP32") +
               (deterministic_ ? "" : ", nondeterministic algorithms") +
               ")";
    }
    Device device() const override { return Device{DeviceType::Cuda, device_}; }
    MemoryInfo memoryInfo() const override {
        use();
        MemoryInfo m;
        TB_CUDA(cudaMemGetInfo(&m.freeBytes, &m.totalBytes));
        return m;
    }

    void* allocate(size_t bytes) override { return allocator_.allocate(bytes); }
    void deallocate(void* p) override { allocator_.deallocate(p); }
    void* allocateHost(size_t bytes) override {
        use();
        void* p = nullptr;
        // Portable: pinned for every GPU of the process, so one staging buffer serves them all.
        TB_CUDA(cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocPortable));
        return p;
    }
    void deallocateHost(void* p) override {
        if (p) cudaFreeHost(p);
    }
    AllocatorStats allocatorStats() const override { return allocator_.stats(); }

    // cudaMemcpyDefault: unified addressing tells host from device memory, so one call serves
    // pinned or pageable host buffers and this or another GPU's memory.
    void copyFromHost(Stream s, void* dst, const void* src, size_t bytes) override { copy(s, dst, src, bytes); }
    void copyToHost(Stream s, void* dst, const void* src, size_t bytes) override { copy(s, dst, src, bytes); }
    void copy(Stream s, void* dst, const void* src, size_t bytes) override {
        if (bytes == 0 || dst == src) return;
        use();
        TB_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, queueOf(s)));
    }
    void copy2d(Stream s, void* dst, size_t dstPitch, const void* src, size_t srcPitch, size_t width,
                size_t rows) override {
        if (width == 0 || rows == 0) return;
        use();
        TB_CUDA(cudaMemcpy2DAsync(dst, dstPitch, src, srcPitch, width, rows, cudaMemcpyDefault, queueOf(s)));
    }

    Stream createStream() override { return makeStream(StreamUse::Compute); }
    Stream createCopyStream() override { return makeStream(StreamUse::Copies); }
    void destroyStream(Stream s) override {
        if (!s) return;
        use();
        cudaStreamSynchronize(s->stream);
        allocator_.untrack(s);  // (the frees below are fenced by the other streams: this one is idle)
        if (s->cublas) cublasDestroy(s->cublas);
        if (s->cudnn) cudnnDestroy(s->cudnn);
        allocator_.deallocate(s->cublasWorkspace);
        allocator_.deallocate(s->scratch);
        cudaStreamDestroy(s->stream);
        delete s;
    }
    void synchronize(Stream s) override {
        use();
        TB_CUDA(cudaStreamSynchronize(queueOf(s)));
    }

    Event createEvent() override {
        use();
        auto e = std::make_unique<EventImpl>();
        TB_CUDA(cudaEventCreate(&e->event));
        return e.release();
    }
    void destroyEvent(Event e) override {
        if (!e) return;
        cudaEventDestroy(e->event);
        delete e;
    }
    void recordEvent(Event e, Stream s) override {
        use();
        // Inside a recording the event becomes a node of the graph, recorded at each replay.
        if (s && s->capturing) TB_CUDA(cudaEventRecordWithFlags(e->event, s->stream, cudaEventRecordExternal));
        else TB_CUDA(cudaEventRecord(e->event, queueOf(s)));
    }
    void waitEvent(Stream s, Event e) override {
        use();
        TB_CUDA(cudaStreamWaitEvent(queueOf(s), e->event, 0));
    }
    void synchronizeEvent(Event e) override {
        use();
        TB_CUDA(cudaEventSynchronize(e->event));
    }
    double elapsedSeconds(Event a, Event b) override {
        float ms = 0;
        TB_CUDA(cudaEventElapsedTime(&ms, a->event, b->event));
        return ms * 1e-3;
    }

    bool canCapture() const override { return true; }
    void beginCapture(Stream s) override {
        use();
        // Idle first: fences leave a stream being recorded out, so no work queued before its
        // recording may still use a block freed meanwhile (the tower's stream is idle already).
        TB_CUDA(cudaStreamSynchronize(queueOf(s)));
        const auto held = allocator_.holdStreams();  // (device_allocator.hpp: no fence records into it)
        // Thread-local: other towers' threads may allocate or synchronise while this one records.
        TB_CUDA(cudaStreamBeginCapture(queueOf(s), cudaStreamCaptureModeThreadLocal));
        s->capturing = true;
        s->recordedUpdates.clear();
    }
    Graph endCapture(Stream s) override {
        use();
        cudaGraph_t graph = nullptr;
        cudaError_t ended = cudaSuccess;
        {
            const auto held = allocator_.holdStreams();
            ended = cudaStreamEndCapture(queueOf(s), &graph);
            s->capturing = false;
        }
        std::vector<RecordedUpdate> updates = std::exchange(s->recordedUpdates, {});
        // (A failure below is thrown with its code; cleared here so the thread's next launch check
        // does not report it as its own.)
        if (ended != cudaSuccess) cudaGetLastError();
        check(ended, "cudaStreamEndCapture", __FILE__, __LINE__);
        auto g = std::make_unique<GraphImpl>();
        g->graph = graph;
        g->updates = std::move(updates);
        cudaError_t e = cudaSuccess;
        for (size_t i = 0; i < g->updates.size() && e == cudaSuccess; ++i)
            e = cudaGraphKernelNodeGetParams(g->updates[i].node, &g->updates[i].launch);
        if (e == cudaSuccess) e = cudaGraphInstantiate(&g->exec, graph, 0);
        if (e != cudaSuccess) {
            cudaGraphDestroy(graph);
            cudaGetLastError();
        }
        TB_CUDA(e);
        return g.release();
    }
    void abortCapture(Stream s) noexcept override {
        if (!s || !s->capturing) return;
        cudaSetDevice(device_);  // (failing or not, the recording is ended and the flag cleared below)
        const auto held = allocator_.holdStreams();
        // An invalidated recording still has to be ended to leave capture mode; its end returns
        // cudaErrorStreamCaptureInvalidated and no graph. Either way nothing recorded is kept.
        cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(s->stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
            cudaGraph_t graph = nullptr;
            if (cudaStreamEndCapture(s->stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
        }
        s->capturing = false;
        s->recordedUpdates.clear();
        cudaGetLastError();  // the recording's failure is the caller's exception, not the next call's error
    }
    void launchGraph(Graph g, Stream s, const UpdateParams* update) override {
        use();
        if (update)
            for (RecordedUpdate& u : g->updates) {
                // Rewritten for this replay and those after it; replays enqueued already keep theirs.
                const cuda::UpdateArgs a = cuda::withParams(u.args, u.rule, *update);
                if (cuda::sameValues(a, u.args)) continue;
                cudaKernelNodeParams p = u.launch;
                void* args[] = {const_cast<cuda::UpdateArgs*>(&a)};
                p.kernelParams = args;
                p.extra = nullptr;
                TB_CUDA(cudaGraphExecKernelNodeSetParams(g->exec, u.node, &p));
                u.args = a;
            }
        TB_CUDA(cudaGraphLaunch(g->exec, queueOf(s)));
    }
    void destroyGraph(Graph g) override {
        if (!g) return;
        cudaGraphExecDestroy(g->exec);
        cudaGraphDestroy(g->graph);
        delete g;
    }

    std::unique_ptr<ConvOp> makeConv(const ConvDesc& d) override {
        use();
        return cuda::makeConv(planContext(), d);
    }
    std::unique_ptr<PoolOp> makePool(const PoolDesc& d) override {
        use();  // (a plan that sums dx zeroes its counter on this device)
        return cuda::makePool(planContext(), d);
    }
    std::unique_ptr<LrnOp> makeLrn(const LrnDesc& d) override {
        use();
        return cuda::makeLrn(planContext(), d);
    }
    std::unique_ptr<DenseOp> makeDense(const DenseDesc& d) override {
        use();
        return cuda::makeDense(planContext(), d);
    }
    std::unique_ptr<BatchNormOp> makeBatchNorm(const BatchNormDesc& d) override {
        use();
        return cuda::makeBatchNorm(planContext(), d);
    }

    void fill(Stream s, float* x, float value, size_t n) override { cuda::fill(q(s), x, value, n); }
    void scale(Stream s, float* x, float a, size_t n) override { cuda::scale(q(s), x, a, n); }
    void axpy(Stream s, float a, const float* x, float* y, size_t n) override { cuda::axpy(q(s), a, x, y, n); }
    void addSumSquares(Stream s, const float* x, size_t n, float a, float* out) override {
        cuda::addSumSquares(q(s), x, n, a, out, s->scratch);
    }
    void reluForward(Stream s, const float* x, float* y, size_t n) override { cuda::reluForward(q(s), x, y, n); }
    void add(Stream s, const float* a, const float* b, float* y, size_t n, bool relu) override {
        cuda::add(q(s), a, b, y, n, relu);
    }
    void reluBackward(Stream s, const float* y, const float* dy, float* dx, size_t n) override {
        cuda::reluBackward(q(s), y, dy, dx, n);
    }
    void dropoutForward(Stream s, const float* x, float* y, float* mask, size_t n, float keep, uint64_t seed) override {
        cuda::dropoutForward(q(s), x, y, mask, n, keep, seed);
    }
    void dropoutBackward(Stream s, const float* dy, const float* mask, float* dx, size_t n) override {
        cuda::multiply(q(s), dy, mask, dx, n);
    }
    void softmaxCrossEntropy(Stream s, const float* logits, const int32_t* labels, float* probs, int n, int k,
                             float* stats) override {
        cuda::softmaxCrossEntropy(q(s), logits, labels, probs, n, k, stats);
    }
    void softmaxCrossEntropyBackward(Stream s, const float* probs, const int32_t* labels, float* dlogits, int n, int k,
                                     float scale) override {
        cuda::softmaxCrossEntropyBackward(q(s), probs, labels, dlogits, n, k, scale);
    }
    void applyUpdate(Stream s, UpdateRule rule, const UpdateParams& h, float* p, const float* g, float* m, float* v,
                     uint16_t* rounded, size_t n) override {
        const cuda::UpdateArgs a = cuda::withParams({p, g, m, v, n}, rule, h);
        cuda::applyUpdate(q(s), rule, a);
        if (s && s->capturing && n > 0) s->recordedUpdates.push_back(recordedUpdate(s->stream, rule, a));
        // A second pass (no strategy asks a GPU for the rounding yet: HolderMean does for CPU towers).
        if (rounded) cuda::roundToBf16(q(s), p, reinterpret_cast<bf16*>(rounded), n);
    }
    void emaUpdate(Stream s, float* shadow, const float* p, float decay, size_t n) override {
        cuda::emaUpdate(q(s), shadow, p, decay, n);
    }
    // __nv_bfloat16 is bf16's 16 bits (cuda_bf16.h), so the wire's uint16_t buffers are its storage.
    void roundToBf16(Stream s, const float* x, uint16_t* y, size_t n) override {
        cuda::roundToBf16(q(s), x, reinterpret_cast<bf16*>(y), n);
    }
    void widenBf16(Stream s, const uint16_t* x, float* y, size_t n) override {
        cuda::widen(q(s), reinterpret_cast<const bf16*>(x), y, n);
    }

private:
    void use() const { TB_CUDA(cudaSetDevice(device_)); }
    // withBlas: false for the set-up stream, which runs cuDNN's searches and fills but no GEMM,
    // and so needs no 32 MiB cuBLAS workspace.
    // Compute: cuDNN and cuBLAS with its workspace; Setup (plans, algorithm search): cuDNN;
    // Copies: the bare queue. All but Copies get the reductions' scratch.
    enum class StreamUse { Compute, Setup, Copies };
    Stream makeStream(StreamUse kind) {
        use();
        auto s = std::make_unique<StreamImpl>();
        TB_CUDA(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
        if (kind == StreamUse::Copies) return tracked(std::move(s));
        TB_CUDA(cudnnCreate(&s->cudnn));
        TB_CUDA(cudnnSetStream(s->cudnn, s->stream));
        if (kind == StreamUse::Compute) {
            TB_CUDA(cublasCreate(&s->cublas));
            TB_CUDA(cublasSetStream(s->cublas, s->stream));
            s->cublasWorkspace = allocator_.allocate(kCublasWorkspaceBytes);
            TB_CUDA(cublasSetWorkspace(s->cublas, s->cublasWorkspace, kCublasWorkspaceBytes));
            TB_CUDA(cublasSetMathMode(s->cublas, tf32_ ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
        }
        s->scratch = static_cast<float*>(allocator_.allocate(kScratchFloats * sizeof(float)));
        return tracked(std::move(s));
    }
    // A finished stream: its work is fenced from now on when memory is freed (device_allocator.hpp).
    Stream tracked(std::unique_ptr<StreamImpl> s) {
        allocator_.track(s.get());
        return s.release();
    }
    PlanContext planContext() {
        PlanContext c = ctx_;
        c.owner = shared_from_this();
        return c;
    }
    cudaStream_t q(Stream s) const {
        use();
        return queueOf(s);
    }

    int device_;
    bool tf32_, bf16_, deterministic_;
    std::string gpuName_;
    DeviceAllocator allocator_;  // declared before the streams and plans that hand memory back to it
    Stream setup_ = nullptr;
    PlanContext ctx_;
};

int deviceCount(TbError* err) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        int driver = 0;
        cudaDriverGetVersion(&driver);
        writeError(err, driver == 0 ? "no NVIDIA driver is installed"
                                    : (std::string("no usable CUDA device (") + cudaGetErrorString(e) + ")").c_str());
        return TB_ERROR;
    }
    return n;
}

int deviceInfo(int index, TbGpuInfo* out, TbError* err) {
    cudaDeviceProp p{};
    const cudaError_t e = cudaGetDeviceProperties(&p, index);
    if (e != cudaSuccess) {
        writeError(err, ("gpu:" + std::to_string(index) + ": " + cudaGetErrorString(e)).c_str());
        return TB_ERROR;
    }
    std::memset(out, 0, sizeof(*out));
    std::snprintf(out->name, sizeof out->name, "%s", p.name);
    out->totalBytes = p.totalGlobalMem;
    out->ccMajor = p.major;
    out->ccMinor = p.minor;
    out->multiprocessors = p.multiProcessorCount;
    cudaDeviceGetPCIBusId(out->pciBusId, int(sizeof out->pciBusId), index);
    return TB_OK;
}

void versions(TbCudaVersions* v) {
    std::memset(v, 0, sizeof(*v));
    cudaDriverGetVersion(&v->driver);
    cudaRuntimeGetVersion(&v->runtime);
    v->cudnn = int(cudnnGetVersion());
    int major = 0, minor = 0, patch = 0;
    cublasGetProperty(MAJOR_VERSION, &major);
    cublasGetProperty(MINOR_VERSION, &minor);
    cublasGetProperty(PATCH_LEVEL, &patch);
    v->cublas = major * 10000 + minor * 100 + patch;
    ncclGetVersion(&v->nccl);
}

int createBackend(int index, const TbCudaOptions* options, TbBackend** out, TbError* err) {
    return guarded(err, [&] {
        const TbCudaOptions o = options ? *options : TbCudaOptions{};
        *out = exportBackend(std::make_shared<CudaBackend>(index, o));
    });
}

}  // namespace

// nccl_group.cu
int ncclCreate(int n, const int* devices, TbNcclGroup** out, TbError* err);
int ncclMakeId(char* id, TbError* err);
int ncclJoin(int n, const int* devices, int worldRanks, int firstRank, const char* id, TbNcclGroup** out,
             TbError* err);
void ncclDestroy(TbNcclGroup* g);
int ncclAllReduce(TbNcclGroup* g, int rank, void* buf, size_t count, int bf16, int mean, TbStream* s, TbError* err);
int ncclReduce(TbNcclGroup* g, int rank, const void* send, void* recv, size_t count, int bf16, int mean, int root,
               TbStream* s, TbError* err);
int ncclBroadcast(TbNcclGroup* g, int rank, float* buf, size_t count, int root, TbStream* s, TbError* err);
int ncclSend(TbNcclGroup* g, int rank, const float* buf, size_t count, int peer, TbStream* s, TbError* err);
int ncclRecv(TbNcclGroup* g, int rank, float* buf, size_t count, int peer, TbStream* s, TbError* err);
void ncclAbort(TbNcclGroup* g);
int ncclAsyncError(TbNcclGroup* g, int rank, TbError* err);

namespace {
// The ABI first; the rows in cuda_module.h's order.
TbCudaModule makeModule() {
    return {TB_CUDA_ABI,   deviceCount, deviceInfo,  versions,      createBackend, &exportedBackendInterface(),
            ncclCreate,    ncclMakeId,  ncclJoin,    ncclDestroy,   ncclAllReduce, ncclReduce,
            ncclBroadcast, ncclSend,    ncclRecv,    ncclAbort,     ncclAsyncError};
}
}  // namespace
}  // namespace tb::cuda

extern "C" __attribute__((visibility("default"))) const TbCudaModule* tb_cuda_module() {
    static const TbCudaModule m = tb::cuda::makeModule();
    return &m;
}
