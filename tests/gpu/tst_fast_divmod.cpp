// tst_fast_divmod: division by a divisor fixed at launch as a multiply and shifts
// (backend/fast_divmod.hpp), on the host, where the CUDA kernels' index arithmetic is checked
// without a GPU:
//   - n / d and n % d for every divisor 1 .. 4096, divisors near powers of two and up to 2^32 - 1,
//     against numerators at the edges (0, d - 1, d, d + 1, 2^31, 2^32 - 1) and 20,000 random ones each
//   - a flat (n, h, w, c) index as its coordinates, below 2^32 (fast path) and above (64-bit path)
//   - the pooling windows that hold an input position (the pooling backward kernels' gather),
//     against every window tried one by one, for every size, stride and padding up to 7
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/fast_divmod.hpp"
#include "plain_check.hpp"

namespace {

void divisors() {
    std::vector<uint32_t> ds;
    for (uint32_t d = 1; d <= 4096; ++d) ds.push_back(d);
    for (int b = 12; b < 32; ++b)
        for (int64_t off : {-1, 0, 1}) ds.push_back(uint32_t((int64_t(1) << b) + off));
    ds.push_back(0xffffffffu);
    ds.push_back(0xfffffffeu);
    std::mt19937 rng(7);
    for (int k = 0; k < 200; ++k) ds.push_back(std::max<uint32_t>(1, rng()));
    long wrong = 0;
    for (uint32_t d : ds) {
        const tb::FastDivmod f(d);
        std::vector<uint32_t> ns{0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, 0x7fffffffu, 0x80000000u, 0xfffffffeu,
                                 0xffffffffu};
        const int randoms = d <= 4096 ? 200 : 20000;
        for (int k = 0; k < randoms; ++k) ns.push_back(rng());
        for (uint32_t n : ns) {
            uint32_t r = 0;
            const uint32_t q = f.divmod(n, r);
            if (q != n / d || r != n % d) {
                if (++wrong <= 5) CHECK(false, "%u / %u: %u rem %u, expected %u rem %u", n, d, q, r, n / d, n % d);
            }
        }
    }
    CHECK(wrong == 0, "%ld wrong quotients", wrong);
}

void coordinates() {
    const int h = 24, w = 24, c = 64;
    const tb::NhwcDivisors dv(h, w, c);
    std::mt19937_64 rng(11);
    std::vector<uint64_t> is{0, 1, 63, 64, uint64_t(h) * w * c - 1, 0xffffffffull, 0x100000000ull, 0x100000001ull,
                             (uint64_t(1) << 40) + 12345};
    for (int k = 0; k < 100000; ++k) is.push_back(rng() % (uint64_t(1) << 34));
    long wrong = 0;
    for (uint64_t i : is) {
        const tb::NhwcAt a = tb::nhwcAt(dv, i);
        const bool same = a.c == int(i % c) && a.x == int(i / c % w) && a.y == int(i / c / w % h) && a.n == i / c / w / h &&
                          tb::lastAt(dv.c, i) == int(i % c);
        if (!same && ++wrong <= 5)
            CHECK(false, "index %llu: (%llu, %d, %d, %d)", (unsigned long long)i, (unsigned long long)a.n, a.y, a.x, a.c);
    }
    CHECK(wrong == 0, "%ld wrong coordinates", wrong);
}

// Every input position of axes 1 .. 30 long, windows 1 .. 7 wide every 1 .. 7, padded 0 .. size - 1
// before, as many windows as fit a padding of up to size - 1 after (TF's SAME and VALID among them).
void poolingWindows() {
    long wrong = 0, tried = 0;
    for (int len = 1; len <= 30; ++len)
        for (int size = 1; size <= 7; ++size)
            for (int stride = 1; stride <= 7; ++stride)
                for (int pad = 0; pad < size; ++pad)
                    for (int after = 0; after < size; ++after) {
                        const int span = len + pad + after;
                        if (span < size) continue;
                        const int outs = (span - size) / stride + 1;
                        const tb::FastDivmod f{uint32_t(stride)};
                        for (int at = 0; at < len; ++at) {
                            int lo = outs, hi = -1;  // the windows holding `at`, one by one
                            for (int o = 0; o < outs; ++o)
                                if (o * stride - pad <= at && at < o * stride - pad + size) lo = std::min(lo, o), hi = o;
                            const tb::WindowRange r = tb::windowsHolding(at, pad, size, f, outs);
                            const bool same = lo <= hi ? r.lo == lo && r.hi == hi : r.lo > r.hi;
                            ++tried;
                            if (!same && ++wrong <= 5)
                                CHECK(false, "axis %d, window %d every %d from -%d, %d windows: position %d in [%d, %d], "
                                             "expected [%d, %d]", len, size, stride, pad, outs, at, r.lo, r.hi, lo, hi);
                        }
                    }
    CHECK(wrong == 0, "%ld of %ld positions with the wrong windows", wrong, tried);
}

}  // namespace

int main() {
    divisors();
    coordinates();
    poolingWindows();
    return tbcheck::exitStatus();
}
