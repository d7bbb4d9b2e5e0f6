// RunConfig: every setting of a training run. A run config file (JSON) and towerbench-run's
// flags are the same settings: a file key `eval_every` is the flag `--eval-every`, both go
// through set(), and flags are applied after the file so they override it.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tb {

// --augment: "auto" (CIFAR-10 sets get the tutorial's distorted_inputs, others none), "none", or
// a comma list of crop:P (a random window of the image padded by P zero pixels a side), flip,
// brightness:D (+-D/255), contrast:LOW:HIGH (factors about the channel mean); parts left out are off.
struct AugmentSettings {
    bool automatic = true, enabled = false;
    int pad = 0;
    bool flip = false;
    float brightness = 0.0f, contrastLow = 1.0f, contrastHigh = 1.0f;
    static AugmentSettings parse(const std::string& text, const std::string& origin);
};

struct RunConfig {
    static constexpr int kMaxBatch = 65536;  // examples of one step, over all towers together
    static constexpr int kMaxReportLag = 16;  // --report-lag: steps in flight, each with its own recorded graph
    std::string model = "mnist_cnn";     // a name in the models folders, or a .json path
    std::string data = "fashion-mnist";  // fashion-mnist | idx:DIR | cifar10:DIR | tfrecord:DIR | synthetic:blobs|spirals
    std::string tfrecordFeatures;        // tfrecord:DIR: image=KEY,label=KEY,... (default image_raw, label)
    bool skipBadImages = false;          // folder:DIR: leave unreadable images out (counted, named) instead of stopping
    std::string augment = "auto";        // training augmentation (AugmentSettings)
    std::string normalise = "auto";      // auto (CIFAR-10: standardize), none, standardize (per image), mean-std (per channel, the training split's)
    int batch = 128;
    int64_t steps = 0;                   // > 0 wins over epochs
    double epochs = 1.0;
    std::string optimizer = "momentum";  // sgd | momentum | nesterov | adam
    double lr = 0.01;
    double momentum = 0.9;
    int64_t lrDecaySteps = 0;            // 0: constant learning rate
    double lrDecayRate = 0.1;
    bool lrStaircase = true;
    std::string lrDecay = "exponential";  // exponential | cosine (to 0 over lrDecaySteps)
    int64_t warmupSteps = 0;             // the learning rate ramps up linearly over the first N steps
    // Large batches (Goyal et al. 2017): linear scales the learning rate by the update's batch
    // (batch x accumulate) over lrReferenceBatch.
    std::string lrScaling = "none";      // none | linear
    int lrReferenceBatch = 256;
    // Gradient accumulation: an update after K micro-steps of `batch` examples each (one step on
    // K x batch; batch norm's statistics per micro-step).
    int accumulate = 1;
    // Batch norm's statistics summed over every tower and process each step (PyTorch's
    // SyncBatchNorm); off: each tower's own batch (TensorFlow's towers).
    bool syncBn = false;
    // Steps the host reads each step's results late (DeploymentPlan::reportLag); -1: automatic.
    int reportLag = -1;
    double emaDecay = 0.0;               // 0: no moving average; else evaluate with averaged weights
    uint64_t seed = 1;
    int64_t evalEvery = 0;               // steps between validation passes; 0: only at the end
    int64_t validation = -1;             // training samples held out; -1: 10% of the training set, at most 5000
    int64_t shuffleBuffer = 0;           // 0: the whole training set (streamed: kDefaultStreamBuffer records)
    std::string stream = "auto";         // tfrecord:DIR: stream the training shards (true), hold them (false), or auto
    int loaderThreads = 0;               // threads decoding a streamed set's batches; 0: automatic (run_setup.hpp)
    int prefetch = -1;                   // batches made ahead on the loader thread; -1: automatic (trainer.cpp)
    int threads = 0;                     // 0: all cores
    std::string metrics;                 // JSON-lines metrics file; empty: none
    bool quiet = false;
    // Deployment (see parallel/deployment_plan.hpp).
    std::string towers = "cpu:0";        // cpu:0,cpu:1,... | gpu:0,... | auto
    std::string variables = "cpu";      // cpu | a tower's device | replicated
    std::string reduce = "mean";         // mean | allreduce
    std::string update = "sync";         // sync | async
    int averageEvery = 0;                // K >= 1: parameters averaged every K steps; 0: off
    int psShards = 1;                    // S parameter-server shards
    int psTasks = 0;                     // mpirun: the first P processes are parameter servers
    int batchPerTower = 0;               // 0: batch / towers
    // Model parallelism (parallel/stage_plan.hpp, pipeline_schedule.hpp): the model's layers split
    // over stages; empty: data parallelism only.
    std::string stages;                  // N | DEV,DEV,... | DEV*K | DEV=FROM..TO,... | auto
    std::string pipeline;                // naive | gpipe | 1f1b; empty: naive (given --stages)
    int microBatches = 1;                // each replica's share of the batch cut into M for gpipe and 1f1b
    int stageReplicas = 1;               // hybrid: R copies of the pipeline, data parallel between them
    // mpirun -np S: process r runs stage r alone, on every global batch, the activations and
    // their gradients sent between the processes (model parallelism across processes). Off: every
    // process runs every stage on its share of the batch (stages x processes).
    bool stagePerProcess = false;
    std::string slow;                    // straggler injection: TOWER=FACTOR,...
    bool tf32 = false;                   // GPU towers: tensor-core TF32 math (default plain FP32)
    bool deterministic = true;           // GPU towers: deterministic cuDNN algorithms only (false: the
                                         // fastest, atomics included, so two runs may differ)
    std::string precision = "fp32";      // fp32 | bf16: the matrix work's inputs (mixed precision)
    std::string transfers = "auto";      // auto | copies | nccl (parallel/deployment_plan.hpp)
    std::string commPrecision = "fp32";  // fp32 | bf16: the gradients on the wire (DeploymentPlan::commPrecision)
    // Checkpoints in the run's folder (engine/checkpoint.hpp), always one at the end as well.
    int64_t checkpointEvery = 0;         // steps between checkpoints; 0: by time only
    double checkpointMinutes = 10;       // minutes between checkpoints; 0: by steps only
    int keepCheckpoints = 3;             // the last K kept (and the best by validation accuracy)
    std::string initFrom;                // a checkpoint whose weights the run starts from; empty: none
    std::string file;                    // not a setting: the run config file loadFile read, if any

    // Sets one setting by its file key from a JSON value; `origin` names the file or flag in errors.
    void set(const std::string& key, const nlohmann::json& value, const std::string& origin);
    // Parses a flag's text (--batch 64) into the key's type and sets it.
    void setFromText(const std::string& key, const std::string& text, const std::string& origin);
    void loadFile(const std::string& path);
    void validate() const;               // cross-setting checks, before anything starts
    void validateStages() const;         // --stages, --pipeline, --micro-batches (model parallelism)
    // The towers and how they meet (towers, variables, reduce, update, gradients' precision,
    // averaging, parameter servers, stragglers) back to their defaults, one CPU tower: what a run
    // of stages takes (validateStages refuses the others), e.g. the form's model parallelism.
    void clearTowerStrategy();
    // A message about a setting starts with its flag ("--lr: must be positive"); where the value
    // came from a file, this names the file and key instead ("run.json: 'lr': must be positive").
    std::string explain(const std::string& message) const;
    nlohmann::json toJson() const;
    // What a saved file needs to give this config back: the settings that differ from the
    // defaults, and those named in `alsoKeep` (the keys of the file it was opened from, so
    // opening then saving gives the same file).
    nlohmann::json changes(const std::set<std::string>& alsoKeep) const;
    // The keys the file or flag `origin` set last (loadFile's origin is the file's path).
    std::set<std::string> keysFrom(const std::string& origin) const;

    static const std::vector<std::string>& keys();
    static std::string flagToKey(const std::string& flag);  // "--eval-every" -> "eval_every"
    static std::string keyToFlag(const std::string& key);   // "eval_every" -> "--eval-every"

private:
    std::map<std::string, std::string> origins_;  // key -> the file or flag that set it last
};

}  // namespace tb
