#include "backend/registry.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>

#include "backend/cuda_module.hpp"
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

Loaded load() {
    Loaded l;
    GpuRuntime& r = l.runtime;
#ifndef TB_HAVE_CUDA_MODULE
    r.whyNot = "this build has no CUDA backend (built without the CUDA toolkit or with TB_WITH_CUDA=OFF)";
    return l;
#else
    void* handle = nullptr;
    std::string firstError;
    for (const std::string& path : candidatePaths()) {
        std::error_code ec;
        if (!std::filesystem::exists(path, ec)) continue;
        // RTLD_LOCAL: the module's CUDA libraries stay out of the program's symbol namespace.
        handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle) {
            r.modulePath = path;
            break;
        }
        if (firstError.empty()) firstError = dlerror();
    }
    if (!handle) {
        r.whyNot = firstError.empty() ? std::string("the CUDA backend module ") + kModuleName + " was not found"
                                      : "the CUDA backend module could not be loaded (" + firstError + ")";
        return l;
    }
    auto entry = reinterpret_cast<TbCudaModuleEntry>(dlsym(handle, "tb_cuda_module"));
    const TbCudaModule* m = entry ? entry() : nullptr;
    if (!m || m->abi != kTbCudaModuleAbi) {
        r.whyNot = r.modulePath + " is not a CUDA backend module of this version (rebuild it)";
        return l;  // the handle stays open: unloading a half-initialised CUDA library is not safe
    }
    TbCudaVersions v{};
    m->versions(&v);
    r.driver = v.driver;
    r.runtime = v.runtime;
    r.cudnn = v.cudnn;
    r.cublas = v.cublas;
    r.nccl = v.nccl;
    char err[512] = {};
    const int n = m->deviceCount(err, sizeof err);
    if (n < 0) {
        r.whyNot = err;
        return l;
    }
    if (n == 0) {
        r.whyNot = "the CUDA driver reports no GPU";
        return l;
    }
    for (int i = 0; i < n; ++i) {
        TbGpuInfo info{};
        if (m->deviceInfo(i, &info, err, sizeof err) != 0) continue;
        r.gpus.push_back({i, info.name, info.totalBytes, info.ccMajor, info.ccMinor, info.multiprocessors,
                          info.pciBusId});
    }
    r.available = !r.gpus.empty();
    if (r.available) l.module = m;
    else r.whyNot = err;
    return l;
#endif
}

BackendFactory& factoryFor(DeviceType type) {
    static BackendFactory cpu, cuda;
    return type == DeviceType::Cpu ? cpu : cuda;
}

const Loaded& loaded() {
    static const Loaded l = load();
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

int gpuCount() { return int(gpuRuntime().gpus.size()); }

BackendFactory setBackendFactory(DeviceType type, BackendFactory factory) {
    BackendFactory previous = std::move(factoryFor(type));
    factoryFor(type) = std::move(factory);
    return previous;
}

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
    o.bf16 = options.precision == MatmulPrecision::Bf16 ? 1 : 0;
    char err[1024] = {};
    Backend* b = l.module->createBackend(device.index, &o, err, sizeof err);
    if (!b) throw Error(device.str() + ": " + err);
    return std::shared_ptr<Backend>(b);
}

bool ncclAvailable() { return loaded().module != nullptr && gpuRuntime().nccl > 0; }

namespace {
const TbCudaModule& moduleOf(const void* m) { return *static_cast<const TbCudaModule*>(m); }
void ncclCheck(int rc, const char* err) {
    if (rc != 0) throw Error(err);
}
}  // namespace

NcclGroup::NcclGroup(const std::vector<int>& devices) : module_(loaded().module), group_(nullptr) {
    if (!module_) throw Error("NCCL: no GPU backend here (" + gpuRuntime().whyNot + ")");
    char err[512] = {};
    group_ = moduleOf(module_).ncclCreate(int(devices.size()), devices.data(), err, sizeof err);
    if (!group_) throw Error(err);
}

NcclGroup::NcclGroup(const std::vector<int>& devices, int worldRanks, int firstRank, const std::string& id)
    : module_(loaded().module), group_(nullptr) {
    if (!module_) throw Error("NCCL: no GPU backend here (" + gpuRuntime().whyNot + ")");
    if (id.size() != size_t(kTbNcclIdBytes))
        throw Error("NCCL: the group's id from process 0 is " + std::to_string(id.size()) + " bytes, not " +
                    std::to_string(kTbNcclIdBytes));
    char err[512] = {};
    group_ = moduleOf(module_).ncclJoin(int(devices.size()), devices.data(), worldRanks, firstRank, id.data(), err,
                                        sizeof err);
    if (!group_) throw Error(err);
}

std::string NcclGroup::uniqueId() {
    const void* m = loaded().module;
    if (!m) throw Error("NCCL: no GPU backend here (" + gpuRuntime().whyNot + ")");
    std::string id(size_t(kTbNcclIdBytes), '\0');
    char err[512] = {};
    ncclCheck(moduleOf(m).ncclMakeId(id.data(), err, sizeof err), err);
    return id;
}

NcclGroup::~NcclGroup() { moduleOf(module_).ncclDestroy(static_cast<TbNcclGroup*>(group_)); }

void NcclGroup::allReduce(int rank, void* buf, size_t count, bool bf16, bool mean, Stream s) {
    char err[512] = {};
    ncclCheck(moduleOf(module_).ncclAllReduce(static_cast<TbNcclGroup*>(group_), rank, buf, count, bf16, mean, s, err,
                                              sizeof err),
              err);
}

void NcclGroup::reduce(int rank, const void* send, void* recv, size_t count, bool bf16, bool mean, int root, Stream s) {
    char err[512] = {};
    ncclCheck(moduleOf(module_).ncclReduce(static_cast<TbNcclGroup*>(group_), rank, send, recv, count, bf16, mean,
                                           root, s, err, sizeof err),
              err);
}

void NcclGroup::broadcast(int rank, float* buf, size_t count, int root, Stream s) {
    char err[512] = {};
    ncclCheck(moduleOf(module_).ncclBroadcast(static_cast<TbNcclGroup*>(group_), rank, buf, count, root, s, err,
                                              sizeof err),
              err);
}

}  // namespace tb
