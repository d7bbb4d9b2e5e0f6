// Strategy: how the towers' gradients become an update of the variables — one class per way,
// each owning its buffers and saying in its header lines what moves where per step, and each
// moving data between towers and holder only through its Communicator:
//   HolderMean             variables on a holder; gradients meet there (the seeds' default)
//   AllReduce              replicated variables; gradients all-reduced, every replica updates
//   LocalAveraging         replicated variables; local steps, parameters averaged every K
//   AsyncParameterServer   variables on a holder, split in shards; towers pull and push alone
// TowerSet runs the towers and calls these hooks on each tower's thread; a hook that fails
// throws, but the collective calls of the step are made by every tower regardless (see
// TowerSet), so that no tower is left waiting.
#pragma once
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "nn/network.hpp"
#include "optim/optimizer.hpp"
#include "parallel/deployment_plan.hpp"

namespace tb {

struct OptimizerSettings {
    UpdateRule rule = UpdateRule::Momentum;
    UpdateParams hyper;
    LrSchedule schedule;
    bool allowTf32 = false;  // GPU towers: tensor-core TF32 math (default plain FP32)
    MatmulPrecision precision = MatmulPrecision::Fp32;  // the towers' convolutions and inner products
};

// Seconds one tower spent in each phase of a step.
struct TowerPhases {
    double dataWait = 0;   // waiting for the input pipeline
    double forward = 0, backward = 0;
    double reduce = 0;     // moving and reducing gradients or parameters (the communicator's work)
    double wait = 0;       // idle at the synchronisation point, waiting for the slowest tower
    double apply = 0;      // optimiser update (its share of it)
    double straggle = 0;   // injected slowdown (teaching), also counted as busy
};

// One tower's replica as a strategy sees it.
struct Replica {
    Backend* backend = nullptr;
    Stream stream = nullptr;
    Network* net = nullptr;
    Device device;
};

// The authoritative copy of the variables: the holder's, or the replicas' (their mean).
struct VariablesView {
    Backend* backend = nullptr;
    Stream stream = nullptr;
    float* params = nullptr;  // (paramCount) in that backend's memory
};

// Floats per tower in the reports processes exchange for the chief's step lines (the trainer
// packs them: loss, accuracy, the phase times, the busy fraction).
constexpr size_t kTowerReportFloats = 10;

// Parameter-server processes: what the servers answered to this process's last push.
struct ServerReply {
    int64_t update = 0;     // updates applied so far (the first server's count)
    int64_t staleness = 0;  // async: the most updates others applied on any server since the last answer
    float lr = 0;
    bool applied = true;    // false: the push came after the last update and was not applied
    bool last = false;      // the servers take no more updates: this process ends its training
    // Async: every worker's towers' latest reports (workers x towers x kTowerReportFloats), as the
    // first server relays them; NaN where a worker has not reported yet. Empty otherwise.
    std::vector<float> towerReports;
};

// A buffer of training state as checkpoints save and restore it (between steps).
struct StateBuffer {
    std::string name;           // "optimizer/m", "replica1/optimizer/v", "replica1/variables"
    Backend* backend = nullptr;
    Stream stream = nullptr;
    float* data = nullptr;      // (count) in that backend's memory
    size_t count = 0;
};

class Strategy {
public:
    virtual ~Strategy() = default;
    virtual std::string name() const = 0;
    Communicator& comm() { return *comm_; }
    int64_t paramCount() const { return count_; }

    // Sync, on tower `rank`'s thread: before it computes, make its replica's parameters current.
    virtual void beforeCompute(int /*rank*/, TowerPhases&) {}
    // Sync: its gradients are ready (its stream synchronised): reduce them and update.
    virtual void afterCompute(int rank, int64_t step, TowerPhases&) = 0;
    // Averaging: after the local steps of one call, `next` being the first step of the next;
    // true where it averaged the replicas.
    virtual bool endRound(int /*rank*/, int64_t /*next*/, TowerPhases&) { return false; }
    // Async: pull the variables into the replica, shard by shard; push its gradients and have
    // the holder apply them. Both complete on return.
    virtual void pull(int /*rank*/) {}
    virtual float push(int /*rank*/, int64_t /*update*/) { return 0; }

    // The variables (replicas: their mean, computed now into a copy).
    virtual VariablesView variables() = 0;
    // Tower 0's network, looking at the current variables (until the next step).
    virtual Network& evalNetwork() = 0;
    // Makes every replica equal to the replicas' mean (LocalAveraging; others have one copy).
    virtual void averageNow() {}
    virtual size_t optimizerSlotBytes() const = 0;
    // Checkpoints, between steps. state(): every buffer besides the variables that the run's
    // continuation depends on: the optimisers' slots, and with LocalAveraging each replica's own
    // parameters (they drift apart between averages). setVariables: every copy of the variables
    // (the holder's, each replica's) := host (P floats); a resume then restores state().
    virtual std::vector<StateBuffer> state() = 0;
    virtual void setVariables(const float* host) = 0;
    // Runs f while no update is half applied and none begins: asynchronous towers keep running
    // and wait at their next push (the others are between steps whenever f can be called).
    virtual void withUpdatesHeld(const std::function<void()>& f) { f(); }
    // Called by TowerSet before each step: tower 0 looks at its own parameters again.
    virtual void endEvaluation() {}
    // Parameter-server processes: the run's length in updates (the servers count to it), a stop
    // asked for (sent with the next push), the servers' answer to the last push, and the end of
    // training (the chief receives the final variables and returns the servers' count of updates).
    virtual void setRunLength(int64_t /*updates*/) {}
    virtual void askToStop() {}
    virtual std::optional<ServerReply> lastReply() const { return std::nullopt; }
    // Async parameter-server processes: this process's towers' latest report (towers x
    // kTowerReportFloats), sent with the next push; ServerReply::towerReports brings back every
    // worker's, so the chief's step lines show every worker's towers (one push late).
    virtual void setTowerReport(const std::vector<float>& /*report*/) {}
    virtual std::optional<int64_t> endTraining() { return std::nullopt; }

protected:
    Strategy(std::vector<Replica> replicas, int64_t count) : replicas_(std::move(replicas)), count_(count) {}
    size_t bytes() const { return size_t(count_) * sizeof(float); }

    std::vector<Replica> replicas_;
    int64_t count_;
    std::unique_ptr<Communicator> comm_;
};

// What a strategy is made from. `holder.backend` is null for replicated plans; `init` is the
// variables' initial values (host, flat); `comm` says whether towers and holder share memory.
struct StrategySetup {
    DeploymentPlan plan;
    OptimizerSettings opt;
    std::vector<Replica> replicas;
    HolderEndpoint holder;
    std::vector<float> init;
    CommKind comm = CommKind::SharedMemory;
    ProcessGroup* processes = nullptr;  // the run's other processes (mpirun), or null
};

std::unique_ptr<Strategy> makeStrategy(const StrategySetup& setup);

}  // namespace tb
