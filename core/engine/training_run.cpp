#include "engine/training_run.hpp"

#include <algorithm>
#include <cmath>

#ifdef TB_HAVE_PROTOBUF
#include "data/record_stream.hpp"
#endif
#include "engine/memory_estimate.hpp"
#include "engine/run_folder.hpp"
#include "parallel/pipeline_set.hpp"
#include "parallel/tower_set.hpp"
#include "util/error.hpp"
#include "util/elapsed.hpp"

namespace tb {

namespace {
using Clock = std::chrono::steady_clock;

// The pipeline a run with stages trains: its stages' layers and devices, the step's batch cut into
// micro-batches over the replicas, each stage's replica a thread team of its share of `cores`.
StagePipelineSetup pipelineSetup(const RunPlan& run, const OptimizerSettings& opt, int cores) {
    StagePipelineSetup setup;
    for (const Stage& s : run.stages->stages) setup.ranges.emplace_back(s.first, s.last);
    setup.devices = run.stages->devices();
    setup.batch = run.plan.batchPerTower;
    setup.microBatches = run.config.microBatches;
    setup.replicas = run.config.stageReplicas;
    // (A stage per process: the process's cores are its stage's.)
    setup.threadsPerStage = run.roles.stagePerProcess ? cores : std::max(1, cores / (run.stages->count() * run.config.stageReplicas));
    setup.opt = opt;
    setup.seed = run.config.seed;
    setup.processes = run.roles.group;  // stages inside each process, data parallel across them
    setup.exampleOffset = int64_t(run.roles.worker()) * run.plan.batchPerTower;
    if (run.roles.stagePerProcess) {  // process r S + s: stage s of replica r (else every stage in each)
        setup.localStage = run.roles.group->rank() % run.stages->count();
        setup.localReplica = run.roles.group->rank() / run.stages->count();
    }
    setup.copies = run.config.transfers == "copies";
    setup.syncBatchNorm = run.config.syncBn;
    return setup;
}

// The run must fit in host memory and on each GPU, before anything is allocated.
void checkRunFits(const RunPlan& run, const DataSplits& data, const OptimizerSettings& opt) {
    size_t dataBytes = 0;
    for (const Dataset* d : {&data.train, &data.validation, &data.test})
        dataBytes += d->pixels.size() + d->features.size() * sizeof(float) + d->labels.size() * sizeof(int32_t);
#ifdef TB_HAVE_PROTOBUF
    if (data.stream) dataBytes += streamBufferBytes(*data.stream, size_t(run.config.shuffleBuffer));
#endif
    const int slots = opt.rule == UpdateRule::Adam ? 2 : opt.rule == UpdateRule::Sgd ? 0 : 1;
    const auto available = [](const Device& d) {
        return d.type == DeviceType::Cpu ? hostMemoryAvailable() : makeBackend(d)->memoryInfo().freeBytes;
    };
    if (run.stages) {
        StagePipelineSetup setup = pipelineSetup(run, opt, 1);
        checkMemoryFits(estimatePipelineMemory(run.spec, setup, *makePipelineSchedule(run.config.pipeline.empty() ? "naive" : run.config.pipeline),
                                               slots, run.config.emaDecay > 0, dataBytes),
                        available, "--model " + run.spec.name);
        return;
    }
    try {
        checkMemoryFits(estimateRunMemory(run.spec, run.plan, run.plan.batchPerTower, slots, run.config.emaDecay > 0,
                                          dataBytes, opt.precision),
                        available, "--model " + run.spec.name);
    } catch (const Error& e) {
        // A model too large for one GPU: say how many stages over the GPUs would hold it.
        if (!anyGpu(run.plan.towers) || run.plan.towerCount() != 1) throw;
        std::vector<size_t> gpuFree;
        for (int g = 0; g < gpuCount(); ++g) gpuFree.push_back(available(Device{DeviceType::Cuda, g}));
        throw Error(e.what() + stageCountAdvice(run.config, run.spec, run.plan.batchPerTower, gpuFree));
    }
}
}  // namespace

TrainingRun::TrainingRun(RunPlan& run, DataSplits data, int cores, int machineCores, ObserverHub& hub,
                         RunControl& control, RunFolder* folder, const std::vector<TrainingObserver*>& observers)
    : run_(run), c_(run.config), data_(std::move(data)), hub_(hub), control_(control), folder_(folder) {
    const DeploymentPlan& plan = run.plan;
    int64_t validation = c_.validation;
    if (validation < 0) validation = std::min<int64_t>(5000, int64_t(trainingSize(data_)) / 10);
    if (validation >= int64_t(trainingSize(data_)))
        throw Error("--validation: " + std::to_string(validation) + " samples leave none of the " +
                    std::to_string(trainingSize(data_)) + " training samples");
    if (validation > 0) splitValidation(data_, size_t(validation), data_.train.name + " validation");
    trainingSize_ = trainingSize(data_);
    // Streamed shards are dealt record by record to the processes (k mod P): another count deals
    // the epoch under way otherwise, so its resume would repeat or skip records near the cut.
    if (data_.stream && !run.resumedAs.empty())
        throw Error("--resume: the run trained as " + std::to_string(run.resumeFrom->meta().processes) +
                    " processes streaming its shards, each record dealt to one of them; resume it with as many "
                    "(mpirun -np " + std::to_string(run.resumeFrom->meta().processes) + ")");
    checkModelFitsData(run.spec, shapeOf(run.spec).outputs, data_, c_.data);
    // A step that takes more examples than the training set holds would repeat examples within
    // one batch: a mistake in the sizes, not a larger batch.
    if (const int64_t global = int64_t(run.roles.workers) * plan.towerCount() * plan.batchPerTower;
        global > int64_t(trainingSize_))
        throw Error("--batch: " + std::to_string(global) + " examples per step, but the training set has only " +
                    std::to_string(trainingSize_) +
                    (validation > 0 ? " (after " + std::to_string(validation) + " held out for validation)" : std::string()));
    if (plan.update == UpdateMode::Async && c_.emaDecay > 0)
        throw Error("--ema-decay: the moving average needs synchronous updates (--update sync)");
    checkPrecision(c_.precision, run.devices());  // (GPU stages: their GPUs, not the CPU)
    const OptimizerSettings opt = optimizerSettings(c_);
    checkRunFits(run, data_, opt);

    const int n = plan.towerCount();
    if (run.stages) {  // model parallelism: one pipeline of stages, each with its share of the cores
        const StagePipelineSetup setup = pipelineSetup(run, opt, cores);
        auto pipeline = std::make_unique<PipelineSet>(run.spec, setup,
                                                      makePipelineSchedule(c_.pipeline.empty() ? "naive" : c_.pipeline), c_.seed);
        sum_.stages = c_.stages;
        sum_.pipeline = c_.pipeline.empty() ? "naive" : c_.pipeline;
        sum_.microBatches = c_.microBatches;
        sum_.stageReplicas = c_.stageReplicas;
        sum_.stagePerProcess = c_.stagePerProcess;
        for (int s = 0; s < pipeline->pipeline().stages(); ++s) {
            sum_.stageActivationBytes.push_back(pipeline->pipeline().activationBytes(s));
            sum_.stageBytes.push_back(pipeline->pipeline().stageBytes(s));
        }
        towers_ = std::move(pipeline);
    } else {
        // A moving average of the weights and a two-feature set's decision grid read the variables
        // as of each reported step: those runs report every step before the next (no report lag).
        DeploymentPlan towerPlan = plan;
        if (c_.emaDecay > 0 || data_.train.sampleSize() == 2) {
            if (plan.reportLag > 0)
                throw Error("--report-lag: " + c_.data + " is a set of two features, whose decision grid is drawn from "
                            "the variables as of each reported step; leave --report-lag out");
            towerPlan.reportLag = 0;
        }
        towers_ = std::make_unique<TowerSet>(run.spec, towerPlan, opt, std::max(1, cores / n), c_.seed, run.roles.group);
    }
    const int prefetch = prefetchFor(c_, plan, cores, machineCores);
    const Network& net = towers_->evalNetwork();
    net_ = &net;
    if (!c_.initFrom.empty() && !run.resumeFrom) {  // another run's weights, any plan
        std::vector<float> weights, moving;
        try {
            const Checkpoint from = Checkpoint::open(c_.initFrom);
            weights = from.loadWeights(net);
            if (net.hasBatchNorm()) moving = from.loadStatistics(net);
        } catch (const Error& e) {
            throw Error(std::string("--init-from: ") + e.what());
        }
        towers_->setVariables(weights.data());
        if (!moving.empty()) towers_->setStatistics(moving);
    }
    if (c_.emaDecay > 0) startMovingAverage(run.roles.isChief());
    // A resumed run: every buffer of the training state as the checkpoint has it; the step count,
    // the input's position and the counter-based dropout follow from its step.
    double bestValidation = -1;
    if (run.resumeFrom) {
        run.resumeFrom->restore(*towers_, net, ema_, emaStream_,
                                towers_->stateDiffersByProcess() && !run.roles.isChief() ? run.roles.group->rank() : -1);
        step_ = run.resumeFrom->meta().step;
        bestValidation = run.resumeFrom->meta().bestValidationAccuracy;
        // A crash can leave a best.safetensors newer than the checkpoint resumed from (from an
        // evaluation after it): that model still counts, and only a better one replaces it.
        if (folder_) bestValidation = std::max(bestValidation, folder_->bestCheckpointAccuracy());
        run.resumeFrom.reset();  // its bytes are in the towers now
    }
    // --normalise mean-std: the training split's statistics (after the validation split), for
    // every pipeline of the run and its checkpoints.
    const int loaders = loaderThreadsFor(c_, prefetch, cores, machineCores);
    if (c_.normalise == "mean-std") channels_ = trainingStatistics(run.spec.pixels, loaders);
    evaluator_ = std::make_unique<Evaluator>(*towers_, c_, data_.cifarAugment, prefetch, ema_, run.roles.isChief(), hub, channels_);

    sum_.model = run.spec.name;
    sum_.data = c_.data;
    sum_.backend = towers_->backendName();
    sum_.precision = c_.precision;
    sum_.params = net.paramCount();
    sum_.flopsPerExample = net.trainFlopsPerExample();
    sum_.plan = plan;
    sum_.plan.reportLag = towers_->reportLag();  // (automatic: as resolved)
    if (const auto* pipeline = dynamic_cast<const PipelineSet*>(towers_.get())) {
        // A pipeline's lanes are its stages: the summary's towers are their devices.
        sum_.plan.towers.clear();
        for (int l = 0; l < pipeline->pipeline().lanes(); ++l) sum_.plan.towers.push_back(pipeline->pipeline().laneDevice(l));
    }
    sum_.processes = run.roles.count;
    sum_.resumedAt = step_;
    ServerConnection* servers = towers_->servers();
    perStep_ = towers_->runsFree() ? plan.batchPerTower : n * plan.batchPerTower * plan.accumulate;
    globalPerStep_ = servers && servers->async() ? perStep_ : int64_t(perStep_) * run.roles.workers;
    total_ = c_.steps > 0 ? c_.steps
                          : std::max<int64_t>(1, int64_t(std::ceil(c_.epochs * double(trainingSize_) /
                                                                   double(globalPerStep_))));
    if (step_ >= total_) throw Error(trainedAll(total_));
    PipelineOptions input = pipelineFor(c_, data_.cifarAugment, true, perStep_, prefetch, channels_);
    input.pixelMultiply = run.spec.pixels.multiply, input.pixelAdd = run.spec.pixels.add;
    input.skipSamples = uint64_t(step_) * uint64_t(globalPerStep_);  // every step takes globalPerStep samples
    if (run.roles.group) input.sliceIndex = run.roles.worker(), input.sliceCount = run.roles.workers;
    input.loaderThreads = loaders;
    if (servers) servers->setRunLength(total_);
    train_ = trainingInput(input);
    // GPU telemetry (GPU towers or stages); runs without a GPU never touch NVML, which starts up here, before the
    // training clock does.
    std::string noTelemetry;
    if (anyGpu(sum_.plan.towers)) {
        telemetry_ = makeNvmlSource(&noTelemetry);
        if (!telemetry_) noTelemetry = "; no GPU telemetry: " + noTelemetry;
    }
    // A pipeline's message names its split as --stages takes it ("stages SPEC; ..."): the window
    // draws the split the balancer chose from it.
    hub_.onStateChanged(RunState::Running, (run.stages ? "stages " + c_.stages : sum_.plan.describe()) + "; " +
                                               towers_->backendName() + noTelemetry + streamNote(input) +
                                               (run.note.empty() ? std::string() : "; " + run.note));
    // (Not drawn for a model whose stages are in processes of their own: only the chief has it
    // whole, and only when every process has gathered it.)
    if (!towers_->modelInParts()) grids_ = DecisionGridProbe::make(observers, run.spec, data_.train, total_, plan.averaging());

    const auto start = Clock::now();
    stats_ = std::make_unique<RunStatistics>(start, step_, globalPerStep_);
    checkpoints_ = std::make_unique<CheckpointPolicy>(folder_, run, globalPerStep_, *towers_, net, ema_, emaStream_,
                                                      hub_, step_, start, bestValidation, data_.train.classNames, channels_);
    counting_ = StepCounting::make(run.roles, *towers_, control_, perStep_);
    if (telemetry_)
        monitor_ = std::make_unique<DeviceMonitor>(
            std::move(telemetry_), [&hub](const std::vector<DeviceSample>& d) { hub.onDeviceSamples(d); },
            DeviceMonitor::kDefaultInterval, start);
}

// The moving average follows the variables where they live (the holder's copy; averaging: the
// replicas' mean). A model in parts: each process averages its stage's slice; the chief, which
// evaluates and keeps the checkpoints, holds the whole model's average, the other stages' slices
// as gathered with them.
void TrainingRun::startMovingAverage(bool chief) {
    const TrainedVariables trained = towers_->trainedVariables();
    const ParamSlice kept =
        towers_->modelInParts() && !chief ? trained.slice : ParamSlice{0, size_t(towers_->paramCount())};
    emaOwner_ = std::make_unique<WeightEma>(*trained.view.backend, float(c_.emaDecay), kept, trained.slice,
                                            trained.view.params, trained.view.stream);
    ema_ = emaOwner_.get();
    emaStream_ = trained.view.stream;
}

TrainingRun::~TrainingRun() = default;

void TrainingRun::train() {
    if (towers_->runsFree()) trainFree();
    else trainInSteps();
    step_ = towers_->finishTraining(step_);
}

void TrainingRun::report(StepMetrics& m) {
    const auto now = Clock::now();
    const double held = control_.heldSeconds();  // pauses and slow motion are not training
    m.totalSteps = total_;
    m.epoch = double(m.step) * double(globalPerStep_) / double(trainingSize_);
    // Training time as the summary counts it: evaluations and checkpoints are not training either.
    m.elapsedSeconds = secondsBetween(stats_->start(), now) - held - evaluator_->seconds() - checkpoints_->seconds();
    if (!std::isfinite(m.loss))
        throw Error(m.step == 1 ? "--model " + run_.spec.name + ": the loss is " + std::to_string(m.loss) +
                                      " at the first step, before any update: the model's initial weights or layer "
                                      "settings give non-finite outputs"
                                : "training diverged at step " + std::to_string(m.step) + " (loss is " +
                                      std::to_string(m.loss) + "); lower --lr");
    stats_->add(m, now, held);
    stats_->soFar(m, m.elapsedSeconds);
    hub_.onStepEnd(m);
    if (grids_) grids_->after(m, *towers_, hub_);  // after the step's report, as the window draws them
    if (std::string e = hub_.error(); !e.empty()) throw Error(e);  // e.g. the metrics file
}

std::optional<EvalResult> TrainingRun::validate(const CancelCheck& cancelled) {
    const bool held = data_.validation.size() > 0;
    return evaluator_->pass(held ? data_.validation : data_.test, held ? "validation" : "test", step_, cancelled);
}

std::unique_ptr<BatchSource> TrainingRun::trainingInput(const PipelineOptions& options) const {
#ifdef TB_HAVE_PROTOBUF
    if (data_.stream) return std::make_unique<RecordStream>(*data_.stream, options);
#endif
    return std::make_unique<InputPipeline>(data_.train, options);
}

std::string TrainingRun::streamNote(const PipelineOptions& input) const {
#ifdef TB_HAVE_PROTOBUF
    if (data_.stream)
        return "; streamed from " + std::to_string(data_.stream->shards.size()) + " shards, a shuffle buffer of " +
               std::to_string(input.shuffleBuffer > 0 ? input.shuffleBuffer : kDefaultStreamBuffer) + " records, " +
               std::to_string(input.loaderThreads) + " loader thread" + (input.loaderThreads == 1 ? "" : "s");
#endif
    (void)input;
    return {};
}

ChannelStatistics TrainingRun::trainingStatistics(const InputNormalisation& pixels, int threads) const {
#ifdef TB_HAVE_PROTOBUF
    if (data_.stream) return channelStatistics(*data_.stream, pixels.multiply, pixels.add, threads);
#endif
    return channelStatistics(data_.train, pixels.multiply, pixels.add);
}

RunSummary TrainingRun::finish() {
    stats_->summarise(sum_, step_, Clock::now(), control_.heldSeconds(), evaluator_->seconds() + checkpoints_->seconds());
    sum_.stopped = step_ < total_;
    sum_.epochs = double(step_) * double(globalPerStep_) / double(trainingSize_);
    sum_.towerMemory = net_->memoryUse();
    sum_.optimizerSlotBytes = towers_->optimizerSlotBytes();
    sum_.evaluated = false;
    // The final evaluation gives way only to an abort (the user leaving, or a second stop in the
    // window), so a stopped run still reports its test accuracy.
    towers_->gatherModel(ema_ ? ema_->toWrite() : nullptr);  // (before the chief alone evaluates and keeps the model)
    checkpoints_->gatherPeers();
    if (!control_.aborted()) {
        const CancelCheck aborted = [this] { return control_.aborted(); };
        const bool held = data_.validation.size() > 0;
        hub_.onStateChanged(RunState::Evaluating, held ? "validation and test sets" : "test set");
        std::optional<EvalResult> validation;
        if (held) validation = evaluator_->pass(data_.validation, "validation", step_, aborted);
        const std::optional<EvalResult> test =
            held && !validation ? std::nullopt : evaluator_->pass(data_.test, "test", step_, aborted);
        if (test) {
            if (validation) sum_.validationAccuracy = validation->accuracy;
            sum_.testAccuracy = test->accuracy;
            sum_.testLoss = test->loss;
            sum_.evaluated = true;
        }
    }
    // After the final evaluation, so that it carries its validation accuracy.
    checkpoints_->saveFinal(step_, sum_.evaluated, sum_.validationAccuracy);
    sum_.checkpoints = checkpoints_->count();
    sum_.checkpointSeconds = checkpoints_->seconds();
    monitor_.reset();  // no samples after the final state
    sum_.deviceMemory = towers_->deviceMemory();
    hub_.flush();
    if (std::string e = hub_.error(); !e.empty()) throw Error(e);
    // Reports the window (or another observer that allows it) did not keep up with: said, not hidden
    // (the files have every one).
    sum_.droppedReports = hub_.dropped();
    hub_.onStateChanged(sum_.stopped ? RunState::Stopped : RunState::Finished,
                        sum_.droppedReports > 0 ? std::to_string(sum_.droppedReports) +
                                                      " step reports were dropped for the window, whose charts are "
                                                      "short by them; the metrics file has every step"
                                                : "");
    return sum_;
}

}  // namespace tb
