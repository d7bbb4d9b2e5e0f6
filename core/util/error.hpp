// tb::Error: the one exception type of tb_core. Its message is a single sentence that names the
// file, flag or field at fault and the problem, ready to print as is (CLI) or show in the window.
#pragma once
#include <stdexcept>
#include <string>

namespace tb {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace tb
