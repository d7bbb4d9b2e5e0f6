// CheckpointPolicy: when a run keeps a checkpoint (every N steps or M minutes, a new best validation
// accuracy, and at the end) and what it records. Training waits for the snapshot only; the folder
// writes the file on its own thread while training goes on.
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

#include "engine/checkpoint.hpp"
#include "engine/observer_hub.hpp"
#include "engine/run_setup.hpp"
#include "parallel/training_engine.hpp"

namespace tb {

class RunFolder;
class WeightEma;

class CheckpointPolicy {
public:
    using Clock = std::chrono::steady_clock;
    // `folder` null: no checkpoints. From `step` at `start`, with the best validation accuracy a
    // resumed run had reached (-1: none).
    CheckpointPolicy(RunFolder* folder, const RunPlan& run, int64_t examplesPerStep, TrainingEngine& towers,
                     const Network& layout, WeightEma* ema, Stream emaStream, ObserverHub& hub, int64_t step,
                     Clock::time_point start, double bestValidation, std::vector<std::string> classNames,
                     ChannelStatistics channels);
    bool due(int64_t step) const;
    void save(int64_t step, bool best = false);
    // A validation pass's accuracy: whether it beats every earlier one (a best checkpoint is due).
    bool validated(double accuracy);
    // The last validation accuracy only (asynchronous runs keep no best checkpoint while training).
    void noteValidation(double accuracy) { lastValidation_ = accuracy; }
    // The run's last checkpoint, after its final evaluation (validationAccuracy < 0: none).
    void saveFinal(int64_t step, bool evaluated, double validationAccuracy);
    // Runs whose state differs by process (TrainingEngine::stateDiffersByProcess): the buffers of
    // every process's state() that differ by process (StateBuffer::perProcess) to the chief, which
    // keeps the others' for its next save (state/process<k>/...). A
    // collective: every process calls it at the same point between steps. Elsewhere nothing.
    void gatherPeers();
    int count() const { return count_; }
    double seconds() const { return seconds_; }  // training held for checkpoints so far

private:
    RunFolder* folder_;
    const RunPlan& run_;
    int64_t examplesPerStep_;
    TrainingEngine& towers_;
    VariableLayout layout_;
    WeightEma* ema_;
    Stream emaStream_;
    ObserverHub& hub_;
    int64_t lastStep_;
    Clock::time_point lastAt_;
    double bestValidation_, lastValidation_;
    std::vector<std::string> classNames_;  // the data's, kept in every checkpoint
    ChannelStatistics channels_;           // --normalise mean-std's, likewise
    std::vector<TrainingSnapshot::Buffer> peers_;  // the chief: the other processes' state, last gathered
    int count_ = 0;
    double seconds_ = 0;
};

}  // namespace tb
