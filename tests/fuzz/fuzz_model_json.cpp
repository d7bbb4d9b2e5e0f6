// Model files (--model FILE.json): parsed, then every layer configured and shaped as a tower
// would before allocating anything.
#include "fuzz_support.hpp"
#include "nn/model_spec.hpp"
#include "nn/network.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    TB_FUZZ_REFUSALS_ARE_FINE(
        const tb::ModelSpec spec = tb::parseModelSpec({reinterpret_cast<const char*>(data), size}, "fuzz.json");
        (void)tb::shapeOf(spec));
    return 0;
}
