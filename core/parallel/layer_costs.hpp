// What each layer of a model costs on a device: the seconds of its forward and backward at a
// batch, measured by running it alone as a stage of one layer (Network over LayerRange{l, l}).
// The stage balancer (balanceStages) splits a model by these; FLOPs would miss the layers that
// move memory without multiplying (pooling, LRN, ReLU), which on a CPU take a real share.
#pragma once
#include <functional>
#include <vector>

#include "backend/backend.hpp"
#include "nn/model_spec.hpp"
#include "nn/network.hpp"

namespace tb {

// Per layer, the median over `repeats` (after one warm-up) of its forward + backward seconds at
// `batch`, on `backend` (one thread team: what a stage gets). In a graph, the layers between two
// cuts (a residual block) are measured together, their seconds given to the first of them and 0
// to the others (a stage can only start at a cut: stage_plan.hpp's atCuts).
std::vector<double> measureLayerSeconds(const ModelSpec& spec, Backend& backend, int batch, int repeats = 5);

// A stage's part of one step, alone: layers `range` as one network on `backend`, forward over
// `microBatches` micro-batches of `microBatch`, then backward over them with every gradient but
// the first added to the step's (as StagePipeline does); the median of `repeats` after a warm-up.
// Unlike the layers one by one, the stage's whole working set (weights, gradients, activations)
// passes through the caches as in a run.
// `beforeEach`, where given, runs before each step (the warm-up's too): stages measured at once
// on threads of their own meet there, so that every measured step has them all running.
double measureStageStepSeconds(const ModelSpec& spec, Backend& backend, LayerRange range, int microBatch,
                               int microBatches, int repeats = 3, const std::function<void()>& beforeEach = {});

}  // namespace tb
