// tst_gpu_towers (CTest label gpu): GPU towers against CPU towers and against each other, on the
// self test's small CNN from the same weights on the same batches. Skipped (77) without a GPU.
//   - a GPU tower gives the CPU tower's losses (within 1e-3 relative over 20 steps; momentum, Adam)
//   - two towers sharing gpu:0 (two streams, on-device mean) equal one tower of the global batch
//   - variables in pinned host memory (pull and push every step) equal variables on the GPU
//   - replicated variables with the on-device all-reduce, and averaging every step, equal sync
//   - the next step's input staged while a step computes gives the same losses
//   - a report lag of 2 (the host reading each step two steps late, each step's update inside its
//     recorded graph) gives the same losses, with momentum and with Adam (a step size per step)
//   - after the first steps nothing in the step loop calls cudaMalloc, and every step after them
//     is replayed from a recorded graph (none falls back to running unrecorded)
//   - a block freed while a kernel that uses it still runs goes to no new owner before the kernel
//     is done, and asking whether it is leaves no error for the next launch
//   - asynchronous towers on one GPU apply exactly the updates asked for
//   - bf16 matrix work (--precision bf16, tensor cores) trains as fp32 does within bf16's rounding,
//     and is rounded (its losses are not fp32's)
//   - bf16 gradients (--comm-precision bf16) from GPU towers to host variables train as fp32
//     gradients do within bf16's rounding, and are rounded
//   - ncclReduce and ncclBroadcast run (a one-rank group: a one-GPU machine's training never
//     calls them, its one rank reading the holder in place): sum, mean and bf16 of one rank give
//     its own values, a broadcast leaves them
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>

#include "backend/registry.hpp"
#include "data/pipeline.hpp"
#include "engine/selftest.hpp"
#include "parallel/run_control.hpp"
#include "parallel/tower_set.hpp"
#include "plain_check.hpp"
#include "tensor/bf16.hpp"

using namespace tb;

namespace {

const Device kGpu{DeviceType::Cuda, 0};

DeploymentPlan plan(std::vector<Device> towers, int perTower, VariablePlacement v = VariablePlacement::Tower) {
    DeploymentPlan p;
    p.towers = std::move(towers);
    p.batchPerTower = perTower;
    p.variables = v;
    if (v == VariablePlacement::Replicated) p.reduce = ReduceMode::AllReduce;
    return p;
}

// Losses within tol of each other at every step; every variable within perTensor of the other's
// (a bound on the whole vector hides a wrong small tensor: tst_tower_transfers shows one).
// One check that throws (a CUDA error, a refused plan) fails itself, and the checks after it run.
template <class F>
void guarded(const char* what, F check) {
    try {
        check();
    } catch (const std::exception& e) {
        CHECK(false, "%s: %s", what, e.what());
    }
}

void compare(const char* what, const DeploymentPlan& a, const DeploymentPlan& b, double tol,
             UpdateRule rule = UpdateRule::Momentum, double perTensor = kParamsPerTensorLimit) {
    LossComparison c;
    try {
        c = compareTowerLosses(a, b, 20, rule);
    } catch (const std::exception& e) {
        CHECK(false, "%s: %s", what, e.what());
        return;
    }
    std::printf("%-58s losses %.5f -> %.5f, worst relative difference %.3g, parameters %.3g (whole), %.3g (%s)\n",
                what, c.reference.front(), c.reference.back(), c.worstRelative, c.paramsRelative,
                c.worstTensorRelative, c.worstTensor.c_str());
    CHECK(c.worstRelative <= tol, "%s: losses differ by %g (limit %g)", what, c.worstRelative, tol);
    CHECK(c.worstTensorRelative <= perTensor, "%s: %s differs by %g (limit %g)", what, c.worstTensor.c_str(),
          c.worstTensorRelative, perTensor);
}

Batch randomBatch(int n, uint64_t seed) {
    const ModelSpec spec = selfTestModel();
    Batch b;
    b.n = n;
    b.c = spec.inC;
    b.h = spec.inH;
    b.w = spec.inW;
    b.x.resize(size_t(n) * spec.inC * spec.inH * spec.inW);
    uint64_t z = seed;
    for (float& v : b.x) v = float((z = z * 6364136223846793005ull + 1442695040888963407ull) >> 40) / 8388608.f - 1.f;
    b.y.resize(size_t(n));
    for (int32_t& y : b.y) y = int32_t((z = z * 6364136223846793005ull + 1) >> 60) % 10;
    return b;
}

// The self test's CNN for 20 steps on gpu:0 in bf16 against fp32. The bound: the CPU's bf16 path
// gave 6.4e-3 (momentum) and 5.0e-3 (Adam) on this network; cuDNN also rounds its outputs to bf16.
void bf16TrainsAsFp32Does() {
    for (UpdateRule rule : {UpdateRule::Momentum, UpdateRule::Adam}) {
        const LossComparison c = compareTowerLosses(plan({kGpu}, 32), plan({kGpu}, 32), 20, rule, 5,
                                                    MatmulPrecision::Bf16);
        std::printf("gpu:0 bf16 vs fp32 (%s): losses %.5f -> %.5f, worst relative difference %.3g, parameters %.3g\n",
                    rule == UpdateRule::Adam ? "adam" : "momentum", c.reference.front(), c.reference.back(),
                    c.worstRelative, c.paramsRelative);
        CHECK(c.worstRelative <= 3e-2, "bf16 losses differ from fp32's by %g (limit 3e-2)", c.worstRelative);
        CHECK(c.worstRelative > 1e-5, "bf16 losses equal fp32's (%g): nothing was rounded", c.worstRelative);
        CHECK(c.candidate.back() < c.candidate.front(), "bf16 did not train: loss %g -> %g", c.candidate.front(),
              c.candidate.back());
    }
}

// Gradients rounded on the GPU and sent to the host as bf16 (copies), against fp32 gradients.
// The tolerance is tst_parallel's for the same comparison on CPU towers.
void bf16GradientsFromTheGpu() {
    for (const auto& [what, p] : {std::pair{"1 tower on gpu:0, variables on the host", plan({kGpu}, 32, VariablePlacement::Cpu)},
                                  std::pair{"2 towers on gpu:0, variables on the host", plan({kGpu, kGpu}, 16, VariablePlacement::Cpu)}}) {
        DeploymentPlan b = p;
        b.commPrecision = CommPrecision::Bf16;
        const LossComparison c = compareTowerLosses(p, b, 20);
        std::printf("%-58s bf16 gradients vs fp32: worst relative difference %.3g, parameters %.3g\n", what,
                    c.worstRelative, c.paramsRelative);
        CHECK(c.worstRelative <= 2e-2, "%s: bf16 gradients' losses differ by %g (limit 2e-2)", what, c.worstRelative);
        CHECK(c.worstRelative > 1e-7, "%s: bf16 gradients' losses equal fp32's (%g): nothing was rounded", what,
              c.worstRelative);
    }
}

// Two towers sharing the GPU (no report lag), and one tower with its variables there whose steps
// run two ahead of their reads (the default for one GPU tower: a recorded graph per slot, the
// slots recorded in the first steps), each step with the next one's batch as the trainer gives it.
void noAllocationInTheStepLoop() {
    for (const bool lagged : {false, true}) {
        OptimizerSettings opt;
        DeploymentPlan p = lagged ? plan({kGpu}, 32) : plan({kGpu, kGpu}, 16);
        if (lagged) p.reportLag = 2;
        TowerSet towers(selfTestModel(), p, opt, 1, 3);
        const Batch b = randomBatch(32, 9);
        const auto run = [&](int from, int to) {
            for (int s = from; s < to; ++s) towers.steps({&b}, s, 0, &b);
        };
        run(0, 6);
        const int64_t before = towers.deviceMemory().at(0).stats.deviceMallocs;
        run(6, 30);
        towers.settle();
        const int64_t after = towers.deviceMemory().at(0).stats.deviceMallocs;
        std::printf("cudaMalloc calls (%s): %lld after 6 steps, %lld after 30\n",
                    lagged ? "one tower, report lag 2" : "2 towers on gpu:0", (long long)before, (long long)after);
        CHECK(after == before, "the step loop called cudaMalloc %lld times (%s)", (long long)(after - before),
              lagged ? "report lag 2" : "2 towers");
        // Every step but each tower's first and tower 0's profiled one (TowerSet::kProfileFirst)
        // replayed a recording: a step that could not be recorded runs unrecorded (said on
        // stderr), which would leave the recordings untested here.
        const int64_t replayed = towers.replayedSteps(), expected = int64_t(p.towerCount()) * 29 - 1;
        std::printf("steps replayed from recorded graphs (%s): %lld of %lld\n",
                    lagged ? "one tower, report lag 2" : "2 towers on gpu:0", (long long)replayed, (long long)expected);
        CHECK(replayed == expected, "%lld steps replayed from recorded graphs, %lld expected (%s)", (long long)replayed,
              (long long)expected, lagged ? "report lag 2" : "2 towers");
    }
}

// The allocator's fences on a real stream: a block freed behind 200 queued fills of 1 GiB (tens of
// milliseconds of work) is not handed out again while they run, a fresh block is taken instead;
// a launch after that (the fence asked about and found "not ready") succeeds; once the stream is
// done, the block comes back.
void freedBlocksWaitForTheirWork() {
    std::shared_ptr<Backend> be = makeBackend(kGpu);
    const Stream s = be->createStream();
    const size_t big = size_t(1) << 28, small = size_t(1) << 20;  // floats: 1 GiB, 4 MiB
    float* busy = static_cast<float*>(be->allocate(big * sizeof(float)));
    float* block = static_cast<float*>(be->allocate(small * sizeof(float)));
    for (int i = 0; i < 200; ++i) be->fill(s, busy, float(i), big);
    be->fill(s, block, 1.f, small);  // the block's use, behind the fills
    const int64_t before = be->allocatorStats().deviceMallocs;
    be->deallocate(block);
    float* fresh = static_cast<float*>(be->allocate(small * sizeof(float)));
    CHECK(fresh != block, "a block was handed out again while the work queued before its free still ran");
    CHECK(be->allocatorStats().deviceMallocs == before + 1, "%lld blocks taken from the device (expected 1)",
          (long long)(be->allocatorStats().deviceMallocs - before));
    be->fill(s, fresh, 2.f, small);  // a launch check after the fence's "not ready"
    be->synchronize(s);
    float* back = static_cast<float*>(be->allocate(small * sizeof(float)));
    CHECK(back == block, "the block whose fence has passed was not handed out again");
    std::printf("fences: a block freed behind queued work was %s while it ran, and %s after\n",
                fresh != block ? "not reused" : "REUSED", back == block ? "reused" : "NOT reused");
    for (float* p : {busy, fresh, back}) be->deallocate(p);
    be->destroyStream(s);
}

// The trainer hands each call the next step's batch, which the copy stream moves to the device
// stage while the tower computes: every step's loss must be the one of towers that stage their
// own input at the start of each step (a missed wait between the streams feeds a step the wrong
// batch, which changes its loss by far more than the limit). Distinct batches every step.
void stagingAheadChangesNothing(const char* what, const DeploymentPlan& p) {
    OptimizerSettings opt;
    TowerSet plain(selfTestModel(), p, opt, 1, 3), ahead(selfTestModel(), p, opt, 1, 3);
    std::vector<Batch> batches;
    for (int s = 0; s <= 40; ++s) batches.push_back(randomBatch(p.towerCount() * p.batchPerTower, 100 + uint64_t(s)));
    double worst = 0;
    for (int s = 0; s < 40; ++s) {
        const double a = plain.step(batches[size_t(s)], s, 0).lossSum[0];
        const double b = ahead.steps({&batches[size_t(s)]}, s, 0, &batches[size_t(s) + 1]).front().lossSum[0];
        worst = std::max(worst, std::fabs(a - b) / std::fabs(a));
    }
    std::printf("%-58s worst relative loss difference %.3g over 40 steps\n", what, worst);
    CHECK(worst <= 1e-5, "%s: staged-ahead losses differ by %g", what, worst);
}

void asyncUpdatesAreCounted() {
    OptimizerSettings opt;
    DeploymentPlan p = plan({kGpu, kGpu}, 16);
    p.update = UpdateMode::Async;
    TowerSet towers(selfTestModel(), p, opt, 1, 3);
    RunControl control;
    std::atomic<uint64_t> next{1};
    int reports = 0;
    double first = -1, last = 0;
    towers.runAsync(
        0, 60, [&](Batch& b) { b = randomBatch(16, next++ % 4); }, control,
        [&](const TowerStep& r) {
            ++reports;
            const double loss = r.lossSum[size_t(r.pusher)] / 16 + r.weightDecayLoss;
            if (first < 0) first = loss;
            last = loss;
        });
    std::printf("async on gpu:0 x2: %d updates, loss %.4f -> %.4f\n", reports, first, last);
    CHECK(reports == 60, "%d updates reported, 60 asked for", reports);
    CHECK(std::isfinite(last) && last < first, "the loss did not fall (%g -> %g)", first, last);
}

void ncclReduceAndBroadcastRun() {
    if (!ncclAvailable()) return;
    std::shared_ptr<Backend> be = makeBackend(kGpu);
    const Stream s = be->createStream();
    constexpr size_t n = 1000;
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = 0.25f * float(int(i % 17) - 8);  // exact in bf16 too
    Tensor send = be->empty(Shape{int64_t(n)}), recv = be->empty(Shape{int64_t(n)});
    NcclGroup group({0});
    std::vector<float> back(n);
    for (const bool mean : {false, true}) {
        be->copyFromHost(s, send.data(), host.data(), n * sizeof(float));
        be->fill(s, recv.data(), -1.f, n);
        group.reduce(0, send.data(), recv.data(), n, false, mean, 0, s);
        be->copyToHost(s, back.data(), recv.data(), n * sizeof(float));
        be->synchronize(s);
        CHECK(back == host, "ncclReduce of one rank (%s) changed its values", mean ? "mean" : "sum");
    }
    // bf16: the values' bits reduced as bf16 (exact for these) and widened back on the host.
    std::vector<uint16_t> bits(n), bitsBack(n);
    for (size_t i = 0; i < n; ++i) bits[i] = floatToBf16(host[i]);
    be->copyFromHost(s, send.data(), bits.data(), n * sizeof(uint16_t));
    group.reduce(0, send.data(), recv.data(), n, true, true, 0, s);
    be->copyToHost(s, bitsBack.data(), recv.data(), n * sizeof(uint16_t));
    be->synchronize(s);
    CHECK(bitsBack == bits, "ncclReduce of one rank in bf16 changed its values");
    be->copyFromHost(s, send.data(), host.data(), n * sizeof(float));
    group.broadcast(0, send.data(), n, 0, s);
    be->copyToHost(s, back.data(), send.data(), n * sizeof(float));
    be->synchronize(s);
    CHECK(back == host, "ncclBroadcast from the one rank changed its values");
    CHECK(group.asyncError(0).empty(), "rank 0 reports an asynchronous error: %s", group.asyncError(0).c_str());
    be->destroyStream(s);
    std::printf("ncclReduce (sum, mean, bf16) and ncclBroadcast ran on one rank\n");
}

}  // namespace

int main() {
    const GpuRuntime& rt = gpuRuntime();
    if (!rt.available) return tbcheck::skip(rt.whyNot.c_str());
    const Device cpu{};
    guarded("the allocator's fences", freedBlocksWaitForTheirWork);
    compare("gpu:0 tower vs cpu:0 tower (momentum)", plan({cpu}, 32, VariablePlacement::Cpu), plan({kGpu}, 32), 1e-3);
    compare("gpu:0 tower vs cpu:0 tower (adam)", plan({cpu}, 32, VariablePlacement::Cpu), plan({kGpu}, 32), 1e-3,
            UpdateRule::Adam);
    compare("2 towers on gpu:0 vs 1 tower of the global batch", plan({kGpu}, 32), plan({kGpu, kGpu}, 16), 1e-5);
    // A report lag: steps launched two ahead of their reads, the host waiting for no stream within a
    // step, each step's statistics and marks in a slot of its own (a slot read too early or
    // overwritten, or a pinned input pair refilled while its copy is still queued, gives another
    // step's loss: far beyond the limit), and each step's update inside its recording. Adam's
    // step size changes every step: a replay that kept the update's recorded values would not.
    for (const UpdateRule rule : {UpdateRule::Momentum, UpdateRule::Adam})
        for (const VariablePlacement v : {VariablePlacement::Tower, VariablePlacement::Replicated}) {
            DeploymentPlan lagged = plan({kGpu}, 32, v);
            lagged.reportLag = 2;
            const std::string what = std::string("report lag 2 vs none (") +
                                     (v == VariablePlacement::Tower ? "variables on gpu:0" : "replicated, one replica") +
                                     (rule == UpdateRule::Adam ? ", adam)" : ", momentum)");
            // (One configuration read earlier or later: held to a tenth of the usual limit.)
            compare(what.c_str(), plan({kGpu}, 32, v), lagged, 1e-5, rule, kParamsPerTensorLimit / 10);
        }
    compare("variables on the host (pinned, pull/push) vs on gpu:0", plan({kGpu}, 32),
            plan({kGpu}, 32, VariablePlacement::Cpu), 1e-5);
    compare("2 towers on gpu:0, variables on the host vs on gpu:0", plan({kGpu, kGpu}, 16),
            plan({kGpu, kGpu}, 16, VariablePlacement::Cpu), 1e-5);
    compare("2 replicas on gpu:0 (all-reduce) vs 1 tower", plan({kGpu}, 32),
            plan({kGpu, kGpu}, 16, VariablePlacement::Replicated), 1e-5);
    DeploymentPlan avg = plan({kGpu, kGpu}, 16, VariablePlacement::Replicated);
    avg.averageEvery = 1;
    compare("2 replicas on gpu:0 averaged every step vs 1 tower", plan({kGpu}, 32), avg, 1e-4);
    // NCCL refuses two ranks on one GPU: with one GPU it runs with a single rank (its collectives
    // still run); with more, towers on distinct GPUs meet through it.
    DeploymentPlan ncclReplicas = plan({kGpu}, 32, VariablePlacement::Replicated);
    ncclReplicas.transfers = Transfers::Nccl;
    compare("NCCL, one rank: replicated vs shared memory", plan({kGpu}, 32), ncclReplicas, 1e-5);
    DeploymentPlan ncclHolder = plan({kGpu}, 32);
    ncclHolder.transfers = Transfers::Nccl;
    compare("NCCL, one rank: variables on gpu:0 vs shared memory", plan({kGpu}, 32), ncclHolder, 1e-5);
    if (rt.gpus.size() >= 2) {
        const Device kGpu1{DeviceType::Cuda, 1};
        compare("NCCL: replicas on gpu:0 and gpu:1 vs 1 tower", plan({kGpu}, 32),
                plan({kGpu, kGpu1}, 16, VariablePlacement::Replicated), 1e-5);
        compare("NCCL: variables on gpu:0, towers on gpu:0 and gpu:1", plan({kGpu}, 32), plan({kGpu, kGpu1}, 16), 1e-5);
        compare("copies: variables on the host, towers on gpu:0 and gpu:1", plan({kGpu}, 32),
                plan({kGpu, kGpu1}, 16, VariablePlacement::Cpu), 1e-5);
    } else {
        std::printf("multi-GPU cases skipped: one GPU here (NCCL ran with a single rank)\n");
    }
    guarded("input staged ahead, 2 towers on gpu:0",
            [&] { stagingAheadChangesNothing("input staged ahead, 2 towers on gpu:0", plan({kGpu, kGpu}, 16)); });
    guarded("input staged ahead, variables on the host", [&] {
        stagingAheadChangesNothing("input staged ahead, variables on the host", plan({kGpu}, 32, VariablePlacement::Cpu));
    });
    guarded("no allocation in the step loop", noAllocationInTheStepLoop);
    guarded("ncclReduce and ncclBroadcast", ncclReduceAndBroadcastRun);
    guarded("asynchronous updates", asyncUpdatesAreCounted);
    guarded("bf16 against fp32", bf16TrainsAsFp32Does);
    guarded("bf16 gradients from the GPU", bf16GradientsFromTheGpu);
    return tbcheck::exitStatus();
}
