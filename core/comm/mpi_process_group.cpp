// The ProcessGroup of an MPI launch (mpirun -np N towerbench-run ...): MPI_Allreduce on host
// buffers, in place where asked, in pieces of at most 2^26 floats (MPI counts are ints); one
// duplicated communicator per lane, so that concurrent collectives of a process's tower threads
// never meet the wrong partner (MPI_THREAD_MULTIPLE where there are several lanes). bf16
// all-reduces go as MPI_UINT16_T with a sum of our own (MPI has no bf16 type).
// Bounded waits: MPI's calls wait for as long as a peer takes, so a watchdog thread (c10d's
// watchdog does likewise for NCCL) beats to every other process on a communicator of its own
// every kBeatSeconds and ends the run when a peer has been silent kSilentSeconds, naming it and
// its machine: a process stopped (SIGSTOP, a debugger), hung in the kernel, or cut off, which no
// collective would ever report. A process that ends in order says so first (a last beat), so the
// others stop expecting it (the chief may evaluate for minutes while the others wait in
// MPI_Finalize). A process that dies is reported by mpirun ("mpirun noticed that process rank 1
// ... exited on signal 9"), which ends the others; mpirun itself killed leaves its processes
// orphaned, which the watchdog sees as its parent gone, and ends this one.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/process_group.hpp"
#include "util/error.hpp"

namespace tb {

namespace {

std::string mpiError(const char* call, int code) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    return std::string(call) + ": " + std::string(text, size_t(std::max(0, length)));
}

void check(const char* call, int code) {
    if (code != MPI_SUCCESS) throw Error(mpiError(call, code));
}

// MPI_User_function: inout[i] := bf16(in[i] + inout[i]), the sum in fp32.
void bf16Sum(void* in, void* inout, int* length, MPI_Datatype*) {
    const auto* a = static_cast<const uint16_t*>(in);
    auto* b = static_cast<uint16_t*>(inout);
    constexpr int kPiece = 1024;
    float sum[kPiece];
    for (int at = 0; at < *length; at += kPiece) {
        const size_t n = size_t(std::min(kPiece, *length - at));
        widenBf16(b + at, sum, n);
        addBf16(a + at, sum, n);
        roundToBf16(sum, b + at, n);
    }
}

constexpr double kBeatSeconds = 0.5, kSilentSeconds = 6;
constexpr int kBeatTag = 7, kLastBeat = -1;

class MpiProcessGroup final : public ProcessGroup {
public:
    explicit MpiProcessGroup(int provided) : provided_(provided) {
        MPI_Comm lane0;
        check("MPI_Comm_dup", MPI_Comm_dup(MPI_COMM_WORLD, &lane0));
        MPI_Comm_set_errhandler(lane0, MPI_ERRORS_RETURN);
        lanes_.push_back(lane0);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &size_);
        MPI_Comm node;  // the processes sharing this machine's memory
        check("MPI_Comm_split_type", MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
        MPI_Comm_size(node, &localSize_);
        MPI_Comm_free(&node);
        check("MPI_Op_create", MPI_Op_create(&bf16Sum, 1, &bf16Sum_));
        wire_.resize(1);
        // Every process's machine, for the watchdog's sentence.
        char name[MPI_MAX_PROCESSOR_NAME] = {};
        int length = 0;
        MPI_Get_processor_name(name, &length);
        std::vector<char> all(size_t(size_) * MPI_MAX_PROCESSOR_NAME);
        check("MPI_Allgather", MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                                             MPI_CHAR, MPI_COMM_WORLD));
        for (int r = 0; r < size_; ++r) hosts_.emplace_back(all.data() + size_t(r) * MPI_MAX_PROCESSOR_NAME);
        if (size_ > 1 && provided_ == MPI_THREAD_MULTIPLE) {
            check("MPI_Comm_dup", MPI_Comm_dup(MPI_COMM_WORLD, &beats_));
            MPI_Comm_set_errhandler(beats_, MPI_ERRORS_RETURN);
            parent_ = getppid();
            watchdog_ = std::thread([this] { watch(); });
        }
    }
    ~MpiProcessGroup() override {
        // Unwinding past the group (an error nobody turned into abort()): the others may wait in
        // a collective, so end them all rather than wait in MPI_Finalize for them.
        if (std::uncaught_exceptions() > 0) MPI_Abort(MPI_COMM_WORLD, 2);
        if (watchdog_.joinable()) {
            {
                std::lock_guard lock(mutex_);
                leaving_ = true;
            }
            wake_.notify_all();
            watchdog_.join();  // its last beat said this process ends in order
            MPI_Comm_free(&beats_);
        }
        for (MPI_Comm& c : lanes_) MPI_Comm_free(&c);
        MPI_Op_free(&bf16Sum_);
        MPI_Finalize();
    }

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    int localSize() const override { return localSize_; }
    std::string describe() const override {
        char version[MPI_MAX_LIBRARY_VERSION_STRING];
        int length = 0;
        MPI_Get_library_version(version, &length);
        std::string v(version, size_t(std::max(0, length)));
        v = v.substr(0, v.find_first_of(",\n"));
        return std::to_string(size_) + " processes (" + v + ")";
    }

    void setLanes(int lanes) override {
        if (lanes > 1 && provided_ < MPI_THREAD_MULTIPLE)
            throw Error("processes: this MPI gives its calls to one thread at a time (not MPI_THREAD_MULTIPLE), so each "
                        "process can run one tower only (--towers cpu:0)");
        while (int(lanes_.size()) < lanes) {
            MPI_Comm c;
            check("MPI_Comm_dup", MPI_Comm_dup(MPI_COMM_WORLD, &c));
            MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
            lanes_.push_back(c);
        }
        wire_.resize(lanes_.size());
    }

    void allReduce(int lane, const float* send, float* recv, size_t count, ReduceOp op, CommPrecision wire) override {
        constexpr size_t kPiece = size_t(1) << 26;
        const MPI_Comm c = lanes_.at(size_t(lane));
        if (wire == CommPrecision::Bf16) {
            // The lane's own buffer: each lane is one thread's.
            std::vector<uint16_t>& w = wire_[size_t(lane)];
            if (w.size() < count) w.resize(count);
            roundToBf16(send, w.data(), count);
            for (size_t at = 0; at < count; at += kPiece) {
                const int n = int(std::min(kPiece, count - at));
                check("MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, w.data() + at, n, MPI_UINT16_T, bf16Sum_, c));
            }
            widenBf16(w.data(), recv, count);
        } else {
            for (size_t at = 0; at < count; at += kPiece) {
                const int n = int(std::min(kPiece, count - at));
                const void* from = send == recv ? MPI_IN_PLACE : static_cast<const void*>(send + at);
                check("MPI_Allreduce", MPI_Allreduce(from, recv + at, n, MPI_FLOAT, MPI_SUM, c));
            }
        }
        if (op == ReduceOp::Mean) {
            const float scale = 1.0f / float(size_);
            for (size_t i = 0; i < count; ++i) recv[i] *= scale;
        }
        countAllReduce(count, 0, wire);
    }

    bool any(bool flag) override {
        int mine = flag ? 1 : 0, all = 0;
        check("MPI_Allreduce", MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LOR, lanes_[0]));
        return all != 0;
    }

    std::string broadcast(const std::string& text, int root) override {
        unsigned long long length = text.size();
        check("MPI_Bcast", MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG_LONG, root, lanes_[0]));
        std::string out = rank_ == root ? text : std::string(size_t(length), '\0');
        check("MPI_Bcast", MPI_Bcast(out.data(), int(length), MPI_CHAR, root, lanes_[0]));
        return out;
    }

    void exchange(const std::vector<Message>& sends, const std::vector<Message>& receives) override {
        std::vector<MPI_Request> pending;
        for (const Message& m : receives) {
            MPI_Request r;
            check("MPI_Irecv", MPI_Irecv(m.data, messageLength(m), MPI_BYTE, m.peer, m.tag, lanes_[0], &r));
            pending.push_back(r);
        }
        for (const Message& m : sends) {
            MPI_Request r;
            check("MPI_Isend", MPI_Isend(m.data, messageLength(m), MPI_BYTE, m.peer, m.tag, lanes_[0], &r));
            pending.push_back(r);
            countSent(m.bytes);
        }
        std::vector<MPI_Status> statuses(pending.size());
        check("MPI_Waitall", MPI_Waitall(int(pending.size()), pending.data(), statuses.data()));
        for (size_t i = 0; i < receives.size(); ++i) checkLength(statuses[i], receives[i]);
    }

    Message probe() override {
        MPI_Status st;
        check("MPI_Probe", MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, lanes_[0], &st));
        int bytes = 0;
        MPI_Get_count(&st, MPI_BYTE, &bytes);
        return {st.MPI_SOURCE, st.MPI_TAG, nullptr, size_t(bytes)};
    }

    void receive(const Message& m) override {
        MPI_Status st;
        check("MPI_Recv", MPI_Recv(m.data, messageLength(m), MPI_BYTE, m.peer, m.tag, lanes_[0], &st));
    }

    std::unique_ptr<Sending> startSend(int lane, const Message& m) override {
        auto s = std::make_unique<MpiSending>();
        check("MPI_Isend", MPI_Isend(m.data, messageLength(m), MPI_BYTE, m.peer, m.tag, lanes_.at(size_t(lane)), &s->request));
        countSent(m.bytes);
        return s;
    }

    void receiveOn(int lane, const Message& m) override {
        MPI_Status st;
        check("MPI_Recv", MPI_Recv(m.data, messageLength(m), MPI_BYTE, m.peer, m.tag, lanes_.at(size_t(lane)), &st));
        checkLength(st, m);
    }

    void awaitOn(int lane, int peer, int tag) override {
        MPI_Status st;
        check("MPI_Probe", MPI_Probe(peer, tag, lanes_.at(size_t(lane)), &st));
    }

    [[noreturn]] void abort(int code) override {
        MPI_Abort(MPI_COMM_WORLD, code);
        std::_Exit(code);  // MPI_Abort does not return; if it did, this process still ends
    }

private:
    struct MpiSending final : Sending {
        MPI_Request request = MPI_REQUEST_NULL;
        void wait() override { check("MPI_Wait", MPI_Wait(&request, MPI_STATUS_IGNORE)); }
        // A send nobody waited for (a step that failed, the run about to end every process):
        // waiting could hang, as the peer may itself wait for a message this process never sends.
        ~MpiSending() override {
            if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
        }
    };

    static void checkLength(const MPI_Status& st, const Message& m) {
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if (size_t(got) != m.bytes)
            throw Error("processes: process " + std::to_string(m.peer) + " sent " + std::to_string(got) +
                        " bytes where " + std::to_string(m.bytes) + " were expected");
    }

    // MPI counts are ints: a message over 2 GiB would need pieces, which the callers avoid (the
    // parameter servers refuse shards that large before any is sent).
    static int messageLength(const Message& m) {
        if (m.bytes > size_t(std::numeric_limits<int>::max()))
            throw Error("processes: a message of " + std::to_string(m.bytes) + " bytes is over MPI's 2 GiB limit");
        return int(m.bytes);
    }

    // The watchdog: a beat to every peer each kBeatSeconds, the peers' beats drained, and the run
    // ended where one is silent for kSilentSeconds, or this process's launcher is gone.
    void watch() {
        using Clock = std::chrono::steady_clock;
        std::vector<Clock::time_point> heard(size_t(size_), Clock::now());
        std::vector<bool> left(size_t(size_), false);
        left[size_t(rank_)] = true;
        int beat = 0;
        for (;;) {
            bool leaving = false;
            {
                std::unique_lock lock(mutex_);
                leaving = wake_.wait_for(lock, std::chrono::duration<double>(kBeatSeconds), [this] { return leaving_; });
            }
            const int mine = leaving ? kLastBeat : ++beat;
            for (int p = 0; p < size_; ++p) {
                if (left[size_t(p)]) continue;  // itself, or a peer ending in order (in MPI_Finalize)
                MPI_Request r;  // an int: sent eagerly, so nobody waits for a peer's receive
                if (MPI_Isend(&mine, 1, MPI_INT, p, kBeatTag, beats_, &r) == MPI_SUCCESS) MPI_Wait(&r, MPI_STATUS_IGNORE);
            }
            if (leaving) return;
            for (;;) {  // every beat that has arrived
                int arrived = 0;
                MPI_Status st;
                if (MPI_Iprobe(MPI_ANY_SOURCE, kBeatTag, beats_, &arrived, &st) != MPI_SUCCESS || !arrived) break;
                int theirs = 0;
                MPI_Recv(&theirs, 1, MPI_INT, st.MPI_SOURCE, kBeatTag, beats_, MPI_STATUS_IGNORE);
                heard[size_t(st.MPI_SOURCE)] = Clock::now();
                if (theirs == kLastBeat) left[size_t(st.MPI_SOURCE)] = true;
            }
            if (getppid() != parent_) {
                std::fprintf(stderr, "towerbench-run (process %d of %d): its launcher (mpirun, pid %d) has ended; ending "
                             "this process too (the run folder keeps its last checkpoint)\n", rank_, size_, int(parent_));
                std::_Exit(3);
            }
            const auto now = Clock::now();
            for (int p = 0; p < size_; ++p) {
                if (left[size_t(p)] || now - heard[size_t(p)] < std::chrono::duration<double>(kSilentSeconds)) continue;
                std::fprintf(stderr, "towerbench-run (process %d of %d): process %d on %s has not been heard from for %.0f s "
                             "(stopped, hung or cut off); ending the run (its folder keeps its last checkpoint)\n",
                             rank_, size_, p, hosts_[size_t(p)].c_str(), kSilentSeconds);
                std::fflush(stderr);
                MPI_Abort(MPI_COMM_WORLD, 3);
                std::_Exit(3);
            }
        }
    }

    int provided_ = MPI_THREAD_SINGLE;
    int rank_ = 0, size_ = 1, localSize_ = 1;
    std::vector<MPI_Comm> lanes_;
    MPI_Op bf16Sum_ = MPI_OP_NULL;
    std::vector<std::vector<uint16_t>> wire_;  // per lane: a bf16 all-reduce's buffer
    std::vector<std::string> hosts_;           // by rank: each process's machine
    MPI_Comm beats_ = MPI_COMM_NULL;           // the watchdog's own
    pid_t parent_ = 0;                         // the launcher that started this process
    std::mutex mutex_;
    std::condition_variable wake_;
    bool leaving_ = false;
    std::thread watchdog_;
};

}  // namespace

std::unique_ptr<ProcessGroup> joinProcessGroup() {
    if (launchedProcesses() < 1) return nullptr;
    int provided = MPI_THREAD_SINGLE;
    check("MPI_Init_thread", MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    // The trainer's thread votes and a tower's thread reduces on lane 0, one after the other.
    if (provided < MPI_THREAD_SERIALIZED)
        throw Error("MPI: this MPI library gives its calls to one thread only (below MPI_THREAD_SERIALIZED); "
                    "towerbench-run needs at least that");
    return std::make_unique<MpiProcessGroup>(provided);
}

}  // namespace tb
