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

// This machine's physical memory in bytes (0 where it cannot be read): what a reader that holds a
// whole set in memory compares the set with before it allocates.
inline double physicalMemoryBytes() {
    const long pages = ::sysconf(_SC_PHYS_PAGES), size = ::sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? double(pages) * double(size) : 0.0;
}

inline std::string hostName() {
    char buf[256] = {};
    return ::gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string();
}

}  // namespace tb
