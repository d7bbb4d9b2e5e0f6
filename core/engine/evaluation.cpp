#include "engine/evaluation.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "backend/backend.hpp"
#include "data/pipeline.hpp"
#include "engine/inference.hpp"
#include "engine/run_setup.hpp"
#include "util/error.hpp"
#include "util/elapsed.hpp"

namespace tb {

namespace {

// One pass over `data` in batches of net.batch(), in the split's order. Nothing when `cancelled`
// says so between batches (a stop must not wait for a whole pass).
std::optional<EvalResult> evaluate(Network& net, Stream s, float* stats, const Dataset& data, const RunConfig& c,
                                   bool cifar, const ChannelStatistics& channels, int prefetch, const CancelCheck& cancelled,
                                   std::shared_ptr<const std::vector<uint8_t>> images = nullptr) {
    Backend& be = net.backend();
    PipelineOptions input = pipelineFor(c, cifar, false, net.batch(), prefetch, channels);
    input.pixelMultiply = net.spec().pixels.multiply, input.pixelAdd = net.spec().pixels.add;
    InputPipeline pipe(data, input);
    Batch b;
    float host[3] = {0, 0, 0};
    int64_t count = 0;
    const int classes = net.outputs();
    EvalResult r;
    r.classes = classes;
    r.confusion.assign(size_t(classes) * size_t(classes), 0);
    std::shared_ptr<Predictions> p;
    if (images) {
        p = std::make_shared<Predictions>();
        p->channels = data.channels;
        p->height = data.height;
        p->width = data.width;
        p->images = std::move(images);
        p->classNames = data.classNames;
        p->labels = data.labels;
        p->predicted.reserve(data.size());
        p->confidence.reserve(data.size());
    }
    std::vector<float> probs(size_t(net.batch()) * size_t(classes));  // (batch, classes)
    be.fill(s, stats, 0.f, 3);
    while (pipe.next(b)) {
        if (cancelled()) {
            be.synchronize(s);
            return std::nullopt;
        }
        be.copyFromHost(s, net.input(), b.x.data(), b.x.size() * sizeof(float));
        be.copyFromHost(s, net.labels(), b.y.data(), b.y.size() * sizeof(int32_t));
        net.forward(s, false, 0, b.n, stats);  // rows past b.n hold the previous batch and are not counted
        be.copyToHost(s, probs.data(), net.probs(), size_t(b.n) * size_t(classes) * sizeof(float));
        be.synchronize(s);
        for (int i = 0; i < b.n; ++i) {
            const float* row = probs.data() + size_t(i) * size_t(classes);
            const int k = int(std::max_element(row, row + classes) - row);
            ++r.confusion[size_t(b.y[size_t(i)]) * size_t(classes) + size_t(k)];  // labels < classes: checkModelFitsData
            if (p) {
                p->predicted.push_back(k);
                p->confidence.push_back(row[k]);
            }
        }
        count += b.n;
    }
    // A model with more outputs than the data has classes (tiny_mlp's 4 on 3 spirals): the
    // matrix keeps the data's classes, and an extra output only while the model predicts it.
    int shown = std::max(1, data.numClasses);
    for (int k = classes - 1; k >= shown; --k)
        for (int t = 0; t < classes; ++t)
            if (r.confusion[size_t(t) * size_t(classes) + size_t(k)]) shown = std::max(shown, k + 1);
    if (shown < classes) {
        std::vector<int64_t> kept(size_t(shown) * size_t(shown));  // (shown, shown); no label is >= shown
        for (int t = 0; t < shown; ++t)
            for (int k = 0; k < shown; ++k)
                kept[size_t(t) * size_t(shown) + size_t(k)] = r.confusion[size_t(t) * size_t(classes) + size_t(k)];
        r.confusion = std::move(kept);
        r.classes = shown;
    }
    be.copyToHost(s, host, stats, sizeof(host));
    be.synchronize(s);
    r.examples = count;
    r.loss = count ? host[0] / double(count) : 0;
    r.accuracy = count ? host[1] / double(count) : 0;
    r.predictions = std::move(p);
    return r;
}

}  // namespace

Evaluator::Evaluator(TrainingEngine& towers, const RunConfig& c, bool cifar, int prefetch, WeightEma* ema, bool chief,
                     ObserverHub& hub, ChannelStatistics stats)
    : towers_(towers), c_(c), cifar_(cifar), stats_in_(std::move(stats)), prefetch_(prefetch), ema_(ema), chief_(chief), hub_(hub) {
    Backend& be = towers.evalNetwork().backend();
    stats_ = be.empty(Shape{3});
    if (ema && chief) backup_ = be.empty(Shape{towers.paramCount()});  // (only the chief evaluates)
}

std::shared_ptr<const std::vector<uint8_t>> Evaluator::imagesOf(const Dataset& d) {
    if (!d.isImage()) return nullptr;
    auto& shared = images_[&d];
    if (!shared) shared = std::make_shared<const std::vector<uint8_t>>(d.pixels);
    return shared;
}

std::optional<EvalResult> Evaluator::pass(const Dataset& d, const std::string& split, int64_t step,
                                          const CancelCheck& cancelled) {
    if (!chief_) return std::nullopt;
    const auto t0 = std::chrono::steady_clock::now();
    Network& net = towers_.evalNetwork();
    Backend& be = net.backend();
    const Stream s = towers_.evalStream();
    const size_t bytes = size_t(towers_.paramCount()) * sizeof(float);
    if (ema_) {
        be.copy(s, backup_.data(), net.params(), bytes);
        be.copy(s, net.params(), ema_->average(), bytes);
    }
    std::optional<EvalResult> r = evaluate(net, s, stats_.data(), d, c_, cifar_, stats_in_, prefetch_, cancelled, imagesOf(d));
    if (ema_) {
        be.copy(s, net.params(), backup_.data(), bytes);
        be.synchronize(s);
    }
    seconds_ += secondsSince(t0);
    if (!r) return r;
    r->step = step;
    r->split = split;
    r->averagedWeights = bool(ema_);
    hub_.onEval(*r);
    return r;
}

EvalResult evaluateCheckpoint(const std::string& checkpointPath, const RunConfig& given) {
    InferenceModel m(checkpointPath, given.batch, given.threads);
    // The input's normalisation belongs to the trained model, as its pixel scaling does.
    RunConfig config = given;
    config.normalise = m.evaluationInput().config.normalise;
    Network& net = m.network();
    DataSplits data = loadData(config.data, 0, config.seed, {}, dataOptions(config, net.spec()));
    checkModelFitsData(net.spec(), net.outputs(), data, config.data);
    const Stream s = m.stream();
    Tensor stats = net.backend().empty(Shape{3});
    const int machineCores = int(std::max(1u, std::thread::hardware_concurrency()));
    // This thread, as one CPU tower's (a default plan).
    std::optional<EvalResult> r = evaluate(net, s, stats.data(), data.test, config, data.cifarAugment,
                                           m.checkpoint().meta().channels,
                                           prefetchFor(config, DeploymentPlan{}, m.threads(), machineCores),
                                           [] { return false; });
    net.backend().synchronize(s);
    if (!r) throw Error("eval: the evaluation was cancelled");
    r->step = m.checkpoint().meta().step;
    r->split = "test";
    r->averagedWeights = m.averaged();
    return *r;
}

}  // namespace tb

