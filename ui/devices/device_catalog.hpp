// DeviceCatalog: the GPUs the window offers for towers (name and memory) and, where there are
// none, why, as one plain value. The program detects it once (tb::gpuRuntime); tests hand the
// window a fake, so GPU choices, their validation and GPU diagrams can be tested anywhere.
#pragma once
#include <QString>
#include <vector>

#include "backend/registry.hpp"
#include "io/run_config.hpp"
#include "parallel/deployment_plan.hpp"

struct DeviceCatalog {
    std::vector<tb::GpuInfo> gpus;  // by CUDA index: gpus[i] is gpu:i
    QString whyNoGpu;               // one sentence when gpus is empty

    // What the CUDA module found on this machine (loads it, once per process).
    static DeviceCatalog detect();
    int gpuCount() const { return int(gpus.size()); }
    // "gpu:0 NVIDIA H200 — 139.7 GiB"
    QString describe(int gpu) const;
    // tb::makePlan with this catalog's GPUs in place of the machine's, so a fake catalog plans
    // (and refuses) GPU towers like a machine with those GPUs.
    tb::DeploymentPlan makePlan(const tb::RunConfig& c) const;
};
