#include "parallel/pipeline_set.hpp"

#include <cmath>

namespace tb {

PipelineSet::PipelineSet(const ModelSpec& spec, StagePipelineSetup setup, std::unique_ptr<PipelineSchedule> schedule,
                         uint64_t seed)
    : schedule_(std::move(schedule)), seed_(seed) {
    const int lanesHere = setup.localStage >= 0 ? 1 : int(setup.ranges.size()) * setup.replicas;
    backend_ = makeCpuBackend(setup.threadsPerStage * lanesHere, 0, setup.opt.precision);
    stream_ = backend_->createStream();
    // A stage's process other than the chief's (stage 0 of replica 0) keeps its stage's layers
    // alone: the whole model only as a layout (batch 1, no variables), as it never evaluates or
    // writes checkpoints.
    const bool stageAlone = setup.localStage > 0 || (setup.localStage == 0 && setup.localReplica > 0);
    eval_ = std::make_unique<Network>(spec, *backend_, stageAlone ? 1 : setup.batch);
    if (stageAlone) {
        eval_->releaseParams();
    } else {
        whole_ = backend_->empty(Shape{std::max<int64_t>(eval_->paramCount(), 1)});
        eval_->bindParams(whole_.data());
    }
    eval_->releaseGradients();  // the stages compute every gradient; this network only evaluates
    gpuStages_ = anyGpu(setup.devices);
    gathered_ = !gpuStages_;  // (GPU stages: gathered when first asked)
    if (!gpuStages_ && !stageAlone) setup.sharedParams = whole_.data();
    pipe_ = std::make_unique<StagePipeline>(spec, setup, *schedule_);
}

Network& PipelineSet::evalNetwork() {
    variables();
    statistics();  // into the evaluation network's own
    return *eval_;
}

std::vector<float> PipelineSet::statistics() {
    if (!eval_->hasBatchNorm()) return {};
    pipe_->statisticsInto(eval_->statistics());  // host memory: the evaluation network's CPU backend
    return std::vector<float>(eval_->statistics(), eval_->statistics() + eval_->statisticCount());
}

void PipelineSet::setStatistics(const std::vector<float>& host) {
    if (host.size() != size_t(eval_->statisticCount()))
        throw Error("moving statistics of " + std::to_string(host.size()) + " values for a model of " +
                    std::to_string(eval_->statisticCount()));
    if (!host.empty()) pipe_->setStatistics(host.data());
}

VariablesView PipelineSet::variables() {
    if (!gathered_) {
        pipe_->variablesInto(whole_.data());
        gathered_ = true;
    }
    return {backend_.get(), stream_, whole_.data()};
}

std::vector<DeviceMemoryUse> PipelineSet::deviceMemory() const {
    std::vector<DeviceMemoryUse> out;
    for (const auto& be : pipe_->gpuBackends()) out.push_back({be->device(), be->allocatorStats()});
    return out;
}

TrainedVariables PipelineSet::trainedVariables() {
    if (!pipe_->spansProcesses()) return TrainingEngine::trainedVariables();
    // (CPU stages: the chief's stage trains its slice in whole_, another process's in a buffer of its own.)
    return {{backend_.get(), stream_, pipe_->localParams()}, pipe_->localSlice()};
}

void PipelineSet::gatherModel(float* average) {
    pipe_->gatherToChief(whole_.data(), eval_->hasBatchNorm() ? eval_->statistics() : nullptr, average);
}

void PipelineSet::setVariables(const float* host) {
    pipe_->setVariables(host);
    gathered_ = !gpuStages_;
}

PipelineSet::~PipelineSet() {
    pipe_.reset();  // its threads end before the buffers they read go
    backend_->destroyStream(stream_);
}

std::string PipelineSet::backendName() const {
    return pipe_->backendName() + " x " + std::to_string(pipe_->stages()) + " stages" +
           (pipe_->replicas() > 1 ? " x " + std::to_string(pipe_->replicas()) + " replicas" : std::string()) + ", " +
           schedule_->name() +
           (pipe_->microBatches() > 1 ? " over " + std::to_string(pipe_->microBatches()) + " micro-batches" : "");
}

std::vector<TowerStep> PipelineSet::steps(const std::vector<const Batch*>& batches, int64_t first, double dataWait,
                                          const Batch*) {
    std::vector<TowerStep> out;
    for (size_t k = 0; k < batches.size(); ++k) {
        const int64_t step = first + int64_t(k);
        // Dropout masks: a function of the run's seed and the step, as tower 0's of one tower
        // would draw them (TowerSet::steps), each micro-batch taking its rows of them.
        const uint64_t stepSeed = (seed_ + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t(step) * 7919ull);
        const PipelineStep p = pipe_->step(*batches[k], step, stepSeed);
        gathered_ = !gpuStages_;
        moved_ += p.bytesMoved;
        TowerStep r;
        r.update = step + 1;
        r.lr = p.lr;
        r.weightDecayLoss = p.weightDecayLoss;
        r.bytesMoved = p.bytesMoved;
        r.bubbleFraction = p.bubbleFraction;
        r.stages = pipe_->stages();
        for (int s = 0; s < pipe_->lanes(); ++s) {  // the loss is the last stage's lanes'
            r.lossSum.push_back(p.laneLoss[size_t(s)]);
            r.correct.push_back(p.laneCorrect[size_t(s)]);
            r.examples.push_back(p.laneExamples[size_t(s)]);
            TowerPhases ph;
            ph.dataWait = k == 0 ? dataWait : 0;
            for (const PipelineBlock& b : p.blocks[size_t(s)]) (b.forward ? ph.forward : ph.backward) += b.end - b.start;
            ph.wait = std::max(0.0, p.span - p.busy[size_t(s)]);  // idle within the pipeline: the bubble
            ph.apply = p.apply[size_t(s)];
            r.phases.push_back(ph);
        }
        r.stageBlocks = p.blocks;
        out.push_back(std::move(r));
    }
    return out;
}

}  // namespace tb
