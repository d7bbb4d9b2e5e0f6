// The last whole line of a file that a caller takes, read from the end: a metrics.jsonl grows by a
// line a step (hundreds of MB over a long run), and what the runs index and the model view want
// (the last step, the last profiled step's layer times) is near its end.
#pragma once
#include <cstdint>
#include <functional>
#include <istream>
#include <string_view>

namespace tb {

// Offers `take` the whole lines of `in` from the last back, until it returns true (then true).
// Whole lines only: each ends in '\n' (the line still being written has none yet), and the first
// line of a window begins at the file's start or after a '\n'. Reads the last 64 KiB, then a
// window 4 times larger, until the file or `limit` bytes of it were read; false where no line was
// taken or `in` cannot be read.
bool lastLineTaken(std::istream& in, const std::function<bool(std::string_view line)>& take,
                   int64_t limit = INT64_MAX, int64_t firstWindow = 64 * 1024);

}  // namespace tb
