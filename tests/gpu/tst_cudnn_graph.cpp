// tst_cudnn_graph: the operation graphs of cuDNN's graph API that the convolutions build
// (backend/cuda/cudnn_graph.hpp), checked by cuDNN itself with no GPU: every descriptor (tensors,
// the convolution, the operations, the bias's pointwise add) is set and finalized, and so is the
// whole graph, for each direction in fp32 and bf16, with and without a bias, on the shapes of
// mnist_cnn and cifar10_cnn and a strided one. cuDNN checks attribute types, counts and values
// there; what only a GPU can tell (engines, plans, numbers) the device check's op check tells.
//   - a shape cuDNN refuses is a GraphRefused naming what was being built, kept as cuDNN's lasting
//     answer; its internal errors and failed executions are not kept
//   - without a handle no engine is listed
//   - a plan takes pointers only as aligned as it was made for
#include <string>

#include "backend/cuda/cudnn_graph.hpp"
#include "plain_check.hpp"

using namespace tb::cuda;

namespace {

GraphConvShape shape(int n, int c, int hw, int k, int rs, int stride, int pad) {
    GraphConvShape s;
    s.n = n, s.c = c, s.h = hw, s.w = hw, s.k = k, s.r = rs, s.s = rs;
    s.strideH = s.strideW = stride, s.padH = s.padW = pad;
    return s;
}

const char* name(ConvDirection d) {
    return d == ConvDirection::Forward ? "forward" : d == ConvDirection::BackwardData ? "backward data" : "backward filter";
}

}  // namespace

int main() {
    const GraphConvShape shapes[] = {
        shape(128, 1, 28, 32, 5, 1, 2),    // mnist_cnn conv1
        shape(128, 32, 14, 64, 5, 1, 2),   // mnist_cnn conv2
        shape(128, 3, 24, 64, 5, 1, 2),    // cifar10_cnn conv1
        shape(128, 64, 12, 64, 5, 1, 2),   // cifar10_cnn conv2
        shape(32, 16, 33, 24, 3, 2, 1),    // strided, odd sizes
    };
    int built = 0;
    for (GraphConvShape s : shapes)
        for (ConvDirection d : {ConvDirection::Forward, ConvDirection::BackwardData, ConvDirection::BackwardFilter})
            for (bool bf16 : {false, true})
                for (bool bias : {false, true}) {
                    if (bias && d != ConvDirection::Forward) continue;  // (only the forward adds it)
                    s.bf16 = bf16, s.bias = bias;
                    try {
                        const GraphConv g(nullptr, s, d);
                        GraphConv::Counts counts;
                        counts.listed = 7;
                        CHECK(g.candidates({ConvMath::Fma, true}, 6, size_t(1) << 30, counts).empty() && counts.listed == 0,
                              "without a handle no engine is listed");
                        ++built;
                    } catch (const GraphRefused& e) {
                        CHECK(false, "n%d c%d %dx%d k%d %dx%d stride %d, %s, %s%s: %s", s.n, s.c, s.h, s.w, s.k, s.r,
                              s.s, s.strideH, name(d), bf16 ? "bf16" : "fp32", bias ? ", bias" : "", e.what());
                    }
                }
    CHECK(built == 5 * 4 + 5 * 2 * 2, "%d graphs built of 40", built);

    // A filter larger than the padded input: no output, and cuDNN says so at the tensor it refuses.
    try {
        GraphConv(nullptr, shape(8, 3, 4, 8, 7, 1, 0), ConvDirection::Forward);
        CHECK(false, "a convolution without output was built");
    } catch (const GraphRefused& e) {
        const std::string what = e.what();
        CHECK(what.rfind("cuDNN's graph API: ", 0) == 0 && what.find("answered CUDNN_STATUS_") != std::string::npos,
              "one sentence naming what was built and cuDNN's answer: %s", what.c_str());
        CHECK(e.lasting, "cuDNN's refusal of the shape is its answer about the graph, kept as \"none\": %s", what.c_str());
    }
    // Only a bad parameter or an unsupported graph is such an answer; cuDNN's internal errors (its
    // host memory exhausted among them) and failed executions are tried again by the next run.
    CHECK(lastingRefusal(CUDNN_STATUS_BAD_PARAM) && lastingRefusal(CUDNN_STATUS_BAD_PARAM_NULL_POINTER) &&
              lastingRefusal(CUDNN_STATUS_NOT_SUPPORTED) && lastingRefusal(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN),
          "a bad parameter or an unsupported graph lasts");
    CHECK(!lastingRefusal(CUDNN_STATUS_INTERNAL_ERROR) && !lastingRefusal(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED) &&
              !lastingRefusal(CUDNN_STATUS_EXECUTION_FAILED) && !lastingRefusal(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER) &&
              !lastingRefusal(CUDNN_STATUS_NOT_INITIALIZED) && !lastingRefusal(CUDNN_STATUS_SUCCESS),
          "cuDNN's internal errors and failed executions do not");

    alignas(16) static char buffer[64];
    CHECK(GraphConvPlan::fits(buffer, buffer + 16, buffer + 32), "16-byte aligned pointers fit");
    CHECK(!GraphConvPlan::fits(buffer + 4, buffer + 16, buffer + 32) && !GraphConvPlan::fits(buffer, buffer, buffer + 8),
          "a pointer less aligned does not: the legacy call runs it");
    return tbcheck::exitStatus();
}
