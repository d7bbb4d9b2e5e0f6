// Checkpoints: a run's whole training state at one step, in one safetensors file that Python's
// `safetensors` reads as is. Tensors:
//   params/<variable>   F32, the variable's shape (Network::paramInfos names: "conv1/weights")
//                       the variables as evaluation sees them (averaging: the replicas' mean)
//   ema/<variable>      F32, the weights' moving average, where the run keeps one
//   statistics/<name>   F32 (c), batch norm's moving means and variances as evaluation uses them
//                       (tower 0's: "stem_bn/moving_mean"), in models with batch norm
//   state/<buffer>      F32 (count), Strategy::state(): optimiser slots ("optimizer/m"), and with
//                       averaging every replica's own slots and parameters ("replica1/variables")
// Metadata (strings): format "towerbench-checkpoint", version, step, samples (taken from the
// training input so far), model (its name), model_spec (its JSON as trained), config (the
// RunConfig, JSON), plan (the DeploymentPlan, JSON), validation_accuracy and
// best_validation_accuracy ("" when none; 17 digits), created, class_names (a JSON array of the
// data's class names, [] where the classes are numbers; absent in older files), input_mean and
// input_std (JSON arrays per channel, with --normalise mean-std only).
//
// What a checkpoint can do for a run (checkResume / loadWeights say why not, in one sentence):
//   resume exactly   same format version, model spec and every setting that shapes training;
//   weights only     same variables (names and shapes), any plan: --init-from;
//   refused          a newer format, another model, another precision.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/run_config.hpp"
#include "io/safetensors.hpp"
#include "data/pipeline.hpp"
#include "nn/network.hpp"
#include "optim/optimizer.hpp"
#include "parallel/training_engine.hpp"
#include "util/mapped_allocator.hpp"

namespace tb {

inline constexpr int kCheckpointVersion = 1;
inline constexpr const char* kCheckpointFormat = "towerbench-checkpoint";

struct CheckpointMeta {
    int version = kCheckpointVersion;
    int64_t step = 0;
    uint64_t samples = 0;          // training samples taken by the input pipeline
    std::string model;             // the model's name
    std::string modelSpec;         // the model's JSON, as trained
    nlohmann::json config, plan;
    double validationAccuracy = -1;  // the last validation accuracy at this step; -1: none
    double bestValidationAccuracy = -1;  // the best so far (best.safetensors'), so a resumed run
                                         // never replaces that file with a worse one
    std::string created;           // UTC, ISO 8601
    std::vector<std::string> classNames;  // the data's (folders', Fashion-MNIST's); empty: numbers
    ChannelStatistics channels;           // --normalise mean-std: the training split's (input_mean, input_std)
    int processes = 1;  // the run's processes when it was saved (0: not recorded, before they were)
};

// The training state copied to the host between steps (towers idle): about 1x (SGD) to 4x
// (Adam with EMA) the variables' bytes, plus replicas' own state with averaging. Its large
// buffers are pages of their own, unmapped when the write is done (util/mapped_allocator.hpp).
struct TrainingSnapshot {
    MappedVector<float> variables;  // (P)
    MappedVector<float> ema;        // (P) or empty
    std::vector<float> statistics;  // batch norm's moving statistics (Network::statisticCount), or empty
    struct Buffer {
        std::string name;
        MappedVector<float> values;
    };
    std::vector<Buffer> state;
};

// The name under which a checkpoint keeps process `process`'s own state buffer `name` (state that
// differs by process), after "state/".
inline std::string peerStateName(int process, const std::string& name) {
    return "process" + std::to_string(process) + "/" + name;
}

// `count`: the variables' P; `ema` may be null.
TrainingSnapshot takeSnapshot(TrainingEngine& towers, size_t count, WeightEma* ema, Stream emaStream);
// towers.state() copied to the host (between steps), in its order; perProcessOnly: only the
// buffers that differ by process (StateBuffer::perProcess).
std::vector<TrainingSnapshot::Buffer> stateOnHost(TrainingEngine& towers, bool perProcessOnly = false);
// The variables' names, shapes and offsets into the flat buffers (Network::paramInfos and
// paramOffsets), kept apart from the network so a write may outlive it.
struct VariableLayout {
    std::vector<ParamInfo> infos;
    std::vector<int64_t> offsets;
    std::vector<ParamInfo> statInfos;  // batch norm's moving statistics
    std::vector<int64_t> statOffsets;
    static VariableLayout of(const Network& net) {
        return {net.paramInfos(), net.paramOffsets(), net.statisticInfos(), net.statisticOffsets()};
    }
};

// Writes atomically (AtomicFile): a crash leaves the previous file at `path`, or none.
void writeCheckpoint(const std::string& path, const CheckpointMeta& meta, const TrainingSnapshot& snap,
                     const VariableLayout& layout);

class Checkpoint {
public:
    // Checks the format and version and, with `verify`, every tensor's bytes against the CRC-32C
    // the writer kept in the metadata ("checksums"): a flipped bit is refused naming its tensor.
    // Checkpoints written before checksums load unverified, with note() saying so.
    static Checkpoint open(const std::string& path, bool verify = true);
    // The metadata alone, checked as open() checks it, from the file's header (a few KB of a file
    // that may hold gigabytes): the tensors are neither read nor verified. For what needs only the
    // step, an accuracy or the settings, beside the open() that loads the checkpoint.
    static CheckpointMeta readMeta(const std::string& path);
    const std::string& path() const { return file_.origin(); }
    const CheckpointMeta& meta() const { return meta_; }
    const safetensors::File& file() const { return file_; }
    // "" or one sentence to show beside what loads this checkpoint (it carries no checksums).
    const std::string& note() const { return note_; }

    // The variables laid out for `layout` (P floats); refuses other names or shapes.
    std::vector<float> loadWeights(const Network& layout) const;
    // Batch norm's moving statistics laid out for `layout` (statisticCount floats; empty for a
    // model without batch norm); refuses a missing one or another shape.
    std::vector<float> loadStatistics(const Network& layout) const;
    // Why `config` cannot continue this checkpoint exactly (empty: it can). The settings that
    // may change: steps, epochs, evaluation, checkpoints, metrics, quiet, prefetch.
    std::string resumeProblem(const RunConfig& config, const std::string& modelSpec) const;
    // dst := the state buffer `name` (count floats, as state/NAME), refused where missing or of another size.
    void readState(const std::string& name, float* dst, size_t count) const { file_.readFloats("state/" + name, dst, count); }
    // Restores variables, EMA and state into a freshly built run of the same plan; `process`:
    // where the state differs by process (TrainingEngine::stateDiffersByProcess), this process's
    // rank, whose own state the chief saved as state/process<rank>/... (the chief's own: -1).
    void restore(TrainingEngine& towers, const Network& layout, WeightEma* ema, Stream emaStream, int process = -1) const;

private:
    void verifyChecksums();
    void readMetadata();  // meta_ from file_'s metadata

    safetensors::File file_;
    CheckpointMeta meta_;
    std::string note_;
};

// The run-config keys a resume may change (they do not shape the training's arithmetic).
const std::vector<std::string>& resumeMayChange();

}  // namespace tb
