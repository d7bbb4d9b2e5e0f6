// TowerSet: N replicas of a model (towers), each on its own thread and stream, and the
// variables they share — the engine of cifar10_multi_gpu_train.py's tower loop:
//   every tower computes gradients on its own slice of the global batch; the gradients meet at
//   one synchronisation point (mean on the variables' holder, or all-reduce among replicas);
//   the update is applied; the next step starts.
// Also asynchronous parameter-server updates (towers pull, compute and push on their own; the
// staleness of each update is recorded) and local steps with parameter averaging every K steps.
//
// Devices: one backend per device; towers on one device (e.g. two towers on gpu:0) share it and
// each has its own stream. The variables' holder is the host (--variables cpu) or a tower's
// device. A tower in the holder's memory (CPU towers with host variables, GPU towers on the
// holder's GPU) reads the variables and has its gradients read in place; any other tower pulls
// the variables into its own copy and pushes its gradients into a staging buffer beside the
// holder (pinned host memory for a host holder) every step.
#pragma once
#include <atomic>
#include <barrier>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "data/pipeline.hpp"
#include "parallel/run_control.hpp"
#include "nn/model_spec.hpp"
#include "nn/network.hpp"
#include "optim/optimizer.hpp"
#include "parallel/deployment_plan.hpp"

namespace tb {

struct OptimizerSettings {
    UpdateRule rule = UpdateRule::Momentum;
    UpdateParams hyper;
    LrSchedule schedule;
    bool allowTf32 = false;  // GPU towers: tensor-core TF32 math (default plain FP32)
};

// Seconds one tower spent in each phase of a step.
struct TowerPhases {
    double dataWait = 0;   // waiting for the input pipeline
    double forward = 0, backward = 0;
    double reduce = 0;     // gradients to the synchronisation point (mean / all-reduce / averaging)
    double wait = 0;       // idle at the synchronisation point, waiting for the slowest tower
    double apply = 0;      // optimiser update (its share of it)
    double straggle = 0;   // injected slowdown (teaching), also counted as busy
};

// What one global step (sync) or one pushed update (async) did.
struct TowerStep {
    int64_t update = 0;                 // 1-based: applied updates so far
    float lr = 0;
    std::vector<double> lossSum, correct;  // per tower, over its examples (NaN: not part of it)
    std::vector<int> examples;          // per tower
    double weightDecayLoss = 0;
    std::vector<TowerPhases> phases;    // per tower
    int64_t bytesMoved = 0;             // gradients, parameters and averages moved between places
    int pusher = -1;                    // async: the tower whose update this is
    int64_t staleness = -1;             // async: updates applied by others since it pulled
};

// Memory one device's backend handed out during the run.
struct DeviceMemoryUse {
    Device device;
    AllocatorStats stats;
};

// The authoritative copy of the variables: the holder's, or replica 0's when replicated.
struct VariablesView {
    Backend* backend = nullptr;
    Stream stream = nullptr;
    float* params = nullptr;  // (paramCount) in that backend's memory
};

class TowerSet {
public:
    TowerSet(const ModelSpec& spec, const DeploymentPlan& plan, const OptimizerSettings& opt, int threadsPerTower,
             uint64_t seed);
    ~TowerSet();
    TowerSet(const TowerSet&) = delete;
    TowerSet& operator=(const TowerSet&) = delete;

    int towers() const { return int(towers_.size()); }
    int batchPerTower() const { return plan_.batchPerTower; }
    int64_t paramCount() const { return paramCount_; }
    const DeploymentPlan& plan() const { return plan_; }
    std::string backendName() const;

    // Sync and averaging: one step on `global` (towers x batchPerTower examples; tower i takes
    // the i-th contiguous slice). dataWait is how long the caller waited for the batch.
    TowerStep step(const Batch& global, int64_t step, double dataWait);
    // Averaging: consecutive steps first, first + 1, ... on these global batches, which the
    // replicas take as local steps without meeting; they average where a step completes a
    // multiple of K. Any split of the steps into calls gives the same result.
    std::vector<TowerStep> steps(const std::vector<const Batch*>& batches, int64_t first, double dataWait);
    // Async: towers run free until `updates` updates are applied or `control` stops them.
    // nextBatch is called under a lock; onUpdate is called on tower threads, serialised.
    void runAsync(int64_t updates, const std::function<void(Batch&)>& nextBatch, RunControl& control,
                  const std::function<void(const TowerStep&)>& onUpdate);
    // Averaging: makes every replica equal to the mean (also done every K steps).
    void averageNow();

    // The network that evaluation and checkpoints see: tower 0 with the current variables
    // (averaging: looking at the replicas' mean, in a copy, until the next step; training is
    // not touched by evaluating).
    Network& evalNetwork();
    Stream evalStream();
    // The variables (averaging: the replicas' mean, computed now).
    VariablesView variables();
    // Per device with an allocator that keeps books (GPUs): what it handed out, peak included.
    std::vector<DeviceMemoryUse> deviceMemory() const;
    // Bytes of optimiser slots of the whole run (holder and replicas).
    size_t optimizerSlotBytes() const;

private:
    struct Tower;
    void towerLoop(int i);
    template <class F>
    void guarded(Tower& t, F&& f);
    bool anyFailed() const;
    void computeSlice(Tower& t, int i, size_t k);
    void keep(Tower& t, size_t k);
    void localSteps(int i);
    float* evalParams();              // (P) on tower 0's device, made on first use
    void meanOfReplicas(float* out);  // out = mean of the replicas' own parameters
    // Pull (if the tower keeps its own copy), input, forward, backward, push; timed with events.
    // `step` is the global step (sync) or the update the tower pulled (async).
    void computeGradients(Tower& t, int i, const float* x, const int32_t* y, int n, uint64_t step, bool pull);
    void enqueueCompute(Tower& t, int n, uint64_t seed, bool pull);
    void syncStep(int i);
    void chunk(int i, size_t& begin, size_t& end) const;  // tower i's share of the flat buffers
    void straggle(Tower& t, int i);
    bool holderBased() const { return plan_.variables != VariablePlacement::Replicated; }
    const float* gradientsAtHolder(const Tower& t) const;  // the tower's gradients as the holder reads them
    Backend& backendFor(const Device& d, int threadsPerTower);

    DeploymentPlan plan_;
    OptimizerSettings optSettings_;
    int threadsPerTower_ = 1;  // compute threads of each tower's CPU work (its OpenMP team)
    uint64_t seed_ = 0;        // the run's seed: initialisation and dropout masks
    int64_t paramCount_ = 0;
    // Declared first, destroyed last: every tensor, stream and plan below belongs to one of them.
    std::vector<std::unique_ptr<Backend>> backends_;
    std::vector<std::unique_ptr<Tower>> towers_;
    Backend* holder_ = nullptr;  // the variables' backend (holder-based plans)
    Tensor holderParams_;   // (P) the variables, on the holder
    Tensor meanGrads_;      // (P) the averaged gradients
    std::unique_ptr<Optimizer> holderOpt_;  // the holder's optimiser (mean and async)
    std::vector<std::unique_ptr<std::mutex>> shardLocks_;  // async: one per parameter-server shard
    std::vector<std::vector<std::pair<size_t, size_t>>> shards_;  // element ranges of each shard

    // Sync machinery: the caller and N tower threads meet at start_ and done_; towers also meet
    // at computed_ (the synchronisation point) and reduced_ (all-reduce / averaging).
    std::barrier<> start_, done_, computed_, reduced_;
    std::vector<const Batch*> round_;  // this call's global batches (one, or local steps)
    Tensor evalParams_;     // (P) averaging: the replicas' mean that evaluation looks at
    bool evalView_ = false; // tower 0 looks at evalParams_ until the next step
    int64_t step_ = 0;
    double callerWait_ = 0;
    bool quit_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace tb
