#include "engine/device_monitor.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <system_error>
#include <thread>
#include <type_traits>

namespace tb {

namespace {

// The part of nvml.h this file uses, declared here so that building needs no NVIDIA package.
// Values and signatures as in the NVML API reference (stable since R304 for these entry points).
using nvmlReturn_t = int;  // enum nvmlReturn_enum
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlUtilization_t {
    unsigned int gpu, memory;  // percent
};
struct nvmlMemory_t {          // v1: used = allocated + reserved for the driver
    unsigned long long total, free, used;  // bytes
};
struct nvmlMemory_v2_t {       // v2: used = allocated only, as nvidia-smi's "Memory-Usage" (R580)
    unsigned int version;      // nvmlMemory_v2 below
    unsigned long long total, reserved, free, used;  // bytes
};
constexpr unsigned nvmlMemory_v2 = unsigned(sizeof(nvmlMemory_v2_t)) | (2u << 24);  // NVML_STRUCT_VERSION(Memory, 2)
constexpr int NVML_TEMPERATURE_GPU = 0;     // nvmlTemperatureSensors_t
constexpr int NVML_CLOCK_SM = 1;            // nvmlClockType_t
constexpr int NVML_PCIE_UTIL_TX_BYTES = 0;  // nvmlPcieUtilCounter_t
constexpr int NVML_PCIE_UTIL_RX_BYTES = 1;
constexpr unsigned NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;

struct NvmlApi {
    nvmlReturn_t (*init)();
    nvmlReturn_t (*shutdown)();
    const char* (*errorString)(nvmlReturn_t);
    nvmlReturn_t (*getCount)(unsigned*);
    nvmlReturn_t (*getHandleByIndex)(unsigned, nvmlDevice_t*);
    nvmlReturn_t (*getName)(nvmlDevice_t, char*, unsigned);
    nvmlReturn_t (*getUtilizationRates)(nvmlDevice_t, nvmlUtilization_t*);
    nvmlReturn_t (*getMemoryInfo)(nvmlDevice_t, nvmlMemory_t*);
    nvmlReturn_t (*getMemoryInfoV2)(nvmlDevice_t, nvmlMemory_v2_t*);   // optional (R510 on); null if absent
    nvmlReturn_t (*getPowerUsage)(nvmlDevice_t, unsigned*);             // milliwatts
    nvmlReturn_t (*getTemperature)(nvmlDevice_t, int, unsigned*);       // degrees C
    nvmlReturn_t (*getClockInfo)(nvmlDevice_t, int, unsigned*);         // MHz
    nvmlReturn_t (*getPcieThroughput)(nvmlDevice_t, int, unsigned*);    // KB/s over 20 ms (blocks that long)
};
static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t as in nvml.h");

// Bits of Device::unsupported: a reading NVML answered NVML_ERROR_NOT_SUPPORTED for once is not
// asked for again (each PCIe reading blocks 20 ms); kMemoryV2: fall back to v1.
enum Reading : unsigned { kUtil = 1, kMemory = 2, kMemoryV2 = 4, kPower = 8, kTemp = 16, kClock = 32, kPcie = 64 };

class NvmlSource final : public TelemetrySource {
public:
    struct Device {
        int index;
        std::string name;
        nvmlDevice_t handle;
        unsigned unsupported = 0;
    };
    NvmlSource(const NvmlApi& api, std::vector<Device> devices) : api_(api), devices_(std::move(devices)) {}
    // The library stays loaded: unloading NVML while a driver thread it started may still run is
    // a crash some drivers have shown, and a second dlopen of it costs nothing.
    ~NvmlSource() override { api_.shutdown(); }

    std::vector<DeviceSample> sample() override {
        // The PCIe readings each block for NVML's 20 ms window: all of them run at once, on threads
        // of their own, while this thread reads the rest (NVML is thread-safe), so many GPUs keep 4 Hz.
        struct Pcie {
            nvmlReturn_t tx = -1, rx = -1;
            unsigned txKBps = 0, rxKBps = 0;
        };
        std::vector<Pcie> pcie(devices_.size());
        std::vector<std::thread> pcieThreads;
        auto spawn = [&](auto f) {
            try {
                pcieThreads.emplace_back(f);
            } catch (const std::system_error&) {  // no thread to be had: read it here, only slower
                f();
            }
        };
        for (size_t i = 0; i < devices_.size(); ++i) {
            if (devices_[i].unsupported & kPcie) continue;
            const nvmlDevice_t h = devices_[i].handle;
            Pcie& p = pcie[i];
            spawn([this, h, &p] { p.tx = api_.getPcieThroughput(h, NVML_PCIE_UTIL_TX_BYTES, &p.txKBps); });
            spawn([this, h, &p] { p.rx = api_.getPcieThroughput(h, NVML_PCIE_UTIL_RX_BYTES, &p.rxKBps); });
        }
        std::vector<DeviceSample> out;
        out.reserve(devices_.size());
        for (Device& d : devices_) {
            DeviceSample s;
            s.index = d.index;
            s.name = d.name;
            // Calls `f` unless the reading is known to be unsupported; false when it gave nothing.
            auto read = [&](Reading bit, auto f) {
                if (d.unsupported & bit) return false;
                const nvmlReturn_t r = f();
                if (r == NVML_ERROR_NOT_SUPPORTED) d.unsupported |= bit;
                return r == NVML_SUCCESS;
            };
            nvmlUtilization_t u{};
            if (read(kUtil, [&] { return api_.getUtilizationRates(d.handle, &u); })) {
                s.utilGpu = u.gpu;
                s.utilMem = u.memory;
            }
            // v2 where the driver has it; else, from the first failure on, v1 (one meaning of
            // "used" for the whole run).
            nvmlMemory_v2_t m2{};
            m2.version = nvmlMemory_v2;
            nvmlMemory_t m{};
            if (!(d.unsupported & kMemoryV2) && api_.getMemoryInfoV2 &&
                api_.getMemoryInfoV2(d.handle, &m2) == NVML_SUCCESS) {
                s.memUsed = int64_t(m2.used);
                s.memTotal = int64_t(m2.total);
            } else {
                d.unsupported |= kMemoryV2;
                if (read(kMemory, [&] { return api_.getMemoryInfo(d.handle, &m); })) {
                    s.memUsed = int64_t(m.used);
                    s.memTotal = int64_t(m.total);
                }
            }
            unsigned v = 0;
            if (read(kPower, [&] { return api_.getPowerUsage(d.handle, &v); })) s.powerW = v / 1e3;
            if (read(kTemp, [&] { return api_.getTemperature(d.handle, NVML_TEMPERATURE_GPU, &v); })) s.tempC = v;
            if (read(kClock, [&] { return api_.getClockInfo(d.handle, NVML_CLOCK_SM, &v); })) s.smClockMHz = v;
            out.push_back(std::move(s));
        }
        for (std::thread& t : pcieThreads) t.join();
        for (size_t i = 0; i < devices_.size(); ++i) {
            const Pcie& p = pcie[i];
            // NVML's KB taken as 1024 bytes; reported in 1e6 bytes/s like every other MB here.
            if (p.tx == NVML_SUCCESS) out[i].pcieTxMBps = p.txKBps * 1024.0 / 1e6;
            if (p.rx == NVML_SUCCESS) out[i].pcieRxMBps = p.rxKBps * 1024.0 / 1e6;
            if (p.tx == NVML_ERROR_NOT_SUPPORTED && p.rx == NVML_ERROR_NOT_SUPPORTED) devices_[i].unsupported |= kPcie;
        }
        return out;
    }

    std::vector<std::string> deviceNames() const override {
        std::vector<std::string> names;
        for (const Device& d : devices_) names.push_back(d.name);
        return names;
    }

private:
    NvmlApi api_;
    std::vector<Device> devices_;
};

double unixSeconds() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::unique_ptr<TelemetrySource> makeNvmlSource(std::string* whyNot) {
    auto fail = [&](const std::string& why) {
        if (whyNot) *whyNot = why;
        return nullptr;
    };
    const char* env = std::getenv("TB_NVML_LIBRARY");
    const std::string path = env && *env ? env : "libnvidia-ml.so.1";
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* e = dlerror();
        return fail("cannot load the NVIDIA management library " + path + " (" + (e ? e : "unknown error") +
                    "); is the NVIDIA driver installed?");
    }
    NvmlApi api{};
    std::string missing;
    auto bind = [&](auto& fn, const char* symbol) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
        if (!fn && missing.empty()) missing = symbol;
    };
    bind(api.init, "nvmlInit_v2");
    bind(api.shutdown, "nvmlShutdown");
    bind(api.errorString, "nvmlErrorString");
    bind(api.getCount, "nvmlDeviceGetCount_v2");
    bind(api.getHandleByIndex, "nvmlDeviceGetHandleByIndex_v2");
    bind(api.getName, "nvmlDeviceGetName");
    bind(api.getUtilizationRates, "nvmlDeviceGetUtilizationRates");
    bind(api.getMemoryInfo, "nvmlDeviceGetMemoryInfo");
    bind(api.getPowerUsage, "nvmlDeviceGetPowerUsage");
    bind(api.getTemperature, "nvmlDeviceGetTemperature");
    bind(api.getClockInfo, "nvmlDeviceGetClockInfo");
    bind(api.getPcieThroughput, "nvmlDeviceGetPcieThroughput");
    api.getMemoryInfoV2 = reinterpret_cast<decltype(api.getMemoryInfoV2)>(dlsym(lib, "nvmlDeviceGetMemoryInfo_v2"));
    if (!missing.empty()) {
        dlclose(lib);  // not NVML (or far too old): nothing of it was called
        return fail(path + " is not a usable NVIDIA management library (it has no " + missing + ")");
    }
    nvmlReturn_t r = api.init();
    if (r != NVML_SUCCESS) return fail("NVML (" + path + ") failed to initialise: " + api.errorString(r));
    unsigned count = 0;
    r = api.getCount(&count);
    if (r != NVML_SUCCESS || count == 0) {
        const std::string why = r != NVML_SUCCESS ? std::string("cannot count GPUs: ") + api.errorString(r)
                                                  : std::string("it sees no GPU");
        api.shutdown();
        return fail("NVML (" + path + ") " + why);
    }
    std::vector<NvmlSource::Device> devices;
    std::string lastError;
    for (unsigned i = 0; i < count; ++i) {
        nvmlDevice_t h = nullptr;
        r = api.getHandleByIndex(i, &h);
        if (r != NVML_SUCCESS) {  // e.g. no permission for this one: report on the others
            lastError = "GPU " + std::to_string(i) + ": " + api.errorString(r);
            continue;
        }
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
        if (api.getName(h, name, sizeof(name)) != NVML_SUCCESS) std::snprintf(name, sizeof(name), "GPU %u", i);
        devices.push_back({int(i), name, h});
    }
    if (devices.empty()) {
        api.shutdown();
        return fail("NVML (" + path + ") can open none of its " + std::to_string(count) + " GPUs (" + lastError + ")");
    }
    return std::make_unique<NvmlSource>(api, std::move(devices));
}

DeviceMonitor::DeviceMonitor(std::unique_ptr<TelemetrySource> source, Callback onSamples,
                             std::chrono::milliseconds interval, Clock::time_point start)
    : source_(std::move(source)),
      onSamples_(std::move(onSamples)),
      interval_(std::max(interval, std::chrono::milliseconds(1))),
      start_(start),
      names_(source_->deviceNames()),
      thread_([this] { run(); }) {}

DeviceMonitor::~DeviceMonitor() { stop(); }

void DeviceMonitor::stop() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
}

std::vector<DeviceSample> DeviceMonitor::latest() const {
    std::lock_guard lock(mutex_);
    return latest_;
}

int64_t DeviceMonitor::batches() const {
    std::lock_guard lock(mutex_);
    return batches_;
}

std::string DeviceMonitor::error() const {
    std::lock_guard lock(mutex_);
    return error_;
}

void DeviceMonitor::run() {
    auto next = Clock::now();
    for (;;) {
        {
            std::unique_lock lock(mutex_);
            // Sleeps until the tick or until stop(): a condition variable, so stop() joins at once.
            if (wake_.wait_until(lock, next, [&] { return stopping_; })) return;
        }
        try {
            const auto t0 = Clock::now();
            const double u0 = unixSeconds();
            std::vector<DeviceSample> batch = source_->sample();
            const auto t1 = Clock::now();
            // Stamped at the middle of the reading (NVML's PCIe readings span 20 ms each).
            const double t = std::chrono::duration<double>(t0 - start_).count() +
                             std::chrono::duration<double>(t1 - t0).count() / 2;
            const double wall = u0 + std::chrono::duration<double>(t1 - t0).count() / 2;
            for (DeviceSample& s : batch) {
                s.t = t;
                s.timeUnix = wall;
            }
            {
                std::lock_guard lock(mutex_);
                latest_ = batch;
                ++batches_;
            }
            if (onSamples_) onSamples_(batch);
        } catch (const std::exception& e) {  // a thread must not take the process down: stop sampling
            std::lock_guard lock(mutex_);
            error_ = std::string("device monitor stopped: ") + e.what();
            return;
        } catch (...) {
            std::lock_guard lock(mutex_);
            error_ = "device monitor stopped: unknown exception";
            return;
        }
        // Next tick on the grid start + k * interval; ticks a slow reading overran are skipped.
        const auto now = Clock::now();
        next += interval_;
        if (next <= now) next += ((now - next) / interval_ + 1) * interval_;
    }
}

}  // namespace tb
