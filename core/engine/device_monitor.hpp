// GPU telemetry: DeviceSample (one GPU at one moment), TelemetrySource (where samples come from;
// NVML in real runs, a fake in tests and the window's previews) and DeviceMonitor (a thread that
// samples a source at a fixed rate and hands each batch to a callback).
// NVML is loaded at run time with dlopen, so tb_core builds and runs where no NVIDIA driver is
// installed; nothing here includes an NVML or CUDA header.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tb {

// One GPU at one moment. A field NVML could not read (not supported on this board, no
// permission) is NaN for the doubles and -1 for the byte counts (the defaults); the metrics
// file writes null for both.
struct DeviceSample {
    static constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
    int index = 0;                 // NVML's index: every GPU of the machine, in PCI order
                                   // (CUDA_VISIBLE_DEVICES does not renumber it)
    std::string name;              // "NVIDIA H100 80GB HBM3"
    double t = 0;                  // seconds since the monitor's start (the trainer's: training start)
    double timeUnix = 0;           // wall clock, seconds since the epoch (to align with nvidia-smi)
    double utilGpu = kUnknown;     // percent of NVML's last period (1/6 s to 1 s) with a kernel running
    double utilMem = kUnknown;     // percent of that period with device memory being read or written
    int64_t memUsed = -1, memTotal = -1;  // bytes; used as nvidia-smi shows it (NVML's v2 reading; drivers
                                          // before R510 only have v1, which adds the driver's reserve)
    double powerW = kUnknown;      // board power draw, watts
    double tempC = kUnknown;       // GPU die temperature, degrees Celsius
    double smClockMHz = kUnknown;  // current SM clock
    double pcieTxMBps = kUnknown;  // PCIe throughput over NVML's 20 ms window, 1e6 bytes/s, GPU to host
    double pcieRxMBps = kUnknown;  // the same, host to GPU
};

// Where samples come from. Implementations need not be thread-safe: DeviceMonitor calls
// sample() from its own thread only.
class TelemetrySource {
public:
    virtual ~TelemetrySource() = default;
    // One sample per device, t and timeUnix left for the caller to set.
    virtual std::vector<DeviceSample> sample() = 0;
    // The devices sample() reports on, by index order.
    virtual std::vector<std::string> deviceNames() const = 0;
};

// NVML through dlopen("libnvidia-ml.so.1"), or the path in the environment variable
// TB_NVML_LIBRARY. Returns nullptr and one sentence in *whyNot (when given) if the library or the
// driver is absent, the library is not NVML, NVML fails to initialise or sees no GPU.
std::unique_ptr<TelemetrySource> makeNvmlSource(std::string* whyNot = nullptr);

// Samples a TelemetrySource on a thread of its own, at once and then every interval (a slow
// sample delays the next one; ticks it overran are skipped rather than bunched), and hands every batch to onSamples
// on that thread. The callback must return quickly (ObserverHub's onDeviceSamples only queues).
class DeviceMonitor {
public:
    using Clock = std::chrono::steady_clock;
    using Callback = std::function<void(const std::vector<DeviceSample>&)>;
    static constexpr std::chrono::milliseconds kDefaultInterval{200};  // 5 Hz; the window needs >= 4 Hz

    // Starts sampling at once. `source` must not be null; `start` is the time base of DeviceSample::t.
    DeviceMonitor(std::unique_ptr<TelemetrySource> source, Callback onSamples,
                  std::chrono::milliseconds interval = kDefaultInterval, Clock::time_point start = Clock::now());
    ~DeviceMonitor();                             // stop()
    DeviceMonitor(const DeviceMonitor&) = delete;
    DeviceMonitor& operator=(const DeviceMonitor&) = delete;

    void stop();                                  // wakes the thread and joins it; idempotent
    std::vector<DeviceSample> latest() const;     // the last batch (empty before the first)
    int64_t batches() const;                      // batches delivered so far
    std::string error() const;                    // why sampling ended early (the source or the
                                                  // callback threw), empty otherwise
    const std::vector<std::string>& deviceNames() const { return names_; }

private:
    void run();

    std::unique_ptr<TelemetrySource> source_;
    Callback onSamples_;
    std::chrono::milliseconds interval_;
    Clock::time_point start_;
    std::vector<std::string> names_;
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    bool stopping_ = false;
    std::vector<DeviceSample> latest_;
    int64_t batches_ = 0;
    std::string error_;
    std::thread thread_;  // last: started once everything above exists
};

}  // namespace tb
