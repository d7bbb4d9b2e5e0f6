#include "engine/metrics_file.hpp"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "util/error.hpp"

namespace tb {

MetricsFile::MetricsFile(const std::string& path) : path_(path) {
    file_ = std::fopen(path.c_str(), "w");
    if (!file_) throw Error("--metrics: cannot create " + path + " (" + std::strerror(errno) + ")");
}

MetricsFile::~MetricsFile() { std::fclose(file_); }

void MetricsFile::write(const std::string& line) {
    std::fputs(line.c_str(), file_);
    std::fputc('\n', file_);
    std::fflush(file_);  // a reader tailing the file sees whole lines as they happen
}

void MetricsFile::onStateChanged(RunState s, const std::string& detail) {
    write(nlohmann::json{{"type", "state"}, {"state", toString(s)}, {"detail", detail}}.dump());
}

void MetricsFile::onStepEnd(const StepMetrics& m) {
    write(nlohmann::json{{"type", "step"},
                         {"step", m.step},
                         {"total_steps", m.totalSteps},
                         {"epoch", m.epoch},
                         {"loss", m.loss},
                         {"accuracy", m.accuracy},
                         {"lr", m.lr},
                         {"examples_per_sec", m.examplesPerSec},
                         {"step_ms", m.stepSeconds * 1e3},
                         {"data_wait_ms", m.dataWaitSeconds * 1e3},
                         {"compute_ms", m.computeSeconds * 1e3},
                         {"elapsed_s", m.elapsedSeconds}}
              .dump());
}

void MetricsFile::onEval(const EvalResult& r) {
    write(nlohmann::json{{"type", "eval"},
                         {"step", r.step},
                         {"split", r.split},
                         {"loss", r.loss},
                         {"accuracy", r.accuracy},
                         {"examples", r.examples},
                         {"ema", r.averagedWeights}}
              .dump());
}

}  // namespace tb
