// What each layer of a model costs on a device: the seconds of its forward and backward at a
// batch, measured by running it alone as a stage of one layer (Network over LayerRange{l, l}).
// The stage balancer (balanceStages) splits a model by these; FLOPs would miss the layers that
// move memory without multiplying (pooling, LRN, ReLU), which on a CPU take a real share.
#pragma once
#include <vector>

#include "backend/backend.hpp"
#include "nn/model_spec.hpp"

namespace tb {

// Per layer, the median over `repeats` (after one warm-up) of its forward + backward seconds at
// `batch`, on `backend` (one thread team: what a stage gets).
std::vector<double> measureLayerSeconds(const ModelSpec& spec, Backend& backend, int batch, int repeats = 5);

}  // namespace tb
