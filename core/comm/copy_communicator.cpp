// Nothing shared: every transfer is an explicit copy, as between GPUs or processes. Each rank has
// a staging slot beside the holder (pinned host memory for a host holder, else the holder GPU's);
// with no holder the slots and the result are pinned host memory and the host does the arithmetic,
// each rank's thread its chunk, then (under mpirun) its chunk over MPI on its own lane. bf16
// gradients are staged in each rank's host wire buffer, and an all-reduce's result goes back in bf16.
#include <algorithm>

#include "comm/communicator.hpp"
#include "backend/registry.hpp"
#include "comm/implementations.hpp"
#include "tensor/bf16.hpp"
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
        if (!onHolderDevice(rank)) countByRank(rank, gradientBytes(count));
        if (size() == 1) {
            const float* staged = roundsOnWire(rank) ? throughWire(rank, send, count) : stage(rank, send, count);
            if (!processes_) return staged;
            processes_->allReduce(0, staged, holderScratch, count, op, gradients_);
            return holderScratch;
        }
        std::exception_ptr failure;
        attempt(failure, [&] { stageGradients(rank, send, count); });
        meet(rank);  // every rank's slot is filled
        attempt(failure, [&] {
            const Range c = chunk(rank, count);
            reduceSlots(c, holderScratch, op, *holder_.backend, holderStreams_[size_t(rank)]);
            if (processes_)
                processes_->allReduce(rank, holderScratch + c.begin, holderScratch + c.begin, c.size(), op, gradients_);
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
            const float* sent = roundsOnWire(rank) ? throughWire(rank, buf, count) : stage(rank, buf, count);
            processes_->allReduce(0, sent, result_.data(), count, op, gradients_);
            if (roundsOnWire(rank)) {  // the mean of bf16 sums, in bf16
                resultToWire(Range{0, count});
                fromWire(rank, resultWire(), buf, count);
            } else {
                copyOnRank(rank, buf, result_.data(), count);
            }
            return;
        }
        std::exception_ptr failure;
        attempt(failure, [&] { stageGradients(rank, buf, count); });
        meet(rank);
        attempt(failure, [&] {
            const Range c = chunk(rank, count);
            reduceSlots(c, result_.data(), op, *host_, hostStreams_[size_t(rank)]);
            if (processes_)
                processes_->allReduce(rank, result_.data() + c.begin, result_.data() + c.begin, c.size(), op, gradients_);
            if (anyRoundsOnWire()) resultToWire(c);  // this rank rounds its chunk for every rank
        });
        meet(rank);  // the whole result is ready
        attempt(failure, [&] {
            if (roundsOnWire(rank)) fromWire(rank, resultWire(), buf, count);
            else copyOnRank(rank, buf, result_.data(), count);
        });
        if (failure) std::rethrow_exception(failure);
    }

    // Through the staging slots: each rank's part to its slot, then every slot to every rank.
    void allGather(int rank, const float* send, float* recv, size_t count) override {
        countAllGather(rank, count);
        if (count > size_t(slots_[size_t(rank)].numel()))
            throw Error("an all-gather of " + std::to_string(count) + " floats per rank is more than this communicator's " +
                        std::to_string(slots_[size_t(rank)].numel()));
        std::exception_ptr failure;
        attempt(failure, [&] { stage(rank, send, count); });
        meet(rank);
        attempt(failure, [&] {
            for (int j = 0; j < size(); ++j) copyOnRank(rank, recv + size_t(j) * count, slots_[size_t(j)].data(), count);
        });
        meet(rank);  // every slot read before a rank stages again
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
        if (!onHolderDevice(rank)) countByRank(rank, gradientBytes(count));
        return roundsOnWire(rank) ? throughWire(rank, src, count) : stage(rank, src, count);
    }

private:
    void copyOnRank(int rank, float* dst, const float* src, size_t count) {
        const RankEndpoint& r = ranks_[size_t(rank)];
        r.backend->copy(r.stream, dst, src, count * sizeof(float));
        r.backend->synchronize(r.stream);
    }
    const float* stage(int rank, const float* src, size_t count) {
        copyOnRank(rank, slots_[size_t(rank)].data(), src, count);
        return slots_[size_t(rank)].data();
    }
    // Gradients to be reduced: into the rank's slot, or as bf16 into its wire buffer.
    void stageGradients(int rank, const float* src, size_t count) {
        if (roundsOnWire(rank)) toWire(rank, src, count);
        else stage(rank, src, count);
    }
    // out's chunk c := op over what every rank staged, on `be`.
    void reduceSlots(Range c, float* out, ReduceOp op, Backend& be, Stream s) {
        if (anyRoundsOnWire()) reduceGradients(c, slotPointers_, out, op);
        else reduceChunk(be, s, c, slotPointers_, out, op);
    }
    // The all-reduce result's chunk c rounded to bf16 as it goes back (fromWire widens it on a rank).
    void resultToWire(Range c) { roundToBf16(result_.data() + c.begin, resultWire() + c.begin, c.size()); }

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
