// Layers: forward and backward of each layer type on any Backend, on whole batches in
// (n, h, w, c) layout. A layer owns its backend plans; its parameters and gradients are
// views into the network's flat buffers, so averaging gradients is one reduction.
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

struct LayerContext {
    Backend& backend;
    Stream stream;
    bool training = true;
    uint64_t seed = 0;       // per step and layer: dropout masks
    void* workspace = nullptr;
};

class Layer {
public:
    explicit Layer(LayerSpec spec) : spec_(std::move(spec)) {}
    virtual ~Layer() = default;
    const LayerSpec& spec() const { return spec_; }
    const std::string& name() const { return spec_.name; }

    // Checks the input shape and returns the output shape; throws tb::Error naming the layer.
    virtual Dims configure(Dims in) = 0;
    virtual std::vector<ParamInfo> params() const { return {}; }
    // Builds the backend plans for batches of n.
    virtual void prepare(Backend&, int /*n*/) {}
    virtual size_t workspaceBytes() const { return 0; }
    virtual size_t savedBytes() const { return 0; }   // kept from forward for backward
    // Output is the input itself (Flatten): no buffer, and dx is dy.
    virtual bool aliasesInput() const { return false; }
    // Floating-point operations of the forward pass per example (multiply-adds count 2); the
    // weight gradient and the input gradient each cost as much again for conv and dense layers.
    virtual int64_t forwardFlops() const { return 0; }

    virtual void forward(const LayerContext&, const float* x, float* y) = 0;
    // dx == nullptr: the input gradient is not needed (first layer).
    virtual void backward(const LayerContext&, const float* x, const float* y, const float* dy, float* dx) = 0;

    // Set by the network: parameter and gradient pointers, in params() order; saved memory.
    std::vector<float*> w, dw;
    // Set by the network for one training step where the update rounded the parameters to bf16
    // already (Network::useRoundedParams), in params() order; else empty.
    std::vector<const uint16_t*> wBf16;
    void* saved = nullptr;

protected:
    LayerSpec spec_;
    Dims in_, out_;
    int n_ = 0;
};

std::unique_ptr<Layer> makeLayer(const LayerSpec& spec);

// TF's output size and the (before, after) padding of SAME / VALID along one axis.
struct AxisPadding {
    int out = 0, before = 0, after = 0;
};
AxisPadding tfPadding(int in, int kernel, int stride, bool same);

}  // namespace tb
