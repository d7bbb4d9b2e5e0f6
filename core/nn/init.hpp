// Initialisers for parameters, drawn on the host and deterministic for a given seed on every
// platform (own Gaussian sampling; std::normal_distribution differs between standard libraries).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tb {

struct InitSpec {
    // HeNormal: N(0, 2 / fanIn), He et al. 2015 for ReLU networks (PyTorch's kaiming_normal_).
    enum class Kind { TruncatedNormal, Constant, Glorot, HeNormal } kind = Kind::Glorot;
    float stddev = 0.1f;   // truncated normal: resampled beyond 2 stddev, as tf.truncated_normal
    float value = 0.f;     // constant
};

// Fills `out` (fanIn, fanOut used by Glorot's uniform limit sqrt(6 / (fanIn + fanOut))).
void initialise(const InitSpec& spec, std::vector<float>& out, int64_t fanIn, int64_t fanOut, uint64_t seed);

// "truncated_normal", "constant", "glorot"; throws tb::Error naming `where` otherwise.
InitSpec::Kind parseInitKind(const std::string& name, const std::string& where);

}  // namespace tb
