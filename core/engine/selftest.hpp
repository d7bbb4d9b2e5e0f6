// Checks a machine's backends end to end: the devices found, the cross-backend op check on every
// backend, and towers on two plans trained side by side from the same weights on the same
// batches, whose per-step losses must agree (e.g. a GPU tower against a CPU tower). Used by
// `towerbench-run selftest` and by the GPU test suite.
#pragma once
#include <cstdint>
#include <ostream>
#include <vector>

#include "backend/backend.hpp"
#include "nn/model_spec.hpp"
#include "parallel/deployment_plan.hpp"

namespace tb {

struct LossComparison {
    std::vector<double> reference, candidate;  // mean loss per step (weight decay included)
    double worstRelative = 0;                  // max over steps of |candidate - ref| / |ref|
    std::vector<float> referenceParams, candidateParams;  // the variables after the last step
    double paramsRelative = 0;                 // ||candidate - reference|| / ||reference|| of those
    // The same for each variable on its own, and the worst of them: a bound on the whole vector
    // hides a wrong small tensor (a bias is a few hundred of the model's parameters).
    double worstTensorRelative = 0;
    std::string worstTensor;                   // "fc1/biases"
};

// Two fp32 runs of one model on the same batches (a GPU tower against a CPU tower, say) keep every
// variable within this relative distance of the other's after 20 steps (LossComparison's
// worstTensorRelative). The H100 and H200 runs measured whole-vector differences of about 5e-8,
// and in some runs 2.55e-5 for one pair or another (two towers against one, averaging, NCCL, the
// host's update: a sum in another order tipping a ReLU or a pooling's maximum), of which one
// small tensor may hold many times the whole vector's share; inner products' bias gradients 0.5%
// off put one tensor 4.4e-3 away (tst_tower_transfers), which this still refuses.
constexpr double kParamsPerTensorLimit = 1e-3;

// A small convolutional network with every layer type the models use (conv, ReLU, max-pool with
// SAME padding, LRN, dense, weight decay), on 3x12x12 inputs, so the check runs in a second.
ModelSpec selfTestModel();

// Trains selfTestModel() for `steps` steps under each plan (batch per tower from the plan) on
// the same random batches and returns both loss curves. Plans must have equal global batches.
// The reference runs in fp32; the candidate's matrix work in `candidatePrecision`.
LossComparison compareTowerLosses(const DeploymentPlan& reference, const DeploymentPlan& candidate, int steps,
                                  UpdateRule rule = UpdateRule::Momentum, uint64_t seed = 5,
                                  MatmulPrecision candidatePrecision = MatmulPrecision::Fp32);

// The whole self test, printed to `out`; returns the process exit status (0: every check that
// could run passed; without a GPU only the CPU part runs, which is not a failure).
int runSelfTest(std::ostream& out);

}  // namespace tb
