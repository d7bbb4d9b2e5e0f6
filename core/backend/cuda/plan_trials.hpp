// What a plan tries on the GPU at set-up, before it settles on a call: timing candidates against
// each other as a busy GPU runs them, and whether a candidate can be recorded into a CUDA Graph
// and replayed as a tower's step is. Used by the convolutions (cuda_conv.cu) for cuDNN's legacy
// algorithms and its graph-API engines alike.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_stream.hpp"

namespace tb::cuda {

// The median time per call of each of `runs` on `q` (runs[j](calls) runs candidate j `calls`
// times; false where it is refused, and that candidate gets no time): a warm-up call each, then
// five rounds taking every candidate in turn (a ramping clock favours none), each timing three
// calls enqueued while the stream is held busy (holdStream), so that they run back to back as in
// a recorded step and the host's time to enqueue them is not counted.
std::vector<std::optional<float>> medianTimes(cudaStream_t q, const std::vector<std::function<bool(int)>>& runs);

// A stream and cuDNN handle of the trial's own on `device`, which the backend's allocator does not
// know: no fence of another thread's free records into it while it is being recorded, and nothing
// queued on the plan's set-up stream is swallowed by the recording.
class ProbeStream {
public:
    explicit ProbeStream(int device);
    ~ProbeStream();
    ProbeStream(const ProbeStream&) = delete;
    ProbeStream& operator=(const ProbeStream&) = delete;
    Stream stream() { return &s_; }

private:
    StreamImpl s_;
};

// Whether run(stream) can be recorded into a CUDA Graph and replayed as a step is: run once (a
// first call's one-time set-up happens outside a recording, as a tower's first step runs
// unrecorded), then recorded, instantiated and launched on the probe's stream. run throws a
// tb::Error for a call that fails; the probe's stream is idle again on return.
bool recordable(ProbeStream& probe, const std::function<void(Stream)>& run);

// The most workspace a search gives cuDNN on the current device: a quarter of the free memory, at
// most 1 GiB, so that a fast algorithm with a large workspace is not missed and none takes the
// run's memory.
size_t searchWorkspaceCap();

}  // namespace tb::cuda
