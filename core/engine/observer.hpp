// What a training run reports, as plain values, and the callbacks that receive them
// (Caffe's Solver::Callback; the window's adapter turns these into queued Qt signals).
// Callbacks run on the training thread and must return quickly.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/device_monitor.hpp"
#include "parallel/training_engine.hpp"

namespace tb {

// One tower's share of a step.
struct TowerMetrics {
    double loss = 0, accuracy = 0;  // over its own slice (NaN in async reports of other towers)
    TowerPhases phases;             // seconds
    double busyFraction = 0;        // (forward + backward + straggle + reduce + apply) / step time
    double runBusyFraction = -1;    // the run so far, as its summary counts it; -1: unknown
    // Another process's tower as the first parameter server last relayed it (async workers):
    // its latest step, shown on this step's line but not this step's work, so not summed.
    bool relayed = false;
};

struct StepMetrics {
    int64_t step = 0;              // 1-based count of completed steps
    int64_t totalSteps = 0;
    double epoch = 0;              // examples seen / training-set size
    double loss = 0;               // mean cross-entropy of this step's batch plus weight decay
    double accuracy = 0;           // of this step's batch, before the update
    double lr = 0;
    double examplesPerSec = 0;     // this step's batch / its wall time
    // The run so far, as its summary counts it (RunStatistics): examples trained over training
    // time (elapsedSeconds). 0 where unknown (a metrics file of an older version).
    double runExamplesPerSec = 0;
    double stepSeconds = 0;
    double dataWaitSeconds = 0;    // time blocked on the input pipeline
    double computeSeconds = 0;     // forward + backward + update
    double elapsedSeconds = 0;     // training time so far: wall time less pauses, slow motion,
                                   // evaluations and checkpoints
    std::vector<TowerMetrics> towers;
    int64_t bytesMoved = 0;        // gradients / parameters moved to and from the synchronisation point
    int64_t processBytes = -1;     // processes (mpirun): bytes the chief sent to the others this step
                                   // (ProcessGroup's definition); -1: a run of one process
    int pusher = -1;               // async: the tower whose update this was
    int64_t staleness = -1;        // async: updates applied by other towers since it pulled
    int64_t examples = 0;          // examples this report trained on (async: the pusher's batch)
    bool averaged = false;         // averaging every K: the replicas were averaged after this step
    // Pipelines (the towers are stages): their idle share of the step until its last backward
    // (-1: not a pipeline), and each stage's forward and backward blocks.
    double bubbleFraction = -1;
    int stages = 0;  // the lanes are stages x replicas, replica by replica
    std::vector<std::vector<PipelineBlock>> stageBlocks;
    // Where tower 0's step went layer by layer (forward and backward seconds per layer of the
    // model), on the steps that profile it; null on the others.
    std::shared_ptr<const LayerTimes> layerTimes;
};

// Image datasets: what the model said of each example of an evaluated split, with the examples
// themselves for the window's grid of predictions.
struct Predictions {
    int channels = 0, height = 0, width = 0;            // one image (c, h, w), as stored
    std::shared_ptr<const std::vector<uint8_t>> images;  // (n, c, h, w), shared by the split's evaluations
    std::vector<std::string> classNames;                // (classes), or empty: the classes are numbers
    std::vector<int32_t> labels;                        // (n) the true class
    std::vector<int32_t> predicted;                     // (n) the arg-max class
    std::vector<float> confidence;                      // (n) its softmax probability
};

struct EvalResult {
    int64_t step = 0;
    std::string split;             // "validation" or "test"
    double loss = 0, accuracy = 0;
    int64_t examples = 0;
    bool averagedWeights = false;  // evaluated with the weights' moving average
    int classes = 0;
    std::vector<int64_t> confusion;  // (classes, classes): examples of true class r predicted as c
    std::shared_ptr<const Predictions> predictions;  // image datasets; null for the others
};

// The model's predicted class over the input plane of a 2-D dataset (synthetic:blobs, spirals),
// for the window's decision-boundary view. Made by DecisionGridProbe (decision_grid.hpp).
struct DecisionGrid {
    int64_t step = 0;              // the step (async: update) whose report it follows
    int64_t version = 0;           // updates applied to the variables it shows (async: those the
                                   // pusher had pulled; otherwise = step)
    int pusher = -1;               // async: the tower whose pulled variables these are
    int cols = 0, rows = 0;        // grid cells along x and y
    double xMin = 0, xMax = 0, yMin = 0, yMax = 0;  // centres of the first and last cells
    int classes = 0;
    std::vector<uint8_t> predicted;  // (rows, cols), row 0 at yMin: the arg-max class
    std::vector<float> confidence;   // (rows, cols): that class's softmax probability
    std::vector<float> points;       // (n, 2): training points to draw over the grid
    std::vector<int32_t> labels;     // (n)
};

// What an observer asks of decision grids: about `frames` per run (0: none), cells x cells each,
// and, where maxGapSeconds > 0, one at least that often on the run's clock besides, so a long
// run's view keeps moving (a million-step run's 120 frames would be minutes apart).
struct DecisionGridRequest {
    int frames = 0;
    int cells = 64;
    double maxGapSeconds = 0;
};

// Evaluating: the final evaluation after training (detail: the splits).
enum class RunState { Loading, Running, Evaluating, Finished, Stopped, Failed };
const char* toString(RunState s);

class TrainingObserver {
public:
    virtual ~TrainingObserver() = default;
    virtual void onStateChanged(RunState, const std::string& /*detail*/) {}
    virtual void onStepEnd(const StepMetrics&) {}
    virtual void onEval(const EvalResult&) {}
    // One batch from the device monitor (every GPU of the machine, about 5 per second) while a
    // run with GPU towers trains; droppable like step reports.
    virtual void onDeviceSamples(const std::vector<DeviceSample>&) {}
    // Decision grids: asked for once when a run starts (2-D data only), delivered like steps
    // (droppable when the queue is full).
    virtual DecisionGridRequest decisionGridRequest() const { return {}; }
    virtual void onDecisionGrid(const DecisionGrid&) {}
    // Files (the run folder, --metrics, TensorBoard events): every report must reach them. The hub
    // drops none for such an observer, and holds the engine back when it cannot keep up.
    virtual bool lossless() const { return false; }
};

}  // namespace tb
