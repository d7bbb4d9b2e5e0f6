// DecisionGridProbe: evaluates the model being trained on a grid over the input plane of a 2-D
// dataset (the synthetic blobs and spirals), so the window can draw its decision boundary as it
// forms. It owns a CPU replica of the model with one row per grid cell, into which it copies the
// current variables; the towers are not touched. Made only for 2-D data and only when an
// observer asks for grids; costs one forward pass of cells x cells points per frame.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "data/dataset.hpp"
#include "engine/observer.hpp"
#include "nn/model_spec.hpp"
#include "nn/network.hpp"
#include "parallel/training_engine.hpp"

namespace tb {

class DecisionGridProbe {
public:
    static constexpr int kMaxPoints = 600;  // training points drawn over the grid
    static constexpr int kMaxCells = 256;   // per side; more is asked in vain

    // The probe a run needs: none unless `train` holds 2-D points and some observer asks.
    // Frames are spread over `totalSteps`.
    static std::unique_ptr<DecisionGridProbe> make(const std::vector<TrainingObserver*>& observers,
                                                   const ModelSpec& spec, const Dataset& train, int64_t totalSteps,
                                                   bool averaging);
    DecisionGridProbe(const ModelSpec& spec, const Dataset& train, int64_t every, int cells, bool averaging,
                      int64_t totalSteps, double maxGapSeconds = 0);
    ~DecisionGridProbe();
    DecisionGridProbe(const DecisionGridProbe&) = delete;
    DecisionGridProbe& operator=(const DecisionGridProbe&) = delete;

    // After step m's report: a grid to `out` when one is due (by steps, or by time where a
    // maximum gap was asked) and the variables are known to be
    // those of m (averaging: the replicas agree only where they were just averaged, and at the
    // run's end; async: the pusher's own pulled copy, read on its own thread).
    void after(const StepMetrics& m, TrainingEngine& towers, TrainingObserver& out);
    // The grid for the variables in `v` (P floats on v.backend), labelled with step and version.
    DecisionGrid sample(const VariablesView& v, int64_t step, int64_t version);

private:
    std::shared_ptr<Backend> cpu_;  // declared first: the network and tensors below belong to it
    std::unique_ptr<Network> net_;  // batch = cells x cells
    Stream stream_ = nullptr;
    Tensor stats_;                  // (3) loss statistics the forward pass insists on
    std::vector<float> host_;       // (P) the variables, staged through the host
    int64_t every_ = 1, next_ = 1;  // frame spacing in steps; the next step due (step 1 first)
    int64_t total_ = 0;
    double maxGap_ = 0;             // > 0: a frame at least this often (seconds, the run's clock)
    double lastFrameAt_ = 0;        // the run's clock at the last frame
    bool averaging_ = false;
    DecisionGrid frame_;            // geometry and points, filled once; predictions per sample
};

}  // namespace tb
