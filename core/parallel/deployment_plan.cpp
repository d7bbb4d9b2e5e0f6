#include "parallel/deployment_plan.hpp"

#include <algorithm>
#include <charconv>
#include <set>
#include <sstream>
#include <nlohmann/json.hpp>

#include "util/error.hpp"

namespace tb {

namespace {

std::vector<std::string> split(const std::string& text, char sep) {
    std::vector<std::string> out;
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, sep);) out.push_back(item);
    return out;
}

const char* toString(VariablePlacement v) {
    switch (v) {
    case VariablePlacement::Cpu: return "cpu";
    case VariablePlacement::Tower: return "tower";
    case VariablePlacement::Replicated: return "replicated";
    }
    return "?";
}

}  // namespace

std::vector<Device> DeploymentPlan::parseTowers(const std::string& text, int cpuDevices, int gpuDevices,
                                                const std::string& origin) {
    std::vector<Device> towers;
    if (text == "auto") {
        // Every GPU found, one tower each (model_deploy's num_clones); else one CPU tower per
        // core, as clone_on_cpu would place them.
        for (int i = 0; i < gpuDevices; ++i) towers.push_back(Device{DeviceType::Cuda, i});
        if (towers.empty())
            for (int i = 0; i < cpuDevices; ++i) towers.push_back(Device{DeviceType::Cpu, i});
        return towers;
    }
    for (const std::string& item : split(text, ',')) {
        if (item.empty()) throw Error(origin + ": empty entry in the tower list '" + text + "'");
        // "gpu:0*2": two towers on gpu:0, each with its own stream (teaching on one GPU).
        const auto star = item.find('*');
        int copies = 1;
        if (star != std::string::npos) {
            const std::string count = item.substr(star + 1);
            auto [p, ec] = std::from_chars(count.data(), count.data() + count.size(), copies);
            if (ec != std::errc() || p != count.data() + count.size() || count.empty() || copies < 1 || copies > 64)
                throw Error(origin + ": '" + item + "': the count after '*' must be an integer from 1 to 64");
        }
        try {
            const Device d = Device::parse(item.substr(0, star));
            towers.insert(towers.end(), size_t(copies), d);
        } catch (const Error& e) {
            throw Error(origin + ": " + e.what());
        }
    }
    return towers;
}

void DeploymentPlan::parseVariables(const std::string& text, DeploymentPlan& plan, const std::string& origin) {
    if (text == "cpu") {
        plan.variables = VariablePlacement::Cpu;
        return;
    }
    if (text == "replicated") {
        plan.variables = VariablePlacement::Replicated;
        return;
    }
    Device d;
    try {
        d = Device::parse(text);
    } catch (const Error&) {
        throw Error(origin + ": '" + text + "' is not a place for variables (expected cpu, replicated or a tower's device)");
    }
    // The first tower on that device: towers sharing a GPU share its memory, so the holder is
    // the device, and variablesTower names the first of its towers.
    for (size_t i = 0; i < plan.towers.size(); ++i)
        if (plan.towers[i] == d) {
            plan.variables = VariablePlacement::Tower;
            plan.variablesTower = int(i);
            return;
        }
    throw Error(origin + ": variables on " + d.str() + ", which is not one of the towers");
}

ReduceMode DeploymentPlan::parseReduce(const std::string& text, const std::string& origin) {
    if (text == "mean") return ReduceMode::Mean;
    if (text == "allreduce") return ReduceMode::AllReduce;
    throw Error(origin + ": unknown reduction '" + text + "' (expected mean or allreduce)");
}

UpdateMode DeploymentPlan::parseUpdate(const std::string& text, const std::string& origin) {
    if (text == "sync") return UpdateMode::Sync;
    if (text == "async") return UpdateMode::Async;
    throw Error(origin + ": unknown update mode '" + text + "' (expected sync or async)");
}

Transfers DeploymentPlan::parseTransfers(const std::string& text, const std::string& origin) {
    if (text == "auto") return Transfers::Auto;
    if (text == "copies") return Transfers::Copies;
    if (text == "nccl") return Transfers::Nccl;
    throw Error(origin + ": unknown transfers '" + text + "' (expected auto, copies or nccl)");
}

std::vector<double> DeploymentPlan::parseSlowdown(const std::string& text, int towers, const std::string& origin) {
    std::vector<double> f(size_t(towers), 1.0);
    if (text.empty()) return {};
    std::vector<bool> given(size_t(towers), false);
    for (std::string item : split(text, ',')) {
        item.erase(std::remove(item.begin(), item.end(), ' '), item.end());  // " 1 = 4 " is 1=4
        const auto eq = item.find('=');
        int tower = -1;
        double factor = 0;
        bool ok = eq != std::string::npos;
        if (ok) {
            auto [p, ec] = std::from_chars(item.data(), item.data() + eq, tower);
            ok = ec == std::errc() && p == item.data() + eq;
            try {
                size_t used = 0;
                factor = std::stod(item.substr(eq + 1), &used);
                ok = ok && used == item.size() - eq - 1;
            } catch (const std::exception&) {
                ok = false;
            }
        }
        if (!ok) throw Error(origin + ": '" + item + "' is not TOWER=FACTOR (e.g. 1=3)");
        if (tower < 0 || tower >= towers)
            throw Error(origin + ": tower " + std::to_string(tower) + " does not exist (there are " +
                        std::to_string(towers) + ")");
        if (!(factor >= 1.0 && factor <= 1000.0))
            throw Error(origin + ": slowdown factor " + item.substr(eq + 1) + " must be between 1 and 1000");
        if (given[size_t(tower)])
            throw Error(origin + ": tower " + std::to_string(tower) + " is given twice ('" + text + "'); give each tower once");
        given[size_t(tower)] = true;
        f[size_t(tower)] = factor;
    }
    return f;
}

void DeploymentPlan::validate(int cpuDevices, int gpuDevices) const {
    if (towers.empty()) throw Error("--towers: a plan needs at least one tower");
    std::set<std::string> seen;
    for (const Device& d : towers) {
        // Several towers may share a GPU (each with its own stream); a CPU tower is a virtual
        // device of its own, so listing one twice is a mistake.
        if (!seen.insert(d.str()).second && d.type == DeviceType::Cpu)
            throw Error("--towers: " + d.str() + " is listed twice (CPU towers are cpu:0, cpu:1, ...)");
        if (d.type != towers[0].type)
            throw Error("--towers: " + towers[0].str() + " and " + d.str() +
                        " mix CPU and GPU towers in one run; use only CPU or only GPU towers");
        if (d.type == DeviceType::Cuda && d.index >= gpuDevices)
            throw Error("--towers: " + d.str() + " does not exist (" +
                        (gpuDevices ? std::to_string(gpuDevices) + " GPUs here" : std::string("no GPU backend here")) +
                        ")");
        if (d.type == DeviceType::Cpu && d.index >= cpuDevices)
            throw Error("--towers: " + d.str() + " does not exist (this machine offers " + std::to_string(cpuDevices) +
                        " virtual CPU towers: cpu:0 to cpu:" + std::to_string(cpuDevices - 1) + ")");
    }
    if (variables == VariablePlacement::Tower && (variablesTower < 0 || variablesTower >= towerCount()))
        throw Error("--variables: the variables' tower is not one of the towers");
    if (reduce == ReduceMode::AllReduce && variables != VariablePlacement::Replicated)
        throw Error("--reduce allreduce needs --variables replicated (every tower holds a copy to reduce into)");
    if (reduce == ReduceMode::Mean && variables == VariablePlacement::Replicated)
        throw Error("--variables replicated needs --reduce allreduce (there is no single holder to average on)");
    if (averageEvery < 0) throw Error("--average-every: K must be at least 1, got " + std::to_string(averageEvery));
    if (averaging() && variables != VariablePlacement::Replicated)
        throw Error("--average-every needs --variables replicated (each tower keeps its own copy between averages)");
    if (update == UpdateMode::Async && variables == VariablePlacement::Replicated)
        throw Error("--update async needs the variables on one holder (--variables cpu or a tower), not replicated");
    if (psShards < 1) throw Error("--ps-shards: S must be at least 1, got " + std::to_string(psShards));
    if (psShards > 1 && variables == VariablePlacement::Replicated)
        throw Error("--ps-shards: replicated variables have no parameter servers to shard");
    // In one process a synchronous update is already split over the tower threads (each applies
    // its share of the variables), so shards would change nothing that runs; they are the async
    // holder's locks, and across processes the --ps-tasks servers.
    if (psShards > 1 && update == UpdateMode::Sync && psTasks == 0 && variables != VariablePlacement::Replicated)
        throw Error("--ps-shards: a synchronous update in one process is already split over the tower threads, so "
                    "shards add nothing; they are the asynchronous holder's (--update async), and across processes the "
                    "--ps-tasks servers are the shards");
    if (psTasks < 0) throw Error("--ps-tasks: P must be at least 0, got " + std::to_string(psTasks));
    if (psTasks > 0 && variables != VariablePlacement::Cpu)
        throw Error("--ps-tasks: the variables live on the parameter-server processes; leave --variables at cpu");
    if (psTasks > 0 && averaging())
        throw Error("--ps-tasks: parameter servers hold one copy of the variables; averaging every K steps is for "
                    "replicated variables (leave --average-every out)");
    if (psTasks > 0 && psShards > 1)
        throw Error("--ps-shards: with --ps-tasks the parameter-server processes are the shards; leave --ps-shards out");
    if (batchPerTower < 0) throw Error("--batch-per-tower: must be positive");
    if (transfers == Transfers::Nccl) {
        std::set<std::string> gpus;
        for (const Device& d : towers)
            if (d.type != DeviceType::Cuda || !gpus.insert(d.str()).second)
                throw Error("--transfers nccl: NCCL takes one tower per GPU (" + d.str() + " is " +
                            (d.type == DeviceType::Cuda ? "listed twice" : "not a GPU") + ")");
        if (update == UpdateMode::Async)
            throw Error("--transfers nccl: asynchronous updates pull and push alone, which NCCL's collectives do not");
        if (variables == VariablePlacement::Cpu)
            throw Error("--transfers nccl: NCCL connects GPUs; put the variables on a tower's GPU or replicate them");
    }
    if (!slowdown.empty() && int(slowdown.size()) != towerCount())
        throw Error("--slow: one factor per tower expected");
    if (accumulate < 1) throw Error("--accumulate: K must be at least 1, got " + std::to_string(accumulate));
    if (accumulate > 1 && update == UpdateMode::Async)
        throw Error("--accumulate: free-running towers (--update async) push every gradient they compute; leave one out");
    if (syncBatchNorm && update == UpdateMode::Async)
        throw Error("--sync-bn: free-running towers (--update async) take no step together to sum their statistics in");
    if (commPrecision == CommPrecision::Bf16) {
        // A GPU holding the variables takes bf16 gradients from other devices through NCCL only,
        // which needs synchronous updates and one tower per GPU (TowerSet's choice of transfers).
        if (variables == VariablePlacement::Tower && towers[size_t(variablesTower)].type == DeviceType::Cuda) {
            const Device holder = towers[size_t(variablesTower)];
            const bool elsewhere = std::any_of(towers.begin(), towers.end(), [&](const Device& d) { return d != holder; });
            std::set<std::pair<int, int>> gpus;
            for (const Device& d : towers) gpus.emplace(int(d.type), d.index);
            const bool distinct = gpus.size() == towers.size();
            const char* why = transfers == Transfers::Copies ? "--transfers copies"
                              : update == UpdateMode::Async  ? "asynchronous updates move them by copies"
                              : !distinct                    ? "two towers share a GPU, and NCCL takes one per GPU"
                                                             : nullptr;
            if (elsewhere && why) throw Error(bf16ToGpuHolderRefused(holder.str(), why));
        }
        if (averaging())
            throw Error("--comm-precision bf16: averaging every K steps exchanges the variables, which always move in "
                        "fp32 (leave --average-every out, or --comm-precision at fp32)");
    }
}

void DeploymentPlan::checkAcrossProcesses() const {
    if (psTasks > 0) return;  // the workers' towers meet on their host, then talk to the servers
    if (update == UpdateMode::Async)
        throw Error("--update async: across processes, asynchronous updates go through parameter-server processes "
                    "(add --ps-tasks P)");
    // MPI moves host memory, and every process keeps its own copy of the variables.
    if (variables == VariablePlacement::Tower && towers[size_t(variablesTower)].type == DeviceType::Cuda)
        throw Error("--variables " + towers[size_t(variablesTower)].str() + ": across processes the variables live on "
                    "the host (--variables cpu) or in every tower (--variables replicated), not on one process's GPU");
}

bool DeploymentPlan::cpuTowersReadVariablesInPlace() const {
    if (variables == VariablePlacement::Replicated || transfers == Transfers::Copies || update != UpdateMode::Sync ||
        psTasks > 0)
        return false;
    // Variables on a tower are then on a CPU too.
    return std::all_of(towers.begin(), towers.end(), [](const Device& d) { return d.type == DeviceType::Cpu; });
}

std::string DeploymentPlan::describe() const {
    std::string t;
    for (const Device& d : towers) t += (t.empty() ? "" : ", ") + d.str();
    std::string s = std::to_string(towers.size()) + (towers.size() == 1 ? " tower (" : " towers (") + t + "), variables ";
    s += psTasks > 0 ? "on " + std::to_string(psTasks) + " parameter-server " + (psTasks == 1 ? "process" : "processes")
         : variables == VariablePlacement::Tower ? "on " + towers[size_t(variablesTower)].str()
         : variables == VariablePlacement::Cpu   ? std::string("on cpu")
                                               : std::string("replicated");
    s += reduce == ReduceMode::Mean ? ", mean" : ", all-reduce";
    s += update == UpdateMode::Sync ? ", sync" : ", async";
    if (averaging()) s += ", parameters averaged every " + std::to_string(averageEvery) + " steps";
    if (psShards > 1) s += ", " + std::to_string(psShards) + " ps shards";
    if (transfers == Transfers::Copies) s += ", every transfer copied";
    if (transfers == Transfers::Nccl) s += ", NCCL";
    if (commPrecision == CommPrecision::Bf16) s += ", bf16 gradients";
    if (accumulate > 1) s += ", gradients of " + std::to_string(accumulate) + " micro-steps per update";
    if (syncBatchNorm) s += ", batch norm synchronised";
    if (reportLag > 0) s += ", results read " + std::to_string(reportLag) + " step" + (reportLag == 1 ? "" : "s") + " late";
    return s;
}

nlohmann::json DeploymentPlan::toJson() const {
    nlohmann::json t = nlohmann::json::array();
    for (const Device& d : towers) t.push_back(d.str());
    return {{"towers", t},
            {"variables", variables == VariablePlacement::Tower ? towers[size_t(variablesTower)].str()
                                                                : std::string(toString(variables))},
            {"reduce", reduce == ReduceMode::Mean ? "mean" : "allreduce"},
            {"update", update == UpdateMode::Sync ? "sync" : "async"},
            {"average_every", averageEvery},
            {"ps_shards", psShards},
            {"ps_tasks", psTasks},
            {"batch_per_tower", batchPerTower},
            {"slowdown", slowdown},
            {"transfers", transfers == Transfers::Copies ? "copies" : transfers == Transfers::Nccl ? "nccl" : "auto"},
            {"comm_precision", toString(commPrecision)},
            {"accumulate", accumulate},
            {"sync_bn", syncBatchNorm},
            {"report_lag", reportLag}};
}

}  // namespace tb
