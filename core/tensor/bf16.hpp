// bf16: the top 16 bits of an IEEE float (sign, 8 exponent bits, 7 mantissa bits). Conversions
// for the host's memory, shared by the CPU backend's bf16 inputs and the gradients' wire format
// (comm/bf16_wire.hpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tb {

// x rounded to the nearest bf16 (ties to even; NaN stays NaN, denormals kept). Integer arithmetic
// without branches (the NaN case is a select), so loops calling it vectorise.
inline uint16_t floatToBf16(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quietNan = (u >> 16) | 0x40u;  // rounding could carry a NaN's mantissa into infinity
    return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quietNan : rounded);
}
// dst[i] := floatToBf16(src[i]), i < n.
void roundToBf16(const float* src, uint16_t* dst, size_t n);
// One bf16 widened to fp32 (exact).
inline float bf16ToFloat(uint16_t h) {
    const uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}
// dst[i] := src[i] widened to fp32 (exact).
void widenBf16(const uint16_t* src, float* dst, size_t n);
// dst[i] += src[i] widened to fp32.
void addBf16(const uint16_t* src, float* dst, size_t n);

}  // namespace tb
