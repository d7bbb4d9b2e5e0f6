// tst_gpu_stages: pipeline stages on GPUs (issue 32) train exactly as one device running the whole
// batch (loss per step and weights after 10 steps), by every schedule:
//   - two stages sharing one GPU (gpu:0*2: one memory, each stage on a stream of its own; nothing
//     crosses between memories), with and without explicit copies;
//   - stages on separate GPUs, linked by NCCL send and receive (activations forward, gradients
//     back, each micro-batch's bytes counted as they cross), 2 and 3 stages;
//   - the run's engine (PipelineSet) gathers the stages' variables for evaluation and checkpoints;
//   - whole runs (towerbench-run's own headless run, in this process): stages on GPUs train as one
//     tower on gpu:0 (final and test loss), report their bubble, bytes between the GPUs each
//     step and each GPU's memory, and a run stopped at step 10 and resumed ends as the whole run.
// Modes:
//   standin  stand-in GPUs (CPU backends behind a module's C table, its NCCL on host memory:
//            stand_in_gpus.hpp), so the logic runs on every machine; tolerance 1e-5 as on CPU;
//   gpu      the real GPUs against one real GPU (fp32, no TF32; tolerance 1e-4: cuDNN's algorithms
//            sum in other orders). Skipped without a GPU; the NCCL cases say they are skipped
//            where there is only one GPU, and the rest runs.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <functional>
#include <string>
#include <vector>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/registry.hpp"
#include "command_line.hpp"
#include "parallel/pipeline_set.hpp"
#include "pipeline_reference.hpp"
#include "plain_check.hpp"
#include "stand_in_gpus.hpp"

using namespace tb;
using namespace tbtest;

namespace {

Device gpu(int i) { return Device{DeviceType::Cuda, i}; }

// Bytes that cross between memories per step where every boundary does: each boundary's
// activations forward and their gradients back, the whole batch's.
int64_t crossing(const ModelSpec& spec, const std::vector<std::pair<int, int>>& ranges) {
    int64_t bytes = 0;
    for (size_t b = 0; b + 1 < ranges.size(); ++b)
        bytes += 2 * kBatch * layerOutputDims(spec, ranges[b].second).size() * int64_t(sizeof(float));
    return bytes;
}

struct Case {
    const char* name;
    std::vector<std::pair<int, int>> ranges;
    std::vector<Device> devices;
    const char* schedule;
    int micro;
    bool copies;
    bool separateMemories;  // every boundary crosses between GPUs (or copies)
};

void trainsAsOneDevice(const Case& c, const Trained& one, double tolerance) {
    const ModelSpec spec = stagedCnn();
    const long sendsBefore = standInNcclCounts().send;
    const Trained pipe = pipelined(spec, c.ranges, c.schedule, c.micro, 1, c.copies, c.devices);
    const int64_t expected = c.separateMemories || c.copies ? crossing(spec, c.ranges) : 0;
    for (size_t k = 0; k < pipe.bytesMoved.size(); ++k)
        CHECK(pipe.bytesMoved[k] == expected, "%s: step %zu moved %lld bytes, not %lld", c.name, k,
              static_cast<long long>(pipe.bytesMoved[k]), static_cast<long long>(expected));
    for (int k = 0; k < kSteps; ++k)
        CHECK(std::abs(one.losses[size_t(k)] - pipe.losses[size_t(k)]) <= tolerance * std::abs(one.losses[size_t(k)]),
              "%s: step %d: loss %.9g on one device, %.9g pipelined", c.name, k, one.losses[size_t(k)],
              pipe.losses[size_t(k)]);
    const double d = relativeDifference(one.weights, pipe.weights);
    CHECK(d <= tolerance, "%s: weights after %d steps: relative difference %g", c.name, kSteps, d);
    // NCCL's sends (stand-in GPUs count them): per step, each boundary's M micro-batches forward
    // and M gradients back; and one each way per boundary before the first step, which connects it.
    const long sends = standInNcclCounts().send - sendsBefore;
    if (c.separateMemories && !c.copies && gpuRuntime().modulePath == "stand-in GPUs")
        CHECK(sends == (long(kSteps) * c.micro + 1) * 2 * long(c.ranges.size() - 1), "%s: %ld NCCL sends", c.name, sends);
    std::printf("%-44s loss %.6f -> %.6f, weights within %.2g, %lld bytes per step\n", c.name, pipe.losses.front(),
                pipe.losses.back(), d, static_cast<long long>(pipe.bytesMoved.front()));
}

// The run's engine: after its steps, evaluation's network holds the stages' variables (gathered),
// and setting variables reaches the stages.
void engineGathersTheVariables() {
    const ModelSpec spec = stagedCnn();
    StagePipelineSetup setup;
    setup.ranges = {{0, 4}, {5, 10}};
    setup.devices = {gpu(0), gpu(gpuCount() > 1 ? 1 : 0)};
    setup.batch = kBatch;
    setup.microBatches = 4;
    setup.opt = momentum();
    setup.seed = kSeed;
    PipelineSet engine(spec, setup, makePipelineSchedule("1f1b"), kSeed);
    const std::vector<Batch> data = batches(spec);
    std::vector<const Batch*> all;
    for (const Batch& b : data) all.push_back(&b);
    engine.steps(all, 0, 0);
    const VariablesView v = engine.variables();
    std::vector<float> host(size_t(engine.paramCount()));
    v.backend->copyToHost(v.stream, host.data(), v.params, host.size() * sizeof(float));
    v.backend->synchronize(v.stream);
    CHECK(host == engine.pipeline().variables(), "the gathered variables differ from the stages'");
    CHECK(engine.evalNetwork().params() == v.params, "evaluation reads another buffer");
    // (PipelineSet's own dropout seeds differ from the reference's: only the gathering is compared.)
    std::vector<float> zeros(host.size(), 0.f);
    engine.setVariables(zeros.data());
    engine.variables();
    v.backend->copyToHost(v.stream, host.data(), v.params, host.size() * sizeof(float));
    v.backend->synchronize(v.stream);
    CHECK(host == zeros, "variables set are not what evaluation reads");
    CHECK(engine.deviceMemory().size() == size_t(gpuCount() > 1 ? 2 : 1), "%zu GPUs' memory reported",
          engine.deviceMemory().size());
}

nlohmann::json lastJsonLine(const std::string& path, const std::string& type = "") {
    std::ifstream in(path);
    nlohmann::json last;
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) {
            nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
            if (!j.is_discarded() && (type.empty() || j.value("type", "") == type)) last = std::move(j);
        }
    return last;
}

// towerbench-run's training, here: its exit status; the summary from the run folder.
nlohmann::json run(const std::vector<std::string>& flags, const std::string& folder, const std::string& metrics = "") {
    std::vector<std::string> args = {"--model", "mlp", "--data", "idx:" TB_SOURCE_DIR "/samples/fashion-mnist-slice",
                                     "--batch", "64", "--validation", "0", "--seed", "3", "--quiet"};
    args.insert(args.end(), flags.begin(), flags.end());
    if (!metrics.empty()) args.insert(args.end(), {"--metrics", metrics});
    CommandLine cl;
    try {
        cl = parseCommandLine(args);
    } catch (const std::exception& e) {
        CHECK(false, "%s", e.what());
        return {};
    }
    if (cl.storage.resumeDir.empty()) cl.storage.runDir = folder;
    const int rc = runHeadless(cl.config, cl.storage);
    CHECK(rc == 0, "exit %d", rc);
    std::ifstream in(folder + "/summary.json");
    return in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
}

void runsTrainAsOneTower(double tolerance) {
    const std::string dir = (std::filesystem::temp_directory_path() / ("tst_gpu_stages." + std::to_string(getpid()))).string();
    std::filesystem::remove_all(dir);
    const nlohmann::json one = run({"--towers", "gpu:0", "--steps", "20"}, dir + "/one");
    const double loss = one.value("final_loss", 0.0), test = one.value("test_loss", 0.0);
    CHECK(loss > 0 && test > 0, "the one-tower run must train: %s", one.dump().c_str());
    struct Way {
        std::vector<std::string> flags;
        int gpus;
        int64_t bytesPerStep;  // mlp's boundary after relu2: 512 floats x 64 examples, both ways
    };
    const std::vector<Way> ways = {
        {{"--stages", "gpu:0*2", "--pipeline", "1f1b", "--micro-batches", "4"}, 1, 0},
        {{"--stages", "gpu:0=0..relu2,gpu:1=hidden2..logits", "--pipeline", "gpipe", "--micro-batches", "2"}, 2, 262144},
    };
    for (size_t k = 0; k < ways.size(); ++k) {
        const Way& w = ways[k];
        std::string what;
        for (const std::string& f : w.flags) what += f + " ";
        if (gpuCount() < w.gpus || (w.gpus > 1 && !ncclAvailable())) {
            std::printf("run %-60s skipped: needs %d GPUs with NCCL\n", what.c_str(), w.gpus);
            continue;
        }
        const std::string folder = dir + "/way" + std::to_string(k), metrics = folder + ".jsonl";
        std::vector<std::string> flags = w.flags;
        flags.insert(flags.end(), {"--steps", "20"});
        const nlohmann::json s = run(flags, folder, metrics);
        const double l = s.value("final_loss", 0.0), t = s.value("test_loss", 0.0);
        CHECK(std::abs(l - loss) <= tolerance * loss, "%s: final loss %.9g against %.9g on one tower", what.c_str(), l, loss);
        CHECK(std::abs(t - test) <= tolerance * test, "%s: test loss %.9g against %.9g", what.c_str(), t, test);
        const double bubble = s.value("bubble_fraction", -1.0);
        CHECK(bubble > 0 && bubble < 1, "%s: bubble %g", what.c_str(), bubble);
        CHECK(s.contains("device_memory") && s["device_memory"].size() == size_t(w.gpus), "%s: device memory %s",
              what.c_str(), s.value("device_memory", nlohmann::json()).dump().c_str());
        const nlohmann::json step = lastJsonLine(metrics, "step");
        CHECK(step.value("bytes_moved", int64_t(-1)) == w.bytesPerStep, "%s: %s bytes moved in a step, not %lld",
              what.c_str(), step.value("bytes_moved", nlohmann::json()).dump().c_str(), static_cast<long long>(w.bytesPerStep));
        std::printf("run %-60s final loss %.6f (one tower %.6f), bubble %.1f%%, %s bytes a step\n", what.c_str(), l, loss,
                    100 * bubble, step.value("bytes_moved", nlohmann::json()).dump().c_str());
    }
    // Stopped at step 10 and resumed to 20 (the stages' variables and optimiser slots restored
    // onto the GPU): the whole run's test loss.
    const std::string folder = dir + "/resumed";
    run({"--stages", "gpu:0*2", "--pipeline", "gpipe", "--micro-batches", "2", "--steps", "10"}, folder);
    const nlohmann::json resumed = run({"--resume", folder, "--steps", "20"}, folder);
    CHECK(resumed.value("resumed_at", 0) == 10, "resumed at %s", resumed.value("resumed_at", nlohmann::json()).dump().c_str());
    const double t = resumed.value("test_loss", 0.0);
    CHECK(std::abs(t - test) <= tolerance * test, "resumed: test loss %.9g against %.9g", t, test);
    std::printf("run stopped at 10 and resumed to 20: test loss %.6f (one tower %.6f)\n", t, test);
    std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "standin";
    double tolerance = 1e-5;
    if (mode == "standin") {
        useCudaModule(tbtest::standInGpuModule(3), "stand-in GPUs");
    } else if (mode == "gpu") {
        if (gpuCount() == 0) return tbcheck::skip(("no GPU: " + gpuRuntime().whyNot).c_str());
        tolerance = 1e-4;
    } else {
        std::fprintf(stderr, "usage: tst_gpu_stages [standin|gpu]\n");
        return 2;
    }
    const ModelSpec spec = stagedCnn();
    const Trained one = oneDevice(spec, makeBackend(gpu(0)));
    CHECK(one.losses.back() < 0.8 * one.losses.front(), "training must lower the loss: %g then %g", one.losses.front(),
          one.losses.back());
    const std::vector<std::pair<int, int>> two{{0, 4}, {5, 10}}, three{{0, 3}, {4, 7}, {8, 10}};
    const std::vector<Case> shared = {
        {"gpu:0*2, naive", two, {gpu(0), gpu(0)}, "naive", 1, false, false},
        {"gpu:0*2, gpipe M=4", two, {gpu(0), gpu(0)}, "gpipe", 4, false, false},
        {"gpu:0*2, 1f1b M=8", two, {gpu(0), gpu(0)}, "1f1b", 8, false, false},
        {"gpu:0*2, 1f1b M=4, copies", two, {gpu(0), gpu(0)}, "1f1b", 4, true, false},
    };
    // One case that throws (a CUDA error, a refused plan) fails itself; the others still run.
    const auto guarded = [](const char* what, const std::function<void()>& check) {
        try {
            check();
        } catch (const std::exception& e) {
            CHECK(false, "%s: %s", what, e.what());
        }
    };
    for (const Case& c : shared) guarded(c.name, [&] { trainsAsOneDevice(c, one, tolerance); });
    const std::vector<Case> separate = {
        {"gpu:0,gpu:1 (NCCL), naive", two, {gpu(0), gpu(1)}, "naive", 1, false, true},
        {"gpu:0,gpu:1 (NCCL), gpipe M=4", two, {gpu(0), gpu(1)}, "gpipe", 4, false, true},
        {"gpu:0,gpu:1 (NCCL), 1f1b M=8", two, {gpu(0), gpu(1)}, "1f1b", 8, false, true},
        {"gpu:0,gpu:1,gpu:2 (NCCL), 1f1b M=4", three, {gpu(0), gpu(1), gpu(2)}, "1f1b", 4, false, true},
        {"gpu:0,gpu:1,gpu:2 (NCCL), gpipe M=8", three, {gpu(0), gpu(1), gpu(2)}, "gpipe", 8, false, true},
    };
    for (const Case& c : separate) {
        int needed = 0;
        for (const Device& d : c.devices) needed = std::max(needed, d.index + 1);
        if (gpuCount() < needed) {
            std::printf("%-44s skipped: needs %d GPUs, this machine has %d\n", c.name, needed, gpuCount());
            continue;
        }
        if (!ncclAvailable()) {
            std::printf("%-44s skipped: no NCCL here (the stages copy between GPUs instead)\n", c.name);
            continue;
        }
        guarded(c.name, [&] { trainsAsOneDevice(c, one, tolerance); });
    }
    guarded("the engine gathers the variables", engineGathersTheVariables);
    guarded("whole runs", [&] { runsTrainAsOneTower(mode == "gpu" ? 1e-3 : 1e-4); });
    return tbcheck::exitStatus();
}
