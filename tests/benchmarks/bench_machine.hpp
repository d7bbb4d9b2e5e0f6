// What every benchmark prints first: the processor and its vector ISA (the development
// machines change processors between sessions; only ratios from one run compare).
#pragma once
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>

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
    for (const char* f : {"avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}) {
        word.assign(1, ' ');
        word.append(f).push_back(' ');
        if (flags.find(word) != std::string::npos) {
            if (!out.empty()) out += ' ';
            out += f;
        }
    }
    return out.empty() ? "no AVX2" : out;
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
