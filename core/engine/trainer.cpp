#include "engine/trainer.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <memory>
#include <thread>
#include <utility>

#include "backend/backend.hpp"
#include "backend/registry.hpp"
#include "data/dataset.hpp"
#include "data/pipeline.hpp"
#include "nn/model_spec.hpp"
#include "nn/network.hpp"
#include "optim/optimizer.hpp"
#include "parallel/parameter_server_task.hpp"
#include "parallel/tower_set.hpp"
#include "engine/checkpoint.hpp"
#include "engine/decision_grid.hpp"
#include "engine/device_monitor.hpp"
#include "engine/memory_estimate.hpp"
#include "engine/observer_hub.hpp"
#include "engine/run_folder.hpp"
#include "util/error.hpp"
#include "util/float_mode.hpp"

namespace tb {

const char* toString(RunState s) {
    switch (s) {
    case RunState::Loading: return "loading";
    case RunState::Running: return "running";
    case RunState::Evaluating: return "evaluating";
    case RunState::Finished: return "finished";
    case RunState::Stopped: return "stopped";
    case RunState::Failed: return "failed";
    }
    return "?";
}

nlohmann::json RunSummary::toJson() const {
    nlohmann::json towers = nlohmann::json::array();
    for (const Device& d : plan.towers) towers.push_back(d.str());
    nlohmann::json j = {{"steps", steps},
                        {"epochs", epochs},
                        {"examples_per_sec", examplesPerSec},
                        {"steady_examples_per_sec", steadyExamplesPerSec},
                        {"train_seconds", trainSeconds},
                        {"final_loss", finalLoss},
                        {"final_accuracy", finalAccuracy},
                        {"test_loss", testLoss},
                        {"test_accuracy", testAccuracy},
                        {"params", params},
                        {"flops_per_example", flopsPerExample},
                        {"model", model},
                        {"data", data},
                        {"backend", backend},
                        {"precision", precision},
                        {"towers", towers},
                        {"tower_busy", towerBusy},
                        {"reduce_apply_fraction", reduceApplyFraction},
                        {"plan", plan.toJson()},
                        {"stopped", stopped},
                        {"checkpoints", checkpoints},
                        {"checkpoint_seconds", checkpointSeconds},
                        {"checkpoint_write_seconds", checkpointWriteSeconds}};
    if (resumedAt > 0) j["resumed_at"] = resumedAt;
    if (processes > 1) j["processes"] = processes;
    if (validationAccuracy >= 0) j["validation_accuracy"] = validationAccuracy;
    if (!evaluated) j["test_accuracy"] = j["test_loss"] = nullptr;
    if (meanStaleness >= 0) j["mean_staleness"] = meanStaleness;
    const NetworkMemory& m = towerMemory;
    // variables: one copy of the parameters (on the holder, or each replica's own: params_bytes).
    j["memory"] = {{"variables_bytes", params * int64_t(sizeof(float))}, {"params_bytes", m.params},
                   {"grads_bytes", m.grads}, {"activations_bytes", m.activations},
                   {"saved_bytes", m.saved}, {"workspace_bytes", m.workspace},
                   {"optimizer_slot_bytes", optimizerSlotBytes}};
    if (!deviceMemory.empty()) {
        nlohmann::json devices = nlohmann::json::array();
        size_t peak = 0;
        for (const DeviceMemoryUse& d : deviceMemory) {
            devices.push_back({{"device", d.device.str()},
                               {"peak_bytes", d.stats.peakInUseBytes},
                               {"reserved_bytes", d.stats.reservedBytes},
                               {"device_mallocs", d.stats.deviceMallocs}});
            peak = std::max(peak, d.stats.peakInUseBytes);
        }
        j["device_memory"] = devices;
        j["peak_device_bytes"] = peak;
    }
    return j;
}

void checkProcessRoles(const RunConfig& c, int processes) {
    if (c.psTasks > 0 && processes == 1)
        throw Error("--ps-tasks: parameter servers are processes of their own; start the run with mpirun -np N, N "
                    "more than " + std::to_string(c.psTasks));
    if (c.psTasks >= processes)
        throw Error("--ps-tasks: " + std::to_string(c.psTasks) + " parameter-server processes leave no worker among the " +
                    std::to_string(processes) + " processes (mpirun -np must be more than --ps-tasks)");
}

// A loader thread beside one CPU tower has no core of its own: each of its slices stalled the
// tower's OpenMP team at its next barrier (perf at 20 kHz: a quarter of the worker's waits were
// while it ran). Made on the tower's thread instead, mlp bf16 on 2 cores trained at 1.045x the
// examples/sec (7 of 8 alternating pairs); the team converting each batch together gained
// nothing more. GPU towers and several CPU towers keep the loader thread, which their devices'
// work or the towers' waits at the sync point leave room for, as does a spare core. So does a
// tower of more than kMaxSerialTeam threads: the loader takes a smaller share of its cores,
// while a batch made on its thread (CIFAR-10's augmentation included) keeps the rest idle, and
// only 2 cores were measured.
int prefetchFor(const RunConfig& config, const DeploymentPlan& plan, int threads, int machineCores) {
    constexpr int kMaxSerialTeam = 4;
    if (config.prefetch >= 0) return config.prefetch;
    const bool oneCpuTower = plan.towerCount() == 1 && plan.towers[0].type == DeviceType::Cpu;
    return oneCpuTower && threads >= machineCores && threads <= kMaxSerialTeam ? 0 : 2;
}

int chiefProcess(const RunConfig& config, int processes) { return config.psTasks < processes ? config.psTasks : 0; }

int cpuTowerSlots() { return std::max(8, 4 * int(std::max(1u, std::thread::hardware_concurrency()))); }

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
    p.towers = DeploymentPlan::parseTowers(c.towers, int(std::max(1u, std::thread::hardware_concurrency())), gpus,
                                           "--towers");
    DeploymentPlan::parseVariables(c.variables, p, "--variables");
    p.reduce = DeploymentPlan::parseReduce(c.reduce, "--reduce");
    p.update = DeploymentPlan::parseUpdate(c.update, "--update");
    p.averageEvery = c.averageEvery;
    p.psShards = c.psShards;
    p.psTasks = c.psTasks;
    p.slowdown = DeploymentPlan::parseSlowdown(c.slow, p.towerCount(), "--slow");
    p.transfers = DeploymentPlan::parseTransfers(c.transfers, "--transfers");
    p.commPrecision = parseCommPrecision(c.commPrecision, "--comm-precision");
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

namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// How the pipeline shapes a dataset for this run (CIFAR-10: 24x24 crops, standardised), with
// `prefetch` batches made ahead (prefetchFor).
PipelineOptions pipelineFor(const RunConfig& c, bool cifar, bool training, int batch, int prefetch) {
    PipelineOptions o;
    o.batchSize = batch;
    o.shuffle = training;
    o.shuffleBuffer = size_t(c.shuffleBuffer);
    o.repeat = training;
    o.augment = cifar && training;
    o.cropH = o.cropW = cifar ? 24 : 0;
    o.standardize = cifar;
    o.channelsLast = true;  // the engine computes in (n, h, w, c)
    o.prefetch = prefetch;
    o.seed = c.seed;
    return o;
}

// One pass over `data` with the network's current parameters, in batches of net.batch(): the
// loss and accuracy, the confusion counts and, where `images` are given (image sets: the split's
// pixels, shared by its evaluations), each example's prediction. Nothing when `cancelled` says
// so between batches (a stop must not wait for a whole pass).
std::optional<EvalResult> evaluate(Network& net, Stream s, float* stats, const Dataset& data, const RunConfig& c,
                                   bool cifar, int prefetch, const CancelCheck& cancelled,
                                   std::shared_ptr<const std::vector<uint8_t>> images = nullptr) {
    Backend& be = net.backend();
    InputPipeline pipe(data, pipelineFor(c, cifar, false, net.batch(), prefetch));  // in the split's order
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
    be.copyToHost(s, host, stats, sizeof(host));
    be.synchronize(s);
    r.examples = count;
    r.loss = count ? host[0] / double(count) : 0;
    r.accuracy = count ? host[1] / double(count) : 0;
    r.predictions = std::move(p);
    return r;
}

// Processes: every one must run process 0's settings; the first that differs is named.
void checkSameSettings(ProcessGroup& processes, const RunConfig& c) {
    // What only process 0 does (the progress line, the metrics file) may differ.
    nlohmann::json settings = c.toJson();
    for (const char* own : {"quiet", "metrics"}) settings.erase(own);
    const std::string mine = settings.dump();
    const std::string leader = processes.broadcast(mine);
    if (mine == leader) return;
    const nlohmann::json& a = settings;
    const nlohmann::json b = nlohmann::json::parse(leader, nullptr, false);
    std::string key = "settings";
    std::string here, there;
    for (const auto& [k, v] : a.items()) {
        if (!b.is_object() || !b.contains(k) || b[k] != v) {
            key = "--" + k;
            std::replace(key.begin(), key.end(), '_', '-');
            here = v.dump();
            there = b.is_object() && b.contains(k) ? b[k].dump() : "unset";
            break;
        }
    }
    throw Error(key + " is " + here + " here but " + there + " on process 0 (every process of a run must have the same settings)");
}

// Processes: every one must have made the same plan (a plan of --towers auto follows the machine's
// cores): the reductions pair their towers' chunks.
// The text starts with the tower count, which parameter-server processes read (towersOfPlan).
void checkSamePlan(ProcessGroup& processes, const DeploymentPlan& plan, int chief) {
    std::string kinds;  // "cpu", "gpu": the towers' collectives differ by kind
    for (const Device& d : plan.towers)
        kinds += std::string(kinds.empty() ? "" : ",") + (d.type == DeviceType::Cuda ? "gpu" : "cpu");
    const std::string mine = std::to_string(plan.towerCount()) + " towers of " + std::to_string(plan.batchPerTower) +
                             " (" + kinds + ")";
    const std::string leader = processes.broadcast(mine, chief);
    if (mine != leader)
        throw Error("--towers: " + mine + " examples here but " + leader + " on process " + std::to_string(chief) +
                    " (every process must run as many towers; give --towers as a list rather than auto)");
}

// The tower count at the start of checkSamePlan's text.
int towersOfPlan(const std::string& text) {
    int n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || n < 1) throw Error("processes: the chief sent no tower count (\"" + text + "\")");
    return n;
}

OptimizerSettings optimizerSettings(const RunConfig& c) {
    OptimizerSettings opt;
    opt.precision = c.precision == "bf16" ? MatmulPrecision::Bf16 : MatmulPrecision::Fp32;
    opt.rule = parseUpdateRule(c.optimizer, "--optimizer");
    opt.hyper.momentum = float(c.momentum);
    opt.schedule.initial = float(c.lr);
    opt.allowTf32 = c.tf32;
    if (c.lrDecaySteps > 0) {
        opt.schedule.kind = LrSchedule::Kind::Exponential;
        opt.schedule.decaySteps = c.lrDecaySteps;
        opt.schedule.decayRate = float(c.lrDecayRate);
        opt.schedule.staircase = c.lrStaircase;
    }
    return opt;
}

// One tower's metrics as the kTowerReportFloats floats that cross between processes (in a
// process vote, below; relayed by the first server for async workers), and back.
void packTower(const TowerMetrics& x, float* f) {
    const TowerPhases& p = x.phases;
    const double fields[kTowerReportFloats] = {x.loss,   x.accuracy, p.dataWait, p.forward,  p.backward,
                                               p.reduce, p.wait,     p.apply,    p.straggle, x.busyFraction};
    std::copy(fields, fields + kTowerReportFloats, f);
}
TowerMetrics unpackTower(const float* f) {
    TowerMetrics x;
    x.loss = f[0], x.accuracy = f[1], x.busyFraction = f[9];
    x.phases = {f[2], f[3], f[4], f[5], f[6], f[7], f[8]};
    return x;
}

// Processes: the step's loss, accuracy and examples over every process's slice, whether any
// process asked to stop, and every worker process's towers' own metrics (loss, accuracy, phase
// times, busy fraction), so that the chief's report has every tower of every process: the
// timeline's lanes, worker by worker. One collective per step, made by every process in turn:
// a sum in which each process fills its own slots (4 + workers x towers x 10 floats). `worker`:
// this process's index among the workers (-1: a parameter-server process, which fills none);
// `counted`: the group's byte count after the previous vote (the votes' own are not counted); the
// bytes of a call's collectives go to its last step (`lastOfCall`: averaging's round ends there).
bool acrossProcesses(ProcessGroup& processes, StepMetrics& m, bool stopHere, int64_t& counted, int worker, int workers,
                     int towers, bool lastOfCall = true) {
    const int64_t before = processes.bytesMoved();
    m.processBytes = lastOfCall ? before - counted : 0;
    std::vector<float> v(4 + size_t(workers) * size_t(towers) * kTowerReportFloats, 0.f);
    v[0] = float(m.loss * m.examples), v[1] = float(m.accuracy * m.examples), v[2] = float(m.examples);
    v[3] = stopHere ? 1.f : 0.f;
    for (size_t t = 0; worker >= 0 && t < m.towers.size() && t < size_t(towers); ++t)
        packTower(m.towers[t], v.data() + 4 + (size_t(worker) * towers + t) * kTowerReportFloats);
    processes.allReduce(0, v.data(), v.data(), v.size(), ReduceOp::Sum);
    if (v[2] > 0) {
        m.examples = int(std::lround(v[2]));
        m.loss = v[0] / v[2];
        m.accuracy = v[1] / v[2];
        m.examplesPerSec = m.stepSeconds > 0 ? m.examples / m.stepSeconds : 0;
    }
    m.towers.clear();
    for (size_t i = 0; i < size_t(workers) * size_t(towers); ++i)
        m.towers.push_back(unpackTower(v.data() + 4 + i * kTowerReportFloats));
    counted = lastOfCall ? processes.bytesMoved() : counted + (processes.bytesMoved() - before);
    return v[3] > 0;
}

// Async workers of parameter-server processes meet only the servers: this process's towers'
// metrics go with its next push (setTowerReport), and the step line gets every worker's towers as
// the first server last relayed them: each worker's of its previous push, this process's own as
// they are now; a worker not heard from yet shows no loss and no time.
void withEveryWorkersTowers(TowerSet& towers, StepMetrics& m, const std::vector<float>& reports, int worker) {
    const size_t n = m.towers.size();
    std::vector<float> own(n * kTowerReportFloats);
    for (size_t t = 0; t < n; ++t) packTower(m.towers[t], own.data() + t * kTowerReportFloats);
    towers.setTowerReport(own);
    std::vector<TowerMetrics> every;
    for (size_t i = 0; n > 0 && i < reports.size() / kTowerReportFloats; ++i) {
        const float* f = reports.data() + i * kTowerReportFloats;
        if (i / n == size_t(worker)) every.push_back(m.towers[i % n]);
        else if (std::isnan(f[3])) every.push_back({std::nan(""), std::nan(""), {}, 0, true});  // its forward time
        else every.push_back(unpackTower(f)), every.back().relayed = true;
    }
    if (!every.empty()) m.towers = std::move(every);
}

// Processes 0 .. P-1 under --ps-tasks P: the servers of the variables' shards. They make every
// collective the workers make, in the same order: the plan's check, the vote before the first
// step and (sync) each step's vote, in which they count no examples.
void serveParameters(ProcessGroup& processes, const RunConfig& c, int chief) {
    const int towers = towersOfPlan(processes.broadcast(std::string(), chief));  // checkSamePlan's
    const ModelSpec spec = findModel(c.model);
    const std::shared_ptr<Backend> cpu = makeBackend(Device{}, BackendOptions{1});
    Network net(spec, *cpu, 1);  // the variables' layout and initial values, as every tower makes them
    std::vector<float> init = net.initialParams(c.seed);
    if (!c.initFrom.empty()) {
        try {
            init = Checkpoint::open(c.initFrom).loadWeights(net);
        } catch (const Error& e) {
            throw Error(std::string("--init-from: ") + e.what());
        }
    }
    const ShardLayout layout(net, c.psTasks);
    ParameterServerTask task(processes, layout, init, optimizerSettings(c),
                             DeploymentPlan::parseUpdate(c.update, "--update") == UpdateMode::Async, towers,
                             parseCommPrecision(c.commPrecision, "--comm-precision"));
    int64_t counted = 0;
    if (!processes.any(false))
        task.serve([&] {
            StepMetrics none;
            return acrossProcesses(processes, none, false, counted, -1, processes.size() - c.psTasks, towers);
        });
    task.finish();
}

// Step metrics from what the towers report; stepSeconds is the wall time the step took.
StepMetrics toMetrics(const TowerStep& r, double stepSeconds) {
    StepMetrics m;
    m.step = r.update;
    m.lr = r.lr;
    m.stepSeconds = stepSeconds;
    m.bytesMoved = r.bytesMoved;
    m.pusher = r.pusher;
    m.staleness = r.staleness;
    m.averaged = r.averaged;
    double loss = 0, correct = 0;
    int examples = 0;
    for (size_t i = 0; i < r.phases.size(); ++i) {
        TowerMetrics t;
        t.phases = r.phases[i];
        const auto& p = t.phases;
        const double busy = p.forward + p.backward + p.straggle + p.reduce + p.apply;
        t.busyFraction = stepSeconds > 0 ? std::min(1.0, busy / stepSeconds) : 0;
        if (r.examples[i] > 0) {
            t.loss = r.lossSum[i] / r.examples[i] + r.weightDecayLoss;
            t.accuracy = r.correct[i] / r.examples[i];
            loss += r.lossSum[i];
            correct += r.correct[i];
            examples += r.examples[i];
            m.dataWaitSeconds = std::max(m.dataWaitSeconds, p.dataWait);
        } else {
            t.loss = t.accuracy = std::nan("");
        }
        m.towers.push_back(t);
    }
    m.loss = examples ? loss / examples + r.weightDecayLoss : 0;
    m.accuracy = examples ? correct / examples : 0;
    m.computeSeconds = stepSeconds - m.dataWaitSeconds;
    m.examples = examples;
    m.examplesPerSec = stepSeconds > 0 ? examples / stepSeconds : 0;
    return m;
}

}  // namespace

// Bf16 matrix work runs on CPU towers of a processor with bf16 instructions (cpuBf16Missing)
// and on GPUs with bf16 tensor cores (compute capability 8.0 and later).
void checkPrecision(const std::string& precision, const DeploymentPlan& plan, const std::vector<GpuInfo>& gpus) {
    if (precision != "bf16") return;
    for (const Device& d : plan.towers) {
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

Trainer::Trainer(RunConfig config) : config_(std::move(config)) {}
Trainer::~Trainer() = default;

namespace {
// The model takes the data's samples (CIFAR: their 24x24 crops) and has a logit for every label
// of every split (loadData makes numClasses cover them all).
void checkModelFitsData(const ModelSpec& spec, int outputs, const DataSplits& data, const std::string& dataSpec) {
    const Dataset& d = data.train.size() ? data.train : data.test;
    const Dims dataDims = data.cifarAugment ? Dims{d.channels, 24, 24} : Dims{d.channels, d.height, d.width};
    const Dims modelDims{spec.inC, spec.inH, spec.inW};
    if (!(dataDims == modelDims))
        throw Error("--model: " + spec.name + " expects input " + modelDims.str() + " but --data " + dataSpec +
                    " gives " + dataDims.str());
    if (outputs < d.numClasses)
        throw Error("--model: " + spec.name + " has " + std::to_string(outputs) + " outputs but --data " + dataSpec +
                    " has " + std::to_string(d.numClasses) + " classes");
}

std::string trainedAll(int64_t total) {
    return "--resume: the run has trained its " + std::to_string(total) +
           " steps already; give it more with --steps or --epochs";
}
}  // namespace

EvalResult evaluateCheckpoint(const std::string& checkpointPath, const RunConfig& config) {
    const Checkpoint ck = Checkpoint::open(checkpointPath);
    const ModelSpec spec = parseModelSpec(ck.meta().modelSpec, checkpointPath + " (its model)");
    DataSplits data = loadData(config.data, 0, config.seed, {}, config.tfrecordFeatures);
    const int machineCores = int(std::max(1u, std::thread::hardware_concurrency()));
    const int threads = config.threads > 0 ? config.threads : machineCores;
    flushDenormalsInTeam(threads);
    auto be = makeCpuBackend(threads);
    Network net(spec, *be, config.batch);
    checkModelFitsData(spec, net.outputs(), data, config.data);
    if (net.paramInfos().empty()) throw Error(checkpointPath + ": its model " + spec.name + " has no variables");
    std::vector<float> weights = ck.loadWeights(net);
    const bool ema = ck.file().has("ema/" + net.paramInfos().front().name);
    if (ema)  // the run evaluated with its moving average: so does this
        for (size_t i = 0; i < net.paramInfos().size(); ++i)
            ck.file().readFloats("ema/" + net.paramInfos()[i].name, weights.data() + net.paramOffsets()[i],
                                 size_t(net.paramInfos()[i].shape.numel()));
    const Stream s = be->createStream();
    be->copyFromHost(s, net.params(), weights.data(), weights.size() * sizeof(float));
    Tensor stats = be->empty(Shape{3});
    // This thread, as one CPU tower's (a default plan).
    std::optional<EvalResult> r = evaluate(net, s, stats.data(), data.test, config, data.cifarAugment,
                                           prefetchFor(config, DeploymentPlan{}, threads, machineCores),
                                           [] { return false; });
    be->synchronize(s);
    stats = Tensor();
    be->destroyStream(s);
    if (!r) throw Error("eval: the evaluation was cancelled");
    r->step = ck.meta().step;
    r->split = "test";
    r->averagedWeights = ema;
    return *r;
}

void Trainer::setRunFolder(RunFolder* folder) {
    folder_ = folder;
    if (folder) observers_.push_back(folder);
}

RunSummary Trainer::run() {
    ObserverHub hub(observers_);
    try {
        RunSummary sum = execute(hub);
        if (folder_) {
            folder_->waitForCheckpoint();
            sum.checkpointWriteSeconds = folder_->writeSeconds();
            folder_->finish(sum);
        }
        return sum;
    } catch (const std::exception& e) {
        // Every failure ends the run the same way: observers see it, the caller gets it.
        hub.onStateChanged(RunState::Failed, e.what());
        if (folder_) {
            hub.flush();
            folder_->fail(e.what());
        }
        throw;
    }
}

RunSummary Trainer::execute(ObserverHub& hub) {
    const RunConfig& c = config_;
    c.validate();
    // --threads 0: every core, shared by the processes of this run on this machine.
    const int machineCores = std::max(1, int(std::max(1u, std::thread::hardware_concurrency())) /
                                             (processes_ ? processes_->localSize() : 1));
    const int cores = c.threads > 0 ? c.threads : machineCores;
    // This thread evaluates and keeps the moving average: flush denormals here and in its team.
    flushDenormalsInTeam(cores);
    // Processes: every one runs the same settings (checked first, so a mistake names its field),
    // and the global --batch is split over them; each makes its plan for its share.
    const int processCount = processes_ ? processes_->size() : 1;
    if (processes_) checkSameSettings(*processes_, c);
    checkProcessRoles(c, processCount);
    // Processes: the servers (--ps-tasks), then the workers, the first of which is the chief.
    const int workers = processCount - c.psTasks;
    const int chief = chiefProcess(c, processCount);
    const bool leader = !processes_ || processes_->rank() == chief;
    if (processes_ && processes_->rank() < c.psTasks) {
        serveParameters(*processes_, c, chief);
        RunSummary served;
        served.processes = processCount;
        return served;  // nothing to report: the chief reports the run
    }
    RunConfig local = c;
    if (processes_ && c.batchPerTower == 0) {
        if (c.batch % workers != 0)
            throw Error("--batch: " + std::to_string(c.batch) + " examples do not split evenly over the " +
                        std::to_string(workers) + (c.psTasks > 0 ? " worker processes" : " processes"));
        local.batch = c.batch / workers;
    }
    const DeploymentPlan plan = makePlan(local);
    if (processes_) {
        plan.checkAcrossProcesses();
        checkSamePlan(*processes_, plan, chief);
    }
    const ModelSpec spec = findModel(c.model);
    // A resume that cannot be exact is refused before anything is written to the run's folder.
    std::string resumePath = folder_ && folder_->resuming() ? folder_->resumeCheckpoint() : "";
    // Processes: every process's copy of the variables and optimiser state equals the chief's (or,
    // averaging, its replicas at a round's end), so each restores the chief's checkpoint, whose
    // path the chief sends (the processes share its folder: one machine, or a shared file system).
    if (processes_ && c.psTasks == 0) resumePath = processes_->broadcast(resumePath, chief);
    const bool resuming = !resumePath.empty();
    std::optional<Checkpoint> resumeFrom;
    if (resuming) {
        resumeFrom = Checkpoint::open(resumePath);
        if (const std::string why = resumeFrom->resumeProblem(c, spec.json); !why.empty()) throw Error("--resume: " + why);
        if (c.steps > 0 && resumeFrom->meta().step >= c.steps) throw Error(trainedAll(c.steps));
    }
    if (folder_) {
        nlohmann::json planJson = plan.toJson();
        if (processCount > 1) planJson["processes"] = processCount;  // a follower's lanes: every worker's towers
        folder_->begin(c, spec.json, planJson);
    }
    hub.onStateChanged(RunState::Loading, c.model + " on " + c.data);

    const ModelShape shape = shapeOf(spec);
    if (shape.params == 0) throw Error("--model: " + spec.name + " has no parameters to train");
    // Loading gives way to a stop or an abort at once (the run ends with no steps).
    DataSplits data;
    try {
        // Processes load to the end: one that gave up would leave the others in a collective.
        data = loadData(c.data, 0, c.seed, [this] { return !processes_ && control_.stopped(); }, c.tfrecordFeatures);
    } catch (const Cancelled&) {
        RunSummary stopped;
        stopped.model = spec.name;
        stopped.data = c.data;
        stopped.plan = plan;
        stopped.stopped = true;
        stopped.evaluated = false;
        hub.onStateChanged(RunState::Stopped, "stopped while loading " + c.data);
        return stopped;
    }
    int64_t validation = c.validation;
    if (validation < 0) validation = std::min<int64_t>(5000, int64_t(data.train.size()) / 10);
    if (validation >= int64_t(data.train.size()))
        throw Error("--validation: " + std::to_string(validation) + " samples leave none of the " +
                    std::to_string(data.train.size()) + " training samples");
    if (validation > 0) data.validation = splitTail(data.train, size_t(validation), data.train.name + " validation");
    const bool cifar = data.cifarAugment;
    checkModelFitsData(spec, shape.outputs, data, c.data);
    // A step that takes more examples than the training set holds would repeat examples within
    // one batch: a mistake in the sizes, not a larger batch.
    if (const int64_t global = int64_t(workers) * plan.towerCount() * plan.batchPerTower;
        global > int64_t(data.train.size()))
        throw Error("--batch: " + std::to_string(global) + " examples per step, but the training set has only " +
                    std::to_string(data.train.size()) +
                    (validation > 0 ? " (after " + std::to_string(validation) + " held out for validation)" : std::string()));
    if (plan.update == UpdateMode::Async && c.emaDecay > 0)
        throw Error("--ema-decay: the moving average needs synchronous updates (--update sync)");
    checkPrecision(c.precision, plan, gpuRuntime().gpus);
    // async: towers of this process push alone. psAsync: workers of parameter-server processes
    // push alone, each with its towers in step (one push per step of the worker).
    const bool psAsync = c.psTasks > 0 && plan.update == UpdateMode::Async;
    const bool async = plan.update == UpdateMode::Async && !psAsync;

    const OptimizerSettings opt = optimizerSettings(c);
    const int n = plan.towerCount();
    // Before allocating anything: the run must fit in host memory and on each GPU.
    {
        size_t dataBytes = 0;
        for (const Dataset* d : {&data.train, &data.validation, &data.test})
            dataBytes += d->pixels.size() + d->features.size() * sizeof(float) + d->labels.size() * sizeof(int32_t);
        const int slots = opt.rule == UpdateRule::Adam ? 2 : opt.rule == UpdateRule::Sgd ? 0 : 1;
        checkMemoryFits(estimateRunMemory(spec, plan, plan.batchPerTower, slots, c.emaDecay > 0, dataBytes, opt.precision),
                        [](const Device& d) {
                            return d.type == DeviceType::Cpu ? hostMemoryAvailable()
                                                             : makeBackend(d)->memoryInfo().freeBytes;
                        },
                        "--model " + spec.name);
    }
    TowerSet towers(spec, plan, opt, std::max(1, cores / n), c.seed, processes_);
    const int prefetch = prefetchFor(c, plan, cores, machineCores);
    Network& net = towers.evalNetwork();
    Backend& be = net.backend();
    const Stream s = towers.evalStream();
    const size_t count = size_t(net.paramCount());
    if (!c.initFrom.empty() && !resuming) {  // another run's weights, any plan
        std::vector<float> weights;
        try {
            weights = Checkpoint::open(c.initFrom).loadWeights(net);
        } catch (const Error& e) {
            throw Error(std::string("--init-from: ") + e.what());
        }
        towers.setVariables(weights.data());
    }
    // The moving average follows the variables where they live (the holder's copy; averaging:
    // the replicas' mean).
    std::unique_ptr<WeightEma> ema;
    Stream emaStream = nullptr;
    if (c.emaDecay > 0) {
        const VariablesView vars = towers.variables();
        ema = std::make_unique<WeightEma>(*vars.backend, float(c.emaDecay), vars.params, count, vars.stream);
        emaStream = vars.stream;
    }
    // A resumed run: every buffer of the training state as the checkpoint has it; the step
    // count, the input's position and the counter-based dropout follow from its step.
    int64_t resumeStep = 0;
    double bestValidation = -1;
    if (resumeFrom) {
        resumeFrom->restore(towers, net, ema.get(), emaStream);
        resumeStep = resumeFrom->meta().step;
        bestValidation = resumeFrom->meta().bestValidationAccuracy;
        // A crash can leave a best.safetensors newer than the checkpoint resumed from (from an
        // evaluation after it): that model still counts, and only a better one replaces it.
        if (folder_) bestValidation = std::max(bestValidation, folder_->bestCheckpointAccuracy());
        resumeFrom.reset();  // its bytes are in the towers now
    }
    Tensor stats = be.empty(Shape{3});
    Tensor backup;  // the live weights while evaluating with the moving average
    if (ema) backup = be.empty(Shape{int64_t(count)});

    double evalSeconds = 0;
    // Image sets: each split's pixels in one shared copy, for the predictions of its evaluations.
    std::map<const Dataset*, std::shared_ptr<const std::vector<uint8_t>>> evalImages;
    auto imagesOf = [&](const Dataset& d) -> std::shared_ptr<const std::vector<uint8_t>> {
        if (!d.isImage()) return nullptr;
        auto& shared = evalImages[&d];
        if (!shared) shared = std::make_shared<const std::vector<uint8_t>>(d.pixels);
        return shared;
    };
    // A pass over a split; nothing (and nothing reported) when `cancelled` cuts it short.
    auto evalWith = [&](const Dataset& d, const std::string& split, int64_t step,
                        const CancelCheck& cancelled) -> std::optional<EvalResult> {
        if (!leader) return std::nullopt;  // the chief evaluates for all (the variables are equal)
        const auto e0 = Clock::now();
        Network& en = towers.evalNetwork();
        if (ema) {
            be.copy(s, backup.data(), en.params(), count * sizeof(float));
            be.copy(s, en.params(), ema->shadow(), count * sizeof(float));
        }
        std::optional<EvalResult> r = evaluate(en, s, stats.data(), d, c, cifar, prefetch, cancelled, imagesOf(d));
        if (ema) {
            be.copy(s, en.params(), backup.data(), count * sizeof(float));
            be.synchronize(s);
        }
        evalSeconds += seconds(e0, Clock::now());
        if (!r) return r;
        r->step = step;
        r->split = split;
        r->averagedWeights = bool(ema);
        hub.onEval(*r);
        return r;
    };
    // Periodic evaluations give way to a stop; the final one only to an abort (the user leaving,
    // or a second stop in the window), so a stopped run still reports its test accuracy.
    const CancelCheck stopped = [this] { return control_.stopped(); };
    const CancelCheck aborted = [this] { return control_.aborted(); };

    RunSummary sum;
    sum.model = spec.name;
    sum.data = c.data;
    sum.backend = towers.backendName();
    sum.precision = c.precision;
    sum.params = net.paramCount();
    sum.flopsPerExample = net.trainFlopsPerExample();
    sum.plan = plan;
    sum.processes = processCount;
    sum.resumedAt = resumeStep;
    // This process's examples per step (async: per push), and the examples of one of the run's
    // steps, which epochs count: every worker's together, or (async workers of parameter-server
    // processes, whose steps are the servers' updates) one worker's.
    const int perStep = async ? plan.batchPerTower : n * plan.batchPerTower;
    const int64_t globalPerStep = psAsync ? perStep : int64_t(perStep) * workers;
    const int64_t total = c.steps > 0 ? c.steps
                                      : std::max<int64_t>(1, int64_t(std::ceil(c.epochs * double(data.train.size()) /
                                                                                 double(globalPerStep))));
    if (resumeStep >= total) throw Error(trainedAll(total));
    PipelineOptions trainInput = pipelineFor(c, cifar, true, perStep, prefetch);
    trainInput.skipSamples = uint64_t(resumeStep) * uint64_t(globalPerStep);  // every step takes globalPerStep samples
    if (processes_) trainInput.sliceIndex = processes_->rank() - c.psTasks, trainInput.sliceCount = workers;
    towers.setRunLength(total);
    InputPipeline train(data.train, trainInput);
    // GPU telemetry while training; runs without a GPU tower never touch NVML. NVML starts up
    // here, before the training clock does, so its start-up is not counted as training time.
    std::string noTelemetry;
    std::unique_ptr<TelemetrySource> nvml;
    if (std::any_of(plan.towers.begin(), plan.towers.end(), [](const Device& d) { return d.type == DeviceType::Cuda; })) {
        nvml = makeNvmlSource(&noTelemetry);
        if (!nvml) noTelemetry = "; no GPU telemetry: " + noTelemetry;
    }
    hub.onStateChanged(RunState::Running, plan.describe() + "; " + towers.backendName() + noTelemetry);

    // --- decision grids for the window's boundary view (2-D data, when an observer asks) -------
    const std::unique_ptr<DecisionGridProbe> grids =
        DecisionGridProbe::make(observers_, spec, data.train, total, plan.averaging());
    // ---------------------------------------------------------------------------------------------
    std::deque<std::pair<double, double>> recent;  // (loss, accuracy) of the last steps
    std::vector<double> busy(size_t(n), 0.0);
    // Towers relayed from other processes (async parameter servers): their busy fractions as
    // sampled at this process's steps, weighted by the step's time (a slower worker's report
    // repeats, a faster one's pushes between two of ours are not seen: a time average, not a sum).
    std::vector<double> relayedBusy(size_t(n), 0.0), relayedTime(size_t(n), 0.0);
    double reduceApply = 0, stepTime = 0, staleness = 0;
    int64_t stalenessCount = 0;
    int64_t firstRecorded = -1;  // the step of the first report (async workers of servers: others' updates before it)
    int64_t step = resumeStep;
    const int64_t firstStep = resumeStep;
    const auto start = Clock::now();
    // Samples on the clock of StepMetrics::elapsedSeconds; declared after the hub, so it stops first.
    std::unique_ptr<DeviceMonitor> monitor;
    if (nvml)
        monitor = std::make_unique<DeviceMonitor>(
            std::move(nvml), [&hub](const std::vector<DeviceSample>& d) { hub.onDeviceSamples(d); },
            DeviceMonitor::kDefaultInterval, start);
    auto afterFirst = start;
    double heldBeforeSecond = 0;
    auto record = [&](StepMetrics& m) {
        const auto now = Clock::now();
        m.totalSteps = total;
        m.epoch = double(m.step) * double(globalPerStep) / double(data.train.size());
        m.elapsedSeconds = seconds(start, now) - control_.heldSeconds();  // pauses and slow motion are not training
        if (!std::isfinite(m.loss))
            throw Error(m.step == 1
                            ? "--model " + spec.name + ": the loss is " + std::to_string(m.loss) +
                                  " at the first step, before any update: the model's initial weights or layer "
                                  "settings give non-finite outputs"
                            : "training diverged at step " + std::to_string(m.step) + " (loss is " +
                                  std::to_string(m.loss) + "); lower --lr");
        recent.emplace_back(m.loss, m.accuracy);
        if (recent.size() > 50) recent.pop_front();
        double worst = 0;
        for (auto* v : {&busy, &relayedBusy, &relayedTime})  // processes: every worker's towers
            v->resize(std::max(v->size(), m.towers.size()), 0.0);
        for (size_t i = 0; i < m.towers.size(); ++i) {
            const TowerMetrics& t = m.towers[i];
            if (t.relayed) {
                if (t.phases.forward > 0) {  // heard from
                    relayedBusy[i] += t.busyFraction * m.stepSeconds;
                    relayedTime[i] += m.stepSeconds;
                }
                continue;
            }
            const auto& p = t.phases;
            busy[i] += p.forward + p.backward + p.straggle + p.reduce + p.apply;
            worst = std::max(worst, p.reduce + p.apply);
        }
        reduceApply += worst;
        stepTime += m.stepSeconds;
        if (m.staleness >= 0) staleness += double(m.staleness), ++stalenessCount;
        if (firstRecorded < 0) {
            firstRecorded = m.step;
            afterFirst = now;
            heldBeforeSecond = control_.heldSeconds();
        }
        hub.onStepEnd(m);
        if (grids) grids->after(m, towers, hub);  // after the step's report, as the window draws them
        if (std::string e = hub.error(); !e.empty()) throw Error(e);  // e.g. the metrics file
    };

    // --- checkpoints: every N steps or M minutes, the best validation, and at the end ---------
    int64_t lastCheckpoint = step;
    auto lastCheckpointAt = start;
    double periodicCheckpointSeconds = 0;
    double lastValidation = bestValidation;
    auto checkpoint = [&](bool best) {
        const auto t0 = Clock::now();
        CheckpointMeta meta;
        meta.step = step;
        meta.samples = uint64_t(step) * uint64_t(globalPerStep);
        meta.model = spec.name;
        meta.modelSpec = spec.json;
        meta.config = c.toJson();
        meta.plan = plan.toJson();
        meta.validationAccuracy = lastValidation;
        meta.bestValidationAccuracy = std::max(bestValidation, best ? lastValidation : -1.0);
        // Every step line up to here reaches the folder's files first (a resume keeps the lines
        // up to its checkpoint and writes none of them again). The training waits for the
        // snapshot (and for the previous write, if still going); the file is written while it
        // trains on.
        hub.flush();
        folder_->waitForCheckpoint();  // one snapshot in memory at a time
        TrainingSnapshot snap;  // async: the other towers wait at their next push meanwhile
        towers.withUpdatesHeld([&] { snap = takeSnapshot(towers, count, ema.get(), emaStream); });
        folder_->checkpoint(meta, std::move(snap), VariableLayout::of(net), best);
        lastCheckpoint = step;
        lastCheckpointAt = Clock::now();
        ++sum.checkpoints;
        const double took = seconds(t0, lastCheckpointAt);
        sum.checkpointSeconds += took;
        return took;
    };
    auto checkpointDue = [&] {
        if (!folder_ || step == lastCheckpoint) return false;
        return (c.checkpointEvery > 0 && step - lastCheckpoint >= c.checkpointEvery) ||
               (c.checkpointMinutes > 0 && seconds(lastCheckpointAt, Clock::now()) >= 60 * c.checkpointMinutes);
    };

    if (!async) {
        // One step at a time; averaging: the local steps up to the next average in one call, so
        // the replicas run them without meeting (fewer where the run is paused or stopped).
        std::vector<Batch> round(plan.averaging() ? size_t(plan.averageEvery) : 1);
        std::vector<const Batch*> batches;
        // The first batch of the next call, taken before this call so that the towers move it to
        // their devices while they compute (a stop leaves it unused: a resume counts steps).
        Batch ahead;
        bool haveAhead = false;
        auto roundGoesOn = [&](size_t k) {
            const int64_t next = step + int64_t(k);
            // Processes run whole rounds (their rounds' all-reduces pair up); the votes after it stop them.
            return plan.averaging() && k < round.size() && next % plan.averageEvery != 0 && next < total &&
                   (processes_ || (!control_.paused() && control_.awaitStep()));
        };
        // Processes stop together: each step ends with every process's vote (acrossProcesses),
        // and only the vote's outcome ends the loop, so no process is left in a collective.
        // Async workers of parameter-server processes meet no one but the servers: a stop goes
        // with their next push, and the servers' answer `last` ends each of them.
        bool votedStop = processes_ && processes_->any(control_.stopped());  // a stop before the first step
        int64_t processBytes = 0;
        while (step < total && (processes_ ? !votedStop : control_.awaitStep())) {
            if (psAsync && control_.stopped()) towers.askToStop();
            const auto t0 = Clock::now();
            batches.clear();
            do {
                Batch& b = round[batches.size()];
                if (haveAhead) std::swap(b, ahead);
                else train.next(b);
                haveAhead = false;
                batches.push_back(&b);
            } while (roundGoesOn(batches.size()));
            haveAhead = step + int64_t(batches.size()) < total;
            if (haveAhead) train.next(ahead);
            const double wait = seconds(t0, Clock::now());
            const std::vector<TowerStep> rs = towers.steps(batches, step, wait, haveAhead ? &ahead : nullptr);
            const double each = seconds(t0, Clock::now()) / double(rs.size());  // local steps share the wall time
            bool evalDue = false;
            const bool firstCall = firstRecorded < 0;
            for (const TowerStep& r : rs) {
                if (ema) {  // averaging: the mean of the replicas as they are after this call's steps
                    const VariablesView v = towers.variables();
                    ema->update(v.stream, v.params, step);
                    v.backend->synchronize(v.stream);
                }
                StepMetrics m = toMetrics(r, each);
                const int64_t before = step;
                if (psAsync) {
                    votedStop = r.last;
                    if (!r.applied) {  // pushed after the run's last update: not part of it
                        step = r.update;
                        break;
                    }
                    m.processBytes = processes_->bytesMoved() - processBytes;
                    processBytes = processes_->bytesMoved();
                    withEveryWorkersTowers(towers, m, r.towerReports, processes_->rank() - c.psTasks);
                    // The run's examples/sec: every worker's updates since this one's previous push.
                    m.examplesPerSec = m.stepSeconds > 0 ? double(r.update - step) * perStep / m.stepSeconds : 0;
                    step = r.update;
                } else {
                    if (processes_)
                        votedStop = acrossProcesses(*processes_, m, control_.stopped(), processBytes,
                                                    processes_->rank() - c.psTasks, workers, n, &r == &rs.back()) ||
                                    votedStop;
                    ++step;
                }
                record(m);
                // From each multiple of K on (async workers of servers count every worker's updates).
                evalDue |= c.evalEvery > 0 && step / c.evalEvery > before / c.evalEvery && step < total;
            }
            // The steady clock starts after the first call (averaging: its K local steps ran before
            // their reports), from its last step.
            if (firstCall && firstRecorded >= 0) {
                firstRecorded = step;
                afterFirst = Clock::now();
                heldBeforeSecond = control_.heldSeconds();
            }
            bool best = false;
            if (evalDue) {
                const std::optional<EvalResult> r = evalWith(data.validation.size() ? data.validation : data.test,
                                                             data.validation.size() ? "validation" : "test", step, stopped);
                if (r && data.validation.size()) {
                    lastValidation = r->accuracy;
                    best = folder_ && r->accuracy > bestValidation;
                    bestValidation = std::max(bestValidation, r->accuracy);
                }
            }
            // Between calls the replicas are idle (averaging: at a round's end, a multiple of K
            // unless a pause cut the round), so the state is whole.
            if (best || checkpointDue()) periodicCheckpointSeconds += checkpoint(best);
        }
    } else {
        // Each report is one tower's update. Its step time is that tower's own cycle (since its
        // previous push), against which its busy fraction is measured; the loss and accuracy
        // shown are the means of every tower's latest push; examples/sec counts the examples
        // pushed over the last second of wall time (per push it would spike to millions).
        std::vector<Clock::time_point> lastPush(size_t(n), start);
        std::vector<double> latestLoss(size_t(n), std::nan("")), latestAccuracy(size_t(n), std::nan(""));
        std::deque<std::pair<Clock::time_point, int>> window;  // (when, examples) of recent pushes
        control_.setParticipants(n);  // the run is held when every tower waits
        int64_t nextEval = c.evalEvery;  // the first update from which tower 0 evaluates
        towers.runAsync(
            total, [&](Batch& b) { train.next(b); }, control_,
            [&](const TowerStep& r) {
                const auto now = Clock::now();
                const size_t i = size_t(r.pusher);
                StepMetrics m = toMetrics(r, seconds(lastPush[i], now));
                lastPush[i] = now;
                latestLoss[i] = m.towers[i].loss;
                latestAccuracy[i] = m.towers[i].accuracy;
                double loss = 0, accuracy = 0, pushed = 0;
                for (size_t j = 0; j < latestLoss.size(); ++j)
                    if (std::isfinite(latestLoss[j])) {
                        loss += latestLoss[j];
                        accuracy += latestAccuracy[j];
                        ++pushed;
                    }
                m.loss = loss / pushed;
                m.accuracy = accuracy / pushed;
                window.emplace_back(now, r.examples[i]);
                while (window.size() > 2 && seconds(window.front().first, now) > 1.0) window.pop_front();
                double examples = 0;
                for (size_t k = 1; k < window.size(); ++k) examples += window[k].second;
                m.examplesPerSec = window.size() > 1 ? examples / seconds(window.front().first, now) : m.examplesPerSec;
                step = std::max(step, r.update);  // reports of concurrent pushes may arrive out of order
                record(m);
                // On this tower's thread, reports serialised: the others run on until their next
                // push. The snapshot holds every update reported so far, and those of towers
                // whose pushes completed but whose reports wait behind this one (at most
                // towers - 1 more than its step says).
                if (checkpointDue()) periodicCheckpointSeconds += checkpoint(false);
                // --eval-every: at tower 0's first report from each multiple on. Its thread is
                // between its push and its next pull, so its replica can take the holder's
                // variables for the pass; the other towers' pushes wait meanwhile, so the pass
                // sees one version of the variables and none of training hides in its time.
                if (c.evalEvery > 0 && r.pusher == 0 && step >= nextEval && step < total) {
                    towers.withUpdatesHeld([&] {
                        const std::optional<EvalResult> e =
                            evalWith(data.validation.size() ? data.validation : data.test,
                                     data.validation.size() ? "validation" : "test", step, stopped);
                        if (e && data.validation.size()) lastValidation = e->accuracy;
                    });
                    nextEval = (step / c.evalEvery + 1) * c.evalEvery;
                }
            });
    }
    // Averaging across processes: a last round cut short by the run's length left each process's
    // replicas apart; every process averages them with all the others' before the chief evaluates.
    if (processes_ && plan.averaging() && step % plan.averageEvery != 0) towers.averageNow();
    // Parameter-server processes: the chief receives the final variables, and with them the
    // servers' count of updates (async: others may have pushed after its last push).
    if (const std::optional<int64_t> updates = towers.endTraining(); updates && psAsync) step = *updates;
    const auto end = Clock::now();
    const double held = control_.heldSeconds();
    sum.trainSeconds = seconds(start, end) - evalSeconds - held - periodicCheckpointSeconds;
    const double steadySeconds =
        seconds(afterFirst, end) - evalSeconds - (held - heldBeforeSecond) - periodicCheckpointSeconds;
    sum.steps = step;
    sum.stopped = step < total;
    sum.epochs = double(step) * double(globalPerStep) / double(data.train.size());
    const int64_t trained = step - firstStep;  // this session's steps (a resumed run's, since the checkpoint)
    sum.examplesPerSec = sum.trainSeconds > 0 ? double(trained) * double(globalPerStep) / sum.trainSeconds : 0;
    if (firstRecorded >= 0 && step > firstRecorded && steadySeconds > 0)
        sum.steadyExamplesPerSec = double(step - firstRecorded) * double(globalPerStep) / steadySeconds;
    for (size_t i = 0; i < busy.size(); ++i)
        sum.towerBusy.push_back(relayedTime[i] > 0   ? std::min(1.0, relayedBusy[i] / relayedTime[i])
                                : sum.trainSeconds > 0 ? std::min(1.0, busy[i] / sum.trainSeconds)
                                                       : 0);
    sum.reduceApplyFraction = stepTime > 0 ? reduceApply / stepTime : 0;
    if (stalenessCount > 0) sum.meanStaleness = staleness / double(stalenessCount);
    for (auto& [l, a] : recent) {
        sum.finalLoss += l / double(recent.size());
        sum.finalAccuracy += a / double(recent.size());
    }
    sum.towerMemory = net.memoryUse();
    sum.optimizerSlotBytes = towers.optimizerSlotBytes();
    sum.evaluated = false;
    if (!control_.aborted()) {
        hub.onStateChanged(RunState::Evaluating, data.validation.size() ? "validation and test sets" : "test set");
        std::optional<EvalResult> validation;
        if (data.validation.size()) validation = evalWith(data.validation, "validation", step, aborted);
        const std::optional<EvalResult> test =
            data.validation.size() && !validation ? std::nullopt : evalWith(data.test, "test", step, aborted);
        if (test) {
            if (validation) sum.validationAccuracy = validation->accuracy;
            sum.testAccuracy = test->accuracy;
            sum.testLoss = test->loss;
            sum.evaluated = true;
        }
    }
    // The final checkpoint, after the final evaluation so it carries its validation accuracy
    // (and becomes the best where that beat every earlier one).
    const bool finalIsBest = sum.evaluated && sum.validationAccuracy > bestValidation;
    if (folder_ && (step > lastCheckpoint || finalIsBest)) {  // also where a periodic one fell on the last step
        if (sum.evaluated && sum.validationAccuracy >= 0) lastValidation = sum.validationAccuracy;
        checkpoint(finalIsBest);
    }
    monitor.reset();  // no samples after the final state
    sum.deviceMemory = towers.deviceMemory();
    hub.flush();
    if (std::string e = hub.error(); !e.empty()) throw Error(e);
    hub.onStateChanged(sum.stopped ? RunState::Stopped : RunState::Finished, "");
    return sum;
}

}  // namespace tb
