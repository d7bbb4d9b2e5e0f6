// StepProfile: where the steps of a measured stretch of a run went, per step and per tower on
// average, with the run's examples/sec over that stretch. A warm-up is left out (oneDNN makes
// its kernels in the first steps; pages are touched; the prefetch queue fills). The scaling
// sweep measures every configuration with it, and the step-time model is calibrated from one.
#pragma once
#include <cstdint>
#include <mutex>

#include <nlohmann/json_fwd.hpp>

#include "engine/observer.hpp"

namespace tb {

struct StepProfile {
    int64_t steps = 0;            // reports measured (sync: steps; async: updates)
    int64_t examples = 0;         // trained on over them
    double seconds = 0;           // wall time from the end of the warm-up to the last report
    double examplesPerSec = 0;    // examples / seconds
    // Seconds per step of one tower, mean over the towers (async: over the pushers' reports).
    double dataWait = 0, compute = 0, straggle = 0, wait = 0, reduce = 0, apply = 0;
    double bytesPerStep = 0;      // moved to and from the synchronisation point
    double meanStaleness = -1;    // async only
    double stepSeconds() const { return dataWait + compute + straggle + wait + reduce + apply; }
    nlohmann::json toJson() const;
    static StepProfile fromJson(const nlohmann::json& j, const std::string& origin);
};

// An observer that builds the profile of a run's reports after the first `warmup`.
class StepProfiler final : public TrainingObserver {
public:
    explicit StepProfiler(int64_t warmup) : warmup_(warmup) {}
    void onStepEnd(const StepMetrics& m) override;
    StepProfile profile() const;  // empty (steps 0) while no report after the warm-up came

private:
    mutable std::mutex mutex_;
    int64_t warmup_, seen_ = 0;
    double start_ = -1, last_ = 0;
    int64_t towerReports_ = 0, staleReports_ = 0;
    double stalenessSum_ = 0, bytes_ = 0;
    StepProfile sum_;
};

}  // namespace tb
