// The CUDA backend's op plans: convolution on cuDNN (cuda_conv.cu), dense layers on cuBLAS, pooling,
// LRN and batch norm on our own kernels (cuda_ops.cu; kernels.cuh and the plans say why). Each plan is made once per shape and owns the
// little device memory it keeps between calls; scratch comes in as the caller's workspace.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "backend/cuda/device_allocator.hpp"
#include "backend/cuda_module.h"

namespace tb::cuda {

// What plans need from their backend. `setup` is the backend's own stream, used only while a
// plan is made (cuDNN's algorithm search), never by the plans' calls.
struct PlanContext {
    std::shared_ptr<Backend> owner;  // held by every plan (declared first), so none outlives it
    int device = 0;
    DeviceAllocator* allocator = nullptr;
    StreamImpl* setup = nullptr;
    bool allowTf32 = false;
    // --precision bf16: convolutions and inner products read bf16 copies of their inputs on the
    // tensor cores and return fp32 (mixed precision, backend.hpp's MatmulPrecision::Bf16).
    bool bf16 = false;
    bool deterministic = true;  // cuDNN's deterministic algorithms only (conv_choice.hpp)
    // The program's choices kept across runs (null: none), and this GPU and cuDNN as their keys
    // name them ("NVIDIA H100 80GB HBM3, sm 9.0, 132 SMs, cuDNN 9.19.0").
    const TbAlgorithmStore* algorithms = nullptr;
    std::string deviceKey;
};

std::unique_ptr<ConvOp> makeConv(const PlanContext&, const ConvDesc&);
std::unique_ptr<PoolOp> makePool(const PlanContext&, const PoolDesc&);
std::unique_ptr<LrnOp> makeLrn(const PlanContext&, const LrnDesc&);
std::unique_ptr<DenseOp> makeDense(const PlanContext&, const DenseDesc&);
std::unique_ptr<BatchNormOp> makeBatchNorm(const PlanContext&, const BatchNormDesc&);

// The stream's queue, or a tb::Error: every GPU call names the stream it runs on.
cudaStream_t queueOf(Stream s);

}  // namespace tb::cuda
