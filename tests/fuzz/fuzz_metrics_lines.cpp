// metrics.jsonl as the window follows a live run (ui/window/run_follower.cpp): every line parsed;
// cut back as a resume cuts it (metricsUpToCheckpoint, at a step from the input's first byte);
// and read from its end as the runs index and the model view read it (util/file_tail.hpp), with
// windows of a few bytes so an input crosses many of them: the line taken must be the one a
// reading from the start finds.
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/metrics_file.hpp"
#include "fuzz_support.hpp"
#include "util/file_tail.hpp"
#include "util/json_file.hpp"

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
    // Cut back as a resume cuts it: nothing past the checkpoint's step, and a second cut at the
    // same step keeps the same text and the same past (what the window charts is what stays).
    const int64_t upTo = size ? data[0] * 10 : 0;
    std::istringstream whole(text);
    std::vector<tb::MetricsLine> past, pastAgain;
    const std::string kept = tb::metricsUpToCheckpoint(whole, upTo, &past);
    for (const tb::MetricsLine& m : past)
        if ((m.kind == tb::MetricsLine::Kind::Step ? m.step.step : m.eval.step) > upTo) __builtin_trap();
    std::istringstream cut(kept);
    for (std::string line; std::getline(cut, line);)  // no line of any type past the checkpoint
        if (const nlohmann::json j = tb::parseJsonOrDiscard(line);  // as the cut reads them (a depth limit)
            j.is_object() && j.contains("step") && j["step"].is_number() && j["step"].get<double>() > double(upTo))
            __builtin_trap();
    cut.clear();
    cut.seekg(0);
    if (tb::metricsUpToCheckpoint(cut, upTo, &pastAgain) != kept || pastAgain.size() != past.size()) __builtin_trap();
    return 0;
}
