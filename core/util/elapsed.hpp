// Seconds between steady-clock instants: how the engine and the strategies time a step's phases.
#pragma once
#include <chrono>

namespace tb {

inline double secondsBetween(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

inline double secondsSince(std::chrono::steady_clock::time_point t) {
    return secondsBetween(t, std::chrono::steady_clock::now());
}

}  // namespace tb
