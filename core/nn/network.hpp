// Network: one replica of a model on one backend at a fixed batch size (a tower's model).
// Owns the flat parameter and gradient buffers (every layer's tensors are views into them,
// so averaging or applying gradients is one call over `paramCount()` floats), the statistics
// buffer (batch norm's moving means and variances: kept, not trained), the activations, the
// workspace shared by all layers and the loss buffers. The layers form a graph (model_spec.hpp):
// forward runs them in order, backward in reverse, each gradient in a buffer of a small pool
// while it is needed, the gradients of a tensor read by several layers added up.
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
    size_t saved = 0;        // what forward keeps for backward (argmax, LRN scales, dropout masks, a
                             // fused dense ReLU's mask for the dense layer after it)
    size_t workspace = 0;    // the scratch all layers share (cuDNN's chosen algorithms' workspace; a
                             // fused dense ReLU's masked gradient, where no dense layer after masks it)
    size_t statistics = 0;   // batch norm's moving means and variances
};

// What a model is without building it: input shape, number of logits, parameter count.
struct ModelShape {
    Dims input;
    int outputs = 0;
    int64_t params = 0;
};
// Configures the spec's layers (no memory, no backend); throws tb::Error naming the file.
ModelShape shapeOf(const ModelSpec& spec);

// One layer as the model view and the model list show it.
struct LayerSummary {
    std::string name;
    LayerType type = LayerType::Relu;
    std::vector<int> inputs;  // indices of the layers it reads (-1: the model's input)
    Dims output;              // per example
    int64_t params = 0;
    int64_t forwardFlops = 0;  // per example, conv and dense only (a multiply-add counts 2)
    bool fused = false;        // a ReLU applied by the layer it reads (batch norm, add) or by its max pooling
};
std::vector<LayerSummary> summarizeLayers(const ModelSpec& spec);
// Layers [first, last] of a model, inclusive: a stage of model parallelism (last -1: to the end).
struct LayerRange {
    int first = 0, last = -1;
};
// Why the model cannot be cut before layer `first` (a stage starting there), or "": a cut must
// be crossed by one tensor alone, layer first - 1's output (between a ResNet's blocks, not
// across a shortcut).
std::string cutProblem(const ModelSpec& spec, int first);

// The layers of a range as a graph of their own: each layer's inputs as indices into the range
// (-1: the range's input, the model's or the stage before's output). Throws where the range's
// ends are not cuts (cutProblem).
struct RangeGraph {
    std::vector<std::vector<int>> inputs;
};
RangeGraph rangeGraph(const ModelSpec& spec, LayerRange range);

// The backward pass of a range's graph, planned once: which gradient each layer reads and
// writes, in slots of a pool of equal buffers taken while a gradient is needed. A tensor read by
// several layers gets its gradient from the first (in reverse order) written in place and the
// others' added in (each written to a scratch slot first). A straight line needs two buffers.
struct GradientPlan {
    static constexpr int kUnset = -4, kNone = -3, kInput = -2, kOutput = -1;  // slots that are not the pool's
    struct Step {
        enum Kind { Backward, Pass } kind = Backward;  // Pass: flatten's gradient copied or added on
        int layer = 0;
        int dy = kOutput;          // the slot of its output's gradient
        std::vector<int> dx;       // per input: the slot it writes (kNone: not needed)
        std::vector<int> addInto;  // Backward, per input: kUnset, or the slot dx is then added into
        std::vector<bool> add;     // Pass: whether dx's slot is added into rather than written
    };
    std::vector<Step> steps;
    std::vector<bool> needed;  // per layer: whether its output's gradient is needed
    int buffers = 0;           // the pool's size
};
// aliases, hasParams: per layer of the graph; inputNeedsGrad: whether the range gives its input's
// gradient (a stage after the first).
GradientPlan planGradients(const RangeGraph& graph, const std::vector<bool>& aliases,
                           const std::vector<bool>& hasParams, bool inputNeedsGrad);

// What one replica at `batch` will allocate (of the layers `range`: a stage's Network), from the
// configured layers alone (nothing is allocated): as Network::memoryUse() reports it after
// building (parameters, gradients and activations exactly; tst_model), the workspace as the
// layers' own need (a dense layer's fused ReLU), without what the backend chooses, and with the
// saved buffers taken as a float per output for pooling and dropout and two for LRN, an upper
// bound (oneDNN's max-pooling keeps a byte per output), and a bit per fused dense ReLU's output.
NetworkMemory estimateNetworkMemory(const ModelSpec& spec, int batch, LayerRange range = {});

// Layer `layer`'s output per example (-1: the model's input); throws tb::Error past the last layer.
Dims layerOutputDims(const ModelSpec& spec, int layer);

// Where a training step's time went, layer by layer (Network::profileNextStep): seconds of each
// layer's forward and backward (0 where it does nothing: flatten, a layer nothing needs the
// gradient of), as the backend's events time them.
struct LayerTimes {
    std::vector<double> forward, backward;  // per layer of the network
    bool empty() const { return forward.empty(); }
};

// One micro-batch of a step, as a pipeline runs it (the whole step's batch: the defaults).
struct MicroBatch {
    int64_t firstExample = 0;  // where its examples start in the step's batch: dropout masks
    int stepBatch = 0;         // the step's batch: the loss gradient is 1/stepBatch (0: this batch)
    bool once = true;          // the step's one micro-batch that adds the weight decay (loss, gradient)
};

class Network {
public:
    // The whole model, or a stage of it: layers `range` only, with the whole model's layer
    // indices (dropout streams) and parameter numbering (initial values), reading its input from
    // setInput (or its own input()) and, unless it holds the last layer, its output's gradient
    // from setOutputGrad instead of computing a loss.
    Network(const ModelSpec& spec, Backend& backend, int batch, LayerRange range = {});
    ~Network();
    Network(const Network&) = delete;
    Network& operator=(const Network&) = delete;

    const ModelSpec& spec() const { return spec_; }
    Backend& backend() const { return backend_; }
    int batch() const { return batch_; }
    Dims inputDims() const { return input_; }
    Dims outputDims() const { return output_; }  // per example; the logits (outputs, 1, 1) with the last layer
    int outputs() const { return outputs_; }   // number of logits (classes); 0 for a stage without the loss
    LayerRange range() const { return range_; }
    bool endsInLoss() const { return outputs_ > 0; }
    // Where this network's parameters start in the whole model's flat buffer (a stage's are one
    // contiguous slice of it, the layers being consecutive).
    int64_t paramOffsetInModel() const { return modelOffset_; }
    int64_t paramCount() const { return paramCount_; }
    // Training FLOPs per example of the conv and dense layers: forward, weight gradient and input
    // gradient (2 FLOPs per multiply-add), without the input gradients nothing needs (the first layer's).
    int64_t trainFlopsPerExample() const;
    // The statistics (batch norm's moving means and variances, statisticInfos' tensors one after
    // another; where the network's range starts in the whole model's), on this device.
    int64_t statisticCount() const { return statCount_; }
    int64_t statisticOffsetInModel() const { return statModelOffset_; }
    const std::vector<ParamInfo>& statisticInfos() const { return statInfos_; }
    const std::vector<int64_t>& statisticOffsets() const { return statOffsets_; }
    float* statistics() const { return stats_; }  // (statisticCount) or null without batch norm
    std::vector<float> initialStatistics() const;  // host: means 0, variances 1
    // Updates the statistics in `external` (statisticCount floats on this device) instead of its
    // own buffer, which it frees: a stage's micro-batch slots keep one.
    void bindStatistics(float* external);
    // Batch norm's statistics of every replica (--sync-bn), or null for this batch's; it must
    // outlive the network's training calls.
    void setStatisticsSync(BatchStatisticsSync* sync) { sync_ = sync; }
    bool hasBatchNorm() const { return statCount_ > 0; }
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
    float* grads() const { return grads_ptr_; }        // (paramCount)
    // Writes gradients into `external` (paramCount floats on this device) instead of its own
    // buffer, which it frees: a stage's micro-batch slots share one.
    void bindGrads(float* external);
    // Frees the gradient buffer of a network that only evaluates (a pipeline's whole-model
    // evaluation network); backward() then throws.
    void releaseGradients();
    // Frees the variables of a network kept only as the model's layout (the names, shapes and
    // places of its variables: a stage's process, which never evaluates the whole model); params()
    // is null after it, and nothing may run the network.
    void releaseParams();
    float* input() const { return input_buf_.data(); } // (batch, h, w, c); null for a stage after the first
    // A stage's links to its neighbours, on this device: its input (batch, input dims) where the
    // stage before wrote it (nullptr: input()), the gradient of its output (batch, output dims)
    // for a stage without the loss, and where backward writes its input's gradient (nullptr:
    // nowhere; the first stage has none to give).
    void setInput(const float* x);
    void setOutputGrad(const float* dy) { outputGrad_ = dy; }
    void setInputGrad(float* dx) { inputGrad_ = dx; }
    const float* output() const { return outputs_of_.back(); }  // (batch, output dims) of the last forward
    int32_t* labels() const { return reinterpret_cast<int32_t*>(labels_.data()); }  // (batch); null without the loss
    const float* probs() const { return probs_.data(); }  // (batch, outputs) softmax of the last forward
    NetworkMemory memoryUse() const;
    // True when a training step's work depends on its seed (dropout), so one recorded step
    // cannot be replayed for the next.
    bool drawsRandomNumbers() const;
    // Host-side initial values of all parameters for a seed, in flat-buffer order.
    std::vector<float> initialParams(uint64_t seed) const;

    // Forward and loss on input()/labels(). Adds into stats (device, 3 floats): [0] the sum of
    // the first `valid` examples' losses, [1] how many of them were right (both with the loss
    // only), [2] (training, part.once) the weight-decay loss sum_l wd_l * l2_loss(W_l) of this
    // network's layers.
    void forward(Stream, bool training, uint64_t seed, int valid, float* stats, const MicroBatch& part = {});
    // Gradients of (the step's mean loss + weight decay) into grads(), which it overwrites; after a
    // training forward of the same part. A micro-batch's are its share of the step's: summed over
    // the step's micro-batches they are the whole batch's.
    void backward(Stream, const MicroBatch& part = {});
    // The next training forward and backward time each layer with the backend's events (not for a
    // step recorded as a graph: events inside one time nothing useful). takeLayerTimes, once that
    // step's work has completed (its stream synchronised), gives them, and empty times otherwise.
    void profileNextStep() { profileNext_ = true; }
    LayerTimes takeLayerTimes();

private:
    ModelSpec spec_;
    Backend& backend_;
    int batch_;
    LayerRange range_;
    Dims input_, output_;
    int outputs_ = 0;
    int64_t modelOffset_ = 0;  // first parameter's offset in the whole model's flat buffer
    size_t modelParamIndex_ = 0;  // first parameter tensor's index in the whole model (init streams)
    std::vector<Dims> outDims_;   // per layer
    const float* inputPtr_ = nullptr;  // setInput's, or input_buf_'s
    const float* outputGrad_ = nullptr;
    float* inputGrad_ = nullptr;
    float* grads_ptr_ = nullptr;  // grads_ or a bound external buffer
    std::vector<std::unique_ptr<Layer>> layers_;
    RangeGraph graph_;
    GradientPlan plan_;
    std::vector<ParamInfo> infos_, statInfos_;
    std::vector<int64_t> offsets_, statOffsets_;
    int64_t paramCount_ = 0, statCount_ = 0, statModelOffset_ = 0;
    float* params_ = nullptr;          // own_params_ or a bound external buffer
    float* stats_ = nullptr;           // own_stats_ or a bound external buffer
    BatchStatisticsSync* sync_ = nullptr;
    Tensor own_params_, own_stats_, grads_, input_buf_, probs_, dlogits_, workspace_;
    std::vector<Tensor> gradPool_;       // the backward's gradient buffers (plan_.buffers)
    std::vector<Tensor> activations_;    // per layer output (n, h, w, c); empty where a layer aliases its input
    std::vector<const float*> outputs_of_;  // per layer: its output (an aliasing layer's input)
    std::vector<LayerInputs> inputs_of_;    // per layer: its inputs
    void wire();  // outputs_of_ and inputs_of_ from the activations and the input
    // Profiling (profileNextStep): an event before each layer's forward and after the last, and
    // after each backward step; `profiling_` while the profiled step's calls are enqueued.
    bool profileNext_ = false, profiling_ = false, profiled_ = false;
    std::vector<Event> forwardMarks_, backwardMarks_;
    void mark(std::vector<Event>& marks, size_t i, Stream s);
    std::vector<Tensor> saved_;
    Tensor labels_;  // (batch) int32 in float-sized slots
};

}  // namespace tb
