#include "engine/event_file.hpp"

namespace tb {

EventFile::EventFile(const std::string& folder, int64_t resumeStep)
    : out_(folder, resumeStep), lastFlush_(std::chrono::steady_clock::now()) {}

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
    out_.scalars(m.step, {{"loss", m.loss}, {"accuracy", m.accuracy}, {"learning_rate", m.lr},
                          {"examples_per_sec", m.examplesPerSec}});
    for (size_t i = 0; i < m.towers.size(); ++i) {
        if (m.pusher >= 0 && int(i) != m.pusher) continue;  // async: only the pusher was measured
        const TowerPhases& p = m.towers[i].phases;
        const std::string t = "tower" + std::to_string(i) + "/";
        out_.scalars(m.step, {{t + "data_wait_ms", p.dataWait * 1e3},
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
    out_.scalars(r.step, {{r.split + "/accuracy", r.accuracy}, {r.split + "/loss", r.loss}});
    out_.flush();
}

}  // namespace tb
