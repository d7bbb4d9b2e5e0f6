#include "util/fork_join.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "util/compute_thread.hpp"

namespace tb {

ForkJoin::ForkJoin(int threads) {
    for (int w = 1; w < std::max(1, threads); ++w) team_.emplace_back([this, w] { work(w); });
}

ForkJoin::~ForkJoin() {
    {
        std::lock_guard<std::mutex> lk(mutex_);
        stop_ = true;
    }
    startCv_.notify_all();
    for (std::thread& t : team_) t.join();
}

void ForkJoin::share(int worker) {
    const size_t n = size_t(threads()), begin = count_ * size_t(worker) / n, end = count_ * size_t(worker + 1) / n;
    if (begin == end) return;
    try {
        (*job_)(begin, end, worker);
    } catch (...) {
        std::lock_guard<std::mutex> lk(mutex_);
        if (!error_) error_ = std::current_exception();
    }
}

void ForkJoin::work(int worker) {
    enterComputeThread();  // the jobs are the loader's float arithmetic, as on the loader thread
    uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lk(mutex_);
            startCv_.wait(lk, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
        }
        share(worker);
        std::lock_guard<std::mutex> lk(mutex_);
        if (--running_ == 0) doneCv_.notify_one();
    }
}

void ForkJoin::run(size_t count, const std::function<void(size_t, size_t, int)>& job) {
    {
        std::lock_guard<std::mutex> lk(mutex_);
        job_ = &job;
        count_ = count;
        running_ = int(team_.size());
        error_ = nullptr;
        ++generation_;
    }
    startCv_.notify_all();
    share(0);
    std::unique_lock<std::mutex> lk(mutex_);
    doneCv_.wait(lk, [&] { return running_ == 0; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace tb
