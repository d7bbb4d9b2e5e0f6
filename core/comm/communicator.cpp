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
#include "util/elapsed.hpp"

namespace tb {

Communicator::Communicator(std::vector<RankEndpoint> ranks, HolderEndpoint holder)
    : ranks_(std::move(ranks)),
      holder_(holder),
      published_(ranks_.size(), nullptr),
      publishedOut_(ranks_.size(), nullptr),
      barrier_(int(ranks_.size())),
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
    const bool met = barrier_.arriveAndWait();
    waited_[size_t(rank)] += secondsSince(t0);
    if (!met) {
        std::lock_guard lock(abandonedMutex_);
        throw Error(abandoned_);
    }
}

void Communicator::abandon(const std::string& why) {
    {
        std::lock_guard lock(abandonedMutex_);
        if (abandoned_.empty()) abandoned_ = why;
    }
    barrier_.abandon();
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

void Communicator::countAllGather(int rank, size_t count) {
    if (processes_) throw Error("an all-gather across processes is not built yet (a layer split runs in one process)");
    if (rank == 0) countTotal(int64_t(distinctDevices_) * int64_t(distinctDevices_ - 1) * int64_t(count * sizeof(float)));
}

int64_t Communicator::ringBytes(size_t count) const { return 2 * int64_t(distinctDevices_ - 1) * gradientBytes(count); }

namespace {
// bf16 bits in a backend's host memory (pinned for a GPU) or device memory, freed by it.
std::shared_ptr<uint16_t> bits(Backend& be, size_t count, bool host) {
    const size_t bytes = std::max<size_t>(count, 1) * sizeof(uint16_t);
    Backend* b = &be;
    if (host) return {static_cast<uint16_t*>(b->allocateHost(bytes)), [b](uint16_t* p) { b->deallocateHost(p); }};
    return {static_cast<uint16_t*>(b->allocate(bytes)), [b](uint16_t* p) { b->deallocate(p); }};
}
}  // namespace

void Communicator::prepareWire(size_t maxCount, bool hostSide) {
    if (!anyRoundsOnWire()) return;  // nothing leaves its device
    for (int j = 0; j < size(); ++j) {
        Backend& be = *ranks_[size_t(j)].backend;
        const bool host = hostSide && roundsOnWire(j), gpu = ranks_[size_t(j)].device.type != DeviceType::Cpu;
        wire_.push_back(host ? bits(be, maxCount, true) : nullptr);
        deviceWire_.push_back(gpu && (host || !hostSide) ? bits(be, maxCount, false) : nullptr);
        landed_.emplace_back(host ? maxCount : 0);
    }
    if (hostSide) resultWire_ = bits(*ranks_[0].backend, maxCount, true);
}

bool Communicator::anyRoundsOnWire() const {
    for (int r = 0; r < size(); ++r)
        if (roundsOnWire(r)) return true;
    return false;
}

uint16_t* Communicator::deviceWire(int rank) const {
    return deviceWire_[size_t(rank)] ? deviceWire_[size_t(rank)].get() : wire_[size_t(rank)].get();
}

void Communicator::toWire(int rank, const float* src, size_t count) {
    const RankEndpoint& r = ranks_[size_t(rank)];
    uint16_t* onDevice = deviceWire(rank);
    r.backend->roundToBf16(r.stream, src, onDevice, count);
    if (onDevice != wire_[size_t(rank)].get())
        r.backend->copyToHost(r.stream, wire_[size_t(rank)].get(), onDevice, count * sizeof(uint16_t));
    r.backend->synchronize(r.stream);
}

const float* Communicator::throughWire(int rank, const float* src, size_t count) {
    toWire(rank, src, count);
    float* landed = landed_[size_t(rank)].data();
    if (holder_.backend && holder_.device.type == DeviceType::Cpu) {
        // The host holder's team widens it: on one thread the pass costs more than bf16 saves.
        holder_.backend->widenBf16(holderStream(rank), wire_[size_t(rank)].get(), landed, count);
        holder_.backend->synchronize(holderStream(rank));
    } else {
        widenBf16(wire_[size_t(rank)].get(), landed, count);
    }
    return landed;
}

void Communicator::fromWire(int rank, const uint16_t* hostBits, float* dst, size_t count) {
    const RankEndpoint& r = ranks_[size_t(rank)];
    const uint16_t* onDevice = hostBits;
    if (deviceWire_[size_t(rank)]) {
        r.backend->copyFromHost(r.stream, deviceWire(rank), hostBits, count * sizeof(uint16_t));
        onDevice = deviceWire(rank);
    }
    r.backend->widenBf16(r.stream, onDevice, dst, count);
    r.backend->synchronize(r.stream);
}

void Communicator::reduceGradients(Range c, const std::vector<const float*>& fp32, float* out, ReduceOp op) const {
    std::vector<WireSource> sources;
    for (int j = 0; j < size(); ++j)
        sources.push_back(roundsOnWire(j) ? WireSource{wire_[size_t(j)].get(), nullptr} : WireSource{nullptr, fp32[size_t(j)]});
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
    const bool ncclGroup = processes && kind == CommKind::Nccl;  // NCCL spans the processes itself
    std::unique_ptr<Communicator> comm = makeImplementation(kind, std::move(ranks), holder, maxCount, processes);
    if (processes && !ncclGroup) comm->processes_ = processes;
    if (gradients == CommPrecision::Bf16) {
        comm->gradients_ = gradients;
        // The host sums what arrives in bf16: it cannot write a GPU holder's memory (NCCL can).
        if (kind != CommKind::Nccl && holder.backend && holder.device.type != DeviceType::Cpu && comm->anyRoundsOnWire())
            throw Error(bf16ToGpuHolderRefused(holder.device.str(), std::string("--transfers ") +
                                                                        (kind == CommKind::Copies ? "copies" : "auto") + " here"));
        comm->prepareWire(maxCount, kind != CommKind::Nccl);
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
