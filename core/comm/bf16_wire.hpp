// Gradients on the wire in bf16 (--comm-precision bf16): a tower rounds its fp32 gradients to
// bf16 (the top 16 bits of a float: 8 exponent bits, 7 mantissa bits, round to nearest even)
// before they leave it, so every transfer carries 2 bytes an element instead of 4; within a
// process they are widened and summed in fp32, between processes each partial sum is rounded to
// bf16 again (communicator.hpp), as NCCL's bf16 all-reduce does. These sums run on the host: over
// the CPU towers' gradients, the bits GPU towers sent, and the processes' (MPI).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/bf16.hpp"  // roundToBf16, widenBf16

namespace tb {

enum class ReduceOp;  // communicator.hpp

// The number format of the gradients a strategy exchanges (variables always move in fp32: they
// are the master weights).
enum class CommPrecision { Fp32, Bf16 };

CommPrecision parseCommPrecision(const std::string& text, const std::string& origin);  // "fp32" | "bf16"
const char* toString(CommPrecision p);
// The refusal of bf16 gradients for variables on a GPU (`holder`) where they would arrive by
// copies, whose sums the host makes (`why`: what makes them copies); NCCL alone can take them.
std::string bf16ToGpuHolderRefused(const std::string& holder, const std::string& why);

// Bytes one element of the gradients takes on the wire.
inline size_t gradientElementBytes(CommPrecision p) { return p == CommPrecision::Bf16 ? 2 : 4; }

// One source of a reduction of gradients: bf16 as it came over the wire, or fp32 read in place
// (a tower on the holder's device sends nothing).
struct WireSource {
    const uint16_t* bf16 = nullptr;
    const float* fp32 = nullptr;
};
// out[i] := op over the sources' [i], i in [begin, end): each widened (or read) and added in
// order in fp32, scaled by 1 / sources for the mean (as reduceChunk sums fp32 buffers).
void reduceWire(const std::vector<WireSource>& sources, size_t begin, size_t end, float* out, ReduceOp op);

}  // namespace tb
