// The JSON files a user hands the program (run configs, model files): read with a size cap and
// parsed with errors in the program's own words, naming the file and where in it.
#pragma once
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace tb {

// The whole of `path`, a regular file of at most maxBytes (a device such as /dev/zero, or a
// huge file, is refused before anything is read). `what` names it in errors ("run config").
std::string readTextFile(const std::string& path, size_t maxBytes, const char* what);

// `text` as JSON; `origin` (a path) names it in the one-line error: "malformed JSON at line 3,
// column 14", "a number too large for JSON at line 1, column 9".
nlohmann::json parseJsonText(const std::string& text, const std::string& origin);

}  // namespace tb
