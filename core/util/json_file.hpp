// The JSON files a user hands the program (run configs, model files): read with a size cap and
// parsed with errors in the program's own words, naming the file and where in it.
#pragma once
#include <cstddef>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tb {

// The whole of `path`, a regular file of at most maxBytes (a device such as /dev/zero, or a
// huge file, is refused before anything is read). `what` names it in errors ("run config").
std::string readTextFile(const std::string& path, size_t maxBytes, const char* what);

// `text` as JSON; `origin` (a path) names it in the one-line error: "malformed JSON at line 3,
// column 14", "a number too large for JSON at line 1, column 9", "nested deeper than 64 levels".
nlohmann::json parseJsonText(const std::string& text, const std::string& origin);

// Nesting deeper than this is refused by every parse here: printing or comparing a value
// recurses once per level, and 100,000 levels of [[[...]]] (200 KB) overflow the stack.
inline constexpr int kMaxJsonDepth = 64;

// `text` as JSON, or a discarded value (is_discarded()) where it is malformed or too deep: for
// text the program wrote itself and reads back (run folders, checkpoint metadata, metrics
// lines), where a damaged file is skipped or refused by the caller.
nlohmann::json parseJsonOrDiscard(std::string_view text);

// At most `maxChars` of a value as JSON text, for an error message ("...": a 1 MB string in a
// config must not become a 1 MB error line).
std::string shortJson(const nlohmann::json& value, size_t maxChars = 60);

}  // namespace tb
