// Denormal floats: arithmetic on them is up to 100x slower on Intel processors, and Adam's first
// moment decays into them under zero gradients. Every thread that runs engine arithmetic flushes
// them to zero (FTZ: results, DAZ: inputs): tower threads, the trainer's thread, the input
// pipeline's thread, and the OpenMP teams oneDNN and our loops run on (OpenBLAS: the caller's).
#pragma once

namespace tb {

// Sets flush-to-zero and denormals-are-zero on the calling thread (threads it creates later
// inherit the mode).
void flushDenormals();
// The same on the calling thread and on each thread of the OpenMP team of `threads` it leads:
// pool threads made before this call keep their old mode otherwise.
void flushDenormalsInTeam(int threads);
// True when the calling thread flushes denormals (both flags).
bool denormalsFlushed();
// True when the calling thread and every thread of its OpenMP team of `threads` flush them.
bool denormalsFlushedInTeam(int threads);

}  // namespace tb
