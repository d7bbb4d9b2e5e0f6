// towerbench-run's command line: which command, and the RunConfig its flags describe.
// Parsing reads the files the flags name (--config, --resume's folder) but writes nothing, so
// every bad argument is refused before any output exists (and the fuzz target can drive it).
#pragma once
#include <string>
#include <vector>

#include "engine/scaling_sweep.hpp"
#include "engine/step_time_model.hpp"
#include "headless_run.hpp"
#include "io/run_config.hpp"

struct CommandLine {
    enum class Command { Train, Help, SelfTest, Runs, Convert, Eval, Scale, Predict, Models, Classify, Export };
    Command command = Command::Train;
    tb::RunConfig config;   // Train, Eval: file, then flags over it
    RunStorage storage;     // Train: --run-dir / --resume
    // runs [--filter TEXT] [--sort COLUMN] [--ascending] [--json]
    std::string filter, sort = "created";
    bool ascending = false, json = false;
    std::string convertSpec, convertTarget;  // convert SPEC tfrecord:DIR|folder:DIR (the target whole)
    int jpegQuality = 0;                     // convert ... folder:DIR --jpeg-quality Q; 0: PNG
    int shards = 1, repeat = 1;              // convert ... tfrecord:DIR --shards N --repeat R
    std::string evalTarget;                  // eval RUN_DIR|CHECKPOINT, classify RUN_DIR|CHECKPOINT
    std::vector<std::string> images;         // classify: the image files
    int top = 5;                             // classify --top K
    std::string onnxFile;                    // export RUN_DIR|CHECKPOINT --onnx FILE
    bool dataGiven = false;                  // eval: --data given (else the run's own data)
    tb::SweepSettings sweep;                 // scale: --sweep-towers, --sweep-strategies, ...
    // predict SWEEP_DIR: calibrated from point --from (1-based), the scenarios of --towers x
    // --strategies with the other flags; sweep's own settings where a flag is not given.
    std::string predictFrom;
    int calibrationPoint = 1;
    std::vector<int> predictTowers;
    std::vector<std::string> predictStrategies;
    tb::Scenario scenario;                   // towers and strategy set per prediction
    bool threadsGiven = false, coresGiven = false, batchGiven = false;
    std::vector<std::pair<int, double>> slow;  // --slow T=F,...: tower T is F times slower where it exists
    tb::Assumptions assumptions;
    bool serialShareGiven = false;  // else a CPU sweep's own fit (tb::fitSerialShare), where it has one
};

// Throws tb::Error with one line naming the argument and what is wrong with it. Train's
// settings are validated (RunConfig::validate) before it returns.
CommandLine parseCommandLine(const std::vector<std::string>& args);
