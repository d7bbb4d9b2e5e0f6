// A run's memory, estimated before anything is allocated: the variables, gradients,
// optimiser slots and moving average where they live, every tower's activations and saved
// buffers, and the datasets already read. A run that cannot fit is refused with the estimate
// and what is available, instead of being killed by the kernel half-way through building.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "nn/model_spec.hpp"
#include "parallel/deployment_plan.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/stage_pipeline.hpp"

namespace tb {

// One memory's share: host memory (every CPU tower and host-held variables) or one GPU.
struct MemoryNeed {
    Device device;            // cpu:0 stands for host memory
    size_t bytes = 0;         // what the run will allocate there
    size_t alreadyHeld = 0;   // of which already allocated (the datasets, read before the check)
    std::string parts;        // "variables with optimiser state 12.5 MiB, 2 towers 80.2 MiB (2 x 40.1 MiB)"
};

// slots: optimiser slots per variable (momentum 1, Adam 2); ema: a moving average is kept;
// precision bf16: each tower's matrix ops also keep bf16 copies of what they read (the weights,
// their inputs and incoming gradients; on a GPU cuDNN's bf16 outputs too), at most half the
// bytes of the weights and the activations; and host-held variables that CPU towers read in
// place are kept rounded to bf16 beside them (half their bytes).
std::vector<MemoryNeed> estimateRunMemory(const ModelSpec& spec, const DeploymentPlan& plan, int batchPerTower,
                                          int slots, bool ema, size_t datasetBytes,
                                          MatmulPrecision precision = MatmulPrecision::Fp32);

// Model parallelism: what stage `stage` of a pipeline (setup's ranges, batch, micro-batches and
// replicas; StagePipeline) allocates, all its replicas together: its slice of the variables with
// their optimiser slots (and moving average), each replica's gradient (and, with micro-batches,
// the micro-batch's own before it is summed), and for each micro-batch the schedule has it hold
// at once (naive 1, gpipe M, 1f1b S - s) its layers' activations and saved buffers at the
// micro-batch's size and the gradient of its output. bf16 adds half of the slice's variables and
// activations, as estimateRunMemory says.
size_t estimateStageBytes(const ModelSpec& spec, const StagePipelineSetup& setup, const PipelineSchedule& schedule,
                          int stage, int slots, bool ema);

// A pipelined run's needs per memory: each stage on its device (CPU stages in host memory), and
// in host memory the datasets and the whole model's evaluation network at the step's batch
// (PipelineSet; its activations only: it reads the stages' variables and keeps no gradients).
std::vector<MemoryNeed> estimatePipelineMemory(const ModelSpec& spec, const StagePipelineSetup& setup,
                                               const PipelineSchedule& schedule, int slots, bool ema,
                                               size_t datasetBytes);

// The fewest stages that fit (issue 32, --stages auto): for S = 1, 2, ... up to the devices given
// (`freeBytes`, one stage per device, in order) and the model's layers, the split balanced by
// `cost` (seconds per layer) among those whose every stage fits its device, S = 1 being the whole
// model on the first device as one tower of `setup.batch`. `setup` gives the batch,
// micro-batches, replicas and precision; its ranges and devices are ignored. count 0: no number
// of stages fits.
struct StageFit {
    int count = 0;
    std::vector<std::pair<int, int>> ranges;  // each stage's layers (empty for S = 1)
    std::vector<size_t> bytes;                // each stage's estimate (S = 1: the one tower's)
};
StageFit fewestStagesThatFit(const ModelSpec& spec, const StagePipelineSetup& setup, const PipelineSchedule& schedule,
                             int slots, bool ema, const std::vector<double>& cost, const std::vector<size_t>& freeBytes);

// Host memory this process may still take: MemAvailable (/proc/meminfo), lowered to what
// RLIMIT_AS leaves (ulimit -v) where that is set. 0 where unknown.
size_t hostMemoryAvailable();

// Throws tb::Error naming `what` (the model) when a need exceeds `available(device)` (0: unknown,
// not checked); the message gives the estimate, its parts and the memory available.
void checkMemoryFits(const std::vector<MemoryNeed>& needs, const std::function<size_t(const Device&)>& available,
                     const std::string& what);

std::string mebibytes(size_t bytes);  // "12.5 MiB", "3.1 GiB"

}  // namespace tb
