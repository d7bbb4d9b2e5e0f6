// What every libFuzzer target shares: the readers under test take file names, so each input is
// written to files in a scratch folder of this process (under /dev/shm where it exists: a target
// writes on every execution), and an input holding several files separates them with kCut.
//
// A reader passes when it returns or throws tb::Error (one clear sentence for bad input). Any
// other exception escapes LLVMFuzzerTestOneInput, std::terminate aborts, and libFuzzer keeps the
// input as a crash; so do ASan's and UBSan's reports and allocations over -malloc_limit_mb.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.hpp"

namespace fuzz {

// Between the files of one input; the targets' dictionaries (tests/fuzz/*.dict) hold it.
inline constexpr std::string_view kCut = "\n#TB-CUT#\n";

// An empty folder of this process, made afresh for every input.
inline const std::string& scratch() {
    static const std::string dir = [] {
        std::error_code ec;
        const std::filesystem::path base = std::filesystem::is_directory("/dev/shm", ec)
                                               ? std::filesystem::path("/dev/shm")
                                               : std::filesystem::temp_directory_path();
        return (base / ("tb-fuzz-" + std::to_string(::getpid()))).string();
    }();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    std::filesystem::create_directories(dir);
    return dir;
}

inline void writeFile(const std::string& path, std::string_view bytes) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) std::abort();
}

// The input cut at every kCut, at most `maxParts` parts (the last keeps any further cuts).
inline std::vector<std::string_view> split(const uint8_t* data, size_t size, size_t maxParts) {
    std::string_view rest(reinterpret_cast<const char*>(data), size);
    std::vector<std::string_view> parts;
    while (parts.size() + 1 < maxParts) {
        const size_t at = rest.find(kCut);
        if (at == std::string_view::npos) break;
        parts.push_back(rest.substr(0, at));
        rest.remove_prefix(at + kCut.size());
    }
    parts.push_back(rest);
    return parts;
}

}  // namespace fuzz

// The expected outcome of bad input: a tb::Error (its message is not checked here; the bad-input
// campaign, tests/bad_input, checks the messages).
#define TB_FUZZ_REFUSALS_ARE_FINE(...) \
    try {                              \
        __VA_ARGS__;                   \
    } catch (const tb::Error&) {       \
    }
