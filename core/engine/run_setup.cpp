#include "engine/run_setup.hpp"

#include <algorithm>
#include <cstdio>
#include <thread>
#include <tuple>
#include <nlohmann/json.hpp>

#include "engine/memory_estimate.hpp"
#include "engine/run_folder.hpp"
#include "parallel/layer_costs.hpp"
#include "parallel/processes.hpp"
#include "parallel/stage_pipeline.hpp"
#include "util/error.hpp"

namespace tb {

namespace {
int machineThreads() { return int(std::max(1u, std::thread::hardware_concurrency())); }
}  // namespace

void checkProcessRoles(const RunConfig& c, int processes) {
    if (c.psTasks > 0 && processes == 1)
        throw Error("--ps-tasks: parameter servers are processes of their own; start the run with mpirun -np N, N "
                    "more than " + std::to_string(c.psTasks));
    if (c.psTasks >= processes)
        throw Error("--ps-tasks: " + std::to_string(c.psTasks) + " parameter-server processes leave no worker among the " +
                    std::to_string(processes) + " processes (mpirun -np must be more than --ps-tasks)");
    // The global --batch is split over the workers, each making its plan for its share (RunPlan::of).
    const int workers = workerProcesses(c, processes);
    if (c.syncBn && !c.stages.empty() && c.stageReplicas == 1 && workers == 1)
        throw Error("--sync-bn: a pipeline's micro-batches pass each batch norm one after another, so only replicas "
                    "of its stages (--stage-replicas) or processes can sum their statistics; give --stage-replicas 2 "
                    "or more, or leave --sync-bn out");
    if (workers <= 1 || c.batchPerTower != 0) return;
    if (c.batch % workers != 0)
        throw Error("--batch: " + std::to_string(c.batch) + " examples do not split evenly over the " +
                    std::to_string(workers) + (c.psTasks > 0 ? " worker processes" : " processes"));
    // Stages in each process (hybrid): each share is cut over the replicas, then into micro-batches.
    const int64_t share = c.batch / workers, pieces = int64_t(c.stageReplicas) * c.microBatches;
    if (!c.stages.empty() && share % pieces != 0)
        throw Error("--batch: the " + std::to_string(share) + " examples of each of the " + std::to_string(workers) +
                    " processes do not split over --stage-replicas " + std::to_string(c.stageReplicas) +
                    " x --micro-batches " + std::to_string(c.microBatches));
}

// A loader thread beside one CPU tower has no core of its own and stalls the tower's OpenMP team
// at its next barrier, so that tower's thread makes each batch itself. GPU towers, several CPU
// towers, a spare core or a team of more than kMaxSerialTeam threads keep the loader thread (only
// 2 cores were measured: docs/measurements.md).
int prefetchFor(const RunConfig& config, const DeploymentPlan& plan, int threads, int machineCores) {
    constexpr int kMaxSerialTeam = 4;
    if (config.prefetch >= 0) return config.prefetch;
    const bool oneCpuTower = plan.towerCount() == 1 && plan.towers[0].type == DeviceType::Cpu;
    return oneCpuTower && threads >= machineCores && threads <= kMaxSerialTeam ? 0 : 2;
}

int loaderThreadsFor(const RunConfig& config, int prefetch, int threads, int machineCores) {
    if (config.loaderThreads > 0) return config.loaderThreads;
    return prefetch == 0 ? std::max(1, threads) : std::max(1, machineCores - threads);
}

int workerProcesses(const RunConfig& config, int processes) {
    return config.stagePerProcess ? 1 : std::max(1, processes - config.psTasks);
}

int chiefProcess(const RunConfig& config, int processes) { return config.psTasks < processes ? config.psTasks : 0; }

int cpuTowerSlots() { return std::max(8, 4 * machineThreads()); }

DeploymentPlan makePlan(const RunConfig& c) {
    // Only a plan that names GPUs loads the CUDA module (cuDNN alone takes a while to load).
    const bool wantsGpu = c.towers == "auto" || c.towers.find("gpu") != std::string::npos ||
                          c.towers.find("cuda") != std::string::npos;
    return wantsGpu ? makePlan(c, gpuCount(), gpuRuntime().whyNot) : makePlan(c, 0, "");
}

DeploymentPlan makePlan(const RunConfig& c, int gpus, const std::string& whyNoGpu) {
    DeploymentPlan p;
    const bool wantsGpu = c.towers.find("gpu") != std::string::npos || c.towers.find("cuda") != std::string::npos;
    if (wantsGpu && gpus == 0)
        throw Error("--towers " + c.towers + ": no GPU can be used here (" + whyNoGpu + ")");
    p.towers = DeploymentPlan::parseTowers(c.towers, machineThreads(), gpus, "--towers");
    DeploymentPlan::parseVariables(c.variables, p, "--variables");
    p.reduce = DeploymentPlan::parseReduce(c.reduce, "--reduce");
    p.update = DeploymentPlan::parseUpdate(c.update, "--update");
    p.averageEvery = c.averageEvery;
    p.psShards = c.psShards;
    p.psTasks = c.psTasks;
    p.slowdown = DeploymentPlan::parseSlowdown(c.slow, p.towerCount(), "--slow");
    p.transfers = DeploymentPlan::parseTransfers(c.transfers, "--transfers");
    p.commPrecision = parseCommPrecision(c.commPrecision, "--comm-precision");
    p.accumulate = c.accumulate;
    p.syncBatchNorm = c.syncBn;
    p.reportLag = c.reportLag;
    const int n = p.towerCount();
    if (c.batchPerTower > 0) p.batchPerTower = c.batchPerTower;
    else if (n > 0 && c.batch % n == 0) p.batchPerTower = c.batch / n;
    else if (n > 0)
        throw Error("--batch: " + std::to_string(c.batch) + " examples do not split evenly over " + std::to_string(n) +
                    " towers; give --batch-per-tower");
    // Every tower holds its batch's activations: the towers' examples together keep --batch's limit.
    if (int64_t(n) * p.batchPerTower > RunConfig::kMaxBatch)
        throw Error("--batch-per-tower: " + std::to_string(p.batchPerTower) + " examples on each of " + std::to_string(n) +
                    " towers are " + std::to_string(int64_t(n) * p.batchPerTower) + " at once, more than the limit of " +
                    std::to_string(RunConfig::kMaxBatch));
    p.validate(cpuTowerSlots(), gpus);
    return p;
}

DataOptions dataOptions(const RunConfig& c, const ModelSpec& spec) {
    DataOptions o;
    o.tfrecordFeatures = c.tfrecordFeatures;
    o.channels = spec.inC;
    o.height = spec.inH;
    o.width = spec.inW;
    o.skipBadImages = c.skipBadImages;
    o.threads = c.threads;
    o.stream = c.stream;
    return o;
}

bool standardizes(const std::string& normalise, bool cifar) {
    return normalise == "standardize" || (normalise == "auto" && cifar);
}

PipelineOptions pipelineFor(const RunConfig& c, bool cifar, bool training, int batch, int prefetch,
                            const ChannelStatistics& stats) {
    PipelineOptions o;
    o.batchSize = batch;
    o.shuffle = training;
    o.shuffleBuffer = size_t(c.shuffleBuffer);
    o.repeat = training;
    o.cropH = o.cropW = cifar ? kCifarCrop : 0;
    o.standardize = standardizes(c.normalise, cifar);
    if (c.normalise == "mean-std") {
        if (stats.empty()) throw Error("--normalise mean-std: no channel statistics of the training split reached the input");
        o.channelMean = stats.mean;
        o.channelStd = stats.stddev;
    }
    const AugmentSettings a = AugmentSettings::parse(c.augment, "--augment");
    if (training && a.automatic) {
        o.augment = cifar;  // PipelineOptions' defaults are the tutorial's distorted_inputs
    } else if (training && a.enabled) {
        o.augment = true;
        o.pad = a.pad;
        o.flip = a.flip;
        o.brightness = a.brightness;
        o.contrastLow = a.contrastLow;
        o.contrastHigh = a.contrastHigh;
    }
    o.channelsLast = true;  // the engine computes in (n, h, w, c)
    o.prefetch = prefetch;
    o.seed = c.seed;
    return o;
}

OptimizerSettings optimizerSettings(const RunConfig& c) {
    OptimizerSettings opt;
    opt.precision = c.precision == "bf16" ? MatmulPrecision::Bf16 : MatmulPrecision::Fp32;
    opt.rule = parseUpdateRule(c.optimizer, "--optimizer");
    opt.hyper.momentum = float(c.momentum);
    // Linear scaling (Goyal et al. 2017): the rate for an update's batch of examples, from the one
    // given for a batch of lrReferenceBatch.
    opt.schedule.initial = float(c.lr * (c.lrScaling == "linear" ? double(c.batch) * c.accumulate / c.lrReferenceBatch : 1.0));
    opt.allowTf32 = c.tf32;
    opt.deterministic = c.deterministic;
    opt.schedule.warmupSteps = c.warmupSteps;
    if (c.lrDecaySteps > 0) {
        opt.schedule.kind = c.lrDecay == "cosine" ? LrSchedule::Kind::Cosine : LrSchedule::Kind::Exponential;
        opt.schedule.decaySteps = c.lrDecaySteps;
        opt.schedule.decayRate = float(c.lrDecayRate);
        opt.schedule.staircase = c.lrStaircase;
    }
    return opt;
}

// Bf16 matrix work runs on CPU towers of a processor with bf16 instructions (cpuBf16Missing)
// and on GPUs with bf16 tensor cores (compute capability 8.0 and later).
void checkPrecision(const std::string& precision, const DeploymentPlan& plan, const std::vector<GpuInfo>& gpus) {
    checkPrecision(precision, plan.towers, gpus);
}

void checkPrecision(const std::string& precision, const std::vector<Device>& devices, const std::vector<GpuInfo>& gpus) {
    if (precision != "bf16") return;
    for (const Device& d : devices) {
        if (d.type == DeviceType::Cpu) {
            if (const std::string why = cpuBf16Missing(); !why.empty()) throw Error(why);
            continue;
        }
        for (const GpuInfo& g : gpus)
            if (g.index == d.index && g.ccMajor < 8)
                throw Error("--precision bf16: " + d.str() + " (" + g.name + ") has compute capability " +
                            std::to_string(g.ccMajor) + "." + std::to_string(g.ccMinor) +
                            ", and bf16 tensor cores need 8.0 (Ampere) or later");
    }
}

void checkPrecision(const std::string& precision, const std::vector<Device>& devices) {
    // The CUDA module's libraries' initialisers take 0.38 s of a start even where no GPU exists:
    // a run on the CPU alone does not load it.
    checkPrecision(precision, devices, anyGpu(devices) ? gpuRuntime().gpus : std::vector<GpuInfo>{});
}

namespace {

void checkModelInput(const ModelSpec& spec, const ImageShape& data, const std::string& dataSpec) {
    const Dims dataDims{data.channels, data.height, data.width};
    const Dims modelDims{spec.inC, spec.inH, spec.inW};
    if (!(dataDims == modelDims))
        throw Error("--model: " + spec.name + " expects input " + modelDims.str() + " but --data " + dataSpec +
                    " gives " + dataDims.str());
}

}  // namespace

void checkModelTakesData(const ModelSpec& spec, const std::string& dataSpec) {
    std::optional<ImageShape> shape;
    try {
        shape = dataInputShape(dataSpec);
    } catch (const Error& e) {
        const std::string why = e.what();
        throw Error(why.starts_with("--data") ? why : "--data: " + why);
    }
    if (shape) checkModelInput(spec, *shape, dataSpec);
}

// loadData makes numClasses cover the labels of every split.
void checkModelFitsData(const ModelSpec& spec, int outputs, const DataSplits& data, const std::string& dataSpec) {
    const Dataset& d = data.train.size() ? data.train : data.test;
    checkModelInput(spec, data.cifarAugment ? ImageShape{d.channels, kCifarCrop, kCifarCrop}
                                            : ImageShape{d.channels, d.height, d.width},
                    dataSpec);
    if (outputs < d.numClasses)
        throw Error("--model: " + spec.name + " has " + std::to_string(outputs) + " outputs but --data " + dataSpec +
                    " has " + std::to_string(d.numClasses) + " classes");
}

std::string trainedAll(int64_t total) {
    return "--resume: the run has trained its " + std::to_string(total) +
           " steps already; give it more with --steps or --epochs";
}

namespace {

// A resume with other processes than the checkpoint's run had (elastic): "" where the count is the
// same (or the checkpoint, older, does not say); else the sentence saying how the data is dealt
// now. Refused where the state cannot follow: averaging's replicas keep slots per process.
// `perProcess`: the examples of each global batch that this process takes now.
std::string elasticResumeNote(const RunConfig& c, const ProcessRoles& roles, int then, int perProcess) {
    const int now = roles.count;
    if (then <= 0 || then == now) return {};
    auto processes = [](int n) { return std::to_string(n) + (n == 1 ? " process" : " processes"); };
    const std::string was = "the run trained as " + processes(then);
    if (c.psTasks > 0)
        throw Error("--resume: " + was + " with --ps-tasks " + std::to_string(c.psTasks) +
                    ", whose servers' optimiser slots and workers' shares are laid out for them; resume it as " +
                    processes(then) + " (mpirun -np " + std::to_string(then) + ")");
    if (c.averageEvery > 0)
        throw Error("--resume: " + was + " averaging every " + std::to_string(c.averageEvery) +
                    " steps, whose replicas keep optimiser slots of their own in each process; resume it as " +
                    processes(then) + " (mpirun -np " + std::to_string(then) + ")");
    return "resumed as " + processes(now) + " where " + was + ": each global batch of " +
           std::to_string(perProcess * roles.workers) + " examples is re-sharded, " + std::to_string(perProcess) +
           " to each process";
}

// Processes: every one must run process 0's settings; the first process that differs, and its
// first differing setting, are named by every process (so process 0 also ends with the reason,
// and its run folder says the run failed rather than being left "running" when the others end
// the run). What only process 0 does (the progress line, the metrics file) may differ.
void checkSameSettings(ProcessGroup& processes, const RunConfig& c) {
    nlohmann::json settings = c.toJson();
    for (const char* own : {"quiet", "metrics"}) settings.erase(own);
    const std::vector<std::string> all = processes.gather(settings.dump());
    const nlohmann::json leader = nlohmann::json::parse(all.front(), nullptr, false);
    for (size_t p = 1; p < all.size(); ++p) {
        if (all[p] == all.front()) continue;
        nlohmann::json other = nlohmann::json::parse(all[p], nullptr, false);
        if (!other.is_object()) other = nlohmann::json::object();
        std::string key = "settings", here = "other", there = "process 0's";
        for (const auto& [k, v] : other.items()) {
            if (!leader.is_object() || !leader.contains(k) || leader[k] != v) {
                key = RunConfig::keyToFlag(k);
                here = v.dump();
                there = leader.is_object() && leader.contains(k) ? leader[k].dump() : "unset";
                break;
            }
        }
        throw Error(key + " is " + here + " on process " + std::to_string(p) + " but " + there +
                    " on process 0 (every process of a run must have the same settings)");
    }
}

}  // namespace

ProcessRoles ProcessRoles::of(const RunConfig& c, ProcessGroup* processes) {
    ProcessRoles r;
    r.group = processes;
    r.count = processes ? processes->size() : 1;
    // Checked first, so that a mistake names its field.
    if (processes) checkSameSettings(*processes, c);
    checkProcessRoles(c, r.count);
    r.servers = c.psTasks;
    r.workers = workerProcesses(c, r.count);
    r.chief = chiefProcess(c, r.count);
    if (c.stagePerProcess) {
        if (!processes || r.count < 2)
            throw Error("--stage-per-process: each stage runs in a process of its own, so start one process per stage "
                        "(mpirun -np 2 for --stages 2), or leave it out to run the stages in this process");
        r.stagePerProcess = true;
    }
    return r;
}

namespace {
int optimizerSlots(const RunConfig& c) {
    const UpdateRule rule = optimizerSettings(c).rule;
    return rule == UpdateRule::Adam ? 2 : rule == UpdateRule::Sgd ? 0 : 1;
}

// The fewest stages over `free` (one device each) that the estimate fits, with the config's
// schedule and micro-batches; no costs: any split that fits will do for the count.
StageFit stageFit(const RunConfig& c, const ModelSpec& spec, int batch, const std::vector<size_t>& free,
                  std::vector<double> cost = {}) {
    StagePipelineSetup setup;
    setup.batch = batch;
    setup.microBatches = c.microBatches;
    setup.replicas = c.stageReplicas;
    setup.copies = c.transfers == "copies";
    setup.opt = optimizerSettings(c);
    if (cost.empty()) cost.assign(spec.layers.size(), 0.0);
    return fewestStagesThatFit(spec, setup, *makePipelineSchedule(c.pipeline.empty() ? "naive" : c.pipeline),
                               optimizerSlots(c), c.emaDecay > 0, cost, free);
}

std::string gpuList(int count) {
    std::string out;
    for (int i = 0; i < count; ++i)
        out += (i == 0 ? "" : i + 1 == count ? " and " : ", ") + Device{DeviceType::Cuda, i}.str();
    return out;
}

std::string sizes(const std::vector<size_t>& bytes) {
    std::string out;
    for (size_t i = 0; i < bytes.size(); ++i) out += (i ? ", " : "") + mebibytes(bytes[i]);
    return out;
}
}  // namespace

std::string stageCountAdvice(const RunConfig& c, const ModelSpec& spec, int batch, const std::vector<size_t>& gpuFree) {
    const StageFit fit = stageFit(c, spec, batch, gpuFree);
    if (fit.count < 2) return "";
    return "; the estimate fits it in " + std::to_string(fit.count) + " stages over " + gpuList(fit.count) + " (" +
           sizes(fit.bytes) + "): --stages auto splits it so";
}

std::string resolveAutoStages(RunConfig& c, const ModelSpec& spec, const std::vector<size_t>& gpuFree, size_t hostFree,
                              const std::function<std::vector<double>()>& layerSeconds) {
    const bool gpus = !gpuFree.empty();
    const StageFit fit = stageFit(c, spec, c.batch, gpus ? gpuFree : std::vector<size_t>{hostFree ? hostFree : SIZE_MAX});
    if (fit.count == 1) {
        c.stages.clear();
        c.pipeline.clear();
        c.microBatches = c.stageReplicas = 1;
        if (gpus) c.towers = "gpu:0";
        return "--stages auto: the model fits on " + std::string(gpus ? "gpu:0" : "one device") + " (" +
               mebibytes(fit.bytes[0]) + " estimated), so it trains there without stages";
    }
    if (!gpus)
        throw Error("--stages auto: one device of " + spec.name + " at batch " + std::to_string(c.batch) +
                    " needs more than the " + mebibytes(hostFree) +
                    " of host memory available, and CPU stages share host memory, so no split makes it fit; lower "
                    "--batch or use a smaller model");
    if (fit.count == 0)
        throw Error("--stages auto: " + spec.name + " at batch " + std::to_string(c.batch) + " fits in no number of stages over this machine's " +
                    std::to_string(gpuFree.size()) + (gpuFree.size() == 1 ? " GPU" : " GPUs") +
                    " (one stage each); lower --batch, or give more --micro-batches with --pipeline 1f1b");
    // The count is the memory's; the split among those that fit, the one whose slowest stage is
    // fastest by the layers' measured seconds.
    const StageFit split = stageFit(c, spec, c.batch, gpuFree, layerSeconds ? layerSeconds() : std::vector<double>{});
    StagePlan plan;
    for (int s = 0; s < split.count; ++s)
        plan.stages.push_back({Device{DeviceType::Cuda, s}, split.ranges[size_t(s)].first, split.ranges[size_t(s)].second});
    std::vector<std::string> names;
    for (const LayerSpec& l : spec.layers) names.push_back(l.name);
    c.stages = plan.describe(names);
    if (c.pipeline.empty()) c.pipeline = "naive";
    return "--stages auto: " + spec.name + " fits in " + std::to_string(split.count) + " stages over " +
           gpuList(split.count) + " (" + sizes(split.bytes) + " estimated): " + c.stages;
}

std::vector<Device> RunPlan::devices() const { return stages ? stages->devices() : plan.towers; }

RunPlan RunPlan::of(const RunConfig& c, const ProcessRoles& roles, RunFolder* folder) {
    RunPlan r;
    r.config = c;
    r.roles = roles;
    // The global --batch is split over the workers (evenly: checkProcessRoles); each makes its
    // plan for its share.
    RunConfig local = c;
    if (roles.group && c.batchPerTower == 0) local.batch = c.batch / roles.workers;
    r.spec = findModel(c.model);
    const int microBatch = std::max(1, c.batch / std::max(1, c.microBatches * c.stageReplicas));  // the balancer's batch
    if (c.stages == "auto") {
        if (roles.group) throw Error("--stages auto: model parallelism across mpirun processes is not built yet; run one process");
        std::vector<size_t> gpuFree;
        for (int g = 0; g < gpuCount(); ++g)
            gpuFree.push_back(makeBackend(Device{DeviceType::Cuda, g})->memoryInfo().freeBytes);
        // (Each layer's seconds on one CPU thread at the micro-batch's size, measured only where
        // the model is split: a model too large for one GPU is not measured whole on one.)
        r.note = resolveAutoStages(r.config, r.spec, gpuFree, hostMemoryAvailable(), [&] {
            auto backend = makeCpuBackend(1);
            return measureLayerSeconds(r.spec, *backend, microBatch, 3);
        });
        local.stages = r.config.stages;
        local.towers = r.config.towers;
    }
    r.plan = makePlan(local);
    if (c.lrScaling == "linear") {  // said where the run starts (its log, the window's state line)
        char text[160];
        std::snprintf(text, sizeof text, "--lr-scaling linear: lr %g x %d / %d = %g", c.lr, c.batch * c.accumulate,
                      c.lrReferenceBatch, c.lr * c.batch * c.accumulate / c.lrReferenceBatch);
        r.note += (r.note.empty() ? "" : "; ") + std::string(text);
    }
    if (roles.group) {
        r.plan.checkAcrossProcesses();
        checkSamePlan(*roles.group, r.plan, roles.chief);
    }
    if (!r.config.stages.empty()) {
        std::vector<std::string> names;
        for (const LayerSpec& l : r.spec.layers) names.push_back(l.name);
        StagePlan stages = parseStagePlan(r.config.stages, names);
        const std::vector<Device> devices = stages.devices();
        checkStageDevices(devices, c.stageReplicas, roles.group != nullptr);  // before any data is loaded
        if (stages.balanced) {  // by each layer's seconds at the micro-batch's size (on one thread; on the first GPU)
            auto backend = devices.front().type == DeviceType::Cpu ? makeCpuBackend(1) : makeBackend(devices.front());
            const std::vector<std::pair<int, int>> split =
                balanceStages(measureLayerSeconds(r.spec, *backend, microBatch, 3), stages.count(), atCuts(r.spec));
            if (split.empty())
                throw Error("--stages: " + r.spec.name + " cannot be cut into " + std::to_string(stages.count()) +
                            " stages between its blocks (one tensor crossing each cut)");
            for (size_t s = 0; s < split.size(); ++s) std::tie(stages.stages[s].first, stages.stages[s].last) = split[s];
            stages.balanced = false;
        }
        if (const std::string why = stageCutProblem(r.spec, stages); !why.empty()) throw Error(why);
        r.config.stages = stages.describe(names);
        // Processes: each measured its own layer times; every one runs the chief's split.
        if (roles.group) {
            r.config.stages = roles.group->broadcast(r.config.stages, roles.chief);
            stages = parseStagePlan(r.config.stages, names);
        }
        if (roles.stagePerProcess && stages.count() * c.stageReplicas != roles.count)
            throw Error("--stage-per-process: " + std::to_string(roles.count) + " processes for " +
                        std::to_string(stages.count()) + " stages" +
                        (c.stageReplicas > 1 ? " x " + std::to_string(c.stageReplicas) + " replicas" : std::string()) +
                        "; start one process per stage" + (c.stageReplicas > 1 ? " and replica" : "") + " (mpirun -np " +
                        std::to_string(stages.count() * c.stageReplicas) + ")");
        r.stages = std::move(stages);
    }
    std::string resumePath = folder && folder->resuming() ? folder->resumeCheckpoint() : "";
    // Processes: every process's copy of the variables and optimiser state equals the chief's (or,
    // averaging, its replicas at a round's end), so each restores the chief's checkpoint, whose
    // path the chief sends (the processes share its folder: one machine, or a shared file system).
    // Parameter servers take part too (serveParameters): each reads its shard's state from it.
    if (roles.group) resumePath = roles.group->broadcast(resumePath, roles.chief);
    if (!resumePath.empty()) {
        r.resumeFrom = Checkpoint::open(resumePath);
        if (!r.resumeFrom->note().empty()) r.note += (r.note.empty() ? "" : "; ") + r.resumeFrom->note();
        if (const std::string why = r.resumeFrom->resumeProblem(c, r.spec.json); !why.empty())
            throw Error("--resume: " + why);
        if (c.steps > 0 && r.resumeFrom->meta().step >= c.steps) throw Error(trainedAll(c.steps));
        r.resumedAs = elasticResumeNote(c, roles, r.resumeFrom->meta().processes,
                                        r.stages ? c.batch : r.plan.batchPerTower * r.plan.towerCount() * r.plan.accumulate);
        if (!r.resumedAs.empty()) r.note += (r.note.empty() ? "" : "; ") + r.resumedAs;
    }
    return r;
}

}  // namespace tb
