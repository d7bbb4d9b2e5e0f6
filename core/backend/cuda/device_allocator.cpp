#include "backend/cuda/device_allocator.hpp"

#include <algorithm>
#include <memory>

#include "backend/cuda/cuda_check.hpp"

namespace tb::cuda {

namespace {
// A fence: an event recorded on each tracked stream. `never`: one could not be recorded (a broken
// device), so the block it guards is never handed out again rather than handed out too early.
struct FenceEvents {
    std::vector<cudaEvent_t> events;
    bool never = false;
};
}  // namespace

DeviceMemory::DeviceMemory(int device) : device_(device) {
    TB_CUDA(cudaSetDevice(device));
    int pools = 0;
    TB_CUDA(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device));
    pools_ = pools != 0;  // (where not, cudaMalloc and cudaFree, which wait for the whole device)
    if (pools_) {
        TB_CUDA(cudaDeviceGetDefaultMemPool(&pool_, device));
        // A pool's memory is not opened to the other GPUs by cudaDeviceEnablePeerAccess, as
        // cudaMalloc's is: NCCL between GPUs of this process and the copies between towers read
        // and write it from those GPUs.
        int count = 0;
        TB_CUDA(cudaGetDeviceCount(&count));
        for (int peer = 0; peer < count; ++peer) {
            int can = 0;
            if (peer == device || cudaDeviceCanAccessPeer(&can, peer, device) != cudaSuccess || !can) continue;
            cudaMemAccessDesc access{};
            access.location.type = cudaMemLocationTypeDevice;
            access.location.id = peer;
            access.flags = cudaMemAccessFlagsProtReadWrite;
            TB_CUDA(cudaMemPoolSetAccess(pool_, &access, 1));
        }
    }
    TB_CUDA(cudaStreamCreateWithFlags(&own_, cudaStreamNonBlocking));
}

DeviceMemory::~DeviceMemory() {
    if (!useDeviceForTeardown(device_, "its memory stream")) return;
    cudaStreamSynchronize(own_);  // the cache's last gives
    cudaStreamDestroy(own_);
}

void DeviceMemory::track(StreamImpl* s) {
    std::lock_guard lock(streamsMutex_);
    streams_.push_back(s);
}

void DeviceMemory::untrack(StreamImpl* s) {
    std::lock_guard lock(streamsMutex_);
    streams_.erase(std::remove(streams_.begin(), streams_.end(), s), streams_.end());
}

void* DeviceMemory::take(size_t bytes) {
    TB_CUDA(cudaSetDevice(device_));
    void* p = nullptr;
    cudaError_t e = pools_ ? cudaMallocAsync(&p, bytes, own_) : cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation && pools_) {
        // The pool keeps what was given back to it until its stream gets there: wait for that
        // stream (only takes and gives), let the pool return its free memory, and ask once more.
        cudaGetLastError();
        TB_CUDA(cudaStreamSynchronize(own_));
        TB_CUDA(cudaMemPoolTrimTo(pool_, 0));
        e = cudaMallocAsync(&p, bytes, own_);
    }
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // clear it: the cache gives blocks back and asks once more
        return nullptr;
    }
    check(e, pools_ ? "cudaMallocAsync" : "cudaMalloc", __FILE__, __LINE__);
    // In the pool's order the block exists once its stream gets there: after this wait (for this
    // stream alone, whose only work is takes and gives) every stream may use it.
    if (pools_) TB_CUDA(cudaStreamSynchronize(own_));
    return p;
}

void DeviceMemory::give(void* block) {
    if (cudaSetDevice(device_) != cudaSuccess) return;  // left to the driver's teardown
    // The block's fence has passed: no queued work touches it, so the free need not wait for any.
    if (pools_) cudaFreeAsync(block, own_);
    else cudaFree(block);
}

BlockCache::Fence DeviceMemory::fence() {
    auto f = std::make_unique<FenceEvents>();
    if (cudaSetDevice(device_) != cudaSuccess) {
        f->never = true;
        return f.release();
    }
    std::lock_guard lock(streamsMutex_);
    for (StreamImpl* s : streams_) {
        // A stream being recorded runs nothing until its graph is launched, and beginCapture waits
        // for the stream first: nothing queued on it can still use the block.
        if (s->capturing) continue;
        cudaEvent_t e = nullptr;
        if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess || cudaEventRecord(e, s->stream) != cudaSuccess) {
            if (e) cudaEventDestroy(e);
            cudaGetLastError();
            f->never = true;
            break;
        }
        f->events.push_back(e);
    }
    return f.release();
}

bool DeviceMemory::passed(BlockCache::Fence handle) {
    auto* f = static_cast<FenceEvents*>(handle);
    if (f->never || cudaSetDevice(device_) != cudaSuccess) return false;
    // Events that have passed are let go at once, so a fence is asked about its pending ones only.
    while (!f->events.empty()) {
        const cudaError_t e = cudaEventQuery(f->events.back());
        if (e == cudaErrorNotReady) {
            cudaGetLastError();  // (not an error, but left as the thread's last one: the next launch check would throw it)
            return false;
        }
        if (e != cudaSuccess) {
            cudaGetLastError();  // a broken device: never passed
            f->never = true;
            return false;
        }
        cudaEventDestroy(f->events.back());
        f->events.pop_back();
    }
    return true;
}

void DeviceMemory::drop(BlockCache::Fence handle) {
    auto* f = static_cast<FenceEvents*>(handle);
    if (!f) return;
    if (cudaSetDevice(device_) == cudaSuccess)
        for (cudaEvent_t e : f->events) cudaEventDestroy(e);
    delete f;
}

MemoryInfo DeviceMemory::memoryInfo() {
    MemoryInfo m;
    if (cudaSetDevice(device_) != cudaSuccess || cudaMemGetInfo(&m.freeBytes, &m.totalBytes) != cudaSuccess) {
        cudaGetLastError();
        return {};
    }
    return m;
}

}  // namespace tb::cuda
