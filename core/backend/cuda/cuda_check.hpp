// Error checks for CUDA, cuDNN and cuBLAS calls: a failed call becomes a tb::Error naming the
// call, the library's reason and file:line (nccl-tests' TESTCHECK, llm.c's cudaCheck), so the
// window and the CLI can show it instead of the process dying.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdio>
#include <string>

#include "util/error.hpp"

namespace tb::cuda {

[[noreturn]] inline void fail(const char* call, const char* reason, const char* file, int line) {
    std::string f = file;
    if (auto slash = f.rfind('/'); slash != std::string::npos) f = f.substr(slash + 1);
    throw Error(std::string("CUDA backend: ") + call + " failed: " + reason + " (" + f + ":" + std::to_string(line) + ")");
}
inline void check(cudaError_t e, const char* call, const char* file, int line) {
    if (e != cudaSuccess) fail(call, cudaGetErrorString(e), file, line);
}
inline void check(cudnnStatus_t e, const char* call, const char* file, int line) {
    if (e != CUDNN_STATUS_SUCCESS) fail(call, cudnnGetErrorString(e), file, line);
}
inline void check(cublasStatus_t e, const char* call, const char* file, int line) {
    if (e != CUBLAS_STATUS_SUCCESS) fail(call, cublasGetStatusString(e), file, line);
}

// For destructors, which cannot throw: makes `device` current, or says on stderr that `what` is
// left to the driver's own teardown and returns false (freed on another device, it would free
// that device's memory, or fail).
inline bool useDeviceForTeardown(int device, const char* what) {
    const cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) return true;
    std::fprintf(stderr, "gpu:%d: cudaSetDevice failed while releasing %s (%s); left to the driver\n", device, what,
                 cudaGetErrorString(e));
    return false;
}

}  // namespace tb::cuda

#define TB_CUDA(call) ::tb::cuda::check((call), #call, __FILE__, __LINE__)
// After a kernel launch: a bad configuration shows here; faults inside show at the next sync.
#define TB_CUDA_LAUNCHED(what) ::tb::cuda::check(cudaGetLastError(), what, __FILE__, __LINE__)
