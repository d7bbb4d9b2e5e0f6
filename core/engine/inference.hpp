// A checkpoint's model run forward on the CPU, for `towerbench-run eval` (evaluateCheckpoint) and
// `towerbench-run classify`: its own model spec, its weights (the moving average's where the run
// kept one, as its evaluations used) and batch norm's moving statistics.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "engine/checkpoint.hpp"
#include "io/run_config.hpp"
#include "nn/network.hpp"

namespace tb {

// How a run's evaluations saw their input: its --data and --normalise (from the checkpoint's
// config, the defaults where an older one has none), and the image size files are fitted to
// before the pipeline: CIFAR-10's 32x32 (pipelineFor crops them to the model's 24x24), any other
// set's the model's input size.
struct EvaluationInput {
    RunConfig config;
    bool cifar = false;
    int channels = 0, height = 0, width = 0;
};

class InferenceModel {
public:
    // `batch`: rows of one forward pass; `threads` 0: every core.
    InferenceModel(const std::string& checkpointPath, int batch, int threads);
    ~InferenceModel();
    InferenceModel(const InferenceModel&) = delete;
    InferenceModel& operator=(const InferenceModel&) = delete;

    const Checkpoint& checkpoint() const { return ck_; }
    Network& network() { return *net_; }
    Stream stream() const { return stream_; }
    bool averaged() const { return averaged_; }  // the weights are the run's moving average
    int threads() const { return threads_; }
    EvaluationInput evaluationInput() const;

private:
    Checkpoint ck_;
    int threads_;
    std::shared_ptr<Backend> be_;
    std::unique_ptr<Network> net_;
    Stream stream_{};
    bool averaged_ = false;
};

// towerbench-run classify: each image file's class probabilities (the model's softmax), fitted to
// the model's input as its run's evaluation saw its data (data/image_codec.hpp's rules; a
// CIFAR-10 run's central 24x24 crop of the image fitted to 32x32, standardised).
struct ImageClassification {
    std::string image;
    std::vector<float> probabilities;  // (classes)
    std::vector<int> ranked() const;   // the classes, most probable first (ties: the lower first)
};
struct Classifications {
    std::vector<std::string> classNames;  // the checkpoint's; empty: the classes are numbers
    std::vector<ImageClassification> images;
};
Classifications classifyImages(const std::string& checkpointPath, const std::vector<std::string>& images, int threads);

// A run folder's newest checkpoint, or the file itself (eval and classify take either).
std::string checkpointOf(const std::string& runDirOrFile);

}  // namespace tb
