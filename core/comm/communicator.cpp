#include "comm/communicator.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <utility>

#include "backend/registry.hpp"
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

void reduceChunk(Backend& be, Stream s, Range c, const std::vector<const float*>& sources, float* out, ReduceOp op) {
    const size_t n = c.size();
    be.copy(s, out + c.begin, sources[0] + c.begin, n * sizeof(float));
    for (size_t j = 1; j < sources.size(); ++j) be.axpy(s, 1.f, sources[j] + c.begin, out + c.begin, n);
    if (op == ReduceOp::Mean) be.scale(s, out + c.begin, 1.f / float(sources.size()), n);
    be.synchronize(s);
}

int64_t Communicator::ringBytes(size_t count) const { return 2 * int64_t(distinctDevices_ - 1) * gradientBytes(count); }

void Communicator::toWire(int rank, const float* src, size_t count) {
    roundToBf16(src, wire_[size_t(rank)].data(), count);
}

const float* Communicator::throughWire(int rank, const float* src, size_t count) {
    toWire(rank, src, count);
    float* landed = landed_[size_t(rank)].data();
    widenBf16(wire_[size_t(rank)].data(), landed, count);
    return landed;
}

void Communicator::reduceGradients(Range c, const std::vector<const float*>& fp32, float* out, ReduceOp op) const {
    std::vector<WireSource> sources;
    for (int j = 0; j < size(); ++j)
        sources.push_back(roundsOnWire(j) ? WireSource{wire_[size_t(j)].data(), nullptr} : WireSource{nullptr, fp32[size_t(j)]});
    reduceWire(sources, c.begin, c.end, out, op);
}

void Communicator::roundTrip(float* p, Range c) {
    // In pieces through a small buffer on the stack: no allocation per call.
    uint16_t piece[2048];
    for (size_t at = c.begin; at < c.end; at += std::size(piece)) {
        const size_t n = std::min(std::size(piece), c.end - at);
        roundToBf16(p + at, piece, n);
        widenBf16(piece, p + at, n);
    }
}

}  // namespace tb

namespace tb {

namespace {

// The implementation for the ranks; across processes also the process group's lanes (one per rank).
std::unique_ptr<Communicator> makeImplementation(CommKind kind, std::vector<RankEndpoint> ranks, HolderEndpoint holder,
                                                 size_t maxCount, ProcessGroup* processes) {
    if (processes) {
        // MPI here moves host memory only (Debian's Open MPI is not CUDA-aware): CPU towers reduce
        // in shared memory first, GPU towers through the host (copies) unless NCCL spans the
        // processes' GPUs.
        const bool gpus = std::any_of(ranks.begin(), ranks.end(),
                                      [](const RankEndpoint& r) { return r.device.type != DeviceType::Cpu; });
        if (gpus && holder.backend && holder.device.type != DeviceType::Cpu)  // DeploymentPlan::checkAcrossProcesses
            throw Error("processes: MPI reduces host memory, not the holder " + holder.device.str() + "'s");
        if (gpus && kind == CommKind::Nccl) return makeNcclCommunicator(std::move(ranks), holder, maxCount, processes);
        if (!gpus && kind != CommKind::SharedMemory)
            throw Error("--transfers: across processes the towers of each process reduce in shared memory first");
        auto comm = gpus ? makeCopyCommunicator(std::move(ranks), holder, maxCount)
                         : makeSharedMemoryCommunicator(std::move(ranks), holder, maxCount);
        processes->setLanes(comm->size());
        return comm;
    }
    if (kind == CommKind::SharedMemory) return makeSharedMemoryCommunicator(std::move(ranks), holder, maxCount);
    if (kind == CommKind::Nccl) return makeNcclCommunicator(std::move(ranks), holder, maxCount, nullptr);
    return makeCopyCommunicator(std::move(ranks), holder, maxCount);
}

}  // namespace

std::unique_ptr<Communicator> makeCommunicator(CommKind kind, std::vector<RankEndpoint> ranks, HolderEndpoint holder,
                                               size_t maxCount, ProcessGroup* processes, CommPrecision gradients) {
    if (gradients == CommPrecision::Bf16) {
        // Rounded and summed by the host's arithmetic (DeploymentPlan::validate refuses GPU towers).
        for (const RankEndpoint& r : ranks)
            if (r.device.type != DeviceType::Cpu)
                throw Error("--comm-precision bf16: gradients are rounded in host memory, and " + r.device.str() +
                            " is a GPU (bf16 transfers between GPUs are not built yet)");
        if (holder.backend && holder.device.type != DeviceType::Cpu)
            throw Error("--comm-precision bf16: the holder " + holder.device.str() + " is a GPU");
    }
    const bool ncclGroup = processes && kind == CommKind::Nccl;  // NCCL spans the processes itself
    std::unique_ptr<Communicator> comm = makeImplementation(kind, std::move(ranks), holder, maxCount, processes);
    if (processes && !ncclGroup) comm->processes_ = processes;
    if (gradients == CommPrecision::Bf16) {
        comm->gradients_ = gradients;
        comm->wire_.assign(comm->ranks_.size(), std::vector<uint16_t>(maxCount));
        comm->landed_.assign(comm->ranks_.size(), std::vector<float>(maxCount));
    }
    return comm;
}

std::string gpuSharedByProcesses(ProcessGroup& processes, const std::vector<Device>& towers) {
    // A GPU is its machine and PCI address: CUDA's numbers differ between processes that see
    // different CUDA_VISIBLE_DEVICES.
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    std::string mine;
    for (const Device& d : towers)
        if (d.type == DeviceType::Cuda && d.index < int(gpuRuntime().gpus.size()))
            mine += std::string(host) + " " + gpuRuntime().gpus[size_t(d.index)].pciBusId + " " + d.str() + "\n";
    const std::vector<std::string> all = processes.gather(mine);
    std::map<std::string, int> owner;  // "host pci" -> the first process with a tower there
    for (int p = 0; p < int(all.size()); ++p) {
        size_t at = 0;
        for (size_t end; (end = all[size_t(p)].find('\n', at)) != std::string::npos; at = end + 1) {
            const std::string line = all[size_t(p)].substr(at, end - at);
            const std::string gpu = line.substr(0, line.rfind(' '));
            const auto [it, fresh] = owner.emplace(gpu, p);
            if (!fresh && it->second != p)
                return "processes " + std::to_string(it->second) + " and " + std::to_string(p) + " both have a tower on " +
                       line.substr(line.rfind(' ') + 1) + " of " + gpu.substr(0, gpu.find(' ')) + " (PCI " +
                       gpu.substr(gpu.find(' ') + 1) + ")";
        }
    }
    return "";
}

}  // namespace tb
