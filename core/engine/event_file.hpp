// EventFile: the run as TensorBoard shows it, an observer over tensorflow/'s EventWriter. Scalars:
//   loss, accuracy, learning_rate, examples_per_sec            every step (async: every update)
//   tower<i>/{data_wait,forward,backward,straggle,wait,reduce,apply}_ms
//   validation/accuracy, validation/loss, test/accuracy, test/loss   at each evaluation
// Flushed at most once a second and at every state change, so a follower sees the run live.
#pragma once
#include <chrono>
#include <string>

#include "engine/observer.hpp"
#include "tensorflow/event_writer.hpp"

namespace tb {

class EventFile final : public TrainingObserver {
public:
    // A resumed run (resumeStep >= 0) adds a file of its own beside the first (EventWriter).
    explicit EventFile(const std::string& folder, int64_t resumeStep = -1);
    const std::string& path() const { return out_.path(); }
    void onStateChanged(RunState, const std::string&) override;
    void onStepEnd(const StepMetrics&) override;
    void onEval(const EvalResult&) override;
    bool lossless() const override { return true; }  // a file: every step

private:
    void maybeFlush();
    EventWriter out_;
    std::chrono::steady_clock::time_point lastFlush_;
};

}  // namespace tb
