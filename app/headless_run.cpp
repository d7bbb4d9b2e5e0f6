#include "headless_run.hpp"

#include <cstdio>
#include <iostream>
#include <memory>

#include "engine/metrics_file.hpp"
#include "engine/trainer.hpp"
#include "progress_bar.hpp"
#include "util/error.hpp"

int failWith(const char* program, const std::string& message) {
    std::fprintf(stderr, "%s: %s\n", program, message.c_str());
    return 2;
}

int runHeadless(const tb::RunConfig& config) {
    try {
        config.validate();
        tb::Trainer trainer(config);
        ProgressBar progress(stderr);
        std::unique_ptr<tb::MetricsFile> metrics;
        if (!config.quiet) trainer.addObserver(&progress);
        if (!config.metrics.empty()) {
            metrics = std::make_unique<tb::MetricsFile>(config.metrics);
            trainer.addObserver(metrics.get());
        }
        const tb::RunSummary summary = trainer.run();
        std::cout << summary.toJson().dump() << std::endl;
        return 0;
    } catch (const tb::Error& e) {
        return failWith("towerbench-run", e.what());
    } catch (const std::bad_alloc&) {
        return failWith("towerbench-run", "out of memory");
    }
}
