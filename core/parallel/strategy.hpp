// Strategy: where the variables live and how the towers' gradients become their update, one class
// per way, each moving data between towers and holder only through its Communicator:
//   HolderMean                variables on a holder; gradients meet there (the seeds' default)
//   AllReduce                 replicated variables; gradients all-reduced, every replica updates
//   LocalAveraging            replicated variables; local steps, parameters averaged every K
//   AsyncParameterServer      variables on a holder, in shards; towers pull and push alone
//   ParameterServerProcesses  a worker of parameter-server processes (parameter_server_task.hpp)
// TowerSet owns the towers and their compute (TowerCall); a strategy says what each tower does in
// a call (runCall), how evaluation and checkpoints see the variables, and how training ends.
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
    bool deterministic = true;  // GPU towers: deterministic cuDNN algorithms only
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
    // The rest of the step's wall time, outside the phases above: threads woken and joined, the
    // step's bookkeeping (the engine fills it in from the step's time; not busy).
    double other = 0;
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

// The variables one process trains (TrainingEngine::trainedVariables): view.params is the
// slice's first float.
struct TrainedVariables {
    VariablesView view;
    ParamSlice slice;
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
    // Differs between the run's processes (TrainingEngine::stateDiffersByProcess): the chief's
    // checkpoint keeps every process's (state/process<r>/NAME) and each restores its own; the
    // others are equal in every process, and the chief's alone are kept.
    bool perProcess = false;
};

// One tower's part of a call of TowerSet, as its strategy drives it (Strategy::runCall), on the
// tower's thread: its compute on each of the call's global batches, and each step's phases.
class TowerCall {
public:
    // Steps in this call: one, or averaging's local steps up to an average (free-running towers: one).
    virtual size_t steps() const = 0;
    // The global step of the call's k-th step: the dropout masks' step (free-running towers: the
    // update they pulled, which the strategy sets before computing).
    virtual int64_t step(size_t k) const = 0;
    virtual void setStep(size_t k, int64_t step) = 0;
    virtual TowerPhases& phases(size_t k) = 0;
    // Forward and backward on this tower's slice of the k-th batch: the gradients in its network.
    // Skipped once the call has failed.
    virtual void compute(size_t k) = 0;
    // f, unless this tower's call has failed already; a failure is kept and ends its compute.
    virtual void unlessFailed(const std::function<void()>& f) = 0;
    // f whatever happened before: a meeting of the towers (a collective), which every tower makes so
    // that none waits for one that left (a failed tower's buffers are garbage then, and the call
    // fails); a failure is kept.
    virtual void meet(const std::function<void()>& f) = 0;
    // Averaging: the replicas were averaged after this call's last step.
    virtual void markAveraged() = 0;
    // Free-running towers: the updates every tower has applied so far (the version a pull gets,
    // and the number of the next update), and this call's push counted once applied, at rate lr.
    virtual int64_t applied() const = 0;
    virtual void countApplied(float lr) = 0;

protected:
    ~TowerCall() = default;
};

// Workers of parameter-server processes: what they say to their servers and hear back.
class ServerConnection {
public:
    virtual bool async() const = 0;
    // The run's length in updates (the servers count to it), and a stop sent with the next push.
    virtual void setRunLength(int64_t updates) = 0;
    virtual void askToStop() = 0;
    // Async: this process's towers' latest report (towers x kTowerReportFloats), sent with the next
    // push; ServerReply::towerReports brings back every worker's.
    virtual void setTowerReport(const std::vector<float>& report) = 0;
    // The servers' answer to the last push.
    virtual std::optional<ServerReply> lastReply() const = 0;

protected:
    ~ServerConnection() = default;
};

class Strategy {
public:
    virtual ~Strategy() = default;
    virtual std::string name() const = 0;
    Communicator& comm() { return *comm_; }
    int64_t paramCount() const { return count_; }

    // The step: tower `rank`'s part of one call of TowerSet::steps (sync: compute, then meet;
    // averaging: local steps, then the round's average), or of runAsync where the strategy's towers
    // run free (one pull, compute and push).
    virtual void runCall(int rank, TowerCall& call) = 0;
    virtual bool runsFree() const { return false; }
    // Where the update needs no host work between the tower's compute and the next step (one
    // replica, in this process alone, its variables updated in place on its own stream): the
    // optimiser that updates that replica's network (its params() from its grads()); else null.
    // takeOverUpdates: from then on TowerSet enqueues each step's update itself, right after the
    // compute and inside the step's recording, and runCall leaves it out (TowerSet's report lag,
    // which times the update with events instead of the host's clock).
    virtual Optimizer* streamOrderedOptimizer() { return nullptr; }
    void takeOverUpdates() { updatesTakenOver_ = true; }

    // The variables as evaluation sees them (replicas: their mean, computed now into a copy), and
    // tower 0's network looking at them until the next step, or until endEvaluation.
    virtual VariablesView variables() = 0;
    virtual Network& evalNetwork() = 0;
    virtual void endEvaluation() {}

    // Checkpoints, between steps. state(): every buffer besides the variables that the run's
    // continuation depends on (the optimisers' slots; averaging: each replica's own parameters).
    // setVariables: every copy of the variables := host (P floats); a resume then restores state().
    // withUpdatesHeld: f while no update is half applied and none begins (free-running towers
    // wait at their next push).
    virtual std::vector<StateBuffer> state() = 0;
    // Before state() is read for a checkpoint, on the chief, between steps: state that lives in
    // other processes brought here (parameter-server processes: the servers'). Elsewhere nothing.
    virtual void fetchState() {}
    virtual void setVariables(const float* host) = 0;
    virtual void withUpdatesHeld(const std::function<void()>& f) { f(); }
    virtual size_t optimizerSlotBytes() const = 0;

    // The end of training, on every process, after `step` steps: the run's step count then
    // (parameter-server processes: the chief receives the final variables and the servers' count).
    virtual int64_t finishTraining(int64_t step) { return step; }
    // This process's parameter servers, where it is a worker of parameter-server processes.
    virtual ServerConnection* servers() { return nullptr; }

protected:
    Strategy(std::vector<Replica> replicas, int64_t count) : replicas_(std::move(replicas)), count_(count) {}
    size_t bytes() const { return size_t(count_) * sizeof(float); }

    std::vector<Replica> replicas_;
    int64_t count_;
    std::unique_ptr<Communicator> comm_;
    bool updatesTakenOver_ = false;  // TowerSet applies the updates (takeOverUpdates)
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
