// metrics.jsonl as the window follows a live run (ui/window/run_follower.cpp): every line parsed.
#include "engine/metrics_file.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view rest(reinterpret_cast<const char*>(data), size);
    while (!rest.empty()) {
        const size_t at = rest.find('\n');
        tb::MetricsLine m;
        TB_FUZZ_REFUSALS_ARE_FINE((void)tb::parseMetricsLine(std::string(rest.substr(0, at)), m));
        rest.remove_prefix(at == std::string_view::npos ? rest.size() : at + 1);
    }
    return 0;
}
