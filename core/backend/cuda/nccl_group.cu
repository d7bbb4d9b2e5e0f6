// NCCL for the CUDA module's entry points (cuda_module.h): one communicator per GPU of a group,
// made together by ncclCommInitAll (one process) or ncclCommInitRank from an id another process
// made (across processes); each tower thread drives its own rank, on its own stream.
// NCCL refuses two ranks on one GPU, so towers sharing a GPU meet through the shared-memory
// communicator instead, and a one-GPU machine can run NCCL with a single rank only.
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_stream.hpp"
#include "backend/cuda_module.h"

struct TbNcclGroup {
    std::vector<ncclComm_t> comms;  // rank r's communicator, on devices[r]
    std::vector<int> devices;
    // Set once by ncclAbort (from a watchdog or a failing rank's thread, while other ranks may be
    // inside a call): the communicators are then aborted, freed by NCCL, and never used again.
    std::atomic<bool> aborted{false};
    // Held shared by every call that hands NCCL a communicator (which reads `aborted` under it) and
    // exclusively by ncclAbort before NCCL frees them, so that no call starts on a freed
    // communicator. A call stuck inside NCCL (a peer gone) is what the abort must break, so the
    // abort waits for the calls in flight a bounded time only.
    std::shared_timed_mutex calls;
};

namespace tb::cuda {

namespace {

int failed(TbError* err, const char* call, ncclResult_t r) {
    if (err) std::snprintf(err->message, sizeof err->message, "NCCL: %s failed: %s", call, ncclGetErrorString(r));
    return TB_ERROR;
}
cudaStream_t queue(TbStream* s) { return reinterpret_cast<StreamImpl*>(s)->stream; }

// Every call's start, under a shared hold of g->calls: the rank's GPU current, and the group still whole.
int begin(TbNcclGroup* g, int rank, const char* call, TbError* err) {
    if (g->aborted) {
        if (err) std::snprintf(err->message, sizeof err->message, "NCCL: %s refused: the group was aborted", call);
        return TB_ERROR;
    }
    const cudaError_t e = cudaSetDevice(g->devices[size_t(rank)]);
    if (e == cudaSuccess) return TB_OK;
    if (err) std::snprintf(err->message, sizeof err->message, "NCCL: cudaSetDevice(%d) for %s failed: %s",
                           g->devices[size_t(rank)], call, cudaGetErrorString(e));
    return TB_ERROR;
}

}  // namespace

int ncclCreate(int n, const int* devices, TbNcclGroup** out, TbError* err) {
    auto* g = new TbNcclGroup;
    g->devices.assign(devices, devices + n);
    g->comms.resize(size_t(n));
    const ncclResult_t r = ncclCommInitAll(g->comms.data(), n, devices);
    if (r != ncclSuccess) {
        delete g;
        return failed(err, "ncclCommInitAll", r);
    }
    *out = g;
    return TB_OK;
}

int ncclMakeId(char* id, TbError* err) {
    static_assert(sizeof(ncclUniqueId) == TB_NCCL_ID_BYTES);
    ncclUniqueId u;
    const ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) return failed(err, "ncclGetUniqueId", r);
    std::memcpy(id, &u, sizeof u);
    return TB_OK;
}

// Several local GPUs join in one NCCL group call (ncclCommInitRank blocks until every rank has
// joined, so one thread initialising them one by one would wait for itself).
int ncclJoin(int n, const int* devices, int worldRanks, int firstRank, const char* id, TbNcclGroup** out,
             TbError* err) {
    auto* g = new TbNcclGroup;
    g->devices.assign(devices, devices + n);
    g->comms.resize(size_t(n));
    ncclUniqueId u;
    std::memcpy(&u, id, sizeof u);
    cudaError_t device = cudaSuccess;
    // Every GPU checked first: ncclGroupEnd would start the joins queued before a failure, and
    // they wait for ranks that never join.
    for (int i = 0; i < n && device == cudaSuccess; ++i) device = cudaSetDevice(devices[i]);
    ncclResult_t r = ncclSuccess, e = ncclSuccess;
    if (device == cudaSuccess) {
        r = ncclGroupStart();
        for (int i = 0; i < n && r == ncclSuccess && device == cudaSuccess; ++i) {
            device = cudaSetDevice(devices[i]);  // (it has just succeeded for this GPU)
            if (device == cudaSuccess) r = ncclCommInitRank(&g->comms[size_t(i)], worldRanks, u, firstRank + i);
        }
        e = ncclGroupEnd();
    }
    if (device != cudaSuccess || r != ncclSuccess || e != ncclSuccess) {
        if (device != cudaSuccess) {
            if (err)
                std::snprintf(err->message, sizeof err->message, "NCCL: cudaSetDevice failed: %s",
                              cudaGetErrorString(device));
        } else {
            failed(err, "ncclCommInitRank", r != ncclSuccess ? r : e);
        }
        for (ncclComm_t c : g->comms)
            if (c) ncclCommAbort(c);
        delete g;
        return TB_ERROR;
    }
    *out = g;
    return TB_OK;
}

void ncclDestroy(TbNcclGroup* g) {
    if (!g) return;
    if (!g->aborted)
        for (ncclComm_t c : g->comms)
            if (c) ncclCommDestroy(c);
    delete g;
}

// Ends every rank's pending operation (ncclCommAbort may be called while another thread waits in
// one); the communicators are freed by it.
void ncclAbort(TbNcclGroup* g) {
    if (g->aborted.exchange(true)) return;
    std::unique_lock calls(g->calls, std::defer_lock);
    (void)calls.try_lock_for(std::chrono::seconds(2));  // (held or not: the abort goes on)
    for (ncclComm_t c : g->comms)
        if (c) ncclCommAbort(c);
}

int ncclAsyncError(TbNcclGroup* g, int rank, TbError* err) {
    std::shared_lock calls(g->calls);
    if (g->aborted) return TB_OK;  // the communicators are NCCL's to free now
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(g->comms[size_t(rank)], &state);
    if (r != ncclSuccess) return failed(err, "ncclCommGetAsyncError", r);
    if (state == ncclSuccess || state == ncclInProgress) return TB_OK;
    if (err)
        std::snprintf(err->message, sizeof err->message, "NCCL: rank %d (gpu:%d)'s communicator failed: %s (%s)", rank,
                      g->devices[size_t(rank)], ncclGetErrorString(state), ncclGetLastError(g->comms[size_t(rank)]));
    return TB_ERROR;
}

// Each call is its own group: a rank's thread may enqueue several without blocking the others.
int ncclAllReduce(TbNcclGroup* g, int rank, void* buf, size_t count, int bf16, int mean, TbStream* s, TbError* err) {
    std::shared_lock calls(g->calls);
    if (begin(g, rank, "ncclAllReduce", err) != TB_OK) return TB_ERROR;
    ncclGroupStart();
    const ncclResult_t r = ::ncclAllReduce(buf, buf, count, bf16 ? ncclBfloat16 : ncclFloat, mean ? ncclAvg : ncclSum,
                                           g->comms[size_t(rank)], queue(s));
    const ncclResult_t e = ncclGroupEnd();
    if (r != ncclSuccess) return failed(err, "ncclAllReduce", r);
    return e == ncclSuccess ? TB_OK : failed(err, "ncclGroupEnd", e);
}

int ncclReduce(TbNcclGroup* g, int rank, const void* send, void* recv, size_t count, int bf16, int mean, int root,
               TbStream* s, TbError* err) {
    std::shared_lock calls(g->calls);
    if (begin(g, rank, "ncclReduce", err) != TB_OK) return TB_ERROR;
    const ncclResult_t r = ::ncclReduce(send, recv, count, bf16 ? ncclBfloat16 : ncclFloat, mean ? ncclAvg : ncclSum,
                                        root, g->comms[size_t(rank)], queue(s));
    return r == ncclSuccess ? TB_OK : failed(err, "ncclReduce", r);
}

int ncclBroadcast(TbNcclGroup* g, int rank, float* buf, size_t count, int root, TbStream* s, TbError* err) {
    std::shared_lock calls(g->calls);
    if (begin(g, rank, "ncclBroadcast", err) != TB_OK) return TB_ERROR;
    const ncclResult_t r = ::ncclBroadcast(buf, buf, count, ncclFloat, root, g->comms[size_t(rank)], queue(s));
    return r == ncclSuccess ? TB_OK : failed(err, "ncclBroadcast", r);
}

// Each its own group, as the collectives: the two ranks of a link are driven by two stage threads.
int ncclSend(TbNcclGroup* g, int rank, const float* buf, size_t count, int peer, TbStream* s, TbError* err) {
    std::shared_lock calls(g->calls);
    if (begin(g, rank, "ncclSend", err) != TB_OK) return TB_ERROR;
    const ncclResult_t r = ::ncclSend(buf, count, ncclFloat, peer, g->comms[size_t(rank)], queue(s));
    return r == ncclSuccess ? TB_OK : failed(err, "ncclSend", r);
}

int ncclRecv(TbNcclGroup* g, int rank, float* buf, size_t count, int peer, TbStream* s, TbError* err) {
    std::shared_lock calls(g->calls);
    if (begin(g, rank, "ncclRecv", err) != TB_OK) return TB_ERROR;
    const ncclResult_t r = ::ncclRecv(buf, count, ncclFloat, peer, g->comms[size_t(rank)], queue(s));
    return r == ncclSuccess ? TB_OK : failed(err, "ncclRecv", r);
}

}  // namespace tb::cuda
