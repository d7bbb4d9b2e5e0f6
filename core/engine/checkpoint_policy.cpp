#include "engine/checkpoint_policy.hpp"

#include <algorithm>

#include "comm/process_group.hpp"
#include "engine/run_folder.hpp"
#include "util/error.hpp"
#include "util/elapsed.hpp"

namespace tb {

CheckpointPolicy::CheckpointPolicy(RunFolder* folder, const RunPlan& run, int64_t examplesPerStep, TrainingEngine& towers,
                                   const Network& layout, WeightEma* ema, Stream emaStream, ObserverHub& hub,
                                   int64_t step, Clock::time_point start, double bestValidation,
                                   std::vector<std::string> classNames, ChannelStatistics channels)
    : folder_(folder), run_(run), examplesPerStep_(examplesPerStep), towers_(towers), layout_(VariableLayout::of(layout)),
      ema_(ema), emaStream_(emaStream),
      hub_(hub), lastStep_(step), lastAt_(start), bestValidation_(bestValidation), lastValidation_(bestValidation),
      classNames_(std::move(classNames)), channels_(std::move(channels)) {}

bool CheckpointPolicy::due(int64_t step) const {
    const RunConfig& c = run_.config;
    if (!folder_ || step == lastStep_) return false;
    return (c.checkpointEvery > 0 && step - lastStep_ >= c.checkpointEvery) ||
           (c.checkpointMinutes > 0 &&
            secondsSince(lastAt_) >= 60 * c.checkpointMinutes);
}

void CheckpointPolicy::save(int64_t step, bool best) {
    const auto t0 = Clock::now();
    CheckpointMeta meta;
    meta.step = step;
    meta.samples = uint64_t(step) * uint64_t(examplesPerStep_);
    meta.model = run_.spec.name;
    meta.modelSpec = run_.spec.json;
    meta.config = run_.config.toJson();
    meta.plan = run_.plan.toJson();
    meta.validationAccuracy = lastValidation_;
    meta.bestValidationAccuracy = std::max(bestValidation_, best ? lastValidation_ : -1.0);
    meta.classNames = classNames_;
    meta.channels = channels_;
    // Every step line up to here reaches the folder's files first (a resume keeps the lines up to
    // its checkpoint and writes none of them again).
    hub_.flush();
    folder_->waitForCheckpoint();  // one snapshot in memory at a time
    TrainingSnapshot snap;         // free-running towers wait at their next push meanwhile
    const size_t count = size_t(towers_.paramCount());
    towers_.fetchState();
    towers_.withUpdatesHeld([&] { snap = takeSnapshot(towers_, count, ema_, emaStream_); });
    if (towers_.stateDiffersByProcess() && peers_.empty())
        throw Error("internal error: a checkpoint of a run whose processes differ in state, saved before gathering theirs");
    for (TrainingSnapshot::Buffer& b : peers_) snap.state.push_back(std::move(b));
    peers_.clear();
    meta.processes = run_.roles.count;
    folder_->checkpoint(meta, std::move(snap), layout_, best);
    lastStep_ = step;
    lastAt_ = Clock::now();
    ++count_;
    seconds_ += std::chrono::duration<double>(lastAt_ - t0).count();
}

void CheckpointPolicy::gatherPeers() {
    ProcessGroup* group = run_.roles.group;
    if (!group || !towers_.stateDiffersByProcess()) return;
    constexpr int kStateTag = 1100;  // (the parameter servers' tags are 101.., the stages' 1000)
    // One message per process: the buffers that differ by process (StateBuffer::perProcess), end
    // to end in state()'s order, which every process shares; the others are the chief's too.
    std::vector<TrainingSnapshot::Buffer> mine = stateOnHost(towers_, true);
    size_t total = 0;
    for (const auto& b : mine) total += b.values.size();
    const int chief = run_.roles.chief;
    if (group->rank() != chief) {
        MappedVector<float> packed;
        packed.reserve(total);
        for (const auto& b : mine) packed.insert(packed.end(), b.values.begin(), b.values.end());
        group->exchange({{chief, kStateTag, packed.data(), packed.size() * sizeof(float)}}, {});
        return;
    }
    std::vector<MappedVector<float>> received(size_t(group->size()));
    std::vector<ProcessGroup::Message> receives;
    for (int p = 0; p < group->size(); ++p) {
        if (p == chief) continue;
        received[size_t(p)].resize(total);
        receives.push_back({p, kStateTag, received[size_t(p)].data(), total * sizeof(float)});
    }
    group->exchange({}, receives);
    peers_.clear();
    for (int p = 0; p < group->size(); ++p) {
        if (p == chief) continue;
        auto at = received[size_t(p)].begin();
        for (const auto& b : mine) {
            const auto end = at + std::ptrdiff_t(b.values.size());
            peers_.push_back({peerStateName(p, b.name), MappedVector<float>(at, end)});
            at = end;
        }
    }
}

bool CheckpointPolicy::validated(double accuracy) {
    lastValidation_ = accuracy;
    const bool best = folder_ && accuracy > bestValidation_;
    bestValidation_ = std::max(bestValidation_, accuracy);
    return best;
}

// Also where a periodic checkpoint fell on the last step, if the final evaluation made it the best.
void CheckpointPolicy::saveFinal(int64_t step, bool evaluated, double validationAccuracy) {
    const bool best = evaluated && validationAccuracy > bestValidation_;
    if (!folder_ || (step <= lastStep_ && !best)) return;
    if (evaluated && validationAccuracy >= 0) lastValidation_ = validationAccuracy;
    save(step, best);
}

}  // namespace tb
