// Suggestions for a mistyped name: the known name closest to it by edit distance, for error
// lines such as "unknown field 'fitlers' (did you mean 'filters'?)".
#pragma once
#include <algorithm>
#include <string>
#include <vector>

namespace tb {

// " (did you mean 'x'?)" for the choice within a third of the word's length (at least 2) of
// edits, the closest first; empty where none is that close.
inline std::string didYouMean(const std::string& word, const std::vector<std::string>& choices) {
    auto distance = [](const std::string& a, const std::string& b) {
        std::vector<size_t> row(b.size() + 1);
        for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
        for (size_t i = 1; i <= a.size(); ++i) {
            size_t diagonal = row[0];
            row[0] = i;
            for (size_t j = 1; j <= b.size(); ++j) {
                const size_t up = row[j];
                row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
                diagonal = up;
            }
        }
        return row[b.size()];
    };
    const size_t limit = std::max<size_t>(2, word.size() / 3);
    size_t best = limit + 1;
    std::string found;
    for (const std::string& c : choices)
        if (const size_t d = distance(word, c); d < best) best = d, found = c;
    return found.empty() ? "" : " (did you mean '" + found + "'?)";
}

}  // namespace tb
