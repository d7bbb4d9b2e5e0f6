// Denormal floats: Intel processors take up to 100x longer on arithmetic that reads or makes
// them (measured: an Adam pass over 3.3 M parameters, 5.6 ms with normal moments, 546 ms with
// denormal ones), and Adam's first moment decays into them after ~600 steps of zero gradient.
// Every thread that runs engine arithmetic flushes them to zero (FTZ: results, DAZ: inputs):
// tower threads, the trainer's thread (evaluation, moving average), the input pipeline's thread,
// and the OpenMP teams that oneDNN and our loops run on (OpenBLAS runs on the calling thread).
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
