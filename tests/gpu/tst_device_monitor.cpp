// tst_device_monitor: GPU telemetry without Qt (GPU machines have none), so a plain executable:
// every check prints file:line and what went wrong, and any failure makes the exit status 1.
//   (a) NVML absent (TB_NVML_LIBRARY at a missing file, or at a library that is not NVML):
//       makeNvmlSource returns nullptr and one sentence naming the library, and nothing crashes
//   (b) DeviceMonitor drives a fake source at its rate; stop() joins at once even mid-interval;
//       a throwing source ends sampling with error() set instead of ending the process
//   (c) MetricsFile writes one well-formed "device" line per GPU, unknown readings as null
//   (d) ObserverHub forwards device samples and drops them (not evaluations) when full
//   (e) a CPU-only training run does not touch NVML and writes no device lines
//   (f) with NVML and a GPU: a real sample has a name and memory (the same as nvidia-smi's, where
//       it is installed), and the monitor keeps >= 4 Hz; without, prints "skipped: <reason>"
//       (the rest still runs)
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "engine/device_monitor.hpp"
#include "engine/metrics_file.hpp"
#include "engine/observer_hub.hpp"
#include "engine/trainer.hpp"

namespace {

int failures = 0;

#define CHECK(cond, ...)                                                            \
    do {                                                                            \
        if (!(cond)) {                                                              \
            ++failures;                                                             \
            std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);     \
            std::fprintf(stderr, __VA_ARGS__);                                      \
            std::fputc('\n', stderr);                                               \
        }                                                                           \
    } while (0)

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
double unixNow() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Two made-up GPUs; counts its calls, and throws on call `throwAt` (0: never).
class FakeSource final : public tb::TelemetrySource {
public:
    explicit FakeSource(std::atomic<int>* calls, int throwAt = 0) : calls_(calls), throwAt_(throwAt) {}
    std::vector<tb::DeviceSample> sample() override {
        const int n = ++*calls_;
        if (n == throwAt_) throw std::runtime_error("fake sensor unplugged");
        std::vector<tb::DeviceSample> out(2);
        for (int i = 0; i < 2; ++i) {
            out[i].index = i;
            out[i].name = "Fake GPU " + std::to_string(i);
            out[i].utilGpu = n;
            out[i].memTotal = int64_t(80) << 30;
        }
        return out;
    }
    std::vector<std::string> deviceNames() const override { return {"Fake GPU 0", "Fake GPU 1"}; }

private:
    std::atomic<int>* calls_;
    int throwAt_;
};

void nvmlAbsent() {
    std::printf("(a) NVML absent\n");
    setenv("TB_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    std::string why;
    auto src = tb::makeNvmlSource(&why);
    CHECK(!src, "a missing library gave a source");
    CHECK(contains(why, "/nonexistent/libnvidia-ml.so.1"), "the reason must name the library: '%s'", why.c_str());
    std::printf("    missing file: %s\n", why.c_str());
    CHECK(!tb::makeNvmlSource(nullptr), "no reason asked for: still nullptr, no crash");

    // A real shared library that is not NVML: it loads, but has none of NVML's entry points.
    setenv("TB_NVML_LIBRARY", "libm.so.6", 1);
    why.clear();
    src = tb::makeNvmlSource(&why);
    CHECK(!src, "libm gave a source");
    CHECK(contains(why, "libm.so.6") && contains(why, "nvmlInit_v2"), "the reason must name the library and "
          "the missing entry point: '%s'", why.c_str());
    std::printf("    not NVML:     %s\n", why.c_str());
    unsetenv("TB_NVML_LIBRARY");
}

void monitorRate() {
    std::printf("(b) DeviceMonitor with a fake source\n");
    std::atomic<int> calls{0}, delivered{0};
    std::vector<double> times;  // DeviceSample::t of each batch, written on the monitor thread only
    double firstUnix = 0;
    const auto start = Clock::now() - std::chrono::seconds(3);  // t must count from here
    auto mon = std::make_unique<tb::DeviceMonitor>(
        std::make_unique<FakeSource>(&calls),
        [&](const std::vector<tb::DeviceSample>& b) {
            if (b.size() == 2) times.push_back(b[0].t);
            if (times.size() == 1) firstUnix = b[0].timeUnix;
            ++delivered;
        },
        std::chrono::milliseconds(50), start);  // 20 Hz
    CHECK(mon->deviceNames().size() == 2, "deviceNames() from the source");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto t0 = Clock::now();
    mon->stop();
    const double stopMs = msSince(t0);
    const int batches = delivered.load();
    std::printf("    20 Hz for 0.5 s: %d batches; stop() took %.2f ms\n", batches, stopMs);
    CHECK(batches >= 5, "20 Hz for 0.5 s gave %d batches", batches);
    CHECK(batches <= 13, "20 Hz for 0.5 s gave %d batches: ticks bunched", batches);
    CHECK(stopMs < 100, "stop() took %.1f ms", stopMs);
    CHECK(mon->batches() == batches, "batches() %lld, callback %d", (long long)mon->batches(), batches);
    const auto last = mon->latest();
    CHECK(last.size() == 2 && last[0].utilGpu == double(calls.load()), "latest() is the last batch");
    CHECK(!times.empty() && times.front() >= 3.0 && times.front() < 3.2, "t counts from the start given: %.3f",
          times.empty() ? -1.0 : times.front());
    for (size_t i = 1; i < times.size(); ++i)
        CHECK(times[i] > times[i - 1], "t goes forward: %.4f then %.4f", times[i - 1], times[i]);
    CHECK(std::fabs(firstUnix - unixNow()) < 5, "time_unix is wall clock: %.3f", firstUnix);
    mon->stop();  // a second stop is harmless
    CHECK(delivered.load() == batches, "no batch after stop()");
    mon.reset();

    // Stopped mid-interval: a monitor at 0.2 Hz must not make stop() wait out its 5 s.
    calls = 0;
    tb::DeviceMonitor slow(std::make_unique<FakeSource>(&calls), nullptr, std::chrono::seconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // past the first sample, into the wait
    t0 = Clock::now();
    slow.stop();
    const double slowStopMs = msSince(t0);
    std::printf("    0.2 Hz: stop() mid-interval took %.2f ms\n", slowStopMs);
    CHECK(slowStopMs < 100, "stop() mid-interval took %.1f ms (it must wake the thread, not wait for the tick)",
          slowStopMs);
    CHECK(slow.batches() == 1, "one sample at once, then none for 5 s: %lld", (long long)slow.batches());

    // A source that throws: sampling ends with the reason kept; the process goes on.
    calls = 0;
    tb::DeviceMonitor failing(std::make_unique<FakeSource>(&calls, 3), nullptr, std::chrono::milliseconds(10));
    t0 = Clock::now();
    while (failing.error().empty() && msSince(t0) < 2000) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(contains(failing.error(), "fake sensor unplugged"), "error(): '%s'", failing.error().c_str());
    CHECK(failing.batches() == 2, "two batches before the throw: %lld", (long long)failing.batches());
}

tb::DeviceSample knownSample() {
    tb::DeviceSample s;
    s.index = 1;
    s.name = "NVIDIA H100 80GB HBM3";
    s.t = 12.5;
    s.timeUnix = 1718000000.25;
    s.utilGpu = 97;
    s.utilMem = 41;
    s.memUsed = 12345678848;
    s.memTotal = 85520809984;
    s.powerW = 512.25;
    s.tempC = 61;
    s.smClockMHz = 1980;
    s.pcieTxMBps = 120.5;
    s.pcieRxMBps = 2210.5;
    return s;
}

void metricsLines() {
    std::printf("(c) MetricsFile device lines\n");
    const auto path = std::filesystem::temp_directory_path() / ("tst_device_monitor_" + std::to_string(getpid()) + ".jsonl");
    tb::DeviceSample unknown;  // NVML could read nothing: every reading is NaN / -1
    unknown.index = 0;
    unknown.name = "GPU 0";
    unknown.t = 0.25;
    unknown.timeUnix = 1718000000.0;
    {
        tb::MetricsFile f(path.string());
        f.onDeviceSamples({unknown, knownSample()});
        f.onDeviceSamples({});
    }
    std::ifstream in(path);
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(in, line);) {
        try {
            lines.push_back(nlohmann::json::parse(line));
        } catch (const std::exception& e) {
            CHECK(false, "not JSON: '%s' (%s)", line.c_str(), e.what());
        }
    }
    std::filesystem::remove(path);
    CHECK(lines.size() == 2, "one line per device, none for an empty batch: %zu lines", lines.size());
    if (lines.size() != 2) return;
    const char* fields[] = {"type", "t", "time_unix", "index", "name", "util_gpu", "util_mem",
                            "mem_used_bytes", "mem_total_bytes", "power_w", "temp_c", "sm_clock_mhz",
                            "pcie_tx_mbps", "pcie_rx_mbps"};
    for (const auto& j : lines) {
        CHECK(j.size() == std::size(fields), "%zu fields: %s", j.size(), j.dump().c_str());
        for (const char* k : fields) CHECK(j.contains(k), "field %s missing: %s", k, j.dump().c_str());
        CHECK(j.value("type", "") == "device", "type: %s", j.dump().c_str());
    }
    const auto& u = lines[0];
    std::printf("    %s\n    %s\n", u.dump().c_str(), lines[1].dump().c_str());
    for (const char* k : {"util_gpu", "util_mem", "mem_used_bytes", "mem_total_bytes", "power_w", "temp_c",
                          "sm_clock_mhz", "pcie_tx_mbps", "pcie_rx_mbps"})
        CHECK(u.contains(k) && u[k].is_null(), "an unknown %s must be null: %s", k, u.dump().c_str());
    CHECK(u["index"] == 0 && u["name"] == "GPU 0" && u["t"] == 0.25, "%s", u.dump().c_str());
    const auto& k = lines[1];
    CHECK(k["index"] == 1 && k["name"] == "NVIDIA H100 80GB HBM3", "%s", k.dump().c_str());
    CHECK(k["t"] == 12.5 && k["time_unix"] == 1718000000.25, "times: %s", k.dump().c_str());
    CHECK(k["util_gpu"] == 97.0 && k["util_mem"] == 41.0, "utilisation: %s", k.dump().c_str());
    CHECK(k["mem_used_bytes"].is_number_integer() && k["mem_used_bytes"] == 12345678848LL &&
              k["mem_total_bytes"] == 85520809984LL, "memory in exact bytes: %s", k.dump().c_str());
    CHECK(k["power_w"] == 512.25 && k["temp_c"] == 61.0 && k["sm_clock_mhz"] == 1980.0, "%s", k.dump().c_str());
    CHECK(k["pcie_tx_mbps"] == 120.5 && k["pcie_rx_mbps"] == 2210.5, "PCIe: %s", k.dump().c_str());
}

// Records what reaches it; slow on purpose when asked, so the hub's queue fills.
struct Recorder final : tb::TrainingObserver {
    std::atomic<int> batches{0}, evals{0};
    std::vector<std::string> states;
    std::vector<tb::DeviceSample> firstBatch;
    int sleepMs = 0;
    void onDeviceSamples(const std::vector<tb::DeviceSample>& s) override {
        if (batches == 0) firstBatch = s;
        ++batches;
        std::this_thread::sleep_for(std::chrono::milliseconds(sleepMs));
    }
    void onEval(const tb::EvalResult&) override { ++evals; }
    void onStateChanged(tb::RunState, const std::string& detail) override { states.push_back(detail); }
};

void hubForwards() {
    std::printf("(d) ObserverHub forwards device samples\n");
    {
        Recorder r;
        {
            tb::ObserverHub hub({&r});
            hub.onDeviceSamples({knownSample()});
            hub.flush();
            CHECK(r.batches == 1 && r.firstBatch.size() == 1 && r.firstBatch[0].memUsed == 12345678848,
                  "delivered as sent (%d batches)", r.batches.load());
        }
    }
    Recorder slow;
    slow.sleepMs = 20;
    int64_t dropped = 0;
    {
        tb::ObserverHub hub({&slow}, 4);
        for (int i = 0; i < 50; ++i) hub.onDeviceSamples({knownSample()});
        hub.onEval(tb::EvalResult{});
        hub.flush();
        dropped = hub.dropped();
    }
    std::printf("    capacity 4, 50 batches to a slow observer: %lld dropped, %d delivered\n", (long long)dropped,
                slow.batches.load());
    CHECK(dropped > 0 && dropped + slow.batches == 50, "dropped %lld + delivered %d must be 50 (some dropped)",
          (long long)dropped, slow.batches.load());
    CHECK(slow.evals == 1, "an evaluation is never dropped");
}

void cpuRunLeavesNvmlAlone() {
    std::printf("(e) a CPU-only run does not touch NVML\n");
    // Were the trainer to ask NVML, this path would put "no GPU telemetry: ..." in the running state.
    setenv("TB_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    tb::RunConfig c;
    c.model = "tiny_mlp";
    c.data = "synthetic:blobs";
    c.batch = 32;
    c.steps = 5;
    c.threads = 1;
    c.quiet = true;
    Recorder r;
    tb::Trainer t(c);
    t.addObserver(&r);
    try {
        t.run();
    } catch (const std::exception& e) {
        CHECK(false, "the run failed: %s", e.what());
    }
    unsetenv("TB_NVML_LIBRARY");
    std::string running = r.states.size() >= 2 ? r.states[1] : "";
    std::printf("    running: %s\n", running.c_str());
    CHECK(!running.empty() && !contains(running, "telemetry"), "running state: '%s'", running.c_str());
    CHECK(r.batches == 0, "%d device batches from a CPU run", r.batches.load());
}

void realGpu() {
    std::printf("(f) NVML on this machine\n");
    std::string why;
    auto src = tb::makeNvmlSource(&why);
    if (!src) {
        std::printf("    skipped: %s\n", why.c_str());
        return;
    }
    const auto names = src->deviceNames();
    auto t0 = Clock::now();
    const auto batch = src->sample();
    std::printf("    one sample of %zu GPU(s) took %.1f ms\n", batch.size(), msSince(t0));
    CHECK(!batch.empty() && batch.size() == names.size(), "%zu samples for %zu names", batch.size(), names.size());
    for (const auto& s : batch) {
        std::printf("    GPU %d %s: util %.0f%% / mem %.0f%%, %.0f of %.0f MiB, %.1f W, %.0f C, SM %.0f MHz, "
                    "PCIe tx %.1f rx %.1f MB/s\n",
                    s.index, s.name.c_str(), s.utilGpu, s.utilMem, s.memUsed / 1048576.0, s.memTotal / 1048576.0,
                    s.powerW, s.tempC, s.smClockMHz, s.pcieTxMBps, s.pcieRxMBps);
        CHECK(s.memTotal > 0, "GPU %d memTotal %lld", s.index, (long long)s.memTotal);
        CHECK(s.memUsed >= 0 && s.memUsed <= s.memTotal, "GPU %d memUsed %lld", s.index, (long long)s.memUsed);
        CHECK(!s.name.empty(), "GPU %d has no name", s.index);
        CHECK(std::isfinite(s.utilGpu) && s.utilGpu >= 0 && s.utilGpu <= 100, "GPU %d util %.1f", s.index, s.utilGpu);
    }
    // nvidia-smi, where it is installed, must show the same memory (the window's numbers are held
    // to agree with it within 5%); an idle GPU's memory does not move between the two readings.
    if (std::FILE* p = popen("nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits "
                             "2>/dev/null", "r")) {
        int compared = 0;
        for (int idx = 0; true;) {
            double usedMiB = 0, totalMiB = 0;
            if (std::fscanf(p, " %d , %lf , %lf", &idx, &usedMiB, &totalMiB) != 3) break;
            for (const auto& s : batch) {
                if (s.index != idx) continue;
                const double ours = s.memUsed / 1048576.0, total = s.memTotal / 1048576.0;
                std::printf("    nvidia-smi GPU %d: %.0f of %.0f MiB used; NVML here: %.0f of %.0f MiB\n", idx, usedMiB,
                            totalMiB, ours, total);
                CHECK(std::fabs(ours - usedMiB) <= std::max(0.05 * usedMiB, 32.0),
                      "GPU %d memory used %.0f MiB, nvidia-smi %.0f MiB", idx, ours, usedMiB);
                CHECK(std::fabs(total - totalMiB) <= 1, "GPU %d memory total %.0f MiB, nvidia-smi %.0f MiB", idx, total,
                      totalMiB);
                ++compared;
            }
        }
        pclose(p);
        if (!compared) std::printf("    nvidia-smi absent: memory not compared\n");
    }
    // At the default rate for 1.2 s, real readings (PCIe ones block 20 ms each) included: >= 4 Hz.
    std::atomic<int> delivered{0};
    t0 = Clock::now();
    tb::DeviceMonitor mon(std::move(src), [&](const std::vector<tb::DeviceSample>&) { ++delivered; });
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    mon.stop();
    const double hz = delivered / (msSince(t0) / 1e3);
    std::printf("    default rate: %d batches in %.0f ms (%.1f Hz)\n", delivered.load(), msSince(t0), hz);
    CHECK(hz >= 4, "the monitor sampled real GPUs at %.1f Hz", hz);
    CHECK(mon.error().empty(), "%s", mon.error().c_str());
}

}  // namespace

int main() {
    nvmlAbsent();
    monitorRate();
    metricsLines();
    hubForwards();
    cpuRunLeavesNvmlAlone();
    realGpu();
    if (failures) {
        std::fprintf(stderr, "tst_device_monitor: %d check(s) failed\n", failures);
        return 1;
    }
    std::printf("tst_device_monitor: all checks passed\n");
    return 0;
}
