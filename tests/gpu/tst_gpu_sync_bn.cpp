// tst_gpu_sync_bn: --sync-bn on GPU towers. N towers whose batch norms sum their statistics over
// every tower, forward and back, train as one tower on the whole batch (weights and moving
// statistics after 10 steps), whichever way the statistics meet:
//   - towers on GPUs of their own, variables replicated: NCCL, as the gradients;
//   - towers on GPUs of their own, variables on the host: copied through the host;
//   - two towers sharing one GPU: read in place in its memory (nothing crosses);
// and each meeting's bytes are counted (2 (D - 1) x 2c x 4 a batch norm, forward and back, over
// the towers' D GPUs). Per-tower statistics, the default, are another algorithm (checked apart).
// Modes:
//   standin  stand-in GPUs (CPU backends behind a module's C table, its NCCL on host memory:
//            stand_in_gpus.hpp), so the logic runs on every machine; tolerance 1e-5 as on CPU;
//   gpu      the real GPUs (fp32, no TF32; tolerance 1e-4: cuDNN sums in other orders). Skipped
//            without a GPU; the cases that need more GPUs than there are say they are skipped.
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "backend/registry.hpp"
#include "bn_model.hpp"
#include "parallel/tower_set.hpp"
#include "pipeline_reference.hpp"
#include "plain_check.hpp"
#include "stand_in_gpus.hpp"

using namespace tb;
using namespace tbtest;

namespace {

Device gpu(int i) { return Device{DeviceType::Cuda, i}; }

std::string gMode;
const std::string& mode() { return gMode; }

struct Towers {
    std::vector<float> weights, statistics;
    int64_t bytesMoved = 0;
    long ncclAllReduces = 0;  // stand-in NCCL's all-reduces over the run
    std::string transport;    // how the statistics met (TowerSet::statisticsTransport)
};

// kSteps synchronous steps of pipeline_reference's batches (kBatch examples, split over the towers).
Towers train(const std::vector<Device>& devices, VariablePlacement where, bool syncBatchNorm) {
    const ModelSpec spec = smallBnCnn();
    DeploymentPlan p;
    p.towers = devices;
    p.variables = where;
    p.variablesTower = 0;
    p.reduce = where == VariablePlacement::Replicated ? ReduceMode::AllReduce : ReduceMode::Mean;
    p.batchPerTower = kBatch / int(devices.size());
    p.syncBatchNorm = syncBatchNorm;
    p.reportLag = 0;
    p.validate(1, gpuCount());
    const long before = standInNcclCounts().allReduce;
    TowerSet towers(spec, p, momentum(), 1, kSeed);
    const std::vector<Batch> data = batches(spec);
    for (int k = 0; k < kSteps; ++k) towers.step(data[size_t(k)], k, 0);
    Towers out;
    out.ncclAllReduces = standInNcclCounts().allReduce - before;
    const VariablesView v = towers.variables();
    out.weights.resize(size_t(towers.paramCount()));
    v.backend->copyToHost(v.stream, out.weights.data(), v.params, out.weights.size() * sizeof(float));
    v.backend->synchronize(v.stream);
    out.statistics = towers.statistics();
    out.bytesMoved = towers.bytesMoved();
    out.transport = towers.statisticsTransport();
    return out;
}

struct Case {
    const char* name;
    std::vector<Device> devices;
    VariablePlacement where;
    int gpus;               // needed
    int distinctDevices;    // D: the devices the statistics cross between
    const char* transport;  // how the statistics meet: "NCCL", "copies", "shared memory"
};

void trainsAsOneTower(const Case& c, const Towers& one, double tolerance) {
    if (gpuCount() < c.gpus) {
        std::printf("%-52s skipped: needs %d GPUs\n", c.name, c.gpus);
        return;
    }
    const Towers synced = train(c.devices, c.where, true), own = train(c.devices, c.where, false);
    CHECK(synced.transport == c.transport && own.transport.empty(), "%s: the statistics met by '%s', not %s", c.name,
          synced.transport.c_str(), c.transport);
    const double d = relativeDifference(one.weights, synced.weights);
    const double moving = relativeDifference(one.statistics, synced.statistics);
    const double apart = relativeDifference(one.weights, own.weights);
    CHECK(d <= tolerance, "%s: weights %.2e from one tower's on the whole batch", c.name, d);
    CHECK(moving <= tolerance, "%s: moving statistics %.2e from one tower's", c.name, moving);
    CHECK(apart > 1e-4, "%s: per-tower statistics must be another algorithm (%.2e)", c.name, apart);
    // bn1 and bn2 have 4 channels, bn3 16: 2c sums forward and 2c back each, every step.
    const int64_t floats = 2 * (4 + 4) * 2 + 2 * 16 * 2;
    const int64_t expected = int64_t(kSteps) * 2 * (c.distinctDevices - 1) * floats * int64_t(sizeof(float));
    CHECK(synced.bytesMoved - own.bytesMoved == expected, "%s: the statistics moved %lld bytes, not %lld", c.name,
          static_cast<long long>(synced.bytesMoved - own.bytesMoved), static_cast<long long>(expected));
    // Through NCCL: 3 batch norms meet twice a step, an all-reduce each (the stand-in counts a
    // collective once, whatever its ranks; the real NCCL's are not counted here).
    const long meetings = synced.ncclAllReduces - own.ncclAllReduces;
    if (mode() == "standin")
        CHECK(meetings == (synced.transport == "NCCL" ? long(kSteps) * 3 * 2 : 0),
              "%s: %ld NCCL all-reduces of statistics", c.name, meetings);
    std::printf("%-52s weights %.2e, moving statistics %.2e from one tower's (per-tower statistics %.2e); "
                "%lld bytes of statistics\n",
                c.name, d, moving, apart, static_cast<long long>(synced.bytesMoved - own.bytesMoved));
}

}  // namespace

int main(int argc, char** argv) {
    gMode = argc > 1 ? argv[1] : "standin";
    double tolerance = 1e-5;
    if (mode() == "standin") {
        useCudaModule(tbtest::standInGpuModule(4), "stand-in GPUs");
    } else if (mode() == "gpu") {
        if (gpuCount() == 0) return tbcheck::skip(("no GPU: " + gpuRuntime().whyNot).c_str());
        tolerance = 1e-4;
    } else {
        std::fprintf(stderr, "usage: tst_gpu_sync_bn [standin|gpu]\n");
        return 2;
    }
    const Towers one = train({gpu(0)}, VariablePlacement::Tower, false);
    const std::vector<Case> cases = {
        {"gpu:0,gpu:1, replicated (NCCL)", {gpu(0), gpu(1)}, VariablePlacement::Replicated, 2, 2, "NCCL"},
        {"gpu:0..gpu:3, replicated (NCCL)", {gpu(0), gpu(1), gpu(2), gpu(3)}, VariablePlacement::Replicated, 4, 4, "NCCL"},
        {"gpu:0,gpu:1, variables on the host (copies)", {gpu(0), gpu(1)}, VariablePlacement::Cpu, 2, 2, "copies"},
        {"gpu:0*2, variables on gpu:0 (one memory)", {gpu(0), gpu(0)}, VariablePlacement::Tower, 1, 1, "shared memory"},
    };
    for (const Case& c : cases) {
        try {
            trainsAsOneTower(c, one, tolerance);
        } catch (const std::exception& e) {  // one case's failure fails it; the others still run
            CHECK(false, "%s: %s", c.name, e.what());
        }
    }
    return tbcheck::exitStatus();
}
