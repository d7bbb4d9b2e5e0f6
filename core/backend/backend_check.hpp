// The cross-backend op check (ggml's test-backend-ops, DESIGN.md example 3): every Backend op
// over a table of shapes, odd ones included, run on a backend and compared with a plain
// double-precision reference computed here on the host, by normalised error
// ||out - ref|| / ||ref|| against a tolerance stated per op. Outputs are poisoned with NaN
// before each op, so an output the backend forgets to write fails.
// Used by the test suite (tests/gpu/tst_backend_ops) and by `towerbench-run selftest`.
#pragma once
#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace tb {

struct OpCheck {
    std::string op;          // "conv.forward"
    std::string shape;       // "n2 c3 7x9 k4 3x3 s1 pad 1/1/1/1"
    double error = 0;        // normalised error of the worst output of the op
    double tolerance = 0;
    bool passed = false;
    std::string failure;     // an exception's message, when the op threw
};

// Runs the whole table on `backend`. FP32 math expected, except in convolutions and inner
// products, whose tolerance is `matmulTolerance` (bf16 inputs round each to 8 bits of mantissa,
// a relative 2^-9: errors of a few 1e-3 over these sums).
constexpr double kFp32MatmulTolerance = 1e-5, kBf16MatmulTolerance = 1e-2;
std::vector<OpCheck> checkBackendOps(Backend& backend, double matmulTolerance = kFp32MatmulTolerance);

}  // namespace tb
