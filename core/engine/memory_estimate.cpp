#include "engine/memory_estimate.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "nn/network.hpp"
#include "parallel/stage_plan.hpp"
#include "util/error.hpp"

namespace tb {

std::string mebibytes(size_t bytes) {
    char text[32];
    if (bytes >= (size_t(1) << 30)) std::snprintf(text, sizeof text, "%.1f GiB", double(bytes) / double(1 << 30));
    else std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / double(1 << 20));
    return text;
}

namespace {
// A run's needs gathered per memory: host memory (every CPU device) or one GPU's; host memory
// first holds the datasets, already read.
class NeedsByMemory {
public:
    explicit NeedsByMemory(size_t datasetBytes) {
        MemoryNeed& host = at(Device{});
        add(host, datasetBytes, "datasets");
        host.alreadyHeld = datasetBytes;
    }
    MemoryNeed& at(const Device& d) {
        const Device m = d.type == DeviceType::Cpu ? Device{} : d;
        MemoryNeed& n = byMemory_[{int(m.type), m.index}];
        n.device = m;
        return n;
    }
    static void add(MemoryNeed& n, size_t bytes, const std::string& what, const std::string& detail = {}) {
        n.bytes += bytes;
        n.parts += (n.parts.empty() ? "" : ", ") + what + " " + mebibytes(bytes) + detail;
    }
    std::vector<MemoryNeed> list() const {
        std::vector<MemoryNeed> out;
        for (const auto& [key, n] : byMemory_) out.push_back(n);
        return out;
    }

private:
    std::map<std::pair<int, int>, MemoryNeed> byMemory_;
};
}  // namespace

std::vector<MemoryNeed> estimateRunMemory(const ModelSpec& spec, const DeploymentPlan& plan, int batchPerTower,
                                          int slots, bool ema, size_t datasetBytes, MatmulPrecision precision) {
    const NetworkMemory net = estimateNetworkMemory(spec, batchPerTower);
    const size_t variables = net.params;  // P floats
    const size_t bf16Copies = precision == MatmulPrecision::Bf16 ? (net.params + net.activations) / 2 : 0;
    const size_t tower = net.params + net.grads + net.activations + net.saved + net.workspace + net.statistics + bf16Copies;
    const bool replicated = plan.variables == VariablePlacement::Replicated;
    // Where the variables (with their slots and moving average) live: the host, one tower's
    // device, or every tower (replicated: each replica keeps its own slots too).
    const Device holder = plan.variables == VariablePlacement::Tower ? plan.towers[size_t(plan.variablesTower)] : Device{};
    NeedsByMemory needs(datasetBytes);
    const size_t state = variables * size_t(1 + slots + (ema ? 1 : 0));
    // bf16 with CPU towers reading the variables in place: the update also keeps them rounded to
    // bf16 (HolderMean), half the variables' bytes.
    const size_t rounded =
        precision == MatmulPrecision::Bf16 && plan.cpuTowersReadVariablesInPlace() ? variables / 2 : 0;
    if (!replicated) NeedsByMemory::add(needs.at(holder), state + rounded, "variables with optimiser state");
    std::map<std::pair<int, int>, int> towersOn;
    for (const Device& d : plan.towers) ++towersOn[{int(d.type), d.type == DeviceType::Cpu ? 0 : d.index}];
    for (const auto& [key, count] : towersOn) {
        const Device d = key.first == int(DeviceType::Cpu) ? Device{} : Device{DeviceType::Cuda, key.second};
        const size_t each = tower + (replicated ? variables * size_t(slots) : 0) +
                            (d.type == DeviceType::Cuda ? size_t(32) << 20 : 0);  // cuBLAS workspace per stream
        NeedsByMemory::add(needs.at(d), each * size_t(count), count == 1 ? "1 tower" : std::to_string(count) + " towers",
                           count == 1 ? "" : " (" + std::to_string(count) + " x " + mebibytes(each) + ")");
    }
    return needs.list();
}

size_t estimateStageBytes(const ModelSpec& spec, const StagePipelineSetup& setup, const PipelineSchedule& schedule,
                          int stage, int slots, bool ema) {
    const int count = int(setup.ranges.size());
    const int micro = std::max(1, setup.microBatches), replicas = std::max(1, setup.replicas);
    const int microBatch = std::max(1, setup.batch / (micro * replicas));
    // A stage per process holds one replica; replica 0's also receives the others' gradients.
    const int here = setup.localStage >= 0 ? 1 : replicas;
    const auto [first, last] = setup.ranges[size_t(stage)];
    const NetworkMemory net = estimateNetworkMemory(spec, microBatch, LayerRange{first, last});
    const size_t held = size_t(activationsHeld(schedule.ops(stage, count, micro)));
    const size_t outputGrad = stage + 1 < count ? size_t(microBatch) * size_t(layerOutputDims(spec, last).size()) * sizeof(float) : 0;
    // Explicit copies, a GPU other than the stage before's (NCCL receives into buffers of the
    // stage's own), or a process of its own (MPI receives): an input per slot and one input
    // gradient, of the stage before's output.
    const auto& d = setup.devices;
    const bool ownInput = stage > 0 && (setup.copies || setup.localStage >= 0 ||
                                        (d.size() == size_t(count) && ownsInput(d[size_t(stage) - 1], d[size_t(stage)], false)));
    const size_t input = ownInput ? size_t(microBatch) * size_t(layerOutputDims(spec, first - 1).size()) * sizeof(float) : 0;
    const size_t activations = held * (net.activations + net.saved + net.workspace + outputGrad + input) + input;
    const size_t perReplica = net.grads * (micro > 1 ? 2 : 1);
    const size_t bf16 = setup.opt.precision == MatmulPrecision::Bf16 ? (net.params + held * net.activations) / 2 : 0;
    const bool receives = setup.localStage >= 0 && setup.localReplica == 0 && replicas > 1;
    return net.params * size_t(1 + slots + (ema ? 1 : 0) + (receives ? 1 : 0)) +
           size_t(here) * (perReplica + activations + bf16 + net.statistics);
}

std::vector<MemoryNeed> estimatePipelineMemory(const ModelSpec& spec, const StagePipelineSetup& setup,
                                               const PipelineSchedule& schedule, int slots, bool ema,
                                               size_t datasetBytes) {
    NeedsByMemory needs(datasetBytes);
    if (const int s = setup.localStage; s >= 0) {
        // A stage per process: this process's stage; the chief (stage 0 of replica 0) also evaluates, and
        // holds the other stages' variables, optimiser slots and moving average as it gathers them.
        NeedsByMemory::add(needs.at(Device{}), estimateStageBytes(spec, setup, schedule, s, slots, ema),
                           "stage " + std::to_string(s + 1));
        if (s == 0 && setup.localReplica == 0) {
            const NetworkMemory eval = estimateNetworkMemory(spec, setup.batch);
            const auto [first, last] = setup.ranges.front();
            const size_t own = estimateNetworkMemory(spec, 1, LayerRange{first, last}).params;
            NeedsByMemory::add(needs.at(Device{}), eval.activations + eval.saved + eval.statistics, "evaluation network");
            NeedsByMemory::add(needs.at(Device{}), (eval.params - own) * size_t(1 + slots + (ema ? 1 : 0)),
                               ema ? "the other stages' variables, optimiser slots and moving average, gathered"
                                   : "the other stages' variables and optimiser slots, gathered");
            if (setup.replicas > 1 && eval.statistics > 0)
                NeedsByMemory::add(needs.at(Device{}), size_t(setup.replicas - 1) * eval.statistics,
                                   "the other replicas' batch norm statistics, gathered");
        }
        return needs.list();
    }
    const NetworkMemory eval = estimateNetworkMemory(spec, setup.batch);
    NeedsByMemory::add(needs.at(Device{}), eval.activations + eval.saved + eval.statistics, "evaluation network");
    // GPU stages keep their variables on their GPUs; evaluation reads a copy gathered into host
    // memory (and the moving average lives beside it).
    if (anyGpu(setup.devices))
        NeedsByMemory::add(needs.at(Device{}), eval.params * (ema ? 2 : 1), "variables gathered from the stages");
    for (int s = 0; s < int(setup.ranges.size()); ++s)
        NeedsByMemory::add(needs.at(setup.devices[size_t(s)]), estimateStageBytes(spec, setup, schedule, s, slots, ema),
                           "stage " + std::to_string(s + 1));
    return needs.list();
}

StageFit fewestStagesThatFit(const ModelSpec& spec, const StagePipelineSetup& setup, const PipelineSchedule& schedule,
                             int slots, bool ema, const std::vector<double>& cost, const std::vector<size_t>& freeBytes) {
    StageFit fit;
    if (freeBytes.empty()) return fit;
    const NetworkMemory one = estimateNetworkMemory(spec, setup.batch);
    const size_t bf16 = setup.opt.precision == MatmulPrecision::Bf16 ? (one.params + one.activations) / 2 : 0;
    const size_t tower =
        one.params * size_t(1 + slots + (ema ? 1 : 0)) + one.grads + one.activations + one.saved + one.statistics + bf16;
    if (tower <= freeBytes[0]) return {1, {}, {tower}};
    const int layers = int(cost.size());
    for (int count = 2; count <= std::min<int>(layers, int(freeBytes.size())); ++count) {
        StagePipelineSetup trial = setup;
        trial.ranges.assign(size_t(count), {0, 0});
        trial.devices.clear();  // one GPU each
        for (int s = 0; s < count; ++s) trial.devices.push_back(Device{DeviceType::Cuda, s});
        // A stage's memory depends on its layers and its place (how many micro-batches it holds).
        const auto fits = [&](int stage, int first, int last) {
            trial.ranges[size_t(stage)] = {first, last};
            return estimateStageBytes(spec, trial, schedule, stage, slots, ema) <= freeBytes[size_t(stage)];
        };
        std::vector<std::pair<int, int>> ranges = balanceStages(cost, count, atCuts(spec, fits));
        if (ranges.empty()) continue;
        trial.ranges = ranges;
        fit.count = count;
        fit.ranges = std::move(ranges);
        for (int s = 0; s < count; ++s) fit.bytes.push_back(estimateStageBytes(spec, trial, schedule, s, slots, ema));
        return fit;
    }
    return fit;
}

namespace {
// A "Key:   123 kB" line of a /proc file, in bytes; 0 where absent.
size_t procBytes(const char* file, const std::string& key) {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);)
        if (line.starts_with(key + ":")) {
            std::istringstream value(line.substr(key.size() + 1));
            size_t kib = 0;
            value >> kib;
            return kib << 10;
        }
    return 0;
}
}  // namespace

size_t hostMemoryAvailable() {
    size_t available = procBytes("/proc/meminfo", "MemAvailable");
    rlimit as{};
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
        const size_t used = procBytes("/proc/self/status", "VmSize");  // the address space taken already
        const size_t room = as.rlim_cur > used ? size_t(as.rlim_cur) - used : 0;
        available = available ? std::min(available, room) : room;
    }
    return available;
}

void checkMemoryFits(const std::vector<MemoryNeed>& needs, const std::function<size_t(const Device&)>& available,
                     const std::string& what) {
    for (const MemoryNeed& n : needs) {
        const size_t have = available(n.device);
        const size_t toAllocate = n.bytes - n.alreadyHeld;
        if (have == 0 || toAllocate <= have) continue;
        const std::string memory = n.device.type == DeviceType::Cpu ? "host memory" : n.device.str() + "'s memory";
        throw Error(what + ": this run needs about " + mebibytes(n.bytes) + " of " + memory + " (" + n.parts + ") but " +
                    mebibytes(have) + " more is available; lower --batch, use fewer towers or a smaller model");
    }
}

}  // namespace tb
