#include "engine/metrics_file.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <utility>
#include <nlohmann/json.hpp>

#include "util/error.hpp"
#include "util/file_tail.hpp"
#include "util/json_file.hpp"

namespace tb {

MetricsFile::MetricsFile(const std::string& path, bool append, std::string origin, Open when)
    : path_(path), origin_(std::move(origin)), append_(append) {
    if (when == Open::Now) open();
}

MetricsFile::~MetricsFile() {
    if (file_) std::fclose(file_);
}

void MetricsFile::open() {
    file_ = std::fopen(path_.c_str(), append_ ? "a" : "w");
    if (!file_) throw Error(origin_ + ": cannot create " + path_ + " (" + std::strerror(errno) + ")");
    const std::string lines = std::exchange(waiting_, {});
    if (!lines.empty() && (std::fputs(lines.c_str(), file_) < 0 || std::fflush(file_) != 0))
        throw Error(origin_ + ": cannot write " + path_ + " (" + std::strerror(errno) + ")");
}

void MetricsFile::write(const std::string& line) {
    if (!file_) {
        waiting_ += line + '\n';
        return;
    }
    // Flushed: a reader tailing the file sees whole lines as they happen.
    if (std::fputs(line.c_str(), file_) < 0 || std::fputc('\n', file_) == EOF || std::fflush(file_) != 0)
        throw Error(origin_ + ": cannot write " + path_ + " (" + std::strerror(errno) + ")");
}

void MetricsFile::onStateChanged(RunState s, const std::string& detail) {
    if (!file_ && s == RunState::Running) open();
    if (!file_ && s != RunState::Loading && s != RunState::Running) {
        waiting_.clear();  // ended while loading: its inputs were refused (or it was stopped), no file
        return;
    }
    write(nlohmann::json{{"type", "state"}, {"state", toString(s)}, {"detail", detail}}.dump());
}

void MetricsFile::onStepEnd(const StepMetrics& m) {
    nlohmann::json towers = nlohmann::json::array();
    for (const TowerMetrics& t : m.towers) {
        const TowerPhases& p = t.phases;
        nlohmann::json j = {{"busy", t.busyFraction},     {"run_busy", t.runBusyFraction},
                            {"data_wait_ms", p.dataWait * 1e3},
                            {"forward_ms", p.forward * 1e3}, {"backward_ms", p.backward * 1e3},
                            {"reduce_ms", p.reduce * 1e3},   {"wait_ms", p.wait * 1e3},
                            {"apply_ms", p.apply * 1e3},     {"straggle_ms", p.straggle * 1e3},
                            {"other_ms", p.other * 1e3}};
        if (std::isfinite(t.loss)) {  // async: only the tower that pushed has a loss
            j["loss"] = t.loss;
            j["accuracy"] = t.accuracy;
        }
        towers.push_back(std::move(j));
    }
    nlohmann::json line = {{"type", "step"},
                           {"step", m.step},
                         {"total_steps", m.totalSteps},
                         {"epoch", m.epoch},
                         {"loss", m.loss},
                         {"accuracy", m.accuracy},
                         {"lr", m.lr},
                         {"examples_per_sec", m.examplesPerSec},
                         {"run_examples_per_sec", m.runExamplesPerSec},
                         {"step_ms", m.stepSeconds * 1e3},
                         {"data_wait_ms", m.dataWaitSeconds * 1e3},
                         {"compute_ms", m.computeSeconds * 1e3},
                         {"elapsed_s", m.elapsedSeconds},
                         {"bytes_moved", m.bytesMoved},
                         {"examples", m.examples},
                         {"towers", std::move(towers)}};
    if (m.averaged) line["averaged"] = true;
    if (m.processBytes >= 0) line["process_bytes"] = m.processBytes;
    if (m.pusher >= 0) line["pusher"] = m.pusher;
    if (m.staleness >= 0) line["staleness"] = m.staleness;  // also workers of parameter-server processes
    if (m.bubbleFraction >= 0) {
        line["bubble_fraction"] = m.bubbleFraction;
        line["stages"] = m.stages;
        // Per stage, its blocks [micro-batch, "F" or "B", start ms, end ms] from the step's start.
        nlohmann::json stages = nlohmann::json::array();
        for (const auto& blocks : m.stageBlocks) {
            nlohmann::json s = nlohmann::json::array();
            for (const PipelineBlock& b : blocks) s.push_back({b.micro, b.forward ? "F" : "B", b.start * 1e3, b.end * 1e3});
            stages.push_back(std::move(s));
        }
        line["stage_blocks"] = std::move(stages);
    }
    write(line.dump());
    if (const auto& t = m.layerTimes) {  // a line of its own: per layer of the model, in its order
        nlohmann::json forward = nlohmann::json::array(), backward = nlohmann::json::array();
        for (double s : t->forward) forward.push_back(s * 1e3);
        for (double s : t->backward) backward.push_back(s * 1e3);
        write(nlohmann::json{{"type", "layer_times"}, {"step", m.step}, {"forward_ms", std::move(forward)},
                             {"backward_ms", std::move(backward)}}
                  .dump());
    }
}

void MetricsFile::onEval(const EvalResult& r) {
    nlohmann::json line{{"type", "eval"},         {"step", r.step},         {"split", r.split},
                        {"loss", r.loss},         {"accuracy", r.accuracy}, {"examples", r.examples},
                        {"ema", r.averagedWeights}};
    if (nlohmann::json rows = confusionRows(r); !rows.is_null()) line["confusion"] = std::move(rows);
    write(line.dump());
}

namespace {
// A line written by another program, or torn, may hold any type under any key: each read takes
// the expected type or the fallback, and a count only within int64 (a cast of a larger double is
// undefined).
double numberIn(const nlohmann::json& o, const char* k, double fallback = 0) {
    auto it = o.find(k);
    return it != o.end() && it->is_number() ? it->get<double>() : fallback;
}

int64_t countIn(const nlohmann::json& o, const char* k, int64_t fallback = 0) {
    const double v = numberIn(o, k, double(fallback));
    return v >= -9.2e18 && v <= 9.2e18 ? int64_t(v) : fallback;
}

// An eval line's "confusion" (rows of counts, square, at most kMaxClasses) into r; a malformed
// one is left out.
constexpr size_t kMaxClasses = 1000;
void readConfusion(const nlohmann::json& j, EvalResult& r) {
    auto it = j.find("confusion");
    if (it == j.end() || !it->is_array() || it->empty() || it->size() > kMaxClasses) return;
    const size_t k = it->size();
    std::vector<int64_t> counts;
    counts.reserve(k * k);
    for (const auto& row : *it) {
        if (!row.is_array() || row.size() != k) return;
        for (const auto& v : row) {
            if (!v.is_number_integer() || v.get<int64_t>() < 0) return;
            counts.push_back(v.get<int64_t>());
        }
    }
    r.classes = int(k);
    r.confusion = std::move(counts);
}
}  // namespace

nlohmann::json confusionRows(const EvalResult& r) {
    if (r.classes <= 0 || r.confusion.size() != size_t(r.classes) * size_t(r.classes)) return nullptr;
    nlohmann::json rows = nlohmann::json::array();
    for (int t = 0; t < r.classes; ++t)
        rows.push_back(std::vector<int64_t>(r.confusion.begin() + t * r.classes, r.confusion.begin() + (t + 1) * r.classes));
    return rows;
}

bool parseMetricsLine(const std::string& line, MetricsLine& out) {
    return parseMetricsJson(parseJsonOrDiscard(line), out);
}

bool parseMetricsJson(const nlohmann::json& j, MetricsLine& out) {
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return false;
    const std::string type = j["type"].get<std::string>();
    auto text = [&](const char* k) {
        auto it = j.find(k);
        return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    auto flag = [&](const char* k) {
        auto it = j.find(k);
        return it != j.end() && it->is_boolean() && it->get<bool>();
    };
    out = MetricsLine{};
    if (type == "state") {
        out.kind = MetricsLine::Kind::State;
        out.state = text("state");
        out.detail = text("detail");
        return true;
    }
    if (type == "eval") {
        out.kind = MetricsLine::Kind::Eval;
        out.eval.step = countIn(j, "step");
        out.eval.split = text("split");
        out.eval.loss = numberIn(j, "loss");
        out.eval.accuracy = numberIn(j, "accuracy");
        out.eval.examples = countIn(j, "examples");
        out.eval.averagedWeights = flag("ema");
        readConfusion(j, out.eval);
        return true;
    }
    if (type == "layer_times") {
        out.kind = MetricsLine::Kind::LayerTimes;
        out.step.step = countIn(j, "step");
        // Both lists of numbers, one per layer, and as many of each: anything else is not a profile.
        auto times = [&](const char* k, std::vector<double>& into) {
            auto it = j.find(k);
            if (it == j.end() || !it->is_array() || it->size() > 65536) return false;
            for (const auto& v : *it) {
                if (!v.is_number() || !(v.get<double>() >= 0)) return false;
                into.push_back(v.get<double>() / 1e3);
            }
            return true;
        };
        return times("forward_ms", out.layers.forward) && times("backward_ms", out.layers.backward) &&
               out.layers.forward.size() == out.layers.backward.size() && !out.layers.empty();
    }
    if (type != "step") return false;
    out.kind = MetricsLine::Kind::Step;
    StepMetrics& m = out.step;
    m.step = countIn(j, "step");
    m.totalSteps = countIn(j, "total_steps");
    m.epoch = numberIn(j, "epoch");
    m.loss = numberIn(j, "loss");
    m.accuracy = numberIn(j, "accuracy");
    m.lr = numberIn(j, "lr");
    m.examplesPerSec = numberIn(j, "examples_per_sec");
    m.runExamplesPerSec = numberIn(j, "run_examples_per_sec");
    m.stepSeconds = numberIn(j, "step_ms") / 1e3;
    m.dataWaitSeconds = numberIn(j, "data_wait_ms") / 1e3;
    m.computeSeconds = numberIn(j, "compute_ms") / 1e3;
    m.elapsedSeconds = numberIn(j, "elapsed_s");
    m.bytesMoved = countIn(j, "bytes_moved");
    m.examples = countIn(j, "examples");
    m.averaged = flag("averaged");
    m.processBytes = countIn(j, "process_bytes", -1);
    m.pusher = int(std::clamp<int64_t>(countIn(j, "pusher", -1), -1, 1 << 20));
    m.staleness = countIn(j, "staleness", -1);
    m.bubbleFraction = numberIn(j, "bubble_fraction", -1);
    m.stages = int(std::clamp<int64_t>(countIn(j, "stages", 0), 0, 4096));
    if (auto s = j.find("stage_blocks"); s != j.end() && s->is_array() && s->size() <= 4096)
        for (const auto& stage : *s) {
            if (!stage.is_array() || stage.size() > 65536) return false;
            m.stageBlocks.emplace_back();
            for (const auto& b : stage) {
                if (!b.is_array() || b.size() != 4 || !b[0].is_number_integer() || !b[1].is_string() ||
                    !b[2].is_number() || !b[3].is_number())
                    return false;
                m.stageBlocks.back().push_back(
                    {int(std::clamp<int64_t>(b[0].get<int64_t>(), 0, 1 << 20)), b[1].get<std::string>() == "F",
                     b[2].get<double>() / 1e3, b[3].get<double>() / 1e3});
            }
        }
    if (auto t = j.find("towers"); t != j.end() && t->is_array() && t->size() <= 4096)
        for (const auto& o : *t) {
            if (!o.is_object()) return false;
            TowerMetrics tm;
            tm.busyFraction = numberIn(o, "busy");
            tm.runBusyFraction = numberIn(o, "run_busy", -1);
            tm.loss = numberIn(o, "loss", std::nan(""));  // async: only the pusher has one
            tm.accuracy = numberIn(o, "accuracy", std::nan(""));
            TowerPhases& p = tm.phases;
            p.dataWait = numberIn(o, "data_wait_ms") / 1e3;
            p.forward = numberIn(o, "forward_ms") / 1e3;
            p.backward = numberIn(o, "backward_ms") / 1e3;
            p.reduce = numberIn(o, "reduce_ms") / 1e3;
            p.wait = numberIn(o, "wait_ms") / 1e3;
            p.apply = numberIn(o, "apply_ms") / 1e3;
            p.straggle = numberIn(o, "straggle_ms") / 1e3;
            p.other = numberIn(o, "other_ms") / 1e3;
            m.towers.push_back(tm);
        }
    return true;
}

namespace {
// NaN (a double NVML could not read) and -1 (such a byte count) become null.
nlohmann::json orNull(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
nlohmann::json orNull(int64_t v) { return v >= 0 ? nlohmann::json(v) : nlohmann::json(nullptr); }
}  // namespace

void MetricsFile::onDeviceSamples(const std::vector<DeviceSample>& samples) {
    if (samples.empty()) return;
    std::string lines;  // written as one piece: a reader tailing the file sees whole batches
    for (const DeviceSample& d : samples) {
        if (!lines.empty()) lines += '\n';
        lines += nlohmann::json{{"type", "device"},
                                {"t", d.t},
                                {"time_unix", d.timeUnix},
                                {"index", d.index},
                                {"name", d.name},
                                {"util_gpu", orNull(d.utilGpu)},
                                {"util_mem", orNull(d.utilMem)},
                                {"mem_used_bytes", orNull(d.memUsed)},
                                {"mem_total_bytes", orNull(d.memTotal)},
                                {"power_w", orNull(d.powerW)},
                                {"temp_c", orNull(d.tempC)},
                                {"sm_clock_mhz", orNull(d.smClockMHz)},
                                {"pcie_tx_mbps", orNull(d.pcieTxMBps)},
                                {"pcie_rx_mbps", orNull(d.pcieRxMBps)}}
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // the name is the driver's
    }
    write(lines);
}

bool lastLayerTimes(std::istream& in, MetricsLine& out, int64_t limit) {
    return lastLineTaken(in, [&](std::string_view line) {
        MetricsLine m;
        if (line.find("\"layer_times\"") == std::string_view::npos || !parseMetricsLine(std::string(line), m) ||
            m.kind != MetricsLine::Kind::LayerTimes)
            return false;
        out = std::move(m);
        return true;
    }, limit);
}

std::string metricsUpToCheckpoint(std::istream& in, int64_t lastStep, std::vector<MetricsLine>* past) {
    std::string kept, line;
    MetricsLine m;
    while (std::getline(in, line)) {
        const nlohmann::json j = parseJsonOrDiscard(line);
        if (j.is_object() && numberIn(j, "step", -HUGE_VAL) > double(lastStep)) break;
        const bool read = parseMetricsJson(j, m);
        if (read && m.kind == MetricsLine::Kind::State && !m.state.empty() && m.state != "loading" &&
            m.state != "running")
            continue;  // no longer its ending
        kept += line + "\n";
        if (past && read && (m.kind == MetricsLine::Kind::Step || m.kind == MetricsLine::Kind::Eval))
            past->push_back(std::move(m));
    }
    return kept;
}

}  // namespace tb
