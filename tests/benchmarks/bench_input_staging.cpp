// tb_bench_input_staging: what staging the next step's input while a step computes saves
// (TowerSet::steps' `next`, which the trainer always passes). Synchronous steps of a model on a
// set of towers, in alternating rounds: "own" calls stage their input at their start (host copy
// into pinned memory, then host to device on the step's path), "ahead" calls are handed the next
// batch, which goes to pinned memory and over PCIe on the copy stream while the step computes.
// Eight distinct pre-made batches cycle, so each step copies new bytes; no input pipeline, so
// the difference is the staging alone.
//
// usage: tb_bench_input_staging [--model mnist_cnn] [--towers gpu:0] [--variables tower|cpu]
//                               [--batch 128] [--steps 300] [--rounds 5] [--threads T]
// --batch is per tower. Prints the processor, the backend, the median examples/sec of each way
// over the rounds (after 30 warm-up steps), their ratio, and one JSON line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "backend/registry.hpp"
#include "bench_machine.hpp"
#include "data/pipeline.hpp"
#include "nn/model_spec.hpp"
#include "parallel/tower_set.hpp"
#include "util/error.hpp"

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int run(int argc, char** argv) {
    std::string model = "mnist_cnn", towersText = "gpu:0", variables = "tower";
    int batch = 128, steps = 300, rounds = 5, threads = int(std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) throw tb::Error(a + ": needs a value");
        const std::string v = argv[++i];
        if (a == "--model") model = v;
        else if (a == "--towers") towersText = v;
        else if (a == "--variables") variables = v;
        else if (a == "--batch") batch = std::atoi(v.c_str());
        else if (a == "--steps") steps = std::atoi(v.c_str());
        else if (a == "--rounds") rounds = std::atoi(v.c_str());
        else if (a == "--threads") threads = std::atoi(v.c_str());
        else throw tb::Error(a + ": unknown option");
    }
    if (batch < 1 || steps < 1 || rounds < 1 || threads < 1)
        throw tb::Error("--batch, --steps, --rounds and --threads must be positive");
    if (variables != "tower" && variables != "cpu") throw tb::Error("--variables: tower or cpu");

    const tb::ModelSpec spec = tb::findModel(model);
    tb::DeploymentPlan plan;
    plan.towers = tb::DeploymentPlan::parseTowers(towersText, int(std::thread::hardware_concurrency()), tb::gpuCount(),
                                                  "--towers");
    plan.batchPerTower = batch;
    plan.variables = variables == "cpu" ? tb::VariablePlacement::Cpu : tb::VariablePlacement::Tower;
    tb::OptimizerSettings opt;
    opt.rule = tb::UpdateRule::Momentum;
    opt.hyper.momentum = 0.9f;
    opt.schedule.initial = 0.01f;
    tb::TowerSet towers(spec, plan, opt, std::max(1, threads / plan.towerCount()), 1);

    // Eight global batches of uniform noise in [0, 1) (the images' range), labels 0..9.
    const int global = plan.towerCount() * batch;
    std::vector<tb::Batch> batches(8);
    uint64_t z = 42;
    for (tb::Batch& b : batches) {
        b.n = global;
        b.c = spec.inC;
        b.h = spec.inH;
        b.w = spec.inW;
        b.x.resize(size_t(global) * size_t(spec.inC) * size_t(spec.inH) * size_t(spec.inW));
        for (float& v : b.x) v = float((z = z * 6364136223846793005ull + 1442695040888963407ull) >> 40) / 16777216.f;
        b.y.resize(size_t(global));
        for (int32_t& y : b.y) y = int32_t(((z = z * 6364136223846793005ull + 1) >> 33) % 10);
    }
    int64_t step = 0;
    auto stepsOf = [&](int count, bool ahead) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int k = 0; k < count; ++k, ++step)
            towers.steps({&batches[size_t(step) % 8]}, step, 0, ahead ? &batches[size_t(step + 1) % 8] : nullptr);
        return double(count) * global / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    stepsOf(30, true);
    std::vector<double> own, ahead;
    for (int r = 0; r < rounds; ++r) {
        own.push_back(stepsOf(steps, false));
        ahead.push_back(stepsOf(steps, true));
    }
    const double a = median(own), b = median(ahead);
    std::printf("%s\nbackend: %s; %s\n", tbbench::machineLine(omp_get_num_procs()).c_str(),
                towers.backendName().c_str(), plan.describe().c_str());
    std::printf("%s, batch %d per tower, %d steps x %d rounds (median)\n", model.c_str(), batch, steps, rounds);
    std::printf("%-34s %12.0f ex/s\n%-34s %12.0f ex/s\n%-34s %12.3f\n", "input staged at each step's start", a,
                "input staged during the step before", b, "ratio (ahead / own)", b / a);
    std::printf("{\"kind\":\"input_staging\",\"model\":\"%s\",\"towers\":\"%s\",\"variables\":\"%s\",\"batch\":%d,"
                "\"steps\":%d,\"rounds\":%d,\"own_examples_per_sec\":%.1f,\"ahead_examples_per_sec\":%.1f,"
                "\"ratio\":%.4f}\n",
                model.c_str(), towersText.c_str(), variables.c_str(), batch, steps, rounds, a, b, b / a);
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return tbbench::guardedMain("tb_bench_input_staging", run, argc, argv); }
