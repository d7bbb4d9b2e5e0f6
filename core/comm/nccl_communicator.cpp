// Towers on distinct GPUs, one NCCL rank each (backend/registry.hpp's NcclGroup); the holder, if
// any, is one of their GPUs (the root). Asynchronous updates use copies: collectives cannot pull
// or push alone. Across processes (replicas only) one NCCL group spans every tower: process p's n
// towers are ranks p x n .. p x n + n - 1, the group's id broadcast over MPI from process 0.
// bf16 gradients: every rank rounds into its wire buffer on its GPU, the root too (NCCL reduces
// one type), and NCCL reduces them in ncclBfloat16.
#include <algorithm>
#include <memory>

#include "backend/registry.hpp"
#include "comm/communicator.hpp"
#include "comm/implementations.hpp"
#include "util/error.hpp"

namespace tb {

namespace {

class NcclCommunicator final : public Communicator {
public:
    NcclCommunicator(std::vector<RankEndpoint> ranks, HolderEndpoint holder, size_t maxCount, ProcessGroup* processes)
        : Communicator(std::move(ranks), holder) {
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
    }
    std::string name() const override { return "NCCL"; }
    bool sharesHolder(int rank) const override { return rank == root_; }

    const float* reduceToHolder(int rank, const float* send, float* holderScratch, size_t count, ReduceOp op) override {
        if (!onHolderDevice(rank)) countByRank(rank, gradientBytes(count));
        if (size() == 1) return send;  // the one rank is on the holder's GPU: read in place
        std::exception_ptr failure;
        attempt(failure, [&] {
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
        if (failure) std::rethrow_exception(failure);
        return holderScratch;
    }

    void broadcastFromHolder(int rank, const float* holderSrc, float* recv, size_t count) override {
        if (!onHolderDevice(rank)) countByRank(rank, int64_t(count * sizeof(float)));
        if (size() == 1) return;
        std::exception_ptr failure;
        attempt(failure, [&] {
            group_->broadcast(rank, rank == root_ ? const_cast<float*>(holderSrc) : recv, count, root_,
                              ranks_[size_t(rank)].stream);
            ranks_[size_t(rank)].backend->synchronize(ranks_[size_t(rank)].stream);
        });
        if (failure) std::rethrow_exception(failure);
    }

    void allReduce(int rank, float* buf, size_t count, ReduceOp op) override {
        if (rank == 0) {
            countTotal(ringBytes(count));
            if (processes_) processes_->countAllReduce(count, processes_->size() * size(), gradients_);
        }
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
    std::unique_ptr<NcclGroup> group_;
    int root_ = -1;   // the rank on the holder's GPU
    Tensor scratch_;  // (maxCount) on rank 0's GPU, for meanOfRanks
};

}  // namespace

std::unique_ptr<Communicator> makeNcclCommunicator(std::vector<RankEndpoint> ranks, HolderEndpoint holder,
                                                   size_t maxCount, ProcessGroup* processes) {
    return std::make_unique<NcclCommunicator>(std::move(ranks), holder, maxCount, processes);
}

}  // namespace tb
