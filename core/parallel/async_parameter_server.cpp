// AsyncParameterServer — the variables on a holder, dealt round-robin over S shards (as
// model_deploy's device chooser deals them over parameter servers), each with its own lock.
// Towers run alone: a tower pulls the variables shard by shard (P x 4 bytes down), computes, and
// pushes its gradients (P x 4 bytes up, P x 2 in bf16), which the holder applies at once, shard by shard; both
// counted for towers off the holder's device. A lock covers a shard's copy or update until it
// has completed, not only until it is enqueued. Staleness: updates others applied in between.
#include <chrono>

#include "parallel/strategies.hpp"
#include "util/elapsed.hpp"

namespace tb {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

AsyncParameterServer::AsyncParameterServer(const StrategySetup& s)
    : Strategy(s.replicas, int64_t(s.init.size())), holder_(s.holder.backend) {
    comm_ = makeCommunicator(s.comm, rankEndpoints(replicas_), s.holder, s.init.size(), nullptr, s.plan.commPrecision);
    const Stream hs = comm_->holderStream(0);
    params_ = variablesOnHolder(s.holder, replicas_, s.init.size());
    holder_->copyFromHost(hs, params_.data(), s.init.data(), bytes());
    opt_ = std::make_unique<Optimizer>(*holder_, s.opt.rule, s.opt.hyper, s.opt.schedule, size_t(count_), hs);
    holder_->synchronize(hs);
    for (Replica& r : replicas_) copyInitial(r, s.init);
    const Network& net = *replicas_[0].net;
    shards_.resize(size_t(s.plan.psShards));
    for (size_t v = 0; v < net.paramInfos().size(); ++v)
        shards_[v % shards_.size()].emplace_back(size_t(net.paramOffsets()[v]), size_t(net.paramInfos()[v].shape.numel()));
    for (int i = 0; i < s.plan.psShards; ++i) locks_.push_back(std::make_unique<std::mutex>());
}

void AsyncParameterServer::runCall(int rank, TowerCall& call) {
    TowerPhases& ph = call.phases(0);
    call.unlessFailed([&] {
        const auto t0 = Clock::now();
        call.setStep(0, call.applied());  // the version says how fresh the pull is
        pull(rank);
        ph.reduce = secondsSince(t0);
    });
    call.compute(0);
    call.unlessFailed([&] {
        const auto t0 = Clock::now();
        const float lr = push(rank, call.applied());
        ph.apply = secondsSince(t0);
        call.countApplied(lr);
    });
}

void AsyncParameterServer::pull(int rank) {
    float* dst = replicas_[size_t(rank)].net->params();
    for (size_t s = 0; s < shards_.size(); ++s) {
        std::lock_guard lock(*locks_[s]);
        for (auto [off, len] : shards_[s]) comm_->pull(rank, params_.data() + off, dst + off, len);
    }
}

float AsyncParameterServer::push(int rank, int64_t update) {
    std::shared_lock whole(updating_);  // pushes run side by side; withUpdatesHeld waits for them
    const float* grads = comm_->push(rank, replicas_[size_t(rank)].net->grads(), size_t(count_));
    const Stream hs = comm_->holderStream(rank);
    float lr = 0;
    for (size_t s = 0; s < shards_.size(); ++s) {
        std::lock_guard lock(*locks_[s]);
        for (auto [off, len] : shards_[s]) lr = opt_->applyRange(hs, params_.data(), grads, off, len, update);
        holder_->synchronize(hs);
    }
    return lr;
}

// Pushes hold updating_ shared from their first shard to their last, so taking it exclusively
// waits for those under way and keeps new ones out: f sees a whole number of updates in every
// shard and in the optimiser's slots. (Taking the shard locks in order would not do: it can
// overtake a push between two of its shards.)
void AsyncParameterServer::withUpdatesHeld(const std::function<void()>& f) {
    std::unique_lock held(updating_);
    f();
}

VariablesView AsyncParameterServer::variables() { return {holder_, comm_->holderStream(0), params_.data()}; }

std::vector<StateBuffer> AsyncParameterServer::state() {
    std::vector<StateBuffer> out;
    appendSlots(out, "", *opt_, comm_->holderStream(0));
    return out;
}

void AsyncParameterServer::setVariables(const float* host) {
    const Stream hs = comm_->holderStream(0);
    holder_->copyFromHost(hs, params_.data(), host, bytes());
    holder_->synchronize(hs);
    for (Replica& r : replicas_) copyInitial(r, host, size_t(count_));  // pulled again before each push
}

Network& AsyncParameterServer::evalNetwork() {
    Replica& r = replicas_[0];  // it holds its last pull
    r.backend->copy(r.stream, r.net->params(), params_.data(), bytes());
    r.backend->synchronize(r.stream);
    return *r.net;
}

size_t AsyncParameterServer::optimizerSlotBytes() const { return opt_->slotBytes(); }

}  // namespace tb
