#include "parallel/run_control.hpp"
#include "util/elapsed.hpp"

#include <algorithm>

namespace tb {

void RunControl::pause() {
    std::lock_guard lock(mutex_);
    paused_ = true;
}

void RunControl::resume() {
    {
        std::lock_guard lock(mutex_);
        paused_ = false;
        granted_ = 0;
    }
    changed_.notify_all();
}

void RunControl::stepOnce() {
    {
        std::lock_guard lock(mutex_);
        paused_ = true;
        ++granted_;
    }
    changed_.notify_all();
}

void RunControl::stop() {
    {
        std::lock_guard lock(mutex_);
        stopped_ = true;
    }
    changed_.notify_all();
}

void RunControl::abort() {
    {
        std::lock_guard lock(mutex_);
        aborted_ = stopped_ = true;
    }
    changed_.notify_all();
}

void RunControl::setPace(double stepsPerSecond) {
    {
        std::lock_guard lock(mutex_);
        pace_ = std::max(0.0, stepsPerSecond);
        nextSlot_ = Clock::now();  // a new pace starts now, not where the old one would have
    }
    changed_.notify_all();
}

void RunControl::setParticipants(int n) {
    std::lock_guard lock(mutex_);
    participants_ = std::max(1, n);
}

bool RunControl::aborted() const {
    std::lock_guard lock(mutex_);
    return aborted_;
}

bool RunControl::paused() const {
    std::lock_guard lock(mutex_);
    return paused_;
}

bool RunControl::stopped() const {
    std::lock_guard lock(mutex_);
    return stopped_;
}

bool RunControl::holds() const {
    std::lock_guard lock(mutex_);
    return paused_ || stopped_ || pace_ > 0;
}

double RunControl::heldSeconds() const {
    std::lock_guard lock(mutex_);
    const double open = waiting_ >= participants_ ? secondsSince(heldSince_) : 0;
    return held_ + open;
}

void RunControl::enterWait() {
    if (++waiting_ == participants_) heldSince_ = Clock::now();
}

void RunControl::leaveWait() {
    if (waiting_-- == participants_) held_ += secondsSince(heldSince_);
}

bool RunControl::awaitStep() {
    std::unique_lock lock(mutex_);
    enterWait();
    for (;;) {
        changed_.wait(lock, [&] { return stopped_ || !paused_ || granted_ > 0; });
        if (stopped_) break;
        if (pace_ <= 0 || (paused_ && granted_ > 0)) break;  // a single step is never held back
        // Paced: this step starts at the next free slot; a change of pace or a pause wakes us
        // to look again.
        const auto now = Clock::now();
        if (nextSlot_ <= now) {
            nextSlot_ = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / pace_));
            break;
        }
        changed_.wait_until(lock, nextSlot_);
    }
    leaveWait();
    if (stopped_) return false;
    if (paused_) --granted_;
    return true;
}

}  // namespace tb
