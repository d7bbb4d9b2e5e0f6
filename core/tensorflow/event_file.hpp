// EventFile: a run as TensorBoard reads it. `tensorboard --logdir` on the runs folder shows each
// run folder as a run: an events.out.tfevents.<seconds>.<host> file (TFRecord framing, one
// tensorflow.Event per record, the first saying "brain.Event:2") with scalars
//   loss, accuracy, learning_rate, examples_per_sec            every step (async: every update)
//   tower<i>/{data_wait,forward,backward,straggle,wait,reduce,apply}_ms
//   validation/accuracy, validation/loss, test/accuracy, test/loss   at each evaluation
// Records are flushed at most once a second and at every state change, so a follower sees them
// while the run goes on. A resumed run adds a file of its own beside the first.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "engine/observer.hpp"
#include "io/tfrecord.hpp"

namespace tb {

class EventFile final : public TrainingObserver {
public:
    // Throws tb::Error when it cannot be created. A resumed run (resumeStep >= 0) starts its file
    // with SessionLog START just after that step, TensorBoard's sign to drop what earlier files
    // recorded from there on (a crashed run's steps past its checkpoint).
    explicit EventFile(const std::string& folder, int64_t resumeStep = -1);
    const std::string& path() const { return out_.path(); }
    void onStateChanged(RunState, const std::string&) override;
    void onStepEnd(const StepMetrics&) override;
    void onEval(const EvalResult&) override;

private:
    void write(int64_t step, std::initializer_list<std::pair<std::string, double>> values);
    void maybeFlush();
    TFRecordWriter out_;
    std::chrono::steady_clock::time_point lastFlush_;
};

}  // namespace tb
