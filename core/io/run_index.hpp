// RunIndex: the history of runs at a glance. An SQLite database (index.sqlite in the runs folder)
// holds one row per run folder: when, model, data, plan, state, steps, accuracies, examples/sec.
// The folders are the truth: refresh() reads a folder again only where its run.json or
// summary.json changed (size and modification time), adds new folders and drops vanished ones;
// a missing, unreadable or older-schema database is rebuilt from the folders, never trusted.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct sqlite3;

namespace tb {

// Whether a run whose run.json says "running" is trained now: its folder's lock is held
// (io/run_lock.hpp). A run that says so and is not has been interrupted (killed, or ended by
// another process of its run).
bool interrupted(const std::string& folder);

struct RunRecord {
    std::string path, name;           // the folder, and its name
    // run.json: ISO time; running|finished|stopped|failed, or interrupted where it says running
    // but its process on this machine is gone (killed, or ended by another process of its run).
    std::string created, state;
    std::string error;                // run.json: why a failed run failed (its one sentence); else empty
    std::string model, data, plan;    // config.json and plan.json ("2 towers (cpu:0, cpu:1), ...")
    int64_t steps = 0;                // summary.json, else the last step in metrics.jsonl
    double validationAccuracy = -1;   // summary.json; -1: none
    double testAccuracy = -1;
    double examplesPerSec = 0;
    int processes = 1;                // plan.json: the mpirun processes it trained as
    bool operator==(const RunRecord&) const = default;
    // Whether `filter` (as typed, case-sensitive) is in its name, model, data, plan or state; an
    // empty filter matches every run.
    bool matches(const std::string& filter) const;
};

class RunIndex {
public:
    static constexpr int kSchemaVersion = 3;  // 2: a failed run's error; 3: processes, pipelines' plans
    // Opens (or rebuilds) the index of `root`'s run folders and refreshes it.
    explicit RunIndex(const std::string& root);
    RunIndex(const RunIndex&) = delete;
    RunIndex& operator=(const RunIndex&) = delete;

    void refresh();
    // Rows whose model, data, plan, state or name contain `filter` (empty: all), ordered by
    // `sortBy` (created, name, model, data, state, steps, test_accuracy, validation_accuracy,
    // examples_per_sec), newest first unless `ascending`.
    std::vector<RunRecord> list(const std::string& filter = {}, const std::string& sortBy = "created",
                                bool ascending = false) const;
    bool rebuilt() const { return rebuilt_; }  // the last open found no usable database
    const std::string& path() const { return dbPath_; }

private:
    void openOrRebuild();
    void exec(const std::string& sql) const;
    struct CloseDatabase {
        void operator()(sqlite3* db) const;
    };
    std::string root_, dbPath_;
    // Owned so that a constructor that throws (refresh() failing) still closes it.
    std::unique_ptr<sqlite3, CloseDatabase> db_;
    bool rebuilt_ = false;
};

// A run folder's row, read from its files (refresh() uses it; the window too, for one folder).
RunRecord readRunFolder(const std::string& folder);

}  // namespace tb
