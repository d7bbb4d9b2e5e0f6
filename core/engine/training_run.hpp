// TrainingRun: one run of the Trainer from its first step to its summary, in named parts:
//   set-up             training_run.cpp    the data checked, the memory check, the towers, the
//                                          variables initialised or restored, the input
//   the step loop      synchronous_loop.cpp  every tower on each global batch, in lockstep
//   the free loop      asynchronous_loop.cpp free-running towers, each pushing alone
//   the end            training_run.cpp    the final evaluation, checkpoint and summary
// with RunStatistics, CheckpointPolicy, Evaluator and StepCounting as its parts.
#pragma once
#include <chrono>
#include <memory>
#include <vector>

#include "engine/checkpoint_policy.hpp"
#include "engine/decision_grid.hpp"
#include "engine/device_monitor.hpp"
#include "engine/evaluation.hpp"
#include "engine/observer_hub.hpp"
#include "engine/run_setup.hpp"
#include "engine/run_statistics.hpp"
#include "engine/step_counting.hpp"
#include "engine/trainer.hpp"

namespace tb {

class TrainingRun {
public:
    // `cores`: this process's compute threads, shared by its towers; `data`: loaded, not yet split.
    TrainingRun(RunPlan& run, DataSplits data, int cores, int machineCores, ObserverHub& hub,
                RunControl& control, RunFolder* folder, const std::vector<TrainingObserver*>& observers);
    ~TrainingRun();
    TrainingRun(const TrainingRun&) = delete;
    TrainingRun& operator=(const TrainingRun&) = delete;

    // Trains to the end, or until a stop; throws tb::Error on any failure.
    void train();
    // After train(): the final evaluation (unless aborted), the last checkpoint, the summary.
    RunSummary finish();

private:
    void startMovingAverage(bool chief);  // --ema-decay: ema_ over what this process keeps
    void trainInSteps();  // synchronous_loop.cpp
    void trainFree();     // asynchronous_loop.cpp
    // Step m of the run: its place in the run, to the statistics and the observers.
    void report(StepMetrics& m);
    // A pass over the validation split (the test split where there is none) at step_.
    std::optional<EvalResult> validate(const CancelCheck& cancelled);
    // The training split's input: held in memory, or streamed (data/record_stream.hpp).
    std::unique_ptr<BatchSource> trainingInput(const PipelineOptions& options) const;
    // "; streamed from N shards, ..." for the run's first message where the training split streams.
    std::string streamNote(const PipelineOptions& input) const;
    // --normalise mean-std: the training split's channel statistics (streamed: one pass on `threads`).
    ChannelStatistics trainingStatistics(const InputNormalisation& pixels, int threads) const;

    const RunPlan& run_;
    const RunConfig& c_;
    DataSplits data_;
    uint64_t trainingSize_ = 0;   // the training split's samples (after the validation split)
    ChannelStatistics channels_;  // --normalise mean-std: the training split's
    ObserverHub& hub_;
    RunControl& control_;
    RunFolder* folder_;
    std::unique_ptr<TrainingEngine> towers_;
    const Network* net_ = nullptr;  // tower 0's, as evaluation sees it: the variables' layout
    WeightEma* ema_ = nullptr;  // in emaOwner_ where the run keeps a moving average of the weights
    std::unique_ptr<WeightEma> emaOwner_;
    Stream emaStream_ = nullptr;
    std::unique_ptr<Evaluator> evaluator_;
    RunSummary sum_;
    // Examples per step of this process's towers (free-running: per push), and of one of the run's
    // steps, which epochs count: every worker's together (async workers of parameter servers, whose
    // steps are the servers' updates: one worker's).
    int perStep_ = 0;
    int64_t globalPerStep_ = 0;
    int64_t total_ = 0;       // the run's steps
    int64_t step_ = 0;        // steps trained so far (a resumed run's count from its checkpoint)
    std::unique_ptr<BatchSource> train_;
    std::unique_ptr<TelemetrySource> telemetry_;  // NVML, started before the training clock
    std::unique_ptr<DecisionGridProbe> grids_;
    std::unique_ptr<RunStatistics> stats_;
    std::unique_ptr<CheckpointPolicy> checkpoints_;
    std::unique_ptr<StepCounting> counting_;
    std::unique_ptr<DeviceMonitor> monitor_;  // samples on the run's clock; stops first
};

}  // namespace tb
