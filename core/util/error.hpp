// tb::Error: the one exception type of tb_core. Its message is a single sentence that names the
// file, flag or field at fault and the problem, ready to print as is (CLI) or show in the window.
#pragma once
#include <stdexcept>
#include <string>

namespace tb {

// Default visibility: the CUDA module is built with hidden symbols, and an Error it throws must
// still match `catch (const tb::Error&)` in the program that loaded it.
class __attribute__((visibility("default"))) Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace tb
