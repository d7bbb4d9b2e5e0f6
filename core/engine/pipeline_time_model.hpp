// The what-if predictor's pipeline term (issue 32, model parallelism): the step of S stages of
// CPU devices running a schedule (naive, gpipe:M, 1f1b:M) over one tower's batch, predicted from
// a one-tower calibration (StepTimeModel's Calibration) and each stage's measured cost.
//
// The model, for a batch b cut into M micro-batches (naive: M = 1), stage s holding layers
// [first_s, last_s] on T threads:
//   t_s       k * (the stage's step measured on this machine on T threads: its layers as one
//             network, forward over M micro-batches of b/M, backward over them adding each
//             gradient but the first to the step's; parallel/layer_costs; gpipe and 1f1b: every
//             stage at once, each step started at a barrier, as they run; naive: one at a time)
//             / M; k = the calibration's compute per step over the whole network's step measured
//             alone the same way at its batch and threads (what the run adds to the network's own
//             work)
//   compute   naive: sum of t_s, one stage at a time; gpipe and 1f1b: sum of t_s + (M - 1) max t_s
//             (fill and drain, then one micro-batch per slowest stage's turn; the same for both
//             schedules, which differ in memory). Stages whose threads outnumber the cores: at
//             least their whole work M sum t_s spread over the cores
//   bubble    1 - (M sum t_s) / (S * compute): the stages' idle share ((S - 1)/(M + S - 1) when
//             equal)
//   hand-offs 2 (M + S - 2) host latencies on the critical path (activations forward, their
//             gradients back; CPU stages share memory, so no bytes cross)
//   apply     the largest stage's update: the calibration's seconds per parameter x its parameters
//             (memory-bound: not scaled by threads)
//   data, other  as the calibration measured them per step
// Other hardware (the towers' what-if, first order and unvalidated): one GPU per stage (s.device),
// each micro-batch's t_s scaled by this core's measured FLOP/s over the device's (the same share
// of its peak; costs measured on one thread), each boundary's activations (and, back, their
// gradients) crossing s.link as latency + bytes / bandwidth without overlap, the update at 20
// bytes per parameter of the device's memory bandwidth.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/step_time_model.hpp"
#include "nn/model_spec.hpp"

namespace tb {

// What a pipeline's stages cost on this machine, measured.
struct PipelineCosts {
    std::vector<std::pair<int, int>> split;  // each stage's layers, inclusive (as --stages S balances them)
    std::vector<double> stageSeconds;        // a stage's step on its threads, per micro-batch
    std::vector<int64_t> stageParams;
    std::vector<int64_t> boundaryFloats;     // per example, what stage s hands to s + 1 (S - 1 of them)
    double calibrationSeconds = 0;  // the whole network's step alone, at the calibration's batch and threads
    std::string describe(const ModelSpec& spec) const;  // "conv1..pool2 | fc1..logits"
};

// Splits `spec` into `stages` as a run's --stages N does (balanceStages over each layer's seconds
// on one thread at the micro-batch's size; timing noise can make a run choose another) and
// measures each stage's step on `threadsPerStage` threads, one stage at a time or (`together`)
// all at once, each step started at a barrier. fp32 throughout; calibrationSeconds is left 0
// (measureNetworkStepSeconds). Throws tb::Error where the batch does not split into the
// micro-batches or there are fewer layers than stages.
PipelineCosts measurePipelineCosts(const ModelSpec& spec, int stages, int batch, int microBatches, int threadsPerStage,
                                   bool together);
// The whole network's step alone at `batch` on `threads` threads (a calibration's, for k).
double measureNetworkStepSeconds(const ModelSpec& spec, int batch, int threads);

// Each stage count, batch, micro-batch count and thread count measured once (measuring takes a
// fraction of a second; a lab's curves ask for the same ones again as assumptions change).
class PipelineCostCache {
public:
    explicit PipelineCostCache(ModelSpec spec) : spec_(std::move(spec)) {}
    // The costs of pipeline scenario `s` against calibration `cal` (its batch and threads).
    const PipelineCosts& costsOf(const Scenario& s, const Calibration& cal);
    bool has(const Scenario& s, const Calibration& cal) const;  // measured already (a pipeline's)

private:
    using Key = std::tuple<int, int, int, int, int, int, bool>;  // stages, batch, M, threads, the calibration's, together
    static Key keyOf(const Scenario& s, const Calibration& cal);
    ModelSpec spec_;
    std::map<Key, PipelineCosts> measured_;
    std::map<std::pair<int, int>, double> networkSeconds_;  // by the calibration's batch and threads
};

// Any strategy's step: pipelines through predictPipeline (their costs from `costs`), the rest
// through predict.
Prediction predictStep(const Calibration& cal, const Assumptions& a, const Scenario& s, PipelineCostCache& costs);

// The step of `s` (s.strategy naive | gpipe:M | 1f1b:M, s.towers stages of s.threadsPerTower
// threads, s.batchPerTower the step's batch), from a one-tower CPU calibration. Throws tb::Error
// naming what the model cannot predict (a GPU sweep's calibration, a calibration of several towers).
Prediction predictPipeline(const Calibration& cal, const Assumptions& a, const Scenario& s, const PipelineCosts& costs);

}  // namespace tb
