#include "headless_run.hpp"

#include <cstdio>
#include <iostream>
#include <memory>

#include "engine/metrics_file.hpp"
#include "engine/run_folder.hpp"
#include "engine/trainer.hpp"
#include "progress_bar.hpp"
#include "util/error.hpp"

// One line of printable text: control characters from the input (a newline in a value, say)
// would split or garble it, so they are written as escapes.
int failWith(const char* program, const std::string& message) {
    std::string line;
    for (const unsigned char ch : message) {
        if (ch == '\n') line += "\\n";
        else if (ch == '\t') line += "\\t";
        else if (ch < 0x20 || ch == 0x7f) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "\\x%02x", ch);
            line += hex;
        } else {
            line += char(ch);
        }
    }
    std::fprintf(stderr, "%s: %s\n", program, line.c_str());
    return 2;
}

int runHeadless(const tb::RunConfig& config, const RunStorage& storage) {
    try {
        config.validate();
        // Every run keeps a folder; a resumed one continues its own.
        std::unique_ptr<tb::RunFolder> folder = storage.resumeDir.empty() ? tb::RunFolder::create(config, storage.runDir)
                                                                          : tb::RunFolder::reopen(storage.resumeDir);
        tb::Trainer trainer(config);
        trainer.setRunFolder(folder.get());
        ProgressBar progress(stderr, folder->path());
        std::unique_ptr<tb::MetricsFile> metrics;
        if (!config.quiet) trainer.addObserver(&progress);
        if (!config.metrics.empty()) {
            metrics = std::make_unique<tb::MetricsFile>(config.metrics);
            trainer.addObserver(metrics.get());
        }
        const tb::RunSummary summary = trainer.run();
        nlohmann::json out = summary.toJson();
        out["run_dir"] = folder->path();
        std::cout << out.dump() << std::endl;
        if (!std::cout)  // a full disk or a closed pipe: the caller must not take the run as reported
            return failWith("towerbench-run", "standard output: cannot write the summary line (it is in " +
                                                  folder->path() + "/summary.json)");
        return 0;
    } catch (const tb::Error& e) {
        return failWith("towerbench-run", e.what());
    } catch (const std::bad_alloc&) {
        return failWith("towerbench-run", "out of memory");
    }
}
