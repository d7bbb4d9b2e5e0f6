// Run config files (--config FILE.json): parsed, every key set, then checked across settings.
#include <nlohmann/json.hpp>

#include "fuzz_support.hpp"
#include "io/run_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = fuzz::scratch() + "/config.json";
    fuzz::writeFile(path, {reinterpret_cast<const char*>(data), size});
    TB_FUZZ_REFUSALS_ARE_FINE(tb::RunConfig c; c.loadFile(path); c.validate(); (void)c.toJson());
    return 0;
}
