#include "engine/run_folder.hpp"

#include <sys/stat.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "engine/trainer.hpp"
#include "util/atomic_file.hpp"
#include "io/run_index.hpp"
#include "util/system_text.hpp"
#ifdef TB_HAVE_PROTOBUF
#include "engine/event_file.hpp"
#endif
#include "util/error.hpp"
#include "util/json_file.hpp"
#include "util/elapsed.hpp"

namespace fs = std::filesystem;

namespace tb {

namespace {


std::string readText(const std::string& path, const std::string& what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path + ": cannot read " + what + " (" + std::strerror(errno) + ")");
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// "synthetic:spirals" -> "synthetic-spirals", "/x/my_model.json" -> "my_model": a folder name
// keeps letters, digits, '-', '_' and '.'.
std::string slug(const std::string& text) {
    const std::string base = text.find('/') != std::string::npos ? fs::path(text).stem().string() : text;
    std::string out;
    for (char c : base) {
        const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
        out += ok ? c : '-';
    }
    if (out.size() > 40) out.resize(40);
    return out;
}


// step-00000100.safetensors -> 100; -1 for other names.
int64_t stepOf(const fs::path& p) {
    const std::string n = p.filename().string();
    if (n.rfind("step-", 0) != 0 || p.extension() != ".safetensors") return -1;
    const std::string digits = n.substr(5, n.size() - 5 - std::string(".safetensors").size());
    if (digits.empty() || digits.size() > 18 ||
        !std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c) != 0; }))
        return -1;
    return std::stoll(digits);
}

}  // namespace

std::string RunFolder::runsRoot() {
    if (const char* d = std::getenv("TOWERBENCH_RUNS_DIR"); d && *d) return d;
    if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) return std::string(x) + "/towerbench/runs";
    const char* home = std::getenv("HOME");
    return std::string(home && *home ? home : ".") + "/.local/share/towerbench/runs";
}

std::string RunFolder::claimNewFolder(const RunConfig& config) {
    // The name is claimed by making the folder (not by seeing it free), so two runs started
    // in the same second (a sweep, the window beside a command line) never share one.
    const std::string base =
        runsRoot() + "/" + utcText("%Y%m%d-%H%M%S") + "-" + slug(config.model) + "-" + slug(config.data);
    std::error_code ec;
    fs::create_directories(runsRoot(), ec);
    if (ec) throw Error(runsRoot() + ": cannot create the runs folder (" + ec.message() + ")");
    // mkdir itself, not fs::create_directory: that one calls a name taken and at once removed
    // again (a run that failed its checks) an error ("File exists"); any EEXIST is a taken name.
    std::string path = base;
    for (int i = 2; ::mkdir(path.c_str(), 0777) != 0; ++i) {
        if (errno != EEXIST) throw Error(path + ": cannot create (" + std::strerror(errno) + ")");
        path = base + "-" + std::to_string(i);
    }
    return path;
}

std::unique_ptr<RunFolder> RunFolder::create(const RunConfig& config, const std::string& dir) {
    std::string path = dir;
    std::error_code ec;
    bool claimed = false;
    if (path.empty()) {
        path = claimNewFolder(config);
        claimed = true;
    } else if (fs::exists(fs::path(path) / "run.json", ec)) {
        throw Error("--run-dir: " + path + " already holds a run; continue it with --resume " + path +
                    " or choose another folder");
    } else if (fs::exists(path, ec)) {
        // A run keeps its folder to itself: its files would mix with (and could overwrite) others,
        // a data folder's among them.
        if (!fs::is_directory(path, ec)) throw Error("--run-dir: " + path + " is a file, not a folder");
        if (const fs::directory_iterator first(path, ec); !ec && first != fs::directory_iterator())
            throw Error("--run-dir: " + path + " is not empty (it holds " + first->path().filename().string() +
                        ", ...); choose a new or empty folder");
    }
    auto f = std::unique_ptr<RunFolder>(new RunFolder(path));
    f->config_ = config;
    f->created_ = utcText();
    f->claimed_ = claimed;
    return f;
}

void RunFolder::openFiles() {
    metrics_ = std::make_unique<MetricsFile>(path_ + "/metrics.jsonl", resuming_, "run folder");
#ifdef TB_HAVE_PROTOBUF
    events_ = std::make_unique<EventFile>(path_, resuming_ ? resumeStep_ : -1);
#endif
    log_ = std::fopen((path_ + "/log.txt").c_str(), resuming_ ? "a" : "w");
    if (!log_) throw Error(path_ + "/log.txt: cannot create (" + std::strerror(errno) + ")");
}

std::optional<RunHolder> RunFolder::trainer(const std::string& dir) { return RunLock::holder(dir); }

std::unique_ptr<RunFolder> RunFolder::reopen(const std::string& dir) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) throw Error("--resume: " + dir + " is not a folder");
    const std::string runFile = dir + "/run.json";
    const nlohmann::json run = parseJsonOrDiscard(readText(runFile, "the run's record"));
    if (run.is_discarded() || !run.is_object() || run.value("format", "") != "towerbench-run")
        throw Error(runFile + ": not a Towerbench run record");
    if (run.value("version", 0) > kRunFolderVersion)
        throw Error(runFile + ": run folder format " + std::to_string(run.value("version", 0)) +
                    " is newer than this Towerbench reads (" + std::to_string(kRunFolderVersion) + ")");
    // A run still going is not resumed under its feet: its trainer holds the folder's lock (a
    // crashed one says "running" too, but its lock went with its process).
    auto f = std::unique_ptr<RunFolder>(new RunFolder(dir));
    f->lock_ = std::make_unique<RunLock>(dir, "--resume");
    f->config_ = resumeConfig(dir);
    f->resuming_ = true;
    f->created_ = run.value("created", "");
    f->resumeCheckpoint_ = f->newestCheckpoint();
    if (f->resumeCheckpoint_.empty())
        throw Error("--resume: " + dir + " has no checkpoint to continue from (checkpoints/ is empty)");
    return f;  // nothing in the folder changes before begin(): a refused resume leaves it as it was
}

RunConfig RunFolder::resumeConfig(const std::string& dir) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) throw Error("--resume: " + dir + " is not a folder");
    if (!fs::exists(fs::path(dir) / "config.json", ec))
        throw Error("--resume: " + dir + " holds no run (it has no config.json)");
    RunConfig c;
    c.loadFile(dir + "/config.json");
    c.model = dir + "/model.json";  // the model as it was trained
    return c;
}

std::shared_ptr<const Predictions> RunFolder::readPredictions(const std::string& dir, int64_t step,
                                                              const Dataset& test) {
    const std::string path = dir + "/predictions.json";
    std::error_code ec;
    if (!fs::exists(path, ec)) return nullptr;
    // Three numbers and a class name per example: 64 MiB holds a few hundred thousand.
    const nlohmann::json j = parseJsonText(readTextFile(path, size_t(64) << 20, "predictions"), path);
    const auto field = [&](const char* key) -> const nlohmann::json& {
        if (!j.is_object() || !j.contains(key)) throw Error(path + ": '" + key + "' is missing");
        return j.at(key);
    };
    const nlohmann::json& at = field("step");
    if (!at.is_number_integer()) throw Error(path + ": 'step' must be a whole number");
    if (at.get<int64_t>() != step) return nullptr;  // another evaluation's
    const nlohmann::json &classesJ = field("classes"), &names = field("class_names"), &labels = field("labels"),
                         &predicted = field("predicted"), &confidence = field("confidence");
    if (!classesJ.is_number_integer() || classesJ.get<int64_t>() < 1 || classesJ.get<int64_t>() > 100000)
        throw Error(path + ": 'classes' must be a whole number from 1");
    const int classes = int(classesJ.get<int64_t>());
    const size_t n = test.size();
    if (!test.isImage() || test.pixels.size() != n * test.sampleSize())
        throw Error(path + ": " + test.name + " is not an image set, which the predictions' grid shows");
    for (auto [key, list] : {std::pair{"labels", &labels}, {"predicted", &predicted}, {"confidence", &confidence}})
        if (!list->is_array() || list->size() != n)
            throw Error(path + ": '" + key + "' must list one value for each of the " + std::to_string(n) +
                        " examples of " + test.name);
    if (!names.is_array() || (!names.empty() && names.size() != size_t(classes)))
        throw Error(path + ": 'class_names' must name each of the " + std::to_string(classes) + " classes, or none");
    auto p = std::make_shared<Predictions>();
    p->channels = test.channels;
    p->height = test.height;
    p->width = test.width;
    p->images = std::make_shared<const std::vector<uint8_t>>(test.pixels);
    for (const nlohmann::json& name : names) {
        if (!name.is_string()) throw Error(path + ": 'class_names' must hold text");
        p->classNames.push_back(name.get<std::string>());
    }
    p->labels.reserve(n);
    p->predicted.reserve(n);
    p->confidence.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        const nlohmann::json &l = labels[i], &k = predicted[i], &c = confidence[i];
        if (!l.is_number_integer() || !k.is_number_integer() || l.get<int64_t>() < 0 || k.get<int64_t>() < 0 ||
            l.get<int64_t>() >= classes || k.get<int64_t>() >= classes)
            throw Error(path + ": example " + std::to_string(i) + "'s classes must be whole numbers below " +
                        std::to_string(classes));
        if (l.get<int64_t>() != test.labels[i])
            throw Error(path + ": example " + std::to_string(i) + " is labelled " + std::to_string(l.get<int64_t>()) +
                        " but is " + std::to_string(test.labels[i]) + " in " + test.name +
                        " (the data changed since the run)");
        if (!c.is_number() || !(c.get<double>() >= 0 && c.get<double>() <= 1))
            throw Error(path + ": example " + std::to_string(i) + "'s confidence must be between 0 and 1");
        p->labels.push_back(int32_t(l.get<int64_t>()));
        p->predicted.push_back(int32_t(k.get<int64_t>()));
        p->confidence.push_back(c.get<float>());
    }
    return p;
}

RunFolder::~RunFolder() {
    if (writer_.joinable()) writer_.join();
    if (log_) std::fclose(log_);
    std::error_code ec;
    if (claimed_ && !began_) fs::remove(path_, ec);  // a run refused before it began leaves no folder
}

std::string RunFolder::newestCheckpointIn(const std::string& runDir) {
    std::vector<std::pair<int64_t, fs::path>> found;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(runDir + "/checkpoints", ec))
        if (const int64_t s = stepOf(e.path()); s >= 0) found.emplace_back(s, e.path());
    std::sort(found.rbegin(), found.rend());
    for (const auto& [s, p] : found) {
        try {
            // Its header reads as a checkpoint's; its checksums are checked when it is resumed, so
            // a damaged newest checkpoint is refused naming its tensor, not passed over in silence.
            Checkpoint::readMeta(p.string());
            return p.string();
        } catch (const Error&) {  // torn by a crash mid-write cannot happen (atomic), foreign can
        }
    }
    return {};
}

double RunFolder::bestCheckpointAccuracy() const {
    std::error_code ec;
    const std::string best = checkpointsDir() + "/best.safetensors";
    if (!fs::is_regular_file(best, ec)) return -1;
    try {
        return Checkpoint::open(best).meta().validationAccuracy;
    } catch (const Error&) {  // foreign or damaged: the next best replaces it
        return -1;
    }
}

void RunFolder::writeState(const std::string& state, const std::string& error) {
    nlohmann::json run = {{"format", "towerbench-run"},
                          {"version", kRunFolderVersion},
                          {"state", state},
                          {"pid", int64_t(::getpid())},
                          {"host", hostName()},
                          {"created", created_},
                          {"updated", utcText()}};
    if (!error.empty()) run["error"] = error;
    writeFileAtomically(path_ + "/run.json", run.dump(2) + "\n");
}

void RunFolder::log(const std::string& line) {
    std::lock_guard lock(logMutex_);
    if (!log_) return;
    std::fprintf(log_, "%s %s\n", utcText().c_str(), line.c_str());
    std::fflush(log_);
}

void RunFolder::begin(const RunConfig& config, const std::string& modelSpec, const nlohmann::json& plan) {
    config_ = config;
    keep_ = config.keepCheckpoints;
    if (resuming_) {
        // The metrics up to the checkpoint stay; what the stopped or crashed run wrote after it
        // is written again by the resumed run.
        // (The resume itself opens and verifies the whole checkpoint: RunPlan::of.)
        const int64_t step = resumeStep_ = Checkpoint::readMeta(resumeCheckpoint_).step;
        const std::string metrics = path_ + "/metrics.jsonl";
        std::ifstream in(metrics, std::ios::binary);
        const std::string kept = metricsUpToCheckpoint(in, step, keepPast_ ? &past_ : nullptr);
        in.close();
        writeFileAtomically(metrics, kept);
        // A writer killed mid-checkpoint leaves its temporary behind: never a checkpoint, removed.
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(checkpointsDir(), ec))
            if (e.path().filename().string().find(".tmp.") != std::string::npos) fs::remove(e.path(), ec);
    }
    // Made only now, so a run refused before it began leaves no empty folder behind.
    std::error_code made;
    fs::create_directories(checkpointsDir(), made);
    if (made) throw Error("--run-dir: cannot create " + path_ + " (" + made.message() + ")");
    if (!lock_) lock_ = std::make_unique<RunLock>(path_, "--run-dir");  // (a resume took it on reopening)
    openFiles();
    began_ = true;
    if (!resuming_) writeFileAtomically(modelFile(), modelSpec);
    writeFileAtomically(path_ + "/config.json", config.toJson().dump(2) + "\n");
    writeFileAtomically(path_ + "/plan.json", plan.dump(2) + "\n");
    writeState("running");
    log(resuming_ ? "resumed from " + resumeCheckpoint_ : "created for " + config.model + " on " + config.data);
}

void RunFolder::checkpoint(const CheckpointMeta& meta, TrainingSnapshot snap, VariableLayout layout, bool best) {
    waitForCheckpoint();
    writer_ = std::thread([this, meta, snap = std::move(snap), layout = std::move(layout), best] {
        try {
            const auto t0 = std::chrono::steady_clock::now();
            char name[64];
            std::snprintf(name, sizeof name, "step-%08lld.safetensors", static_cast<long long>(meta.step));
            writeCheckpoint(checkpointsDir() + "/" + name, meta, snap, layout);
            if (best) writeCheckpoint(checkpointsDir() + "/best.safetensors", meta, snap, layout);
            // The last K by step; best.safetensors is apart from them.
            std::vector<std::pair<int64_t, fs::path>> found;
            std::error_code ec;
            for (const auto& e : fs::directory_iterator(checkpointsDir(), ec))
                if (const int64_t s = stepOf(e.path()); s >= 0) found.emplace_back(s, e.path());
            std::sort(found.rbegin(), found.rend());
            for (size_t i = size_t(keep_); i < found.size(); ++i) fs::remove(found[i].second, ec);
            writeSeconds_ += secondsSince(t0);
            log("checkpoint at step " + std::to_string(meta.step) + (best ? " (best validation accuracy so far)" : ""));
        } catch (...) {
            writeError_ = std::current_exception();
        }
    });
}

void RunFolder::waitForCheckpoint() {
    if (writer_.joinable()) writer_.join();
    if (writeError_) std::rethrow_exception(std::exchange(writeError_, nullptr));
}

void RunFolder::finish(const RunSummary& summary) {
    waitForCheckpoint();
    writeFileAtomically(path_ + "/summary.json", summary.toJson().dump(2) + "\n");
    writeState(summary.stopped ? "stopped" : "finished");
    log(summary.stopped ? "stopped at step " + std::to_string(summary.steps) : "finished");
}

void RunFolder::fail(const std::string& message) {
    if (!began_) return;  // refused before it began: the folder is as it was
    try {
        waitForCheckpoint();
    } catch (...) {  // the run failed anyway; its message is the one to keep
    }
    try {
        writeState("failed", message);
    } catch (const Error&) {  // the failure being reported may be this very folder's
    }
    log("failed: " + message);
}

void RunFolder::onStateChanged(RunState s, const std::string& detail) {
    if (metrics_) metrics_->onStateChanged(s, detail);
    if (events_) events_->onStateChanged(s, detail);
    // The end is the folder's to log, once its summary is written (finish, fail).
    if (s == RunState::Finished || s == RunState::Failed) return;
    log(std::string(toString(s)) + (detail.empty() ? "" : ": " + detail));
}

void RunFolder::onStepEnd(const StepMetrics& m) {
    if (metrics_) metrics_->onStepEnd(m);
    if (events_) events_->onStepEnd(m);
}

void RunFolder::onEval(const EvalResult& r) {
    if (metrics_) metrics_->onEval(r);
    if (events_) events_->onEval(r);
    // Image sets: what the model said of each test example, at the latest test evaluation (the
    // pixels are the data's own; the window's history shows them beside the labels).
    if (r.split == "test" && r.predictions) {
        const Predictions& p = *r.predictions;
        writeFileAtomically(path_ + "/predictions.json",
                            nlohmann::json{{"step", r.step},
                                           {"split", r.split},
                                           {"classes", r.classes},
                                           {"class_names", p.classNames},
                                           {"labels", p.labels},
                                           {"predicted", p.predicted},
                                           {"confidence", p.confidence}}
                                    .dump() +
                                "\n");
    }
    log("step " + std::to_string(r.step) + " " + r.split + " accuracy " + std::to_string(r.accuracy));
}

void RunFolder::onDeviceSamples(const std::vector<DeviceSample>& d) {
    if (metrics_) metrics_->onDeviceSamples(d);
}

}  // namespace tb
