// Evaluation: passes over a split with a network's current weights, giving the loss, the accuracy,
// the confusion counts and (image sets) each example's prediction; during a run (Evaluator) or of a
// checkpoint (evaluateCheckpoint).
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "data/pipeline.hpp"
#include "engine/observer_hub.hpp"
#include "io/run_config.hpp"
#include "optim/optimizer.hpp"
#include "parallel/training_engine.hpp"
#include "util/cancel.hpp"

namespace tb {

// The run's evaluations: tower 0's network, with the moving average's weights where the run keeps
// one, over a split; only on the chief (the variables are equal on every process). Each result
// goes to the observers; the time they take is kept apart from training's.
class Evaluator {
public:
    Evaluator(TrainingEngine& towers, const RunConfig& c, bool cifar, int prefetch, WeightEma* ema, bool chief,
              ObserverHub& hub, ChannelStatistics stats = {});
    // Nothing (and nothing reported) where `cancelled` cuts the pass short, or off the chief.
    std::optional<EvalResult> pass(const Dataset& d, const std::string& split, int64_t step, const CancelCheck& cancelled);
    double seconds() const { return seconds_; }

private:
    std::shared_ptr<const std::vector<uint8_t>> imagesOf(const Dataset& d);

    TrainingEngine& towers_;
    const RunConfig& c_;
    bool cifar_;
    ChannelStatistics stats_in_;  // the training split's, for --normalise mean-std
    int prefetch_;
    WeightEma* ema_;
    bool chief_;
    ObserverHub& hub_;
    Tensor stats_;   // (3) on tower 0's device: the pass's loss sum, correct count
    Tensor backup_;  // (P) the live weights while the moving average's are evaluated
    // Image sets: each split's pixels in one shared copy, for the predictions of its evaluations.
    std::map<const Dataset*, std::shared_ptr<const std::vector<uint8_t>>> images_;
    double seconds_ = 0;
};

// towerbench-run eval: a checkpoint's weights (its moving average where it kept one, as the run
// evaluated) on the test set of `config.data`, with the checkpoint's own model, on the CPU.
EvalResult evaluateCheckpoint(const std::string& checkpointPath, const RunConfig& config);

}  // namespace tb
