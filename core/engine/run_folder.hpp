// RunFolder: the folder that keeps one run, from the window or the command line, so that it can
// be listed, compared, followed while it runs and resumed after a stop or a crash. The folder
// is the truth (an index of many runs is rebuilt from folders):
//   run.json          {"format":"towerbench-run","version":1,"state":"running"|"finished"|
//                      "stopped"|"failed","pid":..,"host":..,"created":..,"updated":..,"error":..}
//   config.json       the run's settings (RunConfig JSON); a resume reads them
//   model.json        the model's spec as trained; a resume trains this one, whatever became of
//                     the models folder
//   plan.json         the deployment plan
//   metrics.jsonl     every step, evaluation and state (engine/metrics_file.hpp)
//   log.txt           states, evaluations, checkpoints and errors, one timed line each
//   summary.json      at the end (RunSummary JSON)
//   predictions.json  image sets: the latest test evaluation's classes for each test example
//   events.out.tfevents.*   TensorBoard's scalars (engine/event_file.hpp; builds with protobuf)
//   checkpoints/step-NNNNNNNN.safetensors   the last K; best.safetensors, the best validation
// Small files are written atomically; checkpoints too (engine/checkpoint.hpp).
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "data/dataset.hpp"
#include "engine/checkpoint.hpp"
#include "engine/metrics_file.hpp"
#include "engine/observer.hpp"
#include "io/run_config.hpp"
#include "io/run_lock.hpp"

namespace tb {

struct RunSummary;

inline constexpr int kRunFolderVersion = 1;

class RunFolder final : public TrainingObserver {
public:
    // Where runs go: $TOWERBENCH_RUNS_DIR, else $XDG_DATA_HOME/towerbench/runs, else
    // ~/.local/share/towerbench/runs.
    static std::string runsRoot();
    // A new run's folder: `dir` (created; refused when it already holds a run), or a fresh one
    // under runsRoot() named after the time, model and data ("20261126-051700-mnist_cnn-fashion-mnist").
    static std::unique_ptr<RunFolder> create(const RunConfig& config, const std::string& dir = {});
    // Such a fresh folder, made (empty) and returned, for a run another program writes into it
    // (the window's runs of several processes: towerbench-run --run-dir).
    static std::string claimNewFolder(const RunConfig& config);
    // An existing run's folder, to continue it (--resume).
    static std::unique_ptr<RunFolder> reopen(const std::string& dir);
    // Who trains the run in `dir` now: the holder of its lock (io/run_lock.hpp), on this host or,
    // by a fresh lease, another; none for a finished, stopped or crashed run.
    static std::optional<RunHolder> trainer(const std::string& dir);
    // The settings a resumed run starts from: the folder's config.json, naming its model.json.
    static RunConfig resumeConfig(const std::string& dir);
    // The run's predictions.json (the latest test evaluation's) over its test set `test`, whose
    // images the grid shows: null when the file is missing or holds another step than `step`;
    // throws tb::Error naming the file when it is malformed or does not fit `test`.
    static std::shared_ptr<const Predictions> readPredictions(const std::string& dir, int64_t step,
                                                              const Dataset& test);
    ~RunFolder() override;

    const std::string& path() const { return path_; }
    std::string checkpointsDir() const { return path_ + "/checkpoints"; }
    std::string modelFile() const { return path_ + "/model.json"; }
    const RunConfig& config() const { return config_; }
    bool resuming() const { return resuming_; }
    // The newest checkpoint that opens (a torn or foreign file is passed over); empty when none.
    std::string newestCheckpoint() const { return newestCheckpointIn(path_); }
    static std::string newestCheckpointIn(const std::string& runDir);
    // The validation accuracy of checkpoints/best.safetensors; -1 where there is none that opens.
    double bestCheckpointAccuracy() const;

    // A reopened folder: the checkpoint to continue from (metrics.jsonl was cut after its step).
    const std::string& resumeCheckpoint() const { return resumeCheckpoint_; }
    // Asked before begin(): begin keeps the steps and evaluations it kept of a resumed run's
    // metrics.jsonl, read back, for the first call of this (the window charts the run's past).
    void keepResumedPast() { keepPast_ = true; }
    std::vector<MetricsLine> takeResumedPast() { return std::exchange(past_, {}); }

    // The trainer's calls, on its thread; begin() before the run's first event (observer calls
    // before it are dropped). begin: settings, model and plan written, metrics and log opened
    // (a resume cuts metrics.jsonl after its checkpoint's step and appends), state "running".
    void begin(const RunConfig& config, const std::string& modelSpec, const nlohmann::json& plan);
    // A checkpoint at meta.step, written on a thread of its own while training goes on (one at a
    // time: the next call waits for the previous write and rethrows its failure); keeps the
    // last K; `best`: also best.safetensors. finish() and fail() wait for the last write.
    void checkpoint(const CheckpointMeta& meta, TrainingSnapshot snap, VariableLayout layout, bool best);
    void waitForCheckpoint();
    double writeSeconds() const { return writeSeconds_; }  // spent writing, fsync included, on that thread
    void finish(const RunSummary& summary);
    void fail(const std::string& message);

    // Observer: metrics.jsonl and log.txt.
    void onStateChanged(RunState, const std::string& detail) override;
    void onStepEnd(const StepMetrics&) override;
    void onEval(const EvalResult&) override;
    void onDeviceSamples(const std::vector<DeviceSample>&) override;
    bool lossless() const override { return true; }  // a file: every step

private:
    explicit RunFolder(std::string path) : path_(std::move(path)) {}
    void openFiles();
    void writeState(const std::string& state, const std::string& error = {});
    void log(const std::string& line);

    std::string path_;
    RunConfig config_;
    bool resuming_ = false;
    bool began_ = false;  // begin() ran: the files are open and the folder is the run's
    bool claimed_ = false;  // create() made the (empty) folder to claim its name
    std::unique_ptr<RunLock> lock_;  // held from begin() (a resume: from reopen()) to the end
    std::string resumeCheckpoint_;
    int64_t resumeStep_ = -1;  // that checkpoint's step
    bool keepPast_ = false;
    std::vector<MetricsLine> past_;  // keepResumedPast(): what begin() kept, until taken
    std::string created_;
    std::unique_ptr<MetricsFile> metrics_;
    std::unique_ptr<TrainingObserver> events_;  // TensorBoard's events file, where protobuf is built in
    std::mutex logMutex_;  // the hub's thread (observer) and the trainer's (checkpoints) both log
    std::FILE* log_ = nullptr;
    int keep_ = 3;
    std::thread writer_;              // the checkpoint being written, if any
    std::exception_ptr writeError_;   // its failure, rethrown by waitForCheckpoint
    double writeSeconds_ = 0;
};

}  // namespace tb
