#include "engine/selftest.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "backend/algorithm_store.hpp"
#include "backend/backend_check.hpp"
#include "backend/registry.hpp"
#include "engine/trainer.hpp"
#include "nn/model_spec.hpp"
#include "parallel/tower_set.hpp"
#include "util/error.hpp"

namespace tb {

ModelSpec selfTestModel() {
    // pool1 pads asymmetrically (3x3 stride 2 on 12x12: 0 before, 1 after), as cifar10_cnn does.
    static const char* kJson = R"({"name": "selftest_cnn", "input": [3, 12, 12], "layers": [
        {"type": "conv2d", "name": "conv1", "filters": 8, "kernel": 3, "stride": 1, "padding": "same",
         "init": {"type": "glorot"}, "bias": 0.1},
        {"type": "relu"},
        {"type": "maxpool", "name": "pool1", "size": 3, "stride": 2, "padding": "same"},
        {"type": "lrn", "name": "norm1", "depth_radius": 2, "bias": 1.0, "alpha": 0.001, "beta": 0.75},
        {"type": "conv2d", "name": "conv2", "filters": 16, "kernel": 3, "stride": 1, "padding": "same",
         "init": {"type": "glorot"}, "bias": 0.1},
        {"type": "relu"},
        {"type": "maxpool", "name": "pool2", "size": 2, "stride": 2, "padding": "same"},
        {"type": "flatten"},
        {"type": "dense", "name": "fc1", "units": 32, "init": {"type": "glorot"}, "bias": 0.1, "weight_decay": 0.004},
        {"type": "relu"},
        {"type": "dense", "name": "logits", "units": 10, "init": {"type": "glorot"}, "bias": 0.0}]})";
    return parseModelSpec(kJson, "selftest model");
}

namespace {

std::vector<double> trainLosses(const ModelSpec& spec, const DeploymentPlan& plan, const std::vector<Batch>& batches,
                                UpdateRule rule, uint64_t seed, MatmulPrecision precision, std::vector<float>& params) {
    OptimizerSettings opt;
    opt.rule = rule;
    opt.precision = precision;
    opt.schedule.initial = rule == UpdateRule::Adam ? 0.002f : 0.05f;
    const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
    TowerSet towers(spec, plan, opt, std::max(1, threads / plan.towerCount()), seed);
    // As the trainer calls it: each step with the next one's batch, which the towers stage while
    // they compute; with a report lag the reports come later, the last ones from settle().
    std::vector<TowerStep> reports;
    for (size_t s = 0; s < batches.size(); ++s)
        for (TowerStep& r : towers.steps({&batches[s]}, int64_t(s), 0, s + 1 < batches.size() ? &batches[s + 1] : nullptr))
            reports.push_back(std::move(r));
    for (TowerStep& r : towers.settle()) reports.push_back(std::move(r));
    if (reports.size() != batches.size())
        throw Error("trainLosses: " + std::to_string(reports.size()) + " steps reported of " + std::to_string(batches.size()));
    std::vector<double> losses;
    for (const TowerStep& r : reports) {
        double sum = 0, n = 0;
        for (size_t i = 0; i < r.lossSum.size(); ++i) {
            sum += r.lossSum[i];
            n += r.examples[i];
        }
        losses.push_back(sum / n + r.weightDecayLoss);
    }
    const VariablesView v = towers.variables();
    params.resize(size_t(towers.paramCount()));
    v.backend->copyToHost(v.stream, params.data(), v.params, params.size() * sizeof(float));
    v.backend->synchronize(v.stream);
    return losses;
}

std::string cpuName() {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    return "unknown processor";
}

std::string gib(size_t bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f GiB", double(bytes) / double(1ull << 30));
    return b;
}

// Prints one backend's op check; returns the number of failed cases.
int printOpCheck(std::ostream& out, Backend& be, double matmulTolerance) {
    const std::vector<OpCheck> results = checkBackendOps(be, matmulTolerance);
    int failed = 0;
    const OpCheck* worst = nullptr;  // the passing case closest to its tolerance
    for (const OpCheck& c : results) {
        if (!c.passed) {
            ++failed;
            out << "    FAILED " << c.op << " [" << c.shape << "]: "
                << (c.failure.empty() ? "error " + std::to_string(c.error) + " > " + std::to_string(c.tolerance)
                                      : c.failure)
                << "\n";
        } else if (c.tolerance > 0 && (!worst || c.error / c.tolerance > worst->error / worst->tolerance)) {
            worst = &c;
        }
    }
    out << "  " << be.name() << ": " << results.size() - size_t(failed) << "/" << results.size() << " ops passed";
    if (worst) out << " (closest to its limit: " << worst->op << " " << worst->error << " of " << worst->tolerance << ")";
    out << "\n";
    return failed;
}

}  // namespace

LossComparison compareTowerLosses(const DeploymentPlan& reference, const DeploymentPlan& candidate, int steps,
                                  UpdateRule rule, uint64_t seed, MatmulPrecision candidatePrecision) {
    const ModelSpec spec = selfTestModel();
    const int global = reference.towerCount() * reference.batchPerTower;
    if (candidate.towerCount() * candidate.batchPerTower != global)
        throw Error("compareTowerLosses: the two plans have different global batches");
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<Batch> batches(static_cast<size_t>(steps));
    for (Batch& b : batches) {
        b.n = global;
        b.c = spec.inC;
        b.h = spec.inH;
        b.w = spec.inW;
        b.x.resize(size_t(global) * spec.inC * spec.inH * spec.inW);
        for (float& v : b.x) v = u(rng);
        b.y.resize(size_t(global));
        for (int32_t& y : b.y) y = int32_t(rng() % 10);
    }
    LossComparison c;
    c.reference = trainLosses(spec, reference, batches, rule, seed, MatmulPrecision::Fp32, c.referenceParams);
    c.candidate = trainLosses(spec, candidate, batches, rule, seed, candidatePrecision, c.candidateParams);
    for (size_t i = 0; i < c.reference.size(); ++i)
        c.worstRelative = std::max(c.worstRelative, std::abs(c.candidate[i] - c.reference[i]) / std::abs(c.reference[i]));
    // ||candidate - reference|| / ||reference|| over elements [begin, end).
    auto relative = [&](size_t begin, size_t end) {
        double num = 0, den = 0;
        for (size_t i = begin; i < end; ++i) {
            const double d = double(c.candidateParams[i]) - c.referenceParams[i];
            num += d * d;
            den += double(c.referenceParams[i]) * c.referenceParams[i];
        }
        return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    };
    c.paramsRelative = relative(0, c.referenceParams.size());
    const std::shared_ptr<Backend> cpu = makeCpuBackend(1);
    const Network layout(spec, *cpu, 1);  // the variables' names and offsets
    for (size_t v = 0; v < layout.paramInfos().size(); ++v) {
        const size_t begin = size_t(layout.paramOffsets()[v]);
        const double r = relative(begin, begin + size_t(layout.paramInfos()[v].shape.numel()));
        if (v == 0 || r > c.worstTensorRelative) c.worstTensorRelative = r, c.worstTensor = layout.paramInfos()[v].name;
    }
    return c;
}

int runSelfTest(std::ostream& out) {
    int failures = 0;
    out << "towerbench selftest\n\ndevices:\n  cpu: " << cpuName() << ", " << std::thread::hardware_concurrency()
        << " threads\n";
    const GpuRuntime& gpu = gpuRuntime();
    if (!gpu.available) {
        out << "  gpu: none (" << gpu.whyNot << ")\n";
    } else {
        for (const GpuInfo& g : gpu.gpus)
            out << "  gpu:" << g.index << ": " << g.name << ", " << gib(g.totalBytes) << ", compute capability "
                << g.ccMajor << "." << g.ccMinor << ", " << g.multiprocessors << " multiprocessors, PCI " << g.pciBusId
                << "\n";
        out << "  CUDA: " << gpu.versionsText() << " (module " << gpu.modulePath << ")\n";
        const std::string choices = algorithmStorePath();
        out << "  cuDNN algorithm choices kept in "
            << (choices.empty() ? std::string("no file (TOWERBENCH_ALGORITHM_CACHE=off, or no home)") : choices) << "\n";
    }

    out << "\nop check (every op against a double-precision reference):\n";
    std::vector<Device> devices{Device{}};
    for (const GpuInfo& g : gpu.gpus) devices.push_back(Device{DeviceType::Cuda, g.index});
    // Each device in fp32, then in bf16 where a run could use it (checkPrecision says why not):
    // its convolutions and inner products within bf16's tolerance, the other ops still fp32's.
    for (const Device& d : devices)
        for (const MatmulPrecision p : {MatmulPrecision::Fp32, MatmulPrecision::Bf16}) {
            const bool bf16 = p == MatmulPrecision::Bf16;
            const std::string label = d.str() + (bf16 ? " bf16" : "");
            try {
                if (bf16) {
                    DeploymentPlan one;
                    one.towers = {d};
                    checkPrecision("bf16", one, gpu.gpus);
                }
            } catch (const std::exception& e) {
                out << "  " << label << ": not checked (" << e.what() << ")\n";
                continue;
            }
            try {
                BackendOptions o;
                o.precision = p;
                failures += printOpCheck(out, *makeBackend(d, o), bf16 ? kBf16MatmulTolerance : kFp32MatmulTolerance);
            } catch (const std::exception& e) {
                out << "  " << label << ": FAILED to run: " << e.what() << "\n";
                ++failures;
            }
        }

    out << "\ntower check (20 steps of a small CNN from the same weights on the same batches):\n";
    if (!gpu.available) {
        out << "  skipped: no GPU to compare with the CPU tower\n";
    } else {
        DeploymentPlan cpu;
        cpu.towers = {Device{}};
        cpu.batchPerTower = 32;
        for (const GpuInfo& g : gpu.gpus) {
            DeploymentPlan one = cpu;
            const Device d{DeviceType::Cuda, g.index};
            one.towers = {d};
            one.variables = VariablePlacement::Tower;
            try {
                const LossComparison c = compareTowerLosses(cpu, one, 20);
                const bool ok = c.worstRelative <= 1e-3 && c.worstTensorRelative <= kParamsPerTensorLimit;
                failures += ok ? 0 : 1;
                out << "  " << d.str() << " tower vs cpu:0 tower: losses " << c.reference.front() << " -> "
                    << c.reference.back() << ", worst relative difference " << c.worstRelative
                    << " (limit 1e-3), parameters " << c.worstTensorRelative << " in " << c.worstTensor << " (limit "
                    << kParamsPerTensorLimit << "): " << (ok ? "passed" : "FAILED") << "\n";
            } catch (const std::exception& e) {
                out << "  " << d.str() << " tower: FAILED to run: " << e.what() << "\n";
                ++failures;
            }
        }
    }
    out << "\n" << (failures ? std::to_string(failures) + " check(s) FAILED" : std::string("all checks passed")) << "\n";
    return failures ? 1 : 0;
}

}  // namespace tb
