// PipelineSet: the run's engine for model parallelism (issue 32): a StagePipeline behind the
// TrainingEngine interface. CPU stages keep the variables in one host buffer of the whole model,
// each stage training its slice in place, so evaluation, checkpoints and the moving average see
// one network holding them all. GPU stages keep theirs in their own memory: the host buffer is
// gathered from them whenever evaluation, a checkpoint or the moving average asks (their bytes
// copied then, not every step), and evaluation runs on the host's cores, where the whole model
// is (a model split because no one GPU holds it is not gathered onto one). Each step reports one
// lane per stage (its forward and backward time, its idle time within the step's pipeline, its
// update), and the loss on the last stage. Stages in processes of their own (--stage-per-process)
// keep each stage's variables in its process: the chief's host buffer holds its own stage's
// slice as it trains, and every other stage's as gatherModel last brought it.

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
    Network& evalNetwork() override;
    Stream evalStream() override { return stream_; }
    VariablesView variables() override;
    VariablesView replica(int) override { return variables(); }
    std::vector<StateBuffer> state() override { return pipe_->state(); }
    bool stateDiffersByProcess() const override { return pipe_->statisticsDifferByProcess(); }
    std::vector<float> statistics() override;
    void setStatistics(const std::vector<float>& host) override;
    void setVariables(const float* host) override;
    TrainedVariables trainedVariables() override;
    bool modelInParts() const override { return pipe_->spansProcesses(); }
    void gatherModel(float* average) override;
    std::vector<DeviceMemoryUse> deviceMemory() const override;
    size_t optimizerSlotBytes() const override { return pipe_->optimizerSlotBytes(); }
    int64_t bytesMoved() const override { return moved_; }
    const StagePipeline& pipeline() const { return *pipe_; }

private:
    std::unique_ptr<PipelineSchedule> schedule_;
    std::shared_ptr<Backend> backend_;  // the host's, for the variables and evaluation
    Stream stream_ = nullptr;
    Tensor whole_;                      // (paramCount) the variables
    std::unique_ptr<Network> eval_;
    std::unique_ptr<StagePipeline> pipe_;
    uint64_t seed_;
    bool gathered_ = true;  // whole_ holds the stages' variables as they are (always, for CPU stages)
    bool gpuStages_ = false;
    int64_t moved_ = 0;     // bytes between the stages' memories, all steps
};

}  // namespace tb
