#include "headless_run.hpp"

#include <mutex>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "comm/process_group.hpp"
#include "engine/metrics_file.hpp"
#include "engine/run_folder.hpp"
#include "data/dataset.hpp"
#include "engine/trainer.hpp"
#include "io/output_path.hpp"
#include "nn/model_spec.hpp"
#include "progress_bar.hpp"
#include "stop_signals.hpp"
#include "util/error.hpp"

// One line of printable text: control characters from the input (a newline in a value, say)
// would split or garble it, so they are written as escapes.
int failWith(const char* program, const std::string& message) {
    // A value quoted from the input may be huge (a 1 MB name): the line stays readable.
    constexpr size_t kMaxChars = 1000;
    const std::string shown = message.size() > kMaxChars ? message.substr(0, kMaxChars) + "..." : message;
    std::string line;
    for (const unsigned char ch : shown) {
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

namespace {
// A resume with other processes than the run trained with is said on stderr even when the run is
// quiet (the progress line says it otherwise): the data is dealt anew (RunPlan::resumedAs, the
// part of the Running detail from "resumed as " to its next "; ").
struct ElasticNotice final : tb::TrainingObserver {
    void onStateChanged(tb::RunState s, const std::string& detail) override {
        const size_t at = detail.find("resumed as ");
        if (s != tb::RunState::Running || at == std::string::npos) return;
        std::fprintf(stderr, "towerbench-run: %s\n", detail.substr(at, detail.find("; ", at) - at).c_str());
    }
};
}  // namespace

int runHeadless(const tb::RunConfig& config, const RunStorage& storage) {
    // Ctrl-C or a TERM ends the run as the window's Stop does (stop_signals.hpp), from the first
    // moment: a signal before the trainer exists stops it as soon as it does.
    // The trainer, while it exists, under a lock: the watching thread must not reach it as it
    // is destroyed.
    std::mutex runningLock;
    tb::Trainer* running = nullptr;
    StopSignals signals("towerbench-run", [&](int sig) {
        std::fprintf(stderr, "\ntowerbench-run: %s: stopping after the step in progress (again: end at once)\n",
                     StopSignals::name(sig));
        std::lock_guard lock(runningLock);
        if (running) running->requestStop();
    });
    struct Published {  // declared after the trainer: unpublished before it is destroyed
        std::mutex& lock;
        tb::Trainer*& slot;
        Published(std::mutex& l, tb::Trainer*& s, tb::Trainer* t) : lock(l), slot(s) {
            std::lock_guard g(lock);
            slot = t;
        }
        ~Published() {
            std::lock_guard g(lock);
            slot = nullptr;
        }
    };
    // Started by mpirun (a group of one for -np 1): this process's place in the run. The chief (process 0, or
    // the first worker after --ps-tasks' servers) keeps the folder, the metrics and the summary; the others train quietly, and a process that fails
    // ends them all (MPI_Abort) after saying why, so none is left waiting in a collective.
    std::unique_ptr<tb::ProcessGroup> processes;
    std::string program = "towerbench-run";
    try {
        processes = tb::joinProcessGroup();
    } catch (const tb::Error& e) {
        return failWith(program.c_str(), e.what());
    }
    if (processes) program += " (process " + std::to_string(processes->rank()) + " of " + std::to_string(processes->size()) + ")";
    auto fail = [&](const std::string& message) {
        const int code = failWith(program.c_str(), message);
        if (processes) processes->abort(code);
        return code;
    };
    try {
        config.validate();
        // Trains (or serves the variables) quietly beside the chief, which reports the run.
        if (processes && processes->rank() != tb::chiefProcess(config, processes->size())) {
            tb::RunConfig quiet = config;
            quiet.quiet = true;
            quiet.metrics.clear();
            tb::Trainer trainer(quiet);
            trainer.setProcessGroup(processes.get());
            const Published published(runningLock, running, &trainer);
            if (signals.received()) trainer.requestStop();
            trainer.run();
            return 0;
        }
        // --metrics is written only once the inputs are read and checked, and may not be one of them.
        if (!config.metrics.empty()) {
            std::vector<std::string> inputs{config.file, config.initFrom, tb::findModel(config.model).source};
            std::vector<std::string> folders{tb::dataFolderOf(config.data), storage.resumeDir, storage.runDir};
            tb::checkOutputFile(config.metrics, "--metrics", inputs, folders);
        }
        // Every run keeps a folder; a resumed one continues its own.
        std::unique_ptr<tb::RunFolder> folder = storage.resumeDir.empty() ? tb::RunFolder::create(config, storage.runDir)
                                                                          : tb::RunFolder::reopen(storage.resumeDir);
        if (!config.metrics.empty()) tb::checkOutputFile(config.metrics, "--metrics", {}, {folder->path()});
        tb::Trainer trainer(config);
        trainer.setRunFolder(folder.get());
        trainer.setProcessGroup(processes.get());
        ProgressBar progress(stderr, folder->path());
        std::unique_ptr<tb::MetricsFile> metrics;
        ElasticNotice elastic;
        trainer.addObserver(config.quiet ? static_cast<tb::TrainingObserver*>(&elastic) : &progress);
        if (!config.metrics.empty()) {
            metrics = std::make_unique<tb::MetricsFile>(config.metrics, false, "--metrics", tb::MetricsFile::Open::WhenRunning);
            trainer.addObserver(metrics.get());
        }
        const Published published(runningLock, running, &trainer);
        if (signals.received()) trainer.requestStop();  // a signal before the trainer existed
        const tb::RunSummary summary = trainer.run();
        nlohmann::json out = summary.toJson();
        out["run_dir"] = folder->path();
        std::cout << out.dump() << std::endl;
        if (!std::cout)  // a full disk or a closed pipe: the caller must not take the run as reported
            return failWith("towerbench-run", "standard output: cannot write the summary line (it is in " +
                                                  folder->path() + "/summary.json)");
        if (const int sig = signals.received()) {
            std::fprintf(stderr, "towerbench-run: stopped by %s at step %lld; summary and checkpoint in %s\n",
                         StopSignals::name(sig), static_cast<long long>(summary.steps), folder->path().c_str());
            return signals.exitStatus();
        }
        return 0;
    } catch (const tb::Error& e) {
        return fail(config.explain(e.what()));
    } catch (const std::bad_alloc&) {
        return fail("out of memory");
    } catch (const std::exception& e) {
        if (!processes) throw;  // main() says it as before
        return fail(std::string("internal error: ") + e.what());
    }
}
