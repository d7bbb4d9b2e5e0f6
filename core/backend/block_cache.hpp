// BlockCache: the books of a caching allocator of a device's memory whose blocks may still be read
// or written by work the device has queued when the host frees them (a GPU runs its streams
// behind the host). After the first step nothing in the step loop reaches the device's allocator,
// which costs milliseconds and, for cudaMalloc/cudaFree, synchronises the whole device.
//
// Stream order: a freed block carries a fence, the device's mark of the work queued so far on
// every stream (CUDA: an event recorded on each). The block goes to a new owner only once its
// fence has passed, so no block reaches another stream, or another use on the same one, while
// work queued before its free may still touch it. Nobody waits for a fence: a block whose fence
// has not passed is passed over, and a fresh one taken from the device instead.
//
// Out of memory: the cached blocks whose fences have passed go back to the device and the
// request is tried once more. The cache never waits for a stream here (cudaFree would wait for
// the whole device, and so for an NCCL kernel that waits in turn for a rank whose thread is
// blocked in this very allocation); blocks still fenced stay cached, and the request fails with
// a sentence naming the device if that is not enough.
//
// Sizes are rounded to 512 B below 1 MiB and to 2 MiB above, and a cached block serves a request
// of at least half its size. Thread-safe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "backend/backend.hpp"

namespace tb {

class BlockCache {
public:
    using Fence = void*;  // the device's handle of one fence; nullptr is "already passed"

    // What the cache asks of the device: CUDA's in backend/cuda/device_allocator.cpp, a test's on
    // the host. None of these may wait for the device's queued work.
    class Device {
    public:
        virtual ~Device() = default;
        virtual void* take(size_t bytes) = 0;   // a fresh block, or nullptr when the device is out of memory
        virtual void give(void* block) = 0;     // back to the device (its fence has passed)
        virtual Fence fence() = 0;              // marks every stream's work queued so far
        virtual bool passed(Fence) = 0;         // has the device done all the work the fence marks?
        virtual void drop(Fence) = 0;           // the fence's handles, no longer asked about
        virtual MemoryInfo memoryInfo() = 0;    // for the out-of-memory sentence; zeros where unknown
    };

    // `name` ("gpu:0") starts the out-of-memory sentence. `device` outlives the cache.
    BlockCache(std::string name, Device& device) : name_(std::move(name)), device_(device) {}
    ~BlockCache();  // gives every block back, cached or still handed out (a caller's leak)
    BlockCache(const BlockCache&) = delete;
    BlockCache& operator=(const BlockCache&) = delete;

    void* allocate(size_t bytes);  // throws tb::Error naming the device when memory runs out
    void deallocate(void* p);      // p from allocate, or nullptr; the block is fenced
    AllocatorStats stats() const;
    size_t cachedBlocks() const;   // free blocks kept, fenced or not
    static size_t roundUp(size_t bytes);

private:
    struct Cached {
        void* block;
        Fence fence;
    };
    bool reuse(size_t size, void*& p, size_t& got);  // with mutex_ held
    void giveBackPassed();                            // with mutex_ held

    std::string name_;
    Device& device_;
    mutable std::mutex mutex_;
    std::unordered_map<void*, size_t> live_;   // handed out: block -> its (rounded) size
    std::multimap<size_t, Cached> cached_;     // freed: size -> block and its fence
    AllocatorStats stats_;
};

}  // namespace tb
