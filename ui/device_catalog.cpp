#include "device_catalog.hpp"

#include <thread>

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
    // Mirrors tb::makePlan (engine/trainer.cpp), which counts the machine's GPUs itself.
    tb::DeploymentPlan p;
    const bool wantsGpu = c.towers.find("gpu") != std::string::npos || c.towers.find("cuda") != std::string::npos;
    if (wantsGpu && gpus.empty())
        throw tb::Error("--towers " + c.towers + ": no GPU can be used here (" + whyNoGpu.toStdString() + ")");
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    p.towers = tb::DeploymentPlan::parseTowers(c.towers, cores, gpuCount(), "--towers");
    tb::DeploymentPlan::parseVariables(c.variables, p, "--variables");
    p.reduce = tb::DeploymentPlan::parseReduce(c.reduce, "--reduce");
    p.update = tb::DeploymentPlan::parseUpdate(c.update, "--update");
    p.averageEvery = c.averageEvery;
    p.psShards = c.psShards;
    p.slowdown = tb::DeploymentPlan::parseSlowdown(c.slow, p.towerCount(), "--slow");
    p.transfers = tb::DeploymentPlan::parseTransfers(c.transfers, "--transfers");
    const int n = p.towerCount();
    if (c.batchPerTower > 0) p.batchPerTower = c.batchPerTower;
    else if (n > 0 && c.batch % n == 0) p.batchPerTower = c.batch / n;
    else if (n > 0)
        throw tb::Error("--batch: " + std::to_string(c.batch) + " examples do not split evenly over " +
                        std::to_string(n) + " towers; give --batch-per-tower");
    p.validate(tb::cpuTowerSlots(), gpuCount());
    return p;
}
