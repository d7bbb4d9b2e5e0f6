// tst_reference: the whole model against an independent implementation, as llm.c checks itself
// against PyTorch. 10 steps of SGD with momentum on mnist_cnn, cifar10_cnn and resnet20 (batch
// norm, weight decay on every weight, a graph) from fixed weights and inputs (the counter-based
// generator of tests/reference/make_pytorch_reference.py, which recorded PyTorch's numbers once
// into pytorch_reference.json; no PyTorch is needed here):
//   - every step's loss within 1e-4 relative of PyTorch's
//   - the final parameters within 1e-4 of their norm of PyTorch's, through the stored sketch
//     (||S d|| / sqrt(rows) estimates the norm of the difference d), and every tensor's norm
//   - batch norm's moving means and variances: every tensor's norm within 1e-4
// resnet20's reference is PyTorch in float64, and the bounds are twice what PyTorch's own float32
// run of the same steps came to from it (and at least 1e-4): fp32 can do no better than that
// there (make_pytorch_reference.py says why), so Towerbench must do as well as PyTorch does.
//   tst_reference cpu   on a CPU tower;   tst_reference gpu   on gpu:0 (skipped without one)
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/elementwise_math.hpp"
#include "backend/registry.hpp"
#include "nn/model_spec.hpp"
#include "parallel/tower_set.hpp"
#include "plain_check.hpp"

namespace {

float u(uint64_t seed, uint64_t i) { return tb::ew::uniformAt(seed, i); }

// The 128 (or more) signed sums of the generator's docstring.
std::vector<double> sketch(const std::vector<float>& w, int rows) {
    std::vector<double> s(size_t(rows), 0.0);
    for (size_t i = 0; i < w.size(); ++i)
        for (int block = 0; block < rows / 64; ++block) {
            uint64_t z = uint64_t(5000 + block) + 0x9E3779B97F4A7C15ull * (uint64_t(i) + 1);
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            z ^= z >> 31;
            for (int bit = 0; bit < 64; ++bit) s[size_t(block * 64 + bit)] += ((z >> bit) & 1) ? w[i] : -w[i];
        }
    return s;
}

void check(const nlohmann::json& ref, const nlohmann::json& r, const tb::Device& device) {
    const std::string name = r["model"];
    const tb::ModelSpec spec = tb::findModel(name);
    const int batch = ref["batch"], steps = ref["steps"];
    tb::DeploymentPlan plan;
    plan.towers = {device};
    plan.variables = tb::VariablePlacement::Tower;
    plan.batchPerTower = batch;
    tb::OptimizerSettings opt;
    opt.rule = tb::UpdateRule::Momentum;
    opt.hyper.momentum = float(ref["momentum"]);
    opt.schedule.initial = float(ref["lr"]);
    tb::TowerSet towers(spec, plan, opt, 2, 1);
    // The generator's weights, in the flat order.
    tb::Network& net = towers.evalNetwork();
    std::vector<float> w(size_t(net.paramCount()));
    for (size_t k = 0; k < net.paramInfos().size(); ++k) {
        const tb::ParamInfo& p = net.paramInfos()[k];
        const bool weights = p.shape.rank() > 1;
        const bool gamma = p.name.size() > 6 && p.name.compare(p.name.size() - 6, 6, "/gamma") == 0;
        const int64_t fanIn = p.shape.numel() / p.shape[0];
        const float bound = weights ? float(1.0 / std::sqrt(double(fanIn))) : 0.1f;
        for (int64_t i = 0; i < p.shape.numel(); ++i)
            w[size_t(net.paramOffsets()[k] + i)] = (2.f * u(1000 + k, uint64_t(i)) - 1.f) * bound + (gamma ? 1.f : 0.f);
    }
    tb::VariablesView v = towers.variables();
    v.backend->copyFromHost(v.stream, v.params, w.data(), w.size() * sizeof(float));
    v.backend->synchronize(v.stream);
    CHECK(int64_t(w.size()) == r["params"].get<int64_t>(), "%s: %zu parameters, PyTorch has %lld", name.c_str(), w.size(),
          (long long)r["params"].get<int64_t>());

    const tb::Dims in = net.inputDims();
    double worst = 0;
    for (int s = 0; s < steps; ++s) {
        tb::Batch b;
        b.n = batch;
        b.c = in.c;
        b.h = in.h;
        b.w = in.w;
        b.x.resize(size_t(batch) * size_t(in.size()));
        for (size_t j = 0; j < b.x.size(); ++j) b.x[j] = 2.f * u(7000 + s, j) - 1.f;
        b.y.resize(size_t(batch));
        for (int j = 0; j < batch; ++j)
            b.y[size_t(j)] = r.value("one_label", false) ? 3 : int32_t(std::floor(double(u(9000 + s, uint64_t(j))) * 10));
        const tb::TowerStep step = towers.step(b, s, 0);
        const double loss = step.lossSum[0] / batch + step.weightDecayLoss, expect = r["losses"][size_t(s)];
        worst = std::max(worst, std::abs(loss - expect) / std::abs(expect));
    }
    v = towers.variables();
    v.backend->copyToHost(v.stream, w.data(), v.params, w.size() * sizeof(float));
    v.backend->synchronize(v.stream);
    const std::vector<double> mine = sketch(w, ref["sketch_rows"]);
    double d2 = 0;
    for (size_t j = 0; j < mine.size(); ++j) d2 += std::pow(mine[j] - r["sketch"][j].get<double>(), 2);
    const double distance = std::sqrt(d2 / double(mine.size())), norm = r["norm"];
    double worstTensor = 0;
    for (size_t k = 0; k < net.paramInfos().size(); ++k) {
        double n2 = 0;
        for (int64_t i = 0; i < net.paramInfos()[k].shape.numel(); ++i)
            n2 += std::pow(double(w[size_t(net.paramOffsets()[k] + i)]), 2);
        const double expect = r["tensor_norms"][k];
        worstTensor = std::max(worstTensor, std::abs(std::sqrt(n2) - expect) / expect);
    }
    const auto bound = [&](const char* key) {
        return r.contains("fp32_gap") ? std::max(1e-4, 2 * r["fp32_gap"][key].get<double>()) : 1e-4;
    };
    // Batch norm's moving statistics, tensor by tensor (means, then variances, layer by layer).
    const std::vector<float> moving = towers.statistics();
    double worstStatistic = 0;
    CHECK(net.statisticInfos().size() == r["statistics_norms"].size(), "%s: %zu statistics tensors, PyTorch has %zu",
          name.c_str(), net.statisticInfos().size(), r["statistics_norms"].size());
    for (size_t k = 0; k < net.statisticInfos().size() && k < r["statistics_norms"].size(); ++k) {
        double n2 = 0;
        for (int64_t i = 0; i < net.statisticInfos()[k].shape.numel(); ++i)
            n2 += std::pow(double(moving[size_t(net.statisticOffsets()[k] + i)]), 2);
        const double expect = r["statistics_norms"][k];
        worstStatistic = std::max(worstStatistic, std::abs(std::sqrt(n2) - expect) / std::max(expect, 1e-3));
    }
    std::printf("%s on %s against PyTorch's %s: worst loss difference %.2e; final weights %.2e of their norm apart "
                "(estimated; PyTorch moved them by %.2f%%); worst tensor norm %.2e; worst moving statistics' norm "
                "%.2e of %zu%s\n",
                name.c_str(), device.str().c_str(), r.value("precision", std::string("float32")).c_str(), worst,
                distance / norm, 100 * r["update_norm"].get<double>() / norm, worstTensor, worstStatistic,
                net.statisticInfos().size(),
                r.contains("fp32_gap") ? ("; PyTorch's float32 run: " + r["fp32_gap"].dump()).c_str() : "");
    CHECK(worstStatistic <= bound("statistics_norm"), "%s: a moving statistic's norm is %g away (limit %g)",
          name.c_str(), worstStatistic, bound("statistics_norm"));
    CHECK(worst <= bound("loss"), "%s: a step's loss is %g away from PyTorch's (limit %g)", name.c_str(), worst,
          bound("loss"));
    CHECK(distance <= bound("weights") * norm, "%s: the final weights are %g of their norm from PyTorch's (limit %g)",
          name.c_str(), distance / norm, bound("weights"));
    CHECK(worstTensor <= bound("tensor_norm"), "%s: a parameter tensor's norm is %g away (limit %g)", name.c_str(),
          worstTensor, bound("tensor_norm"));
}

}  // namespace

int main(int argc, char** argv) {
    const std::string which = argc > 1 ? argv[1] : "cpu";
    tb::Device device;
    if (which == "gpu") {
        if (!tb::gpuRuntime().available) return tbcheck::skip(tb::gpuRuntime().whyNot.c_str());
        device = tb::Device{tb::DeviceType::Cuda, 0};
    }
    std::ifstream f(std::string(TB_SOURCE_DIR) + "/tests/reference/pytorch_reference.json");
    const nlohmann::json ref = nlohmann::json::parse(f);
    for (const auto& r : ref["models"]) check(ref, r, device);
    return tbcheck::exitStatus();
}
