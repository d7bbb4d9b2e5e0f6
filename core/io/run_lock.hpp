// RunLock: who trains a run folder now, by a lock rather than a process id. A pid outlives its
// process (an exited, unreaped child still answers kill(pid, 0); in a container without an init
// it may never be reaped) and means nothing on another host. So the trainer holds
//   DIR/.lock        an exclusive flock(2), which the kernel drops when the process ends, however
//                    it ends (kill -9, a crash, before any reaping): the answer on this host;
//   DIR/lease.json   {"host", "pid", "renewed": Unix seconds}, rewritten every kLeaseRenewSeconds
//                    by a thread: the answer across hosts sharing the folder (NFS and other shared
//                    file systems may not carry flocks between hosts). A lease not renewed for
//                    kLeaseStaleSeconds is stale: its holder is taken to be gone.
// A folder is held when its flock is taken, or when a fresh lease names another host.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace tb {

inline constexpr int kLeaseRenewSeconds = 5;
inline constexpr int kLeaseStaleSeconds = 30;

// The holder of a run folder's lock, as its lease names it.
struct RunHolder {
    std::string host;
    int64_t pid = 0;
    int64_t renewedSecondsAgo = 0;
    std::string describe() const;  // "process 123 on host h (its lease renewed 2 s ago)"
};

class RunLock {
public:
    // Takes `dir`'s lock, or throws tb::Error beginning with `origin` naming who holds it.
    RunLock(const std::string& dir, const std::string& origin);
    ~RunLock();  // drops the lock and the lease
    RunLock(const RunLock&) = delete;
    RunLock& operator=(const RunLock&) = delete;

    // Who holds `dir` now (none: no one, or only a stale lease); asks without taking it for longer
    // than a probe.
    static std::optional<RunHolder> holder(const std::string& dir);

private:
    void renew();
    std::string dir_;
    int fd_ = -1;
    std::thread renewer_;
    std::mutex mutex_;
    std::condition_variable wake_;
    bool stop_ = false;
};

}  // namespace tb
