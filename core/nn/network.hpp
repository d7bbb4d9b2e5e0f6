// Network: one replica of a model on one backend at a fixed batch size (a tower's model).
// Owns the flat parameter and gradient buffers (every layer's tensors are views into them,
// so averaging or applying gradients is one call over `paramCount()` floats), the
// activations, the workspace shared by all layers and the loss buffers.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "nn/layers.hpp"
#include "nn/model_spec.hpp"

namespace tb {

// Device memory one replica holds, in bytes.
struct NetworkMemory {
    size_t params = 0, grads = 0;
    size_t activations = 0;  // layer outputs, the two gradient buffers, input, labels, probs, dlogits
    size_t saved = 0;        // what forward keeps for backward (argmax, LRN scales, dropout masks)
    size_t workspace = 0;    // the scratch all layers share (cuDNN's chosen algorithms' workspace)
};

// What a model is without building it: input shape, number of logits, parameter count.
struct ModelShape {
    Dims input;
    int outputs = 0;
    int64_t params = 0;
};
// Configures the spec's layers (no memory, no backend); throws tb::Error naming the file.
ModelShape shapeOf(const ModelSpec& spec);
// What one replica at `batch` will allocate, from the configured layers alone (nothing is
// allocated): as Network::memoryUse() reports it after building (parameters, gradients and
// activations exactly; tst_model), except the workspace (chosen by the backend), and with the
// saved buffers taken as a float per output for pooling and dropout and two for LRN, an upper
// bound (oneDNN's max-pooling keeps a byte per output).
NetworkMemory estimateNetworkMemory(const ModelSpec& spec, int batch);

class Network {
public:
    Network(const ModelSpec& spec, Backend& backend, int batch);
    Network(const Network&) = delete;
    Network& operator=(const Network&) = delete;

    const ModelSpec& spec() const { return spec_; }
    Backend& backend() const { return backend_; }
    int batch() const { return batch_; }
    Dims inputDims() const { return input_; }
    int outputs() const { return outputs_; }   // number of logits (classes)
    int64_t paramCount() const { return paramCount_; }
    // Training FLOPs per example of the conv and dense layers: forward, weight gradient and input
    // gradient (2 FLOPs per multiply-add), without the input gradient of the first layer.
    int64_t trainFlopsPerExample() const;
    const std::vector<ParamInfo>& paramInfos() const { return infos_; }
    const std::vector<int64_t>& paramOffsets() const { return offsets_; }  // into the flat buffers
    const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

    float* params() const { return params_; }          // (paramCount) on the backend's device
    // Reads and updates the parameters in `external` (paramCount floats on this device) instead
    // of its own buffer: CPU towers share the variables held in host memory without copies.
    void bindParams(float* external);
    // Reads parameters from `p` for a while (nullptr: its own buffer again), keeping its own.
    void viewParams(float* p);
    // For the next training step (forward and backward) only: `rounded` holds params() rounded
    // to bf16 as they are now (paramCount values, written by the update that wrote them), which
    // bf16 matrix work reads instead of rounding the weights again. The caller vouches that
    // params() do not change before that step; evaluation forwards never read it. (CPU towers
    // only: a GPU step replayed from a graph would keep the pointers it was captured with.)
    void useRoundedParams(const uint16_t* rounded);
    float* grads() const { return grads_.data(); }     // (paramCount)
    float* input() const { return input_buf_.data(); } // (batch, h, w, c)
    int32_t* labels() const { return reinterpret_cast<int32_t*>(labels_.data()); }  // (batch)
    const float* probs() const { return probs_.data(); }  // (batch, outputs) softmax of the last forward
    NetworkMemory memoryUse() const;
    // True when a training step's work depends on its seed (dropout), so one recorded step
    // cannot be replayed for the next.
    bool drawsRandomNumbers() const;
    // Host-side initial values of all parameters for a seed, in flat-buffer order.
    std::vector<float> initialParams(uint64_t seed) const;

    // Forward and loss on input()/labels(). Adds into stats (device, 3 floats): [0] the sum of
    // the first `valid` examples' losses, [1] how many of them were right, [2] (training only)
    // the weight-decay loss sum_l wd_l * l2_loss(W_l).
    void forward(Stream, bool training, uint64_t seed, int valid, float* stats);
    // Gradients of (mean loss over the batch + weight decay) into grads(); after a training forward.
    void backward(Stream);

private:
    ModelSpec spec_;
    Backend& backend_;
    int batch_;
    Dims input_;
    int outputs_ = 0;
    std::vector<std::unique_ptr<Layer>> layers_;
    std::vector<ParamInfo> infos_;
    std::vector<int64_t> offsets_;
    int64_t paramCount_ = 0;
    float* params_ = nullptr;          // own_params_ or a bound external buffer
    Tensor own_params_, grads_, input_buf_, probs_, dlogits_, workspace_, gradA_, gradB_;
    std::vector<Tensor> activations_;    // per layer output (n, h, w, c); aliasing layers share
    std::vector<const float*> outputs_of_;
    std::vector<Tensor> saved_;
    Tensor labels_;  // (batch) int32 in float-sized slots
};

}  // namespace tb
