// The synchronous loop, as cifar10_multi_gpu_train.py's: take the next global batch, have every
// tower compute its slice's gradients while the strategy meets them and updates the variables,
// report the step, and now and then evaluate and keep a checkpoint.
#include <utility>

#include "engine/training_run.hpp"
#include "util/elapsed.hpp"

namespace tb {

namespace {

using Clock = std::chrono::steady_clock;

// The global batches of one call of TowerSet::steps: one step's, or averaging's local steps up to
// the next average, which the replicas run without meeting (fewer where the run is paused or
// stopped; processes run whole rounds, whose all-reduces pair up). And the first batch of the next
// call, taken before this call so that the towers move it to their devices while they compute (a
// stop leaves it unused: a resume counts steps).
class CallInput {
public:
    CallInput(BatchSource& train, const DeploymentPlan& plan, int64_t total, bool wholeRounds, RunControl& control)
        : train_(train), plan_(plan), total_(total), wholeRounds_(wholeRounds), control_(control),
          round_(plan.averaging() ? size_t(plan.averageEvery) : 1) {}

    const std::vector<const Batch*>& next(int64_t step) {
        batches_.clear();
        do {
            Batch& b = round_[batches_.size()];
            if (haveAhead_) std::swap(b, ahead_);
            else train_.next(b);
            haveAhead_ = false;
            batches_.push_back(&b);
        } while (goesOn(step + int64_t(batches_.size()), batches_.size()));
        haveAhead_ = step + int64_t(batches_.size()) < total_;
        if (haveAhead_) train_.next(ahead_);
        return batches_;
    }
    const Batch* ahead() const { return haveAhead_ ? &ahead_ : nullptr; }

private:
    // Whether the round takes step `next` too, as its k-th local step.
    bool goesOn(int64_t next, size_t k) {
        return plan_.averaging() && k < round_.size() && next % plan_.averageEvery != 0 && next < total_ &&
               (wholeRounds_ || (!control_.paused() && control_.awaitStep()));
    }

    BatchSource& train_;
    const DeploymentPlan& plan_;
    int64_t total_;
    bool wholeRounds_;
    RunControl& control_;
    std::vector<Batch> round_;
    std::vector<const Batch*> batches_;
    Batch ahead_;
    bool haveAhead_ = false;
};

}  // namespace

void TrainingRun::trainInSteps() {
    CallInput input(*train_, run_.plan, total_, run_.roles.group != nullptr, control_);
    const CancelCheck stopped = [this] { return control_.stopped(); };  // periodic passes give way to a stop
    while (step_ < total_ && counting_->goOn()) {
        const auto t0 = Clock::now();
        const std::vector<const Batch*>& batches = input.next(step_);
        const double dataWait = secondsSince(t0);
        const std::vector<TowerStep> reports = towers_->steps(batches, step_, dataWait, input.ahead());
        const double each = secondsSince(t0) / double(reports.size());  // local steps share the wall time
        const bool firstCall = !stats_->started();
        bool evalDue = false;
        for (const TowerStep& r : reports) {
            if (ema_) {  // averaging: the mean of the replicas as they are after this call's steps
                const VariablesView v = towers_->variables();
                ema_->update(v.stream, v.params, step_);
                v.backend->synchronize(v.stream);
            }
            StepMetrics m = toMetrics(r, each);
            const int64_t before = step_;
            if (!counting_->count(r, m, &r == &reports.back(), step_)) break;
            report(m);
            // From each multiple of --eval-every on (async workers of servers count every worker's updates).
            evalDue |= c_.evalEvery > 0 && step_ / c_.evalEvery > before / c_.evalEvery && step_ < total_;
        }
        // The steady clock starts after the first call (averaging: its K local steps ran before their
        // reports), from its last step.
        if (firstCall && stats_->started()) stats_->steadyFrom(step_, Clock::now(), control_.heldSeconds());
        // Between calls the replicas are idle (averaging: at a round's end, a multiple of K unless a
        // pause cut the round), so the state is whole. A model in parts (stages in processes of
        // their own) is brought whole to the chief first, by every process at once: so each
        // must know whether the chief will save (its clock, not theirs, says when).
        const bool saveDue = checkpoints_->due(step_);  // (false without a folder: but the chief's)
        // Likewise every process's own state where it differs by process (averaging's slots).
        if ((towers_->modelInParts() || towers_->stateDiffersByProcess()) && (run_.roles.group->any(saveDue) || evalDue)) {
            towers_->gatherModel();
            checkpoints_->gatherPeers();
        }
        bool best = false;
        if (evalDue)
            if (const std::optional<EvalResult> e = validate(stopped); e && data_.validation.size())
                best = checkpoints_->validated(e->accuracy);
        if (best || saveDue) checkpoints_->save(step_, best);
    }
}

}  // namespace tb
