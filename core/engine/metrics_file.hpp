// MetricsFile: an observer that writes one JSON object per line (JSON Lines) for every step,
// evaluation and state change. Schema, one "type" per line:
//   {"type":"state","state":"running","detail":"cpu (oneDNN 2.6.3, 2 threads)","time":...}
//   {"type":"step","step":12,"total_steps":469,"epoch":0.0256,"loss":0.71,"accuracy":0.76,"lr":0.01,
//    "examples_per_sec":612.3,"step_ms":209.1,"data_wait_ms":0.02,"compute_ms":209.0,"elapsed_s":2.5,
//    "bytes_moved":26197072,"examples":128,"towers":[{"busy":0.97,"loss":0.70,"accuracy":0.77,"data_wait_ms":0.01,
//    "forward_ms":60.2,"backward_ms":130.4,"reduce_ms":1.9,"wait_ms":3.1,"apply_ms":2.2,"straggle_ms":0}, ...]}
//   async steps add "pusher" (the tower whose update it was) and "staleness" (updates since its pull);
//   averaging steps add "averaged":true where the replicas were averaged after them.
//   {"type":"eval","step":469,"split":"test","loss":0.31,"accuracy":0.89,"examples":10000,"ema":false}
//   {"type":"layer_times","step":400,"forward_ms":[4.6,0.0,...],"backward_ms":[16.0,0.0,...]}
//   after a step tower 0 profiled (TowerSet::kProfileEvery): each layer's time, in the model's order;
//   {"type":"device","t":12.4,"time_unix":1718000000.25,"index":0,"name":"NVIDIA H100 80GB HBM3",
//    "util_gpu":97,"util_mem":41,"mem_used_bytes":12345678848,"mem_total_bytes":85520809984,
//    "power_w":512.3,"temp_c":61,"sm_clock_mhz":1980,"pcie_tx_mbps":120.4,"pcie_rx_mbps":2210.5}
//   one line per GPU per monitor batch (runs with GPU towers, ~5 per second); t is seconds since
//   training started (the clock of "elapsed_s"); a reading NVML could not give is null.
#pragma once
#include <cstdint>
#include <cstdio>
#include <istream>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/observer.hpp"

namespace tb {

// One line of a metrics file read back (a window following a run another process writes):
// its steps, evaluations, states and profiled layer times as the observer calls that wrote them;
// device lines and lines of no known type are left out (false).
struct MetricsLine {
    enum class Kind { Step, Eval, State, LayerTimes } kind = Kind::State;
    StepMetrics step;  // for LayerTimes, only its step number
    EvalResult eval;
    std::string state, detail;
    LayerTimes layers;  // tower 0's profiled step, per layer of the model (seconds)
};
bool parseMetricsLine(const std::string& line, MetricsLine& out);
bool parseMetricsJson(const nlohmann::json& line, MetricsLine& out);  // the same, already parsed
// The last layer_times line of a metrics file, read from its end (util/file_tail.hpp): one comes
// every TowerSet::kProfileEvery steps. False where the file's last `limit` bytes hold none that
// parses (a run too short to profile, or one from before layer times were written).
bool lastLayerTimes(std::istream& in, MetricsLine& out, int64_t limit = int64_t(16) << 20);
// A resumed run's metrics file cut back to its checkpoint at step `lastStep`: the lines before the
// first whose "step" is past it, less the states that ended the earlier run (it goes on), as
// RunFolder::begin rewrites the file. Returns the text kept; `past`, where given, receives the
// steps and evaluations among it, read back (the window charts them as the run's history).
std::string metricsUpToCheckpoint(std::istream& in, int64_t lastStep, std::vector<MetricsLine>* past = nullptr);
// An evaluation's confusion counts as rows (true class) of columns (predicted); null if it has none.
nlohmann::json confusionRows(const EvalResult& r);

class MetricsFile final : public TrainingObserver {
public:
    // Throws tb::Error if it cannot be created, and from any call that cannot write it (a full
    // disk: the run ends with the error instead of losing its record); `origin` (the flag, or
    // "run folder") starts those errors. `append`: continue a file (a resumed run).
    // Open::WhenRunning: the file is created (emptied) only when the run starts running, after
    // its inputs were read and checked; the lines before wait in memory, and a run refused
    // while loading leaves the file as it was.
    enum class Open { Now, WhenRunning };
    explicit MetricsFile(const std::string& path, bool append = false, std::string origin = "--metrics",
                         Open when = Open::Now);
    ~MetricsFile() override;
    void onStateChanged(RunState, const std::string& detail) override;
    void onStepEnd(const StepMetrics&) override;
    void onEval(const EvalResult&) override;
    void onDeviceSamples(const std::vector<DeviceSample>&) override;
    bool lossless() const override { return true; }  // a file: every step

private:
    void open();
    void write(const std::string& line);
    std::string path_, origin_;
    bool append_;
    std::FILE* file_ = nullptr;
    std::string waiting_;  // lines before the file opened (Open::WhenRunning), each ending in '\n'

};

}  // namespace tb
