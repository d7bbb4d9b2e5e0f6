// DeviceAllocator: one GPU's memory for its backend, through a BlockCache (backend/block_cache.hpp:
// the caching and the stream order). Fresh blocks come from the device's stream-ordered pool
// (cudaMallocAsync on a stream of the allocator's own, then a wait for that stream alone), so
// neither taking nor giving back memory waits for the whole device as cudaMalloc and cudaFree do
// (a device without pools falls back to them, and its out-of-memory retry may then wait for an
// NCCL kernel); a freed block's fence is an event recorded on each of the backend's streams (track()).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "backend/block_cache.hpp"
#include "backend/cuda/cuda_stream.hpp"

namespace tb::cuda {

// The CUDA side of a BlockCache: memory, fences and the streams they mark.
class DeviceMemory final : public BlockCache::Device {
public:
    explicit DeviceMemory(int device);
    ~DeviceMemory() override;
    DeviceMemory(const DeviceMemory&) = delete;
    DeviceMemory& operator=(const DeviceMemory&) = delete;

    void track(StreamImpl* s);    // a stream of the backend: fences mark its work from now on
    void untrack(StreamImpl* s);  // before the stream is destroyed
    // Held while a stream begins or ends a recording: a fence's event recorded on it in between
    // would become a node of its graph.
    std::unique_lock<std::mutex> holdStreams() { return std::unique_lock(streamsMutex_); }

    void* take(size_t bytes) override;
    void give(void* block) override;
    BlockCache::Fence fence() override;
    bool passed(BlockCache::Fence f) override;
    void drop(BlockCache::Fence f) override;
    MemoryInfo memoryInfo() override;

private:
    int device_;
    bool pools_ = false;           // the device has stream-ordered pools (cudaMallocAsync)
    cudaMemPool_t pool_ = nullptr; // its default pool
    cudaStream_t own_ = nullptr;   // takes and gives of the pool, in its order
    std::mutex streamsMutex_;
    std::vector<StreamImpl*> streams_;
};

class DeviceAllocator {
public:
    explicit DeviceAllocator(int device) : memory_(device), cache_("gpu:" + std::to_string(device), memory_) {}

    void* allocate(size_t bytes) { return cache_.allocate(bytes); }  // throws tb::Error naming the GPU
    void deallocate(void* p) { cache_.deallocate(p); }
    AllocatorStats stats() const { return cache_.stats(); }
    void track(StreamImpl* s) { memory_.track(s); }
    void untrack(StreamImpl* s) { memory_.untrack(s); }
    std::unique_lock<std::mutex> holdStreams() { return memory_.holdStreams(); }

private:
    DeviceMemory memory_;  // declared first: the cache gives its blocks back to it when it goes
    BlockCache cache_;
};

}  // namespace tb::cuda
