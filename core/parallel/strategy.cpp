#include "parallel/strategy.hpp"

#include "parallel/strategies.hpp"

namespace tb {

std::vector<RankEndpoint> rankEndpoints(const std::vector<Replica>& replicas) {
    std::vector<RankEndpoint> ranks;
    for (const Replica& r : replicas) ranks.push_back({r.backend, r.stream, r.device});
    return ranks;
}

Tensor variablesOnHolder(const HolderEndpoint& holder, const std::vector<Replica>& replicas, size_t count) {
    Backend& gpu = *replicas[0].backend;
    if (holder.device.type == DeviceType::Cpu && gpu.device().type == DeviceType::Cuda) {
        float* p = static_cast<float*>(gpu.allocateHost(count * sizeof(float)));
        return Tensor(p, Shape{int64_t(count)}, Device{}, [&gpu](float* q) { gpu.deallocateHost(q); });
    }
    return holder.backend->empty(Shape{int64_t(count)});
}

void copyInitial(Replica& r, const std::vector<float>& init) { copyInitial(r, init.data(), init.size()); }

void copyInitial(Replica& r, const float* host, size_t count) {
    r.backend->copyFromHost(r.stream, r.net->params(), host, count * sizeof(float));
    r.backend->synchronize(r.stream);
}

void appendSlots(std::vector<StateBuffer>& out, const std::string& prefix, Optimizer& opt, Stream stream) {
    for (auto& [name, slot] : opt.slotBuffers())
        out.push_back({prefix + "optimizer/" + name, &opt.backend(), stream, slot->data(), size_t(slot->numel())});
}

std::unique_ptr<Strategy> makeStrategy(const StrategySetup& s) {
    if (s.processes && s.plan.psTasks > 0) return std::make_unique<ParameterServerProcesses>(s);
    if (s.plan.update == UpdateMode::Async) return std::make_unique<AsyncParameterServer>(s);
    if (s.plan.variables != VariablePlacement::Replicated) return std::make_unique<HolderMean>(s);
    if (s.plan.averaging()) return std::make_unique<LocalAveraging>(s);
    return std::make_unique<AllReduce>(s);
}

}  // namespace tb
