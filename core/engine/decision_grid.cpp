#include "engine/decision_grid.hpp"

#include <algorithm>
#include <cmath>

namespace tb {

std::unique_ptr<DecisionGridProbe> DecisionGridProbe::make(const std::vector<TrainingObserver*>& observers,
                                                           const ModelSpec& spec, const Dataset& train,
                                                           int64_t totalSteps, bool averaging) {
    // A point is a (2, 1, 1) sample of float features; images have no plane to draw.
    if (train.sampleSize() != 2 || train.features.empty() || totalSteps < 1) return nullptr;
    int frames = 0, cells = 0;
    double gap = 0;
    for (const TrainingObserver* o : observers) {
        const DecisionGridRequest r = o->decisionGridRequest();
        frames = std::max(frames, r.frames);
        cells = std::max(cells, r.cells);
        if (r.maxGapSeconds > 0) gap = gap > 0 ? std::min(gap, r.maxGapSeconds) : r.maxGapSeconds;
    }
    if (frames < 1 || cells < 2) return nullptr;
    const int64_t every = std::max<int64_t>(1, totalSteps / frames);
    return std::make_unique<DecisionGridProbe>(spec, train, every, std::min(cells, kMaxCells), averaging, totalSteps,
                                               gap);
}

DecisionGridProbe::DecisionGridProbe(const ModelSpec& spec, const Dataset& train, int64_t every, int cells,
                                     bool averaging, int64_t totalSteps, double maxGapSeconds)
    : cpu_(makeCpuBackend(1)),
      every_(std::max<int64_t>(1, every)),
      total_(totalSteps),
      maxGap_(maxGapSeconds),
      averaging_(averaging) {
    net_ = std::make_unique<Network>(spec, *cpu_, cells * cells);
    stream_ = cpu_->createStream();
    stats_ = cpu_->empty(Shape{3});
    host_.resize(size_t(net_->paramCount()));

    // One square plane around every training point, with a margin, so neither axis is stretched.
    const size_t n = train.size();
    double x0 = train.features[0], x1 = x0, y0 = train.features[1], y1 = y0;
    for (size_t i = 0; i < n; ++i) {
        x0 = std::min<double>(x0, train.features[2 * i]);
        x1 = std::max<double>(x1, train.features[2 * i]);
        y0 = std::min<double>(y0, train.features[2 * i + 1]);
        y1 = std::max<double>(y1, train.features[2 * i + 1]);
    }
    const double half = 0.55 * std::max({x1 - x0, y1 - y0, 1e-6});
    const double cx = (x0 + x1) / 2, cy = (y0 + y1) / 2;
    DecisionGrid& g = frame_;
    g.cols = g.rows = cells;
    g.xMin = cx - half;
    g.xMax = cx + half;
    g.yMin = cy - half;
    g.yMax = cy + half;
    g.classes = net_->outputs();  // what the model can predict; the data may have fewer
    // The classes are interleaved in the synthetic sets, so the first points are a fair sample.
    const size_t shown = std::min<size_t>(n, kMaxPoints);
    g.points.assign(train.features.begin(), train.features.begin() + std::ptrdiff_t(2 * shown));
    g.labels.assign(train.labels.begin(), train.labels.begin() + std::ptrdiff_t(shown));

    // The grid's cell centres as the network's input, (cells * cells, 1, 1, 2) row by row from
    // yMin, and labels it never learns from (the loss statistics need some): both set once.
    std::vector<float> input(size_t(2 * cells * cells));
    for (int r = 0; r < cells; ++r)
        for (int c = 0; c < cells; ++c) {
            const size_t i = size_t(r * cells + c);
            input[2 * i] = float(g.xMin + (g.xMax - g.xMin) * c / (cells - 1));
            input[2 * i + 1] = float(g.yMin + (g.yMax - g.yMin) * r / (cells - 1));
        }
    cpu_->copyFromHost(stream_, net_->input(), input.data(), input.size() * sizeof(float));
    cpu_->fill(stream_, reinterpret_cast<float*>(net_->labels()), 0.f, size_t(cells * cells));
    cpu_->synchronize(stream_);
}

DecisionGridProbe::~DecisionGridProbe() {
    net_.reset();
    stats_ = Tensor();
    cpu_->destroyStream(stream_);
}

void DecisionGridProbe::after(const StepMetrics& m, TrainingEngine& towers, TrainingObserver& out) {
    const bool last = m.step >= total_;
    const bool late = maxGap_ > 0 && m.elapsedSeconds - lastFrameAt_ >= maxGap_;
    if (m.step < next_ && !late && !last) return;
    if (averaging_ && !m.averaged && !last) return;  // mid-round the replicas have moved on
    next_ = (m.step / every_ + 1) * every_;  // the first step, then multiples of the spacing
    lastFrameAt_ = m.elapsedSeconds;
    if (m.pusher >= 0) {
        // Async: the report runs on the pusher's thread, whose replica holds the variables it
        // pulled; the holder's own copy is being updated by the other towers meanwhile.
        const int64_t pulled = std::max<int64_t>(0, m.step - 1 - std::max<int64_t>(0, m.staleness));
        DecisionGrid g = sample(towers.replica(m.pusher), m.step, pulled);
        g.pusher = m.pusher;
        out.onDecisionGrid(g);
    } else {
        out.onDecisionGrid(sample(towers.variables(), m.step, m.step));
    }
}

DecisionGrid DecisionGridProbe::sample(const VariablesView& v, int64_t step, int64_t version) {
    const size_t bytes = host_.size() * sizeof(float);
    v.backend->copyToHost(v.stream, host_.data(), v.params, bytes);
    v.backend->synchronize(v.stream);
    cpu_->copyFromHost(stream_, net_->params(), host_.data(), bytes);
    net_->forward(stream_, false, 0, net_->batch(), stats_.data());
    cpu_->synchronize(stream_);

    DecisionGrid g = frame_;
    g.step = step;
    g.version = version;
    const int k = net_->outputs();
    const size_t cells = size_t(net_->batch());
    g.predicted.resize(cells);
    g.confidence.resize(cells);
    const float* probs = net_->probs();  // (cells, k) in host memory: a CPU backend
    for (size_t i = 0; i < cells; ++i) {
        const float* p = probs + i * size_t(k);
        const int best = int(std::max_element(p, p + k) - p);
        g.predicted[i] = uint8_t(best);
        g.confidence[i] = p[best];
    }
    return g;
}

}  // namespace tb
