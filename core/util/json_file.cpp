#include "util/json_file.hpp"

#include <filesystem>
#include <fstream>
#include <system_error>
#include <nlohmann/json.hpp>

#include "util/error.hpp"

namespace tb {

namespace {
// "line L, column C" of a byte offset (1-based, as editors count).
std::string position(const std::string& text, size_t byte) {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < byte && i < text.size(); ++i) {
        if (text[i] == '\n') {
            ++line;
            column = 1;
        } else {
            ++column;
        }
    }
    return "line " + std::to_string(line) + ", column " + std::to_string(column);
}
}  // namespace

std::string readTextFile(const std::string& path, size_t maxBytes, const char* what) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (ec || !fs::exists(st)) throw Error(path + ": cannot open " + what + " file (not found)");
    if (!fs::is_regular_file(st)) throw Error(path + ": not a regular file, so not a " + what + " file");
    const uintmax_t size = fs::file_size(path, ec);
    if (ec) throw Error(path + ": cannot read the size of the " + what + " file");
    if (size > maxBytes)
        throw Error(path + ": " + std::to_string(size) + " bytes, more than the " + std::to_string(maxBytes >> 10) +
                    " KiB a " + what + " file may have");
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error(path + ": cannot open " + what + " file");
    std::string text(size_t(size), '\0');
    f.read(text.data(), std::streamsize(size));
    if (f.gcount() != std::streamsize(size)) throw Error(path + ": read error in the " + what + " file");
    return text;
}

namespace {
struct TooDeep {};
// Parses with a callback that stops at kMaxJsonDepth; the value under construction is never
// deeper than that, so unwinding it is safe.
nlohmann::json parseLimited(std::string_view text, bool exceptions) {
    const nlohmann::json::parser_callback_t limit = [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
        if (depth > kMaxJsonDepth) throw TooDeep{};
        return true;
    };
    return nlohmann::json::parse(text, limit, exceptions);
}
}  // namespace

nlohmann::json parseJsonOrDiscard(std::string_view text) {
    try {
        return parseLimited(text, false);
    } catch (const TooDeep&) {
    } catch (const nlohmann::json::exception&) {
    }
    return nlohmann::json(nlohmann::json::value_t::discarded);
}

std::string shortJson(const nlohmann::json& value, size_t maxChars) {
    std::string s = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (s.size() > maxChars) s = s.substr(0, maxChars) + "...";
    return s;
}

nlohmann::json parseJsonText(const std::string& text, const std::string& origin) {
    try {
        return parseLimited(text, true);
    } catch (const TooDeep&) {
        throw Error(origin + ": malformed JSON: nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    } catch (const nlohmann::json::parse_error& e) {
        // e.byte: 1-based position of the character that stopped the parser.
        const size_t at = e.byte > 0 ? size_t(e.byte) - 1 : 0;
        if (at >= text.size()) throw Error(origin + ": malformed JSON: the text ends early");
        throw Error(origin + ": malformed JSON at " + position(text, at));
    } catch (const nlohmann::json::out_of_range&) {
        throw Error(origin + ": malformed JSON: a number too large");
    } catch (const nlohmann::json::exception&) {
        throw Error(origin + ": malformed JSON");
    }
}

}  // namespace tb
