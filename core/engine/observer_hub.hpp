// ObserverHub: hands engine events to observers on a thread of its own, so a slow observer
// (a window repainting, a disk) never stalls training. The queue is bounded: when it is full,
// the oldest step reports, device samples and decision grids are dropped (and counted); state changes and
// evaluations never are. An observer that throws is not called again; its error is kept for the
// engine to end the run with (error()), instead of ending the process.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "engine/observer.hpp"

namespace tb {

class ObserverHub final : public TrainingObserver {
public:
    explicit ObserverHub(std::vector<TrainingObserver*> observers, size_t capacity = 4096);
    ~ObserverHub() override;  // delivers everything still queued, then joins
    void onStateChanged(RunState, const std::string& detail) override;
    void onStepEnd(const StepMetrics&) override;
    void onEval(const EvalResult&) override;
    void onDeviceSamples(const std::vector<DeviceSample>&) override;  // safe from any thread
    void onDecisionGrid(const DecisionGrid&) override;
    void flush();             // waits until every queued event has been delivered
    int64_t dropped() const;
    std::string error() const;  // the first observer failure, one sentence; empty while none

private:
    struct State {
        RunState state;
        std::string detail;
    };
    using Event = std::variant<State, StepMetrics, EvalResult, std::vector<DeviceSample>, DecisionGrid>;
    void push(Event e);
    void run();

    std::vector<TrainingObserver*> observers_;
    std::vector<bool> failed_;  // per observer: threw once, not called again
    size_t capacity_;
    mutable std::mutex mutex_;
    std::condition_variable wake_, idle_;
    std::deque<Event> queue_;
    bool busy_ = false, closing_ = false;
    int64_t dropped_ = 0;
    std::string error_;
    std::thread thread_;
};

}  // namespace tb
