// What every benchmark prints first: the processor and its vector ISA (the development
// machines change processors between sessions; only ratios from one run compare), what oneDNN
// uses of it, the cores and memory, and the GEMM peak per precision (machineLine).
#pragma once
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>

#include "gemm_peak.hpp"

namespace tbbench {

// The value of the first /proc/cpuinfo line starting with `key` ("model name", "flags").
inline std::string cpuInfo(const char* key) {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
        if (line.rfind(key, 0) == 0) return line.substr(line.find(':') + 2);
    return "";
}

// "avx2 fma avx512f ...": the vector extensions that matter to the kernels, as present.
inline std::string isa() {
    std::string flags = cpuInfo("flags");
    flags.insert(flags.begin(), ' ');
    flags.push_back(' ');
    std::string out, word;
    for (const char* f : {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16"}) {
        word.assign(1, ' ');
        word.append(f).push_back(' ');
        if (flags.find(word) != std::string::npos) {
            if (!out.empty()) out += ' ';
            out += f;
        }
    }
    return out.empty() ? "no AVX2" : out;
}

// MemTotal from /proc/meminfo, in GiB ("?" where there is none).
inline std::string memoryGiB() {
    std::ifstream f("/proc/meminfo");
    for (std::string line; std::getline(f, line);)
        if (line.rfind("MemTotal:", 0) == 0) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.1f", std::stod(line.substr(9)) / (1024.0 * 1024.0));
            return buf;
        }
    return "?";
}

// "processor: AMD EPYC (avx2 fma avx512f avx512_bf16); oneDNN: avx512_core_bf16; 2 cores, 23.4
// GiB; GEMM peak on 2 threads: fp32 502 GFLOP/s, bf16 930 GFLOP/s (brg:avx512_core_bf16)": a
// quick peak (sizes 1024 and 2048, best of 3), measured now on `threads` threads.
inline std::string machineLine(int threads) {
    const GemmPeak p = measureGemmPeak(threads, {1024, 2048}, 3);
    char peak[160];
    std::snprintf(peak, sizeof peak, "fp32 %.0f GFLOP/s, ", p.fp32);
    std::string bf16 = p.bf16Missing.empty() ? std::to_string(int(p.bf16 + 0.5)) + " GFLOP/s (" + p.bf16Kernel + ")"
                                             : std::string("none (no AVX512-BF16 or AMX)");
    return "processor: " + cpuInfo("model name") + " (" + isa() + "); oneDNN: " + tb::cpuIsaName() + "; " +
           std::to_string(omp_get_num_procs()) + " cores, " + memoryGiB() + " GiB; GEMM peak on " +
           std::to_string(threads) + (threads == 1 ? " thread: " : " threads: ") + peak + "bf16 " + bf16;
}

// A benchmark's main: run(argc, argv), or its error in one line on stderr and exit status 1.
inline int guardedMain(const char* program, int (*run)(int, char**), int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", program, e.what());
        return 1;
    }
}

}  // namespace tbbench
