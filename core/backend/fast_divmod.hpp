// Division by a divisor fixed at launch, as a multiply and shifts (Granlund and Montgomery,
// "Division by invariant integers using multiplication", 1994, figure 4.1; libdivide's and CUTLASS's
// FastDivmod are the same idea). A GPU has no integer divider: a 64-bit `i / c` is a software
// routine of about 70 instructions, and the element-wise kernels that turn a flat NHWC index into
// (n, y, x, c) did three such divisions per element; on an H200 cifar10_cnn's max-pooling backward
// (4.7 M elements, three divisions each) took 42 us a call where its memory traffic needs about 8.
// Shared by the host (tested there, tst_fast_divmod) and the CUDA kernels.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define TB_FAST_HD __host__ __device__ __forceinline__
#else
#define TB_FAST_HD inline
#endif

namespace tb {

TB_FAST_HD uint32_t mulHigh(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __umulhi(a, b);
#else
    return uint32_t((uint64_t(a) * b) >> 32);
#endif
}

// n / d and n % d for every 32-bit n, d >= 1 fixed when made (on the host, at launch).
struct FastDivmod {
    uint32_t d = 1, mul = 0, shift = 0;  // d == 1: mul and shift unused

    FastDivmod() = default;
    explicit FastDivmod(uint32_t divisor) : d(divisor) {
        if (d <= 1) return;
        // l = ceil(log2 d); m = floor(2^32 (2^l - d) / d) + 1, which fits in 32 bits.
        uint32_t l = 0;
        while ((uint64_t(1) << l) < d) ++l;
        mul = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << l) - d)) / d + 1);
        shift = l;
    }
    TB_FAST_HD uint32_t div(uint32_t n) const {
        if (d == 1) return n;
        const uint32_t t = mulHigh(mul, n);
        return (t + ((n - t) >> 1)) >> (shift - 1);
    }
    // q = n / d, and n % d into r.
    TB_FAST_HD uint32_t divmod(uint32_t n, uint32_t& r) const {
        const uint32_t q = div(n);
        r = n - q * d;
        return q;
    }
};

// A flat index of an (n, h, w, c) tensor as its coordinates: 32-bit fast division where the index
// fits (every tensor of these models), 64-bit division beyond.
struct NhwcDivisors {
    FastDivmod c, w, h;
    NhwcDivisors() = default;
    NhwcDivisors(int h_, int w_, int c_) : c(uint32_t(c_)), w(uint32_t(w_)), h(uint32_t(h_)) {}
};
struct NhwcAt {
    uint64_t n;
    int y, x, c;
};
TB_FAST_HD NhwcAt nhwcAt(const NhwcDivisors& dv, uint64_t i) {
    if (i <= 0xffffffffull) {
        uint32_t c, x, y;
        const uint32_t n = dv.h.divmod(dv.w.divmod(dv.c.divmod(uint32_t(i), c), x), y);
        return {n, int(y), int(x), int(c)};
    }
    const uint64_t cs = dv.c.d, ws = dv.w.d, hs = dv.h.d;
    return {i / cs / ws / hs, int(i / cs / ws % hs), int(i / cs % ws), int(i % cs)};
}
// The last coordinate alone (a channel, or a column of a row-major matrix): i % d.
TB_FAST_HD int lastAt(const FastDivmod& d, uint64_t i) {
    if (i <= 0xffffffffull) {
        uint32_t r;
        d.divmod(uint32_t(i), r);
        return int(r);
    }
    return int(i % d.d);
}

// Along one axis of a pooling: the windows (of `size`, one every `stride` from -`pad`, `outs` of
// them) that hold input position `at`, [lo, hi] (lo > hi: none). Window o holds it where
// o stride - pad <= at < o stride - pad + size: lo = floor((at + pad - size) / stride) + 1, hi =
// floor((at + pad) / stride), by the stride's fast division (a numerator below 0 gives lo 0, as
// the floor below 0 would once clamped).
struct WindowRange {
    int lo, hi;
};
TB_FAST_HD WindowRange windowsHolding(int at, int pad, int size, const FastDivmod& stride, int outs) {
    const int p = at + pad, first = p - size + int(stride.d);
    const int hi = int(stride.div(uint32_t(p)));
    return {first > 0 ? int(stride.div(uint32_t(first))) : 0, hi < outs - 1 ? hi : outs - 1};
}

}  // namespace tb
