// NCCL for the CUDA module's entry points (cuda_module.hpp): one communicator per GPU of a group,
// made together by ncclCommInitAll (one process) or ncclCommInitRank from an id another process
// made (across processes); each tower thread drives its own rank, on its own stream.
// NCCL refuses two ranks on one GPU, so towers sharing a GPU meet through the shared-memory
// communicator instead, and a one-GPU machine can run NCCL with a single rank only.
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_stream.hpp"
#include "backend/cuda_module.hpp"

struct TbNcclGroup {
    std::vector<ncclComm_t> comms;  // rank r's communicator, on devices[r]
    std::vector<int> devices;
};

namespace tb::cuda {

namespace {

int failed(char* err, size_t len, const char* call, ncclResult_t r) {
    if (err && len) std::snprintf(err, len, "NCCL: %s failed: %s", call, ncclGetErrorString(r));
    return -1;
}

}  // namespace

TbNcclGroup* ncclCreate(int n, const int* devices, char* err, size_t len) {
    auto* g = new TbNcclGroup;
    g->devices.assign(devices, devices + n);
    g->comms.resize(size_t(n));
    const ncclResult_t r = ncclCommInitAll(g->comms.data(), n, devices);
    if (r != ncclSuccess) {
        failed(err, len, "ncclCommInitAll", r);
        delete g;
        return nullptr;
    }
    return g;
}

int ncclMakeId(char* id, char* err, size_t len) {
    static_assert(sizeof(ncclUniqueId) == kTbNcclIdBytes);
    ncclUniqueId u;
    const ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) return failed(err, len, "ncclGetUniqueId", r);
    std::memcpy(id, &u, sizeof u);
    return 0;
}

// Several local GPUs join in one NCCL group call (ncclCommInitRank blocks until every rank has
// joined, so one thread initialising them one by one would wait for itself).
TbNcclGroup* ncclJoin(int n, const int* devices, int worldRanks, int firstRank, const char* id, char* err, size_t len) {
    auto* g = new TbNcclGroup;
    g->devices.assign(devices, devices + n);
    g->comms.resize(size_t(n));
    ncclUniqueId u;
    std::memcpy(&u, id, sizeof u);
    cudaError_t device = cudaSuccess;
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < n && r == ncclSuccess && device == cudaSuccess; ++i) {
        device = cudaSetDevice(devices[i]);
        if (device == cudaSuccess) r = ncclCommInitRank(&g->comms[size_t(i)], worldRanks, u, firstRank + i);
    }
    const ncclResult_t e = ncclGroupEnd();
    if (device != cudaSuccess || r != ncclSuccess || e != ncclSuccess) {
        if (device != cudaSuccess) {
            if (err && len) std::snprintf(err, len, "NCCL: cudaSetDevice failed: %s", cudaGetErrorString(device));
        } else {
            failed(err, len, "ncclCommInitRank", r != ncclSuccess ? r : e);
        }
        for (ncclComm_t c : g->comms)
            if (c) ncclCommAbort(c);
        delete g;
        return nullptr;
    }
    return g;
}

void ncclDestroy(TbNcclGroup* g) {
    if (!g) return;
    for (ncclComm_t c : g->comms) ncclCommDestroy(c);
    delete g;
}

// Each call is its own group: a rank's thread may enqueue several without blocking the others.
int ncclAllReduce(TbNcclGroup* g, int rank, void* buf, size_t count, int bf16, int mean, StreamImpl* s, char* err,
                  size_t len) {
    cudaSetDevice(g->devices[size_t(rank)]);
    ncclGroupStart();
    const ncclResult_t r = ::ncclAllReduce(buf, buf, count, bf16 ? ncclBfloat16 : ncclFloat, mean ? ncclAvg : ncclSum,
                                           g->comms[size_t(rank)], s->stream);
    const ncclResult_t e = ncclGroupEnd();
    if (r != ncclSuccess) return failed(err, len, "ncclAllReduce", r);
    return e == ncclSuccess ? 0 : failed(err, len, "ncclGroupEnd", e);
}

int ncclReduce(TbNcclGroup* g, int rank, const void* send, void* recv, size_t count, int bf16, int mean, int root,
               StreamImpl* s, char* err, size_t len) {
    cudaSetDevice(g->devices[size_t(rank)]);
    const ncclResult_t r = ::ncclReduce(send, recv, count, bf16 ? ncclBfloat16 : ncclFloat, mean ? ncclAvg : ncclSum,
                                        root, g->comms[size_t(rank)], s->stream);
    return r == ncclSuccess ? 0 : failed(err, len, "ncclReduce", r);
}

int ncclBroadcast(TbNcclGroup* g, int rank, float* buf, size_t count, int root, StreamImpl* s, char* err, size_t len) {
    cudaSetDevice(g->devices[size_t(rank)]);
    const ncclResult_t r = ::ncclBroadcast(buf, buf, count, ncclFloat, root, g->comms[size_t(rank)], s->stream);
    return r == ncclSuccess ? 0 : failed(err, len, "ncclBroadcast", r);
}

}  // namespace tb::cuda
