#include "comm/bf16_wire.hpp"

#include <algorithm>

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

std::string bf16ToGpuHolderRefused(const std::string& holder, const std::string& why) {
    return "--comm-precision bf16: the variables are on " + holder + ", and bf16 gradients reach a GPU's variables "
           "through NCCL only (" + why + "); put the variables on the host (--variables cpu) or leave "
           "--comm-precision at fp32";
}

void reduceWire(const std::vector<WireSource>& sources, size_t begin, size_t end, float* out, ReduceOp op) {
    if (sources.empty()) throw Error("reduceWire: no sources");
    float* o = out + begin;
    const size_t n = end - begin;
    for (size_t j = 0; j < sources.size(); ++j) {
        const WireSource& s = sources[j];
        if (s.bf16 && j == 0) widenBf16(s.bf16 + begin, o, n);
        else if (s.bf16) addBf16(s.bf16 + begin, o, n);
        else if (j == 0) std::copy_n(s.fp32 + begin, n, o);
        else
            for (size_t i = 0; i < n; ++i) o[i] += s.fp32[begin + i];
    }
    if (op == ReduceOp::Mean) {
        const float scale = 1.f / float(sources.size());
        for (size_t i = 0; i < n; ++i) o[i] *= scale;
    }
}

}  // namespace tb
