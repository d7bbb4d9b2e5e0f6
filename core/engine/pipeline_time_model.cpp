#include "engine/pipeline_time_model.hpp"

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <numeric>
#include <thread>

#include "backend/backend.hpp"
#include "engine/prediction_text.hpp"
#include "engine/scaling_sweep.hpp"
#include "nn/network.hpp"
#include "parallel/layer_costs.hpp"
#include "parallel/stage_plan.hpp"
#include "util/error.hpp"

namespace tb {

namespace {

double sumOf(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

using text::megabytes;
using text::percent;

// Steps measured per stage (and of the whole network), the median taken: with 3, predictions of
// one mnist_cnn pipeline spread 1,921-2,483 examples/sec over four calls, and one came out 2.7x.
constexpr int kRepeats = 9;

// The schedule's compute path and the stages' busy time per step, from their seconds per micro-batch.
struct Path {
    double seconds = 0, busy = 0;  // busy: summed over the stages
};
Path pathOf(const std::vector<double>& perMicro, int microBatches, bool overlapped, double coreShare) {
    const double sum = sumOf(perMicro), slowest = *std::max_element(perMicro.begin(), perMicro.end());
    Path p;
    p.busy = microBatches * sum;
    p.seconds = overlapped ? sum + (microBatches - 1) * slowest : sum;
    // Threads beyond the cores: the cores do all the stages' work, at least.
    p.seconds = std::max(p.seconds, p.busy * coreShare);
    return p;
}

}  // namespace

std::string PipelineCosts::describe(const ModelSpec& spec) const {
    std::string d;
    for (const auto& [first, last] : split) {
        if (!d.empty()) d += " | ";
        d += spec.layers[size_t(first)].name;
        if (last != first) d += ".." + spec.layers[size_t(last)].name;
    }
    return d;
}

PipelineCosts measurePipelineCosts(const ModelSpec& spec, int stages, int batch, int microBatches, int threadsPerStage,
                                   bool together) {
    if (microBatches < 1 || batch % microBatches != 0)
        throw Error("micro-batches: " + std::to_string(microBatches) + " do not divide the batch of " + std::to_string(batch));
    if (stages < 1 || stages > int(spec.layers.size()))
        throw Error(std::to_string(stages) + " stages: " + spec.name + " has " + std::to_string(spec.layers.size()) +
                    " layers, at most one stage each");
    const int micro = batch / microBatches;
    PipelineCosts c;
    // The split a run of --stages N makes (run_setup): each layer on one thread at the micro-batch's size.
    const auto one = makeCpuBackend(1);
    const std::vector<double> oneThread = measureLayerSeconds(spec, *one, micro, 3);
    c.split = balanceStages(oneThread, stages, atCuts(spec));
    if (c.split.empty())
        throw Error(std::to_string(stages) + " stages: " + spec.name + " has fewer places to cut (between blocks)");
    // Each stage's step: one stage at a time, or (`together`) every stage at once on its own thread
    // team, each step started together at a barrier, as gpipe and 1f1b run them on this machine
    // (they share the cores' time, the memory bandwidth and the caches; measured without the
    // barrier, the first to finish its steps left the others the machine, and the predictions came
    // out up to 49% fast).
    c.stageSeconds.assign(c.split.size(), 0);
    std::barrier barrier(std::ptrdiff_t(c.split.size()));
    const std::function<void()> meet = [&barrier] { barrier.arrive_and_wait(); };
    auto measure = [&](size_t i, const std::function<void()>& beforeEach) {
        const auto team = makeCpuBackend(threadsPerStage, int(i));
        c.stageSeconds[i] = measureStageStepSeconds(spec, *team, LayerRange{c.split[i].first, c.split[i].second}, micro,
                                                    microBatches, kRepeats, beforeEach) / microBatches;
    };
    if (!together) {
        for (size_t i = 0; i < c.split.size(); ++i) measure(i, {});
    } else {
        // A stage that fails (its memory, say), or one whose thread cannot start, leaves the
        // barrier, so the others finish; the first error is the caller's.
        std::vector<std::exception_ptr> errors(c.split.size());
        std::vector<std::thread> stagesAtOnce;
        stagesAtOnce.reserve(c.split.size());
        for (size_t i = 0; i < c.split.size(); ++i) {
            try {
                stagesAtOnce.emplace_back([&, i] {
                    try {
                        measure(i, meet);
                    } catch (...) {
                        errors[i] = std::current_exception();
                        barrier.arrive_and_drop();
                    }
                });
            } catch (...) {
                errors[i] = std::current_exception();
                for (size_t left = i; left < c.split.size(); ++left) barrier.arrive_and_drop();
                break;
            }
        }
        for (std::thread& t : stagesAtOnce) t.join();
        for (const std::exception_ptr& e : errors)
            if (e) std::rethrow_exception(e);
    }
    for (const auto& [first, last] : c.split) {
        c.stageParams.push_back(int64_t(estimateNetworkMemory(spec, 1, LayerRange{first, last}).params / sizeof(float)));
        if (last + 1 < int(spec.layers.size())) c.boundaryFloats.push_back(layerOutputDims(spec, last).size());
    }
    return c;
}

double measureNetworkStepSeconds(const ModelSpec& spec, int batch, int threads) {
    const auto team = makeCpuBackend(threads);
    return measureStageStepSeconds(spec, *team, LayerRange{}, batch, 1, kRepeats);
}

namespace {

// What predictPipeline cannot predict, each in words; the strategy's schedule otherwise.
PipelineStrategy checkedPipeline(const Calibration& cal, const Scenario& s, const PipelineCosts& costs) {
    const std::optional<PipelineStrategy> pipe = pipelineStrategy(s.strategy);
    if (!pipe) throw Error(s.strategy + ": not a pipeline (naive, gpipe:M, 1f1b:M)");
    if (cal.device)
        throw Error(s.strategy + ": a sweep of towers sharing a GPU does not calibrate pipelines (sweep CPU towers)");
    if (cal.towers != 1 || cal.strategy == "async")
        throw Error(s.strategy + ": a pipeline is predicted from a one-tower calibration (--from the one-tower point)");
    if (cal.measured.compute < 1e-6 || costs.calibrationSeconds <= 0 || costs.stageSeconds.empty() ||
        int(costs.stageSeconds.size()) != s.towers)
        throw Error(s.strategy + ": the calibration's compute or the stages' measured costs are missing");
    if (s.device && cal.host.flops <= 0) throw Error("calibration: this machine's FLOP/s were not measured");
    return *pipe;
}

// One GPU per stage: each micro-batch's activations cross the link forward, their gradients back,
// between neighbours (latency + bytes / bandwidth each, no overlap with compute). Per stage, its
// transfers' seconds per micro-batch; `bytesPerStep` receives the step's bytes. CPU stages share
// memory and hand over in place: none.
std::vector<double> linkCrossings(const Scenario& s, const PipelineCosts& costs, int microBatches, double& bytesPerStep) {
    const size_t stages = size_t(s.towers);
    std::vector<double> crossing(stages, 0.0);
    bytesPerStep = 0;
    if (!s.device) return crossing;
    const double micro = double(s.batchPerTower) / microBatches;
    for (size_t b = 0; b < costs.boundaryFloats.size() && b + 1 < stages; ++b) {
        const double bytes = 4.0 * double(costs.boundaryFloats[b]) * micro;
        const double seconds = s.link.latency + bytes / s.link.bandwidth;
        crossing[b] += seconds;      // the gradient back from stage b + 1
        crossing[b + 1] += seconds;  // the activations into stage b + 1
        bytesPerStep += 2 * microBatches * bytes;
    }
    return crossing;
}

// One sentence: the bubble against the equal stages' theory, the slowest stage's share, the link
// where it takes a tenth of the stages' time, what naive and threads beyond the cores cost.
std::string pipelineSentence(const Scenario& s, const PipelineStrategy& pipe, const Prediction& p,
                             const std::vector<double>& perMicro, const Path& path, double moving) {
    const int S = s.towers, M = pipe.microBatches, threads = S * s.threadsPerTower;
    const double theory = double(S - 1) / (M + S - 1);
    const size_t slowest = size_t(std::max_element(perMicro.begin(), perMicro.end()) - perMicro.begin());
    std::string text = s.describe() + ": the bubble idles the stages " + percent(p.bubbleFraction) + " of the step (" +
                       percent(theory) + " were the stages equal; the slowest, stage " + std::to_string(slowest) +
                       ", holds " + percent(perMicro[slowest] / sumOf(perMicro)) + " of the compute)";
    if (moving > 0.1 * S * path.seconds)
        text += "; the " + s.link.name + " link between neighbours carries " + megabytes(p.phases.bytesPerStep) +
                " of activations and their gradients a step (" + percent(moving / (S * path.seconds)) +
                " of the stages' time)";
    if (pipe.schedule == "naive") text += ": one stage works at a time, so micro-batches (gpipe:M, 1f1b:M) would overlap them";
    if (!s.device && threads > s.cores)
        text += "; " + std::to_string(threads) + " threads share " + std::to_string(s.cores) + " cores";
    return text + ".";
}

}  // namespace

Prediction predictPipeline(const Calibration& cal, const Assumptions& a, const Scenario& s, const PipelineCosts& costs) {
    const PipelineStrategy pipe = checkedPipeline(cal, s, costs);
    const int S = s.towers, M = pipe.microBatches, T = s.threadsPerTower;

    // A run costs more (or less) than the network alone (its input pipeline, its reports): k. A
    // GPU stage reaches the same share of its fp32 peak as this machine's core (the towers' what-if
    // assumption; its costs measured alone on one thread: PipelineCostCache).
    const double k = cal.measured.compute / costs.calibrationSeconds;
    const double scale = s.device ? cal.host.flops / s.device->flops : 1.0;
    double bytesPerStep = 0;
    const std::vector<double> crossing = linkCrossings(s, costs, M, bytesPerStep);
    std::vector<double> perMicro, withCrossing;
    for (size_t i = 0; i < costs.stageSeconds.size(); ++i) {
        perMicro.push_back(k * costs.stageSeconds[i] * scale);
        withCrossing.push_back(perMicro.back() + crossing[i]);
    }
    const double coreShare = double(T) / s.cores;  // of the work each core does where threads outnumber them
    const Path path = pathOf(withCrossing, M, pipe.schedule != "naive", !s.device && S * T > s.cores ? coreShare : 0);
    const double busy = M * sumOf(perMicro), moving = M * sumOf(crossing);

    // The calibration's update per parameter and its fixed cost per step beyond its phases (its
    // wait included: one tower waits only for the step's start and a free core, as stages do).
    // The update streams its parameters through memory, which its threads share: each stage's
    // takes the calibration's seconds per parameter, whatever its threads (measured: 1.9 ms for
    // each half of deep_mlp on one thread, 3.6 ms for the whole on two).
    // On a GPU the update reads and writes about 20 bytes per parameter of its memory.
    const double perParam = s.device ? 20.0 / s.device->memoryBandwidth : cal.measured.apply / double(cal.params);
    double apply = 0;
    for (int64_t params : costs.stageParams) apply = std::max(apply, perParam * double(params));
    const StepProfile& m = cal.measured;
    const double other =
        m.examplesPerSec > 0
            ? std::max(0.0, cal.batchPerTower / m.examplesPerSec - (m.dataWait + m.compute + m.reduce + m.apply))
            : 0.0;
    const double handOffs = S > 1 && !s.device ? 2.0 * (M + S - 2) * a.hostLatency : 0.0;

    Prediction p;
    StepProfile& ph = p.phases;
    ph.dataWait = m.dataWait * a.dataScale;
    ph.compute = busy / S;                         // per stage, mean
    ph.reduce = handOffs + moving / S;             // hand-offs, and transfers between GPUs
    ph.wait = path.seconds - (busy + moving) / S;  // the bubble
    ph.apply = apply;
    p.otherSeconds = other;
    p.stepSeconds = ph.dataWait + path.seconds + handOffs + apply + other;
    p.examplesPerSec = s.batchPerTower / p.stepSeconds;
    p.bubbleFraction = path.seconds > 0 ? 1 - busy / (S * path.seconds) : 0;
    p.bytesPerTower = bytesPerStep / S;
    ph.steps = 1;
    ph.examplesPerSec = p.examplesPerSec;
    ph.bytesPerStep = bytesPerStep;
    p.bottleneck = pipelineSentence(s, pipe, p, perMicro, path, moving);
    return p;
}

// GPU stages (the what-if) are measured one at a time on one thread each: on their own devices
// nothing is shared, and their speed is scaled from one core's; CPU stages of gpipe and 1f1b
// together, as they run.
PipelineCostCache::Key PipelineCostCache::keyOf(const Scenario& s, const Calibration& cal) {
    const std::optional<PipelineStrategy> pipe = pipelineStrategy(s.strategy);
    if (!pipe) throw Error(s.strategy + ": not a pipeline (naive, gpipe:M, 1f1b:M)");
    const bool gpus = s.device.has_value();
    return {s.towers,         s.batchPerTower,      pipe->microBatches, gpus ? 1 : s.threadsPerTower,
            cal.batchPerTower, cal.threadsPerTower, !gpus && pipe->microBatches > 1};
}

bool PipelineCostCache::has(const Scenario& s, const Calibration& cal) const { return measured_.count(keyOf(s, cal)) > 0; }

const PipelineCosts& PipelineCostCache::costsOf(const Scenario& s, const Calibration& cal) {
    const Key key = keyOf(s, cal);
    auto found = measured_.find(key);
    if (found != measured_.end()) return found->second;
    // The whole network at the calibration's batch and threads: once for every shape of pipeline.
    const auto calibration = std::make_pair(cal.batchPerTower, cal.threadsPerTower);
    auto network = networkSeconds_.find(calibration);
    if (network == networkSeconds_.end())
        network = networkSeconds_.emplace(calibration, measureNetworkStepSeconds(spec_, cal.batchPerTower, cal.threadsPerTower)).first;
    PipelineCosts costs = measurePipelineCosts(spec_, s.towers, s.batchPerTower, std::get<2>(key), std::get<3>(key), std::get<6>(key));
    costs.calibrationSeconds = network->second;
    return measured_.emplace(key, std::move(costs)).first->second;
}

Prediction predictStep(const Calibration& cal, const Assumptions& a, const Scenario& s, PipelineCostCache& costs) {
    if (!pipelineStrategy(s.strategy)) return predict(cal, a, s);
    if (cal.device)  // before measuring anything
        throw Error(s.strategy + ": a sweep of towers sharing a GPU does not calibrate pipelines (sweep CPU towers)");
    return predictPipeline(cal, a, s, costs.costsOf(s, cal));
}

}  // namespace tb
