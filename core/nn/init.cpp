#include "nn/init.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

#include "util/error.hpp"

namespace tb {

namespace {
// Uniform in (0, 1) from the top 53 bits: never 0, so log() below is finite.
double uniform01(std::mt19937_64& rng) { return (double(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

double standardNormal(std::mt19937_64& rng) {  // Box-Muller; one of the pair is enough here
    return std::sqrt(-2.0 * std::log(uniform01(rng))) * std::cos(2.0 * std::numbers::pi * uniform01(rng));
}
}  // namespace

void initialise(const InitSpec& spec, std::vector<float>& out, int64_t fanIn, int64_t fanOut, uint64_t seed) {
    std::mt19937_64 rng(seed);
    switch (spec.kind) {
    case InitSpec::Kind::Constant:
        for (float& x : out) x = spec.value;
        break;
    case InitSpec::Kind::TruncatedNormal:
        for (float& x : out) {
            double z;
            do z = standardNormal(rng);
            while (std::abs(z) > 2.0);
            x = float(z * spec.stddev);
        }
        break;
    case InitSpec::Kind::HeNormal: {
        const double stddev = std::sqrt(2.0 / double(std::max<int64_t>(fanIn, 1)));
        for (float& x : out) x = float(standardNormal(rng) * stddev);
        break;
    }
    case InitSpec::Kind::Glorot: {
        const double limit = std::sqrt(6.0 / double(fanIn + fanOut));
        for (float& x : out) x = float((2.0 * uniform01(rng) - 1.0) * limit);
        break;
    }
    }
}

InitSpec::Kind parseInitKind(const std::string& name, const std::string& where) {
    if (name == "truncated_normal") return InitSpec::Kind::TruncatedNormal;
    if (name == "constant") return InitSpec::Kind::Constant;
    if (name == "glorot" || name == "glorot_uniform") return InitSpec::Kind::Glorot;
    if (name == "he_normal") return InitSpec::Kind::HeNormal;
    throw Error(where + ": unknown initialiser '" + name + "' (expected truncated_normal, constant, glorot or he_normal)");
}

}  // namespace tb
