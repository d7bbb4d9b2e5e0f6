// DeviceAllocator: a caching allocator of one GPU's memory. Blocks freed by the engine are kept
// and handed out again for a request of about their size, so that after the first step nothing
// in the step loop reaches cudaMalloc (which synchronises the device and costs milliseconds).
// Sizes are rounded to 512 B below 1 MiB and to 2 MiB above, and a cached block serves a
// request of at least half its size. When the device runs out, the cache is returned to the
// device and the request is tried once more.
//
// A freed block may be handed out again at once: callers free memory only once the streams
// that used it are synchronised (tensors and plans live as long as their network).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

#include "backend/backend.hpp"

namespace tb::cuda {

class DeviceAllocator {
public:
    explicit DeviceAllocator(int device) : device_(device) {}
    ~DeviceAllocator();
    DeviceAllocator(const DeviceAllocator&) = delete;
    DeviceAllocator& operator=(const DeviceAllocator&) = delete;

    void* allocate(size_t bytes);   // throws tb::Error naming the GPU when memory runs out
    void deallocate(void* p);       // p from allocate, or nullptr
    AllocatorStats stats() const;
    static size_t roundUp(size_t bytes);

private:
    void releaseCache();            // with mutex_ held

    int device_;
    mutable std::mutex mutex_;
    std::unordered_map<void*, size_t> live_;   // block -> its (rounded) size
    std::multimap<size_t, void*> cached_;      // size -> free block
    AllocatorStats stats_;
};

}  // namespace tb::cuda
