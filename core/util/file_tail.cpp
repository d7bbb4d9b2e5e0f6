#include "util/file_tail.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace tb {

bool lastLineTaken(std::istream& in, const std::function<bool(std::string_view)>& take, int64_t limit,
                   int64_t firstWindow) {
    in.seekg(0, std::ios::end);
    const std::streamoff size = in.tellg();
    if (!in || size <= 0 || limit <= 0 || firstWindow <= 0) return false;
    const std::streamoff reach = std::min<std::streamoff>(size, limit);
    // `done`: the bytes at the file's end whose lines were offered by a smaller window.
    std::streamoff done = 0;
    for (std::streamoff window = std::min<std::streamoff>(firstWindow, reach);; window = std::min(reach, window * 4)) {
        const std::streamoff from = size - window;
        std::string tail(size_t(window - done), '\0');
        in.clear();
        in.seekg(from);
        if (!in.read(tail.data(), std::streamsize(tail.size()))) return false;
        // The lines that end in this read, from the first break (unless it starts the file) to
        // the last: the bytes after it are a half-written line, or the start of one offered before.
        const size_t first = from == 0 ? 0 : tail.find('\n');
        const size_t last = done == 0 ? tail.rfind('\n') : tail.size() - 1;
        if (first != std::string::npos && last != std::string::npos && last >= first) {
            std::vector<std::string_view> lines;
            for (size_t begin = from == 0 ? 0 : first + 1; begin <= last;) {
                const size_t end = tail.find('\n', begin);
                lines.emplace_back(tail.data() + begin, end - begin);
                begin = end + 1;
            }
            for (auto it = lines.rbegin(); it != lines.rend(); ++it)
                if (take(*it)) return true;
        }
        if (window == reach) return false;
        // The next window reads back to where this one began, plus the part of the line it cut.
        done = first == std::string::npos ? done : window - std::streamoff(first) - 1;
    }
}

}  // namespace tb
