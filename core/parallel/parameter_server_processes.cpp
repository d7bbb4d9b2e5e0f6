// ParameterServerProcesses: a worker among parameter-server processes (--ps-tasks P under mpirun;
// parameter_server_task.hpp). Its towers meet on the host first (their mean, counted as the holder
// mean counts it); per step it sends each server its shard of that mean (4 bytes an element, 2 in
// bf16, plus a 24-byte header; async: server 0's push also carries the towers' reports, 10 floats
// each; counted by the process group) and receives the shard's variables for the next step.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>

#include "optim/optimizer.hpp"
#include "parallel/strategies.hpp"
#include "util/error.hpp"
#include "util/elapsed.hpp"

namespace tb {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

// The towers meet among themselves only (no process group): the servers are where the
// processes meet.
ParameterServerProcesses::ParameterServerProcesses(const StrategySetup& s)
    : HolderStrategy(s, nullptr),
      processes_(*s.processes),
      layout_(*s.replicas[0].net, s.plan.psTasks),
      async_(s.plan.update == UpdateMode::Async),
      chief_(s.processes->rank() == s.plan.psTasks),
      pushes_(size_t(layout_.tasks())),
      replies_(size_t(layout_.tasks())),
      report_(async_ ? s.replicas.size() * kTowerReportFloats : 0, std::nanf("")),
      reportsFloats_(size_t(s.processes->size() - layout_.tasks()) * report_.size()),
      gradients_(s.plan.commPrecision),
      rule_(s.opt.rule) {
    for (int k = 0; k < layout_.tasks(); ++k) {
        pushes_[size_t(k)].resize(pushGradientFloats(layout_.count(k), gradients_) + (k == 0 ? report_.size() : 0));
        if (gradients_ == CommPrecision::Bf16) packed_.resize(std::max(packed_.size(), layout_.count(k)));
        replies_[size_t(k)].resize(layout_.count(k) + (k == 0 ? reportsFloats_ : 0));
    }
    if (!chief_) return;
    states_.resize(size_t(layout_.tasks()));
    for (int k = 0; k < layout_.tasks(); ++k) states_[size_t(k)].resize(stateFloats(layout_.count(k), rule_));
    updates_.assign(size_t(2 * layout_.tasks()), 0.f);
}

std::vector<StateBuffer> ParameterServerProcesses::state() {
    std::vector<StateBuffer> out;
    if (!chief_) return out;
    const Stream hs = comm_->holderStream(0);  // the holder is the host: the buffers are its memory
    const std::vector<std::string> slots = Optimizer::slotNames(rule_);
    for (int k = 0; k < layout_.tasks(); ++k) {
        const size_t count = layout_.count(k);
        for (size_t j = 0; j < slots.size(); ++j)
            out.push_back({serverStateName(k, "optimizer/" + slots[j]), holder_, hs,
                           states_[size_t(k)].floats() + (1 + j) * count, count});
        out.push_back({serverStateName(k, "updates"), holder_, hs, updates_.data() + 2 * k, 2});
    }
    return out;
}

void ParameterServerProcesses::fetchState() {
    if (!chief_ || finished_) return;
    std::vector<ProcessGroup::Message> asks, answers;
    for (int s = 0; s < layout_.tasks(); ++s) {
        asks.push_back({s, kStateTag, nullptr, 0});
        answers.push_back(states_[size_t(s)].to(s, kStateReplyTag));
    }
    processes_.exchange(asks, answers);
    for (int s = 0; s < layout_.tasks(); ++s) absorbState(s);
}

void ParameterServerProcesses::absorbState(int server) {
    ShardMessage<ReplyHeader>& m = states_[size_t(server)];
    layout_.unpack(server, m.floats(), params_.data());
    updatesToFloats(m.header().update, updates_.data() + 2 * server);
}

// Called between steps (the towers' threads are idle), before the push that carries it.
void ParameterServerProcesses::setTowerReport(const std::vector<float>& report) {
    if (report.size() != report_.size())
        throw Error("parameter servers: a report of " + std::to_string(report.size()) + " floats where " +
                    std::to_string(report_.size()) + " were due");
    report_ = report;
}

std::string ParameterServerProcesses::name() const {
    const int p = layout_.tasks();
    return std::string(async_ ? "asynchronous " : "") + "parameter servers in " + std::to_string(p) +
           (p == 1 ? " process" : " processes");
}

void ParameterServerProcesses::runCall(int rank, TowerCall& call) {
    TowerPhases& ph = call.phases(0);
    call.unlessFailed([&] { pullVariables(rank, ph); });
    call.compute(0);
    call.meet([&] { reduceAndExchange(rank, call.step(0), ph); });
}

void ParameterServerProcesses::reduceAndExchange(int rank, int64_t step, TowerPhases& ph) {
    auto t0 = Clock::now();
    const float* grads = nullptr;
    std::exception_ptr failed;  // still meet the other towers at the barrier, then fail
    try {
        grads = comm_->reduceToHolder(rank, replicas_[size_t(rank)].net->grads(), mean_.data(), size_t(count_),
                                      ReduceOp::Mean);
    } catch (...) {
        failed = std::current_exception();
    }
    comm_->barrier(rank);  // every tower's chunk of the mean is made
    if (failed) std::rethrow_exception(failed);
    const double waited = comm_->takeWaitSeconds(rank);
    ph.wait += waited;
    ph.reduce += secondsSince(t0) - waited;
    if (rank != 0) return;
    // The time to the servers' answer: the exchange itself, and (sync) the slowest worker's step.
    t0 = Clock::now();
    pushAndPull(grads, step);
    ph.reduce += secondsSince(t0);
}

void ParameterServerProcesses::pushAndPull(const float* grads, int64_t step) {
    const int p = layout_.tasks();
    std::vector<ProcessGroup::Message> sends, receives;
    for (int s = 0; s < p; ++s) {
        PushHeader h;
        h.step = step;
        h.total = total_;
        h.stop = stopAsked_ ? 1 : 0;
        pushes_[size_t(s)].setHeader(h);
        if (gradients_ == CommPrecision::Bf16) {
            layout_.pack(s, grads, packed_.data());
            roundToBf16(packed_.data(), pushes_[size_t(s)].halves(), layout_.count(s));
        } else {
            layout_.pack(s, grads, pushes_[size_t(s)].floats());
        }
        if (s == 0)
            std::copy(report_.begin(), report_.end(),
                      pushes_[0].floats() + pushGradientFloats(layout_.count(0), gradients_));
        sends.push_back(pushes_[size_t(s)].to(s, kPushTag));
        receives.push_back(replies_[size_t(s)].to(s, kReplyTag));
    }
    processes_.exchange(sends, receives);
    ServerReply r;
    r.update = replies_[0].header().update;
    r.lr = replies_[0].header().lr;
    const float* reports = replies_[0].floats() + layout_.count(0);
    r.towerReports.assign(reports, reports + reportsFloats_);
    std::vector<ProcessGroup::Message> byes;
    for (int s = 0; s < p; ++s) {
        const ReplyHeader h = replies_[size_t(s)].header();
        r.staleness = std::max(r.staleness, h.staleness);
        r.applied = r.applied && h.applied;
        r.last = r.last || h.last;
        layout_.unpack(s, replies_[size_t(s)].floats(), params_.data());
        if (!h.last) byes.push_back({s, kByeTag, nullptr, 0});
    }
    // Servers that count their updates in another order may not have said `last` yet: they
    // hear that this worker pushes no more.
    if (r.last) processes_.exchange(byes, {});
    reply_ = r;
}

int64_t ParameterServerProcesses::finishTraining(int64_t step) {
    if (!chief_) return step;
    const int p = layout_.tasks();
    std::vector<ProcessGroup::Message> asks, receives;
    for (int s = 0; s < p; ++s) {
        asks.push_back({s, kFinalTag, nullptr, 0});
        receives.push_back(states_[size_t(s)].to(s, kFinalTag));
    }
    processes_.exchange(asks, receives);
    finished_ = true;
    int64_t updates = 0;  // the servers' updates (each counts its own: the least is the run's)
    for (int s = 0; s < p; ++s) {
        absorbState(s);
        const int64_t u = states_[size_t(s)].header().update;
        updates = s == 0 ? u : std::min(updates, u);
    }
    return async_ ? updates : step;
}

}  // namespace tb
