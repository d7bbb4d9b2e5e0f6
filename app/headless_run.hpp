// The headless run shared by towerbench-run and by the window when there is no display:
// progress on stderr, optional metrics file, the JSON summary as the last line of stdout.
#pragma once
#include <string>

#include "io/run_config.hpp"

// Trains; returns the exit status (0, or 2 after printing one line for bad input).
int runHeadless(const tb::RunConfig& config);
// Prints "program: message" on stderr and returns 2.
int failWith(const char* program, const std::string& message);
