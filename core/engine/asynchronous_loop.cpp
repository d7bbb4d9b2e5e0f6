// The free loop: towers that run free (the asynchronous parameter server) each pull, compute and
// push alone, and every push is one update of the run, reported on the pushing tower's thread.
#include <cmath>
#include <deque>
#include <utility>

#include "engine/training_run.hpp"
#include "util/elapsed.hpp"

namespace tb {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

// Each report is one tower's update. Its step time is that tower's own cycle (since its previous
// push), against which its busy fraction is measured; the loss and accuracy shown are the means of
// every tower's latest push; examples/sec counts the examples pushed over the last second of wall
// time (per push it would spike to millions).
void TrainingRun::trainFree() {
    const size_t n = size_t(towers_->towers());
    std::vector<Clock::time_point> lastPush(n, stats_->start());
    std::vector<double> latestLoss(n, std::nan("")), latestAccuracy(n, std::nan(""));
    std::deque<std::pair<Clock::time_point, int>> window;  // (when, examples) of recent pushes
    control_.setParticipants(int(n));  // the run is held when every tower waits
    int64_t nextEval = c_.evalEvery;   // the first update from which tower 0 evaluates
    const CancelCheck stopped = [this] { return control_.stopped(); };
    towers_->runAsync(
        step_, total_, [&](Batch& b) { train_->next(b); }, control_,
        [&](const TowerStep& r) {
            const auto now = Clock::now();
            const size_t i = size_t(r.pusher);
            StepMetrics m = toMetrics(r, secondsBetween(lastPush[i], now));
            lastPush[i] = now;
            latestLoss[i] = m.towers[i].loss;
            latestAccuracy[i] = m.towers[i].accuracy;
            double loss = 0, accuracy = 0, pushed = 0;
            for (size_t j = 0; j < latestLoss.size(); ++j)
                if (std::isfinite(latestLoss[j])) {
                    loss += latestLoss[j];
                    accuracy += latestAccuracy[j];
                    ++pushed;
                }
            m.loss = loss / pushed;
            m.accuracy = accuracy / pushed;
            window.emplace_back(now, r.examples[i]);
            while (window.size() > 2 && secondsBetween(window.front().first, now) > 1.0) window.pop_front();
            double examples = 0;
            for (size_t k = 1; k < window.size(); ++k) examples += window[k].second;
            m.examplesPerSec = window.size() > 1 ? examples / secondsBetween(window.front().first, now) : m.examplesPerSec;
            step_ = std::max(step_, r.update);  // reports of concurrent pushes may arrive out of order
            report(m);
            // Reports are serialised on the towers' threads: the others run on until their next push.
            // The snapshot holds every update reported so far, and those of towers whose pushes
            // completed but whose reports wait behind this one (at most towers - 1 more than its step).
            if (checkpoints_->due(step_)) checkpoints_->save(step_);
            // --eval-every: at tower 0's first report from each multiple on, between its push and its
            // next pull, so that its replica can take the holder's variables for the pass; the other
            // towers' pushes wait meanwhile, so the pass sees one version of the variables and none
            // of training hides in its time.
            if (c_.evalEvery > 0 && r.pusher == 0 && step_ >= nextEval && step_ < total_) {
                towers_->withUpdatesHeld([&] {
                    if (const std::optional<EvalResult> e = validate(stopped); e && data_.validation.size())
                        checkpoints_->noteValidation(e->accuracy);
                });
                nextEval = (step_ / c_.evalEvery + 1) * c_.evalEvery;
            }
        });
}

}  // namespace tb
