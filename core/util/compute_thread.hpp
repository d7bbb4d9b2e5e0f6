// What every thread that runs engine arithmetic sets on itself: tower threads, the trainer's
// thread, pipeline stages, the input pipeline's thread, and the OpenMP teams oneDNN and our loops
// run on. Threads a compute thread starts later inherit both.
//
// 1. Denormals flushed to zero (FTZ: results, DAZ: inputs): arithmetic on them is up to 100x
//    slower on Intel processors, and Adam's first moment decays into them under zero gradients.
// 2. No asynchronous signal taken. oneDNN's JIT f32 GEMM kernels (jit_avx512_common_gemm_f32 and
//    jit_avx_gemm_f32, behind inner products and dnnl_sgemm up to oneDNN 3.11; Debian 12 ships
//    2.6.3) point rsp at their heap workspace while they run (`mov rsp, [rsp+0x68]`), so the kernel
//    writes the frame of a signal handled on such a thread into the heap, and glibc later fails with
//    "corrupted size vs. prev_size" (oneDNN issue 4845, fixed upstream by PR 4855). Synchronous
//    faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS) stay deliverable: they belong to the
//    faulting thread and cannot wait. The signals go to threads that only wait (StopSignals'
//    watcher takes them all), where a handler's frame lands on a real stack.
#pragma once

#include <csignal>

namespace tb {

// Flushes denormals and blocks asynchronous signals on the calling thread.
void enterComputeThread();
// The same on the calling thread and on each thread of the OpenMP team of `threads` it leads:
// pool threads made before this call keep their old state otherwise.
void enterComputeTeam(int threads);
// The asynchronous signals: every signal but the synchronous faults above (and SIGKILL, SIGSTOP).
sigset_t asynchronousSignals();

// True when the calling thread flushes denormals (both flags).
bool denormalsFlushed();
// True when the calling thread blocks every asynchronous signal.
bool asynchronousSignalsBlocked();
// True when the calling thread and every thread of its OpenMP team of `threads` are compute
// threads (both of the above).
bool isComputeTeam(int threads);

}  // namespace tb
