// StagePlan: a model's layers split into S consecutive stages, each on a device (model
// parallelism, issue 32: the lecture's "different devices run different subgraphs"). What
// --stages says, checked against the model's layers before anything is built:
//   N                     N stages on cpu:0 .. cpu:N-1, the split balanced by measured cost
//   DEV,DEV,...           one stage per device, balanced
//   DEV*K                 K stages sharing DEV (each its own stream or thread team), balanced
//   DEV=FROM..TO,...      explicit: each stage's first and last layer, by name or 0-based index
//                         (a stage of one layer: DEV=NAME)
// Layer names are the model JSON's, or the generated type + index ("relu1") where it gives none.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "nn/model_spec.hpp"
#include "tensor/tensor.hpp"

namespace tb {

struct Stage {
    Device device;
    int first = -1, last = -1;  // layers, inclusive; -1 while the split is the balancer's
};

struct StagePlan {
    std::vector<Stage> stages;
    bool balanced = false;  // the split is chosen by balanceStages (automatic forms)
    int count() const { return int(stages.size()); }
    std::vector<Device> devices() const;  // each stage's
    // How many stages share stage i's device (the explicit sharing form DEV*K).
    int sharing(int i) const;
    // "cpu:0=conv1..pool2,cpu:1=fc1..logits" (the form --stages takes back); a balanced plan
    // before its split is chosen: "cpu:0,cpu:1" / "gpu:0*2".
    std::string describe(const std::vector<std::string>& layerNames) const;
};

// Throws tb::Error, one sentence naming --stages and what is wrong: a layer missed or in two
// stages, an empty stage, a name that is no layer (with the nearest one), a reference to part
// of a layer, the same device given to two stages outside the DEV*K form, more stages than
// layers.
StagePlan parseStagePlan(const std::string& text, const std::vector<std::string>& layerNames);

// The split of layers with costs `cost` (seconds per step, measured) into `count` consecutive
// non-empty stages that minimises the slowest stage's cost (the slowest stage bounds the
// pipeline); ties go to the split that puts more layers early. Returns each stage's
// [first, last]. Throws tb::Error when there are fewer layers than stages.
std::vector<std::pair<int, int>> balanceStages(const std::vector<double>& cost, int count);

// The same among the splits whose every stage fits: fits(stage, first, last) says whether stage
// `stage` holding layers [first, last] fits its device's memory. Empty when no split fits.
using StageFits = std::function<bool(int stage, int first, int last)>;
std::vector<std::pair<int, int>> balanceStages(const std::vector<double>& cost, int count, const StageFits& fits);

// `fits` (all, where empty) among the splits whose every stage starts at a cut of the model's
// graph (nn/network.hpp's cutProblem: one tensor crosses), so a ResNet is cut between blocks.
StageFits atCuts(const ModelSpec& spec, StageFits fits = {});
// Why `stages` (explicit ranges) cannot run: a stage that starts inside a block; "" where all can.
std::string stageCutProblem(const ModelSpec& spec, const StagePlan& stages);

}  // namespace tb
