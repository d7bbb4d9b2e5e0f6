// tb_bench_pipeline: model parallelism on the CPU (issue 32). A model split into 2 stages of one
// thread each, run naive (the whole batch through the stages in turn), gpipe with M = 2, 4, 8
// micro-batches and 1f1b with M = 4, 8, against one device of 2 threads holding the whole model.
// The split is the balancer's (balanceStages) over each layer's measured seconds on one thread.
// All configurations train the same batch in rounds (round-robin, so drift in the machine's
// speed touches each alike); per configuration: the median over the rounds of examples/sec and
// of the measured bubble (the stages' idle share of the step until its last backward, each
// round's median over its steps), the bubble of equal stages (S-1)/(M+S-1), and the activations
// each stage holds at most.
//
// usage: tb_bench_pipeline [--model deep_mlp] [--batch 128] [--steps 20] [--rounds 3]
// Prints the processor, the per-layer costs, the split, a table, and one JSON line.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_machine.hpp"
#include "nn/network.hpp"
#include "optim/optimizer.hpp"
#include "parallel/layer_costs.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/stage_pipeline.hpp"
#include "parallel/stage_plan.hpp"
#include "util/error.hpp"

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

double seconds(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Config {
    Config(std::string n, std::string s, int m) : name(std::move(n)), schedule(std::move(s)), micro(m) {}
    std::string name, schedule;  // schedule empty: one device
    int micro = 1;
    std::vector<double> exPerSec, bubble, accumulateShare;
    std::unique_ptr<tb::PipelineSchedule> sched;
    std::unique_ptr<tb::StagePipeline> pipe;
    std::vector<size_t> activations;
};

int run(int argc, char** argv) {
    std::string model = "deep_mlp";
    int batch = 128, steps = 20, rounds = 3;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) throw tb::Error(a + ": needs a value");
        const std::string v = argv[++i];
        if (a == "--model") model = v;
        else if (a == "--batch") batch = std::atoi(v.c_str());
        else if (a == "--steps") steps = std::atoi(v.c_str());
        else if (a == "--rounds") rounds = std::atoi(v.c_str());
        else throw tb::Error(a + ": unknown option");
    }
    if (batch < 8 || batch % 8 || steps < 1 || rounds < 1)
        throw tb::Error("--batch must be a positive multiple of 8; --steps and --rounds positive");
    const tb::ModelSpec spec = tb::findModel(model);
    std::printf("%s\n", tbbench::machineLine(2).c_str());

    // Each layer's forward + backward on one thread, and the split that balances 2 stages of it.
    auto one = tb::makeCpuBackend(1);
    const std::vector<double> cost = tb::measureLayerSeconds(spec, *one, batch, 7);
    const auto ranges = tb::balanceStages(cost, 2);
    std::vector<double> stageCost(2, 0);
    for (int s = 0; s < 2; ++s)
        for (int l = ranges[size_t(s)].first; l <= ranges[size_t(s)].second; ++l) stageCost[size_t(s)] += cost[size_t(l)];
    std::printf("%s, batch %d, %d steps x %d rounds (medians)\nlayer ms (1 thread):", model.c_str(), batch, steps, rounds);
    for (size_t l = 0; l < cost.size(); ++l) std::printf(" %s %.2f", spec.layers[l].name.c_str(), cost[l] * 1e3);
    std::printf("\nsplit: layers %d-%d (%.1f ms) | %d-%d (%.1f ms)\n", ranges[0].first, ranges[0].second,
                stageCost[0] * 1e3, ranges[1].first, ranges[1].second, stageCost[1] * 1e3);

    tb::OptimizerSettings opt;
    opt.rule = tb::UpdateRule::Momentum;
    opt.hyper.momentum = 0.9f;
    opt.schedule.initial = 0.01f;
    std::mt19937 rng(1);
    std::normal_distribution<float> nx(0.f, 1.f);
    tb::Batch data;
    data.n = batch, data.c = spec.inC, data.h = spec.inH, data.w = spec.inW;
    for (size_t i = 0; i < size_t(batch) * size_t(spec.inC * spec.inH * spec.inW); ++i) data.x.push_back(nx(rng) * 0.3f);
    for (int i = 0; i < batch; ++i) data.y.push_back(int32_t(rng() % 10));

    std::vector<Config> configs;
    configs.emplace_back("one device, 2 threads", "", 1);
    configs.emplace_back("naive, 2 stages", "naive", 1);
    for (int m : {2, 4, 8}) configs.emplace_back("gpipe M=" + std::to_string(m), "gpipe", m);
    for (int m : {4, 8}) configs.emplace_back("1f1b M=" + std::to_string(m), "1f1b", m);

    // One device: the whole model on a backend of 2 threads.
    auto two = tb::makeCpuBackend(2);
    tb::Stream s = two->createStream();
    tb::Network whole(spec, *two, batch);
    const std::vector<float> init = whole.initialParams(1);
    std::copy(init.begin(), init.end(), whole.params());
    tb::Optimizer wholeOpt(*two, opt.rule, opt.hyper, opt.schedule, size_t(whole.paramCount()), s);
    std::copy(data.x.begin(), data.x.end(), whole.input());
    std::copy(data.y.begin(), data.y.end(), whole.labels());
    float stats[3];
    for (Config& c : configs) {
        if (c.schedule.empty()) continue;
        tb::StagePipelineSetup setup;
        setup.ranges = ranges;
        setup.devices = {tb::Device{tb::DeviceType::Cpu, 0}, tb::Device{tb::DeviceType::Cpu, 1}};
        setup.batch = batch;
        setup.microBatches = c.micro;
        setup.opt = opt;
        setup.seed = 1;
        c.sched = tb::makePipelineSchedule(c.schedule);
        c.pipe = std::make_unique<tb::StagePipeline>(spec, setup, *c.sched);
        for (int st = 0; st < 2; ++st) c.activations.push_back(c.pipe->activationBytes(st));
    }
    for (int r = 0; r < rounds; ++r)
        for (Config& c : configs) {
            std::vector<double> bubbles;
            std::chrono::steady_clock::time_point t0;
            for (int k = -3; k < steps; ++k) {  // 3 warm-up steps
                if (k == 0) t0 = std::chrono::steady_clock::now();
                if (!c.pipe) {
                    whole.forward(s, true, uint64_t(k), batch, stats);
                    whole.backward(s);
                    wholeOpt.apply(s, whole.params(), whole.grads(), k);
                } else {
                    const tb::PipelineStep p = c.pipe->step(data, k, uint64_t(k));
                    if (k >= 0) bubbles.push_back(p.bubbleFraction);
                    if (k >= 0) c.accumulateShare.push_back((p.accumulate[0] + p.accumulate[1]) / (p.busy[0] + p.busy[1]));
                }
            }
            c.exPerSec.push_back(double(steps) * batch / seconds(t0));
            if (c.pipe) c.bubble.push_back(median(bubbles));
        }

    const double base = median(configs.front().exPerSec);
    std::printf("%-24s %10s %8s %9s %9s %16s %11s\n", "configuration", "ex/s", "vs one", "bubble", "(S-1)/", "activations MB",
                "busy spent");
    std::printf("%-24s %10s %8s %9s %9s %16s %11s\n", "", "", "device", "measured", "(M+S-1)", "stage 0 / 1", "summing grads");
    nlohmann::json out = {{"benchmark", "pipeline"}, {"model", model}, {"batch", batch}, {"processor", tbbench::cpuInfo("model name")},
                          {"split", {{ranges[0].first, ranges[0].second}, {ranges[1].first, ranges[1].second}}},
                          {"stage_ms", {stageCost[0] * 1e3, stageCost[1] * 1e3}}};
    for (const Config& c : configs) {
        const double ex = median(c.exPerSec);
        nlohmann::json j = {{"name", c.name}, {"examples_per_sec", ex}, {"rounds", c.exPerSec}};
        if (c.pipe) {
            const double b = median(c.bubble), ideal = tb::idealBubble(2, c.micro);
            const double acc = median(c.accumulateShare);
            std::printf("%-24s %10.0f %7.2fx %8.1f%% %8.1f%% %7.1f / %6.1f %10.1f%%\n", c.name.c_str(), ex, ex / base, 100 * b,
                        100 * ideal, c.activations[0] / 1e6, c.activations[1] / 1e6, 100 * acc);
            j["accumulate_share_of_busy"] = acc;
            j["bubble"] = b;
            j["bubble_rounds"] = c.bubble;
            j["ideal_bubble"] = ideal;
            j["activation_bytes"] = c.activations;
        } else {
            std::printf("%-24s %10.0f %7.2fx\n", c.name.c_str(), ex, 1.0);
        }
        out["configs"].push_back(j);
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return tbbench::guardedMain("tb_bench_pipeline", run, argc, argv); }
