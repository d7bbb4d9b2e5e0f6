// BLAS counts are `blasint`, 32 bits in Debian's OpenBLAS (not built with INTERFACE64): a vector
// of 2^31 elements or more is passed in chunks, each at most 2^30 elements.
#pragma once
#include <algorithm>
#include <cstddef>

namespace tb {

// f(first, count) over [0, n) in chunks of at most 2^30, `count` as the BLAS's integer type.
template <typename Count, typename F>
void inBlasChunks(size_t n, F&& f) {
    constexpr size_t kMost = size_t(1) << 30;
    for (size_t at = 0; at < n; at += kMost) f(at, Count(std::min(kMost, n - at)));
}

}  // namespace tb
