#include "parallel/tower_set.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>

#include "backend/registry.hpp"
#include "util/error.hpp"
#include "util/compute_thread.hpp"
#include "util/elapsed.hpp"

namespace tb {

namespace {
using Clock = std::chrono::steady_clock;

// The host as the variables' holder: a parameter server of its own, not one of the CPU towers.
constexpr Device kHostHolder{DeviceType::Cpu, -1};

// Host memory from `pinner` (pinned where it is a GPU backend), freed by it.
Tensor hostTensor(Backend& pinner, int64_t count) {
    float* p = static_cast<float*>(pinner.allocateHost(size_t(count) * sizeof(float)));
    return Tensor(p, Shape{count}, Device{}, [&pinner](float* q) { pinner.deallocateHost(q); });
}
}  // namespace

// What one step in flight writes for the host to read: without a report lag one step is, and
// its slot is read as soon as the step is done; with a lag of L, L + 1 steps (slots used in turn).
struct TowerSet::StepSlot {
    Tensor hostStats;                // (3) loss sum, correct, weight-decay loss, where the device copies them
    // start, forward done, backward done, statistics copied, update applied (report lag only: the
    // update is then part of the step, timed on the device; otherwise the strategy applies it and
    // the host times it).
    Event marks[5] = {};
    Graph graph = nullptr;           // the step recorded with this slot's marks and statistics
};

struct TowerSet::Tower {
    Device device;
    Backend* backend = nullptr;      // shared by the towers of one device
    Stream stream = nullptr;         // this tower's own queue on it
    std::unique_ptr<Network> net;
    Tensor stats;                    // (3) loss sum, correct, weight-decay loss, on the device
    std::vector<StepSlot> slots;     // (1 + report lag)
    int slot = 0;                    // the slot of the step computed last
    // The input, double-buffered: the host writes a slice into one pinned pair while the other
    // may still be crossing to the device. On GPUs the copy stream moves it on into the device
    // stage while this tower's stream still computes the step before, and a step begins by
    // copying the stage into the network's input (device to device: microseconds), so the trip
    // over PCIe is off the step's critical path. CPU towers copy the pinned pair in place.
    Tensor hostInput[2], hostLabels[2];  // (batch, h, w, c), (batch) int32 in float-sized slots
    Tensor deviceInput, deviceLabels;    // GPUs: the stage on the device, same shapes
    Stream copyStream = nullptr;         // GPUs: the queue of the stage's copies
    Event inputTaken = nullptr;          // GPUs: the step has copied the device stage out
    Event inputReady = nullptr;          // GPUs: the device stage holds the staged slice
    Event pairRead[2] = {};              // GPUs: the copies from pinned pair k have run (it may be rewritten)
    int hostSlot = 0;                    // the pinned pair written last
    int stagedCount = 0;                 // examples in the staged slice
    int64_t stagedFor = -1;              // sync: the step whose slice is staged (-1: none)
    // --accumulate K > 1: the step's gradient, which the strategy reads (the network's), and a
    // micro-step's, added into it after each micro-step but the first.
    Tensor stepGrads, microGrads;
    int64_t computed = 0;            // steps computed so far (the first runs eagerly)
    int64_t replayed = 0;            // of them, launched from a recorded graph
    bool unrecordable = false;       // a recording of its step failed: every step runs unrecorded
    std::string unsaidRecordingFailure;  // its cause, said once the step has been launched unrecorded
    // Per step of the current call (one step; averaging: the local steps up to an average).
    std::vector<Result> results;
    Clock::time_point finished;      // when this call's work was done (the rest is waiting)
    bool averaged = false;           // this call's last step ended in an average of the replicas
    int64_t update = 0;              // free-running: the update this call's push made
    float lr = 0;
    int64_t staleness = -1;
    std::exception_ptr error;        // the first failure of this call; cleared at the next

    // Everything above belongs to `backend`: give it back in dependency order.
    ~Tower() {
        if (!backend) return;
        for (StepSlot& s : slots) {  // (idle: ~TowerSet waited for the steps in flight)
            backend->destroyGraph(s.graph);
            for (Event e : s.marks) backend->destroyEvent(e);
            s.hostStats = Tensor();
        }
        if (copyStream) {
            backend->destroyStream(copyStream);  // waits for its copies
            backend->destroyEvent(inputTaken);
            backend->destroyEvent(inputReady);
            for (Event e : pairRead) backend->destroyEvent(e);
        }
        net.reset();
        stats = deviceInput = deviceLabels = stepGrads = microGrads = Tensor();
        for (int k = 0; k < 2; ++k) hostInput[k] = hostLabels[k] = Tensor();
        backend->destroyStream(stream);
    }
};

// One tower's part of a call, as its strategy drives it. A lockstep call's batches are round_; a
// free-running call's one batch is staged before it (taking `staging` seconds, counted as forward).
class TowerSet::Call final : public TowerCall {
public:
    Call(TowerSet& set, Tower& t, int i, std::vector<int64_t> steps, double staging = -1)
        : set_(set), t_(t), i_(i), steps_(std::move(steps)), staging_(staging) {}
    size_t steps() const override { return steps_.size(); }
    int64_t step(size_t k) const override { return steps_[k]; }
    void setStep(size_t k, int64_t step) override { steps_[k] = step; }
    TowerPhases& phases(size_t k) override { return t_.results[k].phases; }
    void compute(size_t k) override {
        unlessFailed([&] {
            if (staging_ < 0) set_.computeSlice(t_, i_, k);
            else set_.computeStaged(t_, i_, steps_[k], staging_);
        });
    }
    void unlessFailed(const std::function<void()>& f) override {
        if (t_.error) return;
        meet(f);
    }
    void meet(const std::function<void()>& f) override {
        try {
            f();
        } catch (...) {
            if (!t_.error) t_.error = std::current_exception();
            set_.abandonStatistics(i_, std::current_exception());
        }
    }
    void markAveraged() override { t_.averaged = true; }
    int64_t applied() const override { return set_.applied_.load(); }
    void countApplied(float lr) override {
        t_.update = set_.applied_.fetch_add(1) + 1;
        t_.lr = lr;
        t_.staleness = t_.update - 1 - steps_[0];  // updates others applied between its pull and push
    }

private:
    TowerSet& set_;
    Tower& t_;
    int i_;
    std::vector<int64_t> steps_;
    double staging_;
};

// --sync-bn: a tower's batch norms meet the other towers' (and processes') in a communicator of
// their own (fp32, whatever the gradients' precision), summing their statistics in place. A
// collective takes completed buffers: a GPU tower's stream is waited for first (its sums were
// just computed on it), so each batch norm holds its tower's host thread, forward and back.
class TowerSet::StatisticsSync final : public BatchStatisticsSync {
public:
    StatisticsSync(Communicator& comm, int rank, int replicas) : comm_(comm), rank_(rank), replicas_(replicas) {}
    int replicas() const override { return replicas_; }
    void sum(Stream stream, float* data, size_t count) override {
        comm_.endpoint(rank_).backend->synchronize(stream);
        comm_.allReduce(rank_, data, count, ReduceOp::Sum);
    }

private:
    Communicator& comm_;
    int rank_, replicas_;
};

// A tower that failed (its compute, or a collective) comes to none of its batch norms' meetings
// left in the step: the others must not wait for it there (--sync-bn). They fail the step with its
// cause, and every tower still meets the others in the gradients' collectives, as failed towers do.
void TowerSet::abandonStatistics(int tower, std::exception_ptr failure) {
    if (!statisticsComm_) return;
    std::string why = "an unknown error";
    try {
        std::rethrow_exception(failure);
    } catch (const std::exception& e) {
        why = e.what();
    } catch (...) {
    }
    statisticsComm_->abandon("tower " + std::to_string(towerOffset_ + tower) + " failed (" + why +
                             "), so its batch norms will not meet the other towers'");
}

Backend& TowerSet::backendFor(const Device& d, int threadsPerTower) {
    // Towers on one GPU share its backend (one allocator, one cuDNN search per shape); CPU
    // towers are virtual devices with their own threads, so each gets a backend of its own.
    if (d.type == DeviceType::Cuda)
        for (const auto& t : towers_)
            if (t->device == d) return *t->backend;
    BackendOptions o;
    o.cpuThreads = threadsPerTower;
    o.allowTf32 = optSettings_.allowTf32;
    o.deterministic = optSettings_.deterministic;
    o.precision = optSettings_.precision;
    backends_.push_back(makeBackend(d, o));
    return *backends_.back();
}

TowerSet::TowerSet(const ModelSpec& spec, const DeploymentPlan& plan, const OptimizerSettings& opt, int threadsPerTower,
                   uint64_t seed, ProcessGroup* processes)
    : plan_(plan),
      optSettings_(opt),
      threadsPerTower_(threadsPerTower),
      seed_(seed),
      towerOffset_(processes ? (processes->rank() - plan.psTasks) * plan.towerCount() : 0),
      processCount_(processes ? processes->size() : 1),
      callerRuns_(plan.towerCount() > 0 && plan.towers[0].type == DeviceType::Cpu ? 1 : 0),
      start_(plan.towerCount() + 1 - callerRuns_),
      done_(plan.towerCount() + 1 - callerRuns_) {
    if (plan_.batchPerTower < 1) throw Error("--batch-per-tower: must be at least 1");
    for (const Device& d : plan_.towers) {
        auto t = std::make_unique<Tower>();
        t->device = d;
        t->backend = &backendFor(d, threadsPerTower);
        t->stream = t->backend->createStream();
        t->net = std::make_unique<Network>(spec, *t->backend, plan_.batchPerTower);
        t->stats = t->backend->empty(Shape{3});
        const int64_t inputCount = int64_t(plan_.batchPerTower) * t->net->inputDims().size();
        for (int k = 0; k < 2; ++k) {
            t->hostInput[k] = hostTensor(*t->backend, inputCount);
            t->hostLabels[k] = hostTensor(*t->backend, plan_.batchPerTower);
        }
        if (d.type == DeviceType::Cuda) {
            t->deviceInput = t->backend->empty(Shape{inputCount});
            t->deviceLabels = t->backend->empty(Shape{plan_.batchPerTower});
            t->copyStream = t->backend->createCopyStream();
            t->inputTaken = t->backend->createEvent();
            t->inputReady = t->backend->createEvent();
            for (Event& e : t->pairRead) e = t->backend->createEvent();
        }
        if (plan_.accumulate > 1) {
            t->stepGrads = t->backend->empty(Shape{std::max<int64_t>(t->net->paramCount(), 1)});
            t->microGrads = t->backend->empty(Shape{std::max<int64_t>(t->net->paramCount(), 1)});
            t->net->bindGrads(t->stepGrads.data());
        }
        towers_.push_back(std::move(t));
    }
    const Tower& t0 = *towers_[0];
    paramCount_ = t0.net->paramCount();
    if (paramCount_ == 0) throw Error("--model: " + spec.name + " has no parameters to train");

    StrategySetup s;
    s.plan = plan_;
    s.processes = processes;
    s.opt = opt;
    s.init = t0.net->initialParams(seed);
    for (auto& t : towers_) s.replicas.push_back({t->backend, t->stream, t->net.get(), t->device});
    if (plan_.variables == VariablePlacement::Tower) {
        const Tower& h = *towers_[size_t(plan_.variablesTower)];
        s.holder = {h.backend, h.device};
    } else if (plan_.variables == VariablePlacement::Cpu) {
        // The host: a CPU backend of its own for the mean and the update.
        backends_.push_back(makeBackend(Device{}, BackendOptions{threadsPerTower}));
        s.holder = {backends_.back().get(), kHostHolder};
    }
    // Shared memory where the towers (and the holder) are all in one memory: all CPU, or all on
    // one GPU that also holds the variables. NCCL where the towers are on distinct GPUs, update
    // synchronously, and the holder (if any) is one of their GPUs. Explicit copies otherwise.
    bool oneMemory = true, shared = true, ncclFits = plan_.update == UpdateMode::Sync;  // (oneMemory: the towers')
    std::vector<Device> gpus;
    for (const auto& t : towers_) {
        const bool cpu = t->device.type == DeviceType::Cpu;
        oneMemory = oneMemory && (cpu ? t0.device.type == DeviceType::Cpu : t->device == t0.device);
        shared = shared && oneMemory;
        if (s.holder.backend)
            shared = shared && (cpu ? s.holder.device.type == DeviceType::Cpu : t->device == s.holder.device);
        ncclFits = ncclFits && !cpu && std::find(gpus.begin(), gpus.end(), t->device) == gpus.end();
        gpus.push_back(t->device);
    }
    if (s.holder.backend)
        ncclFits = ncclFits && std::find(gpus.begin(), gpus.end(), s.holder.device) != gpus.end();
    // Across processes (their own variables' replicas: no parameter-server processes) GPU towers
    // share nothing with the other processes' towers: they meet on the host and through MPI, or in
    // one NCCL group where every tower of every process has a GPU of its own. Every process
    // decides alike, from what all of them report.
    const bool gpuTowers = anyGpu(gpus);
    if (processes && plan_.psTasks == 0 && gpuTowers) {
        shared = false;
        if (ncclFits) {
            const std::string clash = gpuSharedByProcesses(*processes, gpus);
            if (!clash.empty() && plan_.transfers == Transfers::Nccl)
                throw Error("--transfers nccl: " + clash + ", and NCCL takes one tower per GPU across the processes too; "
                            "give each process GPUs of its own (CUDA_VISIBLE_DEVICES) or leave --transfers out");
            ncclFits = clash.empty();
        }
        if (plan_.transfers == Transfers::Auto) ncclFits = !processes->any(!(ncclFits && ncclAvailable()));
    }
    switch (plan_.transfers) {
    case Transfers::Copies: s.comm = CommKind::Copies; break;
    case Transfers::Nccl: s.comm = CommKind::Nccl; break;
    case Transfers::Auto:
        s.comm = shared                         ? CommKind::SharedMemory
                 : ncclFits && ncclAvailable() ? CommKind::Nccl
                                               : CommKind::Copies;
        break;
    }
    strategy_ = makeStrategy(s);
    reportLag_ = resolveReportLag(processes);
    if (reportLag_ > 0) {
        updater_ = strategy_->streamOrderedOptimizer();
        strategy_->takeOverUpdates();
    }
    for (auto& t : towers_)
        for (StepSlot& slot : t->slots = std::vector<StepSlot>(size_t(reportLag_) + 1)) {
            slot.hostStats = hostTensor(*t->backend, 3);
            for (Event& e : slot.marks) e = t->backend->createEvent();
        }
    const int replicas = towers() * (processes ? processes->size() : 1);
    if (plan_.syncBatchNorm && t0.net->hasBatchNorm() && replicas > 1) {
        // The statistics of a batch norm of c channels: 2c floats (sums forward, gradient sums back).
        size_t largest = 0;
        for (const ParamInfo& p : t0.net->statisticInfos()) largest = std::max(largest, size_t(p.shape.numel()));
        std::vector<RankEndpoint> ranks;
        for (const auto& t : towers_) ranks.push_back({t->backend, t->stream, t->device});
        // As the gradients meet, with no holder: in the one memory the towers share (CPU towers,
        // or towers sharing one GPU), through NCCL where the gradients go through it (towers on
        // GPUs of their own), else copied through the host.
        const CommKind kind = oneMemory && !(processes && gpuTowers) ? CommKind::SharedMemory
                              : s.comm == CommKind::Nccl              ? CommKind::Nccl
                                                                      : CommKind::Copies;
        statisticsComm_ = makeCommunicator(kind, std::move(ranks), HolderEndpoint{}, 2 * largest, processes);
        for (int i = 0; i < towers(); ++i) {
            syncs_.push_back(std::make_unique<StatisticsSync>(*statisticsComm_, i, replicas));
            towers_[size_t(i)]->net->setStatisticsSync(syncs_.back().get());
        }
    }
    // A first CPU tower runs on the caller's thread, the others on threads of their own. (On a
    // thread of its own, one tower's OpenMP team made libgomp manage more threads than a 2-core
    // machine has, the initial thread counted, and it then spins only 100 times between
    // parallel regions: the worker slept and was woken at each of mlp's ~20 regions a step,
    // and 2 threads trained slower than 1.) GPU towers keep their threads.
    for (int i = callerRuns_; i < towers(); ++i) threads_.emplace_back([this, i] { towerLoop(i); });
}

// --report-lag: where the host may read results late, the lag asked for (automatic: 2 steps for
// one GPU tower, where a step's host work (reporting, staging the next slice, the launch) is
// tens of microseconds against a step of a millisecond or less; 0 on CPUs, whose calls run to
// completion anyway). Where it may not, 0, or one sentence saying why for a lag asked for.
int TowerSet::resolveReportLag(ProcessGroup* processes) const {
    std::string why;
    if (processes) why = "the processes meet on the host every step";
    else if (towers() != 1) why = "the towers meet on the host every step; it takes one tower";
    else if (plan_.update != UpdateMode::Sync || plan_.averaging()) why = "it takes synchronous updates every step";
    else if (plan_.accumulate != 1) why = "--accumulate adds the micro-steps' gradients between host waits";
    else if (!plan_.slowdown.empty()) why = "--slow stretches each step by its measured time, which the host reads late";
    else if (plan_.commPrecision != CommPrecision::Fp32) why = "--comm-precision bf16 rounds the gradients on the host";
    else if (!strategy_->streamOrderedOptimizer())
        why = "the variables are not updated in place on the tower's own stream; that takes them on its device "
              "(--variables " + towers_[0]->device.str() + ", or replicated) without --transfers copies";
    if (plan_.reportLag < 0) return why.empty() && towers_[0]->device.type == DeviceType::Cuda ? kAutoReportLag : 0;
    if (plan_.reportLag > 0 && !why.empty())
        throw Error("--report-lag " + std::to_string(plan_.reportLag) + ": " + why);
    return plan_.reportLag;
}

TowerSet::~TowerSet() {
    quit_ = true;
    if (!threads_.empty()) start_.arrive_and_wait();  // the barrier publishes quit_ to the towers
    for (auto& th : threads_) th.join();
    // Steps still in flight (a report lag's, where the run failed) read the strategy's buffers.
    for (auto& t : towers_) {
        try {
            t->backend->synchronize(t->stream);
        } catch (...) {  // a failed device: the run has failed already, and says why
        }
    }
    // The strategy's buffers and communicators, then the towers, then (as members) the backends.
    strategy_.reset();
    syncs_.clear();
    statisticsComm_.reset();
    towers_.clear();
}

std::string TowerSet::backendName() const { return towers_[0]->backend->name() + " per tower"; }

std::string TowerSet::strategyName() const { return strategy_->name() + ", " + strategy_->comm().name(); }

void TowerSet::towerLoop(int i) {
    enterComputeTeam(threadsPerTower_);
    for (;;) {
        start_.arrive_and_wait();
        if (quit_) return;
        runTower(i);
        done_.arrive_and_wait();
    }
}

// Tower i's part of one call of steps(), as the strategy drives it.
void TowerSet::runTower(int i) {
    Tower& t = *towers_[size_t(i)];
    t.error = nullptr;
    t.averaged = false;
    t.results.assign(round_.size(), {});
    t.results[0].phases.dataWait = callerWait_;
    // A tower thread that starts after the call began was waiting for a core: on a host with
    // fewer free cores than tower threads it runs once another yields (measured: 2-5 ms a step
    // on one core). It is idle time, and counted as waiting so that the phases add up to the step.
    t.results[0].phases.wait = secondsSince(callStart_);
    std::vector<int64_t> steps(round_.size());
    for (size_t k = 0; k < steps.size(); ++k) steps[k] = step_ + int64_t(k);
    Call call(*this, t, i, std::move(steps));
    strategy_->runCall(i, call);
    t.finished = Clock::now();
}

// Tower i's slice of global batch `k` of this call, through forward and backward. Its input is
// staged already where the step before knew it (the next batch of this call, or the caller's
// `next`); while the device computes, the host stages the slice of the step after.
void TowerSet::computeSlice(Tower& t, int i, size_t k) {
    const int64_t step = step_ + int64_t(k);
    Result& r = t.results[k];
    if (plan_.accumulate > 1) {
        accumulateSlice(t, i, *round_[k], step, r);
        straggle(r, i);
        return;
    }
    double staging = 0;
    if (t.stagedFor != step) {
        const auto t0 = Clock::now();
        stageSlice(t, i, *round_[k], step);
        staging = secondsSince(t0);
    }
    const Batch* after = k + 1 < round_.size() ? round_[k + 1] : next_;
    computeGradients(t, i, uint64_t(step), r, [&] {
        if (after) stageSlice(t, i, *after, step + 1);
    });
    r.phases.forward += staging;  // on the step's path: the host's copy and the wait for PCIe
    straggle(r, i);
}

// --accumulate K: tower i's K x batchPerTower examples of the step (a contiguous slice) in K
// micro-steps of batchPerTower, each's gradient added into the step's; the loss gradient is
// 1/(K x batchPerTower) and the weight decay counted once, so the sum is one step's on the slice.
void TowerSet::accumulateSlice(Tower& t, int i, const Batch& b, int64_t step, Result& r) {
    const int per = plan_.batchPerTower, micro = plan_.accumulate;
    const size_t sample = b.x.size() / size_t(b.n);
    Backend& be = *t.backend;
    Network& net = *t.net;
    for (int m = 0; m < micro; ++m) {
        const size_t first = size_t(i) * size_t(micro * per) + size_t(m * per);
        const auto t0 = Clock::now();
        stageInput(t, b.x.data() + first * sample, b.y.data() + first, per);
        const double staging = secondsSince(t0);
        net.bindGrads(m == 0 ? t.stepGrads.data() : t.microGrads.data());
        Result part;
        computeGradients(t, i, uint64_t(step), part, nullptr, MicroBatch{int64_t(m) * per, micro * per, m == 0});
        if (m > 0) {
            be.axpy(t.stream, 1.f, t.microGrads.data(), t.stepGrads.data(), size_t(net.paramCount()));
            be.synchronize(t.stream);
        }
        r.lossSum += part.lossSum;
        r.correct += part.correct;
        if (m == 0) r.wd = part.wd, r.layerTimes = part.layerTimes;
        r.phases.forward += part.phases.forward + staging;
        r.phases.backward += part.phases.backward;
    }
    net.bindGrads(t.stepGrads.data());  // where the strategy reads the step's gradient
    t.stagedFor = -1;
}

// A free-running tower's staged input (staged in `staging` seconds) through forward and backward,
// with the dropout masks of `step`.
void TowerSet::computeStaged(Tower& t, int i, int64_t step, double staging) {
    Result& r = t.results[0];
    computeGradients(t, i, uint64_t(step), r, nullptr);
    r.phases.forward += staging;
    straggle(r, i);
}

// Tower i's slice of global batch b, staged as the input of `step`.
void TowerSet::stageSlice(Tower& t, int i, const Batch& b, int64_t step) {
    const int per = plan_.batchPerTower;
    const size_t sample = b.x.size() / size_t(b.n);
    stageInput(t, b.x.data() + size_t(i) * size_t(per) * sample, b.y.data() + size_t(i) * size_t(per), per);
    t.stagedFor = step;
}

// n examples (x: (n, h, w, c), y: (n)) as tower t's next input: into the pinned pair not
// written last (the copy from that one may still be on its way), then on GPUs, once the step
// before has copied the device stage out, on the copy stream into the device stage.
void TowerSet::stageInput(Tower& t, const float* x, const int32_t* y, int n) {
    Backend& be = *t.backend;
    const size_t xBytes = size_t(n) * size_t(t.net->inputDims().size()) * sizeof(float);
    const size_t yBytes = size_t(n) * sizeof(int32_t);
    t.hostSlot ^= 1;
    // The pair's copy of two slices ago has left it (waited for only where steps run ahead of
    // the host's reads: otherwise the step that took it is done already).
    if (t.copyStream) be.synchronizeEvent(t.pairRead[t.hostSlot]);
    std::memcpy(t.hostInput[t.hostSlot].data(), x, xBytes);
    std::memcpy(t.hostLabels[t.hostSlot].data(), y, yBytes);
    t.stagedCount = n;
    t.stagedFor = -1;
    if (!t.copyStream) return;
    be.waitEvent(t.copyStream, t.inputTaken);
    be.copyFromHost(t.copyStream, t.deviceInput.data(), t.hostInput[t.hostSlot].data(), xBytes);
    be.copyFromHost(t.copyStream, t.deviceLabels.data(), t.hostLabels[t.hostSlot].data(), yBytes);
    be.recordEvent(t.inputReady, t.copyStream);
    be.recordEvent(t.pairRead[t.hostSlot], t.copyStream);
}

// The whole of a tower's compute as device work on its stream: the staged input into the
// network's, forward, backward, the loss statistics to the host, into `slot`; with a report lag
// the update of global step `step` too. Events between the phases time them; inputTaken lets the
// copy stream refill the device stage.
void TowerSet::enqueueCompute(Tower& t, StepSlot& slot, int n, int64_t step, uint64_t seed, const MicroBatch& part) {
    Backend& be = *t.backend;
    Network& net = *t.net;
    const size_t xBytes = size_t(n) * size_t(net.inputDims().size()) * sizeof(float);
    const size_t yBytes = size_t(n) * sizeof(int32_t);
    be.recordEvent(slot.marks[0], t.stream);
    if (t.copyStream) {
        be.copy(t.stream, net.input(), t.deviceInput.data(), xBytes);
        be.copy(t.stream, net.labels(), t.deviceLabels.data(), yBytes);
        be.recordEvent(t.inputTaken, t.stream);
    } else {
        be.copyFromHost(t.stream, net.input(), t.hostInput[t.hostSlot].data(), xBytes);
        be.copyFromHost(t.stream, net.labels(), t.hostLabels[t.hostSlot].data(), yBytes);
    }
    be.fill(t.stream, t.stats.data(), 0.f, 3);
    net.forward(t.stream, true, seed, n, t.stats.data(), part);
    be.recordEvent(slot.marks[1], t.stream);
    net.backward(t.stream, part);
    be.recordEvent(slot.marks[2], t.stream);
    be.copyToHost(t.stream, slot.hostStats.data(), t.stats.data(), 3 * sizeof(float));
    be.recordEvent(slot.marks[3], t.stream);
    if (!updater_) return;  // the strategy applies the update
    updater_->apply(t.stream, net.params(), net.grads(), step);
    be.recordEvent(slot.marks[4], t.stream);
}

void TowerSet::computeGradients(Tower& t, int i, uint64_t step, Result& r, const std::function<void()>& whileComputing,
                                const MicroBatch& part) {
    Backend& be = *t.backend;
    Network& net = *t.net;
    const int n = t.stagedCount;
    if (t.copyStream) be.waitEvent(t.stream, t.inputReady);  // the staged slice is on the device
    // Dropout masks: a function of the run's seed, the step and the tower (its index among every
    // process's towers, so that no two processes draw the same masks).
    const uint64_t tower = uint64_t(towerOffset_ + i);
    const uint64_t stepSeed = (seed_ + 1) * 0x9E3779B97F4A7C15ull ^ (step * 7919ull + tower * 1000003ull);
    // GPUs: the second step is recorded as a graph and every later one replays it, one launch
    // instead of dozens (these models are small enough to be launch-bound). The first runs
    // eagerly so that one-time set-up stays out of the recording. Dropout draws a new mask each
    // step and the last batch of a pass may be short, so those steps are not replayed.
    // Tower 0's profiled steps run eagerly too: events inside a recording would time nothing.
    // So do the steps of towers whose batch norms meet the others' (--sync-bn) on the host.
    const bool profiled = i == 0 && (int64_t(step) == kProfileFirst || (step > 0 && int64_t(step) % kProfileEvery == 0));
    if (profiled && part.once) net.profileNextStep();
    const bool replayable = be.canCapture() && !t.unrecordable && n == plan_.batchPerTower &&
                            !net.drawsRandomNumbers() && plan_.accumulate == 1 && !profiled && syncs_.empty();
    // With a report lag the steps in flight use the slots in turn; the oldest is free by now
    // (steps() read it before this step was launched).
    t.slot = (t.slot + 1) % int(t.slots.size());
    StepSlot& slot = t.slots[size_t(t.slot)];
    if (replayable && t.computed >= 1 && !slot.graph) slot.graph = recordStep(t, slot, n, int64_t(step), stepSeed, part);
    if (replayable && slot.graph) {
        // The update recorded in it (report lag) takes this step's learning rate (and Adam's count).
        const UpdateParams update = updater_ ? updater_->paramsAt(int64_t(step)) : UpdateParams{};
        be.launchGraph(slot.graph, t.stream, updater_ ? &update : nullptr);
        ++t.replayed;
    } else {
        enqueueCompute(t, slot, n, int64_t(step), stepSeed, part);
        sayRecordingFailure(t, i);
    }
    ++t.computed;
    if (whileComputing) whileComputing();
    r.profiled = profiled;
    if (reportLag_ > 0) return;  // read when steps() reports it, reportLag_ steps later
    be.synchronize(t.stream);
    readStep(t, slot, r);
    // Free-running towers: tower 0's moving statistics as of this step, for a checkpoint another
    // tower's report may take while tower 0 computes its next.
    if (i == 0 && net.hasBatchNorm() && strategy_->runsFree()) {
        std::vector<float> now(size_t(net.statisticCount()));
        be.copyToHost(t.stream, now.data(), net.statistics(), now.size() * sizeof(float));
        be.synchronize(t.stream);
        std::lock_guard lock(publishedMutex_);
        published_ = std::move(now);
    }
}

// A slot's recording of the step (one per step in flight: each writes its own statistics and
// marks), made when the slot is first used for a replayable step: the step it served before has
// been reported by then, so its marks are not recorded into a graph while the host may still
// read them (recording all the slots at once did that to the eager first step's).
// Null where the step cannot be recorded (a call that a stream being recorded refuses, a graph
// that will not instantiate), and the tower runs every step unrecorded, slower but the same
// arithmetic. Nothing of the failed recording ran, so the step runs eagerly next; a failure that
// is not the recording's own (a device fault, which CUDA returns from every later call, the
// launches included) then fails that step with its own error, and the recording is not blamed:
// its cause is said only once the step has been launched unrecorded (sayRecordingFailure).
Graph TowerSet::recordStep(Tower& t, StepSlot& slot, int n, int64_t step, uint64_t seed,
                           const MicroBatch& part) {
    Backend& be = *t.backend;
    be.beginCapture(t.stream);
    try {
        enqueueCompute(t, slot, n, step, seed, part);
        return be.endCapture(t.stream);
    } catch (const std::exception& e) {
        be.abortCapture(t.stream);  // (endCapture would throw "capture invalidated" over the cause)
        t.unrecordable = true;
        t.unsaidRecordingFailure = e.what();
        return nullptr;
    } catch (...) {
        be.abortCapture(t.stream);
        throw;
    }
}

void TowerSet::sayRecordingFailure(Tower& t, int i) {
    if (t.unsaidRecordingFailure.empty()) return;
    std::fprintf(stderr, "%s: tower %d's step could not be recorded as a graph (%s); its steps run unrecorded\n",
                 t.device.str().c_str(), towerOffset_ + i, t.unsaidRecordingFailure.c_str());
    t.unsaidRecordingFailure.clear();
}

// A computed step's results, once the device has run it: its phases timed by the slot's marks
// (added to what the host timed), its loss statistics, and the layer times of a profiled step.
void TowerSet::readStep(Tower& t, StepSlot& slot, Result& r) {
    Backend& be = *t.backend;
    Network& net = *t.net;
    r.phases.forward += be.elapsedSeconds(slot.marks[0], slot.marks[1]);
    r.phases.backward += be.elapsedSeconds(slot.marks[1], slot.marks[2]) + be.elapsedSeconds(slot.marks[2], slot.marks[3]);
    const float* host = slot.hostStats.data();
    r.lossSum = host[0];
    r.correct = host[1];
    r.wd = host[2];
    if (!r.profiled) return;
    if (LayerTimes times = net.takeLayerTimes(); !times.empty())
        r.layerTimes = std::make_shared<const LayerTimes>(std::move(times));
}

void TowerSet::straggle(Result& r, int i) {
    if (plan_.slowdown.empty() || plan_.slowdown[size_t(i)] <= 1.0) return;
    // A slower device: the same work takes `factor` times as long.
    // The time reported is the sleep as measured: on a busy host a sleep overruns what it asked
    // for, and the phases must still add up to the step.
    const double extra = (plan_.slowdown[size_t(i)] - 1.0) * (r.phases.forward + r.phases.backward);
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(extra));
    r.phases.straggle = secondsSince(t0);
}

std::vector<TowerStep> TowerSet::steps(const std::vector<const Batch*>& batches, int64_t first, double dataWait,
                                       const Batch* next) {
    const int n = towers();
    if (batches.empty()) return {};
    if (strategy_->runsFree()) throw Error(strategy_->name() + ": its towers run free (runAsync), not in steps");
    if (batches.size() > 1 && !plan_.averaging())
        throw Error("several steps at once are for local steps between averages (--average-every)");
    std::vector<const Batch*> all = batches;
    if (next) all.push_back(next);
    for (const Batch* b : all)
        if (b->n != n * plan_.batchPerTower * plan_.accumulate)
            throw Error("a global batch of " + std::to_string(b->n) + " does not split into " + std::to_string(n) +
                        " towers of " + std::to_string(plan_.accumulate) + " x " + std::to_string(plan_.batchPerTower));
    strategy_->endEvaluation();
    round_ = batches;
    next_ = next;
    step_ = first;
    callerWait_ = dataWait;
    const int64_t bytesBefore = bytesMoved();
    callStart_ = Clock::now();
    start_.arrive_and_wait();
    if (callerRuns_) {
        if (!callerEntered_) enterComputeTeam(threadsPerTower_);
        callerEntered_ = true;
        runTower(0);
    }
    done_.arrive_and_wait();
    const auto done = Clock::now();
    for (auto& t : towers_) {
        if (t->error) std::rethrow_exception(t->error);
        // A tower that finished early waited for the others to finish too.
        t->results.back().phases.wait += std::chrono::duration<double>(done - t->finished).count();
    }
    if (reportLag_ > 0) {  // the step joins those in flight; the oldest beyond the lag are reported
        inFlight_.push_back({first, towers_[0]->slot, towers_[0]->results[0], bytesMoved() - bytesBefore});
        std::vector<TowerStep> out;
        while (inFlight_.size() > size_t(reportLag_)) out.push_back(landed());
        return out;
    }
    std::vector<TowerStep> out(batches.size());
    for (size_t k = 0; k < batches.size(); ++k) {
        std::vector<const Result*> perTower;
        for (const auto& t : towers_) perTower.push_back(&t->results[k]);
        out[k] = stepReport(first + int64_t(k), perTower);
    }
    // The communicator's count for the call; local steps move nothing until their average.
    out.back().bytesMoved = bytesMoved() - bytesBefore;
    out.back().averaged = towers_[0]->averaged;  // every replica takes part in an average
    const ServerConnection* servers = strategy_->servers();
    if (const std::optional<ServerReply> a = servers ? servers->lastReply() : std::nullopt) {  // the servers count
        out.back().update = a->update;
        out.back().lr = a->lr;
        out.back().staleness = servers->async() ? a->staleness : -1;
        out.back().applied = a->applied;
        out.back().last = a->last;
        out.back().towerReports = a->towerReports;
    }
    return out;
}

TowerStep TowerSet::stepReport(int64_t step, const std::vector<const Result*>& perTower) const {
    TowerStep r;
    r.update = step + 1;
    r.lr = optSettings_.schedule.at(step);
    for (const Result* res : perTower) {
        r.lossSum.push_back(res->lossSum);
        r.correct.push_back(res->correct);
        r.examples.push_back(plan_.batchPerTower * plan_.accumulate);
        r.phases.push_back(res->phases);
    }
    r.weightDecayLoss = perTower[0]->wd;
    r.layerTimes = perTower[0]->layerTimes;
    return r;
}

// The host waits for the step's last mark, not for the stream: the steps launched after it run on.
TowerStep TowerSet::landed() {
    InFlight f = std::move(inFlight_.front());
    inFlight_.pop_front();
    Tower& t = *towers_[0];
    StepSlot& slot = t.slots[size_t(f.slot)];
    t.backend->synchronizeEvent(slot.marks[4]);
    readStep(t, slot, f.result);
    f.result.phases.apply = t.backend->elapsedSeconds(slot.marks[3], slot.marks[4]);
    TowerStep r = stepReport(f.step, {&f.result});
    r.bytesMoved = f.bytes;
    return r;
}

std::vector<TowerStep> TowerSet::settle() {
    std::vector<TowerStep> out;
    while (!inFlight_.empty()) out.push_back(landed());
    return out;
}

void TowerSet::requireSettled(const char* what) const {
    if (!inFlight_.empty())
        throw Error(std::string("internal: ") + what + " asked with " + std::to_string(inFlight_.size()) +
                    " steps in flight (TowerSet::settle first)");
}

TowerStep TowerSet::step(const Batch& global, int64_t step, double dataWait) {
    if (reportLag_ > 0) throw Error("internal: TowerSet::step reports its own step, which a report lag reports later");
    return steps({&global}, step, dataWait).front();
}

void TowerSet::runAsync(int64_t first, int64_t updates, const std::function<void(Batch&)>& nextBatch,
                        RunControl& control, const std::function<void(const TowerStep&)>& onUpdate) {
    if (!strategy_->runsFree()) throw Error(strategy_->name() + ": its towers run in steps, not free (runAsync)");
    std::mutex dataMutex, reportMutex;
    applied_ = first;
    std::atomic<int64_t> claimed{first};  // updates a tower has started on
    std::exception_ptr failure;
    Communicator& comm = strategy_->comm();
    auto body = [&](int i) {
        enterComputeTeam(threadsPerTower_);
        Tower& t = *towers_[size_t(i)];
        Batch b;
        try {
            while (control.awaitStep() && claimed.fetch_add(1) < updates) {
                t.error = nullptr;
                t.results.assign(1, {});
                Result& res = t.results[0];
                auto t0 = Clock::now();
                {
                    std::lock_guard lock(dataMutex);
                    nextBatch(b);
                }
                res.phases.dataWait = secondsSince(t0);
                t0 = Clock::now();
                stageInput(t, b.x.data(), b.y.data(), std::min(b.n, plan_.batchPerTower));  // crosses during the pull
                const double staging = secondsSince(t0);
                const int64_t bytesBefore = comm.bytesMovedBy(i);
                Call call(*this, t, i, {0}, staging);
                strategy_->runCall(i, call);  // pull, compute, push
                if (t.error) std::rethrow_exception(t.error);
                TowerStep r;
                r.update = t.update;
                r.lr = t.lr;
                r.pusher = i;
                r.staleness = t.staleness;
                r.lossSum.assign(towers_.size(), std::nan(""));
                r.correct.assign(towers_.size(), std::nan(""));
                r.examples.assign(towers_.size(), 0);
                r.phases.assign(towers_.size(), TowerPhases{});
                r.lossSum[size_t(i)] = res.lossSum;
                r.correct[size_t(i)] = res.correct;
                r.examples[size_t(i)] = plan_.batchPerTower;
                r.phases[size_t(i)] = res.phases;
                r.weightDecayLoss = res.wd;
                r.bytesMoved = comm.bytesMovedBy(i) - bytesBefore;
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

int64_t TowerSet::finishTraining(int64_t step) { return strategy_->finishTraining(step); }

Network& TowerSet::evalNetwork() {
    requireSettled("the evaluation network");
    return strategy_->evalNetwork();
}

Stream TowerSet::evalStream() { return towers_[0]->stream; }

VariablesView TowerSet::variables() {
    requireSettled("the variables");
    return strategy_->variables();
}

std::vector<float> TowerSet::statistics() {
    requireSettled("the moving statistics");
    const Tower& t = *towers_[0];
    if (!t.net->hasBatchNorm()) return {};
    if (strategy_->runsFree()) {
        std::lock_guard lock(publishedMutex_);
        return published_.empty() ? t.net->initialStatistics() : published_;
    }
    std::vector<float> out(size_t(t.net->statisticCount()));
    t.backend->copyToHost(t.stream, out.data(), t.net->statistics(), out.size() * sizeof(float));
    t.backend->synchronize(t.stream);
    return out;
}

bool TowerSet::statisticsDifferByProcess() const {
    return processCount_ > 1 && plan_.psTasks == 0 && !plan_.syncBatchNorm && !strategy_->runsFree() &&
           towers_.front()->net->hasBatchNorm();
}

std::vector<StateBuffer> TowerSet::state() {
    requireSettled("the training state");
    std::vector<StateBuffer> out = strategy_->state();
    // Averaging across processes: each process's replicas keep variables and slots of their own.
    if (processCount_ > 1 && plan_.averaging())
        for (StateBuffer& b : out) b.perProcess = true;
    // Towers 1.. keep statistics of their own (tower 0's are the model's, which every process
    // restores; where they differ by process, tower 0's too, each process restoring its own).
    const bool ownStatistics = statisticsDifferByProcess();
    if (!strategy_->runsFree())  // (free-running towers compute on: their statistics have no one moment)
        for (size_t i = ownStatistics ? 0 : 1; i < towers_.size(); ++i) {
            const Tower& t = *towers_[i];
            if (t.net->hasBatchNorm())
                out.push_back({"tower" + std::to_string(i) + "/statistics", t.backend, t.stream, t.net->statistics(),
                               size_t(t.net->statisticCount()), ownStatistics});
        }
    return out;
}

void TowerSet::setStatistics(const std::vector<float>& host) {
    for (const auto& t : towers_) {
        if (host.size() != size_t(t->net->statisticCount()))
            throw Error("moving statistics of " + std::to_string(host.size()) + " values for a model of " +
                        std::to_string(t->net->statisticCount()));
        if (host.empty()) continue;
        t->backend->copyFromHost(t->stream, t->net->statistics(), host.data(), host.size() * sizeof(float));
        t->backend->synchronize(t->stream);
    }
    std::lock_guard lock(publishedMutex_);
    published_ = host;
}

VariablesView TowerSet::replica(int tower) {
    const Tower& t = *towers_.at(size_t(tower));
    return {t.backend, t.stream, t.net->params()};
}

std::vector<DeviceMemoryUse> TowerSet::deviceMemory() const {
    std::vector<DeviceMemoryUse> out;
    for (const auto& b : backends_)
        if (b->device().type == DeviceType::Cuda) out.push_back({b->device(), b->allocatorStats()});
    return out;
}

size_t TowerSet::optimizerSlotBytes() const { return strategy_->optimizerSlotBytes(); }

int64_t TowerSet::bytesMoved() const {
    return strategy_->comm().bytesMoved() + (statisticsComm_ ? statisticsComm_->bytesMoved() : 0);
}

int64_t TowerSet::replayedSteps() const {
    int64_t n = 0;
    for (const auto& t : towers_) n += t->replayed;
    return n;
}

}  // namespace tb
