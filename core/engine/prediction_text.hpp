// The words the predictors' sentences put numbers in (step_time_model, pipeline_time_model).
#pragma once
#include <cmath>
#include <cstdio>
#include <string>

namespace tb::text {

inline std::string percent(double x) { return std::to_string(int(std::lround(100 * x))) + "%"; }

inline std::string megabytes(double bytes) {
    char t[32];
    if (bytes < 1e5) std::snprintf(t, sizeof t, "%.1f KB", bytes / 1e3);
    else std::snprintf(t, sizeof t, bytes >= 10e6 ? "%.0f MB" : "%.1f MB", bytes / 1e6);
    return t;
}

inline std::string ms(double seconds) {
    char t[32];
    if (seconds < 1e-3) std::snprintf(t, sizeof t, "%.0f us", 1e6 * seconds);
    else std::snprintf(t, sizeof t, seconds >= 0.01 ? "%.0f ms" : "%.1f ms", 1e3 * seconds);
    return t;
}

}  // namespace tb::text
