#include "parallel/stage_pipeline.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/registry.hpp"
#include "util/error.hpp"
#include "util/elapsed.hpp"

namespace tb {

namespace {
// Stages in processes of their own: each direction's messages on a lane of its own (lane 0 is
// the run's votes and gathers), so that each is one ordered queue between two processes.
constexpr int kForwardLane = 1, kBackwardLane = 2;
// Replicas of a stage in processes of their own: each sends its gradient (or, with --sync-bn, a
// batch norm's sums) to replica 0's process (tag ...Up), which sends their sum back (tag ...Up +
// 1), on a lane of their own.
constexpr int kReplicaLane = 3, kGradientsUp = 0, kStatisticsUp = 2;
// The tags of the messages that bring a stage to the chief (gatherToChief): its variables, then
// its optimiser slots in order.
constexpr int kGatherTag = 1000;
// ... and a replica's batch norm statistics (replicas 1.. of a stage in processes of their own).
constexpr int kReplicaStatisticsTag = kGatherTag - 1;

// A worker that stops because another failed (and says why): not an error of its own.
struct Stopped {};

// Stage workers in this process: every stage's x replicas, or one (--stage-per-process).
std::ptrdiff_t workersHere(const StagePipelineSetup& s) {
    return s.localStage >= 0 ? 1 : std::ptrdiff_t(s.ranges.size()) * std::max(1, s.replicas);
}
}  // namespace

struct StagePipeline::Stage {
    int index = 0;
    Tensor ownParams;      // this stage's slice of the variables, unless in StagePipelineSetup::sharedParams
    float* params = nullptr;
    std::vector<Tensor> grads;  // per replica here (its parameters): its share of the step's gradient
    Tensor received;            // replicas in processes of their own, on replica 0's: another's gradient
    std::unique_ptr<Optimizer> optimizer;  // on replica 0's backend
    std::atomic<int> finished{0};  // replicas done with this step's backwards
    float lr = 0;
};

// --sync-bn: replica `rank`'s batch norms sum their statistics in their stage's meeting, over
// `replicas` replicas in all (this process's and every other's).
class StagePipeline::StatisticsSync final : public BatchStatisticsSync {
public:
    StatisticsSync(StatisticsMeeting& meeting, int rank, Backend& backend, int replicas)
        : meeting_(meeting), rank_(rank), backend_(backend), replicas_(replicas) {}
    int replicas() const override { return replicas_; }
    void sum(Stream s, float* data, size_t count) override {
        backend_.synchronize(s);  // (CPU stages: the sums are in host memory, and computed)
        if (!meeting_.sum(rank_, data, count)) throw Stopped{};
    }

private:
    StatisticsMeeting& meeting_;
    int rank_;
    Backend& backend_;
    int replicas_;
};

struct StagePipeline::Worker {
    // How this stage meets the stage before: in one memory, by copies into buffers of its own, by
    // NCCL between two GPUs, or by MPI from another process.
    enum class Link { Shared, Copy, Nccl, Process };
    Stage* stage = nullptr;
    int replica = 0;  // of the pipeline's replicas
    int here = 0;     // of this process's
    Device device;
    std::shared_ptr<Backend> backend;
    Stream stream = nullptr;
    std::vector<PipelineOp> ops;
    Tensor scratch;        // one micro-batch's gradient (M > 1), summed into its replica's grads
    Tensor stats;          // (3) loss sum, correct, weight-decay loss
    Tensor statistics;     // batch norm's moving statistics of the stage's layers, its slots' (one per replica)
    std::vector<std::unique_ptr<Network>> slots;  // (micro-batch, layers) each, sharing params
    // Per slot (micro-batch, output dims): the gradient of this stage's output, which the next
    // stage's backward writes. Not on the last stage.
    std::vector<Tensor> outputGrads;
    // With explicit copies (not on the first stage): per slot, the input copied in from the stage
    // before; and the input's gradient, which backward writes and which is then copied into the
    // stage before's slot (where it would otherwise have written it).
    std::vector<Tensor> inputs;
    Tensor inputGrad;
    Link link = Link::Shared;  // (not on the first stage)
    // Link::Nccl: two 2-rank groups (rank 0 the stage before, rank 1 this one), activations
    // forward on the first, gradients back on the second; this stage's sends on streams of their
    // own, each send's completion an event its compute stream waits for before it writes that
    // buffer again (per slot for its outputs, one for its input's gradient).
    std::unique_ptr<NcclGroup> fromPrev, toPrev;
    Stream sendNext = nullptr, sendPrev = nullptr;
    std::vector<Event> sentOutput;
    Event sentInputGrad = nullptr, computed = nullptr;
    // Stages in processes of their own: the sends under way to the stage after (per slot, its
    // outputs) and to the stage before (its input's gradient), each waited for before its buffer
    // is written again; and whether the stage after is in another process.
    std::vector<std::unique_ptr<ProcessGroup::Sending>> outputSends;
    std::unique_ptr<ProcessGroup::Sending> inputGradSend;
    bool remoteNext = false;
    std::atomic<int> forwards{0}, backwards{0};  // this step's, done
    int64_t moved = 0;                           // this step's bytes copied, in and back
    // This step's record, read by step() after done_.
    std::vector<PipelineBlock> blocks;
    double busy = 0, apply = 0, accumulate = 0, flushed = 0;
    std::exception_ptr error;
    std::thread thread;

    Network& slot(int micro) { return *slots[size_t(micro) % slots.size()]; }
    float* outputGrad(int micro) { return outputGrads[size_t(micro) % outputGrads.size()].data(); }
    float* input(int micro) { return inputs[size_t(micro) % inputs.size()].data(); }
    Event sentOutputOf(int micro) { return sentOutput[size_t(micro) % sentOutput.size()]; }
    float* grads() { return stage->grads[size_t(here)].data(); }
};

struct StagePipeline::Lane {
    double busy = 0, apply = 0, accumulate = 0, flushed = 0;
    int64_t moved = 0;
    double loss = 0, correct = 0, weightDecay = 0;  // loss and correct: the last stage's
    std::vector<PipelineBlock> blocks;
};

void checkStageDevices(const std::vector<Device>& devices, int replicas, bool processes) {
    const auto gpus = std::count_if(devices.begin(), devices.end(), [](const Device& d) { return d.type == DeviceType::Cuda; });
    if (gpus == 0) return;
    if (size_t(gpus) < devices.size())
        throw Error("--stages: stages on CPUs and GPUs together are not built; give every stage a CPU (cpu:N) or every "
                    "stage a GPU (gpu:N)");
    for (const Device& d : devices)
        if (d.index >= gpuCount())
            throw Error("--stages: " + d.str() + " is not on this machine" +
                        (gpuCount() == 0 ? " (" + gpuRuntime().whyNot + ")"
                                         : ", which has " + std::to_string(gpuCount()) +
                                               (gpuCount() == 1 ? " GPU (gpu:0)" : " GPUs")));
    if (replicas > 1)
        throw Error("--stage-replicas: replicas of stages on GPUs are not built yet; give CPU stages (cpu:N) for stages "
                    "x replicas");
    if (processes)
        throw Error("--stages: stages on GPUs in each of several mpirun processes are not built yet; give CPU stages "
                    "(cpu:N) or run one process");
}

StagePipeline::StagePipeline(const ModelSpec& spec, const StagePipelineSetup& setup, const PipelineSchedule& schedule)
    : count_(int(setup.ranges.size())),
      localStage_(setup.localStage),
      first_(std::max(0, setup.localStage)),
      local_(setup.localStage >= 0 ? 1 : int(setup.ranges.size())),
      micro_(setup.microBatches),
      replicas_(setup.localStage >= 0 ? 1 : setup.replicas),
      allReplicas_(setup.replicas),
      firstReplica_(setup.localStage >= 0 ? setup.localReplica : 0),
      devices_(setup.devices),
      processes_(setup.processes),
      exampleOffset_(setup.exampleOffset),
      start_(workersHere(setup) + 1),
      done_(workersHere(setup) + 1) {
    const int count = count_;
    if (count < 1 || setup.devices.size() != setup.ranges.size())
        throw Error("a pipeline needs a device for each of its stages");
    if (allReplicas_ < 1) throw Error("--stage-replicas must be at least 1, got " + std::to_string(allReplicas_));
    schedule.checkMicroBatches(micro_);
    if (setup.batch < 1 || setup.batch % (micro_ * allReplicas_) != 0)
        throw Error("--micro-batches " + std::to_string(micro_) +
                    (allReplicas_ > 1 ? " x --stage-replicas " + std::to_string(allReplicas_) : std::string()) +
                    " does not divide the batch of " + std::to_string(setup.batch) + " examples");
    microBatch_ = setup.batch / (micro_ * allReplicas_);
    checkStageDevices(setup.devices, allReplicas_, processes_ != nullptr);
    if (anyGpu(setup.devices) && setup.sharedParams)
        throw Error("stages on GPUs keep their variables in their own memory");
    if (spansProcesses() && (!processes_ || processes_->size() != count * allReplicas_ || localStage_ >= count ||
                             firstReplica_ < 0 || firstReplica_ >= allReplicas_ ||
                             processes_->rank() != rankOf(firstReplica_, localStage_)))
        throw Error("--stage-per-process: process r S + s runs stage s of replica r, one process per stage and replica");
    input_ = shapeOf(spec).input;
    // A collective: every process, same count. Stages in processes of their own: a lane for
    // each direction; else each stage's all-reduce across the processes on a lane of its own.
    if (processes_) processes_->setLanes(spansProcesses() ? 4 : count);
    for (int s = first_; s < first_ + local_; ++s) {
        auto st = std::make_unique<Stage>();
        st->index = s;
        stages_.push_back(std::move(st));
    }
    for (int r = firstReplica_; r < firstReplica_ + replicas_; ++r)
        for (int s = first_; s < first_ + local_; ++s) {
            Stage& st = *stages_[size_t(s - first_)];
            auto w = std::make_unique<Worker>();
            w->stage = &st;
            w->replica = r;
            w->here = r - firstReplica_;
            w->device = setup.devices[size_t(s)];
            if (w->here > 0) w->device.index += count * w->here;  // (CPU stages only)
            w->backend = backendFor(w->device, setup);
            w->stream = w->backend->createStream();
            w->ops = schedule.ops(s, count, micro_);
            const LayerRange range{setup.ranges[size_t(s)].first, setup.ranges[size_t(s)].second};
            for (int k = activationsHeld(w->ops); k-- > 0;)
                w->slots.push_back(std::make_unique<Network>(spec, *w->backend, microBatch_, range));
            Network& first = *w->slots.front();
            const int64_t n = first.paramCount();
            if (w->here == 0) {  // the stage's variables and optimiser, with this process's first replica
                if (setup.sharedParams) {
                    st.params = setup.sharedParams + first.paramOffsetInModel();
                } else {
                    st.ownParams = w->backend->empty(Shape{std::max<int64_t>(n, 1)});
                    st.params = st.ownParams.data();
                }
                // (A stage of parameter-free layers has none to copy: memcpy takes no null source.)
                if (const std::vector<float> init = first.initialParams(setup.seed); !init.empty())
                    w->backend->copyFromHost(w->stream, st.params, init.data(), init.size() * sizeof(float));
                st.optimizer = std::make_unique<Optimizer>(*w->backend, setup.opt.rule, setup.opt.hyper,
                                                           setup.opt.schedule, size_t(n), w->stream);
                if (spansProcesses() && allReplicas_ > 1 && r == 0) st.received = w->backend->empty(Shape{std::max<int64_t>(n, 1)});
                paramCount_ += n;
            }
            st.grads.push_back(w->backend->empty(Shape{std::max<int64_t>(n, 1)}));
            if (micro_ > 1) w->scratch = w->backend->empty(Shape{std::max<int64_t>(n, 1)});
            // Batch norm: each micro-batch normalised by its own statistics, the moving ones kept once
            // per replica, updated by its micro-batches in order.
            if (first.hasBatchNorm()) {
                w->statistics = w->backend->empty(Shape{first.statisticCount()});
                const std::vector<float> initial = first.initialStatistics();
                w->backend->copyFromHost(w->stream, w->statistics.data(), initial.data(), initial.size() * sizeof(float));
            }
            for (auto& net : w->slots) {
                net->bindParams(st.params);
                net->bindGrads(w->grads());
                if (net->hasBatchNorm()) net->bindStatistics(w->statistics.data());
            }
            w->stats = w->backend->empty(Shape{3});
            if (s + 1 < count) {
                const Dims out = first.outputDims();
                for (size_t k = 0; k < w->slots.size(); ++k)
                    w->outputGrads.push_back(w->backend->empty(Shape{microBatch_, out.h, out.w, out.c}));
            }
            w->backend->synchronize(w->stream);
            if (s > first_) link(*w, *workers_.back(), setup.copies);
            else if (s > 0) linkToProcess(*w);
            if (s + 1 == first_ + local_ && s + 1 < count) {  // the stage after is in another process
                w->remoteNext = true;
                w->outputSends.resize(w->slots.size());
            }
            workers_.push_back(std::move(w));
        }
    if (spansProcesses()) shareAcrossProcesses(spec, setup);
    if (setup.syncBatchNorm) synchroniseBatchNorm();
    for (auto& w : workers_) w->thread = std::thread([this, p = w.get()] { runWorker(*p); });
}

// --sync-bn: each stage here with batch norm gets a meeting of its replicas here, whose sums go
// on to the stage's replicas in other processes: with stages in each process, an all-reduce on
// the stage's own lane (after its micro-batches' sums comes its gradients' all-reduce there, in
// every process in that order); with a stage per process, messages to and from replica 0's
// process (sumOverReplicaProcesses). Each replica's networks sum through it.
void StagePipeline::synchroniseBatchNorm() {
    if (spansProcesses() && allReplicas_ == 1)
        throw Error("--sync-bn: a stage per process without replicas has none to sum with (RunConfig refuses it)");
    if (anyGpu(devices_))
        throw Error("--sync-bn on GPU stages is not built yet (their statistics would cross through the host at each "
                    "batch norm); give CPU stages or leave --sync-bn out");
    const int everywhere = spansProcesses() ? allReplicas_ : replicas_ * (processes_ ? processes_->size() : 1);
    for (auto& st : stages_) {
        Worker& first = worker(firstReplica_, st->index);
        if (!first.slots.front()->hasBatchNorm()) continue;
        StatisticsMeeting::AcrossProcesses across;
        if (spansProcesses())
            across = [this, &first, stage = st->index, scratch = std::vector<float>()](float* data, size_t n) mutable {
                scratch.resize(n);
                sumOverReplicaProcesses(stage, data, scratch.data(), n, kStatisticsUp, *first.backend, first.stream);
            };
        else if (processes_)
            across = [this, lane = st->index](float* data, size_t n) {
                processes_->allReduce(lane, data, data, n, ReduceOp::Sum);
            };
        meetings_.push_back(std::make_unique<StatisticsMeeting>(replicas_, std::move(across)));
        for (int r = firstReplica_; r < firstReplica_ + replicas_; ++r) {
            Worker& w = worker(r, st->index);
            syncs_.push_back(std::make_unique<StatisticsSync>(*meetings_.back(), w.here, *w.backend, everywhere));
            for (auto& net : w.slots) net->setStatisticsSync(syncs_.back().get());
        }
    }
}

// Stages in processes of their own: the model's parameter count; every stage's sizes, each
// measured by its own process; and, on the chief, a mirror of each other stage's variables'
// place and optimiser slots, which gatherToChief fills.
void StagePipeline::shareAcrossProcesses(const ModelSpec& spec, const StagePipelineSetup& setup) {
    paramCount_ = shapeOf(spec).params;
    const Worker& w = *workers_.front();
    const StageSizes mine{activationBytes(localStage_), stageBytes(localStage_), w.stage->optimizer->slotBytes(),
                          heldMicroBatches(localStage_)};
    std::vector<std::string> all = processes_->gather(std::string(reinterpret_cast<const char*>(&mine), sizeof mine));
    all.resize(size_t(count_));  // replica 0's stages (every replica's stage s measures the same)
    for (const std::string& text : all) {
        if (text.size() != sizeof(StageSizes)) throw Error("processes: a stage's sizes arrived garbled");
        StageSizes theirs;
        std::memcpy(&theirs, text.data(), sizeof theirs);
        sizes_.push_back(theirs);
    }
    if (processes_->rank() != 0) return;
    for (int s = 0; s < count_; ++s) {
        if (local(s)) continue;
        Mirror m;
        m.index = s;
        // (Its layers at batch 1, for where its variables are in the model's.)
        const Network layout(spec, *w.backend, 1, LayerRange{setup.ranges[size_t(s)].first, setup.ranges[size_t(s)].second});
        m.offset = layout.paramOffsetInModel();
        m.count = layout.paramCount();
        m.statOffset = layout.statisticOffsetInModel();
        m.statCount = layout.statisticCount();
        m.optimizer = std::make_unique<Optimizer>(*w.backend, setup.opt.rule, setup.opt.hyper, setup.opt.schedule,
                                                  size_t(m.count), w.stream);
        mirrors_.push_back(std::move(m));
    }
    for (int r = 1; r < allReplicas_; ++r)
        for (int s = 0; s < count_; ++s) {
            const int64_t n = s == 0 ? w.slots.front()->statisticCount() : mirrors_[size_t(s - 1)].statCount;
            if (n > 0) replicaStatistics_.push_back({s, r, w.backend->empty(Shape{n})});
        }
    w.backend->synchronize(w.stream);
}

// Stage w's stage before is in another process: its input and its input's gradient are buffers
// of its own, received from and sent to that process.
void StagePipeline::linkToProcess(Worker& w) {
    w.link = Worker::Link::Process;
    const Dims in = w.slots.front()->inputDims();
    for (size_t k = 0; k < w.slots.size(); ++k) w.inputs.push_back(w.backend->empty(Shape{microBatch_, in.h, in.w, in.c}));
    w.inputGrad = w.backend->empty(Shape{microBatch_, in.h, in.w, in.c});
}

ParamSlice StagePipeline::localSlice() const {
    const Network& net = *workers_.front()->slots.front();
    return {size_t(net.paramOffsetInModel()), size_t(net.paramCount())};
}

float* StagePipeline::localParams() const { return stages_.front()->params; }

void StagePipeline::gatherToChief(float* host, float* statistics, float* average) {
    if (!spansProcesses()) return;
    std::vector<ProcessGroup::Message> sends, receives;
    if (firstReplica_ > 0 && workers_.front()->slots.front()->hasBatchNorm()) {  // its own statistics, alone
        const Tensor& mine = workers_.front()->statistics;
        sends.push_back({0, kReplicaStatisticsTag, const_cast<float*>(mine.data()), mine.bytes()});
    }
    for (ReplicaStatistics& rs : replicaStatistics_)
        receives.push_back({rankOf(rs.replica, rs.stage), kReplicaStatisticsTag, rs.values.data(), rs.values.bytes()});
    if (processes_->rank() != 0 && firstReplica_ == 0) {  // (other replicas' stages hold the same)
        const Worker& w = *workers_.front();
        const size_t bytes = localSlice().count * sizeof(float);
        sends.push_back({0, kGatherTag, w.stage->params, bytes});
        int tag = kGatherTag;
        for (auto& [name, t] : w.stage->optimizer->slotBuffers()) sends.push_back({0, ++tag, t->data(), t->bytes()});
        if (w.slots.front()->hasBatchNorm()) sends.push_back({0, ++tag, w.statistics.data(), w.statistics.bytes()});
        if (average) sends.push_back({0, ++tag, average, bytes});
    }
    for (Mirror& m : mirrors_) {
        const size_t bytes = size_t(m.count) * sizeof(float);
        receives.push_back({m.index, kGatherTag, host + m.offset, bytes});
        int tag = kGatherTag;
        for (auto& [name, t] : m.optimizer->slotBuffers()) receives.push_back({m.index, ++tag, t->data(), t->bytes()});
        if (m.statCount > 0) {
            if (!statistics) throw Error("internal error: batch norm's statistics gathered into no buffer");
            receives.push_back({m.index, ++tag, statistics + m.statOffset, size_t(m.statCount) * sizeof(float)});
        }
        if (average) receives.push_back({m.index, ++tag, average + m.offset, bytes});
    }
    processes_->exchange(sends, receives);
}

StagePipeline::~StagePipeline() {
    quit_ = true;
    start_.arrive_and_wait();
    for (auto& w : workers_) {
        w->thread.join();
        Backend& be = *w->backend;
        for (Stream s : {w->stream, w->sendNext, w->sendPrev})
            if (s) be.destroyStream(s);
        for (Event e : w->sentOutput) be.destroyEvent(e);
        for (Event e : {w->sentInputGrad, w->computed})
            if (e) be.destroyEvent(e);
    }
}

// CPU stages: each a backend (a thread team) of its own. Stages on one GPU share its backend
// (one allocator), each on a stream of its own (with its own cuDNN and cuBLAS handles).
std::shared_ptr<Backend> StagePipeline::backendFor(const Device& d, const StagePipelineSetup& setup) {
    if (d.type == DeviceType::Cpu) return makeCpuBackend(setup.threadsPerStage, d.index, setup.opt.precision);
    for (const auto& be : gpuBackends_)
        if (be->device() == d) return be;
    BackendOptions o;
    o.allowTf32 = setup.opt.allowTf32;
    o.deterministic = setup.opt.deterministic;
    o.precision = setup.opt.precision;
    gpuBackends_.push_back(makeBackend(d, o));
    return gpuBackends_.back();
}

// How stage w meets the stage before (`prev`, made just before it): in one memory they share its
// buffers unless copies are asked for; two GPUs send over NCCL where there is one.
void StagePipeline::link(Worker& w, Worker& prev, bool copies) {
    w.link = !ownsInput(prev.device, w.device, copies)     ? Worker::Link::Shared
             : copies || w.device.type == DeviceType::Cpu ? Worker::Link::Copy
             : ncclAvailable()                            ? Worker::Link::Nccl
                                                          : Worker::Link::Copy;
    if (w.link == Worker::Link::Shared) return;
    const Dims in = w.slots.front()->inputDims();
    for (size_t k = 0; k < w.slots.size(); ++k) w.inputs.push_back(w.backend->empty(Shape{microBatch_, in.h, in.w, in.c}));
    w.inputGrad = w.backend->empty(Shape{microBatch_, in.h, in.w, in.c});
    if (w.link != Worker::Link::Nccl) return;
    // With one hardware queue a GPU runs its streams' NCCL kernels in the order they were
    // posted, and the two stages post their sends and receives in different orders (1f1b).
    if (const char* c = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"); c && std::atoi(c) == 1)
        throw Error("--stages: stages on two GPUs send and receive on several streams at once, which "
                    "CUDA_DEVICE_MAX_CONNECTIONS=1 serialises into a deadlock; unset it");
    const std::vector<int> pair{prev.device.index, w.device.index};
    w.fromPrev = std::make_unique<NcclGroup>(pair);
    w.toPrev = std::make_unique<NcclGroup>(pair);
    prev.sendNext = prev.backend->createCopyStream();
    for (size_t k = 0; k < prev.slots.size(); ++k) prev.sentOutput.push_back(prev.backend->createEvent());
    w.sendPrev = w.backend->createCopyStream();
    w.sentInputGrad = w.backend->createEvent();
    for (Worker* x : {&w, &prev})
        if (!x->computed) x->computed = x->backend->createEvent();
    // NCCL connects a pair of ranks on its first send and receive, and that first call waits for
    // the peer's: the stage threads, whose sends come before the peer is told to receive, would
    // wait for each other. So each direction's first transfer is made here, both ranks at once.
    const size_t count = size_t(w.inputGrad.numel());
    connect(*w.fromPrev, 0, prev, prev.sendNext, prev.slots.front()->output(), w, w.stream, w.input(0), count);
    connect(*w.toPrev, 1, w, w.sendPrev, w.inputGrad.data(), prev, prev.stream, prev.outputGrad(0), count);
}

// One transfer over `group` from rank `sender` (worker `from`, on stream `out`) to the other rank
// (worker `to`, on stream `in`), the two calls from two threads; the group aborted if either fails.
void StagePipeline::connect(NcclGroup& group, int sender, Worker& from, Stream out, const float* src, Worker& to,
                            Stream in, float* dst, size_t count) {
    std::exception_ptr sendError;
    std::thread sending([&] {
        try {
            group.send(sender, src, count, 1 - sender, out);
            from.backend->synchronize(out);
        } catch (...) {
            sendError = std::current_exception();
            group.abort();
        }
    });
    try {
        group.recv(1 - sender, dst, count, sender, in);
        to.backend->synchronize(in);
    } catch (...) {
        group.abort();
        sending.join();
        throw;
    }
    sending.join();
    if (sendError) std::rethrow_exception(sendError);
}

Device StagePipeline::laneDevice(int lane) const {
    const int r = lane / stages(), s = lane % stages();
    if (local(s) && localReplica(r)) return workers_[at(r, s)]->device;
    return devices_[size_t(s)];  // (in another process: its stage's device there)
}

void StagePipeline::runWorker(Worker& w) {
    for (;;) {
        start_.arrive_and_wait();
        if (quit_) return;
        try {
            runStep(w);
        } catch (const Stopped&) {  // another worker failed, and fail() has been called
        } catch (...) {
            w.error = std::current_exception();
            fail();
        }
        done_.arrive_and_wait();
    }
}

// A send of what w's compute stream has just written: on its own stream `queue`, after that work,
// its completion recorded in `sent`; counted as crossing between memories.
void StagePipeline::send(Worker& w, Stream queue, NcclGroup& group, int rank, const float* buf, size_t count, Event sent) {
    Backend& be = *w.backend;
    be.recordEvent(w.computed, w.stream);
    be.waitEvent(queue, w.computed);
    group.send(rank, buf, count, 1 - rank, queue);
    be.recordEvent(sent, queue);
    w.moved += int64_t(count * sizeof(float));
}

// Waits until `done` counts micro-batch `micro` (micro-batches finish in increasing order);
// false when another worker failed.
bool StagePipeline::waitFor(std::atomic<int>& done, int micro) {
    for (int v = done.load(std::memory_order_acquire); v <= micro; v = done.load(std::memory_order_acquire))
        done.wait(v, std::memory_order_acquire);
    return !failed_;
}

// Lets every worker waiting on another go on (and stop: waitFor says the step failed), those
// blocked in an NCCL transfer whose peer failed included (their groups aborted).
void StagePipeline::fail() {
    failed_ = true;
    for (auto& m : meetings_) m->abort();
    for (auto& w : workers_)
        for (NcclGroup* g : {w->fromPrev.get(), w->toPrev.get()})
            if (g) g->abort();
    for (auto& w : workers_) {
        w->forwards.store(INT_MAX / 2, std::memory_order_release);
        w->backwards.store(INT_MAX / 2, std::memory_order_release);
        w->forwards.notify_all();
        w->backwards.notify_all();
    }
}

void StagePipeline::runStep(Worker& w) {
    const int s = w.stage->index, r = w.replica;
    // The stages before and after in this process (null: none, or in another process).
    Worker* prev = s > first_ ? &worker(r, s - 1) : nullptr;
    Worker* next = s + 1 < first_ + local_ ? &worker(r, s + 1) : nullptr;
    const bool last = s + 1 == stages();
    Backend& be = *w.backend;
    be.fill(w.stream, w.stats.data(), 0.f, 3);
    w.blocks.clear();
    w.busy = w.apply = w.accumulate = 0;
    w.moved = 0;
    using Link = Worker::Link;
    const bool ncclNext = next && next->link == Link::Nccl, ncclPrev = prev && w.link == Link::Nccl;
    const bool processPrev = w.link == Link::Process;
    const int64_t n = w.slots.front()->paramCount();
    const int64_t perReplica = int64_t(microBatch_) * micro_;
    int backwardsRun = 0;
    for (const PipelineOp& op : w.ops) {
        Network& net = w.slot(op.micro);
        // Its rows of the step's batch (of this process's share: its masks' rows of the global
        // batch); the weight decay once per step, on replica 0's first.
        const int64_t first = r * perReplica + int64_t(op.micro) * microBatch_;
        const MicroBatch part{exampleOffset_ + first, microBatch_ * micro_ * allReplicas_, r == 0 && op.micro == 0};
        if (op.forward) {
            if (prev && !waitFor(prev->forwards, op.micro)) return;
            if (processPrev) processes_->awaitOn(kForwardLane, rankOf(r, s - 1), op.micro);  // (waiting is no work)
            const double t = secondsSince(t0_);  // a copy in is the stage's work
            if (prev && w.link == Link::Copy) {
                const size_t bytes = w.inputs.front().bytes();
                be.copy(w.stream, w.input(op.micro), prev->slot(op.micro).output(), bytes);
                w.moved += int64_t(bytes);
                net.setInput(w.input(op.micro));
            } else if (ncclPrev) {  // sent (and counted) by the stage before
                w.fromPrev->recv(1, w.input(op.micro), size_t(w.inputs.front().numel()), 0, w.stream);
                net.setInput(w.input(op.micro));
            } else if (prev) {
                net.setInput(prev->slot(op.micro).output());
            } else if (processPrev) {  // sent (and counted) by the stage before's process
                processes_->receiveOn(kForwardLane, {rankOf(r, s - 1), op.micro, w.input(op.micro), w.inputs.front().bytes()});
                net.setInput(w.input(op.micro));
            } else {  // the first stage copies its micro-batch's rows of the step's batch in
                const size_t row = size_t(net.inputDims().size());
                be.copyFromHost(w.stream, net.input(), batch_->x.data() + size_t(first) * row,
                                size_t(microBatch_) * row * sizeof(float));
            }
            if (last)
                be.copyFromHost(w.stream, net.labels(), batch_->y.data() + first,
                                size_t(microBatch_) * sizeof(int32_t));
            // Its slot's output is written again only once its last send has left.
            if (ncclNext) be.waitEvent(w.stream, w.sentOutputOf(op.micro));
            if (w.remoteNext)
                if (auto& sending = w.outputSends[size_t(op.micro) % w.outputSends.size()]) sending->wait();
            net.forward(w.stream, true, seed_, microBatch_, w.stats.data(), part);
            if (ncclNext) {
                const size_t count = size_t(next->inputs.front().numel());
                send(w, w.sendNext, *next->fromPrev, 0, net.output(), count, w.sentOutputOf(op.micro));
            } else if (w.remoteNext) {
                be.synchronize(w.stream);
                const size_t bytes = w.outputGrads.front().bytes();  // (the output's size)
                w.outputSends[size_t(op.micro) % w.outputSends.size()] =
                    processes_->startSend(kForwardLane, {rankOf(r, s + 1), op.micro, const_cast<float*>(net.output()), bytes});  // (only read)
                w.moved += int64_t(bytes);
            }
            be.synchronize(w.stream);
            w.blocks.push_back({op.micro, true, t, secondsSince(t0_)});
            w.forwards.fetch_add(1, std::memory_order_release);
            w.forwards.notify_all();
        } else {
            if (next && !waitFor(next->backwards, op.micro)) return;
            if (w.remoteNext) processes_->awaitOn(kBackwardLane, rankOf(r, s + 1), op.micro);
            const double t = secondsSince(t0_);
            if (ncclNext)  // sent (and counted) by the stage after
                next->toPrev->recv(0, w.outputGrad(op.micro), size_t(next->inputGrad.numel()), 1, w.stream);
            else if (w.remoteNext)  // sent (and counted) by the stage after's process
                processes_->receiveOn(kBackwardLane, {rankOf(r, s + 1), op.micro, w.outputGrad(op.micro), w.outputGrads.front().bytes()});
            if (!last) net.setOutputGrad(w.outputGrad(op.micro));
            net.setInputGrad(s == 0 ? nullptr : w.link == Link::Shared ? prev->outputGrad(op.micro) : w.inputGrad.data());
            if (ncclPrev) be.waitEvent(w.stream, w.sentInputGrad);  // its last send has left
            if (processPrev && w.inputGradSend) w.inputGradSend->wait();
            // The step's first backward writes the replica's gradient; each later one writes its
            // share into the scratch, added on (the layers' weight gradients overwrite).
            if (micro_ > 1) net.bindGrads(backwardsRun == 0 ? w.grads() : w.scratch.data());
            net.backward(w.stream, part);
            if (prev && w.link == Link::Copy) {  // the input's gradient back into the stage before's slot
                be.copy(w.stream, prev->outputGrad(op.micro), w.inputGrad.data(), w.inputGrad.bytes());
                w.moved += int64_t(w.inputGrad.bytes());
            } else if (ncclPrev) {
                send(w, w.sendPrev, *w.toPrev, 1, w.inputGrad.data(), size_t(w.inputGrad.numel()), w.sentInputGrad);
            } else if (processPrev) {
                be.synchronize(w.stream);
                w.inputGradSend = processes_->startSend(kBackwardLane, {rankOf(r, s - 1), op.micro, w.inputGrad.data(), w.inputGrad.bytes()});
                w.moved += int64_t(w.inputGrad.bytes());
            }
            be.synchronize(w.stream);
            // The stage before may go on now: adding this micro-batch's gradient on is this
            // stage's own work, off the pipeline's critical path.
            w.backwards.fetch_add(1, std::memory_order_release);
            w.backwards.notify_all();
            if (backwardsRun > 0) {
                const double a = secondsSince(t0_);
                be.axpy(w.stream, 1.f, w.scratch.data(), w.grads(), size_t(n));
                be.synchronize(w.stream);
                w.accumulate += secondsSince(t0_) - a;
            }
            ++backwardsRun;
            w.blocks.push_back({op.micro, false, t, secondsSince(t0_)});
        }
        w.busy += w.blocks.back().end - w.blocks.back().start;
    }
    // Every send has been received before the step ends (the stage after has taken them all).
    for (Stream q : {w.sendNext, w.sendPrev})
        if (q) be.synchronize(q);
    for (auto& sending : w.outputSends)
        if (sending) sending->wait(), sending.reset();
    if (w.inputGradSend) w.inputGradSend->wait(), w.inputGradSend.reset();
    w.flushed = secondsSince(t0_);
    // The last of the stage's replicas to finish meets their gradients and updates the stage.
    if (w.stage->finished.fetch_add(1, std::memory_order_acq_rel) + 1 == replicas_) update(w);
}

// The stage's replicas' gradients summed into the first's here (they share memory: the
// all-reduce of data parallelism inside the pipeline moves nothing between memories), then across
// the processes (stages in each: their mean; a stage per process with replicas: their sum, as
// MPI messages), then its one update. Runs on the last replica here to finish, on the first
// replica's backend and stream (the optimiser's; that replica is done with the step by then): in
// a stage's process with replicas, every replica's process updates its own copy alike.
void StagePipeline::update(Worker& w) {
    Stage& st = *w.stage;
    Worker& first = worker(firstReplica_, st.index);
    Backend& be = *first.backend;
    const double t = secondsSince(t0_);
    const size_t n = size_t(w.slots.front()->paramCount());
    for (int r = 1; r < replicas_; ++r) be.axpy(first.stream, 1.f, st.grads[size_t(r)].data(), st.grads[0].data(), n);
    if (processes_ && !spansProcesses()) {  // every process's gradient of its share: their mean is the global batch's
        be.synchronize(first.stream);
        processes_->allReduce(st.index, st.grads[0].data(), st.grads[0].data(), n, ReduceOp::Mean);
    }
    if (spansProcesses() && allReplicas_ > 1) {
        be.synchronize(first.stream);
        sumOverReplicaProcesses(st.index, st.grads[0].data(), st.received.data(), n, kGradientsUp, be, first.stream);
    }
    st.lr = st.optimizer->apply(first.stream, st.params, st.grads[0].data(), step_);
    be.synchronize(first.stream);
    w.apply = secondsSince(t0_) - t;
}

// Replicas of a stage in processes of their own: data (n floats of host memory: CPU stages) :=
// its sum over the stage's replicas. Replica 0's process receives the others' (into scratch, n
// floats), adds them to its own in replica order and sends the sum back, so that every replica
// holds the same floats: for the gradients (each replica's loss is over the whole batch, so their
// sum is the batch's gradient) every replica then applies the same update to the same variables.
// Each replica's floats cross once each way: 2 (R - 1) x n x 4 bytes, counted by the process
// group as its senders send them.
void StagePipeline::sumOverReplicaProcesses(int stage, float* data, float* scratch, size_t n, int upTag, Backend& be,
                                            Stream s) {
    const size_t bytes = n * sizeof(float);
    const int root = rankOf(0, stage);
    if (firstReplica_ > 0) {
        processes_->startSend(kReplicaLane, {root, upTag, data, bytes})->wait();
        processes_->receiveOn(kReplicaLane, {root, upTag + 1, data, bytes});
        return;
    }
    for (int r = 1; r < allReplicas_; ++r) {
        processes_->receiveOn(kReplicaLane, {rankOf(r, stage), upTag, scratch, bytes});
        be.axpy(s, 1.f, scratch, data, n);
        be.synchronize(s);
    }
    std::vector<std::unique_ptr<ProcessGroup::Sending>> sending;
    for (int r = 1; r < allReplicas_; ++r)
        sending.push_back(processes_->startSend(kReplicaLane, {rankOf(r, stage), upTag + 1, data, bytes}));
    for (auto& x : sending) x->wait();
}

PipelineStep StagePipeline::step(const Batch& global, int64_t step, uint64_t seed) {
    if (failed_) throw Error("the pipeline stopped at a failure in an earlier step");
    const int batch = microBatch_ * micro_ * allReplicas_;
    if (global.n != batch || global.x.size() != size_t(batch) * size_t(input_.size()) || global.y.size() != size_t(batch))
        throw Error("a pipeline step needs a batch of " + std::to_string(batch) + " examples of " + input_.str() +
                    ", got " + std::to_string(global.n));
    batch_ = &global;
    step_ = step;
    seed_ = seed;
    for (auto& st : stages_) st->finished.store(0);
    for (auto& w : workers_) {
        w->forwards.store(0);
        w->backwards.store(0);
        w->error = nullptr;
    }
    // Stages in processes of their own start the step together (each process has its batch by
    // now), so that their timelines share one start: a process that took longer for its batch,
    // or evaluated the model before this step, does not show in the others' bubble.
    if (spansProcesses()) processes_->any(false);
    t0_ = std::chrono::steady_clock::now();
    start_.arrive_and_wait();
    done_.arrive_and_wait();
    PipelineStep r;
    r.seconds = secondsSince(t0_);
    for (auto& w : workers_)
        if (w->error) std::rethrow_exception(w->error);
    std::vector<Lane> lanes;
    for (auto& w : workers_) {
        float stats[3];
        w->backend->copyToHost(w->stream, stats, w->stats.data(), sizeof stats);
        w->backend->synchronize(w->stream);
        lanes.push_back({w->busy, w->apply, w->accumulate, w->flushed, w->moved, stats[0], stats[1], stats[2], w->blocks});
    }
    if (spansProcesses()) lanes = gatherLanes(std::move(lanes));
    r.examples = batch;
    r.lr = stages_.front()->lr;
    double busy = 0;
    r.bytesMoved = 0;  // stages sharing memory: nothing crosses; copies and sends: what they moved
    for (size_t l = 0; l < lanes.size(); ++l) {
        const Lane& lane = lanes[l];
        r.bytesMoved += lane.moved;
        const bool last = int(l) % stages() + 1 == stages();
        r.laneLoss.push_back(last ? lane.loss : std::nan(""));
        r.laneCorrect.push_back(last ? lane.correct : std::nan(""));
        r.laneExamples.push_back(last ? microBatch_ * micro_ : 0);
        if (last) r.lossSum += lane.loss, r.correct += lane.correct;
        r.weightDecayLoss += lane.weightDecay;
        r.span = std::max(r.span, lane.flushed);
        r.busy.push_back(lane.busy);
        r.apply.push_back(lane.apply);
        r.accumulate.push_back(lane.accumulate);
        r.blocks.push_back(lane.blocks);
        busy += lane.busy;
    }
    r.bubbleFraction = r.span > 0 ? std::clamp(1.0 - busy / (double(lanes.size()) * r.span), 0.0, 1.0) : 0.0;
    return r;
}

// Stages in processes of their own: every process's lane, in stage order, on every process. Each
// lane's times are from its own process's start of the step, which the processes begin together
// (step()). (Reports, not the training's traffic: as the votes, not counted in the bytes moved.)
std::vector<StagePipeline::Lane> StagePipeline::gatherLanes(std::vector<Lane> local) {
    const Lane& mine = local.front();
    std::vector<double> packed{mine.busy, mine.apply, mine.accumulate, mine.flushed, double(mine.moved),
                               mine.loss, mine.correct, mine.weightDecay};
    for (const PipelineBlock& b : mine.blocks) packed.insert(packed.end(), {double(b.micro), b.forward ? 1.0 : 0.0, b.start, b.end});
    constexpr size_t kFixed = 8, kBlock = 4;
    const std::vector<std::string> all =
        processes_->gather(std::string(reinterpret_cast<const char*>(packed.data()), packed.size() * sizeof(double)));
    std::vector<Lane> lanes;
    for (const std::string& text : all) {
        std::vector<double> v(text.size() / sizeof(double));
        if (text.size() % sizeof(double) != 0 || v.size() < kFixed || (v.size() - kFixed) % kBlock != 0)
            throw Error("processes: a stage's step report arrived garbled");
        std::memcpy(v.data(), text.data(), text.size());
        Lane l{v[0], v[1], v[2], v[3], int64_t(v[4]), v[5], v[6], v[7], {}};
        for (size_t at = kFixed; at < v.size(); at += kBlock)
            l.blocks.push_back({int(v[at]), v[at + 1] != 0, v[at + 2], v[at + 3]});
        lanes.push_back(std::move(l));
    }
    return lanes;
}

// The stages here (replica 0's hold each stage's variables).
void StagePipeline::variablesInto(float* host) const {
    for (int k = 0; k < local_; ++k) {
        const Worker& w = *workers_[size_t(k)];
        const Network& net = *w.slots.front();
        w.backend->copyToHost(w.stream, host + net.paramOffsetInModel(), w.stage->params,
                              size_t(net.paramCount()) * sizeof(float));
        w.backend->synchronize(w.stream);
    }
}

// Replica 0's moving statistics of every stage here; set: every replica's.
void StagePipeline::statisticsInto(float* host) const {
    for (int k = 0; k < local_; ++k) {
        const Worker& w = *workers_[size_t(k)];
        const Network& net = *w.slots.front();
        if (!net.hasBatchNorm()) continue;
        w.backend->copyToHost(w.stream, host + net.statisticOffsetInModel(), w.statistics.data(),
                              size_t(net.statisticCount()) * sizeof(float));
        w.backend->synchronize(w.stream);
    }
}

void StagePipeline::setStatistics(const float* host) {
    for (const auto& w : workers_) {
        const Network& net = *w->slots.front();
        if (!net.hasBatchNorm()) continue;
        w->backend->copyFromHost(w->stream, w->statistics.data(), host + net.statisticOffsetInModel(),
                                 size_t(net.statisticCount()) * sizeof(float));
        w->backend->synchronize(w->stream);
    }
}

std::vector<float> StagePipeline::variables() const {
    std::vector<float> host(static_cast<size_t>(paramCount_));
    variablesInto(host.data());
    return host;
}

void StagePipeline::setVariables(const float* host) {
    for (int k = 0; k < local_; ++k) {
        const Worker& w = *workers_[size_t(k)];
        const Network& net = *w.slots.front();
        w.backend->copyFromHost(w.stream, w.stage->params, host + net.paramOffsetInModel(),
                                size_t(net.paramCount()) * sizeof(float));
        w.backend->synchronize(w.stream);
    }
}

std::vector<StateBuffer> StagePipeline::state() {
    std::vector<StateBuffer> out;
    const auto add = [&out](int stage, Optimizer& optimizer, Worker& w) {
        for (auto& [name, t] : optimizer.slotBuffers())
            out.push_back({"stage" + std::to_string(stage) + "/optimizer/" + name, w.backend.get(), w.stream, t->data(),
                           size_t(t->numel())});
    };
    size_t mirror = 0;
    for (int s = 0; s < stages(); ++s)
        if (local(s)) add(s, *stages_[size_t(s - first_)]->optimizer, *workers_[at(firstReplica_, s)]);
        else if (mirror < mirrors_.size() && mirrors_[mirror].index == s) add(s, *mirrors_[mirror++].optimizer, *workers_.front());
    // Replicas 1.. keep moving statistics of their own (replica 0's are the model's statistics):
    // here, and on the chief those of replicas in processes of their own, as last gathered.
    // Where they differ by process (no --sync-bn), replica 0's too: each process restores its own.
    const bool everyReplica = statisticsDifferByProcess();
    const auto replicaStatistics = [&out, everyReplica](int stage, int replica, Backend* backend, Stream stream,
                                                        Tensor& values) {
        out.push_back({"stage" + std::to_string(stage) + "/replica" + std::to_string(replica) + "/statistics", backend,
                       stream, values.data(), size_t(values.numel()), everyReplica});
    };
    for (auto& w : workers_)
        if ((w->replica > 0 || everyReplica) && !w->statistics.empty())
            replicaStatistics(w->stage->index, w->replica, w->backend.get(), w->stream, w->statistics);
    for (ReplicaStatistics& rs : replicaStatistics_)
        replicaStatistics(rs.stage, rs.replica, workers_.front()->backend.get(), workers_.front()->stream, rs.values);
    return out;
}

bool StagePipeline::statisticsDifferByProcess() const {
    return processes_ && processes_->size() > 1 && !spansProcesses() && meetings_.empty() /* no --sync-bn */ &&
           std::any_of(workers_.begin(), workers_.end(), [](const auto& w) { return !w->statistics.empty(); });
}

size_t StagePipeline::optimizerSlotBytes() const {
    size_t bytes = 0;
    for (int s = 0; s < stages(); ++s) bytes += local(s) ? stages_[size_t(s - first_)]->optimizer->slotBytes() : sizes_[size_t(s)].optimizerSlots;
    return bytes;
}

std::string StagePipeline::backendName() const { return workers_.front()->backend->name(); }

size_t StagePipeline::stageBytes(int stage) const {
    if (!local(stage)) return sizes_[size_t(stage)].allocated;
    const Stage& st = *stages_[size_t(stage - first_)];
    const Network& net = *workers_[at(firstReplica_, stage)]->slots.front();
    size_t bytes = (st.ownParams.empty() ? size_t(net.paramCount()) * sizeof(float) : st.ownParams.bytes()) +
                   st.optimizer->slotBytes() + (st.received.empty() ? 0 : st.received.bytes());
    for (int k = 0; k < replicas_; ++k) {
        const Worker& w = *workers_[at(firstReplica_ + k, stage)];
        bytes += st.grads[size_t(k)].bytes() + (w.scratch.empty() ? 0 : w.scratch.bytes());
    }
    return bytes + size_t(replicas_) * activationBytes(stage);
}

int StagePipeline::heldMicroBatches(int stage) const {
    return local(stage) ? int(workers_[at(firstReplica_, stage)]->slots.size()) : sizes_[size_t(stage)].held;
}

size_t StagePipeline::activationBytes(int stage) const {
    if (!local(stage)) return sizes_[size_t(stage)].activations;
    const Worker& w = *workers_[at(firstReplica_, stage)];
    size_t bytes = 0;
    for (const auto& net : w.slots) {
        const NetworkMemory m = net->memoryUse();
        bytes += m.activations + m.saved + m.workspace;  // (each slot's network has its own workspace)
    }
    for (const std::vector<Tensor>* buffers : {&w.outputGrads, &w.inputs})
        for (const Tensor& t : *buffers) bytes += t.bytes();
    return bytes + (w.inputGrad.empty() ? 0 : w.inputGrad.bytes());
}

}  // namespace tb
