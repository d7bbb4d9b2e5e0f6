// One optimiser update as the CUDA backend's kernels take it: a single argument, so that an update
// recorded in a CUDA Graph is given the next step's values with one cudaGraphExecKernelNodeSetParams
// (cuda_backend.cu) and the step's recording can hold its own update.
#pragma once
#include <cstddef>

#include "backend/backend.hpp"
#include "backend/elementwise_math.hpp"

namespace tb::cuda {

// (n) floats each: p the parameters, g their gradient, m the momentum or Adam's first moment (null
// for SGD), v Adam's second moment (null otherwise).
struct UpdateArgs {
    float* p = nullptr;
    const float* g = nullptr;
    float* m = nullptr;
    float* v = nullptr;
    size_t n = 0;
    // What changes from step to step: the learning rate; for Adam lr sqrt(1 - b2^t) / (1 - b1^t),
    // made once per step here so that the kernel does no pow (ew::adamStepSize).
    float rate = 0;
    float mu = 0, b1 = 0, b2 = 0, eps = 0;
};

// a with h's values for `rule` (its buffers and count kept).
inline UpdateArgs withParams(UpdateArgs a, UpdateRule rule, const UpdateParams& h) {
    a.rate = rule == UpdateRule::Adam ? ew::adamStepSize(h.lr, h.beta1, h.beta2, h.step) : h.lr;
    a.mu = h.momentum, a.b1 = h.beta1, a.b2 = h.beta2, a.eps = h.epsilon;
    return a;
}

inline bool sameValues(const UpdateArgs& a, const UpdateArgs& b) {
    return a.rate == b.rate && a.mu == b.mu && a.b1 == b.b1 && a.b2 == b.b2 && a.eps == b.eps;
}

}  // namespace tb::cuda
