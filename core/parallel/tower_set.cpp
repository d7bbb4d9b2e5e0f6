#include "parallel/tower_set.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>

#include "backend/registry.hpp"
#include "util/error.hpp"
#include "util/float_mode.hpp"

namespace tb {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Host memory from `pinner` (pinned where it is a GPU backend), freed by it.
Tensor hostTensor(Backend& pinner, int64_t count) {
    float* p = static_cast<float*>(pinner.allocateHost(size_t(count) * sizeof(float)));
    return Tensor(p, Shape{count}, Device{}, [&pinner](float* q) { pinner.deallocateHost(q); });
}
}  // namespace

struct TowerSet::Tower {
    Device device;
    Backend* backend = nullptr;      // shared by the towers of one device
    Stream stream = nullptr;         // this tower's own queue on it
    std::unique_ptr<Network> net;
    std::unique_ptr<Optimizer> opt;  // replicated and averaging: each replica updates itself
    Tensor stats;                    // (3) loss sum, correct, weight-decay loss, on the device
    Tensor hostStats;                // (3) the same in host memory the device can write to
    Tensor inputStage, labelStage;   // (batch, h, w, c), (batch) host staging of the input
    bool sharesHolder = false;       // reads the variables and has its gradients read in place
    Tensor staged;                   // (P) beside the holder: pushed gradients (when not sharing)
    Stream holderStream = nullptr;   // this tower's queue on the holder's backend
    Event marks[5] = {};             // start, pulled, forward done, backward done, pushed
    Graph graph = nullptr;           // one recorded step (GPU towers without dropout)
    int64_t computed = 0;            // steps computed so far (the first runs eagerly)
    TowerPhases phases;
    double lossSum = 0, correct = 0, wd = 0;
    // Per step of the current call (one step; averaging: the local steps up to an average).
    struct Result {
        TowerPhases phases;
        double lossSum = 0, correct = 0, wd = 0;
    };
    std::vector<Result> results;
    std::exception_ptr error;        // the first failure of this call; cleared at the next
    // Set with `error`; other towers read this flag (their reads may race with a late failure),
    // the exception itself only the caller reads, after the step.
    std::atomic<bool> failed{false};
    Backend* holder = nullptr;       // owner of holderStream where it is not `stream`

    // Everything above belongs to `backend` (or the holder's): give it back in dependency order.
    ~Tower() {
        if (!backend) return;
        backend->destroyGraph(graph);
        for (Event e : marks) backend->destroyEvent(e);
        net.reset();
        opt.reset();
        stats = hostStats = inputStage = labelStage = staged = Tensor();
        if (holder && holderStream && holderStream != stream) holder->destroyStream(holderStream);
        backend->destroyStream(stream);
    }
};

Backend& TowerSet::backendFor(const Device& d, int threadsPerTower) {
    // Towers on one GPU share its backend (one allocator, one cuDNN search per shape); CPU
    // towers are virtual devices with their own threads, so each gets a backend of its own.
    if (d.type == DeviceType::Cuda)
        for (const auto& t : towers_)
            if (t->device == d) return *t->backend;
    BackendOptions o;
    o.cpuThreads = threadsPerTower;
    o.allowTf32 = optSettings_.allowTf32;
    backends_.push_back(makeBackend(d, o));
    return *backends_.back();
}

TowerSet::TowerSet(const ModelSpec& spec, const DeploymentPlan& plan, const OptimizerSettings& opt, int threadsPerTower,
                   uint64_t seed)
    : plan_(plan),
      optSettings_(opt),
      threadsPerTower_(threadsPerTower),
      seed_(seed),
      start_(plan.towerCount() + 1),
      done_(plan.towerCount() + 1),
      computed_(plan.towerCount()),
      reduced_(plan.towerCount()) {
    if (plan_.batchPerTower < 1) throw Error("--batch-per-tower: must be at least 1");
    for (const Device& d : plan_.towers) {
        auto t = std::make_unique<Tower>();
        t->device = d;
        t->backend = &backendFor(d, threadsPerTower);
        t->stream = t->backend->createStream();
        t->net = std::make_unique<Network>(spec, *t->backend, plan_.batchPerTower);
        t->stats = t->backend->empty(Shape{3});
        t->hostStats = hostTensor(*t->backend, 3);
        const Dims in = t->net->inputDims();
        t->inputStage = hostTensor(*t->backend, int64_t(plan_.batchPerTower) * in.size());
        t->labelStage = hostTensor(*t->backend, plan_.batchPerTower);  // int32 labels, float-sized slots
        for (Event& e : t->marks) e = t->backend->createEvent();
        towers_.push_back(std::move(t));
    }
    Tower& t0 = *towers_[0];
    paramCount_ = t0.net->paramCount();
    if (paramCount_ == 0) throw Error("--model: " + spec.name + " has no parameters to train");
    const size_t count = size_t(paramCount_), bytes = count * sizeof(float);
    const std::vector<float> init = t0.net->initialParams(seed);
    const bool gpuTowers = t0.device.type == DeviceType::Cuda;

    if (holderBased()) {
        if (plan_.variables == VariablePlacement::Tower) {
            holder_ = towers_[size_t(plan_.variablesTower)]->backend;
            holderParams_ = holder_->empty(Shape{int64_t(count)});
        } else if (!gpuTowers) {
            holder_ = t0.backend;  // CPU towers: the host is tower 0's memory too
            holderParams_ = holder_->empty(Shape{int64_t(count)});
        } else {
            // The seeds' default on GPUs: variables in host memory, pinned so that the towers'
            // pulls and pushes are DMA copies; mean and update run on the CPU.
            backends_.push_back(makeBackend(Device{}, BackendOptions{threadsPerTower}));
            holder_ = backends_.back().get();
            holderParams_ = hostTensor(*t0.backend, int64_t(count));
        }
        for (auto& t : towers_) {
            t->sharesHolder = !plan_.explicitCopies &&
                              (t->backend == holder_ ||
                               (t->device.type == DeviceType::Cpu && holder_->device().type == DeviceType::Cpu));
            t->holder = holder_;
            t->holderStream = t->backend == holder_ && t->sharesHolder ? t->stream : holder_->createStream();
            if (!t->sharesHolder)
                t->staged = holder_->device().type == DeviceType::Cpu ? hostTensor(*t->backend, int64_t(count))
                                                                      : holder_->empty(Shape{int64_t(count)});
        }
        Stream hs = t0.holderStream;
        holder_->copyFromHost(hs, holderParams_.data(), init.data(), bytes);
        if (towers() > 1) meanGrads_ = holder_->empty(Shape{int64_t(count)});
        holderOpt_ = std::make_unique<Optimizer>(*holder_, opt.rule, opt.hyper, opt.schedule, count, hs);
        holder_->synchronize(hs);
    } else {
        // Replicated variables: towers read each other's buffers, so they must share one memory
        // (all CPU towers, or towers on one GPU); between GPUs this is NCCL's work.
        for (const auto& t : towers_)
            if (t->device.type != t0.device.type || (gpuTowers && !(t->device == t0.device)))
                throw Error("--variables replicated: towers on " + t0.device.str() + " and " + t->device.str() +
                            " do not share memory; across GPUs this needs the NCCL all-reduce, which this build "
                            "does not have yet (put all towers on one GPU, or use --variables cpu)");
        if (towers() > 1 || plan_.averaging()) meanGrads_ = t0.backend->empty(Shape{int64_t(count)});
    }
    for (auto& t : towers_) {
        if (holderBased() && plan_.update == UpdateMode::Sync && t->sharesHolder) {
            t->net->bindParams(holderParams_.data());
        } else {
            t->backend->copyFromHost(t->stream, t->net->params(), init.data(), bytes);
            if (!holderBased())
                t->opt = std::make_unique<Optimizer>(*t->backend, opt.rule, opt.hyper, opt.schedule, count, t->stream);
        }
        t->backend->synchronize(t->stream);
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
    // The holder's optimiser and buffers, then the towers, then (as members) the backends.
    holderOpt_.reset();
    holderParams_ = meanGrads_ = Tensor();
    towers_.clear();
}

std::string TowerSet::backendName() const { return towers_[0]->backend->name() + " per tower"; }

void TowerSet::chunk(int i, size_t& begin, size_t& end) const {
    // Chunks of whole cache lines (16 floats), so two towers never write the same line.
    const size_t lines = (size_t(paramCount_) + 15) / 16, n = size_t(towers());
    begin = std::min(size_t(paramCount_), lines * size_t(i) / n * 16);
    end = std::min(size_t(paramCount_), lines * size_t(i + 1) / n * 16);
}

const float* TowerSet::gradientsAtHolder(const Tower& t) const {
    return t.sharesHolder ? t.net->grads() : t.staged.data();
}

void TowerSet::towerLoop(int i) {
    flushDenormalsInTeam(threadsPerTower_);
    for (;;) {
        start_.arrive_and_wait();
        if (quit_) return;
        Tower& t = *towers_[size_t(i)];
        t.error = nullptr;
        t.failed = false;
        t.results.assign(round_.size(), {});
        if (plan_.averaging()) localSteps(i);
        else syncStep(i);
        done_.arrive_and_wait();
    }
}

// Runs f unless the tower has failed already; a failure is kept for step() to rethrow. Towers
// still meet at every barrier of the step, failed or not, so no tower waits for one that left.
template <class F>
void TowerSet::guarded(Tower& t, F&& f) {
    if (t.error) return;
    try {
        f();
    } catch (...) {
        t.error = std::current_exception();
        t.failed = true;
    }
}

bool TowerSet::anyFailed() const {
    return std::any_of(towers_.begin(), towers_.end(), [](const auto& t) { return t->failed.load(); });
}

// Tower i's slice of global batch `k` of this call, through forward and backward.
void TowerSet::computeSlice(Tower& t, int i, size_t k) {
    const Batch& b = *round_[k];
    const int per = plan_.batchPerTower;
    const size_t sample = b.x.size() / size_t(b.n);
    const bool pull = holderBased() && !t.sharesHolder;
    computeGradients(t, i, b.x.data() + size_t(i) * size_t(per) * sample, b.y.data() + size_t(i) * size_t(per), per,
                     uint64_t(step_ + int64_t(k)), pull);
    straggle(t, i);
}

// Keeps what tower t measured for step k of this call.
void TowerSet::keep(Tower& t, size_t k) {
    t.results[k].phases = t.phases;
    t.results[k].lossSum = t.lossSum;
    t.results[k].correct = t.correct;
    t.results[k].wd = t.wd;
}

void TowerSet::syncStep(int i) {
    Tower& t = *towers_[size_t(i)];
    t.phases = {};
    t.phases.dataWait = callerWait_;
    guarded(t, [&] { computeSlice(t, i, 0); });

    auto t0 = Clock::now();
    computed_.arrive_and_wait();  // the synchronisation point: every tower's gradients are ready
    t.phases.wait = since(t0);
    const bool failed = anyFailed();  // the same answer in every tower: read after the barrier

    size_t begin, end;
    chunk(i, begin, end);
    const size_t len = end - begin;
    const int n = towers();
    if (holderBased()) {
        // Mean of the towers' gradients over this tower's chunk, on the holder: the seeds'
        // average_gradients, split across the towers' threads.
        if (!failed) guarded(t, [&] {
            Backend& hb = *holder_;
            Stream hs = t.holderStream;
            t0 = Clock::now();
            const float* grads = gradientsAtHolder(t);
            if (n > 1) {
                float* mean = meanGrads_.data() + begin;
                hb.copy(hs, mean, gradientsAtHolder(*towers_[0]) + begin, len * sizeof(float));
                for (int j = 1; j < n; ++j) hb.axpy(hs, 1.f, gradientsAtHolder(*towers_[size_t(j)]) + begin, mean, len);
                hb.scale(hs, mean, 1.f / float(n), len);
                grads = meanGrads_.data();
            }
            t.phases.reduce += since(t0);
            t0 = Clock::now();
            holderOpt_->applyRange(hs, holderParams_.data(), grads, begin, len, step_);
            hb.synchronize(hs);
            t.phases.apply = since(t0);
        });
        keep(t, 0);
        return;
    }
    // All-reduce among replicas sharing one memory: each tower reduces its chunk into the mean,
    // then every replica applies the whole mean to its own copy.
    Backend& be = *t.backend;
    const float* grads = n == 1 ? t.net->grads() : meanGrads_.data();
    if (!failed && n > 1) guarded(t, [&] {
        t0 = Clock::now();
        float* mean = meanGrads_.data() + begin;
        be.copy(t.stream, mean, towers_[0]->net->grads() + begin, len * sizeof(float));
        for (int j = 1; j < n; ++j) be.axpy(t.stream, 1.f, towers_[size_t(j)]->net->grads() + begin, mean, len);
        be.scale(t.stream, mean, 1.f / float(n), len);
        be.synchronize(t.stream);
        t.phases.reduce += since(t0);
    });
    t0 = Clock::now();
    reduced_.arrive_and_wait();  // all-reduce complete: every replica sees the whole mean
    t.phases.wait += since(t0);
    if (!failed) guarded(t, [&] {
        t0 = Clock::now();
        t.opt->apply(t.stream, t.net->params(), grads, step_);
        be.synchronize(t.stream);
        t.phases.apply = since(t0);
    });
    keep(t, 0);
}

// Averaging: each replica takes its local steps on its slices of this call's batches without
// meeting the others (a straggler costs them nothing until the average), then, where the last
// of them completes K steps, the replicas meet and are all-reduced to their mean.
void TowerSet::localSteps(int i) {
    Tower& t = *towers_[size_t(i)];
    Backend& be = *t.backend;
    const size_t count = round_.size();
    for (size_t k = 0; k < count; ++k) {
        t.phases = {};
        t.phases.dataWait = k == 0 ? callerWait_ : 0;
        guarded(t, [&] {
            computeSlice(t, i, k);
            const auto t0 = Clock::now();
            t.opt->apply(t.stream, t.net->params(), t.net->grads(), step_ + int64_t(k));
            be.synchronize(t.stream);
            t.phases.apply = since(t0);
        });
        keep(t, k);
    }
    if ((step_ + int64_t(count)) % plan_.averageEvery != 0) return;
    TowerPhases& last = t.results.back().phases;
    auto t0 = Clock::now();
    reduced_.arrive_and_wait();  // every replica has taken its local steps
    last.wait += since(t0);
    if (!anyFailed()) guarded(t, [&] {
        size_t begin, end;
        chunk(i, begin, end);
        const size_t len = end - begin;
        const int n = towers();
        t0 = Clock::now();
        float* mean = meanGrads_.data() + begin;
        be.copy(t.stream, mean, towers_[0]->net->params() + begin, len * sizeof(float));
        for (int j = 1; j < n; ++j) be.axpy(t.stream, 1.f, towers_[size_t(j)]->net->params() + begin, mean, len);
        be.scale(t.stream, mean, 1.f / float(n), len);
        for (int j = 0; j < n; ++j)
            be.copy(t.stream, towers_[size_t(j)]->net->params() + begin, mean, len * sizeof(float));
        be.synchronize(t.stream);
        last.reduce += since(t0);
    });
    t0 = Clock::now();
    reduced_.arrive_and_wait();  // every replica holds the average again
    last.wait += since(t0);
}

// The whole of a tower's step as device work on its stream: pull the variables (towers with their
// own copy), the input from the host stage, forward, backward, push the gradients beside the
// holder, the loss statistics to the host. Events between the phases time them on the device.
void TowerSet::enqueueCompute(Tower& t, int n, uint64_t seed, bool pull) {
    Backend& be = *t.backend;
    Network& net = *t.net;
    const size_t bytes = size_t(paramCount_) * sizeof(float);
    be.recordEvent(t.marks[0], t.stream);
    if (pull) be.copy(t.stream, net.params(), holderParams_.data(), bytes);
    be.recordEvent(t.marks[1], t.stream);
    be.copyFromHost(t.stream, net.input(), t.inputStage.data(), size_t(n) * size_t(net.inputDims().size()) * 4);
    be.copyFromHost(t.stream, net.labels(), t.labelStage.data(), size_t(n) * sizeof(int32_t));
    be.fill(t.stream, t.stats.data(), 0.f, 3);
    net.forward(t.stream, true, seed, n, t.stats.data());
    be.recordEvent(t.marks[2], t.stream);
    net.backward(t.stream);
    be.recordEvent(t.marks[3], t.stream);
    if (!t.sharesHolder && holderBased()) be.copy(t.stream, t.staged.data(), net.grads(), bytes);
    be.copyToHost(t.stream, t.hostStats.data(), t.stats.data(), 3 * sizeof(float));
    be.recordEvent(t.marks[4], t.stream);
}

void TowerSet::computeGradients(Tower& t, int i, const float* x, const int32_t* y, int n, uint64_t step, bool pull) {
    Backend& be = *t.backend;
    Network& net = *t.net;
    std::memcpy(t.inputStage.data(), x, size_t(n) * size_t(net.inputDims().size()) * sizeof(float));
    std::memcpy(t.labelStage.data(), y, size_t(n) * sizeof(int32_t));
    // Dropout masks: a function of the run's seed, the step and the tower.
    const uint64_t stepSeed = (seed_ + 1) * 0x9E3779B97F4A7C15ull ^ (step * 7919ull + uint64_t(i) * 1000003ull);
    // GPUs: the second step is recorded as a graph and every later one replays it, one launch
    // instead of dozens (these models are small enough to be launch-bound). The first runs
    // eagerly so that one-time set-up stays out of the recording. Dropout draws a new mask
    // each step and the last batch of a pass may be short, so those steps are not replayed.
    const bool replayable = be.canCapture() && n == plan_.batchPerTower && !net.drawsRandomNumbers();
    if (replayable && t.computed >= 1) {
        if (!t.graph) {
            be.beginCapture(t.stream);
            try {
                enqueueCompute(t, n, stepSeed, pull);
            } catch (...) {
                be.endCapture(t.stream);
                throw;
            }
            t.graph = be.endCapture(t.stream);
        }
        be.launchGraph(t.graph, t.stream);
    } else {
        enqueueCompute(t, n, stepSeed, pull);
    }
    ++t.computed;
    be.synchronize(t.stream);
    t.phases.reduce += be.elapsedSeconds(t.marks[0], t.marks[1]) + be.elapsedSeconds(t.marks[3], t.marks[4]);
    t.phases.forward = be.elapsedSeconds(t.marks[1], t.marks[2]);
    t.phases.backward = be.elapsedSeconds(t.marks[2], t.marks[3]);
    const float* host = t.hostStats.data();
    t.lossSum = host[0];
    t.correct = host[1];
    t.wd = host[2];
}

void TowerSet::straggle(Tower& t, int i) {
    if (plan_.slowdown.empty() || plan_.slowdown[size_t(i)] <= 1.0) return;
    // A slower device: the same work takes `factor` times as long.
    const double extra = (plan_.slowdown[size_t(i)] - 1.0) * (t.phases.forward + t.phases.backward);
    std::this_thread::sleep_for(std::chrono::duration<double>(extra));
    t.phases.straggle = extra;
}

std::vector<TowerStep> TowerSet::steps(const std::vector<const Batch*>& batches, int64_t first, double dataWait) {
    const int n = towers();
    if (batches.empty()) return {};
    if (batches.size() > 1 && !plan_.averaging())
        throw Error("several steps at once are for local steps between averages (--average-every)");
    for (const Batch* b : batches)
        if (b->n != n * plan_.batchPerTower)
            throw Error("a global batch of " + std::to_string(b->n) + " does not split into " + std::to_string(n) +
                        " towers of " + std::to_string(plan_.batchPerTower));
    if (evalView_) {  // evaluation looked at the replicas' mean through tower 0: back to its own copy
        towers_[0]->net->viewParams(nullptr);
        evalView_ = false;
    }
    round_ = batches;
    step_ = first;
    callerWait_ = dataWait;
    start_.arrive_and_wait();
    done_.arrive_and_wait();
    for (auto& t : towers_)
        if (t->error) std::rethrow_exception(t->error);
    const int64_t bytes = paramCount_ * int64_t(sizeof(float));
    std::vector<TowerStep> out(batches.size());
    for (size_t k = 0; k < batches.size(); ++k) {
        TowerStep& r = out[k];
        const int64_t step = first + int64_t(k);
        r.update = step + 1;
        r.lr = optSettings_.schedule.at(step);
        for (auto& t : towers_) {
            const Tower::Result& res = t->results[k];
            r.lossSum.push_back(res.lossSum);
            r.correct.push_back(res.correct);
            r.examples.push_back(plan_.batchPerTower);
            r.phases.push_back(res.phases);
        }
        r.weightDecayLoss = towers_[0]->results[k].wd;
        if (holderBased()) {
            // Every tower's gradients read by the holder's mean; towers with their own copy of
            // the variables also pull them each step.
            for (auto& t : towers_) r.bytesMoved += (t->sharesHolder ? n > 1 : 2) * bytes;
        } else if (n > 1 && (!plan_.averaging() || (step + 1) % plan_.averageEvery == 0)) {
            r.bytesMoved = 2 * (n - 1) * bytes;  // all-reduce / averaging: ring-equivalent bus bytes
        }
    }
    return out;
}

TowerStep TowerSet::step(const Batch& global, int64_t step, double dataWait) {
    return steps({&global}, step, dataWait).front();
}

void TowerSet::averageNow() {
    if (!plan_.averaging()) return;
    Tower& t0 = *towers_[0];
    if (evalView_) {
        t0.net->viewParams(nullptr);
        evalView_ = false;
    }
    float* mean = evalParams();
    meanOfReplicas(mean);
    for (auto& t : towers_) t0.backend->copy(t0.stream, t->net->params(), mean, size_t(paramCount_) * sizeof(float));
    t0.backend->synchronize(t0.stream);
}

void TowerSet::runAsync(int64_t updates, const std::function<void(Batch&)>& nextBatch, RunControl& control,
                        const std::function<void(const TowerStep&)>& onUpdate) {
    std::mutex dataMutex, reportMutex;
    std::atomic<int64_t> applied{0}, claimed{0};  // claimed: updates a tower has started on
    std::exception_ptr failure;
    auto body = [&](int i) {
        flushDenormalsInTeam(threadsPerTower_);
        Tower& t = *towers_[size_t(i)];
        Backend& be = *t.backend;
        Backend& hb = *holder_;
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
                // Each copy completes under its shard's lock, so no push lands half-way through.
                t0 = Clock::now();
                const int64_t pulledAt = applied.load();
                for (int s = 0; s < plan_.psShards; ++s) {
                    std::lock_guard lock(*shardLocks_[size_t(s)]);
                    for (auto [off, len] : shards_[size_t(s)])
                        be.copy(t.stream, t.net->params() + off, holderParams_.data() + off, len * sizeof(float));
                    be.synchronize(t.stream);
                }
                t.phases.reduce = since(t0);
                computeGradients(t, i, b.x.data(), b.y.data(), std::min(b.n, plan_.batchPerTower), uint64_t(pulledAt),
                                 false);
                straggle(t, i);
                // Push: the holder applies this tower's gradients at once, shard by shard; the
                // lock covers the update's completion, not just its enqueueing.
                t0 = Clock::now();
                float lr = 0;
                const int64_t at = applied.load();
                const float* grads = gradientsAtHolder(t);
                for (int s = 0; s < plan_.psShards; ++s) {
                    std::lock_guard lock(*shardLocks_[size_t(s)]);
                    for (auto [off, len] : shards_[size_t(s)])
                        lr = holderOpt_->applyRange(t.holderStream, holderParams_.data(), grads, off, len, at);
                    hb.synchronize(t.holderStream);
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
    // Tower 0 holds its last pull when it keeps its own copy (async, or not in the holder's
    // memory): refresh it from the holder.
    if (holderBased() && (plan_.update == UpdateMode::Async || !t0.sharesHolder)) {
        t0.backend->copy(t0.stream, t0.net->params(), holderParams_.data(), size_t(paramCount_) * sizeof(float));
        t0.backend->synchronize(t0.stream);
    }
    // Averaging: the model is the replicas' mean. Tower 0 looks at a copy of it until the next
    // step, so evaluating changes nothing in training.
    if (plan_.averaging()) {
        meanOfReplicas(evalParams());
        t0.net->viewParams(evalParams_.data());
        evalView_ = true;
    }
    return *t0.net;
}

float* TowerSet::evalParams() {
    if (evalParams_.empty()) evalParams_ = towers_[0]->backend->empty(Shape{paramCount_});
    return evalParams_.data();
}

void TowerSet::meanOfReplicas(float* out) {
    Tower& t0 = *towers_[0];
    Backend& be = *t0.backend;
    const size_t count = size_t(paramCount_);
    if (evalView_) t0.net->viewParams(nullptr);  // the replica's own parameters, not the last mean
    be.copy(t0.stream, out, t0.net->params(), count * sizeof(float));
    for (size_t j = 1; j < towers_.size(); ++j) be.axpy(t0.stream, 1.f, towers_[j]->net->params(), out, count);
    be.scale(t0.stream, out, 1.f / float(towers()), count);
    be.synchronize(t0.stream);
    if (evalView_) t0.net->viewParams(evalParams_.data());
}

Stream TowerSet::evalStream() { return towers_[0]->stream; }

VariablesView TowerSet::variables() {
    if (holderBased()) return {holder_, towers_[0]->holderStream, holderParams_.data()};
    Tower& t0 = *towers_[0];
    if (plan_.averaging()) {
        meanOfReplicas(evalParams());
        return {t0.backend, t0.stream, evalParams_.data()};
    }
    return {t0.backend, t0.stream, t0.net->params()};
}

std::vector<DeviceMemoryUse> TowerSet::deviceMemory() const {
    std::vector<DeviceMemoryUse> out;
    for (const auto& b : backends_)
        if (b->device().type == DeviceType::Cuda) out.push_back({b->device(), b->allocatorStats()});
    return out;
}

size_t TowerSet::optimizerSlotBytes() const {
    size_t total = holderOpt_ ? holderOpt_->slotBytes() : 0;
    for (const auto& t : towers_)
        if (t->opt) total += t->opt->slotBytes();
    return total;
}

}  // namespace tb
