#include "stand_in_gpus.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/backend_export.hpp"
#include "cuda_module_abi.h"
#include "tensor/bf16.hpp"

// The ranks of one group meet twice per collective (meet()): once every rank's buffers are
// known (then each reads what it needs), and once every rank has read (then each writes its own).
// A meeting waits as long as a rank stays away, as NCCL's kernels do, until the group is aborted.
// Point to point: a send leaves a copy in the (sender, receiver) mailbox and returns (once queued,
// NCCL's sends do not hold the calling thread either); a receive waits for the oldest. But, as
// NCCL connects a pair of ranks on its first use and that first call waits for the peer's, a
// send on a pair whose receiver has not yet received waits for it, and fails after 5 s (where
// NCCL would hang). Abort wakes every wait with an error.
struct TbNcclGroup {
    explicit TbNcclGroup(int n) : ranks(n), send(size_t(n)), recv(size_t(n)) {}
    int ranks;
    std::vector<const void*> send;
    std::vector<void*> recv;
    std::mutex mailMutex;  // guards the meetings, the mail and `aborted`
    std::condition_variable mailArrived;
    int arrived = 0;       // ranks at the current meeting
    long meetings = 0;     // meetings completed
    std::map<std::pair<int, int>, std::deque<std::vector<float>>> mail;
    std::set<std::pair<int, int>> connected;  // (sender, receiver) pairs the receiver has joined
    bool aborted = false;
};

namespace tbtest {

namespace {

int gStandIns = 1;
std::atomic<long> gAllReduce{0}, gReduce{0}, gBroadcast{0}, gSend{0};
std::atomic<int> gFailingRank{-1};  // failStandInCollective's rank, until its next collective
std::atomic<int> gAsyncErrorRank{-1};  // standInAsyncError's rank, from then on

int fail(TbError* err, const std::string& text) {
    tb::writeError(err, text.c_str());
    return TB_ERROR;
}

// The collectives' entry: false (and the error written) where the group is aborted, or where the
// test planted a failure of this rank's next collective (which then stays away from the meetings,
// as a rank whose NCCL call failed does).
bool enter(TbNcclGroup& g, int rank, const char* call, TbError* err) {
    int planted = rank;
    if (gFailingRank.compare_exchange_strong(planted, -1)) {
        fail(err, std::string("NCCL: ") + call + " failed: unhandled system error (planted by the test)");
        return false;
    }
    std::lock_guard lock(g.mailMutex);
    if (g.aborted) fail(err, std::string("NCCL: ") + call + " failed: the group was aborted");
    return !g.aborted;
}

// Every rank of the group at once: false (and the error written) where the group was aborted
// before all had come.
bool meet(TbNcclGroup& g, const char* call, TbError* err) {
    std::unique_lock lock(g.mailMutex);
    const long meeting = g.meetings;
    if (++g.arrived == g.ranks) {
        g.arrived = 0;
        ++g.meetings;
        g.mailArrived.notify_all();
    } else {
        g.mailArrived.wait(lock, [&] { return g.aborted || g.meetings != meeting; });
    }
    if (g.meetings != meeting) return true;
    fail(err, std::string("NCCL: ") + call + " failed: the group was aborted");
    return false;
}

// out := sum (or mean) over every rank's buffer, added in rank order; bf16 buffers are widened,
// and every partial sum rounded to bf16 again.
void combine(TbNcclGroup& g, size_t count, bool bf16, bool mean, std::vector<float>& out) {
    out.assign(count, 0.f);
    for (int r = 0; r < g.ranks; ++r)
        for (size_t i = 0; i < count; ++i) {
            const float x = bf16 ? tb::bf16ToFloat(static_cast<const uint16_t*>(g.send[size_t(r)])[i])
                                 : static_cast<const float*>(g.send[size_t(r)])[i];
            out[i] = r == 0 ? x : out[i] + x;
            if (bf16) out[i] = tb::bf16ToFloat(tb::floatToBf16(out[i]));
        }
    if (mean)
        for (float& v : out) v = bf16 ? tb::bf16ToFloat(tb::floatToBf16(v / float(g.ranks))) : v / float(g.ranks);
}

void store(const std::vector<float>& values, void* dst, bool bf16) {
    if (!bf16) {
        std::memcpy(dst, values.data(), values.size() * sizeof(float));
        return;
    }
    auto* bits = static_cast<uint16_t*>(dst);
    for (size_t i = 0; i < values.size(); ++i) bits[i] = tb::floatToBf16(values[i]);
}

int deviceCount(TbError*) { return gStandIns; }

int deviceInfo(int index, TbGpuInfo* out, TbError* err) {
    if (index < 0 || index >= gStandIns) return fail(err, "stand-in gpu:" + std::to_string(index) + " does not exist");
    std::memset(out, 0, sizeof *out);
    std::snprintf(out->name, sizeof out->name, "stand-in GPU (a CPU backend)");
    out->totalBytes = size_t(8) << 30;
    out->ccMajor = 9;
    out->multiprocessors = 1;
    std::snprintf(out->pciBusId, sizeof out->pciBusId, "0000:00:%02d.0", index);
    return TB_OK;
}

void versions(TbCudaVersions* v) {
    std::memset(v, 0, sizeof *v);
    v->nccl = 22809;  // an NCCL: the stand-in's collectives below
}

std::atomic<const TbAlgorithmStore*> lastAlgorithmStore{nullptr};

int createBackend(int index, const TbCudaOptions* options, TbBackend** out, TbError* err) {
    lastAlgorithmStore = options ? options->algorithms : nullptr;
    return tb::guarded(err, [&] {
        const tb::MatmulPrecision p = options && options->bf16 ? tb::MatmulPrecision::Bf16 : tb::MatmulPrecision::Fp32;
        *out = tb::exportBackend(tb::makeCpuBackend(1, index, p));
    });
}

int ncclCreate(int n, const int* devices, TbNcclGroup** out, TbError* err) {
    for (int i = 0; i < n; ++i)
        if (std::count(devices, devices + n, devices[i]) > 1)
            return fail(err, "NCCL: gpu:" + std::to_string(devices[i]) + " twice in one group");
    *out = new TbNcclGroup(n);
    return TB_OK;
}

int ncclMakeId(char*, TbError* err) { return fail(err, "the stand-in NCCL has no groups across processes"); }
int ncclJoin(int, const int*, int, int, const char*, TbNcclGroup**, TbError* err) {
    return fail(err, "the stand-in NCCL has no groups across processes");
}
void ncclDestroy(TbNcclGroup* g) { delete g; }

int ncclAllReduce(TbNcclGroup* g, int rank, void* buf, size_t count, int bf16, int mean, TbStream*, TbError* err) {
    const char* call = "ncclAllReduce";
    if (!enter(*g, rank, call, err)) return TB_ERROR;
    g->send[size_t(rank)] = buf;
    if (!meet(*g, call, err)) return TB_ERROR;
    std::vector<float> result;
    combine(*g, count, bf16 != 0, mean != 0, result);
    if (!meet(*g, call, err)) return TB_ERROR;
    store(result, buf, bf16 != 0);
    if (rank == 0) ++gAllReduce;
    return TB_OK;
}

int ncclReduce(TbNcclGroup* g, int rank, const void* send, void* recv, size_t count, int bf16, int mean, int root,
               TbStream*, TbError* err) {
    if (root < 0 || root >= g->ranks) return fail(err, "NCCL: root " + std::to_string(root) + " is no rank");
    const char* call = "ncclReduce";
    if (!enter(*g, rank, call, err)) return TB_ERROR;
    g->send[size_t(rank)] = send;
    if (!meet(*g, call, err)) return TB_ERROR;
    std::vector<float> result;
    if (rank == root) combine(*g, count, bf16 != 0, mean != 0, result);
    if (!meet(*g, call, err)) return TB_ERROR;
    if (rank == root) store(result, recv, bf16 != 0), ++gReduce;
    return TB_OK;
}

int ncclBroadcast(TbNcclGroup* g, int rank, float* buf, size_t count, int root, TbStream*, TbError* err) {
    if (root < 0 || root >= g->ranks) return fail(err, "NCCL: root " + std::to_string(root) + " is no rank");
    const char* call = "ncclBroadcast";
    if (!enter(*g, rank, call, err)) return TB_ERROR;
    g->send[size_t(rank)] = buf;
    if (!meet(*g, call, err)) return TB_ERROR;
    std::vector<float> copy;
    if (rank != root) {
        const auto* src = static_cast<const float*>(g->send[size_t(root)]);
        copy.assign(src, src + count);
    }
    if (!meet(*g, call, err)) return TB_ERROR;
    if (rank != root) std::memcpy(buf, copy.data(), count * sizeof(float));
    if (rank == root) ++gBroadcast;
    return TB_OK;
}

int checkPeer(const TbNcclGroup& g, int rank, int peer, TbError* err) {
    if (peer < 0 || peer >= g.ranks || peer == rank)
        return fail(err, "NCCL: rank " + std::to_string(rank) + " cannot send to or receive from rank " + std::to_string(peer));
    return TB_OK;
}

int ncclSend(TbNcclGroup* g, int rank, const float* buf, size_t count, int peer, TbStream*, TbError* err) {
    if (checkPeer(*g, rank, peer, err) != TB_OK) return TB_ERROR;
    {
        std::unique_lock lock(g->mailMutex);
        if (!g->mailArrived.wait_for(lock, std::chrono::seconds(5),
                                     [&] { return g->aborted || g->connected.count({rank, peer}); }))
            return fail(err, "NCCL: rank " + std::to_string(rank) + "'s first send to rank " + std::to_string(peer) +
                                 " waited 5 s for its first receive (NCCL connects a pair on its first use, both "
                                 "ranks calling)");
        if (g->aborted) return fail(err, "NCCL: the group was aborted");
        g->mail[{rank, peer}].emplace_back(buf, buf + count);
    }
    g->mailArrived.notify_all();
    ++gSend;
    return TB_OK;
}

int ncclRecv(TbNcclGroup* g, int rank, float* buf, size_t count, int peer, TbStream*, TbError* err) {
    if (checkPeer(*g, rank, peer, err) != TB_OK) return TB_ERROR;
    std::unique_lock lock(g->mailMutex);
    auto& box = g->mail[{peer, rank}];
    g->connected.insert({peer, rank});
    g->mailArrived.notify_all();
    g->mailArrived.wait(lock, [&] { return g->aborted || !box.empty(); });
    if (box.empty()) return fail(err, "NCCL: the group was aborted");
    std::vector<float> message = std::move(box.front());
    box.pop_front();
    if (message.size() != count)
        return fail(err, "NCCL: rank " + std::to_string(rank) + " receives " + std::to_string(count) + " values, rank " +
                             std::to_string(peer) + " sent " + std::to_string(message.size()));
    std::memcpy(buf, message.data(), count * sizeof(float));
    return TB_OK;
}

void ncclAbort(TbNcclGroup* g) {
    {
        std::lock_guard lock(g->mailMutex);
        g->aborted = true;
    }
    g->mailArrived.notify_all();
}

int ncclAsyncError(TbNcclGroup* g, int rank, TbError* err) {
    {
        std::lock_guard lock(g->mailMutex);
        if (g->aborted) return TB_OK;
    }
    if (rank != gAsyncErrorRank) return TB_OK;
    return fail(err, "NCCL: rank " + std::to_string(rank) + " (gpu:" + std::to_string(rank) +
                         ")'s communicator failed: remote process exited or there was a network error "
                         "(planted by the test)");
}

// The ABI first; the rows in cuda_module.h's order.
TbCudaModule makeModule() {
    return {TB_CUDA_ABI,   deviceCount, deviceInfo,  versions,      createBackend, &tb::exportedBackendInterface(),
            ncclCreate,    ncclMakeId,  ncclJoin,    ncclDestroy,   ncclAllReduce, ncclReduce,
            ncclBroadcast, ncclSend,    ncclRecv,    ncclAbort,     ncclAsyncError};
}

}  // namespace

const TbCudaModule& standInGpuModule(int gpus) {
    gStandIns = std::clamp(gpus, 1, 8);
    static const TbCudaModule m = makeModule();
    return m;
}

const TbAlgorithmStore* standInAlgorithmStore() { return lastAlgorithmStore.load(); }
StandInNcclCounts standInNcclCounts() { return {gAllReduce.load(), gReduce.load(), gBroadcast.load(), gSend.load()}; }

void failStandInCollective(int rank) { gFailingRank = rank; }

void standInAsyncError(int rank) { gAsyncErrorRank = rank; }

}  // namespace tbtest
