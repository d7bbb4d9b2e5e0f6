// This machine and the time, as run folders, checkpoints and event files write them.
#pragma once
#include <unistd.h>

#include <ctime>
#include <string>

namespace tb {

// The current UTC time through strftime: "%Y-%m-%dT%H:%M:%SZ" (ISO 8601), "%Y%m%d-%H%M%S", ...
inline std::string utcText(const char* format = "%Y-%m-%dT%H:%M:%SZ") {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[64];
    return std::strftime(buf, sizeof buf, format, &tm) ? std::string(buf) : std::string();
}

inline std::string hostName() {
    char buf[256] = {};
    return ::gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string();
}

}  // namespace tb
