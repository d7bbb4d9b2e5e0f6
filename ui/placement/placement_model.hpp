// PlacementModel: what the placement diagram draws, a plain value derived from a deployment plan
// (compared by tests): the variables' holder, the towers and their devices, the links between them
// and the bytes each carries per step, as the bytes table in docs/user-guide.md counts them.
#pragma once
#include <QString>
#include <QVector>

#include "io/run_config.hpp"
#include "nn/model_spec.hpp"
#include "parallel/deployment_plan.hpp"

struct PlacementModel {
    struct Tower {
        QString device;      // "cpu:0"
        int batch = 0;       // examples per step
        double slowdown = 1; // > 1: an injected straggler
        bool local = false;  // on the holder's own device: reads the variables in place, nothing moves
        int process = 0;     // processes: the rank of the process (machine) the tower runs in
        bool operator==(const Tower&) const = default;  // without it the model's == is deleted
    };
    enum class Links { HolderArrows, Ring, Shards };
    // Consecutive towers on one device: several towers sharing a GPU, framed as one.
    struct DeviceGroup {
        QString device;
        int first = 0, count = 0;
        bool operator==(const DeviceGroup&) const = default;
    };
    QVector<Tower> towers;
    QString holder;          // "cpu" or a tower's device; empty when replicated
    Links links = Links::HolderArrows;
    bool async = false;
    int averageEvery = 0;    // > 0: parameters averaged every K steps (replicated)
    int psShards = 1;
    int64_t paramCount = 0;  // P: the variables are P x 4 bytes
    int gradientBytes = 4;   // G: bytes of a gradient element on the wire (2 with --comm-precision bf16)
    QVector<int64_t> variableSizes;  // elements of each variable (tensor) in the model's order; may be empty
    // Processes (mpirun): `processes` ranks in all, the first `serverProcesses` of them holding the
    // variables' shards (drawn apart, as the shards), each other one a machine box around its
    // towers (the plan's towers, repeated per process).
    int processes = 1;
    int serverProcesses = 0;
    // Model parallelism (--stages): the stages left to right, a row per replica of the pipeline,
    // each box its device and layers ("split at start" where the run balances them by measured
    // time); per boundary between stage s and s+1, the bytes of the activations that go forward
    // over a step (batch / replicas x the boundary layer's outputs x 4; the window divides by
    // its processes, each training its share of the batch), as many coming back as
    // their gradients (0: not known before the split is). CPU stages share memory, so none of it
    // crosses between memories (bytes_moved stays 0), unless copied explicitly (--transfers
    // copies: each stage copies into buffers of its own, and bytes_moved counts both ways): the
    // caption says which.
    struct StageBox {
        QString device, layers;
        int replica = 0;
        bool operator==(const StageBox&) const = default;
    };
    QVector<StageBox> stages;
    QVector<int64_t> boundaryBytes;
    QString schedule;
    int microBatches = 1, stageReplicas = 1;
    bool stageCopies = false;
    // Each stage in an mpirun process of its own (--stage-per-process): every boundary's bytes
    // cross between processes, as MPI messages; each box names its process.
    bool stagePerProcess = false;
    // --sync-bn: batch norm's statistics summed over the towers (or a stage's replicas) and
    // processes at every batch norm, forward and back, beside the gradients.
    bool syncBatchNorm = false;

    static PlacementModel fromPlan(const tb::DeploymentPlan& plan, int64_t paramCount);
    // A run with --stages: its stages and boundaries (throws tb::Error where the stages do not
    // read against the model).
    static PlacementModel fromStages(const tb::RunConfig& config, const tb::ModelSpec& spec);
    // The same knowing each variable's size (Network::paramInfos()), so shards can be sized.
    static PlacementModel fromPlan(const tb::DeploymentPlan& plan, const QVector<int64_t>& variableSizes);
    // The same plan run by `processes` processes (--ps-tasks `servers` of them); a global batch
    // (batchPerTowerGiven false) is split over the worker processes too.
    PlacementModel acrossProcesses(int processes, int servers, bool batchPerTowerGiven) const;
    // Processes: the towers of each worker process, framed as its machine ("process 1 (chief)").
    QVector<DeviceGroup> processFrames() const;
    double variablesMB() const { return double(paramCount) * 4.0 / 1e6; }
    // Arrows the diagram draws: 2 per tower off the holder's device (parameters out, gradients
    // back), to the holder or, with shards (asynchronous updates, where shards have locks of
    // their own; parameter-server processes), to the bus that reaches every shard; Ring one per tower (tower i -> i+1 mod N;
    // none for 1 tower).
    int arrowCount() const;
    // Shards: variables are dealt round-robin, variable v to shard v mod S (as
    // AsyncParameterServer deals them); how many each holds and their bytes (0 when the
    // variables' sizes are unknown).
    int shardVariables(int shard) const;
    int64_t shardBytes(int shard) const;
    // What a whole step (async: update) moves, as docs/user-guide.md's bytes table counts it, and the line
    // that says so under the diagram: "52.4 MB per step (2 × M × P × 4, M = 2)"; with bf16
    // gradients "39.3 MB per step (M × P × (4 + 2), M = 2)".
    int64_t bytesPerStep() const;
    QString bytesLabel() const;
    // Variables down and gradients up, for `towers` towers ("M"; empty: one): "2 × M × P × 4",
    // "M × P × (4 + 2)" with bf16 gradients.
    QString bothWays(const QString& towers = {}) const;

    // What moves, as docs/user-guide.md's bytes table counts it; per step, or per update when asynchronous.
    // HolderArrows and Shards: bytes each way (variables down, gradients up) between the holder
    // and a tower off its device, P x 4 (the gradients' way P x G); 0 for a tower on it, and for replicated towers; with
    // parameter-server processes, P x 4 for each worker's first tower (its towers' mean), else 0.
    int64_t linkBytes(int tower) const;
    // The link those bytes cross: "host↔GPU" (a GPU tower, variables on the host), "GPU↔GPU"
    // (variables on another GPU); empty where nothing moves or CPU towers share the host's memory.
    QString linkKind(int tower) const;
    QString linkLabel(int tower) const;  // "13.1 MB ↓↑ per step"; empty where nothing moves
    // Ring: D distinct devices among the towers (processes: D worker processes, which meet after
    // their towers have); a ring all-reduce sends 2(D−1)/D × P × 4 bytes from each device
    // (nothing when D = 1: towers on one GPU reduce on the device).
    int distinctDevices() const;
    double ringBytesPerDevice() const;
    QString ringLabel() const;           // "all-reduce: 19.7 MB per GPU per step (2(D−1)/D × P × 4, D = 4)"
    QVector<DeviceGroup> sharedDevices() const;  // groups of 2 or more, within one process
    bool operator==(const PlacementModel&) const = default;
};

