// StagePipeline: model parallelism (issue 32). A model's layers split into S consecutive stages,
// each a Network over its layers on its own device and thread; a step's batch is cut into M
// micro-batches that flow forward through the stages and whose gradients flow back, in the
// order a PipelineSchedule gives each stage. Each stage holds its own slice of the variables
// and its optimiser, accumulates its micro-batches' gradients and applies its update once it has
// run its last backward: one update per step from the gradient of the whole batch, as one device
// computes it.
//
// A stage keeps as many copies of its activations (slots) as its schedule holds micro-batches at
// once (activationsHeld): micro-batch m uses slot m % slots. Neighbours in one memory (CPU stages,
// or stages sharing a GPU as gpu:0*2, each on a stream of its own) share it: a stage reads its
// input where the stage before wrote it and writes its input's gradient into the stage before's
// slot, so nothing crosses between memories (bytesMoved 0, as the communicators count it). With
// explicit copies (StagePipelineSetup::copies) each stage copies them into buffers of its own, and
// the bytes are counted. Stages on two GPUs are linked by NCCL: the stage before sends each
// micro-batch's activations (ncclSend, on a stream of its own so its next forward need not wait
// for the receive) and the stage after receives them (ncclRecv, on its compute stream, once the
// stage before has said they are computed); gradients go back the same way on a second pair of
// communicators, so each direction is one ordered queue and neither waits behind the other.
// Without NCCL, two GPUs copy (cudaMemcpy between devices). Stages on CPUs and GPUs together,
// replicas of GPU stages and GPU stages across processes are refused.
#pragma once
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/registry.hpp"
#include "comm/process_group.hpp"
#include "data/pipeline.hpp"
#include "nn/network.hpp"
#include "optim/optimizer.hpp"
#include "parallel/pipeline_block.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/statistics_meeting.hpp"
#include "parallel/strategy.hpp"

namespace tb {

struct StagePipelineSetup {
    std::vector<std::pair<int, int>> ranges;  // each stage's first and last layer
    std::vector<Device> devices;              // each stage's (CPU: a thread team of its own)
    int batch = 0;                            // the step's examples
    int microBatches = 1;                     // per replica; replicas x microBatches divides batch
    // Hybrid parallelism: R copies of the pipeline, each on its 1/R of the batch (data parallel
    // inside the pipeline); a stage's copies sum their gradients before its one update. Replica
    // r's stage s runs on a thread team of its own (a CPU device numbered s + S r; with a stage
    // per process, the stage's own device in process r S + s).
    int replicas = 1;
    int threadsPerStage = 1;
    OptimizerSettings opt;
    uint64_t seed = 0;                        // initial variables
    // The lecture's hybrid across processes (mpirun): every process runs this pipeline on its
    // share of the global batch, each stage's gradient averaged over the processes (an all-reduce
    // on lane s, the stage's own) before its update, so every process's copy of the variables
    // stays equal. exampleOffset: where this process's share starts in the global batch, so each
    // micro-batch draws its rows of the dropout masks one device would draw. Null: one process.
    ProcessGroup* processes = nullptr;
    int64_t exampleOffset = 0;
    // Model parallelism across processes (--stage-per-process): only stage `localStage` is built
    // here, process s of `processes` running stage s; the activations go forward and their
    // gradients back as MPI messages (each direction a lane of its own), and the processes' step
    // reports are gathered so that every process reports every stage. -1: every stage here.
    // With replicas (S x R processes): process r S + s runs stage s of replica r (localReplica
    // r), its rows of every global batch those of replica r; each stage's R processes sum their
    // gradients (MPI messages on a lane of their own) before each applies the same update.
    int localStage = -1;
    int localReplica = 0;
    // Host memory of the whole model's variables (paramCount floats) that CPU stages keep their
    // slices in, so one buffer holds them all (evaluation reads it as one network); null: each
    // stage allocates its own.
    float* sharedParams = nullptr;
    // --transfers copies: each stage keeps its input and its input's gradient in buffers of its
    // own and copies the activations in from the stage before, and the gradient back from the
    // stage after, as stages in separate memories must (what GPUs on separate devices move),
    // each copy counted in bytesMoved. Off: neighbours read and write each other's buffers.
    bool copies = false;
    // --sync-bn: each batch norm's statistics summed over the stage's replicas (and processes),
    // micro-batch by micro-batch (StatisticsMeeting); CPU stages. Off: each replica's micro-batch
    // is normalised by its own.
    bool syncBatchNorm = false;
};

// What one step did. Lanes are a stage of a replica each, replica by replica (lane r S + s).
struct PipelineStep {
    double lossSum = 0, correct = 0;  // over the step's examples
    double weightDecayLoss = 0;
    int examples = 0;
    float lr = 0;
    double seconds = 0;  // the step's wall time, updates included
    // From the step's start to the end of its last backward (the pipeline's flush).
    double span = 0;
    // Per lane: forward and backward seconds, its stage's update where it made it (the last of
    // the stage's replicas in a process to finish sums their gradients and applies them; with a
    // stage per process, every replica's process, its wait for the others' sum included), the seconds of busy
    // spent adding a micro-batch's gradient to the step's (memory-bound: the stage's parameters
    // read twice and written once per micro-batch after the first), its blocks in the order run,
    // and its loss sum, correct count and examples (the last stage's lanes; NaN and 0 elsewhere).
    std::vector<double> busy, apply, accumulate;
    std::vector<std::vector<PipelineBlock>> blocks;
    std::vector<double> laneLoss, laneCorrect;
    std::vector<int> laneExamples;
    // The lanes' idle share of the span: 1 - sum(busy) / (lanes x span).
    double bubbleFraction = 0;
    int64_t bytesMoved = 0;  // activations and their gradients that crossed between memories
};

// What is built of stages' devices: all CPUs or all GPUs (existing ones), GPU stages without
// replicas or processes. Throws tb::Error, one sentence naming the flag, before anything is made.
void checkStageDevices(const std::vector<Device>& devices, int replicas, bool processes);

// Whether a stage on `device` keeps its input (and its input's gradient) in buffers of its own
// rather than reading the stage before's (on `prev`): with explicit copies, or on another GPU
// (CPU stages share host memory; stages on one GPU share its memory).
inline bool ownsInput(const Device& prev, const Device& device, bool copies) {
    return copies || (device.type == DeviceType::Cuda && device != prev);
}

class StagePipeline {
public:
    StagePipeline(const ModelSpec& spec, const StagePipelineSetup& setup, const PipelineSchedule& schedule);
    ~StagePipeline();
    StagePipeline(const StagePipeline&) = delete;
    StagePipeline& operator=(const StagePipeline&) = delete;

    int stages() const { return count_; }  // the model's, also those in other processes
    int replicas() const { return allReplicas_; }  // the pipeline's, also those in other processes
    int lanes() const { return count_ * allReplicas_; }
    Device laneDevice(int lane) const;
    int microBatches() const { return micro_; }
    int64_t paramCount() const { return paramCount_; }
    // One step on `global` (batch examples, (n, h, w, c)): every micro-batch forward and back,
    // then each stage's update. `seed` draws the dropout masks as one device's forward of the
    // whole batch with that seed would.
    PipelineStep step(const Batch& global, int64_t step, uint64_t seed);
    // The whole model's variables (flat, in the model's order), into paramCount floats of host
    // memory or as a vector, and setting them.
    void variablesInto(float* host) const;
    std::vector<float> variables() const;
    void setVariables(const float* host);
    // Batch norm's moving statistics of the stages (flat, in the model's order: the whole model's
    // Network::statisticCount floats of host memory): this process's first replica's (replica
    // 0's but in a replica's own process) into it, or every replica's here set.
    void statisticsInto(float* host) const;
    void setStatistics(const float* host);
    // Stages in processes of their own: brings every stage's variables (into `host`, the whole
    // model's paramCount floats, whose local stage's slice is already current), optimiser slots
    // and batch norm's moving statistics (into `statistics`, the whole model's statisticCount
    // floats; null for a model without batch norm) to the chief (process 0), which evaluates and
    // writes the checkpoints; and, where `average` is given, the run's moving average of the
    // variables (on the chief the whole model's floats, in a stage's process its stage's). These
    // come from replica 0's processes; from the other replicas', their batch norm statistics (for
    // the checkpoint's state). A collective: every process calls it at the same point between
    // steps. Elsewhere nothing to do.
    void gatherToChief(float* host, float* statistics, float* average);
    bool spansProcesses() const { return localStage_ >= 0; }
    // Stages in each of several processes, batch norm without --sync-bn: each process's replicas
    // keep moving statistics of their own batches (the CPU batch norm shifts its sums by them),
    // so state() lists replica 0's too and a checkpoint keeps every process's.
    bool statisticsDifferByProcess() const;
    // Stages in processes of their own: this process's stage's variables, their place in the
    // model's, and their floats (host memory: CPU stages), as they train.
    ParamSlice localSlice() const;
    float* localParams() const;
    // Each stage's optimiser slots ("stage1/optimizer/m"), for checkpoints (stages in processes of
    // their own: this process's; on the chief also the others', as last gathered); their bytes.
    std::vector<StateBuffer> state();
    size_t optimizerSlotBytes() const;
    std::string backendName() const;  // stage 0's backend
    // The GPUs' backends (one per GPU the stages are on; none for CPU stages).
    const std::vector<std::shared_ptr<Backend>>& gpuBackends() const { return gpuBackends_; }
    // Bytes of activations one replica of a stage holds at most: its slots' layer outputs, saved
    // buffers, gradient buffers and workspaces (gpipe: M micro-batches' worth; 1f1b: at most S - s).
    size_t activationBytes(int stage) const;
    int heldMicroBatches(int stage) const;
    // Everything stage `stage` allocated here, its replicas here together (a stage per process:
    // its one replica, with replica 0's buffer for the others' gradients): its variables (its own
    // buffer or its slice of sharedParams), optimiser slots, each replica's gradients and
    // micro-batch scratch, and activationBytes per replica: what estimateStageBytes predicts.
    size_t stageBytes(int stage) const;

private:
    struct Stage;   // a stage's variables, its replicas' gradients and its optimiser
    struct Worker;  // one replica of one stage: its thread, networks and timeline
    struct Lane;    // what one lane did in a step, as step() reports it
    class StatisticsSync;  // --sync-bn: a replica's batch norms' way into its stage's meeting
    // What the chief keeps of a stage in another process (--stage-per-process): where its slice
    // of the variables is, and its optimiser slots as last gathered, for checkpoints.
    struct Mirror {
        int index = 0;
        int64_t offset = 0, count = 0;
        int64_t statOffset = 0, statCount = 0;  // its batch norm's moving statistics in the model's
        std::unique_ptr<Optimizer> optimizer;
    };
    // A stage's sizes, for stages in other processes as their process measured them.
    struct StageSizes {
        size_t activations = 0, allocated = 0, optimizerSlots = 0;
        int held = 0;
    };
    std::vector<Lane> gatherLanes(std::vector<Lane> local);
    bool local(int stage) const { return stage >= first_ && stage < first_ + local_; }
    void runWorker(Worker& w);
    void runStep(Worker& w);
    void update(Worker& w);
    bool waitFor(std::atomic<int>& done, int micro);
    void fail();
    std::shared_ptr<Backend> backendFor(const Device& d, const StagePipelineSetup& setup);
    void link(Worker& w, Worker& prev, bool copies);
    void linkToProcess(Worker& w);
    void shareAcrossProcesses(const ModelSpec& spec, const StagePipelineSetup& setup);
    void synchroniseBatchNorm();
    void send(Worker& w, Stream queue, NcclGroup& group, int rank, const float* buf, size_t count, Event sent);
    void sumOverReplicaProcesses(int stage, float* data, float* scratch, size_t n, int upTag, Backend& be, Stream s);
    // Stages in processes of their own: the process running stage `stage` of replica `replica`.
    int rankOf(int replica, int stage) const { return replica * count_ + stage; }
    static void connect(NcclGroup& group, int sender, Worker& from, Stream out, const float* src, Worker& to,
                        Stream in, float* dst, size_t count);
    // In workers_: a replica (of the pipeline's, from firstReplica_) and a stage here.
    size_t at(int replica, int stage) const { return size_t((replica - firstReplica_) * local_ + stage - first_); }
    bool localReplica(int replica) const { return replica >= firstReplica_ && replica < firstReplica_ + replicas_; }
    Worker& worker(int replica, int stage) { return *workers_[at(replica, stage)]; }

    int count_, localStage_, first_, local_;  // stages: all, this process's (or -1), the first and how many here
    // Replicas: of the pipeline here (1 in a stage's process), of the whole pipeline, the first here.
    int micro_, microBatch_, replicas_, allReplicas_, firstReplica_;
    Dims input_;                   // the model's input (one example)
    std::vector<Device> devices_;  // each stage's
    std::vector<StageSizes> sizes_;  // stages in other processes
    std::vector<Mirror> mirrors_;    // on the chief, stages in other processes
    // On the chief, replicas 1.. of stages in processes of their own: their batch norm's moving
    // statistics as last gathered, for checkpoints (each replica's differ: its own batches).
    struct ReplicaStatistics {
        int stage = 0, replica = 0;
        Tensor values;
    };
    std::vector<ReplicaStatistics> replicaStatistics_;
    ProcessGroup* processes_;
    int64_t exampleOffset_;
    int64_t paramCount_ = 0;
    std::vector<std::unique_ptr<Stage>> stages_;
    std::vector<std::unique_ptr<Worker>> workers_;  // replica by replica
    std::vector<std::shared_ptr<Backend>> gpuBackends_;  // one per GPU, shared by its stages' streams
    // --sync-bn: a meeting per stage here with batch norm, a sync per worker of such a stage.
    std::vector<std::unique_ptr<StatisticsMeeting>> meetings_;
    std::vector<std::unique_ptr<StatisticsSync>> syncs_;
    std::barrier<> start_, done_;
    std::atomic<bool> quit_{false}, failed_{false};
    // The step being run: set before start_, read by the workers.
    const Batch* batch_ = nullptr;
    int64_t step_ = 0;
    uint64_t seed_ = 0;
    std::chrono::steady_clock::time_point t0_;
};

}  // namespace tb
