// --sync-bn with pipeline stages: the replicas of one stage (threads of this process, and with
// processes the same stage's replicas in the other processes) sum each batch norm's statistics,
// 2c floats, micro-batch by micro-batch. Replica r's micro-batch m is then normalised by the
// statistics of every replica's micro-batch m, in every process: with one micro-batch, those of
// the whole global batch, as one device would compute them.
//
// A meeting rather than a std::barrier: a failure elsewhere in the pipeline (another stage or
// replica that throws, and so never comes) aborts it, and the threads waiting in it go on. (Across
// processes, a replica whose process died is not waited for here but in the MPI receive of the
// sums, which the run's end, mpirun's or the watchdog's, cuts short.)
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

namespace tb {

class StatisticsMeeting {
public:
    // data (count floats) := its sum over the other processes' meetings of the stage, each
    // process's ranks summed first; every process's meeting calls it in the same order.
    using AcrossProcesses = std::function<void(float* data, size_t count)>;
    // ranks: the threads of this process that meet; acrossProcesses: empty in one process.
    explicit StatisticsMeeting(int ranks, AcrossProcesses acrossProcesses = {});
    int ranks() const { return int(published_.size()); }
    // data (count floats of host memory) := the sum of every rank's data, in rank order, then
    // over the processes; every rank passes the same count. Returns once every rank has come
    // (the last to come sums for all), or false, data unchanged, where the meeting was aborted.
    bool sum(int rank, float* data, size_t count);
    // For good: every rank waiting returns false, and so does every later sum.
    void abort();

private:
    std::mutex mutex_;
    std::condition_variable met_;
    std::vector<float*> published_;  // per rank, this round's
    std::vector<float> total_;
    int arrived_ = 0;
    uint64_t round_ = 0;
    bool aborted_ = false;
    AcrossProcesses acrossProcesses_;
};

}  // namespace tb
