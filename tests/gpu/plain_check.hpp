// Checks for the Qt-free test executables (they also run on GPU machines without Qt): CHECK
// prints file:line, the condition and a message, and counts the failure; the program's exit
// status is exitStatus(). A test that cannot run here returns kSkip, which CTest reports as
// skipped (SKIP_RETURN_CODE), after one line saying why.
#pragma once
#include <cstdio>

namespace tbcheck {

inline int failures = 0;
constexpr int kSkip = 77;

inline int exitStatus() {
    if (failures) std::fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}

inline int skip(const char* why) {
    std::printf("skipped: %s\n", why);
    return kSkip;
}

}  // namespace tbcheck

#define CHECK(cond, ...)                                                            \
    do {                                                                            \
        if (!(cond)) {                                                              \
            ++tbcheck::failures;                                                    \
            std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);     \
            std::fprintf(stderr, __VA_ARGS__);                                      \
            std::fputc('\n', stderr);                                               \
        }                                                                           \
    } while (0)
