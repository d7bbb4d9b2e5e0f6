#include "backend/cuda/plan_trials.hpp"

#include <algorithm>
#include <array>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/kernels.cuh"

namespace tb::cuda {

std::vector<std::optional<float>> medianTimes(cudaStream_t q, const std::vector<std::function<bool(int)>>& runs) {
    // kHoldMicroseconds: longer than the host takes to enqueue three calls of any candidate (a
    // graph engine's execute or a legacy call takes tens of microseconds of host time).
    constexpr int kRounds = 5, kCalls = 3;
    constexpr unsigned kHoldMicroseconds = 1000;
    struct Event {
        cudaEvent_t e = nullptr;
        Event() { TB_CUDA(cudaEventCreate(&e)); }
        ~Event() { cudaEventDestroy(e); }
    } start, end;
    std::vector<bool> refused(runs.size());
    // A refused call may leave a CUDA error behind, which the next candidate's first launch check
    // would take for its own: cleared.
    const auto refuses = [&](size_t j, int calls) {
        if (runs[j](calls)) return false;
        cudaGetLastError();
        return true;
    };
    for (size_t j = 0; j < runs.size(); ++j) refused[j] = refuses(j, 1);
    std::vector<std::array<float, kRounds>> ms(runs.size());
    for (int r = 0; r < kRounds; ++r)
        for (size_t j = 0; j < runs.size(); ++j) {
            if (refused[j]) continue;
            // The calls are enqueued while the GPU is held, then run back to back as in a recorded
            // step: without it the time between the events is the host's (cuDNN's set-up before
            // each launch, an NCHW candidate's three calls) as much as the GPU's.
            holdStream(q, kHoldMicroseconds);
            TB_CUDA(cudaEventRecord(start.e, q));
            refused[j] = refuses(j, kCalls);
            TB_CUDA(cudaEventRecord(end.e, q));
            TB_CUDA(cudaEventSynchronize(end.e));
            TB_CUDA(cudaEventElapsedTime(&ms[j][size_t(r)], start.e, end.e));
        }
    std::vector<std::optional<float>> times(runs.size());
    for (size_t j = 0; j < runs.size(); ++j) {
        if (refused[j]) continue;
        std::nth_element(ms[j].begin(), ms[j].begin() + kRounds / 2, ms[j].end());
        times[j] = ms[j][kRounds / 2] / float(kCalls);
    }
    return times;
}

ProbeStream::ProbeStream(int device) {
    TB_CUDA(cudaSetDevice(device));
    TB_CUDA(cudaStreamCreateWithFlags(&s_.stream, cudaStreamNonBlocking));
    if (const cudnnStatus_t e = cudnnCreate(&s_.cudnn); e != CUDNN_STATUS_SUCCESS) {
        cudaStreamDestroy(s_.stream);
        TB_CUDA(e);
    }
    if (const cudnnStatus_t e = cudnnSetStream(s_.cudnn, s_.stream); e != CUDNN_STATUS_SUCCESS) {
        cudnnDestroy(s_.cudnn);
        cudaStreamDestroy(s_.stream);
        TB_CUDA(e);
    }
}

ProbeStream::~ProbeStream() {
    cudaStreamSynchronize(s_.stream);
    cudnnDestroy(s_.cudnn);
    cudaStreamDestroy(s_.stream);
}

bool recordable(ProbeStream& probe, const std::function<void(Stream)>& run) {
    cudaStream_t q = probe.stream()->stream;
    bool ok = true, capturing = false;
    try {
        run(probe.stream());
        TB_CUDA(cudaStreamSynchronize(q));
        TB_CUDA(cudaStreamBeginCapture(q, cudaStreamCaptureModeThreadLocal));
        capturing = true;
        run(probe.stream());
    } catch (const Error&) {
        ok = false;
    }
    cudaGraph_t recorded = nullptr;
    if (capturing) ok = cudaStreamEndCapture(q, &recorded) == cudaSuccess && ok && recorded;
    if (ok) {
        cudaGraphExec_t exec = nullptr;
        ok = cudaGraphInstantiate(&exec, recorded, 0) == cudaSuccess && cudaGraphLaunch(exec, q) == cudaSuccess;
        if (exec) cudaGraphExecDestroy(exec);
    }
    if (recorded) cudaGraphDestroy(recorded);
    ok = cudaStreamSynchronize(q) == cudaSuccess && ok;
    cudaGetLastError();  // (a refused call leaves its error behind)
    return ok;
}

size_t searchWorkspaceCap() {
    size_t freeBytes = 0, total = 0;
    TB_CUDA(cudaMemGetInfo(&freeBytes, &total));
    return std::min<size_t>(size_t(1) << 30, freeBytes / 4);
}

}  // namespace tb::cuda
