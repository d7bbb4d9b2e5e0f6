// tb_bench_denormals: the price of denormal floats in every element-wise kernel and optimiser
// rule of the CPU backend, with the engine's float mode (flush-to-zero and denormals-are-zero)
// and, for comparison, without it. Intel processors pay up to 100x for denormals in such loops
// (util/compute_thread.hpp); Adam's moments decay into them after ~600 steps of zero gradient.
//
// usage: tb_bench_denormals [--n N] [--repeats R] [--threads T]
// Each kernel runs over N floats (default 3,274,634: mnist_cnn's parameters) on normal inputs and
// on denormal ones (the values a kernel reads that decay in training: slots, gradients, shadows);
// the median of R timed calls (default 15) after one warm-up round, normal and denormal calls
// alternating. Prints the processor and its vector ISA, a table
// (ms normal, ms denormal, ratio; goal with the engine's mode: ratio <= 1.5) and one JSON line.
#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "bench_machine.hpp"
#include "util/compute_thread.hpp"

namespace {

using tbbench::cpuInfo;
using tbbench::isa;

struct Buffers {
    std::vector<float> p, g, m, v, y, mask;
};

// Fills the buffers a kernel reads: normal values, or denormal ones where training makes them.
void prepare(Buffers& b, size_t n, bool denormal) {
    const float small = denormal ? FLT_MIN / 64 : 1e-3f;
    b.p.assign(n, 0.5f);
    b.g.assign(n, small);
    b.m.assign(n, small);
    b.v.assign(n, small * small > 0 ? small * small : small);
    b.y.assign(n, small);
    b.mask.assign(n, denormal ? FLT_MIN / 64 : 1.25f);
}

}  // namespace

int main(int argc, char** argv) {
    size_t n = 3274634;
    int repeats = 15, threads = int(std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--n")) n = size_t(std::atoll(argv[i + 1]));
        else if (!std::strcmp(argv[i], "--repeats")) repeats = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    }
    auto be = tb::makeCpuBackend(threads);
    tb::UpdateParams h;
    h.lr = 1e-3f;
    h.step = 700;
    Buffers b;
    float out = 0;
    using K = std::function<void(Buffers&)>;
    const std::vector<std::pair<const char*, K>> kernels = {
        {"scale", [&](Buffers& x) { be->scale(nullptr, x.y.data(), 0.9f, n); }},
        {"axpy", [&](Buffers& x) { be->axpy(nullptr, 0.9f, x.g.data(), x.p.data(), n); }},
        {"addSumSquares", [&](Buffers& x) { be->addSumSquares(nullptr, x.g.data(), n, 0.5f, &out); }},
        {"relu.forward", [&](Buffers& x) { be->reluForward(nullptr, x.y.data(), x.m.data(), n); }},
        {"relu.backward", [&](Buffers& x) { be->reluBackward(nullptr, x.p.data(), x.y.data(), x.m.data(), n); }},
        {"dropout.forward", [&](Buffers& x) { be->dropoutForward(nullptr, x.y.data(), x.m.data(), x.mask.data(), n, 0.5f, 7); }},
        {"dropout.backward", [&](Buffers& x) { be->dropoutBackward(nullptr, x.y.data(), x.mask.data(), x.m.data(), n); }},
        {"ema", [&](Buffers& x) { be->emaUpdate(nullptr, x.y.data(), x.g.data(), 0.999f, n); }},
        {"update.sgd", [&](Buffers& x) { be->applyUpdate(nullptr, tb::UpdateRule::Sgd, h, x.p.data(), x.g.data(), nullptr, nullptr, nullptr, n); }},
        {"update.momentum", [&](Buffers& x) { be->applyUpdate(nullptr, tb::UpdateRule::Momentum, h, x.p.data(), x.g.data(), x.m.data(), nullptr, nullptr, n); }},
        {"update.nesterov", [&](Buffers& x) { be->applyUpdate(nullptr, tb::UpdateRule::Nesterov, h, x.p.data(), x.g.data(), x.m.data(), nullptr, nullptr, n); }},
        {"update.adam", [&](Buffers& x) { be->applyUpdate(nullptr, tb::UpdateRule::Adam, h, x.p.data(), x.g.data(), x.m.data(), x.v.data(), nullptr, n); }},
    };
    struct Row {
        const char* name;
        double normal[2], denormal[2];  // [0] default float mode, [1] the engine's (FTZ + DAZ)
    };
    std::vector<Row> rows;
    double worstEngine = 0, worstDefault = 0;
    for (const auto& kernel : kernels) {
        // (Not a structured binding: clang before 16 cannot capture one in the lambda below.)
        const auto& k = kernel.second;
        Row r{kernel.first, {}, {}};
        for (int mode = 0; mode < 2; ++mode) {
            // A fresh thread per mode: it and the OpenMP team it leads start in the default mode.
            std::thread([&] {
                if (mode == 1) tb::enterComputeTeam(threads);
                // Normal and denormal calls alternate, so drift in the machine's speed hits both;
                // fresh inputs for every call: a kernel that updates in place would otherwise
                // flush the denormals on its first call and time zeros after.
                std::vector<double> t[2];
                for (int rep = 0; rep <= repeats; ++rep)
                    for (int d = 0; d < 2; ++d) {
                        prepare(b, n, d == 1);
                        const auto t0 = std::chrono::steady_clock::now();
                        k(b);
                        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                        if (rep > 0) t[d].push_back(ms);  // the first round warms up
                    }
                for (int d = 0; d < 2; ++d) {
                    std::sort(t[d].begin(), t[d].end());
                    (d ? r.denormal : r.normal)[mode] = t[d][t[d].size() / 2];
                }
            }).join();
        }
        worstDefault = std::max(worstDefault, r.denormal[0] / r.normal[0]);
        worstEngine = std::max(worstEngine, r.denormal[1] / r.normal[1]);
        rows.push_back(r);
    }
    std::printf("# %s\n# %d threads; n = %zu floats; median of %d calls, fresh inputs each\n",
                tbbench::machineLine(threads).c_str(), threads, n, repeats);
    std::printf("%-17s | %-33s | %-33s\n", "", "default float mode", "engine mode (FTZ + DAZ)");
    std::printf("%-17s | %9s %11s %9s | %9s %11s %9s\n", "kernel", "normal ms", "denormal ms", "ratio", "normal ms",
                "denormal ms", "ratio");
    for (const Row& r : rows)
        std::printf("%-17s | %9.2f %11.2f %8.2fx | %9.2f %11.2f %8.2fx\n", r.name, r.normal[0], r.denormal[0],
                    r.denormal[0] / r.normal[0], r.normal[1], r.denormal[1], r.denormal[1] / r.normal[1]);
    std::printf("worst ratio: %.2fx in the default mode, %.2fx in the engine's mode (goal <= 1.5): %s\n", worstDefault,
                worstEngine, worstEngine <= 1.5 ? "met" : "NOT met");
    std::printf("{\"processor\": \"%s\", \"isa\": \"%s\", \"n\": %zu, \"worst_ratio_default\": %.3f, "
                "\"worst_ratio_engine\": %.3f}\n",
                cpuInfo("model name").c_str(), isa().c_str(), n, worstDefault, worstEngine);
    return 0;
}
