// The backend registry: makeBackend(Device) for every device kind, and what this machine offers.
// The CPU backend is built in. The CUDA backend is a module (libtb_backend_cuda.so) loaded on
// first use, so binaries built with CUDA still run where the CUDA libraries or the driver are
// missing, and say why in one sentence (ggml's backend registry does the same).
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda_module.h"

namespace tb {

struct GpuInfo {
    int index = 0;
    std::string name;            // "NVIDIA H200"
    size_t totalBytes = 0;
    int ccMajor = 0, ccMinor = 0;
    int multiprocessors = 0;
    std::string pciBusId;
};

// What the CUDA module found, loaded once per process.
struct GpuRuntime {
    bool available = false;      // the module loaded and at least one GPU answered
    std::string whyNot;          // one sentence when not available
    std::string modulePath;      // the module that was loaded (empty if none)
    std::vector<GpuInfo> gpus;
    int driver = 0, runtime = 0, cudnn = 0, cublas = 0, nccl = 0;  // versions, 0 = unknown
    std::string versionsText() const;  // "driver 13.0, runtime 13.0, cuDNN 9.10.0, cuBLAS 13.0.0, NCCL 2.28.3"
};

struct BackendOptions {
    int cpuThreads = 0;          // CPU backend: 0 = all cores
    bool allowTf32 = false;      // CUDA backend: tensor-core TF32 math (default: plain FP32)
    bool deterministic = true;   // CUDA backend: deterministic cuDNN algorithms only (false: the fastest)
    MatmulPrecision precision = MatmulPrecision::Fp32;  // bf16 matrix work (mixed precision), CPU or GPU
};

const GpuRuntime& gpuRuntime();
int gpuCount();
// Uses a module's C table linked into this program (`origin` names it) instead of loading
// libtb_backend_cuda.so, checked as a loaded one is: the tests' stand-in GPUs. Must come before
// anything asks for GPUs.
void useCudaModule(const TbCudaModule& module, const std::string& origin);

// A backend for `device`; throws tb::Error naming the device when it cannot be made.
std::shared_ptr<Backend> makeBackend(const Device& device, const BackendOptions& options = {});

// NCCL over GPUs, through the CUDA module: one rank per GPU of `devices` (rank r on devices[r]).
// Each collective is enqueued on the rank's stream (of that GPU's backend). Throws tb::Error where
// the build or the machine has no NCCL.
class NcclGroup {
public:
    explicit NcclGroup(const std::vector<int>& devices);
    // Across processes: this process's GPUs as the ranks firstRank .. of worldRanks, every process
    // passing the id one of them made with uniqueId() (TB_NCCL_ID_BYTES bytes, sent over MPI).
    // Returns once every rank of every process has joined.
    NcclGroup(const std::vector<int>& devices, int worldRanks, int firstRank, const std::string& id);
    static std::string uniqueId();
    ~NcclGroup();
    NcclGroup(const NcclGroup&) = delete;
    NcclGroup& operator=(const NcclGroup&) = delete;
    // buf, send, recv: `count` fp32, or bf16 (uint16_t bits) where `bf16`.
    void allReduce(int rank, void* buf, size_t count, bool bf16, bool mean, Stream s);
    void reduce(int rank, const void* send, void* recv, size_t count, bool bf16, bool mean, int root, Stream s);
    void broadcast(int rank, float* buf, size_t count, int root, Stream s);
    // Point to point: rank `rank` sends `count` fp32 to rank `peer`, which receives them; a rank's
    // sends to one peer arrive in the order sent.
    void send(int rank, const float* buf, size_t count, int peer, Stream s);
    void recv(int rank, float* buf, size_t count, int peer, Stream s);
    // Ends the group's pending operations (a peer failed): ranks blocked in them return. Then
    // the group is only destroyed. Safe from any thread.
    void abort();
    // Rank `rank`'s asynchronous error ("" while there is none): what NCCL noticed on the GPU's
    // side, which no call returns (a peer lost mid-collective). Safe from any thread.
    std::string asyncError(int rank) const;

private:
    const void* module_;  // the TbCudaModule
    void* group_;         // its TbNcclGroup
};
bool ncclAvailable();

// Replaces how backends of one device type are made, e.g. by a test that wraps the CPU backend
// to watch every call; an empty factory restores the built-in one. Returns the previous factory.
// Not thread-safe: set it before anything makes backends.
using BackendFactory = std::function<std::shared_ptr<Backend>(const Device&, const BackendOptions&)>;
BackendFactory setBackendFactory(DeviceType type, BackendFactory factory);

}  // namespace tb
