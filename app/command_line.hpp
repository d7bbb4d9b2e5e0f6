// towerbench-run's command line: which command, and the RunConfig its flags describe.
// Parsing reads the files the flags name (--config, --resume's folder) but writes nothing, so
// every bad argument is refused before any output exists (and the fuzz target can drive it).
#pragma once
#include <string>
#include <vector>

#include "headless_run.hpp"
#include "io/run_config.hpp"

struct CommandLine {
    enum class Command { Train, Help, SelfTest, Runs, Convert, Eval };
    Command command = Command::Train;
    tb::RunConfig config;   // Train, Eval: file, then flags over it
    RunStorage storage;     // Train: --run-dir / --resume
    // runs [--filter TEXT] [--sort COLUMN] [--ascending] [--json]
    std::string filter, sort = "created";
    bool ascending = false, json = false;
    std::string convertSpec, convertTarget;  // convert SPEC tfrecord:DIR
    std::string evalTarget;                  // eval RUN_DIR|CHECKPOINT
    bool dataGiven = false;                  // eval: --data given (else the run's own data)
};

// Throws tb::Error with one line naming the argument and what is wrong with it. Train's
// settings are validated (RunConfig::validate) before it returns.
CommandLine parseCommandLine(const std::vector<std::string>& args);
