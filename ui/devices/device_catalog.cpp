#include "devices/device_catalog.hpp"

#include "engine/trainer.hpp"
#include "util/error.hpp"

DeviceCatalog DeviceCatalog::detect() {
    const tb::GpuRuntime& runtime = tb::gpuRuntime();
    DeviceCatalog c;
    c.gpus = runtime.gpus;
    if (c.gpus.empty()) c.whyNoGpu = QString::fromStdString(runtime.whyNot);
    return c;
}

QString DeviceCatalog::describe(int gpu) const {
    const tb::GpuInfo& g = gpus[size_t(gpu)];
    return QStringLiteral("gpu:%1 %2 \u2014 %3 GiB")
        .arg(gpu)
        .arg(QString::fromStdString(g.name))
        .arg(double(g.totalBytes) / double(1ull << 30), 0, 'f', 1);
}

tb::DeploymentPlan DeviceCatalog::makePlan(const tb::RunConfig& c) const {
    return tb::makePlan(c, gpuCount(), whyNoGpu.toStdString());
}
