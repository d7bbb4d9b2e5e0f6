#include "backend/block_cache.hpp"

#include "util/error.hpp"

namespace tb {

namespace {
constexpr size_t kSmall = size_t(1) << 20, kSmallStep = 512, kLargeStep = size_t(2) << 20;
std::string mib(size_t bytes) { return std::to_string((bytes + (1 << 19)) >> 20) + " MiB"; }
std::string freeText(const MemoryInfo& m) {
    return m.totalBytes ? mib(m.freeBytes) + " of " + mib(m.totalBytes) + " free on the device" : "the device's free memory unknown";
}
}  // namespace

size_t BlockCache::roundUp(size_t bytes) {
    if (bytes == 0) bytes = 1;
    const size_t step = bytes < kSmall ? kSmallStep : kLargeStep;
    return (bytes + step - 1) / step * step;
}

BlockCache::~BlockCache() {
    std::lock_guard lock(mutex_);
    for (auto& [size, c] : cached_) {
        device_.drop(c.fence);
        device_.give(c.block);
    }
    for (auto& [p, size] : live_) device_.give(p);  // leaked by a caller: still give it back
}

// The smallest cached block that fits, not more than twice the request, whose fence has passed.
bool BlockCache::reuse(size_t size, void*& p, size_t& got) {
    for (auto it = cached_.lower_bound(size); it != cached_.end() && it->first <= 2 * size; ++it) {
        if (it->second.fence && !device_.passed(it->second.fence)) continue;  // queued work may still use it
        device_.drop(it->second.fence);
        p = it->second.block;
        got = it->first;
        cached_.erase(it);
        return true;
    }
    return false;
}

void BlockCache::giveBackPassed() {
    for (auto it = cached_.begin(); it != cached_.end();) {
        if (it->second.fence && !device_.passed(it->second.fence)) {
            ++it;
            continue;
        }
        device_.drop(it->second.fence);
        device_.give(it->second.block);
        stats_.reservedBytes -= it->first;
        it = cached_.erase(it);
    }
}

void* BlockCache::allocate(size_t bytes) {
    const size_t size = roundUp(bytes);
    std::lock_guard lock(mutex_);
    void* p = nullptr;
    size_t got = size;
    if (!reuse(size, p, got)) {
        p = device_.take(size);
        if (!p) {
            giveBackPassed();
            p = device_.take(size);
        }
        if (!p) {
            size_t fencedBytes = 0;
            for (const auto& [s, c] : cached_) fencedBytes += s;
            throw Error(name_ + ": out of device memory allocating " + mib(size) + " (" + mib(stats_.inUseBytes) +
                        " in use by this run" +
                        (fencedBytes ? ", " + mib(fencedBytes) + " freed but still in use by queued work" : std::string()) +
                        "; " + freeText(device_.memoryInfo()) + ")");
        }
        ++stats_.deviceMallocs;
        stats_.reservedBytes += size;
    }
    live_.emplace(p, got);
    stats_.inUseBytes += got;
    if (stats_.inUseBytes > stats_.peakInUseBytes) stats_.peakInUseBytes = stats_.inUseBytes;
    return p;
}

void BlockCache::deallocate(void* p) {
    if (!p) return;
    std::lock_guard lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) return;  // not ours: ignore rather than corrupt the books
    stats_.inUseBytes -= it->second;
    cached_.emplace(it->second, Cached{p, device_.fence()});
    live_.erase(it);
}

AllocatorStats BlockCache::stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
}

size_t BlockCache::cachedBlocks() const {
    std::lock_guard lock(mutex_);
    return cached_.size();
}

}  // namespace tb
