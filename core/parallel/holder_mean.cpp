// HolderMean — the seeds' average_gradients: the variables and their optimiser live on the
// holder (the host, or one tower's device); the update runs there, each tower's thread its chunk.
// Per step, for each of the N towers (P parameters, P x 4 bytes, counted for towers off the
// holder's device):
//   down  the variables, holder -> tower (towers in the holder's memory read them in place)
//   up    the tower's gradients, tower -> holder, where the holder takes their mean (P x 2
//         bytes with --comm-precision bf16)
// then the holder applies the update to the variables.
#include <chrono>

#include "parallel/strategies.hpp"
#include "util/elapsed.hpp"

namespace tb {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

HolderStrategy::HolderStrategy(const StrategySetup& s, ProcessGroup* processes)
    : Strategy(s.replicas, int64_t(s.init.size())), holder_(s.holder.backend) {
    comm_ = makeCommunicator(s.comm, rankEndpoints(replicas_), s.holder, s.init.size(), processes,
                             s.plan.commPrecision);
    const Stream hs = comm_->holderStream(0);
    params_ = variablesOnHolder(s.holder, replicas_, s.init.size());
    holder_->copyFromHost(hs, params_.data(), s.init.data(), bytes());
    if (replicas_.size() > 1 || processes) mean_ = holder_->empty(Shape{count_});  // where the mean is made
    holder_->synchronize(hs);
    for (size_t r = 0; r < replicas_.size(); ++r) {
        // Towers in the holder's memory read and update the variables themselves.
        if (comm_->sharesHolder(int(r))) replicas_[r].net->bindParams(params_.data());
        else copyInitial(replicas_[r], s.init);
    }
}

void HolderStrategy::pullVariables(int rank, TowerPhases& ph) {
    const auto t0 = Clock::now();
    comm_->broadcastFromHolder(rank, params_.data(), replicas_[size_t(rank)].net->params(), size_t(count_));
    ph.reduce += secondsSince(t0);
}

VariablesView HolderStrategy::variables() { return {holder_, comm_->holderStream(0), params_.data()}; }

void HolderStrategy::setVariables(const float* host) {
    const Stream hs = comm_->holderStream(0);
    holder_->copyFromHost(hs, params_.data(), host, bytes());
    holder_->synchronize(hs);
    for (size_t r = 0; r < replicas_.size(); ++r)  // towers with a copy of their own pull it anyway
        if (!comm_->sharesHolder(int(r))) copyInitial(replicas_[r], host, size_t(count_));
}

Network& HolderStrategy::evalNetwork() {
    Replica& r = replicas_[0];
    if (r.net->params() != params_.data()) {  // a tower with its own copy holds its last pull
        r.backend->copy(r.stream, r.net->params(), params_.data(), bytes());
        r.backend->synchronize(r.stream);
    }
    return *r.net;
}

HolderMean::HolderMean(const StrategySetup& s) : HolderStrategy(s, s.processes) {
    const Stream hs = comm_->holderStream(0);
    opt_ = std::make_unique<Optimizer>(*holder_, s.opt.rule, s.opt.hyper, s.opt.schedule, size_t(count_), hs);
    holder_->synchronize(hs);
    if (s.opt.precision == MatmulPrecision::Bf16 && s.plan.cpuTowersReadVariablesInPlace())
        rounded_ = holder_->empty(Shape{(count_ + 1) / 2});
    chunkRounded_.assign(replicas_.size(), 0);
}

void HolderMean::runCall(int rank, TowerCall& call) {
    TowerPhases& ph = call.phases(0);
    call.unlessFailed([&] {
        pullVariables(rank, ph);
        if (rounded_.empty() || !comm_->sharesHolder(rank)) return;
        const bool current = chunksRounded_ == int(replicas_.size());
        replicas_[size_t(rank)].net->useRoundedParams(current ? reinterpret_cast<const uint16_t*>(rounded_.data())
                                                              : nullptr);
    });
    call.compute(0);
    if (updatesTakenOver_) return;  // (one tower reading the variables in place: no mean)
    call.meet([&] { reduceAndApply(rank, call.step(0), ph); });
}

void HolderMean::setVariables(const float* host) {  // between steps: no tower is running
    chunkRounded_.assign(replicas_.size(), 0);
    chunksRounded_ = 0;
    HolderStrategy::setVariables(host);
}

void HolderMean::reduceAndApply(int rank, int64_t step, TowerPhases& ph) {
    auto t0 = Clock::now();
    const float* grads = comm_->reduceToHolder(rank, replicas_[size_t(rank)].net->grads(), mean_.data(),
                                               size_t(count_), ReduceOp::Mean);
    const double waited = comm_->takeWaitSeconds(rank);
    ph.wait += waited;
    ph.reduce += secondsSince(t0) - waited;
    t0 = Clock::now();
    const Range c = comm_->chunk(rank, size_t(count_));
    const Stream hs = comm_->holderStream(rank);
    opt_->applyRange(hs, params_.data(), grads, c.begin, c.size(), step,
                     rounded_.empty() ? nullptr : reinterpret_cast<uint16_t*>(rounded_.data()));
    holder_->synchronize(hs);
    // Every tower applies its chunk before any starts the next step (TowerSet's step barrier).
    if (!rounded_.empty() && !chunkRounded_[size_t(rank)]) {
        chunkRounded_[size_t(rank)] = 1;
        ++chunksRounded_;
    }
    ph.apply += secondsSince(t0);
}

std::vector<StateBuffer> HolderMean::state() {
    std::vector<StateBuffer> out;
    appendSlots(out, "", *opt_, comm_->holderStream(0));
    return out;
}

size_t HolderMean::optimizerSlotBytes() const { return opt_->slotBytes(); }

}  // namespace tb
