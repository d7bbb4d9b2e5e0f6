// Where a model's training step goes, by layer type: one network on one CPU backend, the median
// of each layer's forward and backward over timed steps (Network::profileNextStep: the layers
// timed one by one), summed per type, beside the whole step timed without profiling.
//
//   tb_bench_layers [--model resnet20_mnist] [--batch 128] [--threads N] [--steps 7]
//                   [--precision fp32|bf16] [--each true]   (each: every layer's line too)
//
// What each line says: the type's share of the step and its seconds forward and backward.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "bench_machine.hpp"
#include "nn/network.hpp"
#include "util/error.hpp"
#include "util/compute_thread.hpp"

namespace {

double median(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    std::string model = "resnet20_mnist", precision = "fp32";
    bool each = false;
    int batch = 128, steps = 7, threads = int(std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i], value = argv[i + 1];
        if (flag == "--model") model = value;
        else if (flag == "--batch") batch = std::atoi(value.c_str());
        else if (flag == "--threads") threads = std::atoi(value.c_str());
        else if (flag == "--steps") steps = std::atoi(value.c_str());
        else if (flag == "--precision") precision = value;
        else if (flag == "--each") each = value == "true";
        else {
            std::fprintf(stderr, "tb_bench_layers: unknown flag %s\n", flag.c_str());
            return 2;
        }
    }
    if (batch < 1 || steps < 1 || threads < 1 || (precision != "fp32" && precision != "bf16")) {
        std::fprintf(stderr, "tb_bench_layers: --batch, --steps and --threads must be positive, --precision fp32 or bf16\n");
        return 2;
    }
    try {
        tb::enterComputeTeam(threads);
        auto be = tb::makeCpuBackend(threads, 0, precision == "bf16" ? tb::MatmulPrecision::Bf16 : tb::MatmulPrecision::Fp32);
        const tb::ModelSpec spec = tb::findModel(model);
        tb::Network net(spec, *be, batch);
        const std::vector<float> init = net.initialParams(1);
        std::copy(init.begin(), init.end(), net.params());
        for (size_t i = 0; i < size_t(batch) * size_t(net.inputDims().size()); ++i) net.input()[i] = float(i % 251) / 251.f;
        for (int i = 0; i < batch; ++i) net.labels()[i] = i % net.outputs();
        float stats[3] = {0, 0, 0};
        auto step = [&] {
            net.forward(nullptr, true, 1, batch, stats);
            net.backward(nullptr);
        };
        for (int w = 0; w < 3; ++w) step();
        std::vector<double> whole;
        for (int s = 0; s < steps; ++s) {
            const auto t0 = std::chrono::steady_clock::now();
            step();
            whole.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::vector<std::vector<double>> fwd(net.layers().size()), bwd(net.layers().size());
        for (int s = 0; s < steps; ++s) {
            net.profileNextStep();
            step();
            const tb::LayerTimes t = net.takeLayerTimes();
            for (size_t l = 0; l < t.forward.size(); ++l) fwd[l].push_back(t.forward[l]), bwd[l].push_back(t.backward[l]);
        }
        std::map<std::string, std::pair<double, double>> byType;
        double profiled = 0;
        for (size_t l = 0; l < fwd.size(); ++l) {
            auto& e = byType[tb::layerTypeName(spec.layers[l].type)];
            e.first += median(fwd[l]);
            e.second += median(bwd[l]);
            profiled += median(fwd[l]) + median(bwd[l]);
        }
        const double stepSeconds = median(whole);
        std::printf("# %s\n# %s, batch %d, %s, %d threads: step %.2f ms (%.0f ex/s); layers profiled one by one: %.2f ms\n",
                    tbbench::machineLine(threads).c_str(), model.c_str(), batch, precision.c_str(), threads,
                    stepSeconds * 1e3, batch / stepSeconds, profiled * 1e3);
        std::printf("%-16s %8s %10s %10s\n", "layer type", "share", "forward", "backward");
        for (const auto& [type, t] : byType)
            std::printf("%-16s %7.1f%% %8.2f ms %8.2f ms\n", type.c_str(), 100 * (t.first + t.second) / profiled,
                        t.first * 1e3, t.second * 1e3);
        if (each) {
            const std::vector<tb::LayerSummary> layers = tb::summarizeLayers(spec);
            std::printf("\n%-22s %-12s %14s %10s %10s %9s\n", "layer", "type", "output", "forward", "backward",
                        "GFLOP/s");
            for (size_t l = 0; l < fwd.size(); ++l) {
                const double f = median(fwd[l]), b = median(bwd[l]);
                const double flops = double(layers[l].forwardFlops) * batch * (b > 0 ? 3 : 1);
                std::printf("%-22s %-12s %14s %7.2f ms %7.2f ms %9.0f\n", layers[l].name.c_str(),
                            tb::layerTypeName(layers[l].type).c_str(), layers[l].output.str().c_str(), f * 1e3, b * 1e3,
                            flops > 0 ? flops / (f + b) / 1e9 : 0.0);
            }
        }
    } catch (const tb::Error& e) {
        std::fprintf(stderr, "tb_bench_layers: %s\n", e.what());
        return 1;
    }
    return 0;
}
