// The reference of the pipeline tests (tst_pipeline, and tst_gpu_stages on stand-in or real GPUs):
// a small CNN with every layer kind that keeps state between forward and backward, 10 steps of
// made-up but learnable batches, one device running the whole batch, and the same training by a
// StagePipeline, compared by loss per step and weights at the end.
#pragma once
#include <algorithm>
#include <memory>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "nn/network.hpp"
#include "optim/optimizer.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/stage_pipeline.hpp"

namespace tbtest {

using namespace tb;

// Every layer kind that carries state between forward and backward (pooling's argmax, LRN's
// scales, dropout's mask), weight decay, and a stage boundary that can fall on Flatten.
inline ModelSpec stagedCnn() {
    return parseModelSpec(R"({"name": "staged", "input": [1, 8, 8], "layers": [
        {"type": "conv2d", "name": "conv1", "filters": 4, "kernel": 3, "init": {"type": "truncated_normal", "stddev": 0.3}, "bias": 0.1, "weight_decay": 0.01},
        {"type": "relu"}, {"type": "maxpool", "name": "pool1", "size": 2, "stride": 2},
        {"type": "lrn", "depth_radius": 1, "alpha": 0.01, "beta": 0.75},
        {"type": "flatten"},
        {"type": "dense", "name": "fc1", "units": 24, "init": {"type": "glorot"}, "weight_decay": 0.004}, {"type": "relu"},
        {"type": "dropout", "keep": 0.7},
        {"type": "dense", "name": "fc2", "units": 16, "init": {"type": "glorot"}}, {"type": "relu"},
        {"type": "dense", "name": "logits", "units": 4, "init": {"type": "glorot"}}]})",
                          "staged.json");
}

constexpr int kBatch = 32, kSteps = 10;
constexpr uint64_t kSeed = 7;

inline std::vector<Batch> batches(const ModelSpec& spec) {
    std::mt19937 rng(99);
    std::normal_distribution<float> x(0.f, 1.f);
    std::vector<Batch> out(kSteps);
    const size_t row = size_t(spec.inC) * spec.inH * spec.inW;
    for (Batch& b : out) {
        b.n = kBatch, b.c = spec.inC, b.h = spec.inH, b.w = spec.inW;
        for (size_t i = 0; i < kBatch * row; ++i) b.x.push_back(x(rng));
        for (int i = 0; i < kBatch; ++i) {  // the label: the quadrant with the largest sum (learnable)
            float sums[4] = {0, 0, 0, 0};
            for (int y = 0; y < spec.inH; ++y)
                for (int x = 0; x < spec.inW; ++x)
                    sums[2 * (2 * y / spec.inH) + 2 * x / spec.inW] += b.x[size_t(i) * row + size_t(y * spec.inW + x)];
            b.y.push_back(int32_t(std::max_element(sums, sums + 4) - sums));
        }
    }
    return out;
}

inline OptimizerSettings momentum() {
    OptimizerSettings o;
    o.rule = UpdateRule::Momentum;
    o.hyper.momentum = 0.9f;
    o.schedule.initial = 0.05f;
    return o;
}

inline uint64_t stepSeed(int step) { return 1000 + uint64_t(step); }

struct Trained {
    std::vector<double> losses;  // per step, mean over the batch
    std::vector<float> weights;  // after the last step
    std::vector<int64_t> bytesMoved;  // per step
    std::vector<float> statistics;    // batch norm's moving statistics after the last step (or none)
};

// The reference: one device, the whole batch (by default a CPU backend of 1 thread).
inline Trained oneDevice(const ModelSpec& spec, std::shared_ptr<Backend> be = makeCpuBackend(1)) {
    Stream s = be->createStream();
    Trained t;
    {
        Network net(spec, *be, kBatch);
        const std::vector<float> init = net.initialParams(kSeed);
        be->copyFromHost(s, net.params(), init.data(), init.size() * sizeof(float));
        const OptimizerSettings o = momentum();
        Optimizer opt(*be, o.rule, o.hyper, o.schedule, size_t(net.paramCount()), s);
        Tensor stats = be->empty(Shape{3});
        const std::vector<Batch> data = batches(spec);
        for (int k = 0; k < kSteps; ++k) {
            const Batch& b = data[size_t(k)];
            be->copyFromHost(s, net.input(), b.x.data(), b.x.size() * sizeof(float));
            be->copyFromHost(s, net.labels(), b.y.data(), b.y.size() * sizeof(int32_t));
            be->fill(s, stats.data(), 0.f, 3);
            net.forward(s, true, stepSeed(k), kBatch, stats.data());
            net.backward(s);
            opt.apply(s, net.params(), net.grads(), k);
            float host[3];
            be->copyToHost(s, host, stats.data(), sizeof host);
            be->synchronize(s);
            t.losses.push_back(host[0] / kBatch);
        }
        t.weights.resize(size_t(net.paramCount()));
        be->copyToHost(s, t.weights.data(), net.params(), t.weights.size() * sizeof(float));
        t.statistics.resize(size_t(net.statisticCount()));
        if (net.hasBatchNorm())
            be->copyToHost(s, t.statistics.data(), net.statistics(), t.statistics.size() * sizeof(float));
        be->synchronize(s);
    }
    be->destroyStream(s);
    return t;
}

// `devices`: each stage's (empty: cpu:0, cpu:1, ...).
inline Trained pipelined(const ModelSpec& spec, const std::vector<std::pair<int, int>>& ranges, const std::string& schedule,
                         int micro, int replicas = 1, bool copies = false, std::vector<Device> devices = {},
                         bool syncBatchNorm = false) {
    StagePipelineSetup setup;
    setup.copies = copies;
    setup.syncBatchNorm = syncBatchNorm;
    setup.ranges = ranges;
    for (size_t i = 0; devices.empty() && i < ranges.size(); ++i) setup.devices.push_back(Device{DeviceType::Cpu, int(i)});
    if (!devices.empty()) setup.devices = std::move(devices);
    setup.batch = kBatch;
    setup.microBatches = micro;
    setup.replicas = replicas;
    setup.opt = momentum();
    setup.seed = kSeed;
    const auto sched = makePipelineSchedule(schedule);
    StagePipeline pipe(spec, setup, *sched);
    Trained t;
    const std::vector<Batch> data = batches(spec);
    for (int k = 0; k < kSteps; ++k) {
        const PipelineStep r = pipe.step(data[size_t(k)], k, stepSeed(k));
        t.losses.push_back(r.lossSum / r.examples);
        t.bytesMoved.push_back(r.bytesMoved);
    }
    t.weights = pipe.variables();
    t.statistics.resize(size_t(Network(spec, *makeCpuBackend(1), 1).statisticCount()));
    pipe.statisticsInto(t.statistics.data());
    return t;
}

inline double relativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0, n = 0;
    for (size_t i = 0; i < a.size(); ++i) d += double(a[i] - b[i]) * (a[i] - b[i]), n += double(a[i]) * a[i];
    return std::sqrt(d / n);
}

}  // namespace tbtest
