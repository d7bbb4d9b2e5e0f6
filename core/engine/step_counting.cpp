#include "engine/step_counting.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tb {

namespace {

// One tower's metrics as the kTowerReportFloats floats that cross between processes (in the vote;
// relayed by the first server for async workers), and back.
void packTower(const TowerMetrics& x, float* f) {
    const TowerPhases& p = x.phases;
    const double fields[kTowerReportFloats] = {x.loss,   x.accuracy, p.dataWait, p.forward,  p.backward,
                                               p.reduce, p.wait,     p.apply,    p.straggle, x.busyFraction};
    std::copy(fields, fields + kTowerReportFloats, f);
}
TowerMetrics unpackTower(const float* f) {
    TowerMetrics x;
    x.loss = f[0], x.accuracy = f[1], x.busyFraction = f[9];
    x.phases = {f[2], f[3], f[4], f[5], f[6], f[7], f[8]};
    return x;
}

// The vote: a sum in which each process fills its own slots (4 + workers x towers x 10 floats).
// `worker`: this process's index among the workers (-1: a parameter server, or a stage process
// other than the chief, which fills none);
// `counted`: the group's byte count after the previous vote (the votes' own are not counted); the
// bytes of a call's collectives go to its last step (`lastOfCall`: averaging's round ends there).
bool vote(ProcessGroup& processes, StepMetrics& m, bool stopHere, int64_t& counted, int worker, int workers, int towers,
          bool lastOfCall) {
    const int64_t before = processes.bytesMoved();
    m.processBytes = lastOfCall ? before - counted : 0;
    std::vector<float> v(4 + size_t(workers) * size_t(towers) * kTowerReportFloats, 0.f);
    if (worker >= 0) v[0] = float(m.loss * m.examples), v[1] = float(m.accuracy * m.examples), v[2] = float(m.examples);
    v[3] = stopHere ? 1.f : 0.f;
    for (size_t t = 0; worker >= 0 && t < m.towers.size() && t < size_t(towers); ++t)
        packTower(m.towers[t], v.data() + 4 + (size_t(worker) * towers + t) * kTowerReportFloats);
    processes.allReduce(0, v.data(), v.data(), v.size(), ReduceOp::Sum);
    if (v[2] > 0) {
        m.examples = int(std::lround(v[2]));
        m.loss = v[0] / v[2];
        m.accuracy = v[1] / v[2];
        m.examplesPerSec = m.stepSeconds > 0 ? m.examples / m.stepSeconds : 0;
    }
    m.towers.clear();
    for (size_t i = 0; i < size_t(workers) * size_t(towers); ++i)
        m.towers.push_back(unpackTower(v.data() + 4 + i * kTowerReportFloats));
    counted = lastOfCall ? processes.bytesMoved() : counted + (processes.bytesMoved() - before);
    return v[3] > 0;
}

class Alone final : public StepCounting {
public:
    explicit Alone(RunControl& control) : control_(control) {}
    bool goOn() override { return control_.awaitStep(); }
    bool count(const TowerStep&, StepMetrics&, bool, int64_t& step) override {
        ++step;
        return true;
    }

private:
    RunControl& control_;
};

class InVote final : public StepCounting {
public:
    InVote(const ProcessRoles& roles, RunControl& control, int towers)
        : processes_(*roles.group), control_(control), worker_(roles.reportingWorker()), workers_(roles.workers),
          towers_(towers) {}
    bool goOn() override {
        if (!voted_) stop_ = processes_.any(control_.stopped()), voted_ = true;  // a stop before the first step
        return !stop_;
    }
    bool count(const TowerStep&, StepMetrics& m, bool lastOfCall, int64_t& step) override {
        stop_ = vote(processes_, m, control_.stopped(), counted_, worker_, workers_, towers_, lastOfCall) || stop_;
        ++step;
        return true;
    }

private:
    ProcessGroup& processes_;
    RunControl& control_;
    int worker_, workers_, towers_;
    bool voted_ = false, stop_ = false;
    int64_t counted_ = 0;
};

class ByTheServers final : public StepCounting {
public:
    ByTheServers(const ProcessRoles& roles, TrainingEngine& towers, RunControl& control, int perStep)
        : processes_(*roles.group), servers_(*towers.servers()), control_(control), worker_(roles.worker()),
          perStep_(perStep) {}
    bool goOn() override {
        if (!voted_) stop_ = processes_.any(control_.stopped()), voted_ = true;  // with the servers
        if (stop_) return false;
        if (control_.stopped()) servers_.askToStop();
        return true;
    }
    bool count(const TowerStep& r, StepMetrics& m, bool, int64_t& step) override {
        stop_ = r.last;
        if (!r.applied) {  // pushed after the run's last update: not part of it
            step = r.update;
            return false;
        }
        m.processBytes = processes_.bytesMoved() - counted_;
        counted_ = processes_.bytesMoved();
        withEveryWorkersTowers(m, r.towerReports);
        // The run's examples/sec: every worker's updates since this one's previous push.
        m.examplesPerSec = m.stepSeconds > 0 ? double(r.update - step) * perStep_ / m.stepSeconds : 0;
        step = r.update;
        return true;
    }

private:
    // This process's towers' metrics go with its next push; the step line gets every worker's towers
    // as the first server last relayed them: each worker's of its previous push, this process's own
    // as they are now; a worker not heard from yet shows no loss and no time.
    void withEveryWorkersTowers(StepMetrics& m, const std::vector<float>& reports) {
        const size_t n = m.towers.size();
        std::vector<float> own(n * kTowerReportFloats);
        for (size_t t = 0; t < n; ++t) packTower(m.towers[t], own.data() + t * kTowerReportFloats);
        servers_.setTowerReport(own);
        std::vector<TowerMetrics> every;
        for (size_t i = 0; n > 0 && i < reports.size() / kTowerReportFloats; ++i) {
            const float* f = reports.data() + i * kTowerReportFloats;
            if (i / n == size_t(worker_)) every.push_back(m.towers[i % n]);
            else if (std::isnan(f[3])) every.push_back({std::nan(""), std::nan(""), {}, 0, true});  // its forward time
            else every.push_back(unpackTower(f)), every.back().relayed = true;
        }
        if (!every.empty()) m.towers = std::move(every);
    }

    ProcessGroup& processes_;
    ServerConnection& servers_;
    RunControl& control_;
    int worker_, perStep_;
    bool voted_ = false, stop_ = false;
    int64_t counted_ = 0;
};

}  // namespace

std::unique_ptr<StepCounting> StepCounting::make(const ProcessRoles& roles, TrainingEngine& towers, RunControl& control,
                                                 int perStep) {
    if (!roles.group) return std::make_unique<Alone>(control);
    if (ServerConnection* s = towers.servers(); s && s->async())
        return std::make_unique<ByTheServers>(roles, towers, control, perStep);
    return std::make_unique<InVote>(roles, control, towers.towers());
}

bool serverVote(ProcessGroup& processes, int workers, int towers, int64_t& counted) {
    StepMetrics none;
    return vote(processes, none, false, counted, -1, workers, towers, true);
}

}  // namespace tb
