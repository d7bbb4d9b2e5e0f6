#include "parallel/tower_set.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>

#include "util/error.hpp"

namespace tb {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

struct TowerSet::Tower {
    Device device;
    std::unique_ptr<Backend> backend;
    Stream stream = nullptr;
    std::unique_ptr<Network> net;
    std::unique_ptr<Optimizer> opt;  // replicated and averaging: each replica updates itself
    Tensor stats;                    // (3) loss sum, correct, weight-decay loss
    TowerPhases phases;
    double lossSum = 0, correct = 0, wd = 0;
    std::exception_ptr error;
};

TowerSet::TowerSet(const ModelSpec& spec, const DeploymentPlan& plan, const OptimizerSettings& opt, int threadsPerTower,
                   uint64_t seed)
    : plan_(plan),
      optSettings_(opt),
      start_(plan.towerCount() + 1),
      done_(plan.towerCount() + 1),
      computed_(plan.towerCount()),
      reduced_(plan.towerCount()) {
    if (plan_.batchPerTower < 1) throw Error("--batch-per-tower: must be at least 1");
    for (const Device& d : plan_.towers) {
        if (d.type != DeviceType::Cpu)
            throw Error("--towers: " + d.str() + " needs the CUDA backend, which this build does not have");
        auto t = std::make_unique<Tower>();
        t->device = d;
        t->backend = makeCpuBackend(threadsPerTower);
        t->stream = t->backend->createStream();
        t->net = std::make_unique<Network>(spec, *t->backend, plan_.batchPerTower);
        t->stats = t->backend->empty(Shape{3});
        towers_.push_back(std::move(t));
    }
    Tower& t0 = *towers_[0];
    paramCount_ = t0.net->paramCount();
    const size_t count = size_t(paramCount_), bytes = count * sizeof(float);
    const std::vector<float> init = t0.net->initialParams(seed);
    // CPU towers share host memory with the variables' holder: with variables on the CPU each
    // replica reads them in place, as TensorFlow does for towers on the CPU, so nothing is copied.
    holderParams_ = t0.backend->empty(Shape{int64_t(count)});
    t0.backend->copyFromHost(t0.stream, holderParams_.data(), init.data(), bytes);
    if (towers() > 1 || plan_.averaging()) meanGrads_ = t0.backend->empty(Shape{int64_t(count)});  // the mean
    if (holderBased() || plan_.update == UpdateMode::Async)
        holderOpt_ = std::make_unique<Optimizer>(*t0.backend, opt.rule, opt.hyper, opt.schedule, count);
    for (auto& t : towers_) {
        if (holderBased() && plan_.update == UpdateMode::Sync) {
            t->net->bindParams(holderParams_.data());
        } else {
            t->backend->copyFromHost(t->stream, t->net->params(), init.data(), bytes);
            if (!holderBased())
                t->opt = std::make_unique<Optimizer>(*t->backend, opt.rule, opt.hyper, opt.schedule, count);
        }
    }
    // Parameter-server shards: whole variables dealt round-robin, as model_deploy's device chooser.
    shards_.resize(size_t(plan_.psShards));
    const auto& infos = t0.net->paramInfos();
    for (size_t v = 0; v < infos.size(); ++v)
        shards_[v % shards_.size()].emplace_back(size_t(t0.net->paramOffsets()[v]), size_t(infos[v].shape.numel()));
    for (int s = 0; s < plan_.psShards; ++s) shardLocks_.push_back(std::make_unique<std::mutex>());
    for (int i = 0; i < towers(); ++i) threads_.emplace_back([this, i] { towerLoop(i); });
}

TowerSet::~TowerSet() {
    quit_ = true;
    start_.arrive_and_wait();  // the barrier publishes quit_ to the towers
    for (auto& th : threads_) th.join();
    for (auto& t : towers_) t->backend->destroyStream(t->stream);
}

std::string TowerSet::backendName() const { return towers_[0]->backend->name() + " per tower"; }

void TowerSet::chunk(int i, size_t& begin, size_t& end) const {
    // Chunks of whole cache lines (16 floats), so two towers never write the same line.
    const size_t lines = (size_t(paramCount_) + 15) / 16, n = size_t(towers());
    begin = std::min(size_t(paramCount_), lines * size_t(i) / n * 16);
    end = std::min(size_t(paramCount_), lines * size_t(i + 1) / n * 16);
}

void TowerSet::towerLoop(int i) {
    for (;;) {
        start_.arrive_and_wait();
        if (quit_) return;
        syncStep(i);
        done_.arrive_and_wait();
    }
}

void TowerSet::computeGradients(Tower& t, int i, const float* x, const int32_t* y, int n, uint64_t seed) {
    Backend& be = *t.backend;
    Network& net = *t.net;
    const Dims d = net.inputDims();
    try {
        be.copyFromHost(t.stream, net.input(), x, size_t(n) * size_t(d.size()) * sizeof(float));
        be.copyFromHost(t.stream, net.labels(), y, size_t(n) * sizeof(int32_t));
        be.fill(t.stream, t.stats.data(), 0.f, 3);
        auto t0 = Clock::now();
        net.forward(t.stream, true, seed * 7919ull + uint64_t(i) * 1000003ull, n, t.stats.data());
        be.synchronize(t.stream);
        t.phases.forward = since(t0);
        t0 = Clock::now();
        net.backward(t.stream);
        float host[3];
        be.copyToHost(t.stream, host, t.stats.data(), sizeof(host));
        be.synchronize(t.stream);
        t.phases.backward = since(t0);
        t.lossSum = host[0];
        t.correct = host[1];
        t.wd = host[2];
    } catch (...) {
        t.error = std::current_exception();
    }
}

void TowerSet::straggle(Tower& t, int i) {
    if (plan_.slowdown.empty() || plan_.slowdown[size_t(i)] <= 1.0) return;
    // A slower device: the same work takes `factor` times as long.
    const double extra = (plan_.slowdown[size_t(i)] - 1.0) * (t.phases.forward + t.phases.backward);
    std::this_thread::sleep_for(std::chrono::duration<double>(extra));
    t.phases.straggle = extra;
}

void TowerSet::syncStep(int i) {
    Tower& t = *towers_[size_t(i)];
    Backend& be = *t.backend;
    t.phases = {};
    t.phases.dataWait = callerWait_;
    const Batch& b = *batch_;
    const int per = plan_.batchPerTower;
    const size_t sample = b.x.size() / size_t(b.n);
    computeGradients(t, i, b.x.data() + size_t(i) * size_t(per) * sample, b.y.data() + size_t(i) * size_t(per), per,
                     uint64_t(step_));
    straggle(t, i);

    auto t0 = Clock::now();
    computed_.arrive_and_wait();  // the synchronisation point: every tower's gradients are ready
    t.phases.wait = since(t0);

    size_t begin, end;
    chunk(i, begin, end);
    const size_t len = end - begin;
    const int n = towers();
    if (!plan_.averaging()) {
        // Mean of the towers' gradients over this tower's chunk: the holder's reduction, split
        // across the towers' threads (on GPUs: NCCL's ncclAvg, or the copies to the CPU).
        t0 = Clock::now();
        // One tower: its gradients are the mean already.
        const float* grads = n == 1 ? t.net->grads() : meanGrads_.data();
        if (n > 1) {
            float* mean = meanGrads_.data() + begin;
            be.copy(t.stream, mean, towers_[0]->net->grads() + begin, len * sizeof(float));
            for (int j = 1; j < n; ++j) be.axpy(t.stream, 1.f, towers_[size_t(j)]->net->grads() + begin, mean, len);
            be.scale(t.stream, mean, 1.f / float(n), len);
        }
        t.phases.reduce = since(t0);
        t0 = Clock::now();
        if (holderBased()) {
            holderOpt_->applyRange(t.stream, holderParams_.data(), grads, begin, len, step_);
            t.phases.apply = since(t0);
        } else {
            reduced_.arrive_and_wait();  // all-reduce complete: every replica sees the whole mean
            t.phases.wait += since(t0);
            t0 = Clock::now();
            t.opt->apply(t.stream, t.net->params(), grads, step_);
            t.phases.apply = since(t0);
        }
    } else {
        t0 = Clock::now();
        t.opt->apply(t.stream, t.net->params(), t.net->grads(), step_);
        t.phases.apply = since(t0);
        if ((step_ + 1) % plan_.averageEvery == 0) {
            t0 = Clock::now();
            reduced_.arrive_and_wait();  // every replica has taken its local step
            t.phases.wait += since(t0);
            t0 = Clock::now();
            float* mean = meanGrads_.data() + begin;
            be.copy(t.stream, mean, towers_[0]->net->params() + begin, len * sizeof(float));
            for (int j = 1; j < n; ++j) be.axpy(t.stream, 1.f, towers_[size_t(j)]->net->params() + begin, mean, len);
            be.scale(t.stream, mean, 1.f / float(n), len);
            for (int j = 0; j < n; ++j) be.copy(t.stream, towers_[size_t(j)]->net->params() + begin, mean, len * sizeof(float));
            t.phases.reduce = since(t0);
            t0 = Clock::now();
            reduced_.arrive_and_wait();  // every replica holds the average again
            t.phases.wait += since(t0);
        }
    }
    be.synchronize(t.stream);
}

TowerStep TowerSet::step(const Batch& global, int64_t step, double dataWait) {
    const int n = towers();
    if (global.n != n * plan_.batchPerTower)
        throw Error("a global batch of " + std::to_string(global.n) + " does not split into " + std::to_string(n) +
                    " towers of " + std::to_string(plan_.batchPerTower));
    batch_ = &global;
    step_ = step;
    callerWait_ = dataWait;
    start_.arrive_and_wait();
    done_.arrive_and_wait();
    TowerStep r;
    r.update = step + 1;
    r.lr = optSettings_.schedule.at(step);
    const int64_t bytes = paramCount_ * int64_t(sizeof(float));
    for (auto& t : towers_) {
        if (t->error) std::rethrow_exception(t->error);
        r.lossSum.push_back(t->lossSum);
        r.correct.push_back(t->correct);
        r.examples.push_back(plan_.batchPerTower);
        r.phases.push_back(t->phases);
    }
    r.weightDecayLoss = towers_[0]->wd;
    if (n > 1) {
        if (holderBased()) r.bytesMoved = n * bytes;  // every tower's gradients read by the holder's mean
        else if (!plan_.averaging() || (step + 1) % plan_.averageEvery == 0)
            r.bytesMoved = 2 * (n - 1) * bytes;  // all-reduce / averaging: ring-equivalent bus bytes
    }
    return r;
}

void TowerSet::averageNow() {
    if (!plan_.averaging()) return;
    Tower& t0 = *towers_[0];
    const size_t count = size_t(paramCount_);
    float* mean = meanGrads_.data();
    t0.backend->copy(t0.stream, mean, t0.net->params(), count * sizeof(float));
    for (size_t j = 1; j < towers_.size(); ++j) t0.backend->axpy(t0.stream, 1.f, towers_[j]->net->params(), mean, count);
    t0.backend->scale(t0.stream, mean, 1.f / float(towers()), count);
    for (auto& t : towers_) t0.backend->copy(t0.stream, t->net->params(), mean, count * sizeof(float));
    t0.backend->synchronize(t0.stream);
}

void TowerSet::runAsync(int64_t updates, const std::function<void(Batch&)>& nextBatch, RunControl& control,
                        const std::function<void(const TowerStep&)>& onUpdate) {
    std::mutex dataMutex, reportMutex;
    std::atomic<int64_t> applied{0}, claimed{0};  // claimed: updates a tower has started on
    std::exception_ptr failure;
    auto body = [&](int i) {
        Tower& t = *towers_[size_t(i)];
        Backend& be = *t.backend;
        Batch b;
        try {
            while (control.awaitStep() && claimed.fetch_add(1) < updates) {
                t.phases = {};
                auto t0 = Clock::now();
                {
                    std::lock_guard lock(dataMutex);
                    nextBatch(b);
                }
                t.phases.dataWait = since(t0);
                // Pull: copy the variables shard by shard; the version says how fresh they are.
                t0 = Clock::now();
                const int64_t pulledAt = applied.load();
                for (int s = 0; s < plan_.psShards; ++s) {
                    std::lock_guard lock(*shardLocks_[size_t(s)]);
                    for (auto [off, len] : shards_[size_t(s)])
                        be.copy(t.stream, t.net->params() + off, holderParams_.data() + off, len * sizeof(float));
                }
                t.phases.reduce = since(t0);
                computeGradients(t, i, b.x.data(), b.y.data(), std::min(b.n, plan_.batchPerTower), uint64_t(pulledAt));
                if (t.error) std::rethrow_exception(t.error);
                straggle(t, i);
                // Push: the holder applies this tower's gradients at once, shard by shard.
                t0 = Clock::now();
                float lr = 0;
                const int64_t at = applied.load();
                for (int s = 0; s < plan_.psShards; ++s) {
                    std::lock_guard lock(*shardLocks_[size_t(s)]);
                    for (auto [off, len] : shards_[size_t(s)])
                        lr = holderOpt_->applyRange(t.stream, holderParams_.data(), t.net->grads(), off, len, at);
                }
                t.phases.apply = since(t0);
                const int64_t u = applied.fetch_add(1) + 1;
                TowerStep r;
                r.update = u;
                r.lr = lr;
                r.pusher = i;
                r.staleness = u - 1 - pulledAt;  // updates others applied between this pull and push
                r.lossSum.assign(towers_.size(), std::nan(""));
                r.correct.assign(towers_.size(), std::nan(""));
                r.examples.assign(towers_.size(), 0);
                r.phases.assign(towers_.size(), TowerPhases{});
                r.lossSum[size_t(i)] = t.lossSum;
                r.correct[size_t(i)] = t.correct;
                r.examples[size_t(i)] = plan_.batchPerTower;
                r.phases[size_t(i)] = t.phases;
                r.weightDecayLoss = t.wd;
                r.bytesMoved = 2 * paramCount_ * int64_t(sizeof(float));  // pull the variables, push the gradients
                std::lock_guard lock(reportMutex);
                onUpdate(r);
            }
        } catch (...) {
            std::lock_guard lock(reportMutex);
            if (!failure) failure = std::current_exception();
            control.stop();
        }
    };
    std::vector<std::thread> threads;
    for (int i = 0; i < towers(); ++i) threads.emplace_back(body, i);
    for (auto& th : threads) th.join();
    if (failure) std::rethrow_exception(failure);
}

Network& TowerSet::evalNetwork() {
    Tower& t0 = *towers_[0];
    if (holderBased() && plan_.update == UpdateMode::Async)  // tower 0 holds its last pull: refresh it
        t0.backend->copy(t0.stream, t0.net->params(), holderParams_.data(), size_t(paramCount_) * sizeof(float));
    return *t0.net;
}

Stream TowerSet::evalStream() { return towers_[0]->stream; }

}  // namespace tb
