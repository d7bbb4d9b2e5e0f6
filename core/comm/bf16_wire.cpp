#include "comm/bf16_wire.hpp"


#include "comm/communicator.hpp"
#include "tensor/bf16.hpp"
#include "util/error.hpp"

namespace tb {

CommPrecision parseCommPrecision(const std::string& text, const std::string& origin) {
    if (text == "fp32") return CommPrecision::Fp32;
    if (text == "bf16") return CommPrecision::Bf16;
    throw Error(origin + ": '" + text + "' is not fp32 or bf16");
}

const char* toString(CommPrecision p) { return p == CommPrecision::Bf16 ? "bf16" : "fp32"; }

void reduceBf16(const std::vector<const uint16_t*>& sources, size_t begin, size_t end, float* out, ReduceOp op) {
    if (sources.empty()) throw Error("reduceBf16: no sources");
    widenBf16(sources[0] + begin, out + begin, end - begin);
    for (size_t j = 1; j < sources.size(); ++j) addBf16(sources[j] + begin, out + begin, end - begin);
    if (op == ReduceOp::Mean) {
        const float scale = 1.f / float(sources.size());
        for (size_t i = begin; i < end; ++i) out[i] *= scale;
    }
}

}  // namespace tb
