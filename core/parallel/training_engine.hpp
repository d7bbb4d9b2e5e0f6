// TrainingEngine: what a run trains with, as the trainer's loop, evaluation, checkpoints and
// step counting see it: data-parallel towers (TowerSet: replicas of the whole model, a Strategy
// meeting their gradients) or a pipeline of stages (PipelineSet: the model split over devices,
// micro-batches flowing through them). Both report each step per lane (a tower, or a stage), and
// both show evaluation one network holding the whole model's variables.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "data/pipeline.hpp"
#include "nn/network.hpp"
#include "parallel/pipeline_block.hpp"
#include "parallel/run_control.hpp"
#include "parallel/strategy.hpp"

namespace tb {

// What one global step (sync) or one pushed update (async) did.
struct TowerStep {
    int64_t update = 0;                 // 1-based: applied updates so far
    float lr = 0;
    std::vector<double> lossSum, correct;  // per tower, over its examples (NaN: not part of it)
    std::vector<int> examples;          // per tower
    double weightDecayLoss = 0;
    std::vector<TowerPhases> phases;    // per tower
    int64_t bytesMoved = 0;             // counted by the communicator (communicator.hpp)
    int pusher = -1;                    // async: the tower whose update this is
    int64_t staleness = -1;             // async: updates applied by others since it pulled
    bool averaged = false;              // averaging: the replicas were averaged after this step
    // Parameter-server processes: whether every server applied this push (not where it came after
    // the run's last update; with several async servers, a push at the very end may reach some
    // servers before their last update and others after it), and whether they take no more (this
    // process's training ends).
    bool applied = true;
    bool last = false;
    std::vector<float> towerReports;  // async parameter-server processes: ServerReply::towerReports
    // Pipelines (the lanes are stages): the stages' idle share of the step until its last backward
    // (-1: not a pipeline), and each stage's forward and backward blocks.
    double bubbleFraction = -1;
    int stages = 0;  // the lanes are stages x replicas, replica by replica
    std::vector<std::vector<PipelineBlock>> stageBlocks;
    // Tower 0's step layer by layer, on the steps it profiled (TowerSet::kProfileEvery); else null.
    std::shared_ptr<const LayerTimes> layerTimes;
};

// Memory one device's backend handed out during the run.
struct DeviceMemoryUse {
    Device device;
    AllocatorStats stats;
};

class TrainingEngine {
public:
    virtual ~TrainingEngine() = default;
    // Lanes of the step reports: towers, or a pipeline's stages.
    virtual int towers() const = 0;
    virtual int64_t paramCount() const = 0;
    virtual std::string backendName() const = 0;
    // Sync and averaging: consecutive steps first, first + 1, ... on these global batches
    // (TowerSet::steps says how averaging's local steps go). `next`, where the caller has it, is
    // the global batch of the step after this call (read during this call only).
    virtual std::vector<TowerStep> steps(const std::vector<const Batch*>& batches, int64_t first, double dataWait,
                                         const Batch* next = nullptr) = 0;
    // An engine that reads results late (TowerSet's report lag): steps() returns the reports of
    // steps launched up to reportLag() calls earlier, oldest first, and settle() those of every
    // step launched and not reported yet, once the device has run them. 0: every call reports its
    // own steps, and settle() has nothing to report.
    virtual int reportLag() const { return 0; }
    virtual std::vector<TowerStep> settle() { return {}; }
    // Free-running towers (async): TowerSet::runAsync. An engine whose runsFree() is false is never asked.
    virtual bool runsFree() const { return false; }
    virtual void runAsync(int64_t first, int64_t updates, const std::function<void(Batch&)>& nextBatch,
                          RunControl& control, const std::function<void(const TowerStep&)>& onUpdate);
    virtual int64_t finishTraining(int64_t step) { return step; }
    virtual ServerConnection* servers() { return nullptr; }
    // The network evaluation and checkpoints see (the whole model, looking at the variables), and
    // a stream of its backend.
    virtual Network& evalNetwork() = 0;
    virtual Stream evalStream() = 0;
    // The variables, the whole model's in one buffer (averaging: the replicas' mean, computed now).
    virtual VariablesView variables() = 0;
    // Lane i's own copy of the parameters (async: what it last pulled); an engine whose lanes hold
    // no whole copy gives variables().
    virtual VariablesView replica(int lane) = 0;
    // The variables this process trains, as they are now: the whole model's (variables()), but
    // where the model is in parts (below), whose processes each train their stage's slice.
    virtual TrainedVariables trainedVariables() {
        return {variables(), {0, size_t(paramCount())}};
    }
    // Whether the whole model is in this process only after gatherModel (a model whose stages are
    // in processes of their own), and that gathering: a collective, every process calling it at
    // the same point between steps, after which the chief's evalNetwork, variables and state hold
    // every stage's as they are. `average`: the run's moving average (WeightEma::toWrite: the
    // floats this process keeps, on the chief the whole model's), whose stages' slices are
    // gathered with them; null where the run keeps none. Elsewhere the model is always whole here.
    virtual bool modelInParts() const { return false; }
    virtual void gatherModel(float* /*average*/) {}
    // Whether state() differs between the run's processes (averaging across processes: each
    // process's replicas keep optimiser slots of their own), so that a checkpoint must hold every
    // process's (CheckpointPolicy::gatherPeers) and each restores its own.
    virtual bool stateDiffersByProcess() const { return false; }
    // Batch norm's moving statistics (Network::statisticCount floats; empty without batch norm) as
    // evaluation and checkpoints see them, copied to the host: tower 0's (free-running towers: as
    // tower 0 last published them), a pipeline's stages' (replica 0's). Between steps, or from a
    // free-running tower's report.
    virtual std::vector<float> statistics() = 0;
    // Every replica's statistics := host (a resume, --init-from): towers, stages. Between steps.
    virtual void setStatistics(const std::vector<float>& host) = 0;
    // Checkpoints, between steps (Strategy::state, Strategy::setVariables).
    virtual std::vector<StateBuffer> state() = 0;
    virtual void fetchState() {}  // (Strategy::fetchState)
    virtual void withUpdatesHeld(const std::function<void()>& f) { f(); }
    virtual void setVariables(const float* host) = 0;
    virtual std::vector<DeviceMemoryUse> deviceMemory() const = 0;
    virtual size_t optimizerSlotBytes() const = 0;
    virtual int64_t bytesMoved() const = 0;
};

}  // namespace tb
