// ForkJoin: a fixed team of threads that runs one job at a time over the indices [0, count), the
// calling thread taking part, and returns when every index is done (the loader threads that decode
// a streamed batch). Each worker takes a contiguous share, so what index i writes does not depend
// on the team's size. The first exception a worker throws is rethrown by run().
#pragma once
#include <condition_variable>
#include <cstdint>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tb {

class ForkJoin {
public:
    // `threads` workers in all, the caller of run() one of them (1: the caller alone).
    explicit ForkJoin(int threads);
    ~ForkJoin();
    ForkJoin(const ForkJoin&) = delete;
    ForkJoin& operator=(const ForkJoin&) = delete;

    int threads() const { return int(team_.size()) + 1; }
    // job(begin, end, worker) for the workers' shares of [0, count); worker 0 is the caller.
    void run(size_t count, const std::function<void(size_t, size_t, int)>& job);

private:
    void work(int worker);
    void share(int worker);

    std::vector<std::thread> team_;
    std::mutex mutex_;
    std::condition_variable startCv_, doneCv_;
    const std::function<void(size_t, size_t, int)>* job_ = nullptr;
    size_t count_ = 0;
    uint64_t generation_ = 0;  // one per run(): a worker that saw it has started that job
    int running_ = 0;          // workers not yet done with the current job
    bool stop_ = false;
    std::exception_ptr error_;
};

}  // namespace tb
