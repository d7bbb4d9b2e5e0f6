// Large buffers in pages of their own. A checkpoint's snapshot (variables and optimiser slots on
// the host: 3 x 12.5 MiB for mnist_cnn with Adam) lives for one write now and then. glibc serves
// such a block from free space in the calling thread's arena when it has some (its mmap
// threshold only decides how an arena grows, and it rises to the largest block freed), touching
// pages that were never used before; freed, they stay resident, and an arena other than the main
// one does not give its top back to malloc_trim. In the window's soak the first best-checkpoint
// left a 12.5 MiB run of such pages resident for the rest of the run. Blocks of 1 MiB and more
// from this allocator are mapped for them alone and unmapped when freed.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace tb {

template <class T>
struct MappedAllocator {
    using value_type = T;
    static constexpr size_t kMappedBytes = size_t(1) << 20;

    MappedAllocator() = default;
    template <class U>
    MappedAllocator(const MappedAllocator<U>&) noexcept {}

    T* allocate(size_t n) {
        if (n > size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
        if (n * sizeof(T) < kMappedBytes) return std::allocator<T>().allocate(n);
        void* p = ::mmap(nullptr, n * sizeof(T), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        return static_cast<T*>(p);
    }
    void deallocate(T* p, size_t n) noexcept {
        if (n * sizeof(T) < kMappedBytes) std::allocator<T>().deallocate(p, n);
        else ::munmap(p, n * sizeof(T));
    }
    template <class U>
    bool operator==(const MappedAllocator<U>&) const noexcept { return true; }
};

template <class T>
using MappedVector = std::vector<T, MappedAllocator<T>>;

}  // namespace tb
