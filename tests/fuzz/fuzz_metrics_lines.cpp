// metrics.jsonl as the window follows a live run (ui/window/run_follower.cpp): every line parsed;
// read as a resumed run's past (readMetricsHistory, up to a step from the input's first byte);
// and read from its end as the runs index and the model view read it (util/file_tail.hpp), with
// windows of a few bytes so an input crosses many of them: the line taken must be the one a
// reading from the start finds.
#include <sstream>

#include "engine/metrics_file.hpp"
#include "fuzz_support.hpp"
#include "util/file_tail.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    std::string_view rest(text);
    // From the start: the last whole line (ended by '\n') that holds an 'L'.
    std::string lastWithL;
    bool found = false;
    while (!rest.empty()) {
        const size_t at = rest.find('\n');
        tb::MetricsLine m;
        TB_FUZZ_REFUSALS_ARE_FINE((void)tb::parseMetricsLine(std::string(rest.substr(0, at)), m));
        if (at != std::string_view::npos && rest.substr(0, at).find('L') != std::string_view::npos)
            lastWithL = rest.substr(0, at), found = true;
        rest.remove_prefix(at == std::string_view::npos ? rest.size() : at + 1);
    }
    std::istringstream in(text);
    std::string taken;
    const bool took = tb::lastLineTaken(in, [&](std::string_view line) {
        if (line.find('L') == std::string_view::npos) return false;
        taken = line;
        return true;
    }, INT64_MAX, 1 + (size ? data[0] % 7 : 0));
    if (took != found || taken != lastWithL) __builtin_trap();
    std::istringstream again(text);
    tb::MetricsLine times;
    TB_FUZZ_REFUSALS_ARE_FINE((void)tb::lastLayerTimes(again, times));
    const std::string file = fuzz::scratch() + "/metrics.jsonl";
    if (FILE* f = std::fopen(file.c_str(), "wb")) {
        std::fwrite(text.data(), 1, text.size(), f);
        std::fclose(f);
        std::vector<tb::MetricsLine> past;
        const int64_t upTo = size ? data[0] * 10 : 0;
        TB_FUZZ_REFUSALS_ARE_FINE((void)tb::readMetricsHistory(file, upTo, past));
        for (const tb::MetricsLine& m : past)
            if ((m.kind == tb::MetricsLine::Kind::Step ? m.step.step : m.eval.step) > upTo) __builtin_trap();
    }
    return 0;
}
