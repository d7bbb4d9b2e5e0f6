// tst_block_cache: the caching allocator's books (backend/block_cache.hpp) on a made-up device
// whose queued work finishes when the test says so (no GPU):
//   - a freed block is handed out again only once its fence has passed, never while work queued
//     before its free may still use it; nobody waits for a fence
//   - out of memory: the blocks whose fences have passed go back to the device and the request is
//     tried once more; fenced blocks stay; a request that still fails is one sentence naming the
//     device, what the run holds, what is fenced and what the device has free
//   - the sizes' rounding, the half-size rule and the statistics
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "backend/block_cache.hpp"
#include "plain_check.hpp"
#include "util/error.hpp"

using tb::BlockCache;

namespace {

// Memory up to `capacity` bytes, handed out as distinct addresses. A fence is the number of the
// work queued so far; work up to `done` has finished. Every fence is dropped exactly once.
class MadeUpDevice final : public BlockCache::Device {
public:
    explicit MadeUpDevice(size_t capacity) : capacity(capacity) {}
    void* take(size_t bytes) override {
        if (used + bytes > capacity) return nullptr;
        used += bytes;
        void* p = reinterpret_cast<void*>(next);
        next += bytes + 4096;
        sizes[p] = bytes;
        ++takes;
        return p;
    }
    void give(void* block) override {
        CHECK(sizes.count(block), "a block the device never handed out");
        used -= sizes[block];
        sizes.erase(block);
        ++gives;
    }
    BlockCache::Fence fence() override {
        auto* f = new long(queued);
        live.insert(f);
        return f;
    }
    bool passed(BlockCache::Fence f) override {
        CHECK(live.count(static_cast<long*>(f)), "asked about a fence already dropped");
        return *static_cast<long*>(f) <= done;
    }
    void drop(BlockCache::Fence f) override {
        if (!f) return;
        CHECK(live.erase(static_cast<long*>(f)) == 1, "a fence dropped twice");
        delete static_cast<long*>(f);
    }
    tb::MemoryInfo memoryInfo() override { return {capacity - used, capacity}; }

    size_t capacity, used = 0;
    uintptr_t next = 1 << 20;
    std::map<void*, size_t> sizes;
    std::set<long*> live;
    long queued = 0, done = 0;  // work queued on the streams so far; finished so far
    int takes = 0, gives = 0;
};

constexpr size_t kMiB = size_t(1) << 20;

void fencedBlocksWaitForTheirWork() {
    MadeUpDevice d(64 * kMiB);
    BlockCache c("gpu:0", d);
    void* a = c.allocate(4 * kMiB);
    d.queued = 1;  // a kernel reading `a` is queued
    c.deallocate(a);
    void* b = c.allocate(4 * kMiB);  // must not be `a`: the kernel may still read it
    CHECK(b != a, "a block was handed out again while work queued before its free was still running");
    CHECK(d.takes == 2, "%d takes (expected 2: a fresh block instead)", d.takes);
    d.done = 1;  // the kernel finished
    void* e = c.allocate(3 * kMiB);  // rounds to 4 MiB: `a` is at most twice that
    CHECK(e == a, "the block whose fence passed was not reused");
    CHECK(d.takes == 2, "%d takes (expected 2)", d.takes);
    c.deallocate(b);
    c.deallocate(e);
    CHECK(c.cachedBlocks() == 2, "%zu cached", c.cachedBlocks());
}

void outOfMemoryGivesBackOnlyPassedBlocks() {
    MadeUpDevice d(10 * kMiB);
    BlockCache c("gpu:1", d);
    void* a = c.allocate(4 * kMiB);
    void* b = c.allocate(4 * kMiB);
    d.queued = 1;
    c.deallocate(a);  // fence 1: finished below
    d.done = 1;
    d.queued = 2;
    c.deallocate(b);  // fence 2: still queued
    // 6 MiB: neither cached block serves it (too small), and the device has 2 MiB left. `a` goes
    // back (its fence passed), `b` stays: 6 MiB fits in the 6 MiB then free.
    void* big = c.allocate(6 * kMiB);
    CHECK(big != nullptr, "no block");
    CHECK(d.gives == 1, "%d blocks given back (expected 1: the passed one)", d.gives);
    CHECK(c.cachedBlocks() == 1, "%zu cached (expected b, still fenced)", c.cachedBlocks());
    // 4 MiB more: b is fenced and nothing else is free, so the request fails, and says why.
    std::string error;
    try {
        c.allocate(2 * kMiB + 1);
    } catch (const tb::Error& e) {
        error = e.what();
    }
    const std::string expected =
        "gpu:1: out of device memory allocating 4 MiB (6 MiB in use by this run, 4 MiB freed but still in use by queued "
        "work; 0 MiB of 10 MiB free on the device)";
    CHECK(error == expected, "got '%s'", error.c_str());
    CHECK(c.cachedBlocks() == 1 && d.gives == 1, "the fenced block was given back while its work ran");
    d.done = 2;
    void* again = c.allocate(4 * kMiB);  // b's fence has passed: b itself
    CHECK(again == b, "the block whose fence passed was not reused");
    const tb::AllocatorStats s = c.stats();
    CHECK(s.inUseBytes == 10 * kMiB, "in use %zu", s.inUseBytes);
    CHECK(s.peakInUseBytes == 10 * kMiB, "peak %zu", s.peakInUseBytes);
    CHECK(s.reservedBytes == 10 * kMiB, "reserved %zu", s.reservedBytes);
    CHECK(s.deviceMallocs == 3, "%lld takes", static_cast<long long>(s.deviceMallocs));
}

void sizesAndTeardown() {
    CHECK(BlockCache::roundUp(0) == 512 && BlockCache::roundUp(513) == 1024, "small sizes round to 512 B");
    CHECK(BlockCache::roundUp(kMiB) == 2 * kMiB && BlockCache::roundUp(5 * kMiB) == 6 * kMiB, "large to 2 MiB");
    MadeUpDevice d(64 * kMiB);
    {
        BlockCache c("gpu:0", d);
        void* big = c.allocate(16 * kMiB);
        c.deallocate(big);
        void* small = c.allocate(6 * kMiB);  // 16 MiB is more than twice 6: a fresh block
        CHECK(small != big && d.takes == 2, "a block more than twice the request was handed out");
        c.deallocate(reinterpret_cast<void*>(uintptr_t(12345)));  // not ours: ignored
        c.allocate(512);  // never freed: the cache still gives it back when it goes
        d.queued = 5;     // and with work still queued: the device is going away with it
    }
    CHECK(d.used == 0 && d.sizes.empty(), "%zu bytes not given back", d.used);
    CHECK(d.live.empty(), "%zu fences never dropped", d.live.size());
}

}  // namespace

int main() {
    fencedBlocksWaitForTheirWork();
    outOfMemoryGivesBackOnlyPassedBlocks();
    sizesAndTeardown();
    return tbcheck::exitStatus();
}
