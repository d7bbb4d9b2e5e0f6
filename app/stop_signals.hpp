// SIGINT, SIGTERM and SIGUSR1 as a request to stop: the run ends at the end of the step in progress and
// writes what a Stop writes (final evaluation, checkpoint, final state line, summary); a second
// signal ends the process at once. The exit status is 128 + the first signal (130, 143, 138), as a
// shell reports a program the signal killed, so scripts see the run did not end on its own.
// SIGUSR1 is for runs of several processes: mpirun passes it on to every process, whereas it
// answers SIGTERM and SIGINT by killing the whole job a few seconds later (Open MPI's mpirun(1)),
// which would cut a final evaluation short.
//
// The handler only records the signal and writes a byte to a pipe (all a handler may safely
// do); a thread of its own reads the pipe and reacts, so the reaction may take locks or post to
// Qt's event loop. Blocking the signals and waiting for them instead would not do: libraries
// may start threads before main (OpenBLAS's pool did), and any thread that does not block a signal may
// be the one the kernel hands it to.
#pragma once
#include <atomic>
#include <csignal>
#include <functional>
#include <thread>

class StopSignals {
public:
    // Handles SIGINT, SIGTERM and SIGUSR1 until destroyed (then the earlier handling is back). A signal
    // the process was started ignoring (`nohup`, a shell's background job) stays ignored.
    // The first signal calls onFirst(signal) on the watching thread; a second one prints a line
    // on stderr and ends the process with 128 + the first signal. One instance at a time.
    StopSignals(const char* program, std::function<void(int)> onFirst);
    ~StopSignals();
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;

    int received() const;                 // 0, or the first signal
    int exitStatus() const { return 128 + received(); }
    static const char* name(int signal);  // "SIGINT", "SIGTERM", "SIGUSR1"

private:
    void watch();
    std::function<void(int)> onFirst_;
    int pipe_[2] = {-1, -1};
    struct sigaction before_[3] = {};
    sigset_t blocked_{};  // the constructing thread's signal mask before (restored at the end)
    std::atomic<bool> done_{false};
    std::thread thread_;
};
