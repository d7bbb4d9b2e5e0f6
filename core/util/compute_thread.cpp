#include "util/compute_thread.hpp"

#include <omp.h>
#include <pthread.h>

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace tb {

namespace {
#if defined(__x86_64__) || defined(__i386__)
constexpr unsigned kFtz = 0x8000, kDaz = 0x0040;  // MXCSR bits 15 and 6
#endif

void flushDenormals() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(_mm_getcsr() | kFtz | kDaz);
#elif defined(__aarch64__)
    unsigned long fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr | (1ul << 24)));  // FZ: inputs and results
#endif
}

bool isComputeThread() { return denormalsFlushed() && asynchronousSignalsBlocked(); }
}  // namespace

sigset_t asynchronousSignals() {
    sigset_t s;
    sigfillset(&s);
    for (int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) sigdelset(&s, fault);
    return s;
}

void enterComputeThread() {
    flushDenormals();
    const sigset_t async = asynchronousSignals();
    pthread_sigmask(SIG_BLOCK, &async, nullptr);
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

bool asynchronousSignalsBlocked() {
    const sigset_t async = asynchronousSignals();
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, nullptr, &now);
    // SIGKILL, SIGSTOP and glibc's own real-time signals below SIGRTMIN cannot be blocked.
    for (int s = 1; s < NSIG; ++s)
        if (sigismember(&async, s) == 1 && s != SIGKILL && s != SIGSTOP && !(s > 31 && s < SIGRTMIN) &&
            sigismember(&now, s) != 1)
            return false;
    return true;
}

void enterComputeTeam(int threads) {
    enterComputeThread();
#pragma omp parallel num_threads(threads > 0 ? threads : omp_get_max_threads())
    enterComputeThread();
}

bool isComputeTeam(int threads) {
    std::atomic<bool> all{isComputeThread()};
#pragma omp parallel num_threads(threads > 0 ? threads : omp_get_max_threads())
    if (!isComputeThread()) all = false;
    return all;
}

}  // namespace tb
