#include "backend/cuda/device_allocator.hpp"

#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/cuda_check.hpp"

namespace tb::cuda {

namespace {
constexpr size_t kSmall = size_t(1) << 20, kSmallStep = 512, kLargeStep = size_t(2) << 20;
std::string mib(size_t bytes) { return std::to_string((bytes + (1 << 19)) >> 20) + " MiB"; }
}  // namespace

size_t DeviceAllocator::roundUp(size_t bytes) {
    if (bytes == 0) bytes = 1;
    const size_t step = bytes < kSmall ? kSmallStep : kLargeStep;
    return (bytes + step - 1) / step * step;
}

DeviceAllocator::~DeviceAllocator() {
    std::lock_guard lock(mutex_);
    if (!cuda::useDeviceForTeardown(device_, "its cached memory")) return;
    releaseCache();
    for (auto& [p, size] : live_) cudaFree(p);  // leaked by a caller: still give it back
}

void* DeviceAllocator::allocate(size_t bytes) {
    const size_t size = roundUp(bytes);
    std::lock_guard lock(mutex_);
    void* p = nullptr;
    size_t got = size;
    // The smallest cached block that fits, if it is not more than twice the request.
    auto it = cached_.lower_bound(size);
    if (it != cached_.end() && it->first <= 2 * size) {
        got = it->first;
        p = it->second;
        cached_.erase(it);
    } else {
        TB_CUDA(cudaSetDevice(device_));
        cudaError_t e = cudaMalloc(&p, size);
        if (e == cudaErrorMemoryAllocation) {
            cudaGetLastError();  // clear the sticky-free error before retrying
            releaseCache();
            e = cudaMalloc(&p, size);
        }
        if (e != cudaSuccess) {
            cudaGetLastError();
            size_t freeBytes = 0, total = 0;
            cudaMemGetInfo(&freeBytes, &total);
            throw Error("gpu:" + std::to_string(device_) + ": out of device memory allocating " + mib(size) + " (" +
                        mib(stats_.inUseBytes) + " in use by this run, " + mib(freeBytes) + " of " + mib(total) +
                        " free on the device): " + cudaGetErrorString(e));
        }
        ++stats_.deviceMallocs;
        stats_.reservedBytes += size;
    }
    live_.emplace(p, got);
    stats_.inUseBytes += got;
    if (stats_.inUseBytes > stats_.peakInUseBytes) stats_.peakInUseBytes = stats_.inUseBytes;
    return p;
}

void DeviceAllocator::deallocate(void* p) {
    if (!p) return;
    std::lock_guard lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) return;  // not ours: ignore rather than corrupt the books
    stats_.inUseBytes -= it->second;
    cached_.emplace(it->second, p);
    live_.erase(it);
}

AllocatorStats DeviceAllocator::stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
}

void DeviceAllocator::releaseCache() {
    for (auto& [size, p] : cached_) {
        cudaFree(p);
        stats_.reservedBytes -= size;
    }
    cached_.clear();
}

}  // namespace tb::cuda
