// A run folder as the run index and the Runs tab read it (run.json, config.json, plan.json,
// summary.json, model.json, metrics.jsonl), as --resume reads its settings, and the runs
// folder's SQLite index (index.sqlite) opened and refreshed over it. Input: those seven files
// in that order, cut by fuzz::kCut.
#include "engine/run_folder.hpp"
#include "fuzz_support.hpp"
#include "io/run_index.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const char* kNames[] = {"run.json", "config.json", "plan.json", "summary.json", "model.json", "metrics.jsonl"};
    const std::string root = fuzz::scratch();
    const std::string run = root + "/run-1";
    std::filesystem::create_directories(run);
    const auto parts = fuzz::split(data, size, 7);
    for (size_t i = 0; i < parts.size() && i < 6; ++i) fuzz::writeFile(run + "/" + kNames[i], parts[i]);
    TB_FUZZ_REFUSALS_ARE_FINE((void)tb::readRunFolder(run));
    TB_FUZZ_REFUSALS_ARE_FINE(tb::RunConfig c = tb::RunFolder::resumeConfig(run); c.validate());
    if (parts.size() == 7) {
        fuzz::writeFile(root + "/index.sqlite", parts[6]);
        TB_FUZZ_REFUSALS_ARE_FINE(tb::RunIndex index(root); (void)index.list("", "created", false));
    }
    return 0;
}
