#include "comm/communicator.hpp"

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include "comm/implementations.hpp"
#include "util/error.hpp"

namespace tb {

Communicator::Communicator(std::vector<RankEndpoint> ranks, HolderEndpoint holder)
    : ranks_(std::move(ranks)),
      holder_(holder),
      published_(ranks_.size(), nullptr),
      publishedOut_(ranks_.size(), nullptr),
      barrier_(std::ptrdiff_t(ranks_.size())),
      waited_(ranks_.size(), 0.0) {
    if (ranks_.empty()) throw Error("a communicator needs at least one rank");
    std::set<std::string> devices;
    for (const RankEndpoint& r : ranks_) {
        devices.insert(r.device.str());
        byRank_.push_back(std::make_unique<std::atomic<int64_t>>(0));
        // A rank on the holder's backend does its share of the holder's work on its own stream.
        holderStreams_.push_back(!holder_.backend ? nullptr
                                 : r.backend == holder_.backend ? r.stream
                                                                : holder_.backend->createStream());
    }
    distinctDevices_ = int(devices.size());
}

Communicator::~Communicator() {
    for (size_t i = 0; i < ranks_.size(); ++i)
        if (holder_.backend && holderStreams_[i] != ranks_[i].stream) holder_.backend->destroyStream(holderStreams_[i]);
}

Range Communicator::chunk(int rank, size_t count) const {
    // Whole cache lines (16 floats), so two ranks never write the same line.
    const size_t lines = (count + 15) / 16, n = ranks_.size();
    return {std::min(count, lines * size_t(rank) / n * 16), std::min(count, lines * size_t(rank + 1) / n * 16)};
}

void Communicator::meet(int rank) {
    const auto t0 = std::chrono::steady_clock::now();
    barrier_.arrive_and_wait();
    waited_[size_t(rank)] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Communicator::barrier(int rank) { meet(rank); }

double Communicator::takeWaitSeconds(int rank) { return std::exchange(waited_[size_t(rank)], 0.0); }

void Communicator::countByRank(int rank, int64_t bytes) {
    *byRank_[size_t(rank)] += bytes;
    total_ += bytes;
}

void Communicator::countTotal(int64_t bytes) { total_ += bytes; }

void Communicator::reduceChunk(Backend& be, Stream s, Range c, const std::vector<const float*>& sources, float* out,
                               ReduceOp op) const {
    const size_t n = c.size();
    be.copy(s, out + c.begin, sources[0] + c.begin, n * sizeof(float));
    for (size_t j = 1; j < sources.size(); ++j) be.axpy(s, 1.f, sources[j] + c.begin, out + c.begin, n);
    if (op == ReduceOp::Mean) be.scale(s, out + c.begin, 1.f / float(sources.size()), n);
    be.synchronize(s);
}

int64_t Communicator::ringBytes(size_t count) const {
    return 2 * int64_t(distinctDevices_ - 1) * int64_t(count) * int64_t(sizeof(float));
}

}  // namespace tb

namespace tb {

std::unique_ptr<Communicator> makeCommunicator(CommKind kind, std::vector<RankEndpoint> ranks, HolderEndpoint holder,
                                               size_t maxCount, ProcessGroup* processes) {
    if (processes) {
        // MPI here moves host memory only (Debian's Open MPI is not CUDA-aware), after the towers
        // of a process have reduced in shared memory.
        for (const RankEndpoint& r : ranks)
            if (r.device.type != DeviceType::Cpu)
                throw Error("--towers " + r.device.str() + ": towers on GPUs do not meet across processes yet (NCCL "
                            "between processes is not built); run CPU towers in each process");
        if (kind != CommKind::SharedMemory)
            throw Error("--transfers: across processes the towers of each process reduce in shared memory first");
        auto comm = makeSharedMemoryCommunicator(std::move(ranks), holder, maxCount);
        processes->setLanes(comm->size());
        comm->processes_ = processes;
        return comm;
    }
    if (kind == CommKind::SharedMemory) return makeSharedMemoryCommunicator(std::move(ranks), holder, maxCount);
    if (kind == CommKind::Nccl) return makeNcclCommunicator(std::move(ranks), holder, maxCount);
    return makeCopyCommunicator(std::move(ranks), holder, maxCount);
}

}  // namespace tb
