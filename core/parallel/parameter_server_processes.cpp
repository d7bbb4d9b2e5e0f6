// ParameterServerProcesses — a worker among parameter-server processes (--ps-tasks P under
// mpirun; parameter_server_task.hpp). The worker's towers meet on the host first, as the seeds'
// towers meet on the CPU (their mean, counted as the holder mean counts it); then per step the
// worker sends each server its shard of that mean (shard x 4 bytes, counted by the process
// group) and receives the shard's variables, which its towers read at the next step.
#include <algorithm>
#include <chrono>

#include "parallel/strategies.hpp"
#include "util/error.hpp"

namespace tb {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

// The towers meet among themselves only (no process group): the servers are where the
// processes meet.
ParameterServerProcesses::ParameterServerProcesses(const StrategySetup& s)
    : HolderStrategy(s, nullptr),
      processes_(*s.processes),
      layout_(*s.replicas[0].net, s.plan.psTasks),
      async_(s.plan.update == UpdateMode::Async),
      chief_(s.processes->rank() == s.plan.psTasks) {}

std::string ParameterServerProcesses::name() const {
    const int p = layout_.tasks();
    return std::string(async_ ? "asynchronous " : "") + "parameter servers in " + std::to_string(p) +
           (p == 1 ? " process" : " processes");
}

void ParameterServerProcesses::afterCompute(int rank, int64_t step, TowerPhases& ph) {
    auto t0 = Clock::now();
    const float* grads = comm_->reduceToHolder(rank, replicas_[size_t(rank)].net->grads(), mean_.data(),
                                               size_t(count_), ReduceOp::Mean);
    comm_->barrier(rank);  // every tower's chunk of the mean is made
    const double waited = comm_->takeWaitSeconds(rank);
    ph.wait += waited;
    ph.reduce += since(t0) - waited;
    if (rank != 0) return;
    // The time to the servers' answer: the exchange itself, and (sync) the slowest worker's step.
    t0 = Clock::now();
    pushAndPull(grads, step);
    ph.reduce += since(t0);
}

void ParameterServerProcesses::pushAndPull(const float* grads, int64_t step) {
    const int p = layout_.tasks();
    std::vector<ShardMessage<PushHeader>> pushes(static_cast<size_t>(p));
    std::vector<ShardMessage<ReplyHeader>> replies(static_cast<size_t>(p));
    std::vector<ProcessGroup::Message> sends, receives;
    for (int s = 0; s < p; ++s) {
        pushes[size_t(s)].resize(layout_.count(s));
        replies[size_t(s)].resize(layout_.count(s));
        PushHeader& h = pushes[size_t(s)].header();
        h.step = step;
        h.total = total_;
        h.stop = stopAsked_ ? 1 : 0;
        layout_.pack(s, grads, pushes[size_t(s)].floats());
        sends.push_back({s, kPushTag, pushes[size_t(s)].bytes.data(), pushes[size_t(s)].bytes.size()});
        receives.push_back({s, kReplyTag, replies[size_t(s)].bytes.data(), replies[size_t(s)].bytes.size()});
    }
    processes_.exchange(sends, receives);
    ServerReply r;
    r.update = replies[0].header().update;
    r.lr = replies[0].header().lr;
    for (int s = 0; s < p; ++s) {
        const ReplyHeader& h = replies[size_t(s)].header();
        r.staleness = std::max(r.staleness, h.staleness);
        r.applied = r.applied && h.applied;
        r.last = r.last || h.last;
        layout_.unpack(s, replies[size_t(s)].floats(), params_.data());
    }
    // Servers that count their updates in another order may not have said `last` yet: they
    // hear that this worker pushes no more.
    if (r.last) {
        std::vector<ProcessGroup::Message> byes;
        for (int s = 0; s < p; ++s)
            if (!replies[size_t(s)].header().last) byes.push_back({s, kByeTag, nullptr, 0});
        processes_.exchange(byes, {});
    }
    reply_ = r;
}

std::optional<int64_t> ParameterServerProcesses::endTraining() {
    if (!chief_) return std::nullopt;
    const int p = layout_.tasks();
    std::vector<ShardMessage<ReplyHeader>> finals(static_cast<size_t>(p));
    std::vector<ProcessGroup::Message> receives;
    for (int s = 0; s < p; ++s) {
        finals[size_t(s)].resize(layout_.count(s));
        receives.push_back({s, kFinalTag, finals[size_t(s)].bytes.data(), finals[size_t(s)].bytes.size()});
    }
    processes_.exchange({}, receives);
    int64_t updates = 0;  // the servers' updates (each counts its own: the least is the run's)
    for (int s = 0; s < p; ++s) {
        layout_.unpack(s, finals[size_t(s)].floats(), params_.data());
        updates = s == 0 ? finals[0].header().update : std::min(updates, finals[size_t(s)].header().update);
    }
    return updates;
}

}  // namespace tb
