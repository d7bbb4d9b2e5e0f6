// PipelineSet: the run's engine for model parallelism (issue 32): a StagePipeline of CPU stages
// behind the TrainingEngine interface. The variables live in one host buffer of the whole model,
// each stage training its slice in place, so evaluation, checkpoints and the moving average see
// one network holding them all; each step reports one lane per stage (its forward and backward
// time, its idle time within the step's pipeline, its update), and the loss on the last stage.
#pragma once
#include <memory>

#include "parallel/stage_pipeline.hpp"
#include "parallel/training_engine.hpp"

namespace tb {

class PipelineSet final : public TrainingEngine {
public:
    // setup.sharedParams is set here. `seed`: the run's (dropout masks per step).
    PipelineSet(const ModelSpec& spec, StagePipelineSetup setup, std::unique_ptr<PipelineSchedule> schedule,
                uint64_t seed);
    ~PipelineSet() override;

    int towers() const override { return pipe_->lanes(); }  // stages x replicas
    int64_t paramCount() const override { return pipe_->paramCount(); }
    std::string backendName() const override;
    std::vector<TowerStep> steps(const std::vector<const Batch*>& batches, int64_t first, double dataWait,
                                 const Batch* next = nullptr) override;
    Network& evalNetwork() override { return *eval_; }
    Stream evalStream() override { return stream_; }
    VariablesView variables() override { return {backend_.get(), stream_, whole_.data()}; }
    VariablesView replica(int) override { return variables(); }
    std::vector<StateBuffer> state() override { return pipe_->state(); }
    void setVariables(const float* host) override { pipe_->setVariables(host); }
    std::vector<DeviceMemoryUse> deviceMemory() const override { return {}; }
    size_t optimizerSlotBytes() const override { return pipe_->optimizerSlotBytes(); }
    int64_t bytesMoved() const override { return 0; }  // CPU stages share memory
    const StagePipeline& pipeline() const { return *pipe_; }

private:
    std::unique_ptr<PipelineSchedule> schedule_;
    std::shared_ptr<Backend> backend_;  // the host's, for the variables and evaluation
    Stream stream_ = nullptr;
    Tensor whole_;                      // (paramCount) the variables
    std::unique_ptr<Network> eval_;
    std::unique_ptr<StagePipeline> pipe_;
    uint64_t seed_;
};

}  // namespace tb
