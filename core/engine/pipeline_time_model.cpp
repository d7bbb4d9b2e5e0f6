#include "engine/pipeline_time_model.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <thread>

#include "backend/backend.hpp"
#include "engine/scaling_sweep.hpp"
#include "nn/network.hpp"
#include "parallel/layer_costs.hpp"
#include "parallel/stage_plan.hpp"
#include "util/error.hpp"

namespace tb {

namespace {

double sumOf(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

std::string percent(double x) { return std::to_string(int(std::lround(100 * x))) + "%"; }

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
                                   int calibrationBatch, int calibrationThreads) {
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
    c.split = balanceStages(oneThread, stages);
    // Each stage's step as it runs: naive, one stage at a time; gpipe and 1f1b, every stage at once
    // on its own thread team (they share the memory bandwidth and the caches there).
    c.stageSeconds.assign(c.split.size(), 0);
    auto measure = [&](size_t i) {
        const auto team = makeCpuBackend(threadsPerStage, int(i));
        c.stageSeconds[i] = measureStageStepSeconds(spec, *team, LayerRange{c.split[i].first, c.split[i].second}, micro,
                                                    microBatches) / microBatches;
    };
    if (microBatches == 1) {
        for (size_t i = 0; i < c.split.size(); ++i) measure(i);
    } else {
        std::vector<std::thread> stagesAtOnce;
        for (size_t i = 0; i < c.split.size(); ++i) stagesAtOnce.emplace_back(measure, i);
        for (std::thread& t : stagesAtOnce) t.join();
    }
    for (const auto& [first, last] : c.split)
        c.stageParams.push_back(int64_t(estimateNetworkMemory(spec, 1, LayerRange{first, last}).params / sizeof(float)));
    const auto calibrationTeam = makeCpuBackend(calibrationThreads);
    c.calibrationSeconds = measureStageStepSeconds(spec, *calibrationTeam, LayerRange{}, calibrationBatch, 1);
    return c;
}

Prediction predictPipeline(const Calibration& cal, const Assumptions& a, const Scenario& s, const PipelineCosts& costs) {
    const std::optional<PipelineStrategy> pipe = pipelineStrategy(s.strategy);
    if (!pipe) throw Error(s.strategy + ": not a pipeline (naive, gpipe:M, 1f1b:M)");
    if (s.device || cal.device) throw Error(s.strategy + ": pipelines of GPU stages are not built yet, nor predicted");
    if (cal.towers != 1 || cal.strategy == "async")
        throw Error(s.strategy + ": a pipeline is predicted from a one-tower calibration (--from the one-tower point)");
    if (cal.measured.compute < 1e-6 || costs.calibrationSeconds <= 0 || costs.stageSeconds.empty() ||
        int(costs.stageSeconds.size()) != s.towers)
        throw Error(s.strategy + ": the calibration's compute or the stages' measured costs are missing");
    const int S = s.towers, M = pipe->microBatches, T = s.threadsPerTower;
    const bool overlapped = pipe->schedule != "naive";

    // A run costs more (or less) than the network alone (its input pipeline, its reports): k.
    const double k = cal.measured.compute / costs.calibrationSeconds;
    std::vector<double> perMicro;
    for (double t : costs.stageSeconds) perMicro.push_back(k * t);
    const double coreShare = double(T) / s.cores;  // of the work each core does where threads outnumber them
    const Path path = pathOf(perMicro, M, overlapped, S * T > s.cores ? coreShare : 0);

    // The calibration's update per parameter and its fixed cost per step beyond its phases.
    // The update streams its parameters through memory, which its threads share: each stage's
    // takes the calibration's seconds per parameter, whatever its threads (measured: 1.9 ms for
    // each half of deep_mlp on one thread, 3.6 ms for the whole on two).
    const double perParam = cal.measured.apply / double(cal.params);
    double apply = 0;
    for (int64_t params : costs.stageParams) apply = std::max(apply, perParam * double(params));
    const StepProfile& m = cal.measured;
    const double other =
        cal.measured.examplesPerSec > 0
            ? std::max(0.0, cal.batchPerTower / m.examplesPerSec - (m.dataWait + m.compute + m.wait + m.reduce + m.apply))
            : 0.0;
    const double handOffs = S > 1 ? 2.0 * (M + S - 2) * a.hostLatency : 0.0;

    Prediction p;
    StepProfile& ph = p.phases;
    ph.dataWait = m.dataWait * a.dataScale;
    ph.compute = path.busy / S;           // per stage, mean
    ph.wait = path.seconds - ph.compute;  // the bubble
    ph.reduce = handOffs;
    ph.apply = apply;
    p.otherSeconds = other;
    p.stepSeconds = ph.dataWait + path.seconds + handOffs + apply + other;
    p.examplesPerSec = s.batchPerTower / p.stepSeconds;
    p.bubbleFraction = path.seconds > 0 ? 1 - path.busy / (S * path.seconds) : 0;
    ph.steps = 1;
    ph.examplesPerSec = p.examplesPerSec;

    // One sentence: the bubble against the equal stages' theory, the slowest stage's share.
    const double theory = double(S - 1) / (M + S - 1);
    const size_t slowest = size_t(std::max_element(perMicro.begin(), perMicro.end()) - perMicro.begin());
    p.bottleneck = s.describe() + ": the bubble idles the stages " + percent(p.bubbleFraction) + " of the step (" +
                   percent(theory) + " were the stages equal; the slowest, stage " + std::to_string(slowest) + ", holds " +
                   percent(perMicro[slowest] / sumOf(perMicro)) + " of the compute)";
    if (!overlapped) p.bottleneck += ": one stage works at a time, so micro-batches (gpipe:M, 1f1b:M) would overlap them";
    if (S * T > s.cores) p.bottleneck += "; " + std::to_string(S * T) + " threads share " + std::to_string(s.cores) + " cores";
    p.bottleneck += ".";
    return p;
}

const PipelineCosts& PipelineCostCache::costsOf(const Scenario& s, const Calibration& cal) {
    const std::optional<PipelineStrategy> pipe = pipelineStrategy(s.strategy);
    if (!pipe) throw Error(s.strategy + ": not a pipeline (naive, gpipe:M, 1f1b:M)");
    const auto key = std::make_tuple(s.towers, s.batchPerTower, pipe->microBatches, s.threadsPerTower, cal.batchPerTower,
                                     cal.threadsPerTower);
    auto found = measured_.find(key);
    if (found == measured_.end())
        found = measured_
                    .emplace(key, measurePipelineCosts(spec_, s.towers, s.batchPerTower, pipe->microBatches,
                                                       s.threadsPerTower, cal.batchPerTower, cal.threadsPerTower))
                    .first;
    return found->second;
}

Prediction predictStep(const Calibration& cal, const Assumptions& a, const Scenario& s, PipelineCostCache& costs) {
    if (!pipelineStrategy(s.strategy)) return predict(cal, a, s);
    if (s.device || cal.device) throw Error(s.strategy + ": pipelines of GPU stages are not built yet, nor predicted");
    return predictPipeline(cal, a, s, costs.costsOf(s, cal));
}

}  // namespace tb
