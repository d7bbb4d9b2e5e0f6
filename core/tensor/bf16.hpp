// bf16: the top 16 bits of an IEEE float (sign, 8 exponent bits, 7 mantissa bits). Conversions
// for the host's memory, shared by the CPU backend's bf16 inputs and the gradients' wire format
// (comm/bf16_wire.hpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tb {

// dst[i] := src[i] rounded to the nearest bf16 (ties to even; NaN stays NaN, denormals kept), i < n.
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
