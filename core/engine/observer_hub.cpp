#include "engine/observer_hub.hpp"

#include <algorithm>

namespace tb {

ObserverHub::ObserverHub(std::vector<TrainingObserver*> observers, size_t capacity)
    : observers_(std::move(observers)), failed_(observers_.size(), false), capacity_(std::max<size_t>(capacity, 2)) {
    anyLossless_ = std::any_of(observers_.begin(), observers_.end(), [](const TrainingObserver* o) { return o->lossless(); });
    thread_ = std::thread([this] { run(); });
}

ObserverHub::~ObserverHub() {
    {
        std::lock_guard lock(mutex_);
        closing_ = true;
    }
    wake_.notify_all();
    room_.notify_all();
    thread_.join();
}

void ObserverHub::push(Event e) {
    {
        std::unique_lock lock(mutex_);
        // Lossless observers behind: hold the engine back (the queue keeps their events).
        room_.wait(lock, [&] { return queue_.size() < 4 * capacity_ || closing_; });
        if (queue_.size() >= capacity_) {
            auto step = std::find_if(queue_.begin(), queue_.end(), [](const Queued& q) {
                return q.everyone && (std::holds_alternative<StepMetrics>(q.event) ||
                                      std::holds_alternative<std::vector<DeviceSample>>(q.event) ||
                                      std::holds_alternative<DecisionGrid>(q.event));
            });
            if (step != queue_.end()) {
                ++dropped_;
                if (anyLossless_) step->everyone = false;
                else queue_.erase(step);
            }
        }
        queue_.push_back({std::move(e), true});
    }
    wake_.notify_one();
}

void ObserverHub::onStateChanged(RunState s, const std::string& detail) { push(State{s, detail}); }
void ObserverHub::onStepEnd(const StepMetrics& m) { push(m); }
void ObserverHub::onEval(const EvalResult& r) { push(r); }
void ObserverHub::onDeviceSamples(const std::vector<DeviceSample>& s) { push(s); }
void ObserverHub::onDecisionGrid(const DecisionGrid& g) { push(g); }

void ObserverHub::flush() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

int64_t ObserverHub::dropped() const {
    std::lock_guard lock(mutex_);
    return dropped_;
}

std::string ObserverHub::error() const {
    std::lock_guard lock(mutex_);
    return error_;
}

void ObserverHub::run() {
    std::unique_lock lock(mutex_);
    for (;;) {
        wake_.wait(lock, [&] { return closing_ || !queue_.empty(); });
        if (queue_.empty()) {
            if (closing_) return;
            continue;
        }
        Queued q = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
        if (queue_.size() < capacity_) room_.notify_all();
        lock.unlock();
        const Event& e = q.event;
        std::string failure;
        for (size_t i = 0; i < observers_.size(); ++i) {
            if (failed_[i]) continue;
            TrainingObserver* o = observers_[i];
            if (!q.everyone && !o->lossless()) continue;  // dropped for it
            try {
                if (auto* s = std::get_if<State>(&e)) o->onStateChanged(s->state, s->detail);
                else if (auto* m = std::get_if<StepMetrics>(&e)) o->onStepEnd(*m);
                else if (auto* d = std::get_if<std::vector<DeviceSample>>(&e)) o->onDeviceSamples(*d);
                else if (auto* g = std::get_if<DecisionGrid>(&e)) o->onDecisionGrid(*g);
                else o->onEval(std::get<EvalResult>(e));
            } catch (const std::exception& ex) {
                failed_[i] = true;
                if (failure.empty()) failure = ex.what();
            } catch (...) {
                failed_[i] = true;
                if (failure.empty()) failure = "an observer of the run failed";
            }
        }
        lock.lock();
        if (!failure.empty() && error_.empty()) error_ = failure;
        busy_ = false;
        if (queue_.empty()) idle_.notify_all();
    }
}

}  // namespace tb
