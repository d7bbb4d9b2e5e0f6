#include "io/run_index.hpp"

#include "io/run_lock.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "util/error.hpp"
#include "util/file_tail.hpp"
#include "util/json_file.hpp"
#include "util/system_text.hpp"

namespace fs = std::filesystem;

namespace tb {

namespace {

nlohmann::json readJson(const fs::path& p) {
    std::ifstream in(p);
    if (!in) return nullptr;
    std::stringstream s;
    s << in.rdbuf();
    nlohmann::json j = parseJsonOrDiscard(s.str());
    return j.is_discarded() ? nlohmann::json(nullptr) : j;
}

// A field of the type the record needs, else `fallback`: a folder edited by hand, or written by
// another version, never throws here.
std::string text(const nlohmann::json& j, const char* key, const std::string& fallback = {}) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}
double number(const nlohmann::json& j, const char* key, double fallback) {
    auto it = j.find(key);
    return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

// What identifies a version of a folder's record: its run.json and summary.json as they are now.
std::string stamp(const fs::path& folder) {
    std::string out;
    for (const char* f : {"run.json", "summary.json", "metrics.jsonl"}) {
        std::error_code ec;
        const auto size = fs::file_size(folder / f, ec);
        const auto time = fs::last_write_time(folder / f, ec);
        out += ec ? "-;" : std::to_string(size) + "@" + std::to_string(time.time_since_epoch().count()) + ";";
    }
    return out;
}

struct Statement {
    sqlite3_stmt* s = nullptr;
    Statement(sqlite3* db, const std::string& sql) {
        if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) != SQLITE_OK)
            throw Error(std::string("runs index: ") + sqlite3_errmsg(db));
    }
    ~Statement() { sqlite3_finalize(s); }
    void bind(int i, const std::string& v) { sqlite3_bind_text(s, i, v.c_str(), -1, SQLITE_TRANSIENT); }
    void bind(int i, double v) { sqlite3_bind_double(s, i, v); }
    void bind(int i, int64_t v) { sqlite3_bind_int64(s, i, v); }
    std::string text(int i) const {
        const unsigned char* t = sqlite3_column_text(s, i);
        return t ? reinterpret_cast<const char*>(t) : "";
    }
};

const char* kColumns = "path, name, created, state, model, data, plan, steps, validation_accuracy, test_accuracy, "
                       "examples_per_sec, stamp, error, processes";

}  // namespace

bool interrupted(const std::string& folder) {
    const nlohmann::json run = readJson(fs::path(folder) / "run.json");
    return run.is_object() && text(run, "state") == "running" && !RunLock::holder(folder);
}

bool RunRecord::matches(const std::string& filter) const {
    return filter.empty() || (name + ' ' + model + ' ' + data + ' ' + plan + ' ' + state).find(filter) != std::string::npos;
}

namespace {

// A whole number from 1 to 1e6 in `key`, else 1 (a garbled folder is only described here).
int count(const nlohmann::json& j, const char* key) {
    const double v = number(j, key, 1);
    return v >= 1 && v <= 1e6 && v == std::floor(v) ? int(v) : 1;
}

std::string counted(int n, const std::string& one, const std::string& many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
}

// plan.json in a few words: "2 towers, variables cpu, sync", "2 stages x 2 replicas, 1f1b", and
// the processes a run of several trained as: "2 towers in each of 2 processes, ...", "..., a
// process per stage and replica", "..., 1 parameter-server process".
std::string planLine(const nlohmann::json& plan, int processes) {
    const std::string stages = text(plan, "stages");
    if (!stages.empty()) {  // model parallelism: the chosen split, a stage per comma
        const int replicas = count(plan, "stage_replicas");
        std::string line = counted(int(1 + std::count(stages.begin(), stages.end(), ',')), "stage", "stages");
        if (replicas > 1) line += " x " + std::to_string(replicas) + " replicas";
        line += ", " + text(plan, "pipeline", "naive");
        const bool own = plan.contains("stage_per_process") && plan["stage_per_process"].is_boolean() &&
                         plan["stage_per_process"].get<bool>();
        if (processes > 1)
            line += own ? (replicas > 1 ? ", a process per stage and replica" : ", a process per stage")
                        : ", in each of " + std::to_string(processes) + " processes";
        return line;
    }
    const auto towers = plan.contains("towers") && plan["towers"].is_array() ? plan["towers"] : nlohmann::json::array();
    const int servers = std::min(processes - 1, int(std::max(0.0, std::min(number(plan, "ps_tasks", 0), 1e6))));
    std::string line = counted(int(towers.size()), "tower", "towers");
    if (processes - servers > 1) line += " in each of " + std::to_string(processes - servers) + " processes";
    line += ", variables " + text(plan, "variables", "?") + ", " + text(plan, "update", "sync");
    if (servers > 0) line += ", " + counted(servers, "parameter-server process", "parameter-server processes");
    return line;
}

// The last step a metrics file records: its last whole step line, read from the end (a running
// run's file grows by a line a step; reading it whole every refresh cost a second per 100 MB).
int64_t lastStepIn(const fs::path& metrics, int64_t fallback) {
    std::ifstream in(metrics, std::ios::binary);
    int64_t step = fallback;
    lastLineTaken(in, [&](std::string_view line) {
        if (line.find("\"type\":\"step\"") == std::string_view::npos) return false;
        const nlohmann::json j = parseJsonOrDiscard(std::string(line));
        if (!j.is_object()) return false;
        step = int64_t(number(j, "step", double(fallback)));
        return true;
    });
    return step;
}

}  // namespace

RunRecord readRunFolder(const std::string& folder) {
    const fs::path f(folder);
    RunRecord r;
    r.path = folder;
    r.name = f.filename().string();
    const nlohmann::json run = readJson(f / "run.json"), config = readJson(f / "config.json"),
                         plan = readJson(f / "plan.json"), summary = readJson(f / "summary.json");
    if (run.is_object()) {
        r.created = text(run, "created");
        r.state = text(run, "state");
        r.error = text(run, "error");
    }
    if (config.is_object()) {
        r.model = text(config, "model");
        r.data = text(config, "data");
    }
    // The model's own name (a config may name a file, and a resumed run's names model.json).
    if (const nlohmann::json spec = readJson(f / "model.json"); spec.is_object()) {
        r.model = text(spec, "name", r.model);
    }
    if (run.is_object() && text(run, "kind") == "sweep") {  // engine/scaling_sweep.hpp
        const nlohmann::json sweep = readJson(f / "sweep.json");
        const size_t points = sweep.is_object() && sweep.contains("points") && sweep["points"].is_array() ? sweep["points"].size() : 0;
        r.plan = "scaling sweep, " + std::to_string(points) + (points == 1 ? " point" : " points");
    } else if (plan.is_object()) {
        r.processes = count(plan, "processes");
        r.plan = planLine(plan, r.processes);
    }
    // A summary is the run's only once it ended: a resumed run that trains (or failed, or was
    // killed) again still holds its earlier segment's, whose steps and accuracies are past.
    if (summary.is_object() && r.state != "running" && r.state != "failed") {
        r.steps = int64_t(number(summary, "steps", 0));
        r.validationAccuracy = number(summary, "validation_accuracy", -1);
        if (summary.contains("test_accuracy") && summary["test_accuracy"].is_number())
            r.testAccuracy = summary["test_accuracy"].get<double>();
        r.examplesPerSec = number(summary, "examples_per_sec", 0);
    } else {  // running, failed, or crashed: the last step written
        r.steps = lastStepIn(f / "metrics.jsonl", r.steps);
    }
    return r;
}

RunIndex::RunIndex(const std::string& root) : root_(root), dbPath_(root + "/index.sqlite") {
    std::error_code ec;
    fs::create_directories(root_, ec);
    if (ec) throw Error(root_ + ": cannot create the runs folder (" + ec.message() + ")");
    openOrRebuild();
    refresh();
}

void RunIndex::CloseDatabase::operator()(sqlite3* db) const { sqlite3_close(db); }

void RunIndex::exec(const std::string& sql) const {
    char* msg = nullptr;
    if (sqlite3_exec(db_.get(), sql.c_str(), nullptr, nullptr, &msg) != SQLITE_OK) {
        const std::string why = msg ? msg : "unknown error";
        sqlite3_free(msg);
        throw Error(dbPath_ + ": " + why);
    }
}

void RunIndex::openOrRebuild() {
    // A database that will not open, fails its integrity check or has another schema version is
    // set aside and made again from the folders: it only ever mirrors them.
    auto usable = [&] {
        sqlite3* opened = nullptr;
        const int rc = sqlite3_open_v2(dbPath_.c_str(), &opened, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
        db_.reset(opened);  // sqlite3_open_v2 may hand back a handle even when it fails
        if (rc != SQLITE_OK) return false;
        sqlite3_busy_timeout(db_.get(), 5000);  // the window and a command line may refresh at once
        try {
            Statement check(db_.get(), "PRAGMA quick_check");
            if (sqlite3_step(check.s) != SQLITE_ROW || check.text(0) != "ok") return false;
            Statement v(db_.get(), "PRAGMA user_version");
            if (sqlite3_step(v.s) != SQLITE_ROW) return false;
            const int version = sqlite3_column_int(v.s, 0);
            if (version == 0) {  // new: make it
                exec("CREATE TABLE IF NOT EXISTS runs (path TEXT PRIMARY KEY, name TEXT, created TEXT, state TEXT, "
                     "model TEXT, data TEXT, plan TEXT, steps INTEGER, validation_accuracy REAL, test_accuracy REAL, "
                     "examples_per_sec REAL, stamp TEXT, error TEXT, processes INTEGER)");
                exec("PRAGMA user_version = " + std::to_string(kSchemaVersion));
            } else if (version != kSchemaVersion) {
                return false;
            }
            // The version alone does not say the table is whole: one made by another program, or
            // altered or dropped by hand, would fail every refresh.
            Statement columns(db_.get(), std::string("SELECT ") + kColumns + " FROM runs LIMIT 0");
            return true;
        } catch (const Error&) {
            return false;
        }
    };
    if (usable()) return;
    db_.reset();
    std::error_code ec;
    fs::remove(dbPath_, ec);
    for (const char* suffix : {"-journal", "-wal", "-shm"}) fs::remove(dbPath_ + suffix, ec);
    rebuilt_ = true;
    if (!usable()) throw Error(dbPath_ + ": cannot create the runs index (" + (db_ ? sqlite3_errmsg(db_.get()) : "no memory") + ")");
}

void RunIndex::refresh() {
    std::map<std::string, std::string> known;  // path -> stamp
    {
        Statement all(db_.get(), "SELECT path, stamp FROM runs");
        while (sqlite3_step(all.s) == SQLITE_ROW) known[all.text(0)] = all.text(1);
    }
    // The folders are read before the write transaction, which then stays short (the window and
    // a command line may refresh at once).
    std::vector<std::pair<RunRecord, std::string>> changed;  // (record, stamp)
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root_, ec)) {
        std::error_code fe;
        if (!e.is_directory(fe) || !fs::exists(e.path() / "run.json", fe)) continue;
        const std::string path = e.path().string(), now = stamp(e.path());
        auto it = known.find(path);
        if (it != known.end()) {
            const bool same = it->second == now;
            known.erase(it);
            if (same) continue;
        }
        changed.emplace_back(readRunFolder(path), now);
    }
    exec("BEGIN IMMEDIATE");
    try {
        for (const auto& [r, now] : changed) {
            Statement put(db_.get(), std::string("INSERT OR REPLACE INTO runs (") + kColumns +
                                   ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
            put.bind(1, r.path);
            put.bind(2, r.name);
            put.bind(3, r.created);
            put.bind(4, r.state);
            put.bind(5, r.model);
            put.bind(6, r.data);
            put.bind(7, r.plan);
            put.bind(8, r.steps);
            put.bind(9, r.validationAccuracy);
            put.bind(10, r.testAccuracy);
            put.bind(11, r.examplesPerSec);
            put.bind(12, now);
            put.bind(13, r.error);
            put.bind(14, int64_t(r.processes));
            if (sqlite3_step(put.s) != SQLITE_DONE) throw Error(dbPath_ + ": " + sqlite3_errmsg(db_.get()));
        }
        for (const auto& [path, s] : known) {  // folders that are gone
            Statement drop(db_.get(), "DELETE FROM runs WHERE path = ?");
            drop.bind(1, path);
            sqlite3_step(drop.s);
        }
        exec("COMMIT");
    } catch (...) {
        sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);  // the first error is the one to report
        throw;
    }
}

std::vector<RunRecord> RunIndex::list(const std::string& filter, const std::string& sortBy, bool ascending) const {
    static const std::vector<std::string> sortable = {"created", "name", "model", "data", "state", "steps",
                                                      "test_accuracy", "validation_accuracy", "examples_per_sec"};
    if (std::find(sortable.begin(), sortable.end(), sortBy) == sortable.end())
        throw Error("--sort: unknown column '" + sortBy + "' (created, name, model, data, state, steps, "
                    "test_accuracy, validation_accuracy, examples_per_sec)");
    Statement q(db_.get(), std::string("SELECT ") + kColumns + " FROM runs ORDER BY " + sortBy +
                               (ascending ? " ASC" : " DESC") + ", path");
    std::vector<RunRecord> out;
    while (sqlite3_step(q.s) == SQLITE_ROW) {
        RunRecord r;
        r.path = q.text(0);
        r.name = q.text(1);
        r.created = q.text(2);
        r.state = q.text(3);
        // (Asked now, not when indexed: a process can end without its folder changing.)
        if (r.state == "running" && interrupted(r.path)) r.state = "interrupted";
        r.model = q.text(4);
        r.data = q.text(5);
        r.plan = q.text(6);
        r.steps = sqlite3_column_int64(q.s, 7);
        r.validationAccuracy = sqlite3_column_double(q.s, 8);
        r.testAccuracy = sqlite3_column_double(q.s, 9);
        r.examplesPerSec = sqlite3_column_double(q.s, 10);
        r.error = q.text(12);
        r.processes = sqlite3_column_int(q.s, 13);
        if (r.matches(filter)) out.push_back(std::move(r));
    }
    return out;
}

}  // namespace tb
