// tb_gemm_peak: measures this machine's single-precision GEMM throughput with oneDNN's dnnl_sgemm,
// the ceiling that bench_cpu_vs_pytorch.py compares Towerbench's training FLOP rate against.
//
// usage: tb_gemm_peak [--threads T] [--sizes 1024,2048,4096] [--repeats 5]
// Square row-major C = A * B for each size, all cores by default (OpenMP); one untimed warm-up call,
// then the best of `repeats` timed calls. Prints one JSON line with the best size:
//   {"gemm_gflops": X, "threads": T, "n": N, "sizes": {"1024": X1, "2048": X2, ...}}
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

double bestGflops(dnnl_dim_t n, int repeats) {
    const size_t count = size_t(n) * size_t(n);
    std::vector<float> a(count), b(count), c(count, 0.f);
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    for (auto& v : a) v = dist(rng);
    for (auto& v : b) v = dist(rng);

    auto once = [&] {
        return dnnl_sgemm('N', 'N', n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    };
    if (once() != dnnl_success) {
        std::fprintf(stderr, "tb_gemm_peak: dnnl_sgemm failed for n=%lld\n", static_cast<long long>(n));
        std::exit(1);
    }
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        once();
        const auto t1 = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    }
    const double flops = 2.0 * double(n) * double(n) * double(n);
    return flops / best / 1e9;
}

std::vector<dnnl_dim_t> parseSizes(const char* s) {
    std::vector<dnnl_dim_t> out;
    std::string text(s);
    size_t pos = 0;
    while (pos <= text.size()) {
        const size_t comma = text.find(',', pos);
        const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        if (!item.empty()) out.push_back(std::atoll(item.c_str()));
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    int threads = omp_get_num_procs();
    int repeats = 5;
    std::vector<dnnl_dim_t> sizes{1024, 2048, 4096};
    for (int i = 1; i < argc; ++i) {
        const bool hasValue = i + 1 < argc;
        if (!std::strcmp(argv[i], "--threads") && hasValue) {
            threads = std::atoi(argv[++i]);
        } else if (!std::strcmp(argv[i], "--sizes") && hasValue) {
            sizes = parseSizes(argv[++i]);
        } else if (!std::strcmp(argv[i], "--repeats") && hasValue) {
            repeats = std::max(1, std::atoi(argv[++i]));
        } else {
            std::fprintf(stderr, "usage: %s [--threads T] [--sizes 1024,2048,4096] [--repeats 5]\n", argv[0]);
            return 2;
        }
    }
    if (threads < 1 || sizes.empty()) {
        std::fprintf(stderr, "tb_gemm_peak: need --threads >= 1 and at least one size\n");
        return 2;
    }
    omp_set_num_threads(threads);

    double best = 0;
    dnnl_dim_t bestN = 0;
    std::string perSize;
    for (dnnl_dim_t n : sizes) {
        if (n <= 0) continue;
        const double g = bestGflops(n, repeats);
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%s\"%lld\": %.2f", perSize.empty() ? "" : ", ", static_cast<long long>(n), g);
        perSize += buf;
        if (g > best) {
            best = g;
            bestN = n;
        }
    }
    std::printf("{\"gemm_gflops\": %.2f, \"threads\": %d, \"n\": %lld, \"sizes\": {%s}}\n", best, threads,
                static_cast<long long>(bestN), perSize.c_str());
    return 0;
}
