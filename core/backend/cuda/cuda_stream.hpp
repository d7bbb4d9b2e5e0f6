// What a CUDA backend's Stream, Event and Graph are. Each stream carries its own cuDNN and cuBLAS
// handles (a handle is bound to one stream and must not be shared by two threads), a cuBLAS
// workspace (so that no call allocates while a graph is being recorded) and a small scratch
// buffer for the partial sums of reductions, so towers on one GPU never share mutable state.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <atomic>

namespace tb {

struct StreamImpl {
    cudaStream_t stream = nullptr;
    cudnnHandle_t cudnn = nullptr;
    cublasHandle_t cublas = nullptr;
    void* cublasWorkspace = nullptr;  // (kCublasWorkspaceBytes)
    float* scratch = nullptr;         // (kScratchFloats) partial sums of reductions
    std::atomic<bool> capturing{false};  // between beginCapture and endCapture (the allocator reads it)
};

struct EventImpl {
    cudaEvent_t event = nullptr;
};

struct GraphImpl {
    cudaGraphExec_t exec = nullptr;
};

namespace cuda {
constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;  // cuBLAS's advice for Hopper
constexpr int kScratchFloats = 1024;
}  // namespace cuda

}  // namespace tb
