// RunControl: start/pause/resume/single-step/stop of a running engine, and a pace (slow motion,
// for watching the towers step by step), safe from any thread at any moment. The engine asks
// once per step (awaitStep); nothing else is interrupted, so a paused or paced run resumes
// exactly where it was and produces the same numbers as one never held.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace tb {

class RunControl {
public:
    void pause();
    void resume();
    void stepOnce();     // while paused: allow exactly one more step, then stay paused
    void stop();         // also releases a paused engine
    void abort();        // stop, and skip the final evaluation (the user is leaving)
    // At most this many steps start per second (async: updates, over all towers); 0: no limit.
    void setPace(double stepsPerSecond);
    bool aborted() const;
    bool paused() const;
    bool stopped() const;
    // Whether awaitStep may hold the next step back now (paused, stopped or paced): an engine that
    // runs steps ahead of their reports settles them before it asks.
    bool holds() const;

    // Engine side: blocks while paused (unless a single step was granted) or until the pace
    // allows the next step; false once stopped. `participants` threads ask (the towers of an
    // asynchronous run, else 1): the run counts as held while all of them wait here.
    bool awaitStep();
    void setParticipants(int n);
    // Wall time during which every participant waited in awaitStep (pauses, slow motion): not
    // training time.
    double heldSeconds() const;

private:
    using Clock = std::chrono::steady_clock;
    void enterWait();    // with mutex_ held
    void leaveWait();

    mutable std::mutex mutex_;
    std::condition_variable changed_;
    bool paused_ = false, stopped_ = false, aborted_ = false;
    int granted_ = 0;    // single steps allowed while paused
    double pace_ = 0;    // steps per second, 0: unpaced
    Clock::time_point nextSlot_{};  // the earliest start of the next paced step
    int participants_ = 1, waiting_ = 0;
    Clock::time_point heldSince_{};
    double held_ = 0;
};

}  // namespace tb
