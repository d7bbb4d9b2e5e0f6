// Ranks and holder in one memory (CPU towers with host variables; towers on the holder's GPU):
// reductions read every rank's buffer in place, each rank's thread reducing its own chunk. With
// bf16 gradients each rank that sends (CPU towers are devices of their own) first rounds its
// whole buffer into its wire buffer, and the reductions read those; towers sharing one GPU send
// nothing, so nothing is rounded there.
#include <algorithm>

#include "comm/communicator.hpp"
#include "comm/implementations.hpp"

namespace tb {

namespace {

class SharedMemoryCommunicator final : public Communicator {
public:
    SharedMemoryCommunicator(std::vector<RankEndpoint> ranks, HolderEndpoint holder, size_t maxCount)
        : Communicator(std::move(ranks), holder) {
        if (size() > 1) scratch_ = ranks_[0].backend->empty(Shape{int64_t(std::max<size_t>(maxCount, 1))});
    }
    std::string name() const override { return "shared memory"; }
    bool sharesHolder(int) const override { return true; }

    const float* reduceToHolder(int rank, const float* send, float* holderScratch, size_t count, ReduceOp op) override {
        if (!onHolderDevice(rank)) countByRank(rank, gradientBytes(count));
        if (size() == 1) {
            if (roundsOnWire(rank)) send = throughWire(rank, send, count);
            if (!processes_) return send;  // the holder reads the one rank's buffer in place
            processes_->allReduce(0, send, holderScratch, count, op, gradients_);
            return holderScratch;
        }
        // A rank whose rounding fails still meets the others (its wire buffer is garbage then).
        std::exception_ptr failure;
        if (roundsOnWire(rank)) attempt(failure, [&] { toWire(rank, send, count); });
        published_[size_t(rank)] = send;
        meet(rank);  // every rank's buffer is ready
        attempt(failure, [&] {
            const Range c = chunk(rank, count);
            if (anyRoundsOnWire()) reduceGradients(c, published_, holderScratch, op);
            else reduceChunk(*holder_.backend, holderStreams_[size_t(rank)], c, published_, holderScratch, op);
            // This process's mean of the chunk, then the mean of every process's (equal tower counts).
            if (processes_)
                processes_->allReduce(rank, holderScratch + c.begin, holderScratch + c.begin, c.size(), op, gradients_);
        });
        if (failure) std::rethrow_exception(failure);
        return holderScratch;
    }

    void broadcastFromHolder(int rank, const float* holderSrc, float* recv, size_t count) override {
        if (!onHolderDevice(rank)) countByRank(rank, int64_t(count * sizeof(float)));
        copyInto(rank, recv, holderSrc, count);
    }

    void allReduce(int rank, float* buf, size_t count, ReduceOp op) override {
        if (rank == 0) countTotal(ringBytes(count));
        if (size() == 1) {
            if (!processes_) return;
            processes_->allReduce(0, buf, buf, count, op, gradients_);
            if (bf16Gradients()) roundTrip(buf, Range{0, count});  // the mean of bf16 sums, in bf16
            return;
        }
        std::exception_ptr failure;
        if (roundsOnWire(rank)) attempt(failure, [&] { toWire(rank, buf, count); });
        published_[size_t(rank)] = buf;
        publishedOut_[size_t(rank)] = buf;
        meet(rank);
        attempt(failure, [&] {
            const Range c = chunk(rank, count);
            Backend& be = *ranks_[size_t(rank)].backend;
            const Stream s = ranks_[size_t(rank)].stream;
            if (anyRoundsOnWire()) reduceGradients(c, published_, scratch_.data(), op);
            else reduceChunk(be, s, c, published_, scratch_.data(), op);
            if (processes_)
                processes_->allReduce(rank, scratch_.data() + c.begin, scratch_.data() + c.begin, c.size(), op, gradients_);
            if (anyRoundsOnWire()) roundTrip(scratch_.data(), c);  // the result goes back in bf16
            for (float* out : publishedOut_)
                be.copy(s, out + c.begin, scratch_.data() + c.begin, c.size() * sizeof(float));
            be.synchronize(s);
        });
        meet(rank);  // every rank's chunk is written into every buffer
        if (failure) std::rethrow_exception(failure);
    }

    // Every rank reads the others' buffers in place, each writing its own recv.
    void allGather(int rank, const float* send, float* recv, size_t count) override {
        countAllGather(rank, count);
        published_[size_t(rank)] = send;
        meet(rank);
        std::exception_ptr failure;
        attempt(failure, [&] {
            for (int j = 0; j < size(); ++j) copyInto(rank, recv + size_t(j) * count, published_[size_t(j)], count);
        });
        meet(rank);  // every rank has read every buffer
        if (failure) std::rethrow_exception(failure);
    }

    void meanOfRanks(const std::vector<const float*>& perRank, float* out, size_t count) override {
        reduceChunk(*ranks_[0].backend, ranks_[0].stream, Range{0, count}, perRank, out, ReduceOp::Mean);
    }

    void pull(int rank, const float* holderSrc, float* dst, size_t count) override {
        if (!onHolderDevice(rank)) countByRank(rank, int64_t(count * sizeof(float)));
        copyInto(rank, dst, holderSrc, count);
    }
    const float* push(int rank, const float* src, size_t count) override {
        if (onHolderDevice(rank)) return src;
        countByRank(rank, gradientBytes(count));
        return roundsOnWire(rank) ? throughWire(rank, src, count) : src;
    }

private:
    void copyInto(int rank, float* dst, const float* src, size_t count) {
        if (dst == src) return;  // read in place
        const RankEndpoint& r = ranks_[size_t(rank)];
        r.backend->copy(r.stream, dst, src, count * sizeof(float));
        r.backend->synchronize(r.stream);
    }

    Tensor scratch_;  // (maxCount) the all-reduce's result, chunk by chunk
};

}  // namespace

std::unique_ptr<Communicator> makeSharedMemoryCommunicator(std::vector<RankEndpoint> ranks, HolderEndpoint holder,
                                                           size_t maxCount) {
    return std::make_unique<SharedMemoryCommunicator>(std::move(ranks), holder, maxCount);
}

}  // namespace tb
