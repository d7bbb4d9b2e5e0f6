// tb_gemm_peak: this machine's GEMM ceiling per precision (gemm_peak.hpp), which
// bench_cpu_vs_pytorch.py compares Towerbench's training FLOP rate against.
//
// usage: tb_gemm_peak [--threads T] [--sizes 1024,2048,4096] [--repeats 5]
// Square row-major C = A * B for each size, all cores by default (OpenMP); one untimed warm-up call,
// then the best of `repeats` timed calls. Prints one JSON line with the best size per precision,
// oneDNN's instruction set and the bf16 kernel's name (nulls and the reason where bf16 is missing):
//   {"gemm_gflops": X, "threads": T, "n": N, "sizes": {"1024": X1, ...}, "isa": "avx512_core_bf16",
//    "bf16_gemm_gflops": Y, "bf16_n": M, "bf16_kernel": "brg:avx512_core_bf16", "bf16_missing": ""}
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_machine.hpp"
#include "gemm_peak.hpp"

namespace {

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

int run(int argc, char** argv) {
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
    const tbbench::GemmPeak p = tbbench::measureGemmPeak(threads, sizes, repeats);
    const std::string bf16 =
        p.bf16Missing.empty()
            ? "\"bf16_gemm_gflops\": " + std::to_string(p.bf16) + ", \"bf16_n\": " + std::to_string(p.bf16N) +
                  ", \"bf16_kernel\": \"" + p.bf16Kernel + "\""
            : std::string("\"bf16_gemm_gflops\": null, \"bf16_n\": null, \"bf16_kernel\": null");
    std::printf("{\"gemm_gflops\": %.2f, \"threads\": %d, \"n\": %lld, \"sizes\": {%s}, \"isa\": \"%s\", %s, "
                "\"bf16_missing\": \"%s\"}\n",
                p.fp32, threads, static_cast<long long>(p.fp32N), p.fp32Sizes.c_str(), tb::cpuIsaName().c_str(),
                bf16.c_str(), p.bf16Missing.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return tbbench::guardedMain("tb_gemm_peak", run, argc, argv); }
