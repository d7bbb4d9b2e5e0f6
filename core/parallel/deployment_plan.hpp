// DeploymentPlan: where a data-parallel run puts its replicas (towers) and its variables, how
// gradients meet, and when updates happen: the choices of TF-Slim's DeploymentConfig and of
// cifar10_multi_gpu_train.py, as one value saved in the run config and shown by the window.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "comm/bf16_wire.hpp"
#include "tensor/tensor.hpp"

namespace tb {

enum class VariablePlacement { Cpu, Tower, Replicated };
enum class ReduceMode { Mean, AllReduce };
enum class UpdateMode { Sync, Async };
// How towers exchange data: auto (shared memory where they share it; NCCL between distinct GPUs
// where it applies; explicit copies otherwise), or forced.
enum class Transfers { Auto, Copies, Nccl };

struct DeploymentPlan {
    std::vector<Device> towers{Device{}};      // one replica each
    VariablePlacement variables = VariablePlacement::Cpu;
    int variablesTower = 0;                    // with Tower: index into towers holding the variables
    ReduceMode reduce = ReduceMode::Mean;
    UpdateMode update = UpdateMode::Sync;
    // 0: off (gradients meet every step). K >= 1: every replica takes local steps on its own
    // gradients and the parameters are all-reduced to their mean every K steps (K = 1 equals
    // synchronous training for SGD and momentum). Needs replicated variables.
    int averageEvery = 0;
    int psShards = 1;                          // variables split round-robin over S holders
    // Processes (mpirun): the first P processes hold the variables as parameter servers, dealt
    // round-robin by variable; the others are workers with `towers` each (0: no servers).
    int psTasks = 0;
    int batchPerTower = 0;                     // 0: the run's batch split evenly over the towers
    std::vector<double> slowdown;              // per tower, >= 1 (straggler injection); empty: none
    // --transfers copies: towers share no memory with each other or the holder even where they
    // could (CPU towers): every transfer is an explicit copy, as between GPUs or processes.
    // --transfers nccl: NCCL collectives (towers on distinct GPUs, synchronous updates).
    Transfers transfers = Transfers::Auto;
    // --comm-precision bf16: the gradients cross between towers, holder and processes in bf16 (2
    // bytes an element; comm/communicator.hpp says where they are summed); the variables always
    // in fp32. CPU towers only, and not with averaging (which exchanges the variables).
    CommPrecision commPrecision = CommPrecision::Fp32;
    // --accumulate K: each tower's slice of a step's K x batchPerTower examples in K micro-steps of
    // batchPerTower, their gradients summed before the towers meet (one step on the K-times batch).
    int accumulate = 1;
    // --sync-bn: batch norm's statistics summed over every tower (and process) of the step, each
    // batch norm of each tower meeting the others in forward and in backward.
    bool syncBatchNorm = false;
    // --report-lag N: the host reads each step's loss, accuracy and phase times N steps after it
    // launched the step, and waits for no stream within a step, so the device never idles while
    // the host reports (TowerSet::reportLag says where it applies). -1: automatic (2 for one GPU
    // tower, else 0); 0: every step is read before the next begins.
    int reportLag = 0;

    int towerCount() const { return int(towers.size()); }
    bool averaging() const { return averageEvery > 0; }
    // CPU towers read the variables where the holder keeps them (TowerSet's shared memory): every
    // tower on a CPU, the variables on the host or on one of them, not --transfers copies,
    // synchronous updates, no parameter-server processes. With bf16 matrix work the update then
    // also writes the variables rounded for the towers' next step (HolderMean), which the memory
    // estimate counts: one rule for both.
    bool cpuTowersReadVariablesInPlace() const;
    // Refuses an invalid plan with one sentence naming the setting; cpuDevices/gpuDevices:
    // how many of each exist here.
    void validate(int cpuDevices, int gpuDevices) const;
    // Refuses, in one sentence, what a plan cannot do in each process of an mpirun launch.
    void checkAcrossProcesses() const;
    std::string describe() const;              // "2 towers (cpu:0, cpu:1), variables on cpu, ..."
    nlohmann::json toJson() const;

    // Parsers for the settings' text forms; `origin` names the flag or file in errors.
    // "cpu:0,cpu:1", "gpu:0,gpu:1", "gpu:0*2" (two towers on gpu:0) or "auto" (every GPU, else
    // one CPU tower per core).
    static std::vector<Device> parseTowers(const std::string& text, int cpuDevices, int gpuDevices,
                                           const std::string& origin);
    static void parseVariables(const std::string& text, DeploymentPlan& plan, const std::string& origin);
    static ReduceMode parseReduce(const std::string& text, const std::string& origin);
    static UpdateMode parseUpdate(const std::string& text, const std::string& origin);
    static Transfers parseTransfers(const std::string& text, const std::string& origin);
    // "1=3,0=1.5": tower index = slowdown factor.
    static std::vector<double> parseSlowdown(const std::string& text, int towers, const std::string& origin);
};

}  // namespace tb
