// Synthetic teaching sets: Gaussian blobs and interleaved spirals of 2-D points.
// The generators use std::mt19937_64 with their own uniform and Box-Muller conversions, because
// std::normal_distribution (and friends) produce different numbers on different standard
// libraries; a seed must give the same set everywhere.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <string>

#include "data/dataset.hpp"
#include "util/error.hpp"

namespace tb {
namespace {

// Uniform in [0, 1) from the top 53 bits.
double uniform01(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }

// Two independent standard normals (Box-Muller); 1 - u keeps the log argument in (0, 1].
void gaussPair(std::mt19937_64& rng, double& a, double& b) {
    double u1 = 1.0 - uniform01(rng);
    double u2 = uniform01(rng);
    double r = std::sqrt(-2.0 * std::log(u1));
    double t = 2.0 * std::numbers::pi * u2;
    a = r * std::cos(t);
    b = r * std::sin(t);
}

Dataset pointSet(const char* what, size_t n, int classes) {
    if (classes < 2 || classes > 256)
        throw Error(std::string(what) + ": " + std::to_string(classes) + " classes requested (expected 2..256)");
    Dataset d;
    d.name = what;
    d.channels = 2;  // a point (x, y) as a (2, 1, 1) sample
    d.height = 1;
    d.width = 1;
    d.numClasses = classes;
    d.features.resize(2 * n);
    d.labels.resize(n);
    return d;
}

}  // namespace

Dataset makeBlobs(size_t n, int classes, uint64_t seed) {
    // Centres on a circle of radius 3, unit stddev: neighbours of 4 classes are 4.2 apart, so the
    // Bayes accuracy is about 96% and a linear model gets close to it.
    constexpr double kRadius = 3.0, kStddev = 1.0;
    Dataset d = pointSet("blobs", n, classes);
    std::mt19937_64 rng(seed);
    for (size_t i = 0; i < n; ++i) {
        int k = int(i % size_t(classes));  // balanced, interleaved classes
        double angle = 2.0 * std::numbers::pi * k / classes;
        double gx, gy;
        gaussPair(rng, gx, gy);
        d.features[2 * i] = float(kRadius * std::cos(angle) + kStddev * gx);
        d.features[2 * i + 1] = float(kRadius * std::sin(angle) + kStddev * gy);
        d.labels[i] = k;
    }
    return d;
}

Dataset makeSpirals(size_t n, int classes, uint64_t seed) {
    // The classic interleaved spirals (cs231n): class k sweeps 4 radians from angle 2*pi*k/K as
    // the radius grows from 0 to 1, with 0.2 rad of angular noise. Not linearly separable.
    constexpr double kTurn = 4.0, kNoise = 0.2;
    Dataset d = pointSet("spirals", n, classes);
    std::mt19937_64 rng(seed);
    for (size_t i = 0; i < n; ++i) {
        int k = int(i % size_t(classes));
        double r = uniform01(rng);
        double g, unused;
        gaussPair(rng, g, unused);
        double t = 2.0 * std::numbers::pi * k / classes + kTurn * r + kNoise * g;
        d.features[2 * i] = float(r * std::sin(t));
        d.features[2 * i + 1] = float(r * std::cos(t));
        d.labels[i] = k;
    }
    return d;
}

}  // namespace tb
