// ScalingSweep: "why is my multi-tower run not N times faster?", measured. Short runs of one
// model on one data set over a grid of tower counts x strategies, each with a warm-up left out
// of its measurement (StepProfile), giving examples/sec, speedup over one tower, scaling
// efficiency and where a step's time goes. Batch per tower stays fixed (weak scaling, as the
// seeds' multi-GPU training does): N towers train N times the examples per step.
//
// A sweep keeps a folder of its own, listed among the runs (RunIndex reads its kind):
//   run.json      {"format":"towerbench-run","kind":"sweep","state":"running"|"finished"|"stopped"|"failed",...}
//   config.json   the base settings (RunConfig JSON)
//   sweep.json    {"settings":{...},"params":P,"host":{"flops","bandwidth"} (one core, measured first),"points":[{"label","towers","strategy","config","measured":StepProfile,
//                  "speedup","efficiency","test_accuracy"}, ...]}, rewritten after every point
//   summary.json  {"steps","examples_per_sec" (the best point's),"points"}
//   points/NN-LABEL.jsonl   each point's metrics (engine/metrics_file.hpp)
#pragma once
#include <atomic>
#include <mutex>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/step_profile.hpp"
#include "engine/step_time_model.hpp"
#include "io/run_config.hpp"

namespace tb {

class Trainer;

struct SweepSettings {
    std::vector<int> towers = {1, 2};
    // mean (variables on the CPU, the seeds' default), allreduce (replicated), async
    // (parameter server), average:K (replicated, averaged every K steps); model parallelism:
    // naive, gpipe:M, 1f1b:M (N stages of CPU devices, the batch of one tower cut into M).
    std::vector<std::string> strategies = {"mean", "allreduce", "async", "average:4"};
    int64_t warmup = 5, measure = 30;  // steps per point: left out, then measured
    void validate() const;             // throws tb::Error naming the flag (--sweep-towers, ...)
    nlohmann::json toJson() const;
};

struct SweepPoint {
    int towers = 1;
    // As in SweepSettings. One-tower points: "mean" (CPU towers: all strategies agree); GPU
    // towers also "allreduce" (the variables on the GPU) where a strategy keeps them there.
    std::string strategy;
    RunConfig config;
    // Reports left out before measuring. Async reports are one tower's update each, so async
    // points warm up (and measure) N times as many; averaging points whole rounds of K, whose
    // reports share one clock reading.
    int64_t warmupReports = 0;
    std::string label() const;  // "2 towers, allreduce"
};

struct SweepResult {
    SweepPoint point;
    StepProfile measured;
    double speedup = 0;      // examples/sec over the one-tower point's of the same variables place
    double efficiency = 0;   // speedup / towers
    double testAccuracy = -1;
    nlohmann::json toJson() const;
};

// A point's speedup over the one-tower point of its place among the points measured `before`
// (1 for a one-tower point).
double speedupOver(const std::vector<SweepResult>& before, const SweepResult& r);
// One GPU tower's places among `strategies`: "mean" (variables on the host) where one keeps them
// there, "allreduce" (on the GPU) where one replicates them.
std::vector<std::string> oneTowerStrategies(const std::vector<std::string>& strategies);
// The one-tower point a point of `strategy` is compared with: the one whose variables are in the
// same place (host or devices), else the first; null when there is none yet.
const SweepResult* oneTowerPointFor(const std::vector<SweepResult>& results, const std::string& strategy);
// The --towers of a point of n towers: cpu:0,...; gpu:0,gpu:1,... one GPU each; or, where the
// base's towers share one GPU ("gpu:0*2"), n towers sharing it ("gpu:0*n").
std::string sweepTowers(const std::string& baseTowers, int n);
// The points of a sweep: one tower once, then every other tower count with every strategy.
// Throws tb::Error where the base settings cannot make them (e.g. GPU towers beyond the GPUs).
std::vector<SweepPoint> sweepPoints(const RunConfig& base, const SweepSettings& settings);
// A new sweep folder under the runs folder, made (empty) and returned: "20261126-143000-sweep-mnist_cnn".
std::string newSweepFolder(const RunConfig& base);
// A strategy name as the flag --sweep-strategies takes it applied to a config. The pipeline
// strategies (naive, gpipe:M, 1f1b:M) set the schedule only: their N "towers" are N stages
// (sweepPoints sets --stages N and keeps the one-tower batch).
void applyStrategy(RunConfig& c, const std::string& strategy);
// naive, gpipe:M or 1f1b:M as a schedule and its micro-batches; nullopt for the data-parallel
// strategies. Throws tb::Error naming --sweep-strategies where M is malformed.
struct PipelineStrategy {
    std::string schedule;  // naive | gpipe | 1f1b
    int microBatches = 1;
};
std::optional<PipelineStrategy> pipelineStrategy(const std::string& strategy);

// A sweep's folder read back (sweep.json).
struct SweepFile {
    SweepSettings settings;
    int64_t params = 0;  // the model's
    HostCore host;       // the sweeping machine's core, measured when the sweep began
    int cores = 0;       // the sweeping machine's cores (where a point's --threads is 0: all)
    std::vector<SweepResult> points;
};

class ScalingSweep {
public:
    // `folder`: the sweep's folder (new or empty), or empty for none (tests).
    ScalingSweep(RunConfig base, SweepSettings settings, std::string folder);
    ~ScalingSweep();
    // Runs the points in order; `onPoint` sees each result as it is measured. A stop ends the
    // point in progress (its measurement is kept if it got past the warm-up) and skips the rest.
    std::vector<SweepResult> run(const std::function<void(const SweepResult&)>& onPoint = {});
    void stop();   // any thread: the point in progress ends at its step, with its final evaluation
    void abort();  // any thread: the same without the final evaluation (the window is closing)
    const std::string& folder() const { return folder_; }
    // Known once the first point is measured: the model's parameters; this machine's core.
    int64_t params() const { return params_; }
    const HostCore& host() const { return host_; }
    // A sweep's folder read back; throws tb::Error naming the file and what is wrong.
    static SweepFile readResults(const std::string& folder);

private:
    void writeFolder(const std::string& state, const std::vector<SweepResult>& results, const std::string& error = {});
    RunConfig base_;
    SweepSettings settings_;
    std::string folder_, created_;
    int64_t params_ = 0;
    HostCore host_;
    std::atomic<bool> stopped_{false}, aborted_{false};
    std::mutex mutex_;           // guards current_
    Trainer* current_ = nullptr;  // the point being run
};

}  // namespace tb
