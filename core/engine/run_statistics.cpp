#include "engine/run_statistics.hpp"

#include <algorithm>
#include <cmath>

#include "engine/trainer.hpp"
#include "util/elapsed.hpp"

namespace tb {

StepMetrics toMetrics(const TowerStep& r, double stepSeconds) {
    StepMetrics m;
    m.step = r.update;
    m.lr = r.lr;
    m.stepSeconds = stepSeconds;
    m.bytesMoved = r.bytesMoved;
    m.pusher = r.pusher;
    m.staleness = r.staleness;
    m.averaged = r.averaged;
    m.bubbleFraction = r.bubbleFraction;
    m.stages = r.stages;
    m.stageBlocks = r.stageBlocks;
    m.layerTimes = r.layerTimes;
    double loss = 0, correct = 0;
    int examples = 0;
    for (size_t i = 0; i < r.phases.size(); ++i) {
        TowerMetrics t;
        t.phases = r.phases[i];
        auto& p = t.phases;
        const double busy = p.forward + p.backward + p.straggle + p.reduce + p.apply;
        t.busyFraction = stepSeconds > 0 ? std::min(1.0, busy / stepSeconds) : 0;
        // So the phases add up to the step (an async report's step is the pusher's own cycle).
        if (r.examples[i] > 0 || r.pusher < 0)
            p.other = std::max(0.0, stepSeconds - (busy + p.dataWait + p.wait));
        if (r.examples[i] > 0) {
            t.loss = r.lossSum[i] / r.examples[i] + r.weightDecayLoss;
            t.accuracy = r.correct[i] / r.examples[i];
            loss += r.lossSum[i];
            correct += r.correct[i];
            examples += r.examples[i];
            m.dataWaitSeconds = std::max(m.dataWaitSeconds, p.dataWait);
        } else {
            t.loss = t.accuracy = std::nan("");
        }
        m.towers.push_back(t);
    }
    m.loss = examples ? loss / examples + r.weightDecayLoss : 0;
    m.accuracy = examples ? correct / examples : 0;
    m.computeSeconds = stepSeconds - m.dataWaitSeconds;
    m.examples = examples;
    m.examplesPerSec = stepSeconds > 0 ? examples / stepSeconds : 0;
    return m;
}

RunStatistics::RunStatistics(Clock::time_point start, int64_t firstStep, int64_t examplesPerStep)
    : start_(start), firstStep_(firstStep), examplesPerStep_(examplesPerStep), afterFirst_(start) {}

void RunStatistics::add(const StepMetrics& m, Clock::time_point now, double held) {
    recent_.emplace_back(m.loss, m.accuracy);
    if (recent_.size() > 50) recent_.pop_front();
    double worst = 0;
    for (auto* v : {&busy_, &relayedBusy_, &relayedTime_})  // processes: every worker's towers
        v->resize(std::max(v->size(), m.towers.size()), 0.0);
    for (size_t i = 0; i < m.towers.size(); ++i) {
        const TowerMetrics& t = m.towers[i];
        if (t.relayed) {
            if (t.phases.forward > 0) {  // heard from
                relayedBusy_[i] += t.busyFraction * m.stepSeconds;
                relayedTime_[i] += m.stepSeconds;
            }
            continue;
        }
        const auto& p = t.phases;
        busy_[i] += p.forward + p.backward + p.straggle + p.reduce + p.apply;
        worst = std::max(worst, p.reduce + p.apply);
    }
    reduceApply_ += worst;
    stepTime_ += m.stepSeconds;
    if (m.staleness >= 0) staleness_ += double(m.staleness), ++stalenessCount_;
    // Pipelines: the bubble weighted by each step's time, after the first step (its kernels made).
    if (m.bubbleFraction >= 0 && firstRecorded_ >= 0) bubble_ += m.bubbleFraction * m.stepSeconds, bubbleTime_ += m.stepSeconds;
    if (firstRecorded_ < 0) steadyFrom(m.step, now, held);
}

void RunStatistics::steadyFrom(int64_t step, Clock::time_point now, double held) {
    firstRecorded_ = step;
    afterFirst_ = now;
    heldBeforeSecond_ = held;
}

double RunStatistics::examplesPerSec(int64_t step, double trainSeconds) const {
    const int64_t trained = step - firstStep_;  // this session's steps (a resumed run's, since the checkpoint)
    return trainSeconds > 0 ? double(trained) * double(examplesPerStep_) / trainSeconds : 0;
}

double RunStatistics::busyFraction(size_t i, double trainSeconds) const {
    if (relayedTime_[i] > 0) return std::min(1.0, relayedBusy_[i] / relayedTime_[i]);
    return trainSeconds > 0 ? std::min(1.0, busy_[i] / trainSeconds) : 0;
}

void RunStatistics::soFar(StepMetrics& m, double trainSeconds) const {
    m.runExamplesPerSec = examplesPerSec(m.step, trainSeconds);
    for (size_t i = 0; i < m.towers.size() && i < busy_.size(); ++i)
        m.towers[i].runBusyFraction = busyFraction(i, trainSeconds);
}

void RunStatistics::summarise(RunSummary& sum, int64_t step, Clock::time_point end, double held,
                              double excluded) const {
    sum.trainSeconds = secondsBetween(start_, end) - excluded - held;
    const double steadySeconds = secondsBetween(afterFirst_, end) - excluded - (held - heldBeforeSecond_);
    sum.steps = step;
    sum.examplesPerSec = examplesPerSec(step, sum.trainSeconds);
    if (firstRecorded_ >= 0 && step > firstRecorded_ && steadySeconds > 0)
        sum.steadyExamplesPerSec = double(step - firstRecorded_) * double(examplesPerStep_) / steadySeconds;
    for (size_t i = 0; i < busy_.size(); ++i) sum.towerBusy.push_back(busyFraction(i, sum.trainSeconds));
    sum.reduceApplyFraction = stepTime_ > 0 ? reduceApply_ / stepTime_ : 0;
    if (stalenessCount_ > 0) sum.meanStaleness = staleness_ / double(stalenessCount_);
    if (bubbleTime_ > 0) sum.bubbleFraction = bubble_ / bubbleTime_;
    for (auto& [l, a] : recent_) {
        sum.finalLoss += l / double(recent_.size());
        sum.finalAccuracy += a / double(recent_.size());
    }
}

}  // namespace tb
