// TB_CPU_CLONES: a function compiled three times, for AVX-512 (x86-64-v4), AVX2 (x86-64-v3) and
// the baseline, the dynamic loader picking the one this processor runs (GCC's target_clones).
// For the element-wise loops oneDNN does not run for us: the default build targets SSE2, four
// floats a vector. Only where the compiler supports it, and not under the sanitizers: a
// ThreadSanitizer build crashed in the clones' resolver, which the loader runs before the
// sanitizer's runtime is set up. Small inline functions a clone calls (ew::momentumStep, ...) are
// inlined into it and so compiled for its instructions; -ffp-contract=off (CMakeLists.txt) keeps
// every clone's results equal to the baseline's.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
#define TB_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TB_CPU_CLONES
#endif
