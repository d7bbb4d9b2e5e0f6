// The CPU backend's batch normalisation (backend.hpp's BatchNormOp): OpenMP loops over the rows of
// (rows, c) activations, every channel's sums kept in double.
#pragma once
#include <memory>

#include "backend/backend.hpp"

namespace tb {

// `owner`: the backend the plan belongs to (held, so that the plan cannot outlive it).
std::unique_ptr<BatchNormOp> makeCpuBatchNorm(const BatchNormDesc& d, int threads, std::shared_ptr<Backend> owner);

}  // namespace tb
