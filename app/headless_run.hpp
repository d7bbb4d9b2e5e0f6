// The headless run shared by towerbench-run and by the window when there is no display:
// progress on stderr, optional metrics file, the JSON summary as the last line of stdout.
#pragma once
#include <string>

#include "io/run_config.hpp"

// Where the run is kept: a new folder (`runDir`, or a fresh one under the runs folder), or the
// folder of a run to continue (`resumeDir`).
struct RunStorage {
    std::string runDir, resumeDir;
};

// Trains; returns the exit status (0, or 2 after printing one line for bad input).
int runHeadless(const tb::RunConfig& config, const RunStorage& storage = {});
// Prints "program: message" on stderr and returns 2.
int failWith(const char* program, const std::string& message);
