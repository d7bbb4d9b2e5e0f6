// tb_gemm_rsp_probe: shows, outside the engine, why compute threads take no asynchronous signal
// (core/util/compute_thread.hpp). It runs oneDNN's f32 GEMM (dnnl_sgemm, mnist_cnn's dense-layer
// shapes) on this one thread under ITIMER_PROF with a SIGPROF handler that looks at where the
// interrupted code's stack pointer was. oneDNN's JIT GEMM kernels (up to 3.11) point rsp at their
// heap workspace; a handler's frame then lands in the heap, and glibc aborts later ("corrupted
// size vs. prev_size while consolidating"). Not a test: its outcome is up to chance (9 of 10 runs
// aborted on a 2-core AMD EPYC with AVX-512, 2026-12-05).
//   tb_gemm_rsp_probe         the handler installed: says where rsp was, or aborts
//   tb_gemm_rsp_probe none    no handler (the same work; ends cleanly)
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {
uintptr_t stackLow = 0, stackHigh = 0;  // this thread's stack, [low, high)
std::atomic<long> interruptions{0}, offStack{0};

// Async-signal-safe: atomics, snprintf into a local buffer (no allocation for these formats), write.
extern "C" void onProf(int, siginfo_t*, void* context) {
    const auto* uc = static_cast<const ucontext_t*>(context);
    const auto sp = uintptr_t(uc->uc_mcontext.gregs[REG_RSP]);
    interruptions.fetch_add(1, std::memory_order_relaxed);
    if (sp >= stackLow && sp < stackHigh) return;
    if (offStack.fetch_add(1) == 0) {
        char line[160];
        const int n = std::snprintf(line, sizeof line, "interrupted with rsp %#lx, outside this thread's stack %#lx-%#lx (rip %#lx)\n",
                                    (unsigned long)sp, (unsigned long)stackLow, (unsigned long)stackHigh,
                                    (unsigned long)uc->uc_mcontext.gregs[REG_RIP]);
        [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, line, size_t(n));
    }
}
}  // namespace

int main(int argc, char** argv) {
    const bool handler = !(argc > 1 && std::strcmp(argv[1], "none") == 0);
    omp_set_num_threads(1);  // oneDNN's GEMM on this thread alone: the handler knows its stack
    pthread_attr_t attr;
    pthread_getattr_np(pthread_self(), &attr);
    void* base = nullptr;
    size_t size = 0;
    pthread_attr_getstack(&attr, &base, &size);
    pthread_attr_destroy(&attr);
    stackLow = uintptr_t(base);
    stackHigh = stackLow + size;
    void* first = std::malloc(64);
    std::printf("oneDNN %d.%d.%d, the heap near %p, %s\n", dnnl_version()->major, dnnl_version()->minor, dnnl_version()->patch,
                first, handler ? "SIGPROF handled every 200 us of CPU time" : "no handler");
    std::free(first);
    if (handler) {
        struct sigaction a = {};
        a.sa_sigaction = onProf;
        a.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&a.sa_mask);
        sigaction(SIGPROF, &a, nullptr);
        const itimerval every{{0, 200}, {0, 200}};
        setitimer(ITIMER_PROF, &every, nullptr);
    }
    // (M, N, K) of mnist_cnn's fc1 forward and both gradients, and its logits, batch 128.
    const int shapes[][3] = {{128, 1024, 3136}, {128, 10, 1024}, {1024, 3136, 128}, {3136, 1024, 128}};
    for (int round = 0; round < 200; ++round)
        for (const auto& s : shapes) {
            const int m = s[0], n = s[1], k = s[2];
            std::vector<float> a(size_t(m) * size_t(k), 1.f), b(size_t(k) * size_t(n), 0.5f), c(size_t(m) * size_t(n));
            dnnl_sgemm('N', 'N', m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, c.data(), n);
        }
    std::printf("%ld interruptions, %ld with rsp outside the stack; the heap survived\n", interruptions.load(), offStack.load());
    return 0;
}
