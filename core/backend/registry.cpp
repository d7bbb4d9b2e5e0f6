#include "backend/registry.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "backend/algorithm_store.hpp"
#include "backend/cuda_module.h"
#include "backend/module_backend.hpp"
#include "util/error.hpp"

namespace tb {

namespace {

struct Loaded {
    GpuRuntime runtime;
    const TbCudaModule* module = nullptr;
};

#ifdef TB_HAVE_CUDA_MODULE
constexpr const char* kModuleName = "libtb_backend_cuda.so";

// Where the module may be, first match wins: $TB_CUDA_MODULE; beside the running program; the
// installed library folder; the build tree it was built in.
std::vector<std::string> candidatePaths() {
    std::vector<std::string> paths;
    if (const char* env = std::getenv("TB_CUDA_MODULE"); env && *env) paths.emplace_back(env);
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        paths.push_back((exe.parent_path() / kModuleName).string());
        paths.push_back((exe.parent_path().parent_path() / "lib" / "towerbench" / kModuleName).string());
    }
#ifdef TB_CUDA_MODULE_BUILD_PATH
    paths.emplace_back(TB_CUDA_MODULE_BUILD_PATH);
#endif
    return paths;
}
#endif

// What a module's table offers, checked first against this program's ABI.
Loaded inspect(const TbCudaModule* m, const std::string& path) {
    Loaded l;
    GpuRuntime& r = l.runtime;
    r.modulePath = path;
    if (!m) {
        r.whyNot = path + " is not a CUDA backend module (it exports no tb_cuda_module table)";
        return l;
    }
    if (std::string why = moduleAbiProblem(*m, path); !why.empty()) {
        r.whyNot = why;
        return l;
    }
    TbCudaVersions v{};
    m->versions(&v);
    r.driver = v.driver;
    r.runtime = v.runtime;
    r.cudnn = v.cudnn;
    r.cublas = v.cublas;
    r.nccl = v.nccl;
    TbError err{};
    const int n = m->deviceCount(&err);
    if (n < 0) {
        r.whyNot = err.message;
        return l;
    }
    if (n == 0) {
        r.whyNot = "the CUDA driver reports no GPU";
        return l;
    }
    for (int i = 0; i < n; ++i) {
        TbGpuInfo info{};
        if (m->deviceInfo(i, &info, &err) != TB_OK) continue;
        r.gpus.push_back({i, info.name, info.totalBytes, info.ccMajor, info.ccMinor, info.multiprocessors,
                          info.pciBusId});
    }
    r.available = !r.gpus.empty();
    if (r.available) l.module = m;
    else r.whyNot = err.message;
    return l;
}

Loaded load() {
#ifndef TB_HAVE_CUDA_MODULE
    Loaded l;
    l.runtime.whyNot = "this build has no CUDA backend (built without the CUDA toolkit or with TB_WITH_CUDA=OFF)";
    return l;
#else
    void* handle = nullptr;
    std::string firstError, modulePath;
    for (const std::string& path : candidatePaths()) {
        std::error_code ec;
        if (!std::filesystem::exists(path, ec)) continue;
        // RTLD_LOCAL: the module's CUDA libraries stay out of the program's symbol namespace.
        handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle) {
            modulePath = path;
            break;
        }
        if (firstError.empty()) firstError = dlerror();
    }
    if (!handle) {
        Loaded l;
        l.runtime.whyNot = firstError.empty() ? std::string("the CUDA backend module ") + kModuleName + " was not found"
                                              : "the CUDA backend module could not be loaded (" + firstError + ")";
        return l;
    }
    // The handle stays open on a refusal: unloading a half-initialised CUDA library is not safe.
    auto entry = reinterpret_cast<TbCudaModuleEntry>(dlsym(handle, "tb_cuda_module"));
    return inspect(entry ? entry() : nullptr, modulePath);
#endif
}

// A table linked into the program instead of the module (useCudaModule), or null.
struct Linked {
    const TbCudaModule* module = nullptr;
    std::string origin;
    bool asked = false;  // loaded() has run: too late to replace the module
};
Linked& linked() {
    static Linked l;
    return l;
}

BackendFactory& factoryFor(DeviceType type) {
    static BackendFactory cpu, cuda;
    return type == DeviceType::Cpu ? cpu : cuda;
}

const Loaded& loaded() {
    static const Loaded l = [] {
        Linked& k = linked();
        k.asked = true;
        return k.module ? inspect(k.module, k.origin) : load();
    }();
    return l;
}

std::string versionText(int v, int major, int minor, bool patch) {
    if (v <= 0) return "?";
    std::string s = std::to_string(v / major) + "." + std::to_string(v % major / minor);
    if (patch) s.append(".").append(std::to_string(v % minor));  // not "." + string&&: GCC 12's false -Wrestrict
    return s;
}

}  // namespace

std::string GpuRuntime::versionsText() const {
    return "driver " + versionText(driver, 1000, 10, false) + ", runtime " + versionText(runtime, 1000, 10, false) +
           ", cuDNN " + versionText(cudnn, 10000, 100, true) + ", cuBLAS " + versionText(cublas, 10000, 100, true) +
           ", NCCL " + versionText(nccl, 10000, 100, true);
}

const GpuRuntime& gpuRuntime() { return loaded().runtime; }

void useCudaModule(const TbCudaModule& module, const std::string& origin) {
    Linked& k = linked();
    if (k.asked) throw Error("useCudaModule: the CUDA module was looked for already; call it first");
    k.module = &module;
    k.origin = origin;
}

int gpuCount() { return int(gpuRuntime().gpus.size()); }

BackendFactory setBackendFactory(DeviceType type, BackendFactory factory) {
    BackendFactory previous = std::move(factoryFor(type));
    factoryFor(type) = std::move(factory);
    return previous;
}

namespace {
// One direction's choice across the module's C boundary (cuda_module.h's TbConvAlgorithm).
TbConvAlgorithm toModule(const StoredAlgorithm& a) {
    TbConvAlgorithm t{a.algorithm, a.math, a.layout, a.workspaceBytes, {}};
    t.graph.state = a.graphState;
    t.graph.engine = a.graphEngine;
    t.graph.knobCount = int(std::min(a.graphKnobs.size(), size_t(TB_MAX_GRAPH_KNOBS)));
    for (int i = 0; i < t.graph.knobCount; ++i)
        t.graph.knobs[i][0] = a.graphKnobs[size_t(i)][0], t.graph.knobs[i][1] = a.graphKnobs[size_t(i)][1];
    t.graph.workspaceBytes = a.graphWorkspaceBytes;
    return t;
}
StoredAlgorithm fromModule(const TbConvAlgorithm& t) {
    StoredAlgorithm a;
    a.algorithm = t.algorithm, a.math = t.math, a.layout = t.layout, a.workspaceBytes = t.workspaceBytes;
    a.graphState = t.graph.state;
    if (t.graph.state == TB_GRAPH_ENGINE) {
        a.graphEngine = t.graph.engine;
        for (int i = 0; i < std::clamp(t.graph.knobCount, 0, TB_MAX_GRAPH_KNOBS); ++i)
            a.graphKnobs.push_back({t.graph.knobs[i][0], t.graph.knobs[i][1]});
        a.graphWorkspaceBytes = t.graph.workspaceBytes;
    }
    return a;
}

// processAlgorithmStore() behind the module's C table (null where choices are not kept).
const TbAlgorithmStore* algorithmStoreTable() {
    static const TbAlgorithmStore table{
        processAlgorithmStore(),
        [](void* context, const char* key, TbConvChoice* out) {
            const std::optional<StoredConvChoice> c = static_cast<AlgorithmStore*>(context)->find(key);
            if (!c) return 0;
            *out = TbConvChoice{};
            for (auto [from, to] : {std::pair{&c->forward, &out->forward}, std::pair{&c->backwardData, &out->backwardData},
                                    std::pair{&c->backwardFilter, &out->backwardFilter}})
                *to = toModule(*from);
            std::strncpy(out->failure, c->failure.c_str(), sizeof out->failure - 1);
            return 1;
        },
        [](void* context, const char* key, const TbConvChoice* in) {
            StoredConvChoice c;
            for (auto [from, to] : {std::pair{&in->forward, &c.forward}, std::pair{&in->backwardData, &c.backwardData},
                                    std::pair{&in->backwardFilter, &c.backwardFilter}})
                *to = fromModule(*from);
            c.failure.assign(in->failure, strnlen(in->failure, sizeof in->failure));
            static_cast<AlgorithmStore*>(context)->remember(key, c);
        }};
    return table.context ? &table : nullptr;
}
}  // namespace

std::shared_ptr<Backend> makeBackend(const Device& device, const BackendOptions& options) {
    if (const BackendFactory& f = factoryFor(device.type)) return f(device, options);
    if (device.type == DeviceType::Cpu) return makeCpuBackend(options.cpuThreads, device.index, options.precision);
    const Loaded& l = loaded();
    if (!l.runtime.available || !l.module)
        throw Error(device.str() + ": no GPU backend here (" + l.runtime.whyNot + ")");
    if (device.index >= int(l.runtime.gpus.size()))
        throw Error(device.str() + " does not exist (" + std::to_string(l.runtime.gpus.size()) + " GPUs here)");
    TbCudaOptions o{};
    o.allowTf32 = options.allowTf32 ? 1 : 0;
    o.nondeterministic = options.deterministic ? 0 : 1;
    o.bf16 = options.precision == MatmulPrecision::Bf16 ? 1 : 0;
    o.algorithms = algorithmStoreTable();
    TbBackend* b = nullptr;
    TbError err;
    if (l.module->createBackend(device.index, &o, &b, &err) != TB_OK) throw Error(device.str() + ": " + err.message);
    return wrapModuleBackend(*l.module, b, device.index);
}

bool ncclAvailable() { return loaded().module != nullptr && gpuRuntime().nccl > 0; }

namespace {
const TbCudaModule& moduleOf(const void* m) { return *static_cast<const TbCudaModule*>(m); }
TbNcclGroup* groupOf(void* g) { return static_cast<TbNcclGroup*>(g); }
}  // namespace

NcclGroup::NcclGroup(const std::vector<int>& devices) : module_(loaded().module), group_(nullptr) {
    if (!module_) throw Error("NCCL: no GPU backend here (" + gpuRuntime().whyNot + ")");
    TbNcclGroup* g = nullptr;
    TbError err;
    checkModuleCall(moduleOf(module_).ncclCreate(int(devices.size()), devices.data(), &g, &err), err);
    group_ = g;
}

NcclGroup::NcclGroup(const std::vector<int>& devices, int worldRanks, int firstRank, const std::string& id)
    : module_(loaded().module), group_(nullptr) {
    if (!module_) throw Error("NCCL: no GPU backend here (" + gpuRuntime().whyNot + ")");
    if (id.size() != size_t(TB_NCCL_ID_BYTES))
        throw Error("NCCL: the group's id from process 0 is " + std::to_string(id.size()) + " bytes, not " +
                    std::to_string(TB_NCCL_ID_BYTES));
    TbNcclGroup* g = nullptr;
    TbError err;
    checkModuleCall(
        moduleOf(module_).ncclJoin(int(devices.size()), devices.data(), worldRanks, firstRank, id.data(), &g, &err),
        err);
    group_ = g;
}

std::string NcclGroup::uniqueId() {
    const void* m = loaded().module;
    if (!m) throw Error("NCCL: no GPU backend here (" + gpuRuntime().whyNot + ")");
    std::string id(size_t(TB_NCCL_ID_BYTES), '\0');
    TbError err;
    checkModuleCall(moduleOf(m).ncclMakeId(id.data(), &err), err);
    return id;
}

NcclGroup::~NcclGroup() { moduleOf(module_).ncclDestroy(groupOf(group_)); }

void NcclGroup::allReduce(int rank, void* buf, size_t count, bool bf16, bool mean, Stream s) {
    TbError err;
    checkModuleCall(moduleOf(module_).ncclAllReduce(groupOf(group_), rank, buf, count, bf16, mean, handleOf(s), &err),
                    err);
}

void NcclGroup::reduce(int rank, const void* send, void* recv, size_t count, bool bf16, bool mean, int root, Stream s) {
    TbError err;
    checkModuleCall(moduleOf(module_).ncclReduce(groupOf(group_), rank, send, recv, count, bf16, mean, root,
                                                 handleOf(s), &err),
                    err);
}

void NcclGroup::broadcast(int rank, float* buf, size_t count, int root, Stream s) {
    TbError err;
    checkModuleCall(moduleOf(module_).ncclBroadcast(groupOf(group_), rank, buf, count, root, handleOf(s), &err), err);
}

void NcclGroup::send(int rank, const float* buf, size_t count, int peer, Stream s) {
    TbError err;
    checkModuleCall(moduleOf(module_).ncclSend(groupOf(group_), rank, buf, count, peer, handleOf(s), &err), err);
}

void NcclGroup::abort() { moduleOf(module_).ncclAbort(groupOf(group_)); }

std::string NcclGroup::asyncError(int rank) const {
    TbError err{};
    return moduleOf(module_).ncclAsyncError(groupOf(group_), rank, &err) == TB_OK ? std::string() : std::string(err.message);
}

void NcclGroup::recv(int rank, float* buf, size_t count, int peer, Stream s) {
    TbError err;
    checkModuleCall(moduleOf(module_).ncclRecv(groupOf(group_), rank, buf, count, peer, handleOf(s), &err), err);
}

}  // namespace tb
