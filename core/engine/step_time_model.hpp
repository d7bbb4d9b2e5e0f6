// StepTimeModel: the what-if predictor. From one measured run (its Calibration) it predicts a
// data-parallel step's time, and where it goes, for a deployment the user describes: more or
// fewer towers, threads per tower and cores, batch per tower, strategy (mean on the holder,
// all-reduce, async parameter server with S shards, averaging every K), stragglers, and other
// hardware (GPU towers by FLOP/s and memory bandwidth, their links to the holder, N machines).
//
// The model, per step of one tower (b examples, P parameters of 4 bytes, B = 4P):
//   compute   c1 * b * (s + (1 - s)/T) * max(1, towers*T/cores) on CPU towers: c1 the measured
//             seconds per example on one thread, s the serial share (Amdahl), T threads; on a
//             device, c1 * b * hostCoreFlops / deviceFlops (the same share of its peak as here)
//   straggle  (F - 1) * compute for a tower F times slower
//   wait      sync: the slowest tower's data + compute + straggle minus this tower's
//   transfer  alpha + bytes / beta for every transfer (latency-bandwidth): CPU towers reduce in
//             shared memory (holder mean: B(1 + 1/N) per tower; all-reduce: B(2 + 1/N), two
//             barriers); a device's link carries B down and B up per step to a CPU holder;
//             ring all-reduce moves 2(N-1)/N B per device; parameter servers split the
//             holder's traffic over S shards; averaging every K divides it by K
//   apply     the measured seconds per parameter, times P/N (holder: each tower its chunk) or P
//             (replicas, async pushes)
//   async     no wait; each tower cycles on its own; the holder applies one push at a time per
//             shard (a queue); mean staleness N - 1
//   data      the input pipeline's wait per step as measured (it kept up there; it is assumed to)
//   other     the calibration's wall time per step beyond its measured data, compute and apply
//             and its modelled transfers (the loop, hand-overs, and any wait it measured where
//             the model predicts none), kept as a fixed cost: the model reproduces its calibration
// The engine does not overlap transfers with compute: the terms add up.
// Calibrated from a sweep of towers sharing one GPU (Calibration::fromDeviceSweep), the model
// predicts towers on that GPU instead (termsOnMeasuredDevice in the .cpp says how).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/step_profile.hpp"

namespace tb {

struct SweepResult;
struct SweepFile;

// Whether a strategy keeps a replica of the variables on every tower's device (allreduce,
// average:K) rather than on the CPU holder (mean, async).
bool variablesReplicated(const std::string& strategy);

struct ProcessorSpec {
    std::string name;
    double flops = 0;            // peak fp32 FLOP/s (no tensor cores)
    double memoryBandwidth = 0;  // bytes/s
};
struct LinkSpec {
    std::string name;
    double latency = 0;    // seconds per transfer
    double bandwidth = 0;  // bytes/s, each direction
};
// Presets: h100, a100, v100, l4, rtx4090; pcie4, pcie5, nvlink, 10gbe, 100gbe, infiniband.
const std::vector<ProcessorSpec>& processorPresets();
const std::vector<LinkSpec>& linkPresets();
// A preset by name, or "NAME:TFLOPS:GBPS" / "NAME:LATENCY_US:GBPS"; throws tb::Error naming `flag`.
ProcessorSpec parseProcessor(const std::string& text, const std::string& flag);
LinkSpec parseLink(const std::string& text, const std::string& flag);

// What one core of this machine does, measured (a 512 x 512 sgemm; a copy of 64 MiB).
struct HostCore {
    double flops = 0;      // fp32 FLOP/s
    double bandwidth = 0;  // bytes/s copied
};
HostCore measureHostCore();

// Towers sharing one GPU, measured there (a sweep of `--towers gpu:K*M`): in each place of the
// variables (the host, the GPU), one tower and the most towers the sweep put on it.
struct DeviceCalibration {
    std::string gpu;                        // "gpu:0"
    StepProfile oneOnHost, oneOnGpu;        // steps 0: not measured
    StepProfile sharedOnHost, sharedOnGpu;  // `sharedTowers` towers: mean and all-reduce points
    int sharedTowers = 0;                   // 0: no point beyond one tower
};

// The measured run the model is calibrated from.
struct Calibration {
    StepProfile measured;
    int towers = 1, threadsPerTower = 1, cores = 1, batchPerTower = 1;
    std::string strategy = "mean";  // mean | allreduce | async | average:K
    int64_t params = 0;
    HostCore host;
    // From a sweep's point; `machineCores`: the sweeping machine's cores, which a point with
    // --threads 0 used.
    static Calibration fromSweepPoint(const SweepResult& r, int64_t params, HostCore host, int machineCores);
    // From a sweep of towers sharing one GPU: predictions are for towers on that GPU.
    std::optional<DeviceCalibration> device;
    static Calibration fromDeviceSweep(const SweepFile& f);
};

// The serial share of a CPU tower's compute (Amdahl's s), fitted to a sweep of CPU towers: its
// points whose threads each had a core (towers x threads per tower <= cores), over at least two
// thread counts per tower. Seconds per example = x + y / T, least squares over those points;
// s = x / (x + y), clamped to [0, 1] (1: a tower's threads add nothing, as for a small model whose
// layers are too narrow to split). nullopt where the sweep cannot tell (one thread count per tower,
// GPU towers); `from`, where given, receives the points used, in words.
std::optional<double> fitSerialShare(const SweepFile& f, std::string* from = nullptr);

// Every assumption of the model, each stated and editable (--assume key=value).
struct Assumptions {
    double serialShare = 0.1;      // of a tower's compute that more threads do not speed up
    double hostLatency = 20e-6;    // seconds per barrier of CPU towers
    double hostBandwidth = 0;      // bytes/s of one core's reductions; 0: the measured copy rate
    double dataScale = 1;          // the input pipeline's measured wait per step, times this
    double deviceBandwidth = 1e12; // bytes/s of an all-reduce in one GPU's memory, where no point measured it
    void set(const std::string& key, double value);  // throws tb::Error naming the key
    nlohmann::json toJson() const;
};

struct Scenario {
    int towers = 1;
    int threadsPerTower = 1;
    int cores = 1;                   // CPU towers: the cores they share
    int batchPerTower = 128;
    std::string strategy = "mean";  // mean | allreduce | async | average:K; pipelines (towers: stages,
                                     // batchPerTower: the step's batch): naive | gpipe:M | 1f1b:M
    int psShards = 1;
    std::vector<double> slowdown;    // per tower, >= 1; empty: none
    // Other hardware: GPU towers of `device`, each joined to the CPU holder (and to the others)
    // by `link`, spread over `machines` machines joined by `network`. None: this machine's CPU.
    std::optional<ProcessorSpec> device;
    LinkSpec link, network;
    int machines = 1;
    std::string measuredGpu;         // towers sharing the GPU a device calibration measured ("gpu:0")
    std::string describe() const;    // "4 h100 towers, allreduce, nvlink"
};

struct Prediction {
    double stepSeconds = 0, examplesPerSec = 0;
    StepProfile phases;        // per step of one tower, mean over the towers (seconds)
    double otherSeconds = 0;   // per step beyond the phases, as the calibration run measured it
    double bytesPerTower = 0;  // crossing a link or copied per tower per step
    double meanStaleness = -1;
    double bubbleFraction = -1;  // pipelines: the stages' idle share of the step
    std::string bottleneck;    // one sentence
    nlohmann::json toJson() const;
};

// Data parallelism; a pipeline strategy throws (engine/pipeline_time_model.hpp predicts those).
Prediction predict(const Calibration& cal, const Assumptions& a, const Scenario& s);

}  // namespace tb
