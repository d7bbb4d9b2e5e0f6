// Run set-up: what a run config means before anything trains. The deployment plan, the optimiser's
// and the input pipeline's settings, this process's role among the run's processes, and the checks
// that refuse a run which cannot work, each in one sentence naming the flag.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/registry.hpp"
#include "comm/process_group.hpp"
#include "data/dataset.hpp"
#include "data/pipeline.hpp"
#include "engine/checkpoint.hpp"
#include "io/run_config.hpp"
#include "nn/model_spec.hpp"
#include "parallel/deployment_plan.hpp"
#include "parallel/stage_plan.hpp"
#include "parallel/strategy.hpp"

namespace tb {

class RunFolder;

// The deployment plan a run config describes (flags --towers, --variables, ...), validated.
DeploymentPlan makePlan(const RunConfig& c);
// The same for a machine with `gpus` GPUs (whyNoGpu: the reason there are none), e.g. the
// window's device catalog, which tests fake.
DeploymentPlan makePlan(const RunConfig& c, int gpus, const std::string& whyNoGpu);
// How many virtual CPU towers may exist: several per core, for teaching on small machines.
int cpuTowerSlots();
// Batches the input pipeline makes ahead on its loader thread: --prefetch, or where that is -1
// (automatic) none for a plan of one CPU tower whose `threads` take all of the machine's cores
// (at most 4 of them), whose thread then makes each batch itself, and 2 otherwise.
int prefetchFor(const RunConfig& config, const DeploymentPlan& plan, int threads, int machineCores);
// Threads that decode a streamed set's batches (data/record_stream.hpp): --loader-threads, or
// where that is 0 (automatic) with no prefetch the process's compute `threads` (each batch is then
// made between steps, while the towers wait), and with prefetch the cores the towers' threads
// leave, at least one (batches are made while they compute).
int loaderThreadsFor(const RunConfig& config, int prefetch, int threads, int machineCores);
// How the pipeline shapes a dataset for the run (CIFAR-10: 24x24 crops, standardised).
// What loadData needs beyond --data: the TFRecord features, and for image folders the model's
// input shape (images are fitted to it) and --skip-bad-images.
DataOptions dataOptions(const RunConfig& c, const ModelSpec& spec);
// --normalise: per-image standardisation (tf.image.per_image_standardization) or none; "auto"
// standardizes CIFAR-10 sets (the tutorial's inputs) and no other.
bool standardizes(const std::string& normalise, bool cifar);
// `stats`: the training split's channel statistics, which --normalise mean-std needs (else unused).
PipelineOptions pipelineFor(const RunConfig& c, bool cifar, bool training, int batch, int prefetch,
                            const ChannelStatistics& stats = {});
OptimizerSettings optimizerSettings(const RunConfig& c);

// The process of `processes` that writes the run's folder and evaluates: process 0, or with
// --ps-tasks P the first worker, process P (TensorFlow's chief is worker 0, not a ps task).
int chiefProcess(const RunConfig& config, int processes);
// The processes among `processes` that share out each global batch: all but the --ps-tasks; one
// with --stage-per-process (one pipeline, on every global batch).
int workerProcesses(const RunConfig& config, int processes);
// Refuses --ps-tasks that leave no worker among `processes` (or need mpirun), and a --batch that
// does not split evenly over the worker processes (and, with stages, their replicas and
// micro-batches), in one sentence.
void checkProcessRoles(const RunConfig& config, int processes);
// Refuses --precision bf16 where it cannot run (CPU towers on a processor without bf16
// instructions; a GPU of `gpus` older than Ampere), in one sentence naming what is missing.
void checkPrecision(const std::string& precision, const DeploymentPlan& plan, const std::vector<GpuInfo>& gpus);
void checkPrecision(const std::string& precision, const std::vector<Device>& devices, const std::vector<GpuInfo>& gpus);
// A run's: the registry's GPU list, asked for only where a device is a GPU (it loads the CUDA module).
void checkPrecision(const std::string& precision, const std::vector<Device>& devices);
// The model takes the data's samples (CIFAR: their 24x24 crops) and has a logit for every label.
void checkModelFitsData(const ModelSpec& spec, int outputs, const DataSplits& data, const std::string& dataSpec);
// Before loading: refuses data whose samples the model cannot take, where the data decide their
// shape (dataInputShape: at most an IDX header is read); a header that cannot be read is said as
// --data's problem. The window's check, beside Start and before a sweep.
void checkModelTakesData(const ModelSpec& spec, const std::string& dataSpec);
// The refusal of a resume whose run has trained all of its `total` steps.
std::string trainedAll(int64_t total);

// --stages auto (issue 32): the fewest stages the memory estimate fits, one per GPU in order
// (`gpuFree`: each GPU's free bytes), or, on a machine without GPUs, in host memory (`hostFree`,
// 0: unknown), where CPU stages share one memory and so fit only as one device. One stage: the
// run trains on one device (gpu:0 where there are GPUs), config.stages cleared and config.towers
// set. More than one: config.stages the split over gpu:0 .. among those that fit, the one whose
// slowest stage is fastest by `layerSeconds` (each layer's, asked only then; none: any that fits).
// Returns the line that says what was chosen; throws tb::Error naming --stages auto where no
// count fits.
std::string resolveAutoStages(RunConfig& config, const ModelSpec& spec, const std::vector<size_t>& gpuFree,
                              size_t hostFree, const std::function<std::vector<double>()>& layerSeconds = {});

// The advice a refusal for one GPU ends with: the fewest stages over the GPUs (`gpuFree`) the
// estimate fits the run in at `batch`, or "" where none does.
std::string stageCountAdvice(const RunConfig& config, const ModelSpec& spec, int batch, const std::vector<size_t>& gpuFree);

// This process among the run's (mpirun): the parameter servers (--ps-tasks P: processes 0 .. P-1),
// then the workers, the first of which is the chief.
struct ProcessRoles {
    ProcessGroup* group = nullptr;  // null: the run is this process alone
    int count = 1, servers = 0, workers = 1, chief = 0;
    // --stage-per-process: the processes are the stages of one pipeline, each on every global
    // batch: one worker (index 0 on every process), stage rank() here.
    bool stagePerProcess = false;
    bool isServer() const { return group && group->rank() < servers; }
    bool isChief() const { return !group || group->rank() == chief; }
    int worker() const { return group && !stagePerProcess ? group->rank() - servers : 0; }  // this worker's index
    // Whether this process's step reports are the run's (the vote's slots; -1: it fills none):
    // every worker's, or, stages in processes of their own, the chief's (it has every stage's).
    int reportingWorker() const { return stagePerProcess && !isChief() ? -1 : worker(); }
    // Checks that every process runs the same settings (a collective) and that the roles leave a worker.
    static ProcessRoles of(const RunConfig& c, ProcessGroup* processes);
};

// What a run is before anything is loaded: this process's plan, the model, and the checkpoint a
// resume continues from, refused here, before the folder is written, where it cannot be exact.
struct RunPlan {
    RunConfig config;        // as given: the folder and the checkpoints keep it
    ProcessRoles roles;
    DeploymentPlan plan;     // this process's own: its towers, its share of every global batch
    ModelSpec spec;
    // Model parallelism (--stages): each stage's device and layers, the split chosen (the balanced
    // forms' by each layer's measured time); config.stages then names it explicitly, so the
    // folder keeps it and a resume runs the same split.
    std::optional<StagePlan> stages;
    std::optional<Checkpoint> resumeFrom;
    // An elastic resume (other processes than the run trained with): the sentence that says so,
    // in `note` too; "" otherwise.
    std::string resumedAs;
    std::string note;  // what the run's start says besides its plan (--stages auto's choice)
    static RunPlan of(const RunConfig& c, const ProcessRoles& roles, RunFolder* folder);
    // The devices that train: the stages' where there are stages, else the towers'.
    std::vector<Device> devices() const;
};

}  // namespace tb
