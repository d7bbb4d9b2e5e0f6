#include "engine/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>

#include "backend/backend.hpp"
#include "data/dataset.hpp"
#include "data/pipeline.hpp"
#include "nn/model_spec.hpp"
#include "nn/network.hpp"
#include "optim/optimizer.hpp"
#include "util/error.hpp"

namespace tb {

const char* toString(RunState s) {
    switch (s) {
    case RunState::Loading: return "loading";
    case RunState::Running: return "running";
    case RunState::Finished: return "finished";
    case RunState::Stopped: return "stopped";
    case RunState::Failed: return "failed";
    }
    return "?";
}

nlohmann::json RunSummary::toJson() const {
    nlohmann::json j = {{"steps", steps},
                        {"epochs", epochs},
                        {"examples_per_sec", examplesPerSec},
                        {"train_seconds", trainSeconds},
                        {"final_loss", finalLoss},
                        {"final_accuracy", finalAccuracy},
                        {"test_loss", testLoss},
                        {"test_accuracy", testAccuracy},
                        {"params", params},
                        {"flops_per_example", flopsPerExample},
                        {"steady_examples_per_sec", steadyExamplesPerSec},
                        {"model", model},
                        {"data", data},
                        {"backend", backend},
                        {"stopped", stopped}};
    if (validationAccuracy >= 0) j["validation_accuracy"] = validationAccuracy;
    return j;
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// How the pipeline shapes a dataset for this run (CIFAR-10: 24x24 crops, standardised).
PipelineOptions pipelineFor(const RunConfig& c, bool cifar, bool training) {
    PipelineOptions o;
    o.batchSize = c.batch;
    o.shuffle = training;
    o.shuffleBuffer = size_t(c.shuffleBuffer);
    o.repeat = training;
    o.augment = cifar && training;
    o.cropH = o.cropW = cifar ? 24 : 0;
    o.standardize = cifar;
    o.channelsLast = true;  // the engine computes in (n, h, w, c)
    o.prefetch = c.prefetch;
    o.seed = c.seed;
    return o;
}

// Runs one pass over `data` with the network's current parameters: (mean loss, accuracy).
EvalResult evaluate(Network& net, Stream s, float* stats, const Dataset& data, const RunConfig& c, bool cifar) {
    Backend& be = net.backend();
    InputPipeline pipe(data, pipelineFor(c, cifar, false));
    Batch b;
    float host[3] = {0, 0, 0};
    double loss = 0, correct = 0;
    int64_t count = 0;
    be.fill(s, stats, 0.f, 3);
    while (pipe.next(b)) {
        be.copyFromHost(s, net.input(), b.x.data(), b.x.size() * sizeof(float));
        be.copyFromHost(s, net.labels(), b.y.data(), b.y.size() * sizeof(int32_t));
        net.forward(s, false, 0, b.n, stats);  // rows past b.n hold the previous batch and are not counted
        count += b.n;
    }
    be.copyToHost(s, host, stats, sizeof(host));
    be.synchronize(s);
    loss = host[0];
    correct = host[1];
    EvalResult r;
    r.examples = count;
    r.loss = count ? loss / double(count) : 0;
    r.accuracy = count ? correct / double(count) : 0;
    return r;
}

}  // namespace

Trainer::Trainer(RunConfig config) : config_(std::move(config)) {}
Trainer::~Trainer() = default;

RunSummary Trainer::run() {
    const RunConfig& c = config_;
    c.validate();
    auto notify = [&](RunState st, const std::string& detail) {
        for (auto* o : observers_) o->onStateChanged(st, detail);
    };
    notify(RunState::Loading, c.model + " on " + c.data);

    const ModelSpec spec = findModel(c.model);
    int64_t validation = c.validation;
    DataSplits data = loadData(c.data, 0, c.seed);
    if (validation < 0) validation = std::min<int64_t>(5000, int64_t(data.train.size()) / 10);
    if (validation >= int64_t(data.train.size()))
        throw Error("--validation: " + std::to_string(validation) + " samples leave none of the " +
                    std::to_string(data.train.size()) + " training samples");
    if (validation > 0) data.validation = splitTail(data.train, size_t(validation), data.train.name + " validation");
    const bool cifar = data.cifarAugment;

    const Dims dataDims = cifar ? Dims{data.train.channels, 24, 24}
                                : Dims{data.train.channels, data.train.height, data.train.width};
    const Dims modelDims{spec.inC, spec.inH, spec.inW};
    if (!(dataDims == modelDims))
        throw Error("--model: " + spec.name + " expects input " + modelDims.str() + " but --data " + c.data +
                    " gives " + dataDims.str());

    auto backend = makeCpuBackend(c.threads);
    Network net(spec, *backend, c.batch);
    if (net.outputs() < data.train.numClasses)
        throw Error("--model: " + spec.name + " has " + std::to_string(net.outputs()) + " outputs but --data " + c.data +
                    " has " + std::to_string(data.train.numClasses) + " classes");
    Stream s = backend->createStream();
    struct StreamGuard {
        Backend& be;
        Stream s;
        ~StreamGuard() { be.destroyStream(s); }
    } guard{*backend, s};

    const std::vector<float> init = net.initialParams(c.seed);
    backend->copyFromHost(s, net.params(), init.data(), init.size() * sizeof(float));
    backend->fill(s, reinterpret_cast<float*>(net.labels()), 0.f, size_t(c.batch));  // 0.0f is all-zero bits: label 0
    LrSchedule schedule;
    schedule.initial = float(c.lr);
    if (c.lrDecaySteps > 0) {
        schedule.kind = LrSchedule::Kind::Exponential;
        schedule.decaySteps = c.lrDecaySteps;
        schedule.decayRate = float(c.lrDecayRate);
        schedule.staircase = c.lrStaircase;
    }
    UpdateParams hyper;
    hyper.momentum = float(c.momentum);
    const size_t count = size_t(net.paramCount());
    Optimizer opt(*backend, parseUpdateRule(c.optimizer, "--optimizer"), hyper, schedule, count);
    std::unique_ptr<WeightEma> ema;
    if (c.emaDecay > 0) ema = std::make_unique<WeightEma>(*backend, float(c.emaDecay), net.params(), count);
    Tensor stats = backend->empty(Shape{3});
    Tensor backup;  // the live weights while evaluating with the moving average
    if (ema) backup = backend->empty(Shape{int64_t(count)});

    auto evalWith = [&](const Dataset& d, const std::string& split, int64_t step) {
        if (ema) {
            backend->copy(s, backup.data(), net.params(), count * sizeof(float));
            backend->copy(s, net.params(), ema->shadow(), count * sizeof(float));
        }
        EvalResult r = evaluate(net, s, stats.data(), d, c, cifar);
        if (ema) backend->copy(s, net.params(), backup.data(), count * sizeof(float));
        r.step = step;
        r.split = split;
        r.averagedWeights = bool(ema);
        for (auto* o : observers_) o->onEval(r);
        return r;
    };

    RunSummary sum;
    sum.model = spec.name;
    sum.data = c.data;
    sum.backend = backend->name();
    sum.params = net.paramCount();
    sum.flopsPerExample = net.trainFlopsPerExample();
    const int64_t total = c.steps > 0 ? c.steps
                                      : std::max<int64_t>(1, int64_t(std::ceil(c.epochs * double(data.train.size()) /
                                                                                 double(c.batch))));
    InputPipeline train(data.train, pipelineFor(c, cifar, true));
    notify(RunState::Running, backend->name());

    std::deque<std::pair<double, double>> recent;  // (loss, accuracy) of the last steps
    Batch b;
    float host[3];
    const auto start = Clock::now();
    auto afterFirst = start;
    int64_t step = 0;
    while (step < total && !stop_) {
        const auto t0 = Clock::now();
        train.next(b);
        const auto t1 = Clock::now();
        backend->copyFromHost(s, net.input(), b.x.data(), b.x.size() * sizeof(float));
        backend->copyFromHost(s, net.labels(), b.y.data(), b.y.size() * sizeof(int32_t));
        backend->fill(s, stats.data(), 0.f, 3);
        net.forward(s, true, c.seed * 7919ull + uint64_t(step), c.batch, stats.data());
        net.backward(s);
        const float lr = opt.apply(s, net.params(), net.grads(), step);
        if (ema) ema->update(s, net.params());
        backend->copyToHost(s, host, stats.data(), sizeof(host));
        backend->synchronize(s);
        const auto t2 = Clock::now();
        if (++step == 1) afterFirst = t2;

        StepMetrics m;
        m.step = step;
        m.totalSteps = total;
        m.epoch = double(step) * c.batch / double(data.train.size());
        m.loss = host[0] / c.batch + host[2];
        m.accuracy = host[1] / c.batch;
        m.lr = lr;
        m.stepSeconds = seconds(t0, t2);
        m.dataWaitSeconds = seconds(t0, t1);
        m.computeSeconds = seconds(t1, t2);
        m.examplesPerSec = c.batch / m.stepSeconds;
        m.elapsedSeconds = seconds(start, t2);
        if (!std::isfinite(m.loss))
            throw Error("training diverged at step " + std::to_string(step) + " (loss is " + std::to_string(m.loss) +
                        "); lower --lr");
        recent.emplace_back(m.loss, m.accuracy);
        if (recent.size() > 50) recent.pop_front();
        for (auto* o : observers_) o->onStepEnd(m);
        if (c.evalEvery > 0 && step % c.evalEvery == 0 && step < total) {
            const auto e0 = Clock::now();
            evalWith(data.validation.size() ? data.validation : data.test,
                     data.validation.size() ? "validation" : "test", step);
            sumEvalSeconds_ += seconds(e0, Clock::now());
        }
    }
    const auto end = Clock::now();
    sum.trainSeconds = seconds(start, end) - sumEvalSeconds_;
    const double steadySeconds = seconds(afterFirst, end) - sumEvalSeconds_;
    if (step > 1 && steadySeconds > 0) sum.steadyExamplesPerSec = double(step - 1) * c.batch / steadySeconds;
    sum.steps = step;
    sum.stopped = step < total;
    sum.epochs = double(step) * c.batch / double(data.train.size());
    sum.examplesPerSec = sum.trainSeconds > 0 ? double(step) * c.batch / sum.trainSeconds : 0;
    for (auto& [l, a] : recent) {
        sum.finalLoss += l / double(recent.size());
        sum.finalAccuracy += a / double(recent.size());
    }
    if (data.validation.size()) sum.validationAccuracy = evalWith(data.validation, "validation", step).accuracy;
    const EvalResult test = evalWith(data.test, "test", step);
    sum.testAccuracy = test.accuracy;
    sum.testLoss = test.loss;
    notify(sum.stopped ? RunState::Stopped : RunState::Finished, "");
    return sum;
}

}  // namespace tb
