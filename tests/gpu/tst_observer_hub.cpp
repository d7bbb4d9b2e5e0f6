// tst_observer_hub: the queue between the engine and its observers.
//   - a slow observer: when the queue is full the oldest step reports are dropped (and counted),
//     never a state change or an evaluation, and what is delivered stays in order
//   - flush() returns only once everything queued has been delivered
//   - an observer that throws is not called again, the others still are, and error() says why
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/observer_hub.hpp"
#include "plain_check.hpp"

namespace {

// Blocks in its first callback until released; records what it is given.
class Recorder final : public tb::TrainingObserver {
public:
    void onStateChanged(tb::RunState s, const std::string&) override { log('S', int(s)); }
    void onStepEnd(const tb::StepMetrics& m) override { log('T', int(m.step)); }
    void onEval(const tb::EvalResult& r) override { log('E', int(r.step)); }
    void release() { gate_ = true; }
    std::vector<std::pair<char, int>> seen() {
        std::lock_guard lock(m_);
        return seen_;
    }
    std::atomic<bool> slow{false};

private:
    void log(char kind, int n) {
        while (slow && !gate_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::lock_guard lock(m_);
        seen_.emplace_back(kind, n);
    }
    std::atomic<bool> gate_{false};
    std::mutex m_;
    std::vector<std::pair<char, int>> seen_;
};

class Thrower final : public tb::TrainingObserver {
public:
    void onStepEnd(const tb::StepMetrics&) override {
        ++calls;
        throw std::runtime_error("the disk is full");
    }
    int calls = 0;
};

tb::StepMetrics stepNo(int n) {
    tb::StepMetrics m;
    m.step = n;
    return m;
}

}  // namespace

int main() {
    {
        Recorder r;
        r.slow = true;
        tb::ObserverHub hub({&r}, 8);
        hub.onStateChanged(tb::RunState::Running, "");  // taken at once; the observer then blocks
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        for (int i = 1; i <= 40; ++i) {
            hub.onStepEnd(stepNo(i));
            if (i == 20) {
                tb::EvalResult e;
                e.step = 20;
                hub.onEval(e);
            }
        }
        hub.onStateChanged(tb::RunState::Finished, "");
        r.release();
        hub.flush();
        const auto seen = r.seen();
        int steps = 0, evals = 0, states = 0, last = 0;
        bool ordered = true;
        for (auto [kind, n] : seen) {
            if (kind == 'T') {
                ++steps;
                ordered = ordered && n > last;
                last = n;
            }
            evals += kind == 'E';
            states += kind == 'S';
        }
        std::printf("queue of 8, 40 steps to a blocked observer: %d delivered, %lld dropped, %d evaluation(s), %d states\n",
                    steps, (long long)hub.dropped(), evals, states);
        CHECK(evals == 1, "the evaluation was dropped");
        CHECK(states == 2, "a state change was dropped");
        CHECK(steps + hub.dropped() == 40, "%d delivered + %lld dropped != 40", steps, (long long)hub.dropped());
        CHECK(hub.dropped() > 0, "nothing was dropped with a queue of 8");
        CHECK(ordered, "step reports out of order");
        CHECK(!seen.empty() && seen.back().first == 'S', "the final state did not come last");
        CHECK(seen.back().first == 'S' && last == 40, "the newest step report (40) was dropped instead of an old one");
    }
    {
        Recorder r;
        tb::ObserverHub hub({&r});
        for (int i = 1; i <= 1000; ++i) hub.onStepEnd(stepNo(i));
        hub.flush();
        CHECK(r.seen().size() == 1000, "flush returned with %zu of 1000 delivered", r.seen().size());
    }
    {
        Thrower bad;
        Recorder good;
        tb::ObserverHub hub({&bad, &good});
        for (int i = 1; i <= 5; ++i) hub.onStepEnd(stepNo(i));
        hub.flush();
        CHECK(bad.calls == 1, "a throwing observer was called %d times", bad.calls);
        CHECK(good.seen().size() == 5, "the other observer got %zu of 5", good.seen().size());
        CHECK(hub.error() == "the disk is full", "error() is '%s'", hub.error().c_str());
    }
    return tbcheck::exitStatus();
}
