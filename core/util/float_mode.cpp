#include "util/float_mode.hpp"

#include <omp.h>

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace tb {

namespace {
#if defined(__x86_64__) || defined(__i386__)
constexpr unsigned kFtz = 0x8000, kDaz = 0x0040;  // MXCSR bits 15 and 6
#endif
}  // namespace

void flushDenormals() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(_mm_getcsr() | kFtz | kDaz);
#elif defined(__aarch64__)
    unsigned long fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr | (1ul << 24)));  // FZ: inputs and results
#endif
}

bool denormalsFlushed() {
#if defined(__x86_64__) || defined(__i386__)
    return (_mm_getcsr() & (kFtz | kDaz)) == (kFtz | kDaz);
#elif defined(__aarch64__)
    unsigned long fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    return (fpcr >> 24) & 1;
#else
    return false;
#endif
}

void flushDenormalsInTeam(int threads) {
    flushDenormals();
#pragma omp parallel num_threads(threads > 0 ? threads : omp_get_max_threads())
    flushDenormals();
}

bool denormalsFlushedInTeam(int threads) {
    std::atomic<bool> all{denormalsFlushed()};
#pragma omp parallel num_threads(threads > 0 ? threads : omp_get_max_threads())
    if (!denormalsFlushed()) all = false;
    return all;
}

}  // namespace tb
