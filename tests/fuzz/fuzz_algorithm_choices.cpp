// The cuDNN algorithm choices file (backend/algorithm_store.hpp) as a GPU run reads it at a
// convolution's set-up: parseChoices() on the text, and an AlgorithmStore over the same bytes as a
// file. Beyond not crashing: what the reader keeps, written back by choicesText(), reads again as
// the same entries with nothing refused (a kept entry the writer cannot round-trip is a crash).
// Input: the file.
#include "backend/algorithm_store.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    std::vector<std::string> problems;
    const tb::StoredChoices read = tb::parseChoices(text, "fuzz", problems);
    std::vector<std::string> again;
    if (tb::parseChoices(tb::choicesText(read), "fuzz", again) != read || !again.empty()) std::abort();
    const std::string file = fuzz::scratch() + "/choices.json";
    fuzz::writeFile(file, text);
    tb::AlgorithmStore store(file);
    const std::string key = read.empty() ? std::string("k") : read.begin()->first;
    if (store.find(key).has_value() != !read.empty()) std::abort();
    return 0;
}
