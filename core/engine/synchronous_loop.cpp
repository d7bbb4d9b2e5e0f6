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

// An engine with a report lag (TrainingEngine::reportLag) runs steps ahead of their reports:
// `launched` counts the steps it was given, step_ those reported. The loop settles what is in
// flight before anything that reads the variables or waits as of step_: an evaluation, a
// checkpoint, the end, and a pause, a stop or slow motion (the window shows the step it paused
// at, and a single step is reported before the next waits).
void TrainingRun::trainInSteps() {
    CallInput input(*train_, run_.plan, total_, run_.roles.group != nullptr, control_);
    const CancelCheck stopped = [this] { return control_.stopped(); };  // periodic passes give way to a stop
    const bool lags = towers_->reportLag() > 0;
    int64_t launched = step_;
    double unreported = 0;  // wall time of calls that reported no step yet (a lag's first calls)
    while (step_ < total_) {
        if (!lags) launched = step_;  // (async workers of servers count the servers' updates)
        const bool inFlight = launched > step_;
        if (!inFlight && !counting_->goOn()) break;
        const bool holding = inFlight && control_.holds();
        const auto t0 = Clock::now();
        std::vector<TowerStep> reports;
        const int64_t before = launched;
        if (!holding && launched < total_) {
            const std::vector<const Batch*>& batches = input.next(launched);
            const double dataWait = secondsSince(t0);
            reports = towers_->steps(batches, launched, dataWait, input.ahead());
            launched += int64_t(batches.size());
        }
        if (lags && launched > step_ + int64_t(reports.size()) &&
            (holding || launched >= total_ || checkpoints_->due(launched) ||
             (c_.evalEvery > 0 && launched / c_.evalEvery > before / c_.evalEvery))) {
            std::vector<TowerStep> rest = towers_->settle();
            reports.insert(reports.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
        }
        if (reports.empty()) {
            unreported += secondsSince(t0);
            continue;
        }
        // Local steps share the wall time; a lag's reports take the calls' (in steady state one
        // step's apart, at the device's pace).
        const double each = (secondsSince(t0) + unreported) / double(reports.size());
        unreported = 0;
        const bool firstCall = !stats_->started();
        bool evalDue = false;
        for (const TowerStep& r : reports) {
            if (ema_) {  // averaging: the mean of the replicas as they are after this call's steps
                const VariablesView v = towers_->trainedVariables().view;
                ema_->update(v.stream, v.params, step_);
                v.backend->synchronize(v.stream);
            }
            StepMetrics m = toMetrics(r, each);
            const int64_t was = step_;
            if (!counting_->count(r, m, &r == &reports.back(), step_)) break;
            report(m);
            // From each multiple of --eval-every on (async workers of servers count every worker's updates).
            evalDue |= c_.evalEvery > 0 && step_ / c_.evalEvery > was / c_.evalEvery && step_ < total_;
        }
        // The steady clock starts after the first call (averaging: its K local steps ran before their
        // reports), from its last step.
        if (firstCall && stats_->started()) stats_->steadyFrom(step_, Clock::now(), control_.heldSeconds());
        // Between calls the replicas are idle (averaging: at a round's end, a multiple of K unless a
        // pause cut the round), so the state is whole. A model in parts (stages in processes of
        // their own) is brought whole to the chief first, by every process at once: so each
        // must know whether the chief will save (its clock, not theirs, says when).
        // (False without a folder: but the chief's. With steps still in flight, not yet: the next
        // call settles them first.)
        const bool saveDue = (!lags || step_ == launched) && checkpoints_->due(step_);
        // Likewise every process's own state where it differs by process (averaging's slots).
        if ((towers_->modelInParts() || towers_->stateDiffersByProcess()) && (run_.roles.group->any(saveDue) || evalDue)) {
            towers_->gatherModel(ema_ ? ema_->toWrite() : nullptr);
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
