// The four strategies (strategy.hpp says what each is; their .cpp files say what moves where).
// Internal to parallel/: TowerSet makes them through makeStrategy.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <utility>
#include <vector>

#include "parallel/parameter_server_task.hpp"
#include "parallel/strategy.hpp"

namespace tb {

// What HolderMean and ParameterServerProcesses share: the variables in the holder's memory,
// which towers there read in place and the others copy before each step; the towers' mean made
// on the holder (reduced across `processes` too where given).
class HolderStrategy : public Strategy {
public:
    VariablesView variables() override;
    Network& evalNetwork() override;
    void setVariables(const float* host) override;

protected:
    HolderStrategy(const StrategySetup& s, ProcessGroup* processes);
    // Tower `rank`'s replica := the variables (towers in the holder's memory read them in place).
    void pullVariables(int rank, TowerPhases& ph);
    Backend* holder_;
    Tensor params_;  // (P) the variables, in the holder's memory
    Tensor mean_;    // (P) the towers' mean gradients, on the holder (several towers or processes)
};

class HolderMean final : public HolderStrategy {
public:
    explicit HolderMean(const StrategySetup& s);
    std::string name() const override { return "holder mean"; }
    void runCall(int rank, TowerCall& call) override;
    // One tower on the holder's device, sharing its memory (not --transfers copies), whose stream
    // is then the holder's: the tower reads the variables in place and the holder applies its
    // gradients in place (no mean to take, no copy, no host wait).
    Optimizer* streamOrderedOptimizer() override {
        const bool inPlace = replicas_.size() == 1 && mean_.empty() && rounded_.empty() && comm_->sharesHolder(0) &&
                             comm_->holderStream(0) == replicas_[0].stream;
        return inPlace ? opt_.get() : nullptr;
    }
    void setVariables(const float* host) override;
    size_t optimizerSlotBytes() const override;
    std::vector<StateBuffer> state() override;

private:
    void reduceAndApply(int rank, int64_t step, TowerPhases& ph);
    std::unique_ptr<Optimizer> opt_;
    // bf16 matrix work on CPU towers that read the host's variables in place: the update also
    // writes the variables rounded to bf16 (P values in floats' room), which those towers' next
    // step reads instead of rounding the weights again. Current once every tower has written
    // its chunk (a chunk not updated in a step keeps its rounding, which still matches);
    // not after setVariables (a restore) or before the first update.
    Tensor rounded_;
    std::vector<uint8_t> chunkRounded_;   // (towers) each written by its own tower's thread
    std::atomic<int> chunksRounded_{0};   // towers whose chunk was written since setVariables
};

// What AllReduce and LocalAveraging share: a copy of the variables and an optimiser per replica.
class ReplicatedStrategy : public Strategy {
public:
    explicit ReplicatedStrategy(const StrategySetup& s);
    size_t optimizerSlotBytes() const override;
    std::vector<StateBuffer> state() override;
    void setVariables(const float* host) override;

protected:
    void allReduce(int rank, float* buf, TowerPhases& ph);  // mean over the replicas, in place
    void apply(int rank, int64_t step, TowerPhases& ph);    // the replica's own update
    std::vector<std::unique_ptr<Optimizer>> opts_;
    ProcessGroup* processes_;  // the run's other processes, or null
};

class AllReduce final : public ReplicatedStrategy {
public:
    using ReplicatedStrategy::ReplicatedStrategy;
    std::string name() const override { return "all-reduce"; }
    void runCall(int rank, TowerCall& call) override;
    // One replica alone: its all-reduce is nothing, and it updates on its own stream.
    Optimizer* streamOrderedOptimizer() override {
        return replicas_.size() == 1 && !processes_ ? opts_[0].get() : nullptr;
    }
    VariablesView variables() override;
    Network& evalNetwork() override;
};

class LocalAveraging final : public ReplicatedStrategy {
public:
    explicit LocalAveraging(const StrategySetup& s);
    std::string name() const override { return "local steps, averaged"; }
    // The call's local steps, each the replica's own update; the replicas' parameters all-reduced
    // to their mean where the last completes a multiple of K.
    void runCall(int rank, TowerCall& call) override;
    VariablesView variables() override;
    Network& evalNetwork() override;
    void endEvaluation() override;
    std::vector<StateBuffer> state() override;  // the slots and each replica's parameters
    // Across processes, a last round cut short by the run's length left each process's replicas
    // apart: every process averages them with all the others' before the chief evaluates.
    int64_t finishTraining(int64_t step) override;

private:
    void averageNow();  // every replica (across processes: of every process) := the mean of all
    void takeMean();  // mean_ := this process's replicas' mean (all replicas' at a round's end)
    int every_;
    Tensor mean_;     // (P) on replica 0's device
    bool viewing_ = false;  // replica 0 looks at mean_ (evaluation) until the next step
};

class AsyncParameterServer final : public Strategy {
public:
    explicit AsyncParameterServer(const StrategySetup& s);
    std::string name() const override { return "asynchronous parameter server"; }
    // One update: pull the variables into the replica shard by shard, compute, push the gradients,
    // which the holder applies at once, shard by shard. Both complete on return.
    void runCall(int rank, TowerCall& call) override;
    bool runsFree() const override { return true; }
    void pull(int rank);
    float push(int rank, int64_t update);  // the update's learning rate
    VariablesView variables() override;
    Network& evalNetwork() override;
    size_t optimizerSlotBytes() const override;
    std::vector<StateBuffer> state() override;
    void setVariables(const float* host) override;
    void withUpdatesHeld(const std::function<void()>& f) override;
    // Element ranges (offset, count) of each shard's variables.
    const std::vector<std::vector<std::pair<size_t, size_t>>>& shards() const { return shards_; }

private:
    Backend* holder_;
    Tensor params_;
    std::unique_ptr<Optimizer> opt_;
    std::vector<std::vector<std::pair<size_t, size_t>>> shards_;  // element ranges of each shard
    std::vector<std::unique_ptr<std::mutex>> locks_;              // one per shard
    std::shared_mutex updating_;  // shared by each push throughout; exclusive in withUpdatesHeld
};

// A worker among parameter-server processes (parameter_server_task.hpp says what moves where):
// its towers' mean gradient on the host, sent shard by shard to the servers, whose answers are
// the variables of the next step.
class ParameterServerProcesses final : public HolderStrategy, private ServerConnection {
public:
    explicit ParameterServerProcesses(const StrategySetup& s);
    std::string name() const override;
    void runCall(int rank, TowerCall& call) override;
    size_t optimizerSlotBytes() const override { return 0; }  // on the servers
    // The chief: every server's slots and update count as last received (fetchState, or the final
    // message), as server<k>/optimizer/m ... and server<k>/updates; other workers keep none.
    std::vector<StateBuffer> state() override;
    // The chief, until the servers' final message: asks every server for its state (the shard's
    // variables, which replace its own copy's, slots and count).
    void fetchState() override;
    // The chief receives the final variables and slots, and with them the servers' count of
    // updates (async: others may have pushed after this worker's last push: the run's step count).
    int64_t finishTraining(int64_t step) override;
    ServerConnection* servers() override { return this; }

private:
    bool async() const override { return async_; }
    void setRunLength(int64_t updates) override { total_ = updates; }
    void askToStop() override { stopAsked_ = true; }
    void setTowerReport(const std::vector<float>& report) override;
    std::optional<ServerReply> lastReply() const override { return reply_; }
    void reduceAndExchange(int rank, int64_t step, TowerPhases& ph);
    void pushAndPull(const float* grads, int64_t step);
    void absorbState(int server);  // states_[server] into the variables and updates_

    ProcessGroup& processes_;
    ShardLayout layout_;
    bool async_, chief_;
    std::vector<ShardMessage<PushHeader>> pushes_;    // per server: this step's gradients of its shard
    std::vector<ShardMessage<ReplyHeader>> replies_;  // per server: its answer (and, at the end, its final shard)
    int64_t total_ = 0;
    std::atomic<bool> stopAsked_{false};
    std::optional<ServerReply> reply_;
    // Async: this process's towers' report for server 0 (towers x kTowerReportFloats; NaN before
    // the first), and the workers' reports its answers carry after the shard.
    std::vector<float> report_;
    size_t reportsFloats_ = 0;
    CommPrecision gradients_;
    std::vector<float> packed_;  // bf16 gradients: a shard of the mean, packed, before it is rounded
    // The chief: per server its last state message (stateFloats), and its update count (2 floats each).
    UpdateRule rule_;
    std::vector<ShardMessage<ReplyHeader>> states_;
    std::vector<float> updates_;
    bool finished_ = false;  // the servers' final messages are in: they answer no more
};

// Helpers of the strategies (strategy.cpp).
std::vector<RankEndpoint> rankEndpoints(const std::vector<Replica>& replicas);
// The variables' buffer on the holder: pinned host memory where the holder is the host and the
// towers are GPUs (their pulls and pushes are then DMA copies), else the holder's own memory.
Tensor variablesOnHolder(const HolderEndpoint& holder, const std::vector<Replica>& replicas, size_t count);
void copyInitial(Replica& r, const std::vector<float>& init);
void copyInitial(Replica& r, const float* host, size_t count);
// The optimiser's slots as state buffers named prefix + "optimizer/m", ...
void appendSlots(std::vector<StateBuffer>& out, const std::string& prefix, Optimizer& opt, Stream stream);

}  // namespace tb
