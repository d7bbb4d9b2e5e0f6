// What a CUDA backend's Stream, Event and Graph are. Each stream carries its own cuDNN and cuBLAS
// handles (a handle is bound to one stream and must not be shared by two threads), a cuBLAS
// workspace (so that no call allocates while a graph is being recorded) and a small scratch
// buffer for the partial sums of reductions, so towers on one GPU never share mutable state.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <atomic>
#include <vector>

#include "backend/cuda/update_args.hpp"

namespace tb {

// An optimiser update recorded in a graph: its kernel node, and the values it applies at the
// graph's next replay (launchGraph rewrites them where the step's differ).
struct RecordedUpdate {
    cudaGraphNode_t node = nullptr;
    cudaKernelNodeParams launch{};  // the kernel, grid and block as recorded
    UpdateRule rule = UpdateRule::Sgd;
    cuda::UpdateArgs args;
};

struct StreamImpl {
    cudaStream_t stream = nullptr;
    cudnnHandle_t cudnn = nullptr;
    cublasHandle_t cublas = nullptr;
    void* cublasWorkspace = nullptr;  // (kCublasWorkspaceBytes)
    float* scratch = nullptr;         // (kScratchFloats) partial sums of reductions
    std::atomic<bool> capturing{false};  // between beginCapture and endCapture (the allocator reads it)
    std::vector<RecordedUpdate> recordedUpdates;  // the updates recorded since beginCapture
};

struct EventImpl {
    cudaEvent_t event = nullptr;
};

struct GraphImpl {
    cudaGraph_t graph = nullptr;  // kept while exec lives: the update nodes are its nodes
    cudaGraphExec_t exec = nullptr;
    std::vector<RecordedUpdate> updates;
};

namespace cuda {
constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;  // cuBLAS's advice for Hopper
constexpr int kScratchFloats = 1024;
}  // namespace cuda

}  // namespace tb
