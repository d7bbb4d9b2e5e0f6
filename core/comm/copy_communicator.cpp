// Nothing shared: every transfer is an explicit copy, as between GPUs or processes. Each rank has
// a staging slot beside the holder (pinned host memory for a host holder, the holder GPU's memory
// otherwise); with no holder (replicas) the slots and the result live in pinned host memory and
// the host does the arithmetic, each rank's thread its own chunk. Across processes (GPU towers
// under mpirun, where the towers' GPUs cannot all meet through NCCL) the host's result is then
// reduced with the other processes' through MPI, each rank's thread its chunk on its own lane, as
// Horovod does for GPU tensors without NCCL.
#include <algorithm>

#include "comm/communicator.hpp"
#include "backend/registry.hpp"
#include "comm/implementations.hpp"
#include "util/error.hpp"

namespace tb {

namespace {

// Host memory from `pinner` (pinned where it is a GPU backend), freed by it.
Tensor hostTensor(Backend& pinner, size_t count) {
    float* p = static_cast<float*>(pinner.allocateHost(std::max<size_t>(count, 1) * sizeof(float)));
    return Tensor(p, Shape{int64_t(count)}, Device{}, [&pinner](float* q) { pinner.deallocateHost(q); });
}

class CopyCommunicator final : public Communicator {
public:
    CopyCommunicator(std::vector<RankEndpoint> ranks, HolderEndpoint holder, size_t maxCount)
        : Communicator(std::move(ranks), holder) {
        // The host does the replicas' arithmetic where there is no holder, or the holder is the host.
        const bool hostSide = !holder_.backend || holder_.device.type == DeviceType::Cpu;
        if (!holder_.backend) {
            host_ = makeBackend(Device{}, BackendOptions{1});
            for (size_t i = 0; i < ranks_.size(); ++i) hostStreams_.push_back(host_->createStream());
            result_ = hostTensor(*ranks_[0].backend, maxCount);
        }
        for (const RankEndpoint& r : ranks_) {
            slots_.push_back(hostSide ? hostTensor(*r.backend, maxCount)
                                      : holder_.backend->empty(Shape{int64_t(std::max<size_t>(maxCount, 1))}));
            slotPointers_.push_back(slots_.back().data());
        }
    }
    ~CopyCommunicator() override {
        for (Stream s : hostStreams_) host_->destroyStream(s);
    }
    std::string name() const override { return "copies"; }
    bool sharesHolder(int) const override { return false; }

    const float* reduceToHolder(int rank, const float* send, float* holderScratch, size_t count, ReduceOp op) override {
        if (!onHolderDevice(rank)) countByRank(rank, int64_t(count * sizeof(float)));
        if (size() == 1) {
            stage(rank, send, count);
            if (!processes_) return slots_[0].data();
            processes_->allReduce(0, slots_[0].data(), holderScratch, count, op);
            return holderScratch;
        }
        std::exception_ptr failure;
        attempt(failure, [&] { stage(rank, send, count); });
        meet(rank);  // every rank's slot is filled
        attempt(failure, [&] {
            const Range c = chunk(rank, count);
            reduceChunk(*holder_.backend, holderStreams_[size_t(rank)], c, slotPointers_, holderScratch, op);
            if (processes_) processes_->allReduce(rank, holderScratch + c.begin, holderScratch + c.begin, c.size(), op);
        });
        if (failure) std::rethrow_exception(failure);
        return holderScratch;
    }

    void broadcastFromHolder(int rank, const float* holderSrc, float* recv, size_t count) override {
        if (!onHolderDevice(rank)) countByRank(rank, int64_t(count * sizeof(float)));
        copyOnRank(rank, recv, holderSrc, count);
    }

    void allReduce(int rank, float* buf, size_t count, ReduceOp op) override {
        if (rank == 0) countTotal(ringBytes(count));
        if (size() == 1) {
            if (!processes_) return;
            stage(rank, buf, count);
            processes_->allReduce(0, slots_[0].data(), result_.data(), count, op);
            copyOnRank(rank, buf, result_.data(), count);
            return;
        }
        std::exception_ptr failure;
        attempt(failure, [&] { stage(rank, buf, count); });
        meet(rank);
        attempt(failure, [&] {
            const Range c = chunk(rank, count);
            reduceChunk(*host_, hostStreams_[size_t(rank)], c, slotPointers_, result_.data(), op);
            if (processes_) processes_->allReduce(rank, result_.data() + c.begin, result_.data() + c.begin, c.size(), op);
        });
        meet(rank);  // the whole result is ready
        attempt(failure, [&] { copyOnRank(rank, buf, result_.data(), count); });
        if (failure) std::rethrow_exception(failure);
    }

    void meanOfRanks(const std::vector<const float*>& perRank, float* out, size_t count) override {
        if (!host_) throw Error("meanOfRanks is for replicas: this communicator has a holder");
        // Through the host: every rank's buffer to its slot, their mean into the result.
        for (size_t j = 0; j < perRank.size(); ++j) stage(int(j), perRank[j], count);
        reduceChunk(*host_, hostStreams_[0], Range{0, count}, slotPointers_, result_.data(), ReduceOp::Mean);
        copyOnRank(0, out, result_.data(), count);
    }

    void pull(int rank, const float* holderSrc, float* dst, size_t count) override {
        if (!onHolderDevice(rank)) countByRank(rank, int64_t(count * sizeof(float)));
        copyOnRank(rank, dst, holderSrc, count);
    }
    const float* push(int rank, const float* src, size_t count) override {
        if (!onHolderDevice(rank)) countByRank(rank, int64_t(count * sizeof(float)));
        stage(rank, src, count);
        return slots_[size_t(rank)].data();
    }

private:
    void copyOnRank(int rank, float* dst, const float* src, size_t count) {
        const RankEndpoint& r = ranks_[size_t(rank)];
        r.backend->copy(r.stream, dst, src, count * sizeof(float));
        r.backend->synchronize(r.stream);
    }
    void stage(int rank, const float* src, size_t count) { copyOnRank(rank, slots_[size_t(rank)].data(), src, count); }

    std::shared_ptr<Backend> host_;    // the host's arithmetic when there is no holder
    std::vector<Stream> hostStreams_;  // per rank, on host_
    std::vector<Tensor> slots_;        // per rank (maxCount): what it sent, beside the holder
    std::vector<const float*> slotPointers_;  // the same, as reduceChunk takes them
    Tensor result_;                    // (maxCount) the replicas' all-reduce, in host memory
};

}  // namespace

std::unique_ptr<Communicator> makeCopyCommunicator(std::vector<RankEndpoint> ranks, HolderEndpoint holder,
                                                   size_t maxCount) {
    return std::make_unique<CopyCommunicator>(std::move(ranks), holder, maxCount);
}

}  // namespace tb
