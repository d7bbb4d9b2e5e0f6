#include "stop_signals.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "util/compute_thread.hpp"

namespace {
// What the handler may touch: lock-free atomics and plain ints set before it is installed.
std::atomic<int> firstSignal{0};
int wakeFd = -1;
char secondLine[256];  // written by the handler on a second signal
size_t secondLength = 0;
constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGUSR1};

extern "C" void onStopSignal(int sig) {
    int expected = 0;
    if (firstSignal.compare_exchange_strong(expected, sig)) {
        const char byte = 1;  // the destructor writes 0
        [[maybe_unused]] const ssize_t n = ::write(wakeFd, &byte, 1);
        return;
    }
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, secondLine, secondLength);
    ::_exit(128 + expected);
}
}  // namespace

const char* StopSignals::name(int signal) {
    return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : signal == SIGUSR1 ? "SIGUSR1" : "signal";
}

int StopSignals::received() const { return firstSignal.load(); }

StopSignals::StopSignals(const char* program, std::function<void(int)> onFirst) : onFirst_(std::move(onFirst)) {
    static_assert(std::atomic<int>::is_always_lock_free);
    if (::pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
        std::perror("stop signals: pipe");  // no reaction to signals: they end the process as before
        return;
    }
    firstSignal = 0;
    wakeFd = pipe_[1];
    secondLength = size_t(std::snprintf(secondLine, sizeof secondLine,
                                        "%s: signalled again: ending at once (no final evaluation, checkpoint or summary)\n",
                                        program));
    secondLength = std::min(secondLength, sizeof secondLine - 1);
    for (int i = 0; i < 3; ++i) {
        struct sigaction now = {};
        now.sa_handler = onStopSignal;
        sigemptyset(&now.sa_mask);
        now.sa_flags = SA_RESTART;  // the threads' reads and writes go on as if nothing happened
        sigaction(kSignals[i], nullptr, &before_[i]);
        if (before_[i].sa_handler != SIG_IGN) sigaction(kSignals[i], &now, nullptr);
    }
    thread_ = std::thread([this] { watch(); });
    // Only the watching thread takes them from here on: this thread, and every thread it starts
    // after, keeps computing undisturbed. Compute threads block every asynchronous signal
    // themselves (util/compute_thread.hpp: oneDNN's GEMM kernels run with rsp in the heap, where
    // a handler's frame corrupted it in 3 of 24 early stops with the stop signals open here).
    sigset_t stops;
    sigemptyset(&stops);
    for (int s : kSignals) sigaddset(&stops, s);
    pthread_sigmask(SIG_BLOCK, &stops, &blocked_);
}

StopSignals::~StopSignals() {
    if (!thread_.joinable()) return;
    done_ = true;
    const char wake = 0;  // not a signal's byte: the watcher returns at once
    [[maybe_unused]] const ssize_t n = ::write(pipe_[1], &wake, 1);
    thread_.join();
    for (int i = 0; i < 3; ++i)
        if (before_[i].sa_handler != SIG_IGN) sigaction(kSignals[i], &before_[i], nullptr);
    pthread_sigmask(SIG_SETMASK, &blocked_, nullptr);
    ::close(pipe_[0]);
    ::close(pipe_[1]);
}

void StopSignals::watch() {
    // This thread only waits, on a stack of its own: it takes every asynchronous signal, ours and
    // those of handlers other code installs (a profiler's SIGPROF, a child's SIGCHLD), which
    // compute threads refuse.
    const sigset_t async = tb::asynchronousSignals();
    pthread_sigmask(SIG_UNBLOCK, &async, nullptr);
    // It waits on the pipe alone: the destructor wakes it too. (It polled every 100 ms for the
    // destructor, and every refused command line waited out that poll: 90 ms of its 130 ms, and
    // some 80 s of the bad-input campaign's 1,800 runs.)
    pollfd p{pipe_[0], POLLIN, 0};
    for (;;) {
        if (::poll(&p, 1, -1) <= 0) continue;  // EINTR: a signal this thread took
        bool signalled = false;
        char byte;
        while (::read(pipe_[0], &byte, 1) == 1) signalled |= byte == 1;
        if (signalled) onFirst_(firstSignal.load());
        if (done_) return;
    }
}
