// Fake GPUs for the window's suites: a DeviceCatalog of N "NVIDIA H200" boards of 150 GB, and a
// TelemetrySource whose readings the test sets (through a shared FakeGpuReadings) while the
// window's DeviceMonitor samples it on its own thread. Nothing here touches a real GPU.
#pragma once
#include <atomic>
#include <memory>
#include <utility>

#include "devices/device_catalog.hpp"
#include "engine/device_monitor.hpp"

namespace tbtest {

constexpr int64_t kFakeGpuBytes = 150'000'000'000;  // 139.7 GiB, as an H200 reports

inline DeviceCatalog fakeCatalog(int gpus) {
    DeviceCatalog c;
    for (int i = 0; i < gpus; ++i) {
        tb::GpuInfo g;
        g.index = i;
        g.name = "NVIDIA H200";
        g.totalBytes = size_t(kFakeGpuBytes);
        g.ccMajor = 9;
        g.multiprocessors = 132;
        g.pciBusId = "0000:0" + std::to_string(i + 1) + ":00.0";
        c.gpus.push_back(g);
    }
    if (gpus == 0) c.whyNoGpu = "the fake machine has no GPU";
    return c;
}

// What every GPU of the fake reads now: GPU i reports utilGpu + i percent and memUsed + i GiB.
struct FakeGpuReadings {
    std::atomic<double> utilGpu{0};
    std::atomic<int64_t> memUsed{0};
    std::atomic<int> samples{0};  // calls of sample() so far
};

class FakeTelemetry final : public tb::TelemetrySource {
public:
    FakeTelemetry(int gpus, std::shared_ptr<FakeGpuReadings> readings) : gpus_(gpus), readings_(std::move(readings)) {}
    std::vector<tb::DeviceSample> sample() override {
        std::vector<tb::DeviceSample> batch;
        for (int i = 0; i < gpus_; ++i) {
            tb::DeviceSample s;
            s.index = i;
            s.name = "NVIDIA H200";
            s.utilGpu = readings_->utilGpu + i;
            s.memUsed = readings_->memUsed + int64_t(i) * (int64_t(1) << 30);
            s.memTotal = kFakeGpuBytes;
            batch.push_back(s);
        }
        ++readings_->samples;
        return batch;
    }
    std::vector<std::string> deviceNames() const override {
        return std::vector<std::string>(size_t(gpus_), "NVIDIA H200");
    }

private:
    int gpus_;
    std::shared_ptr<FakeGpuReadings> readings_;
};

}  // namespace tbtest
