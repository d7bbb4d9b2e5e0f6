// RunControl: start/pause/resume/single-step/stop of a running engine, safe from any thread at
// any moment. The engine asks once per step (awaitStep); nothing else is interrupted, so a
// paused run resumes exactly where it was and produces the same numbers as one never paused.
#pragma once
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
    bool aborted() const;
    bool paused() const;
    bool stopped() const;

    // Engine side: blocks while paused (unless a single step was granted); false once stopped.
    bool awaitStep();

private:
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    bool paused_ = false, stopped_ = false, aborted_ = false;
    int granted_ = 0;    // single steps allowed while paused
};

}  // namespace tb
