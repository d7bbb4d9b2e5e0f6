// Error checks for CUDA, cuDNN and cuBLAS calls: a failed call becomes a tb::Error naming the
// call, the library's reason and file:line (nccl-tests' TESTCHECK, llm.c's cudaCheck), so the
// window and the CLI can show it instead of the process dying.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

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

}  // namespace tb::cuda

#define TB_CUDA(call) ::tb::cuda::check((call), #call, __FILE__, __LINE__)
// After a kernel launch: a bad configuration shows here; faults inside show at the next sync.
#define TB_CUDA_LAUNCHED(what) ::tb::cuda::check(cudaGetLastError(), what, __FILE__, __LINE__)
