// Layers: forward and backward of each layer type on any Backend, on whole batches in
// (n, h, w, c) layout. A layer owns its backend plans; its parameters and gradients are
// views into the network's flat buffers, so averaging gradients is one reduction; its moving
// statistics (batch norm) a view into the network's statistics buffer. Most layers read one
// input; add and concat read several (a model is a graph: model_spec.hpp).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "nn/model_spec.hpp"

namespace tb {

// Per-example shape (c, h, w); a flat vector of f features is (f, 1, 1).
struct Dims {
    int c = 0, h = 0, w = 0;
    int64_t size() const { return int64_t(c) * h * w; }
    std::string str() const;
    bool operator==(const Dims&) const = default;
};

struct ParamInfo {
    std::string name;        // "conv1/weights"
    Shape shape;             // weights (out, in, kh, kw) or (out, in); bias (out)
    InitSpec init;
    int64_t fanIn = 0, fanOut = 0;
    float weightDecay = 0.f;
};

// Synchronised batch norm (--sync-bn): adds a small buffer over every replica of the step (the
// towers of this process and of every other), in place; a collective that each replica's network
// calls in the same order (PyTorch's SyncBatchNorm all-reduces its sums alike).
class BatchStatisticsSync {
public:
    virtual ~BatchStatisticsSync() = default;
    virtual int replicas() const = 0;  // whose batches the sums cover, each of the same size
    // data (count floats on the calling replica's device, its stream's work before this call
    // included) := the sum over every replica's.
    virtual void sum(Stream, float* data, size_t count) = 0;
};

struct LayerContext {
    Backend& backend;
    Stream stream;
    bool training = true;
    uint64_t seed = 0;       // per step and layer: dropout masks
    void* workspace = nullptr;
    BatchStatisticsSync* sync = nullptr;  // batch norm's statistics over every replica; null: this batch's
};

using LayerInputs = std::vector<const float*>;  // a layer's inputs, in its spec's order
using LayerInputGrads = std::vector<float*>;    // their gradients (nullptr: not needed)

class Layer {
public:
    explicit Layer(LayerSpec spec) : spec_(std::move(spec)) {}
    virtual ~Layer() = default;
    const LayerSpec& spec() const { return spec_; }
    const std::string& name() const { return spec_.name; }
    // Per example, once configured: the (first) input's shape and the output's.
    Dims inputDims() const { return in_; }
    Dims outputDims() const { return out_; }

    // Checks the input shapes (one per input) and returns the output shape; throws tb::Error
    // naming the layer.
    virtual Dims configure(const std::vector<Dims>& in) = 0;
    virtual std::vector<ParamInfo> params() const { return {}; }
    // State that is not trained but kept (batch norm's moving mean and variance), in order; the
    // network lays them out one after another in its statistics buffer (`statistics` below).
    virtual std::vector<ParamInfo> statistics() const { return {}; }
    // Builds the backend plans for batches of n.
    virtual void prepare(Backend&, int /*n*/) {}
    virtual size_t workspaceBytes() const { return 0; }
    virtual size_t savedBytes() const { return 0; }   // kept from forward for backward
    // Output is the input itself (Flatten, a folded ReLU): no buffer, and dx is dy.
    virtual bool aliasesInput() const { return false; }
    // A ReLU after this layer, fused into it (before prepare): the layer writes relu(y) and takes
    // its gradient only where that is positive (batch norm, add, dense); false where it cannot. The
    // ReLU layer itself is then folded: it passes its input through in both directions.
    virtual bool fuseRelu() { return false; }
    // The ReLU that alone feeds this layer, applied by it instead (max pooling: relu(max(x)) is
    // max(relu(x))); false where it cannot. The ReLU layer is then folded as above.
    virtual bool fuseReluBefore() { return false; }
    virtual void fold() {}
    // `before`'s fused ReLU output is this layer's input, read by nothing else (before prepare):
    // this layer's input gradient comes out masked by that ReLU (in the GEMM that makes it, for
    // dense layers), from the mask `before`'s forward keeps in its saved memory, and `before`
    // takes its output's gradient as it is. false where the two layers cannot do this.
    virtual bool maskInputGradient(Layer& /*before*/) { return false; }
    // `before` is a convolution with a bias whose output (or a ReLU of it folded into this layer)
    // is this layer's input, read by nothing else (before prepare): this layer's backward writes
    // `before`'s bias gradient, the sum of its input gradient over (n, h, w) per channel, as it
    // writes that gradient (pooling, LRN), and `before` makes no pass of its own over it. false
    // where the two layers cannot do this.
    virtual bool sumInputGradient(Layer& /*before*/) { return false; }
    // No input's gradient will be asked of backward (before prepare): the layer reads only the
    // model's input, whose gradient nothing needs. Its plans may leave that direction out.
    virtual void skipInputGradients() {}
    // Floating-point operations of the forward pass per example (multiply-adds count 2); the
    // weight gradient and the input gradient each cost as much again for conv and dense layers.
    virtual int64_t forwardFlops() const { return 0; }

    virtual void forward(const LayerContext&, const LayerInputs& x, float* y) = 0;
    // dx[i] == nullptr: input i's gradient is not needed (the model's input). Overwrites dx and dw.
    virtual void backward(const LayerContext&, const LayerInputs& x, const float* y, const float* dy,
                          const LayerInputGrads& dx) = 0;

    // Set by the network: parameter and gradient pointers, in params() order; saved memory; the
    // statistics (of statistics(), one after another).
    std::vector<float*> w, dw;
    float* stats = nullptr;
    // Set by the network for one training step where the update rounded the parameters to bf16
    // already (Network::useRoundedParams), in params() order; else empty.
    std::vector<const uint16_t*> wBf16;
    void* saved = nullptr;

protected:
    LayerSpec spec_;
    Dims in_, out_;
    int n_ = 0;
};

// A layer of one input (all but add and concat).
class OneInputLayer : public Layer {
public:
    using Layer::Layer;
    Dims configure(const std::vector<Dims>& in) final;
    void forward(const LayerContext& c, const LayerInputs& x, float* y) final { forwardOne(c, x[0], y); }
    void backward(const LayerContext& c, const LayerInputs& x, const float* y, const float* dy,
                  const LayerInputGrads& dx) final {
        backwardOne(c, x[0], y, dy, dx[0]);
    }

protected:
    virtual Dims configureOne(Dims in) = 0;
    virtual void forwardOne(const LayerContext&, const float* x, float* y) = 0;
    // dx == nullptr: the input gradient is not needed.
    virtual void backwardOne(const LayerContext&, const float* x, const float* y, const float* dy, float* dx) = 0;
};

std::unique_ptr<Layer> makeLayer(const LayerSpec& spec);

// TF's output size and the (before, after) padding of SAME / VALID along one axis.
struct AxisPadding {
    int out = 0, before = 0, after = 0;
};
AxisPadding tfPadding(int in, int kernel, int stride, bool same);

}  // namespace tb
