// ObserverHub: hands engine events to observers on a thread of its own, so a slow observer
// (a window repainting) never stalls training. When `capacity` events wait, the oldest step
// report, device sample or decision grid is dropped for the observers that allow it (counted:
// dropped()); state changes and evaluations never are. Lossless observers (files:
// TrainingObserver::lossless) still receive every event: it stays queued for them, and once
// 4 x capacity wait the engine is held back until the queue is down to capacity, so the metrics
// file never misses a step and memory stays bounded. An observer that throws is not called again;
// its error is kept for the engine to end the run with (error()), instead of ending the process.
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
    struct Queued {
        Event event;
        bool everyone = true;  // false: dropped for the observers that allow it, kept for the lossless
    };
    void push(Event e);
    void run();

    std::vector<TrainingObserver*> observers_;
    std::vector<bool> failed_;  // per observer: threw once, not called again
    size_t capacity_;
    mutable std::mutex mutex_;
    std::condition_variable wake_, idle_, room_;
    std::deque<Queued> queue_;
    bool anyLossless_ = false;
    bool busy_ = false, closing_ = false;
    int64_t dropped_ = 0;
    std::string error_;
    std::thread thread_;
};

}  // namespace tb
