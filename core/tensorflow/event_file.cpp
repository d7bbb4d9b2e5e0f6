#include "tensorflow/event_file.hpp"

#include <unistd.h>

#include <cmath>

#include "tensorflow/tensorflow.pb.h"
#include "util/system_text.hpp"

namespace tb {

namespace {

double now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string fileName(const std::string& folder) {
    // TensorBoard orders a folder's files by name: seconds, then a pid against same-second twins.
    return folder + "/events.out.tfevents." + std::to_string(int64_t(now())) + "." + hostName() + "." +
           std::to_string(::getpid());
}

}  // namespace

EventFile::EventFile(const std::string& folder, int64_t resumeStep)
    : out_(fileName(folder)), lastFlush_(std::chrono::steady_clock::now()) {
    tensorflow::Event version;
    version.set_wall_time(now());
    version.set_file_version("brain.Event:2");
    out_.write(version.SerializeAsString());
    if (resumeStep >= 0) {
        tensorflow::Event start;
        start.set_wall_time(now());
        start.set_step(resumeStep + 1);
        start.mutable_session_log()->set_status(tensorflow::SessionLog::START);
        out_.write(start.SerializeAsString());
    }
    out_.flush();
}

void EventFile::write(int64_t step, std::initializer_list<std::pair<std::string, double>> values) {
    tensorflow::Event e;
    e.set_wall_time(now());
    e.set_step(step);
    for (const auto& [tag, v] : values) {
        if (!std::isfinite(v)) continue;  // an async tower that did not push has no loss
        tensorflow::Summary::Value* s = e.mutable_summary()->add_value();
        s->set_tag(tag);
        s->set_simple_value(float(v));
    }
    if (e.summary().value_size() > 0) out_.write(e.SerializeAsString());
}

void EventFile::maybeFlush() {
    const auto t = std::chrono::steady_clock::now();
    if (t - lastFlush_ < std::chrono::seconds(1)) return;
    out_.flush();
    lastFlush_ = t;
}

void EventFile::onStateChanged(RunState, const std::string&) {
    out_.flush();
    lastFlush_ = std::chrono::steady_clock::now();
}

void EventFile::onStepEnd(const StepMetrics& m) {
    write(m.step, {{"loss", m.loss}, {"accuracy", m.accuracy}, {"learning_rate", m.lr}, {"examples_per_sec", m.examplesPerSec}});
    for (size_t i = 0; i < m.towers.size(); ++i) {
        const TowerPhases& p = m.towers[i].phases;
        const std::string t = "tower" + std::to_string(i) + "/";
        if (m.pusher >= 0 && int(i) != m.pusher) continue;  // async: only the pusher was measured
        write(m.step, {{t + "data_wait_ms", p.dataWait * 1e3},
                       {t + "forward_ms", p.forward * 1e3},
                       {t + "backward_ms", p.backward * 1e3},
                       {t + "straggle_ms", p.straggle * 1e3},
                       {t + "wait_ms", p.wait * 1e3},
                       {t + "reduce_ms", p.reduce * 1e3},
                       {t + "apply_ms", p.apply * 1e3}});
    }
    maybeFlush();
}

void EventFile::onEval(const EvalResult& r) {
    write(r.step, {{r.split + "/accuracy", r.accuracy}, {r.split + "/loss", r.loss}});
    out_.flush();
}

}  // namespace tb
