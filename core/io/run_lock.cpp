#include "io/run_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "util/atomic_file.hpp"
#include "util/error.hpp"
#include "util/system_text.hpp"

namespace fs = std::filesystem;

namespace tb {
namespace {

int64_t unixNow() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The lease as written, if it parses.
std::optional<RunHolder> readLease(const std::string& dir) {
    std::ifstream in(dir + "/lease.json");
    if (!in) return std::nullopt;
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_object() || !j.contains("host") || !j["host"].is_string() || !j.contains("renewed") ||
        !j["renewed"].is_number_integer())
        return std::nullopt;
    RunHolder h;
    h.host = j["host"].get<std::string>();
    h.pid = j.contains("pid") && j["pid"].is_number_integer() ? j["pid"].get<int64_t>() : 0;
    h.renewedSecondsAgo = unixNow() - j["renewed"].get<int64_t>();
    return h;
}

// Tries the flock for an instant (probes and a starting trainer may meet: a few tries).
int tryLock(const std::string& path, bool keep) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return -2;  // a folder we cannot write: no lock to learn from
    for (int attempt = 0; attempt < 20; ++attempt) {
        if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
            if (!keep) {
                ::flock(fd, LOCK_UN);
                ::close(fd);
                return 0;
            }
            return fd;
        }
        if (errno != EWOULDBLOCK && errno != EINTR) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::close(fd);
    return -1;
}

}  // namespace

std::string RunHolder::describe() const {
    return "process " + std::to_string(pid) + " on host " + host + " (its lease renewed " +
           std::to_string(renewedSecondsAgo) + " s ago)";
}

std::optional<RunHolder> RunLock::holder(const std::string& dir) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return std::nullopt;
    const std::optional<RunHolder> lease = readLease(dir);
    const int probe = tryLock(dir + "/.lock", false);
    if (probe == -1) {  // the flock is held: someone on this host (or one the file system shares it with)
        RunHolder h = lease ? *lease : RunHolder{hostName(), 0, 0};
        return h;
    }
    // Free here: only another host's fresh lease holds it.
    if (lease && lease->host != hostName() && lease->renewedSecondsAgo <= kLeaseStaleSeconds) return lease;
    return std::nullopt;
}

RunLock::RunLock(const std::string& dir, const std::string& origin) : dir_(dir) {
    if (const std::optional<RunHolder> lease = readLease(dir);
        lease && lease->host != hostName() && lease->renewedSecondsAgo <= kLeaseStaleSeconds)
        throw Error(origin + ": " + dir + " is being trained by " + lease->describe() + "; a lease is stale after " +
                    std::to_string(kLeaseStaleSeconds) + " s");
    fd_ = tryLock(dir + "/.lock", true);
    if (fd_ == -2) throw Error(origin + ": cannot create " + dir + "/.lock (" + std::strerror(errno) + ")");
    if (fd_ < 0) {
        const std::optional<RunHolder> lease = readLease(dir);
        throw Error(origin + ": " + dir + " is being trained by " +
                    (lease ? lease->describe() : std::string("another process on this host")) + " (it holds " + dir +
                    "/.lock)");
    }
    renew();
    renewer_ = std::thread([this] {
        std::unique_lock lk(mutex_);
        while (!wake_.wait_for(lk, std::chrono::seconds(kLeaseRenewSeconds), [this] { return stop_; })) {
            lk.unlock();
            try {
                renew();
            } catch (const Error&) {  // a full disk: the flock still guards this host
            }
            lk.lock();
        }
    });
}

RunLock::~RunLock() {
    {
        std::lock_guard lk(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    if (renewer_.joinable()) renewer_.join();
    std::error_code ec;
    fs::remove(dir_ + "/lease.json", ec);
    if (fd_ >= 0) ::close(fd_);  // (the flock goes with the descriptor)
}

void RunLock::renew() {
    const nlohmann::json lease = {{"host", hostName()}, {"pid", int64_t(::getpid())}, {"renewed", unixNow()}};
    writeFileAtomically(dir_ + "/lease.json", lease.dump() + "\n");
}

}  // namespace tb
