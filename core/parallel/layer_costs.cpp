#include "parallel/layer_costs.hpp"

#include <algorithm>
#include <chrono>
#include <memory>

#include "nn/network.hpp"
#include "util/compute_thread.hpp"
#include "util/elapsed.hpp"

namespace tb {

namespace {

double median(std::vector<double> runs) {
    std::nth_element(runs.begin(), runs.begin() + std::ptrdiff_t(runs.size() / 2), runs.end());
    return runs[runs.size() / 2];
}

// Layers [range] as a network of their own at `batch`, with everything a forward and backward
// read: initial parameters, an input, labels (or an output's gradient) and, past the first
// layer, somewhere to write the input's gradient.
struct Isolated {
    Isolated(const ModelSpec& spec, Backend& backend, int batch, LayerRange range)
        : be(backend), net(spec, backend, batch, range), s(backend.createStream()) {
        if (const std::vector<float> init = net.initialParams(1); !init.empty())  // ReLU, pooling: none
            be.copyFromHost(s, net.params(), init.data(), init.size() * sizeof(float));
        // Small values, as a trained network's (no denormals, no overflow in LRN's powers).
        const size_t in = size_t(batch) * size_t(net.inputDims().size());
        const size_t out = size_t(batch) * size_t(net.outputDims().size());
        x = be.empty(Shape{int64_t(in)}), dy = be.empty(Shape{int64_t(out)}), dx = be.empty(Shape{int64_t(in)});
        stats = be.empty(Shape{3});
        be.fill(s, x.data(), 0.5f, in);
        be.fill(s, dy.data(), 0.01f, out);
        be.fill(s, stats.data(), 0.f, 3);
        if (net.input()) be.copy(s, net.input(), x.data(), in * sizeof(float));
        else net.setInput(x.data());
        if (net.endsInLoss()) {
            const std::vector<int32_t> labels(size_t(batch), 0);
            be.copyFromHost(s, net.labels(), labels.data(), labels.size() * sizeof(int32_t));
        } else {
            net.setOutputGrad(dy.data());
        }
        if (range.first > 0) net.setInputGrad(dx.data());
    }
    ~Isolated() { be.destroyStream(s); }
    Backend& be;
    Network net;
    Stream s;
    Tensor x, dy, dx, stats;
};

}  // namespace

std::vector<double> measureLayerSeconds(const ModelSpec& spec, Backend& backend, int batch, int repeats) {
    repeats = std::max(repeats, 1);
    enterComputeTeam(0);  // this thread runs the layers (util/compute_thread.hpp)
    // The pieces measured alone: each layer, or in a graph each run of layers between two cuts (a
    // residual block, which only runs whole), its seconds counted at its first layer.
    std::vector<LayerRange> pieces;
    for (int l = 0; l < int(spec.layers.size()); ++l)
        if (l == 0 || cutProblem(spec, l).empty()) pieces.push_back({l, l});
        else pieces.back().last = l;
    const int layers = int(pieces.size());
    std::vector<std::unique_ptr<Isolated>> each;
    for (const LayerRange& p : pieces) each.push_back(std::make_unique<Isolated>(spec, backend, batch, p));
    // Rounds over every layer, a warm-up round first, so that the machine's drift (its clock
    // rising, a neighbour's load) touches every layer alike: measured one layer after another, the
    // first layers came out up to twice the others on a uniform MLP and the balanced split put
    // two layers of eight in the first stage.
    std::vector<std::vector<double>> runs(static_cast<size_t>(layers));
    for (int r = 0; r <= repeats; ++r)
        for (int l = 0; l < layers; ++l) {
            Isolated& one = *each[size_t(l)];
            const auto t0 = std::chrono::steady_clock::now();
            one.net.forward(one.s, true, uint64_t(r), batch, one.stats.data());
            one.net.backward(one.s);
            backend.synchronize(one.s);
            if (r > 0) runs[size_t(l)].push_back(secondsSince(t0));
        }
    std::vector<double> cost(spec.layers.size(), 0.0);
    for (int p = 0; p < layers; ++p) cost[size_t(pieces[size_t(p)].first)] = median(std::move(runs[size_t(p)]));
    return cost;
}

double measureStageStepSeconds(const ModelSpec& spec, Backend& backend, LayerRange range, int microBatch,
                               int microBatches, int repeats, const std::function<void()>& beforeEach) {
    enterComputeTeam(0);  // this thread runs the stage (util/compute_thread.hpp)
    Isolated stage(spec, backend, microBatch, range);
    Network& net = stage.net;
    const size_t n = size_t(net.paramCount());
    // The step's gradient and one micro-batch's, both held here (as a stage's replica holds them;
    // binding the network to them releases its own).
    Tensor step, scratch;
    if (microBatches > 1 && n > 0) {
        step = backend.empty(Shape{int64_t(n)});
        scratch = backend.empty(Shape{int64_t(n)});
    }
    float* grads = step.empty() ? net.grads() : step.data();
    std::vector<double> runs;
    for (int r = 0; r <= std::max(repeats, 1); ++r) {
        if (beforeEach) beforeEach();
        const auto t0 = std::chrono::steady_clock::now();
        for (int m = 0; m < microBatches; ++m) net.forward(stage.s, true, uint64_t(m), microBatch, stage.stats.data());
        for (int m = 0; m < microBatches; ++m) {  // as StagePipeline: the first writes, the others add on
            if (!scratch.empty()) net.bindGrads(m == 0 ? grads : scratch.data());
            net.backward(stage.s);
            if (m > 0 && !scratch.empty()) backend.axpy(stage.s, 1.f, scratch.data(), grads, n);
        }
        backend.synchronize(stage.s);
        if (r > 0) runs.push_back(secondsSince(t0));
    }
    return median(runs);
}

}  // namespace tb
