#include "tensor/bf16.hpp"

#include <cstring>

#include "util/cpu_clones.hpp"

namespace tb {

// Cloned per instruction set: the SSE2 build of the rounding runs below memory speed.
TB_CPU_CLONES void roundToBf16(const float* __restrict src, uint16_t* __restrict dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = floatToBf16(src[i]);
}

TB_CPU_CLONES void addBf16(const uint16_t* __restrict src, float* __restrict dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] += bf16ToFloat(src[i]);
}

TB_CPU_CLONES void widenBf16(const uint16_t* __restrict src, float* __restrict dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = bf16ToFloat(src[i]);
}


}  // namespace tb
