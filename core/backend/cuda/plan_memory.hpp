// What the CUDA backend's plans keep on the device between calls (cuda_ops.cu, cuda_conv.cu): memory
// of their own, copies of a step's inputs made once and shared by the calls that read them, and
// the ones vector of the bias gradients.
#pragma once
#include <cublas_v2.h>

#include <cstddef>
#include <utility>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_ops.hpp"
#include "backend/cuda/cuda_stream.hpp"
#include "backend/cuda/kernels.cuh"

namespace tb::cuda {

// Device memory a plan keeps for its lifetime.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(DeviceAllocator* a, size_t bytes) : alloc_(a), p_(a->allocate(bytes)) {}
    ~DeviceBuffer() {
        if (alloc_) alloc_->deallocate(p_);
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        std::swap(alloc_, o.alloc_);
        std::swap(p_, o.p_);
        return *this;
    }
    float* f() const { return static_cast<float*>(p_); }
    bf16* h() const { return static_cast<bf16*>(p_); }
    void* raw() const { return p_; }

private:
    DeviceAllocator* alloc_ = nullptr;
    void* p_ = nullptr;
};

// A vector of ones (n) for the bias gradients, db = dY^T 1, as one cuBLAS gemv.
inline DeviceBuffer onesVector(const PlanContext& ctx, size_t n) {
    DeviceBuffer b(ctx.allocator, n * sizeof(float));
    fill(ctx.setup->stream, b.f(), 1.f, n);
    TB_CUDA(cudaStreamSynchronize(ctx.setup->stream));
    return b;
}

// db (k) = sum over rows of dy (rows, k), row-major: in cuBLAS's column-major view dy is a
// (k x rows) matrix, so db = dy * ones.
inline void biasGradient(Stream st, const float* dy, const float* ones, float* db, int rows, int k) {
    const float one = 1.f, zero = 0.f;
    TB_CUDA(cublasSgemv(st->cublas, CUBLAS_OP_N, k, rows, &one, dy, k, ones, 1, &zero, db, 1));
}

// A copy of an input that several calls of one step read, unchanged between them (backend.hpp):
// its bf16 rounding (--precision bf16; x: forward and backwardWeights; w: forward and
// backwardData; dy: both backward calls), or its NCHW transposition (a convolution whose cuDNN
// runs in NCHW: x and dy). Made by the first call that reads it, reused by the others, as the CPU
// backend's StepInput does (keyed by the source). A forward forgets them all: a step begins.
class StepCopy {
public:
    StepCopy() = default;
    StepCopy(DeviceAllocator* a, size_t bytes) : buf_(a, bytes) {}
    // make(buf) writes the copy of src into buf (T: bf16 or float).
    template <class T, class Make>
    const T* of(const float* src, Make make) {
        if (src != last_) {
            make(static_cast<T*>(buf_.raw()));
            last_ = src;
        }
        return static_cast<const T*>(buf_.raw());
    }
    void forget() { last_ = nullptr; }

private:
    DeviceBuffer buf_;
    const float* last_ = nullptr;
};

}  // namespace tb::cuda
