// TowerSet: N replicas of a model (towers), each on its own thread and stream — the engine of
// cifar10_multi_gpu_train.py's tower loop: every tower computes gradients on its own slice of
// the global batch, and a Strategy (strategy.hpp) turns them into an update of the variables,
// moving data only through its Communicator (comm/communicator.hpp).
//
// Devices: one backend per device; towers on one GPU (gpu:0*2) share it, each with its own
// stream; CPU towers are virtual devices, each with its own threads. The variables' holder is the
// host (--variables cpu: a parameter server of its own) or a tower's device. Towers that share
// memory with each other and the holder (CPU towers; towers on the holder's GPU) meet through a
// shared-memory communicator; any other placement through explicit copies.
#pragma once
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "data/pipeline.hpp"
#include "nn/model_spec.hpp"
#include "nn/network.hpp"
#include "parallel/deployment_plan.hpp"
#include "parallel/run_control.hpp"
#include "parallel/strategy.hpp"
#include "parallel/training_engine.hpp"

namespace tb {

class TowerSet final : public TrainingEngine {
public:
    // Tower 0 times its layers (Network::profileNextStep) on its 5th step and every kProfileEvery
    // after: what the model view shows of a run (TowerStep::layerTimes).
    static constexpr int64_t kProfileFirst = 4, kProfileEvery = 250;
    // --report-lag automatic, where it applies (resolveReportLag): steps in flight beyond the one
    // being reported. Two keep the device fed across one late host turn (a report to the window,
    // a checkpoint's check) without holding more graphs and statistics than that needs.
    static constexpr int kAutoReportLag = 2;
    // `processes`: the run's other processes (mpirun), whose towers the reductions span; or null.
    TowerSet(const ModelSpec& spec, const DeploymentPlan& plan, const OptimizerSettings& opt, int threadsPerTower,
             uint64_t seed, ProcessGroup* processes = nullptr);
    ~TowerSet();
    TowerSet(const TowerSet&) = delete;
    TowerSet& operator=(const TowerSet&) = delete;

    int towers() const override { return int(towers_.size()); }
    int batchPerTower() const { return plan_.batchPerTower; }
    int64_t paramCount() const override { return paramCount_; }
    const DeploymentPlan& plan() const { return plan_; }
    std::string backendName() const override;
    std::string strategyName() const;  // "holder mean, shared memory"

    // Sync and averaging: one step on `global` (towers x batchPerTower examples; tower i takes
    // the i-th contiguous slice). dataWait is how long the caller waited for the batch.
    TowerStep step(const Batch& global, int64_t step, double dataWait);
    // Averaging: consecutive steps first, first + 1, ... on these global batches, which the
    // replicas take as local steps without meeting; they average where a step completes a
    // multiple of K. Any split of the steps into calls gives the same result.
    // `next`, where the caller has it already, is the global batch of the step after this call:
    // the towers copy it to their devices while they compute this call's last step, and the next
    // call for that step starts from it (a call for any other step stages its own input). It is
    // read during this call only.
    // With a report lag (reportLag() > 0) a call launches its step and returns the reports of the
    // steps launched more than reportLag() calls before (none for the first calls); settle()
    // returns the rest. The host then waits for no stream within a step: it reads each step's
    // results from the step's own slot once the device has run it. Between steps, nothing that
    // reads the variables or the state may be called while steps are in flight.
    std::vector<TowerStep> steps(const std::vector<const Batch*>& batches, int64_t first, double dataWait,
                                 const Batch* next = nullptr) override;
    int reportLag() const override { return reportLag_; }
    std::vector<TowerStep> settle() override;
    // Whether the strategy's towers run free (async: runAsync) rather than in steps.
    bool runsFree() const override { return strategy_->runsFree(); }
    // Free-running towers, `first` updates applied already (a resumed run's), run until `updates`
    // updates are applied or `control` stops them. nextBatch is called under a lock; onUpdate is
    // called on tower threads, serialised.
    void runAsync(int64_t first, int64_t updates, const std::function<void(Batch&)>& nextBatch,
                  RunControl& control, const std::function<void(const TowerStep&)>& onUpdate) override;
    // The end of training after `step` steps, on every process (Strategy::finishTraining).
    int64_t finishTraining(int64_t step) override;
    // A worker of parameter-server processes: its servers (Strategy::servers); else null.
    ServerConnection* servers() override { return strategy_->servers(); }

    // The network that evaluation and checkpoints see: tower 0 with the current variables
    // (averaging: looking at the replicas' mean, in a copy, until the next step; training is
    // not touched by evaluating).
    Network& evalNetwork() override;
    Stream evalStream() override;
    // The variables (averaging: the replicas' mean, computed now).
    VariablesView variables() override;
    // Tower 0's moving statistics (free-running towers: published after each of its steps) and
    // every tower's set (TrainingEngine::statistics).
    std::vector<float> statistics() override;
    void setStatistics(const std::vector<float>& host) override;
    // Checkpoints, between steps (Strategy::state, Strategy::setVariables).
    // With batch norm, towers 1.. add their own moving statistics (each normalises by sums taken
    // about its own moving mean, so a resume is bitwise exact only with them restored too).
    std::vector<StateBuffer> state() override;
    // Batch norm without --sync-bn across worker processes: each process's towers keep moving
    // statistics of their own batches, and the CPU batch norm shifts its sums by them, so a
    // resume restores every process's (not the chief's everywhere: 1.1e-7 off) to be exact.
    bool statisticsDifferByProcess() const;
    bool stateDiffersByProcess() const override {
        return processCount_ > 1 && (plan_.averaging() || statisticsDifferByProcess());
    }
    void fetchState() override { strategy_->fetchState(); }
    // Async: f with no update half applied or beginning (Strategy::withUpdatesHeld); for a
    // checkpoint from runAsync's onUpdate while the other towers run on.
    void withUpdatesHeld(const std::function<void()>& f) override { strategy_->withUpdatesHeld(f); }
    void setVariables(const float* host) override { strategy_->setVariables(host); }
    // Tower i's own replica of the parameters (async: what it last pulled). Safe to read on
    // tower i's own thread, or between steps.
    VariablesView replica(int tower) override;
    // Per device with an allocator that keeps books (GPUs): what it handed out, peak included.
    std::vector<DeviceMemoryUse> deviceMemory() const override;
    // Bytes of optimiser slots of the whole run (holder and replicas).
    size_t optimizerSlotBytes() const override;
    // Bytes the communicator has counted since the start.
    int64_t bytesMoved() const override;
    // Steps launched from a recorded graph so far, all towers (between steps): 0 on CPU towers,
    // and on GPU towers whose step could not be recorded (recordStep).
    int64_t replayedSteps() const;
    // How batch norms' statistics meet (--sync-bn): "shared memory", "copies", "NCCL"; empty
    // where they do not (no --sync-bn, no batch norm, or one replica in all).
    std::string statisticsTransport() const { return statisticsComm_ ? statisticsComm_->name() : std::string(); }

private:
    struct Tower;
    struct StepSlot;
    // What tower t measured for one step of a call.
    struct Result {
        TowerPhases phases;
        double lossSum = 0, correct = 0, wd = 0;
        bool profiled = false;                         // tower 0 timed this step's layers
        std::shared_ptr<const LayerTimes> layerTimes;  // tower 0's profiled steps
    };
    // A step launched and not reported yet (report lag): its tower's slot, what the host measured
    // of it, and the bytes its call moved.
    struct InFlight {
        int64_t step = 0;
        int slot = 0;
        Result result;
        int64_t bytes = 0;
    };
    class Call;
    std::atomic<int64_t> applied_{0};  // free-running towers: updates applied so far
    std::mutex publishedMutex_;
    std::vector<float> published_;     // free-running towers: tower 0's statistics after its last step
    void towerLoop(int i);
    void runTower(int i);
    void computeSlice(Tower& t, int i, size_t k);
    void computeStaged(Tower& t, int i, int64_t step, double staging);
    void stageSlice(Tower& t, int i, const Batch& b, int64_t step);
    void stageInput(Tower& t, const float* x, const int32_t* y, int n);
    // The staged input through forward and backward on tower t, timed with events, into r;
    // whileComputing (may be empty) runs on the host while the device works.
    // `step` is the global step (sync) or the update the tower pulled (async).
    void computeGradients(Tower& t, int i, uint64_t step, Result& r, const std::function<void()>& whileComputing,
                          const MicroBatch& part = {});
    void accumulateSlice(Tower& t, int i, const Batch& b, int64_t step, Result& r);
    void enqueueCompute(Tower& t, StepSlot& slot, int n, int64_t step, uint64_t seed, const MicroBatch& part);
    Graph recordStep(Tower& t, StepSlot& slot, int n, int64_t step, uint64_t seed, const MicroBatch& part);
    void sayRecordingFailure(Tower& t, int i);
    void readStep(Tower& t, StepSlot& slot, Result& r);
    TowerStep stepReport(int64_t step, const std::vector<const Result*>& perTower) const;
    TowerStep landed();  // the oldest step in flight, reported once the device has run it
    void requireSettled(const char* what) const;
    int resolveReportLag(ProcessGroup* processes) const;
    void straggle(Result& r, int i);
    Backend& backendFor(const Device& d, int threadsPerTower);

    DeploymentPlan plan_;
    OptimizerSettings optSettings_;
    int threadsPerTower_ = 1;  // compute threads of each tower's CPU work (its OpenMP team)
    uint64_t seed_ = 0;        // the run's seed: initialisation and dropout masks
    int towerOffset_ = 0;      // processes: the global index of this process's first tower
    int processCount_ = 1;     // the run's processes (mpirun), this one included
    int64_t paramCount_ = 0;
    int reportLag_ = 0;
    // Report lag: the strategy's optimiser, whose update TowerSet enqueues with each step's compute
    // (Strategy::takeOverUpdates); null otherwise.
    Optimizer* updater_ = nullptr;
    std::deque<InFlight> inFlight_;  // report lag: oldest first
    // Declared first, destroyed last: every tensor, stream and plan below belongs to one of them.
    std::vector<std::shared_ptr<Backend>> backends_;
    std::vector<std::unique_ptr<Tower>> towers_;
    std::unique_ptr<Strategy> strategy_;
    // --sync-bn: the batch norms' communicator (fp32; as the gradients meet, without a holder) and
    // each tower's end of it; abandoned once a tower fails (abandonStatistics).
    void abandonStatistics(int tower, std::exception_ptr failure);
    class StatisticsSync;
    std::unique_ptr<Communicator> statisticsComm_;
    std::vector<std::unique_ptr<StatisticsSync>> syncs_;

    // The caller and the tower threads meet at start_ and done_ around each call; a first CPU
    // tower runs on the caller's thread (callerRuns_ 1), whose team becomes a compute team once
    // (util/compute_thread.hpp).
    const int callerRuns_;
    std::barrier<> start_, done_;
    bool callerEntered_ = false;
    std::vector<const Batch*> round_;  // this call's global batches (one, or local steps)
    const Batch* next_ = nullptr;      // the batch of the step after this call, or none
    int64_t step_ = 0;
    double callerWait_ = 0;
    std::chrono::steady_clock::time_point callStart_;  // when the towers were let go on this call
    bool quit_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace tb
