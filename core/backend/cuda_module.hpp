// The C entry point of the CUDA backend module (libtb_backend_cuda.so). Programs are not linked
// against CUDA: the registry dlopen()s this module on first use, as ggml loads its backends, so a
// binary built with CUDA still starts on a laptop without the CUDA libraries and says why GPUs
// are unavailable. Both sides include this header; kTbCudaModuleAbi guards against a stale module.
#pragma once
#include <cstddef>

namespace tb {
class Backend;
struct StreamImpl;
}

extern "C" {

constexpr int kTbCudaModuleAbi = 6;

// The bytes of NCCL's ncclUniqueId (NCCL_UNIQUE_ID_BYTES), which programs pass without nccl.h.
constexpr int kTbNcclIdBytes = 128;

// An NCCL communicator per GPU of a group (ncclCommInitAll, or ncclCommInitRank across
// processes); opaque to the program.
struct TbNcclGroup;

struct TbGpuInfo {
    char name[256];
    size_t totalBytes;
    int ccMajor, ccMinor;        // compute capability
    int multiprocessors;
    char pciBusId[32];
};

struct TbCudaVersions {
    int driver, runtime;         // CUDA's encoding: 13000 = 13.0
    int cudnn;                   // cudnnGetVersion(): 91000 = 9.10.0
    int cublas;                  // cublasGetProperty major*10000 + minor*100 + patch
    int nccl;                    // ncclGetVersion(): 22803 = 2.28.3
};

// Backend options that change numerics; a zero-initialised struct is the default.
struct TbCudaOptions {
    int allowTf32;               // 1: tensor-core TF32 math in cuDNN and cuBLAS; 0: plain FP32 FMA
    int bf16;                    // 1: convolutions and inner products in bf16 with fp32 sums (mixed
                                 // precision); refused below compute capability 8.0
};

struct TbCudaModule {
    int abi;
    // Number of usable GPUs, or -1 with a one-sentence reason in err (no driver, no device).
    int (*deviceCount)(char* err, size_t errLen);
    // 0 on success; else -1 and a reason.
    int (*deviceInfo)(int index, TbGpuInfo* out, char* err, size_t errLen);
    void (*versions)(TbCudaVersions* out);
    // A new backend on GPU `index`, owned by the caller (delete it); nullptr and a reason on failure.
    tb::Backend* (*createBackend)(int index, const TbCudaOptions* options, char* err, size_t errLen);
    // NCCL over `n` distinct GPUs (one rank each, rank r on devices[r]); nullptr and a reason on
    // failure. Collectives enqueue on the rank's stream of that GPU's backend and return 0, or -1
    // and a reason; `mean`: 1 average (ncclAvg), 0 sum; `bf16`: the buffers hold bf16 (ncclBfloat16;
    // NCCL adds in fp32 and rounds each partial sum), else fp32.
    TbNcclGroup* (*ncclCreate)(int n, const int* devices, char* err, size_t errLen);
    // NCCL across processes: one process makes the id (kTbNcclIdBytes into `id`; 0, or -1 and a
    // reason), every process receives it (over MPI) and joins with its `n` GPUs as the ranks
    // firstRank .. firstRank + n - 1 of `worldRanks`; returns once every rank of every process has
    // joined. Collectives then work as for ncclCreate's groups, with `rank` the local index.
    int (*ncclMakeId)(char* id, char* err, size_t errLen);
    TbNcclGroup* (*ncclJoin)(int n, const int* devices, int worldRanks, int firstRank, const char* id, char* err,
                             size_t errLen);
    void (*ncclDestroy)(TbNcclGroup* group);
    int (*ncclAllReduce)(TbNcclGroup* group, int rank, void* buf, size_t count, int bf16, int mean,
                         tb::StreamImpl* stream, char* err, size_t errLen);
    int (*ncclReduce)(TbNcclGroup* group, int rank, const void* send, void* recv, size_t count, int bf16, int mean,
                      int root, tb::StreamImpl* stream, char* err, size_t errLen);
    int (*ncclBroadcast)(TbNcclGroup* group, int rank, float* buf, size_t count, int root, tb::StreamImpl* stream,
                         char* err, size_t errLen);
};

// The module's only exported symbol.
const TbCudaModule* tb_cuda_module();
using TbCudaModuleEntry = const TbCudaModule* (*)();
}
