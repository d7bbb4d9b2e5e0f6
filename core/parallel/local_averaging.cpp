// LocalAveraging: replicated variables, averaged every K steps. Each tower takes local steps with
// its own optimiser, meeting no one; every K-th step the replicas' parameters are all-reduced to
// their mean (2 (D - 1) x P x 4 bytes over the towers' D devices; nothing on other steps).
// Evaluation and the moving average read the mean in a copy, changing nothing in training. Across
// processes the all-reduce spans every replica, so a process's own mean is the run's between
// rounds; a run whose length is no multiple of K ends with averageNow on every process.
#include <chrono>
#include <vector>

#include "parallel/strategies.hpp"

namespace tb {

LocalAveraging::LocalAveraging(const StrategySetup& s)
    : ReplicatedStrategy(s), every_(s.plan.averageEvery) {
    mean_ = replicas_[0].backend->empty(Shape{count_});
}

// A straggler costs the others nothing until the average.
void LocalAveraging::runCall(int rank, TowerCall& call) {
    const size_t n = call.steps();
    for (size_t k = 0; k < n; ++k) {
        call.compute(k);
        call.unlessFailed([&] { apply(rank, call.step(k), call.phases(k)); });
    }
    if ((call.step(n - 1) + 1) % every_ != 0) return;
    call.meet([&] { allReduce(rank, replicas_[size_t(rank)].net->params(), call.phases(n - 1)); });
    call.markAveraged();
}

int64_t LocalAveraging::finishTraining(int64_t step) {
    if (processes_ && step % every_ != 0) averageNow();
    return step;
}

void LocalAveraging::takeMean() {
    endEvaluation();
    std::vector<const float*> params;
    for (const Replica& r : replicas_) params.push_back(r.net->params());
    comm_->meanOfRanks(params, mean_.data(), size_t(count_));
}

VariablesView LocalAveraging::variables() {
    takeMean();
    return {replicas_[0].backend, replicas_[0].stream, mean_.data()};
}

Network& LocalAveraging::evalNetwork() {
    takeMean();
    replicas_[0].net->viewParams(mean_.data());
    viewing_ = true;
    return *replicas_[0].net;
}

void LocalAveraging::endEvaluation() {
    if (!viewing_) return;
    replicas_[0].net->viewParams(nullptr);
    viewing_ = false;
}

std::vector<StateBuffer> LocalAveraging::state() {
    std::vector<StateBuffer> out = ReplicatedStrategy::state();
    endEvaluation();  // replica 0's network looks at its own parameters again
    for (size_t r = 0; r < replicas_.size(); ++r)
        out.push_back({"replica" + std::to_string(r) + "/variables", replicas_[r].backend, replicas_[r].stream,
                       replicas_[r].net->params(), size_t(count_)});
    return out;
}

void LocalAveraging::averageNow() {
    takeMean();
    if (processes_) {  // MPI moves host memory: a GPU replica's mean goes through the host
        Replica& r0 = replicas_[0];
        if (r0.device.type == DeviceType::Cpu) {
            processes_->allReduce(0, mean_.data(), mean_.data(), size_t(count_), ReduceOp::Mean);
        } else {
            std::vector<float> host(static_cast<size_t>(count_));
            r0.backend->copyToHost(r0.stream, host.data(), mean_.data(), bytes());
            r0.backend->synchronize(r0.stream);
            processes_->allReduce(0, host.data(), host.data(), host.size(), ReduceOp::Mean);
            r0.backend->copyFromHost(r0.stream, mean_.data(), host.data(), bytes());
        }
    }
    for (Replica& r : replicas_) {
        r.backend->copy(r.stream, r.net->params(), mean_.data(), bytes());
        r.backend->synchronize(r.stream);
    }
}

}  // namespace tb
