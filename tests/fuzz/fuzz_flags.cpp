// towerbench-run's command line: the input is its arguments, separated by NUL bytes.
#include "command_line.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<std::string> args;
    std::string_view rest(reinterpret_cast<const char*>(data), size);
    while (!rest.empty() && args.size() < 64) {
        const size_t at = rest.find('\0');
        args.emplace_back(rest.substr(0, at));
        rest.remove_prefix(at == std::string_view::npos ? rest.size() : at + 1);
    }
    TB_FUZZ_REFUSALS_ARE_FINE((void)parseCommandLine(args));
    return 0;
}
