#include "engine/step_profile.hpp"

#include "util/error.hpp"
#include <nlohmann/json.hpp>

namespace tb {

void StepProfiler::onStepEnd(const StepMetrics& m) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (++seen_ <= warmup_) {
        start_ = m.elapsedSeconds;  // the measured stretch starts where the warm-up ended
        return;
    }
    if (start_ < 0) start_ = m.elapsedSeconds - m.stepSeconds;  // no warm-up: from this step's start
    last_ = m.elapsedSeconds;
    ++sum_.steps;
    sum_.examples += m.examples;
    bytes_ += double(m.bytesMoved);
    if (m.staleness >= 0) {
        stalenessSum_ += double(m.staleness);
        ++staleReports_;
    }
    // Async reports carry every tower's latest phases; only the pusher's are this update's (and
    // towers relayed from other processes are theirs, not this step's).
    for (size_t i = 0; i < m.towers.size(); ++i) {
        if ((m.pusher >= 0 && int(i) != m.pusher) || m.towers[i].relayed) continue;
        const TowerPhases& p = m.towers[i].phases;
        sum_.dataWait += p.dataWait;
        sum_.compute += p.forward + p.backward;
        sum_.straggle += p.straggle;
        sum_.wait += p.wait;
        sum_.reduce += p.reduce;
        sum_.apply += p.apply;
        ++towerReports_;
    }
}

StepProfile StepProfiler::profile() const {
    std::lock_guard<std::mutex> lock(mutex_);
    StepProfile p = sum_;
    if (p.steps == 0) return p;
    p.seconds = last_ - start_;
    p.examplesPerSec = p.seconds > 0 ? double(p.examples) / p.seconds : 0;
    const double perTower = towerReports_ > 0 ? 1.0 / double(towerReports_) : 0;
    for (double* v : {&p.dataWait, &p.compute, &p.straggle, &p.wait, &p.reduce, &p.apply}) *v *= perTower;
    p.bytesPerStep = bytes_ / double(p.steps);
    p.meanStaleness = staleReports_ > 0 ? stalenessSum_ / double(staleReports_) : -1;
    return p;
}

nlohmann::json StepProfile::toJson() const {
    nlohmann::json j = {{"steps", steps},
                        {"examples", examples},
                        {"seconds", seconds},
                        {"examples_per_sec", examplesPerSec},
                        {"step_ms", 1e3 * stepSeconds()},
                        {"data_wait_ms", 1e3 * dataWait},
                        {"compute_ms", 1e3 * compute},
                        {"straggle_ms", 1e3 * straggle},
                        {"wait_ms", 1e3 * wait},
                        {"reduce_ms", 1e3 * reduce},
                        {"apply_ms", 1e3 * apply},
                        {"bytes_per_step", bytesPerStep}};
    if (meanStaleness >= 0) j["mean_staleness"] = meanStaleness;
    return j;
}

StepProfile StepProfile::fromJson(const nlohmann::json& j, const std::string& origin) {
    auto number = [&](const char* key, bool required = true) {
        auto it = j.is_object() ? j.find(key) : j.end();
        if (it == j.end() || !it->is_number()) {
            if (!required) return -1.0;
            throw Error(origin + ": '" + key + "' is missing or not a number");
        }
        const double v = it->get<double>();
        if (!(v >= 0) || v > 1e15) throw Error(origin + ": '" + key + "' must be a number from 0 to 1e15");
        return v;
    };
    StepProfile p;
    p.steps = int64_t(number("steps"));
    p.examples = int64_t(number("examples"));
    p.seconds = number("seconds");
    p.examplesPerSec = number("examples_per_sec");
    p.dataWait = 1e-3 * number("data_wait_ms");
    p.compute = 1e-3 * number("compute_ms");
    p.straggle = 1e-3 * number("straggle_ms");
    p.wait = 1e-3 * number("wait_ms");
    p.reduce = 1e-3 * number("reduce_ms");
    p.apply = 1e-3 * number("apply_ms");
    p.bytesPerStep = number("bytes_per_step");
    if (j.contains("mean_staleness")) p.meanStaleness = number("mean_staleness");
    if (p.steps == 0 || p.compute <= 0) throw Error(origin + ": no measured steps");
    return p;
}

}  // namespace tb
