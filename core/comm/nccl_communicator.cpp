// Towers on distinct GPUs, one NCCL rank each (backend/registry.hpp's NcclGroup); the holder, if
// any, is one of their GPUs (the root). Asynchronous updates use copies: collectives cannot pull
// or push alone. Across processes (replicas only) one NCCL group spans every tower: process p's n
// towers are ranks p x n .. p x n + n - 1, the group's id broadcast over MPI from process 0.
// bf16 gradients: every rank rounds into its wire buffer on its GPU, the root too (NCCL reduces
// one type), and NCCL reduces them in ncclBfloat16.
// No wait is unbounded (PyTorch's c10d watchdog does the same): NCCL's kernels wait as long as a
// rank stays away, so a rank whose part of a collective fails (its rounding, its NCCL call, its
// stream) aborts the group at once, and a watchdog aborts it once a collective has waited longer
// than TB_NCCL_TIMEOUT_S seconds (60 unless set). The first cause is what every rank throws, then
// and after: an aborted group is only destroyed.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include "backend/registry.hpp"
#include "comm/communicator.hpp"
#include "comm/implementations.hpp"
#include "util/error.hpp"

namespace tb {

namespace {

using Clock = std::chrono::steady_clock;

double timeoutSeconds() {
    const char* v = std::getenv("TB_NCCL_TIMEOUT_S");
    if (!v || !*v) return 60;
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    if (*end || !std::isfinite(s) || s <= 0)
        throw Error(std::string("TB_NCCL_TIMEOUT_S: '") + v + "' is not a number of seconds above 0");
    return s;
}

std::string rankList(const std::vector<int>& ranks) {
    std::string s = ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size(); ++i)
        s += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
    return s;
}

class NcclCommunicator final : public Communicator {
public:
    NcclCommunicator(std::vector<RankEndpoint> ranks, HolderEndpoint holder, size_t maxCount, ProcessGroup* processes)
        : Communicator(std::move(ranks), holder),
          timeout_(timeoutSeconds()),
          since_(ranks_.size()),
          what_(ranks_.size()),
          calls_(ranks_.size()) {
        processes_ = processes;
        std::vector<int> devices;
        for (size_t r = 0; r < ranks_.size(); ++r) {
            if (ranks_[r].device.type != DeviceType::Cuda)
                throw Error("NCCL: " + ranks_[r].device.str() + " is not a GPU");
            devices.push_back(ranks_[r].device.index);
            if (holder_.backend && ranks_[r].device == holder_.device) root_ = int(r);
        }
        if (holder_.backend && root_ < 0)
            throw Error("NCCL: the variables' holder " + holder_.device.str() + " is none of the towers' GPUs");
        if (processes_) {  // replicas only: makeCommunicator and the plan refuse holders here
            const std::string id = processes_->broadcast(processes_->rank() == 0 ? NcclGroup::uniqueId() : "");
            const int n = size();
            group_ = std::make_unique<NcclGroup>(devices, processes_->size() * n, processes_->rank() * n, id);
        } else {
            group_ = std::make_unique<NcclGroup>(devices);
        }
        scratch_ = ranks_[0].backend->empty(Shape{int64_t(std::max<size_t>(maxCount, 1))});
        watchdog_ = std::thread([this] { watch(); });
    }
    ~NcclCommunicator() override {
        {
            std::lock_guard lock(watchMutex_);
            stopping_ = true;
        }
        wake_.notify_all();
        watchdog_.join();
    }
    std::string name() const override { return "NCCL"; }
    void abandon(const std::string& why) override {  // (ranks blocked in NCCL return once it is aborted)
        abortFor(why);
        Communicator::abandon(why);
    }
    bool sharesHolder(int rank) const override { return rank == root_; }

    const float* reduceToHolder(int rank, const float* send, float* holderScratch, size_t count, ReduceOp op) override {
        if (!onHolderDevice(rank)) countByRank(rank, gradientBytes(count));
        if (size() == 1) return send;  // the one rank is on the holder's GPU: read in place
        collective(rank, "reduce to the holder", [&] {
            const RankEndpoint& r = ranks_[size_t(rank)];
            const bool mean = op == ReduceOp::Mean;
            if (anyRoundsOnWire()) {
                uint16_t* wire = deviceWire(rank);
                r.backend->roundToBf16(r.stream, send, wire, count);
                group_->reduce(rank, wire, wire, count, true, mean, root_, r.stream);
                if (rank == root_) r.backend->widenBf16(r.stream, wire, holderScratch, count);
            } else {
                group_->reduce(rank, send, rank == root_ ? holderScratch : const_cast<float*>(send), count, false, mean,
                               root_, r.stream);
            }
            r.backend->synchronize(r.stream);
        });
        meet(rank);  // the root's result is complete for every rank's share of the update
        return holderScratch;
    }

    void broadcastFromHolder(int rank, const float* holderSrc, float* recv, size_t count) override {
        if (!onHolderDevice(rank)) countByRank(rank, int64_t(count * sizeof(float)));
        if (size() == 1) return;
        collective(rank, "broadcast from the holder", [&] {
            group_->broadcast(rank, rank == root_ ? const_cast<float*>(holderSrc) : recv, count, root_,
                              ranks_[size_t(rank)].stream);
            ranks_[size_t(rank)].backend->synchronize(ranks_[size_t(rank)].stream);
        });
    }

    void allReduce(int rank, float* buf, size_t count, ReduceOp op) override {
        if (rank == 0) {
            countTotal(ringBytes(count));
            if (processes_) processes_->countAllReduce(count, processes_->size() * size(), gradients_);
        }
        collective(rank, "all-reduce", [&] {
            const RankEndpoint& r = ranks_[size_t(rank)];
            const bool mean = op == ReduceOp::Mean;
            if (anyRoundsOnWire()) {  // one choice for every rank: NCCL's datatype must agree
                uint16_t* wire = deviceWire(rank);
                r.backend->roundToBf16(r.stream, buf, wire, count);
                group_->allReduce(rank, wire, count, true, mean, r.stream);
                r.backend->widenBf16(r.stream, wire, buf, count);
            } else {
                group_->allReduce(rank, buf, count, false, mean, r.stream);
            }
            r.backend->synchronize(r.stream);
        });
    }

    void allGather(int, const float*, float*, size_t) override {
        throw Error("a layer split over GPUs (an all-gather over NCCL) is not built yet; split it over CPU devices");
    }

    // From the caller's thread, so not a collective: every rank's buffer copied to rank 0's GPU.
    void meanOfRanks(const std::vector<const float*>& perRank, float* out, size_t count) override {
        Backend& be = *ranks_[0].backend;
        const Stream s = ranks_[0].stream;
        be.copy(s, out, perRank[0], count * sizeof(float));
        for (size_t j = 1; j < perRank.size(); ++j) {
            be.copy(s, scratch_.data(), perRank[j], count * sizeof(float));
            be.axpy(s, 1.f, scratch_.data(), out, count);
        }
        be.scale(s, out, 1.f / float(perRank.size()), count);
        be.synchronize(s);
    }

    void pull(int, const float*, float*, size_t) override { throw Error("NCCL: pulls belong to asynchronous updates"); }
    const float* push(int, const float*, size_t) override { throw Error("NCCL: pushes belong to asynchronous updates"); }

private:
    // This rank's part of one collective, `what` ("all-reduce"), watched while it runs. Once
    // the group is aborted every part throws the cause; a part that fails aborts it (no meeting
    // after: a rank that stays away would hold the others there).
    template <class F>
    void collective(int rank, const char* what, F&& part) {
        if (aborted_) throw Error(cause());
        what_[size_t(rank)] = what;
        ++calls_[size_t(rank)];
        since_[size_t(rank)] = Clock::now().time_since_epoch().count();
        try {
            part();
        } catch (const std::exception& e) {
            since_[size_t(rank)] = 0;
            abortFor("rank " + std::to_string(rank) + " (" + ranks_[size_t(rank)].device.str() + ")'s " + what +
                     " failed: " + e.what());
            throw Error(cause());
        }
        since_[size_t(rank)] = 0;
    }

    // The first cause is kept; the group is aborted once, which ends every rank's pending NCCL call.
    void abortFor(const std::string& why) {
        {
            std::lock_guard lock(causeMutex_);
            if (cause_.empty()) cause_ = why + "; the group was aborted so that no rank waits for it";
        }
        if (!aborted_.exchange(true)) group_->abort();
    }
    std::string cause() {
        std::lock_guard lock(causeMutex_);
        return cause_;
    }

    // The watchdog's thread: every tenth of the timeout (at most a second), a rank whose
    // communicator reports an asynchronous error (a peer or link lost while the GPU waits in a
    // collective, which no call returns) aborts the group with it (c10d's watchdog polls
    // ncclCommGetAsyncError alike); and any rank inside a collective for longer than the timeout
    // aborts the group, naming the ranks that had not reached it (fewer calls than the others:
    // ranks of this process only).
    void watch() {
        const auto limit = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_));
        const auto period = std::min<Clock::duration>(limit / 10, std::chrono::seconds(1));
        std::unique_lock lock(watchMutex_);
        while (!wake_.wait_for(lock, period, [&] { return stopping_; })) {
            if (aborted_) continue;
            for (int r = 0; r < size() && !aborted_; ++r)
                if (const std::string e = group_->asyncError(r); !e.empty()) abortFor(e);
            if (aborted_) continue;
            const int64_t now = Clock::now().time_since_epoch().count();
            for (int r = 0; r < size(); ++r) {
                const int64_t since = since_[size_t(r)];
                if (since == 0 || now - since <= limit.count()) continue;
                int64_t most = 0;
                for (const auto& c : calls_) most = std::max<int64_t>(most, c);
                std::vector<int> behind;
                for (int k = 0; k < size(); ++k)
                    if (calls_[size_t(k)] < most) behind.push_back(k);
                char seconds[32];
                std::snprintf(seconds, sizeof seconds, "%g", timeout_);
                std::string why = "NCCL: rank " + std::to_string(r) + "'s " + what_[size_t(r)].load() +
                                  " waited more than " + seconds + " s (TB_NCCL_TIMEOUT_S)";
                why += behind.empty() ? processes_ ? " for a rank of another process, or for a GPU that does not return"
                                                   : "; no rank returned (a GPU that does not finish)"
                                      : " for " + rankList(behind) + ", which had not reached it";
                abortFor(why);
                break;
            }
        }
    }

    std::unique_ptr<NcclGroup> group_;
    int root_ = -1;   // the rank on the holder's GPU
    Tensor scratch_;  // (maxCount) on rank 0's GPU, for meanOfRanks
    const double timeout_;
    std::vector<std::atomic<int64_t>> since_;       // per rank: when its current collective began (0: none)
    std::vector<std::atomic<const char*>> what_;    // per rank: its current or last collective
    std::vector<std::atomic<int64_t>> calls_;       // per rank: collectives begun
    std::atomic<bool> aborted_{false};
    std::mutex causeMutex_;
    std::string cause_;
    std::mutex watchMutex_;
    std::condition_variable wake_;
    bool stopping_ = false;
    std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> makeNcclCommunicator(std::vector<RankEndpoint> ranks, HolderEndpoint holder,
                                                   size_t maxCount, ProcessGroup* processes) {
    return std::make_unique<NcclCommunicator>(std::move(ranks), holder, maxCount, processes);
}

}  // namespace tb
