#include "parallel/statistics_meeting.hpp"

#include <cstring>
#include <exception>
#include <string>

#include "util/error.hpp"

namespace tb {

StatisticsMeeting::StatisticsMeeting(int ranks, AcrossProcesses acrossProcesses)
    : published_(size_t(ranks), nullptr), acrossProcesses_(std::move(acrossProcesses)) {
    if (ranks < 1) throw Error("a statistics meeting needs at least one rank, got " + std::to_string(ranks));
}

bool StatisticsMeeting::sum(int rank, float* data, size_t count) {
    std::unique_lock lock(mutex_);
    if (aborted_) return false;
    published_[size_t(rank)] = data;
    if (++arrived_ < ranks()) {
        const uint64_t round = round_;
        met_.wait(lock, [&] { return round_ != round || aborted_; });
        return round_ != round;
    }
    // The last to come: the ranks' sums in rank order (whichever thread came last, the same
    // floats), then the processes', written back to every rank.
    total_.assign(count, 0.f);
    for (const float* theirs : published_)
        for (size_t i = 0; i < count; ++i) total_[i] += theirs[i];
    if (acrossProcesses_) {
        try {
            acrossProcesses_(total_.data(), count);
        } catch (...) {  // the others must not wait for a sum that will not come
            aborted_ = true;
            met_.notify_all();
            throw;
        }
    }
    for (float* theirs : published_) std::memcpy(theirs, total_.data(), count * sizeof(float));
    arrived_ = 0;
    ++round_;
    met_.notify_all();
    return true;
}

void StatisticsMeeting::abort() {
    {
        std::lock_guard lock(mutex_);
        aborted_ = true;
    }
    met_.notify_all();
}

}  // namespace tb
