#include "engine/scaling_sweep.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <nlohmann/json.hpp>

#include "engine/metrics_file.hpp"
#include "engine/run_folder.hpp"
#include "engine/trainer.hpp"
#include "util/atomic_file.hpp"
#include "nn/model_spec.hpp"
#include "util/error.hpp"
#include "util/json_file.hpp"
#include "util/system_text.hpp"

namespace tb {

namespace fs = std::filesystem;

void SweepSettings::validate() const {
    if (towers.empty()) throw Error("--sweep-towers: needs at least one tower count");
    for (int n : towers)
        if (n < 1 || n > 64) throw Error("--sweep-towers: " + std::to_string(n) + " towers; give 1 to 64");
    if (strategies.empty()) throw Error("--sweep-strategies: needs at least one strategy");
    for (const std::string& s : strategies) {
        RunConfig probe;
        applyStrategy(probe, s);
    }
    if (warmup < 0 || warmup > 100000) throw Error("--sweep-warmup: give 0 to 100000 steps");
    if (measure < 2 || measure > 1000000) throw Error("--sweep-steps: give 2 to 1000000 measured steps");
}

nlohmann::json SweepSettings::toJson() const {
    return {{"towers", towers}, {"strategies", strategies}, {"warmup", warmup}, {"measure", measure}};
}

std::optional<PipelineStrategy> pipelineStrategy(const std::string& s) {
    if (s == "naive") return PipelineStrategy{"naive", 1};
    for (const char* schedule : {"gpipe", "1f1b"}) {
        const std::string prefix = std::string(schedule) + ":";
        if (!s.starts_with(prefix)) continue;
        const std::string m = s.substr(prefix.size());
        if (m.empty() || m.size() > 4 || !std::all_of(m.begin(), m.end(), ::isdigit) || std::stoi(m) < 1)
            throw Error("--sweep-strategies: '" + s + "' needs M from 1 to 9999 micro-batches (" + prefix + "4)");
        return PipelineStrategy{schedule, std::stoi(m)};
    }
    return std::nullopt;
}

void applyStrategy(RunConfig& c, const std::string& s) {
    c.averageEvery = 0;
    c.update = "sync";
    if (const std::optional<PipelineStrategy> p = pipelineStrategy(s)) {
        c.clearTowerStrategy();
        c.pipeline = p->schedule;
        c.microBatches = p->microBatches;
    } else if (s == "mean") {
        c.variables = "cpu";
        c.reduce = "mean";
    } else if (s == "allreduce") {
        c.variables = "replicated";
        c.reduce = "allreduce";
    } else if (s == "async") {
        c.variables = "cpu";
        c.reduce = "mean";
        c.update = "async";
    } else if (s.starts_with("average:")) {
        const std::string k = s.substr(8);
        if (k.empty() || k.size() > 4 || !std::all_of(k.begin(), k.end(), ::isdigit) || std::stoi(k) < 1)
            throw Error("--sweep-strategies: '" + s + "' needs K from 1 to 9999 steps (average:4)");
        c.variables = "replicated";
        c.reduce = "allreduce";
        c.averageEvery = std::stoi(k);
    } else {
        throw Error("--sweep-strategies: unknown strategy '" + s + "' (mean, allreduce, async, average:K, naive, gpipe:M, 1f1b:M)");
    }
}

std::string SweepPoint::label() const {
    if (towers == 1)
        return config.towers.starts_with("gpu") && variablesReplicated(strategy) ? "1 tower, variables on the GPU" : "1 tower";
    return std::to_string(towers) + (pipelineStrategy(strategy) ? " stages, " : " towers, ") + strategy;
}

double speedupOver(const std::vector<SweepResult>& before, const SweepResult& r) {
    // A one-tower point is its place's baseline (a GPU's second one is not "faster" than the first).
    const SweepResult* base = r.point.towers == 1 ? nullptr : oneTowerPointFor(before, r.point.strategy);
    const double one = base ? base->measured.examplesPerSec : r.measured.examplesPerSec;
    return one > 0 ? r.measured.examplesPerSec / one : 0;
}

std::vector<std::string> oneTowerStrategies(const std::vector<std::string>& strategies) {
    std::vector<std::string> single;
    if (!std::all_of(strategies.begin(), strategies.end(), variablesReplicated)) single.push_back("mean");
    if (std::any_of(strategies.begin(), strategies.end(), variablesReplicated)) single.push_back("allreduce");
    return single;
}

const SweepResult* oneTowerPointFor(const std::vector<SweepResult>& results, const std::string& strategy) {
    const SweepResult* first = nullptr;
    for (const SweepResult& r : results) {
        if (r.point.towers != 1) continue;
        if (!first) first = &r;
        if (variablesReplicated(r.point.strategy) == variablesReplicated(strategy)) return &r;
    }
    return first;
}

std::string sweepTowers(const std::string& baseTowers, int n) {
    // The towers' kind from the base's first tower: CPU towers, or one GPU each; a base of towers
    // sharing one GPU ("gpu:0*2") sweeps towers sharing that GPU: what a one-GPU machine can measure.
    const std::string kind = baseTowers.starts_with("gpu") ? "gpu" : "cpu";
    const size_t star = baseTowers.find('*');
    if (kind == "gpu" && star != std::string::npos && baseTowers.find(',') == std::string::npos)
        return baseTowers.substr(0, star) + "*" + std::to_string(n);
    std::string towers;
    for (int i = 0; i < n; ++i) towers += (i ? "," : "") + kind + ":" + std::to_string(i);
    return towers;
}

std::vector<SweepPoint> sweepPoints(const RunConfig& base, const SweepSettings& settings) {
    settings.validate();
    for (const std::string& s : settings.strategies)
        if (pipelineStrategy(s) && base.towers.starts_with("gpu"))
            throw Error("--sweep-strategies: " + s + ": sweeps of pipelines on GPU stages are not built yet; sweep them with CPU towers (a run takes --stages gpu:0*2)");
    const int perTower = base.batchPerTower > 0 ? base.batchPerTower : base.batch;
    std::vector<int> counts = settings.towers;
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    if (counts.front() != 1) counts.insert(counts.begin(), 1);  // speedups need the one-tower point
    // One tower: CPU towers read the variables in place whatever the strategy ("mean"); a GPU
    // tower has two places, the host ("mean") and its GPU ("allreduce"), each measured where a
    // strategy puts the variables there, so that every point's speedup is over its own place.
    const std::vector<std::string> single =
        base.towers.starts_with("gpu") ? oneTowerStrategies(settings.strategies) : std::vector<std::string>{"mean"};
    std::vector<SweepPoint> points;
    for (int n : counts) {
        for (const std::string& s : n == 1 ? single : settings.strategies) {
            SweepPoint p{n, s, base};
            RunConfig& c = p.config;
            if (pipelineStrategy(s)) {  // n stages of CPU devices share the one tower's batch
                applyStrategy(c, s);
                c.stages = std::to_string(n);
                c.stageReplicas = 1;  // one pipeline, as the predictor takes it
                c.batchPerTower = 0;
                c.batch = perTower;
            } else {
                const RunConfig defaults;  // towers, not stages
                c.stages = defaults.stages;
                c.pipeline = defaults.pipeline;
                c.microBatches = defaults.microBatches;
                c.stageReplicas = defaults.stageReplicas;
                c.towers = sweepTowers(base.towers, n);
                applyStrategy(c, s);
                c.batchPerTower = perTower;
                c.batch = std::min(RunConfig::kMaxBatch, n * perTower);
            }
            int64_t warmup = settings.warmup, measure = settings.measure;
            if (s == "async") warmup *= n, measure *= n;
            if (c.averageEvery > 1) {  // whole rounds, so the clock reads a round's end at both ends
                const int64_t k = c.averageEvery;
                warmup = (std::max<int64_t>(warmup, 1) + k - 1) / k * k;
                measure = (measure + k - 1) / k * k;
            }
            p.warmupReports = warmup;
            c.steps = warmup + measure;
            c.evalEvery = 0;
            c.slow.clear();
            c.metrics.clear();
            c.quiet = true;
            c.validate();
            (void)makePlan(c);  // a plan this machine cannot make is refused before any point runs
            if (c.update == "async" && c.emaDecay > 0)  // the trainer refuses it: say so before any point runs
                throw Error("--sweep-strategies: async cannot keep the weights' moving average (--ema-decay " +
                            shortJson(c.emaDecay) + "); set --ema-decay 0 or leave async out");
            points.push_back(std::move(p));
        }
    }
    return points;
}

std::string newSweepFolder(const RunConfig& base) {
    std::string name = findModel(base.model).name;
    std::replace_if(name.begin(), name.end(), [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)) && ch != '_'; }, '-');
    // Claimed by making it (as RunFolder::create does), so two sweeps in one second never share one.
    const std::string stem = RunFolder::runsRoot() + "/" + utcText("%Y%m%d-%H%M%S") + "-sweep-" + name;
    std::error_code ec;
    fs::create_directories(RunFolder::runsRoot(), ec);
    if (ec) throw Error(RunFolder::runsRoot() + ": cannot create the runs folder (" + ec.message() + ")");
    std::string path = stem;
    for (int i = 2; !fs::create_directory(path, ec); ++i) {
        if (ec) throw Error(path + ": cannot create (" + ec.message() + ")");
        path = stem + "-" + std::to_string(i);
    }
    return path;
}

nlohmann::json SweepResult::toJson() const {
    nlohmann::json j = {{"label", point.label()},          {"towers", point.towers},
                        {"strategy", point.strategy},      {"config", point.config.toJson()},
                        {"measured", measured.toJson()},   {"speedup", speedup},
                        {"efficiency", efficiency}};
    j["test_accuracy"] = testAccuracy >= 0 ? nlohmann::json(testAccuracy) : nlohmann::json(nullptr);
    return j;
}

ScalingSweep::ScalingSweep(RunConfig base, SweepSettings settings, std::string folder)
    : base_(std::move(base)), settings_(std::move(settings)), folder_(std::move(folder)), created_(utcText()) {}

ScalingSweep::~ScalingSweep() = default;

void ScalingSweep::stop() {
    stopped_ = true;
    std::lock_guard<std::mutex> lock(mutex_);
    if (current_) current_->requestStop();
}

void ScalingSweep::abort() {
    stopped_ = aborted_ = true;
    std::lock_guard<std::mutex> lock(mutex_);
    if (current_) current_->control().abort();
}

void ScalingSweep::writeFolder(const std::string& state, const std::vector<SweepResult>& results, const std::string& error) {
    if (folder_.empty()) return;
    nlohmann::json run = {{"format", "towerbench-run"}, {"version", 1},           {"kind", "sweep"},
                          {"state", state},             {"pid", int64_t(::getpid())}, {"host", hostName()},
                          {"created", created_},        {"updated", utcText()}};
    if (!error.empty()) run["error"] = error;
    nlohmann::json points = nlohmann::json::array();
    int64_t steps = 0;
    double best = 0;
    for (const SweepResult& r : results) {
        points.push_back(r.toJson());
        steps += r.point.config.steps;
        best = std::max(best, r.measured.examplesPerSec);
    }
    const nlohmann::json sweep = {{"settings", settings_.toJson()},
                                  {"params", params_},
                                  {"cores", int(std::max(1u, std::thread::hardware_concurrency()))},
                                  {"host", {{"flops", host_.flops}, {"bandwidth", host_.bandwidth}}},
                                  {"points", points}};
    writeFileAtomically(folder_ + "/sweep.json", sweep.dump(2) + "\n");
    if (state != "running")
        writeFileAtomically(folder_ + "/summary.json",
                            nlohmann::json{{"steps", steps}, {"examples_per_sec", best}, {"points", results.size()}}.dump(2) + "\n");
    writeFileAtomically(folder_ + "/run.json", run.dump(2) + "\n");
}

std::vector<SweepResult> ScalingSweep::run(const std::function<void(const SweepResult&)>& onPoint) {
    const std::vector<SweepPoint> points = sweepPoints(base_, settings_);
    if (!folder_.empty()) {
        std::error_code ec;
        if (fs::exists(folder_, ec) && !fs::is_empty(folder_, ec))
            throw Error("--run-dir: " + folder_ + " is not empty (a sweep keeps a new folder of its own)");
        fs::create_directories(folder_ + "/points", ec);
        if (ec) throw Error("--run-dir: cannot create " + folder_ + " (" + ec.message() + ")");
        writeFileAtomically(folder_ + "/config.json", base_.toJson().dump(2) + "\n");
    }
    host_ = measureHostCore();
    std::vector<SweepResult> results;
    writeFolder("running", results);
    try {
        for (size_t i = 0; i < points.size() && !stopped_; ++i) {
            SweepResult r;
            r.point = points[i];
            StepProfiler profiler(r.point.warmupReports);
            Trainer trainer(r.point.config);
            trainer.addObserver(&profiler);
            std::unique_ptr<MetricsFile> metrics;
            if (!folder_.empty()) {
                std::string name = r.point.label();
                std::replace_if(name.begin(), name.end(), [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)); }, '-');
                char prefix[24];
                std::snprintf(prefix, sizeof prefix, "%02zu-", i + 1);
                metrics = std::make_unique<MetricsFile>(folder_ + "/points/" + prefix + name + ".jsonl", false, "run folder");
                trainer.addObserver(metrics.get());
            }
            {
                std::lock_guard<std::mutex> lock(mutex_);
                current_ = &trainer;
                if (aborted_) trainer.control().abort();  // asked between the loop's check and now
                else if (stopped_) trainer.requestStop();
            }
            RunSummary summary;
            try {
                summary = trainer.run();
            } catch (...) {
                std::lock_guard<std::mutex> lock(mutex_);
                current_ = nullptr;
                throw;
            }
            {
                std::lock_guard<std::mutex> lock(mutex_);
                current_ = nullptr;
            }
            r.measured = profiler.profile();
            if (r.measured.steps < 2) break;  // stopped within the warm-up: nothing to report
            r.testAccuracy = summary.evaluated ? summary.testAccuracy : -1;
            params_ = summary.params;
            r.speedup = speedupOver(results, r);
            r.efficiency = r.speedup / r.point.towers;
            results.push_back(r);
            writeFolder("running", results);
            if (onPoint) onPoint(results.back());
        }
    } catch (const std::exception& e) {
        // Refused before a point was measured: the folder it made (new or empty before) goes, as
        // a refused run leaves none; else it keeps its points and says why it ended.
        std::error_code ec;
        if (results.empty() && !folder_.empty()) fs::remove_all(folder_, ec);
        else try {
                writeFolder("failed", results, e.what());
            } catch (const std::exception&) {  // the failure being reported may be the folder's own
            }
        throw;
    }
    writeFolder(stopped_ ? "stopped" : "finished", results);
    return results;
}

SweepFile ScalingSweep::readResults(const std::string& folder) {
    const std::string path = folder + "/sweep.json";
    std::ifstream in(path);
    if (!in) throw Error(path + ": cannot read it (is " + folder + " a scaling sweep's folder?)");
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json j = parseJsonOrDiscard(text.str());
    if (!j.is_object() || !j.contains("points") || !j["points"].is_array())
        throw Error(path + ": not a sweep's results (no \"points\" list)");
    auto positive = [&](const nlohmann::json& o, const char* key, double hi) {
        if (!o.is_object() || !o.contains(key) || !o[key].is_number() || !(o[key].get<double>() > 0) || o[key].get<double>() > hi)
            throw Error(path + ": '" + key + "' is missing or not a number from 0 to " + std::to_string(int64_t(hi)));
        return o[key].get<double>();
    };
    SweepFile f;
    f.params = int64_t(positive(j, "params", 1e12));
    if (!j.contains("host")) throw Error(path + ": 'host' is missing");
    f.host.flops = positive(j["host"], "flops", 1e16);
    f.host.bandwidth = positive(j["host"], "bandwidth", 1e14);
    f.cores = int(positive(j, "cores", 1e6));
    if (j.contains("settings") && j["settings"].is_object() && j["settings"].contains("strategies") &&
        j["settings"]["strategies"].is_array()) {
        f.settings.strategies.clear();
        for (const auto& st : j["settings"]["strategies"]) {
            if (!st.is_string()) throw Error(path + ": 'settings.strategies' holds a non-string");
            RunConfig probe;
            applyStrategy(probe, st.get<std::string>());
            f.settings.strategies.push_back(st.get<std::string>());
        }
    }
    for (size_t i = 0; i < j["points"].size(); ++i) {
        const nlohmann::json& p = j["points"][i];
        const std::string where = path + ": point " + std::to_string(i + 1);
        if (!p.is_object() || !p.contains("config") || !p["config"].is_object() || !p.contains("measured") ||
            !p.contains("strategy") || !p["strategy"].is_string() || !p.contains("towers") || !p["towers"].is_number_integer())
            throw Error(where + ": needs towers, strategy, config and measured");
        SweepResult r;
        r.point.towers = p["towers"].get<int>();
        if (r.point.towers < 1 || r.point.towers > 4096) throw Error(where + ": 'towers' must be from 1 to 4096");
        r.point.strategy = p["strategy"].get<std::string>();
        applyStrategy(r.point.config, r.point.strategy);
        for (const auto& [key, value] : p["config"].items()) r.point.config.set(key, value, where + " config");
        r.measured = StepProfile::fromJson(p["measured"], where + " measured");
        // Worked out again from the points, not read: older sweep files carry wrong ones.
        r.speedup = speedupOver(f.points, r);
        r.efficiency = r.speedup / r.point.towers;
        f.points.push_back(std::move(r));
    }
    if (f.points.empty()) throw Error(path + ": no measured points");
    return f;
}

}  // namespace tb
