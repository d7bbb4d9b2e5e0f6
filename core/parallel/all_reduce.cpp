// AllReduce — replicated variables, synchronous: every tower keeps and updates its own copy of
// the variables with its own optimiser. Per step the towers' gradients are all-reduced to their
// mean (a ring moves 2 (D - 1) x P x 4 bytes over the D devices of the towers; nothing between
// towers that share a device), and every replica applies the same update, so they stay equal.
#include <chrono>

#include "parallel/strategies.hpp"
#include "util/elapsed.hpp"

namespace tb {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

ReplicatedStrategy::ReplicatedStrategy(const StrategySetup& s)
    : Strategy(s.replicas, int64_t(s.init.size())), processes_(s.processes) {
    comm_ = makeCommunicator(s.comm, rankEndpoints(replicas_), HolderEndpoint{}, s.init.size(), s.processes,
                             s.plan.commPrecision);
    for (Replica& r : replicas_) {
        copyInitial(r, s.init);
        opts_.push_back(std::make_unique<Optimizer>(*r.backend, s.opt.rule, s.opt.hyper, s.opt.schedule,
                                                    size_t(count_), r.stream));
        r.backend->synchronize(r.stream);
    }
}

std::vector<StateBuffer> ReplicatedStrategy::state() {
    std::vector<StateBuffer> out;
    for (size_t r = 0; r < replicas_.size(); ++r)
        appendSlots(out, "replica" + std::to_string(r) + "/", *opts_[r], replicas_[r].stream);
    return out;
}

void ReplicatedStrategy::setVariables(const float* host) {
    for (Replica& r : replicas_) copyInitial(r, host, size_t(count_));
}

void ReplicatedStrategy::allReduce(int rank, float* buf, TowerPhases& ph) {
    const auto t0 = Clock::now();
    comm_->allReduce(rank, buf, size_t(count_), ReduceOp::Mean);
    const double waited = comm_->takeWaitSeconds(rank);
    ph.wait += waited;
    ph.reduce += secondsSince(t0) - waited;
}

void ReplicatedStrategy::apply(int rank, int64_t step, TowerPhases& ph) {
    const auto t0 = Clock::now();
    Replica& r = replicas_[size_t(rank)];
    opts_[size_t(rank)]->apply(r.stream, r.net->params(), r.net->grads(), step);
    r.backend->synchronize(r.stream);
    ph.apply += secondsSince(t0);
}

size_t ReplicatedStrategy::optimizerSlotBytes() const {
    size_t total = 0;
    for (const auto& o : opts_) total += o->slotBytes();
    return total;
}

void AllReduce::runCall(int rank, TowerCall& call) {
    TowerPhases& ph = call.phases(0);
    call.compute(0);
    if (updatesTakenOver_) return;  // (one replica: no all-reduce)
    call.meet([&] {
        allReduce(rank, replicas_[size_t(rank)].net->grads(), ph);
        apply(rank, call.step(0), ph);
    });
}

VariablesView AllReduce::variables() { return {replicas_[0].backend, replicas_[0].stream, replicas_[0].net->params()}; }

Network& AllReduce::evalNetwork() { return *replicas_[0].net; }

}  // namespace tb
