// Trainer: runs one training run on one device, start to finish: data, network, optimiser,
// evaluation, metrics to observers. The tower engine generalises its step to many replicas.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/observer.hpp"
#include "io/run_config.hpp"

namespace tb {

struct RunSummary {
    int64_t steps = 0;
    double epochs = 0;
    double examplesPerSec = 0;     // training examples / training wall time (evaluation excluded)
    double steadyExamplesPerSec = 0;  // the same without the first step (oneDNN's kernel generation)
    double trainSeconds = 0;
    double finalLoss = 0;          // mean training loss over the last min(50, steps) steps
    double finalAccuracy = 0;      // mean training accuracy over the same steps
    double validationAccuracy = -1;  // -1: no validation split
    double testAccuracy = 0, testLoss = 0;
    int64_t params = 0;
    int64_t flopsPerExample = 0;   // training FLOPs per example (3x forward of conv and dense)
    std::string model, data, backend;
    bool stopped = false;          // ended early by requestStop()
    nlohmann::json toJson() const;
};

class Trainer {
public:
    explicit Trainer(RunConfig config);
    ~Trainer();
    void addObserver(TrainingObserver* o) { observers_.push_back(o); }
    // Runs to the end (or until requestStop); throws tb::Error on bad input.
    RunSummary run();
    // From any thread: the run ends after the step in progress.
    void requestStop() { stop_ = true; }

private:
    RunConfig config_;
    std::vector<TrainingObserver*> observers_;
    std::atomic<bool> stop_{false};
    double sumEvalSeconds_ = 0;  // evaluation time inside the training loop, not counted as training
};

}  // namespace tb
