#include "parallel/run_control.hpp"

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

bool RunControl::awaitStep() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return stopped_ || !paused_ || granted_ > 0; });
    if (stopped_) return false;
    if (paused_) --granted_;
    return true;
}

}  // namespace tb
