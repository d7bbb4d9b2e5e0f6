#include "engine/trainer.hpp"

#include <algorithm>
#include <thread>
#include <nlohmann/json.hpp>

#include "engine/observer_hub.hpp"
#include "engine/run_folder.hpp"
#include "engine/step_counting.hpp"
#include "engine/training_run.hpp"
#include "parallel/parameter_server_task.hpp"
#include "util/error.hpp"
#include "util/compute_thread.hpp"

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
    if (skippedImages > 0) j["skipped_images"] = skippedImages;
    j["dropped_reports"] = droppedReports;
    if (processes > 1) j["processes"] = processes;
    if (validationAccuracy >= 0) j["validation_accuracy"] = validationAccuracy;
    if (!evaluated) j["test_accuracy"] = j["test_loss"] = nullptr;
    if (meanStaleness >= 0) j["mean_staleness"] = meanStaleness;
    if (!stages.empty()) {
        j["stages"] = stages;
        j["pipeline"] = pipeline;
        j["micro_batches"] = microBatches;
        j["stage_replicas"] = stageReplicas;
        if (stagePerProcess) j["stage_per_process"] = true;
        j["bubble_fraction"] = bubbleFraction;
        j["stage_activation_bytes"] = stageActivationBytes;
        j["stage_bytes"] = stageBytes;
    }
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

Trainer::Trainer(RunConfig config) : config_(std::move(config)) {}
Trainer::~Trainer() = default;

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

namespace {

// Processes 0 .. P-1 under --ps-tasks P: the servers of the variables' shards. Nothing to report:
// the chief reports the run.
RunSummary serve(const RunConfig& c, const ProcessRoles& roles) {
    ParameterServerSettings s;
    s.model = c.model;
    s.seed = c.seed;
    s.tasks = c.psTasks;
    s.opt = optimizerSettings(c);
    s.async = DeploymentPlan::parseUpdate(c.update, "--update") == UpdateMode::Async;
    s.gradients = parseCommPrecision(c.commPrecision, "--comm-precision");
    if (!c.initFrom.empty())
        s.initFrom = [&c](const Network& net) {
            try {
                return Checkpoint::open(c.initFrom).loadWeights(net);
            } catch (const Error& e) {
                throw Error(std::string("--init-from: ") + e.what());
            }
        };
    struct Saved final : SavedRun {
        Checkpoint from;
        explicit Saved(const std::string& path) : from(Checkpoint::open(path)) {}
        std::vector<float> weights(const Network& layout) const override { return from.loadWeights(layout); }
        void readState(const std::string& name, float* dst, size_t count) const override {
            from.readState(name, dst, count);
        }
    };
    s.openSaved = [](const std::string& path) { return std::make_unique<Saved>(path); };
    int64_t counted = 0;
    serveParameters(*roles.group, roles.chief, s,
                    [&](int towers) { return serverVote(*roles.group, roles.workers, towers, counted); });
    RunSummary served;
    served.processes = roles.count;
    return served;
}

}  // namespace

// A run, as the seeds' train(): its processes' roles, the plan, the data, then the training loop
// and the final evaluation (training_run.hpp says where each part lives).
RunSummary Trainer::execute(ObserverHub& hub) {
    const RunConfig& c = config_;
    c.validate();
    // --threads 0: every core, shared by the processes of this run on this machine.
    const int machineCores = std::max(1, int(std::max(1u, std::thread::hardware_concurrency())) /
                                             (processes_ ? processes_->localSize() : 1));
    const int cores = c.threads > 0 ? c.threads : machineCores;
    enterComputeTeam(cores);  // this thread evaluates and keeps the moving average
    const ProcessRoles roles = ProcessRoles::of(c, processes_);
    if (roles.isServer()) return serve(c, roles);
    RunPlan run = RunPlan::of(c, roles, folder_);  // a resume that cannot be exact is refused before the folder is written
    if (folder_) {
        nlohmann::json plan = run.plan.toJson();
        if (roles.count > 1) plan["processes"] = roles.count;  // a follower's lanes: every worker's towers
        if (run.stages) {  // the split chosen, as --stages takes it (config.json has it too)
            plan["stages"] = run.config.stages;
            plan["pipeline"] = c.pipeline.empty() ? "naive" : c.pipeline;
            plan["micro_batches"] = c.microBatches;
            plan["stage_replicas"] = c.stageReplicas;
            plan["stage_per_process"] = c.stagePerProcess;
        }
        folder_->begin(run.config, run.spec.json, plan);
    }
    hub.onStateChanged(RunState::Loading, c.model + " on " + c.data);
    if (shapeOf(run.spec).params == 0) throw Error("--model: " + run.spec.name + " has no parameters to train");
    DataSplits data;
    try {
        // Loading gives way to a stop at once; processes load to the end, as one that gave up would
        // leave the others in a collective.
        data = loadData(c.data, 0, c.seed, [this] { return !processes_ && control_.stopped(); }, dataOptions(c, run.spec));
    } catch (const Cancelled&) {
        RunSummary stopped;
        stopped.model = run.spec.name;
        stopped.data = c.data;
        stopped.plan = run.plan;
        stopped.stopped = true;
        stopped.evaluated = false;
        hub.onStateChanged(RunState::Stopped, "stopped while loading " + c.data);
        return stopped;
    }
    const int64_t skipped = int64_t(data.skipped.size());
    if (skipped > 0)
        hub.onStateChanged(RunState::Loading, "left out " + std::to_string(skipped) + " unreadable image" +
                                                  (skipped == 1 ? "" : "s") + " (--skip-bad-images), the first: " +
                                                  data.skipped.front());
    TrainingRun training(run, std::move(data), cores, machineCores, hub, control_, folder_, observers_);
    training.train();
    RunSummary summary = training.finish();
    summary.skippedImages = skipped;
    return summary;
}

}  // namespace tb
