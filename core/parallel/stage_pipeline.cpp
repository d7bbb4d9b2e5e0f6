#include "parallel/stage_pipeline.hpp"

#include <algorithm>
#include <climits>

#include "util/error.hpp"

namespace tb {

namespace {
double since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

struct StagePipeline::Stage {
    int index = 0;
    std::shared_ptr<Backend> backend;
    Stream stream = nullptr;
    std::vector<PipelineOp> ops;
    Tensor ownParams;      // this stage's slice of the variables, unless in StagePipelineSetup::sharedParams
    float* params = nullptr;
    Tensor grads;          // (its parameters) the step's gradient
    Tensor scratch;        // one micro-batch's gradient (M > 1), summed into grads
    Tensor stats;          // (3) loss sum, correct, weight-decay loss
    std::vector<std::unique_ptr<Network>> slots;  // (micro-batch, layers) each, sharing params
    // Per slot (micro-batch, output dims): the gradient of this stage's output, which the next
    // stage's backward writes. Not on the last stage.
    std::vector<Tensor> outputGrads;
    std::unique_ptr<Optimizer> optimizer;
    std::atomic<int> forwards{0}, backwards{0};  // this step's, done
    // This step's record, read by step() after done_.
    std::vector<PipelineBlock> blocks;
    double busy = 0, apply = 0, accumulate = 0, flushed = 0;
    float lr = 0;
    std::exception_ptr error;
    std::thread thread;

    Network& slot(int micro) { return *slots[size_t(micro) % slots.size()]; }
    float* outputGrad(int micro) { return outputGrads[size_t(micro) % outputGrads.size()].data(); }
};

StagePipeline::StagePipeline(const ModelSpec& spec, const StagePipelineSetup& setup, const PipelineSchedule& schedule)
    : micro_(setup.microBatches),
      schedule_(schedule),
      start_(std::ptrdiff_t(setup.ranges.size()) + 1),
      done_(std::ptrdiff_t(setup.ranges.size()) + 1) {
    const int count = int(setup.ranges.size());
    if (count < 1 || setup.devices.size() != setup.ranges.size())
        throw Error("a pipeline needs a device for each of its stages");
    schedule.checkMicroBatches(micro_);
    if (setup.batch < 1 || setup.batch % micro_ != 0)
        throw Error("--micro-batches " + std::to_string(micro_) + " does not divide the batch of " +
                    std::to_string(setup.batch) + " examples");
    microBatch_ = setup.batch / micro_;
    for (int s = 0; s < count; ++s) {
        const Device device = setup.devices[size_t(s)];
        if (device.type != DeviceType::Cpu)
            throw Error("--stages: stages on " + device.str() + " are not built yet; give CPU devices (cpu:N)");
        auto st = std::make_unique<Stage>();
        st->index = s;
        st->backend = makeCpuBackend(setup.threadsPerStage, device.index, setup.opt.precision);
        st->stream = st->backend->createStream();
        st->ops = schedule.ops(s, count, micro_);
        const LayerRange range{setup.ranges[size_t(s)].first, setup.ranges[size_t(s)].second};
        for (int k = activationsHeld(st->ops); k-- > 0;)
            st->slots.push_back(std::make_unique<Network>(spec, *st->backend, microBatch_, range));
        Network& first = *st->slots.front();
        const int64_t n = first.paramCount();
        if (setup.sharedParams) {
            st->params = setup.sharedParams + first.paramOffsetInModel();
        } else {
            st->ownParams = st->backend->empty(Shape{std::max<int64_t>(n, 1)});
            st->params = st->ownParams.data();
        }
        st->grads = st->backend->empty(Shape{std::max<int64_t>(n, 1)});
        if (micro_ > 1) st->scratch = st->backend->empty(Shape{std::max<int64_t>(n, 1)});
        for (auto& net : st->slots) {
            net->bindParams(st->params);
            net->bindGrads(st->grads.data());
        }
        const std::vector<float> init = first.initialParams(setup.seed);
        st->backend->copyFromHost(st->stream, st->params, init.data(), init.size() * sizeof(float));
        st->stats = st->backend->empty(Shape{3});
        if (s + 1 < count) {
            const Dims out = first.outputDims();
            for (size_t k = 0; k < st->slots.size(); ++k)
                st->outputGrads.push_back(st->backend->empty(Shape{microBatch_, out.h, out.w, out.c}));
        }
        st->optimizer = std::make_unique<Optimizer>(*st->backend, setup.opt.rule, setup.opt.hyper, setup.opt.schedule,
                                                    size_t(n), st->stream);
        st->backend->synchronize(st->stream);
        paramCount_ += n;
        stages_.push_back(std::move(st));
    }
    for (auto& st : stages_) st->thread = std::thread([this, s = st.get()] { runStage(*s); });
}

StagePipeline::~StagePipeline() {
    quit_ = true;
    start_.arrive_and_wait();
    for (auto& st : stages_) st->thread.join();
}

void StagePipeline::runStage(Stage& st) {
    for (;;) {
        start_.arrive_and_wait();
        if (quit_) return;
        try {
            runStep(st);
        } catch (...) {
            st.error = std::current_exception();
            fail();
        }
        done_.arrive_and_wait();
    }
}

// Waits until `done` counts micro-batch `micro` (micro-batches finish in increasing order);
// false when another stage failed.
bool StagePipeline::waitFor(std::atomic<int>& done, int micro) {
    for (int v = done.load(std::memory_order_acquire); v <= micro; v = done.load(std::memory_order_acquire))
        done.wait(v, std::memory_order_acquire);
    return !failed_;
}

// Lets every stage waiting on another go on (and stop: waitFor says the step failed).
void StagePipeline::fail() {
    failed_ = true;
    for (auto& st : stages_) {
        st->forwards.store(INT_MAX / 2, std::memory_order_release);
        st->backwards.store(INT_MAX / 2, std::memory_order_release);
        st->forwards.notify_all();
        st->backwards.notify_all();
    }
}

void StagePipeline::runStep(Stage& st) {
    const int s = st.index;
    Stage* prev = s > 0 ? stages_[size_t(s) - 1].get() : nullptr;
    Stage* next = s + 1 < stages() ? stages_[size_t(s) + 1].get() : nullptr;
    Backend& be = *st.backend;
    be.fill(st.stream, st.stats.data(), 0.f, 3);
    st.blocks.clear();
    st.busy = st.apply = st.accumulate = 0;
    const int64_t n = st.slots.front()->paramCount();
    int backwardsRun = 0;
    for (const PipelineOp& op : st.ops) {
        Network& net = st.slot(op.micro);
        const MicroBatch part{int64_t(op.micro) * microBatch_, microBatch_ * micro_, op.micro == 0};
        if (op.forward) {
            if (prev) {
                if (!waitFor(prev->forwards, op.micro)) return;
                net.setInput(prev->slot(op.micro).output());
            } else {  // the first stage copies its micro-batch's rows of the step's batch in
                const size_t row = size_t(net.inputDims().size());
                be.copyFromHost(st.stream, net.input(), batch_->x.data() + size_t(part.firstExample) * row,
                                size_t(microBatch_) * row * sizeof(float));
            }
            if (!next)
                be.copyFromHost(st.stream, net.labels(), batch_->y.data() + part.firstExample,
                                size_t(microBatch_) * sizeof(int32_t));
            const double t = since(t0_);
            net.forward(st.stream, true, seed_, microBatch_, st.stats.data(), part);
            be.synchronize(st.stream);
            st.blocks.push_back({op.micro, true, t, since(t0_)});
            st.forwards.fetch_add(1, std::memory_order_release);
            st.forwards.notify_all();
        } else {
            if (next) {
                if (!waitFor(next->backwards, op.micro)) return;
                net.setOutputGrad(st.outputGrad(op.micro));
            }
            net.setInputGrad(prev ? prev->outputGrad(op.micro) : nullptr);
            const double t = since(t0_);
            // The step's first backward writes the stage's gradient; each later one writes its
            // share into the scratch, added on (the layers' weight gradients overwrite).
            if (micro_ > 1) net.bindGrads(backwardsRun == 0 ? st.grads.data() : st.scratch.data());
            net.backward(st.stream, part);
            if (backwardsRun > 0) {
                be.synchronize(st.stream);
                const double a = since(t0_);
                be.axpy(st.stream, 1.f, st.scratch.data(), st.grads.data(), size_t(n));
                be.synchronize(st.stream);
                st.accumulate += since(t0_) - a;
            }
            ++backwardsRun;
            be.synchronize(st.stream);
            st.blocks.push_back({op.micro, false, t, since(t0_)});
            st.backwards.fetch_add(1, std::memory_order_release);
            st.backwards.notify_all();
        }
        st.busy += st.blocks.back().end - st.blocks.back().start;
    }
    st.flushed = since(t0_);
    st.lr = st.optimizer->apply(st.stream, st.params, st.grads.data(), step_);
    be.synchronize(st.stream);
    st.apply = since(t0_) - st.flushed;
}

PipelineStep StagePipeline::step(const Batch& global, int64_t step, uint64_t seed) {
    if (failed_) throw Error("the pipeline stopped at a failure in an earlier step");
    const int batch = microBatch_ * micro_;
    const Dims in = stages_.front()->slots.front()->inputDims();
    if (global.n != batch || global.x.size() != size_t(batch) * size_t(in.size()) || global.y.size() != size_t(batch))
        throw Error("a pipeline step needs a batch of " + std::to_string(batch) + " examples of " + in.str() +
                    ", got " + std::to_string(global.n));
    batch_ = &global;
    step_ = step;
    seed_ = seed;
    for (auto& st : stages_) {
        st->forwards.store(0);
        st->backwards.store(0);
        st->error = nullptr;
    }
    t0_ = std::chrono::steady_clock::now();
    start_.arrive_and_wait();
    done_.arrive_and_wait();
    PipelineStep r;
    r.seconds = since(t0_);
    for (auto& st : stages_)
        if (st->error) std::rethrow_exception(st->error);
    r.examples = batch;
    r.lr = stages_.front()->lr;
    double busy = 0;
    for (auto& st : stages_) {
        float stats[3];
        st->backend->copyToHost(st->stream, stats, st->stats.data(), sizeof stats);
        st->backend->synchronize(st->stream);
        if (st->index + 1 == stages()) r.lossSum = stats[0], r.correct = stats[1];
        r.weightDecayLoss += stats[2];
        r.span = std::max(r.span, st->flushed);
        r.busy.push_back(st->busy);
        r.apply.push_back(st->apply);
        r.accumulate.push_back(st->accumulate);
        r.blocks.push_back(st->blocks);
        busy += st->busy;
    }
    r.bubbleFraction = r.span > 0 ? std::clamp(1.0 - busy / (double(stages()) * r.span), 0.0, 1.0) : 0.0;
    r.bytesMoved = 0;  // CPU stages share memory: nothing crosses between memories
    return r;
}

std::vector<float> StagePipeline::variables() const {
    std::vector<float> host(static_cast<size_t>(paramCount_));
    for (const auto& st : stages_) {
        const Network& net = *st->slots.front();
        st->backend->copyToHost(st->stream, host.data() + net.paramOffsetInModel(), st->params,
                                size_t(net.paramCount()) * sizeof(float));
        st->backend->synchronize(st->stream);
    }
    return host;
}

void StagePipeline::setVariables(const float* host) {
    for (const auto& st : stages_) {
        const Network& net = *st->slots.front();
        st->backend->copyFromHost(st->stream, st->params, host + net.paramOffsetInModel(),
                                  size_t(net.paramCount()) * sizeof(float));
        st->backend->synchronize(st->stream);
    }
}

std::vector<StateBuffer> StagePipeline::state() {
    std::vector<StateBuffer> out;
    for (auto& st : stages_)
        for (auto& [name, t] : st->optimizer->slotBuffers())
            out.push_back({"stage" + std::to_string(st->index) + "/optimizer/" + name, st->backend.get(), st->stream,
                           t->data(), size_t(t->numel())});
    return out;
}

size_t StagePipeline::optimizerSlotBytes() const {
    size_t bytes = 0;
    for (const auto& st : stages_) bytes += st->optimizer->slotBytes();
    return bytes;
}

std::string StagePipeline::backendName() const { return stages_.front()->backend->name(); }

int StagePipeline::heldMicroBatches(int stage) const { return int(stages_[size_t(stage)]->slots.size()); }

size_t StagePipeline::activationBytes(int stage) const {
    const Stage& st = *stages_[size_t(stage)];
    size_t bytes = 0;
    for (const auto& net : st.slots) {
        const NetworkMemory m = net->memoryUse();
        bytes += m.activations + m.saved;
    }
    for (const Tensor& t : st.outputGrads) bytes += t.bytes();
    return bytes;
}

}  // namespace tb
