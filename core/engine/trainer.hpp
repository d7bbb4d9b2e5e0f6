// Trainer: one training run from start to finish: data, model replicas on the towers of a
// DeploymentPlan, optimiser, evaluation, and metrics to observers (delivered on a thread of
// their own, so a slow observer never stalls training). Pause, resume, single-step and stop
// are safe from any thread at any moment. The run's parts: training_run.hpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/registry.hpp"
#include "engine/evaluation.hpp"
#include "engine/observer.hpp"
#include "engine/run_setup.hpp"
#include "io/run_config.hpp"
#include "parallel/deployment_plan.hpp"
#include "parallel/run_control.hpp"
#include "parallel/training_engine.hpp"

namespace tb {

class ObserverHub;
class RunFolder;

struct RunSummary {
    int64_t steps = 0;             // sync: global steps; async: applied updates
    double epochs = 0;
    double examplesPerSec = 0;     // training examples / training wall time (evaluation excluded)
    double steadyExamplesPerSec = 0;  // the same without the first step (oneDNN's kernel generation)
    double trainSeconds = 0;
    double finalLoss = 0;          // mean training loss over the last min(50, steps) steps
    double finalAccuracy = 0;      // mean training accuracy over the same steps
    double validationAccuracy = -1;  // -1: no validation split
    double testAccuracy = 0, testLoss = 0;  // null in JSON when the run was aborted before them
    int64_t params = 0;
    int64_t flopsPerExample = 0;   // training FLOPs per example (Network::trainFlopsPerExample)
    std::string model, data, backend;
    std::string precision = "fp32";  // the matrix work's (RunConfig::precision)
    DeploymentPlan plan;           // processes: each process's own (its towers, its share of the batch)
    int processes = 1;             // mpirun: the processes that trained together
    std::vector<double> towerBusy; // per tower: busy time / training time
    double reduceApplyFraction = 0;  // reduce + apply time / step time (slowest tower's view)
    double meanStaleness = -1;     // async only
    // Model parallelism (--stages): the split as --stages takes it back, the schedule, and the
    // stages' idle share of the steps (time-weighted mean; -1: not a pipeline); per stage, the
    // activations it holds at most (its micro-batch slots).
    std::string stages, pipeline;
    int microBatches = 1, stageReplicas = 1;
    bool stagePerProcess = false;  // each stage in an mpirun process of its own
    double bubbleFraction = -1;
    std::vector<size_t> stageActivationBytes;
    // Everything each stage allocated, its replicas together (StagePipeline::stageBytes: its
    // variables, optimiser slots, gradients and activations); towerMemory is then the whole-model
    // evaluation network's, which shares the stages' variables.
    std::vector<size_t> stageBytes;
    // Memory: what each GPU's allocator handed out (peak included), and what one replica and the
    // optimiser slots account for, to compare the peak with.
    std::vector<DeviceMemoryUse> deviceMemory;
    NetworkMemory towerMemory;     // tower 0's replica
    size_t optimizerSlotBytes = 0; // all optimisers of the run
    bool stopped = false;          // ended early by stop()
    bool evaluated = true;         // false: aborted, no final evaluation
    int64_t skippedImages = 0;     // folder:DIR with --skip-bad-images: unreadable images left out
    int64_t droppedReports = 0;    // step reports, device samples, grids the hub dropped for observers that allow it
    int64_t resumedAt = 0;         // the checkpoint's step a resumed run continued from; 0: none
    int checkpoints = 0;           // written by this run (periodic, best and final)
    double checkpointSeconds = 0;  // training held for them (snapshots, a previous write still going);
                                   // not counted in trainSeconds
    double checkpointWriteSeconds = 0;  // writing them, fsync included, on the folder's own thread
    nlohmann::json toJson() const;
};

class Trainer {
public:
    explicit Trainer(RunConfig config);
    ~Trainer();
    void addObserver(TrainingObserver* o) { observers_.push_back(o); }
    // Runs to the end (or until stop); throws tb::Error on bad input or any failure, after the
    // observers have seen RunState::Failed with the same message.
    RunSummary run();
    RunControl& control() { return control_; }
    void requestStop() { control_.stop(); }
    // The run keeps its folder (settings, metrics, log, checkpoints, summary); a reopened folder
    // makes the run continue from its newest checkpoint. The folder must outlive run().
    void setRunFolder(RunFolder* folder);
    // One process of several (mpirun): --batch is the global batch, this process trains its
    // slice of each with its own towers, and the reductions span every process (see
    // ProcessGroup). Only the chief (chiefProcess) evaluates and writes; with --ps-tasks P the
    // first P processes serve the variables (parameter_server_task.hpp). Must outlive run().
    void setProcessGroup(ProcessGroup* processes) { processes_ = processes; }

private:
    RunSummary execute(ObserverHub& hub);

    RunConfig config_;
    RunFolder* folder_ = nullptr;
    ProcessGroup* processes_ = nullptr;
    std::vector<TrainingObserver*> observers_;
    RunControl control_;
};

}  // namespace tb
