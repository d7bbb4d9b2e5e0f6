// Cancelling long work (reading a data set) from another thread: the work asks a CancelCheck at
// points where stopping is safe (between chunks of a file) and throws Cancelled when it says so.
// Cancelled is not an error and not a std::exception: only the code that asked to cancel catches it.
#pragma once
#include <functional>

namespace tb {

using CancelCheck = std::function<bool()>;  // true: stop now; empty: never
struct Cancelled {};

inline void throwIfCancelled(const CancelCheck& cancelled) {
    if (cancelled && cancelled()) throw Cancelled{};
}

}  // namespace tb
