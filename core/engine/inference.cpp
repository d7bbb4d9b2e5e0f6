#include "engine/inference.hpp"

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <thread>

#include "data/pipeline.hpp"
#include "engine/run_folder.hpp"
#include "engine/run_setup.hpp"
#include "nn/model_spec.hpp"
#ifdef TB_HAVE_IMAGES
#include "data/image_codec.hpp"
#endif
#include "util/error.hpp"
#include "util/compute_thread.hpp"

namespace tb {

InferenceModel::InferenceModel(const std::string& checkpointPath, int batch, int threads)
    : ck_(Checkpoint::open(checkpointPath)),
      threads_(threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()))) {
    const ModelSpec spec = parseModelSpec(ck_.meta().modelSpec, checkpointPath + " (its model)");
    enterComputeTeam(threads_);
    be_ = makeCpuBackend(threads_);
    net_ = std::make_unique<Network>(spec, *be_, batch);
    if (net_->paramInfos().empty()) throw Error(checkpointPath + ": its model " + spec.name + " has no variables");
    std::vector<float> weights = ck_.loadWeights(*net_);
    averaged_ = ck_.file().has("ema/" + net_->paramInfos().front().name);
    if (averaged_)  // the run evaluated with its moving average: so does this
        for (size_t i = 0; i < net_->paramInfos().size(); ++i)
            ck_.file().readFloats("ema/" + net_->paramInfos()[i].name, weights.data() + net_->paramOffsets()[i],
                                  size_t(net_->paramInfos()[i].shape.numel()));
    stream_ = be_->createStream();
    be_->copyFromHost(stream_, net_->params(), weights.data(), weights.size() * sizeof(float));
    if (net_->hasBatchNorm()) {  // the run's moving statistics, as its own evaluation used them
        const std::vector<float> moving = ck_.loadStatistics(*net_);
        be_->copyFromHost(stream_, net_->statistics(), moving.data(), moving.size() * sizeof(float));
    }
    be_->synchronize(stream_);
}

InferenceModel::~InferenceModel() {
    if (be_ && stream_) {
        be_->synchronize(stream_);
        be_->destroyStream(stream_);
    }
}

EvaluationInput InferenceModel::evaluationInput() const {
    EvaluationInput in;
    in.config.data = ck_.meta().config.value("data", in.config.data);
    in.config.normalise = ck_.meta().config.value("normalise", in.config.normalise);
    in.cifar = in.config.data.starts_with("cifar10:");
    const ModelSpec& spec = net_->spec();
    in.channels = spec.inC;
    in.height = in.cifar ? 32 : spec.inH;
    in.width = in.cifar ? 32 : spec.inW;
    return in;
}

std::vector<int> ImageClassification::ranked() const {
    std::vector<int> order(probabilities.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [this](int a, int b) { return probabilities[size_t(a)] > probabilities[size_t(b)]; });
    return order;
}

std::string checkpointOf(const std::string& target) {
    std::error_code ec;
    if (!std::filesystem::is_directory(target, ec)) return target;
    const std::string newest = RunFolder::newestCheckpointIn(target);
    if (newest.empty()) throw Error(target + " holds no checkpoint (checkpoints/ is empty)");
    return newest;
}

Classifications classifyImages(const std::string& checkpointPath, const std::vector<std::string>& images, int threads) {
#ifdef TB_HAVE_IMAGES
    if (images.empty()) throw Error("classify: give one or more image files after the run folder or checkpoint");
    const int batch = int(std::min<size_t>(images.size(), 64));
    InferenceModel m(checkpointPath, batch, threads);
    Network& net = m.network();
    const ModelSpec& spec = net.spec();
    const EvaluationInput in = m.evaluationInput();
    Dataset d;
    d.name = "classify";
    d.channels = in.channels;
    d.height = in.height;
    d.width = in.width;
    d.numClasses = net.outputs();
    d.pixels.resize(images.size() * d.sampleSize());
    d.labels.assign(images.size(), 0);  // unknown: the loss the forward pass sums is not read
    for (size_t i = 0; i < images.size(); ++i)
        imageToSample(readImageFile(images[i]), d.channels, d.height, d.width, d.pixels.data() + i * d.sampleSize());
    PipelineOptions input = pipelineFor(in.config, in.cifar, false, batch, 0, m.checkpoint().meta().channels);
    input.pixelMultiply = spec.pixels.multiply, input.pixelAdd = spec.pixels.add;
    InputPipeline pipe(d, input);
    Backend& be = net.backend();
    const Stream s = m.stream();
    Tensor stats = be.empty(Shape{3});
    const int classes = net.outputs();
    Classifications out;
    out.classNames = m.checkpoint().meta().classNames;
    std::vector<float> probs(size_t(batch) * size_t(classes));  // (batch, classes)
    Batch b;
    while (pipe.next(b)) {
        be.copyFromHost(s, net.input(), b.x.data(), b.x.size() * sizeof(float));
        be.copyFromHost(s, net.labels(), b.y.data(), b.y.size() * sizeof(int32_t));
        net.forward(s, false, 0, b.n, stats.data());
        be.copyToHost(s, probs.data(), net.probs(), size_t(b.n) * size_t(classes) * sizeof(float));
        be.synchronize(s);
        for (int i = 0; i < b.n; ++i) {
            const size_t at = out.images.size();
            out.images.push_back({images[at], std::vector<float>(probs.begin() + i * classes, probs.begin() + (i + 1) * classes)});
        }
    }
    return out;
#else
    (void)checkpointPath, (void)images, (void)threads;
    throw Error("classify: this build of Towerbench has no libpng and libjpeg, which image files need");
#endif
}

}  // namespace tb
