// RunStatistics: what the run's summary says of its steps. The last 50 steps' loss and accuracy,
// each tower's busy share, the reduce-and-apply share of the step, the staleness, and the clocks:
// training time is wall time less pauses, evaluations and checkpoints; the steady rate leaves the
// first call out (oneDNN's kernel generation, cuDNN's search).
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "engine/observer.hpp"
#include "parallel/training_engine.hpp"

namespace tb {

struct RunSummary;

// Step metrics from what the towers report; stepSeconds is the wall time the step took.
StepMetrics toMetrics(const TowerStep& r, double stepSeconds);

class RunStatistics {
public:
    using Clock = std::chrono::steady_clock;
    // `firstStep`: the step the run starts from (a resume's checkpoint); `examplesPerStep`: of one
    // of the run's steps, every worker's together.
    RunStatistics(Clock::time_point start, int64_t firstStep, int64_t examplesPerStep);
    Clock::time_point start() const { return start_; }
    // Step m, reported at `now` with `held` seconds of pauses so far.
    void add(const StepMetrics& m, Clock::time_point now, double held);
    // The steady clock starts again from `step` (after a first call of several local steps).
    void steadyFrom(int64_t step, Clock::time_point now, double held);
    bool started() const { return firstRecorded_ >= 0; }
    // Fills the summary's steps, clocks, rates, busy shares and final loss, the run having ended at
    // `end` after `step` steps; `excluded`: seconds of evaluations and checkpoints to leave out.
    void summarise(RunSummary& sum, int64_t step, Clock::time_point end, double held, double excluded) const;
    // The same figures for the run so far, on step m (after add(m)): its runExamplesPerSec and
    // each tower's runBusyFraction over `trainSeconds` of training (m.elapsedSeconds).
    void soFar(StepMetrics& m, double trainSeconds) const;

private:
    // The one definition of each: examples trained over training seconds, and tower i's busy
    // seconds over them (a relayed tower's sampled fractions, time-weighted).
    double examplesPerSec(int64_t step, double trainSeconds) const;
    double busyFraction(size_t i, double trainSeconds) const;

    Clock::time_point start_;
    int64_t firstStep_, examplesPerStep_;
    std::deque<std::pair<double, double>> recent_;  // (loss, accuracy) of the last steps
    std::vector<double> busy_;                      // per tower, seconds
    // Towers relayed from other processes (async parameter servers): their busy fractions as
    // sampled at this process's steps, weighted by the step's time (a time average, not a sum).
    std::vector<double> relayedBusy_, relayedTime_;
    double reduceApply_ = 0, stepTime_ = 0, staleness_ = 0, bubble_ = 0, bubbleTime_ = 0;
    int64_t stalenessCount_ = 0;
    int64_t firstRecorded_ = -1;  // the step of the first report
    Clock::time_point afterFirst_;
    double heldBeforeSecond_ = 0;
};

}  // namespace tb
