// TB_CPU_CLONES: a function compiled for AVX-512 (x86-64-v4), AVX2 (x86-64-v3) and the SSE2
// baseline, the loader picking one for this processor (GCC's target_clones), for the element-wise
// loops oneDNN does not run. Off under the sanitizers: the loader runs the clones' resolver before
// their runtime is set up. Inline callees (ew::momentumStep, ...) compile into each clone;
// -ffp-contract=off (CMakeLists.txt) keeps every clone's results equal to the baseline's.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
#define TB_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TB_CPU_CLONES
#endif
