// Finite-difference gradient checks for every layer (Caffe's GradientChecker), plus forward
// references for the ops whose semantics must match TensorFlow: SAME padding, LRN, max-pool.
// The CPU backend's device memory is host memory, so host vectors are passed straight in.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <random>

#include "backend/backend.hpp"
#include "backend/elementwise_math.hpp"
#include "gpu/forwarding_backend.hpp"
#include "nn/layers.hpp"
#include "nn/model_spec.hpp"
#include "nn/network.hpp"

using namespace tb;

namespace {

std::vector<float> randomVector(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
}

// Random values whose pairwise gaps exceed `gap`, so max-pooling and ReLU have no kink within
// the finite-difference step.
std::vector<float> separatedVector(size_t n, uint64_t seed, float gap) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = (float(i) - float(n) / 2.f) * gap;
    std::shuffle(v.begin(), v.end(), std::mt19937_64(seed));
    return v;
}

// One layer wired to host buffers: x (n, h, w, c) in, y out, its parameters and scratch.
struct Rig {
    std::shared_ptr<Backend> be = makeCpuBackend(1);
    std::unique_ptr<Layer> layer;
    Dims in, out;
    int n;
    std::vector<std::vector<float>> params, grads;
    std::vector<float> workspace, saved, stats;
    bool training = true;

    Rig(const LayerSpec& spec, Dims inDims, int batch) : in(inDims), n(batch) {
        layer = makeLayer(spec);
        out = layer->configure({in});
        layer->prepare(*be, n);
        uint64_t seed = 7;
        for (const auto& p : layer->params()) {
            params.push_back(randomVector(size_t(p.shape.numel()), seed++, -0.5f, 0.5f));
            grads.emplace_back(size_t(p.shape.numel()), 0.f);
        }
        for (size_t i = 0; i < params.size(); ++i) {
            layer->w.push_back(params[i].data());
            layer->dw.push_back(grads[i].data());
        }
        workspace.resize(layer->workspaceBytes() / 4 + 1);
        saved.resize(layer->savedBytes() / 4 + 1);
        layer->saved = saved.data();
        for (const auto& s : layer->statistics())
            for (int64_t i = 0; i < s.shape.numel(); ++i) stats.push_back(s.init.value);
        layer->stats = stats.data();
    }
    LayerContext ctx() { return LayerContext{*be, nullptr, training, 42, workspace.data()}; }
    size_t inSize() const { return size_t(n * in.size()); }
    size_t outSize() const { return size_t(n * out.size()); }
    std::vector<float> forward(const std::vector<float>& x) {
        std::vector<float> y(outSize());
        layer->forward(ctx(), {x.data()}, y.data());
        return y;
    }
    // L = sum(y * r): dL/dy = r.
    double loss(const std::vector<float>& x, const std::vector<float>& r) {
        const auto y = forward(x);
        double l = 0;
        for (size_t i = 0; i < y.size(); ++i) l += double(y[i]) * r[i];
        return l;
    }
};

// Compares analytic gradients of L = sum(y * r) with central differences over up to `probes`
// entries of the input and of every parameter tensor. Returns the worst relative error.
double gradientCheck(Rig& rig, std::vector<float> x, float step, int probes = 40) {
    const auto r = randomVector(rig.outSize(), 99);
    const auto y = rig.forward(x);
    std::vector<float> dx(rig.inSize(), 0.f);
    rig.layer->backward(rig.ctx(), {x.data()}, y.data(), r.data(), {dx.data()});
    const auto analyticW = rig.grads;

    double worst = 0;
    auto compare = [&](float& v, double analytic) {
        const float keep = v;
        v = keep + step;
        const double up = rig.loss(x, r);
        v = keep - step;
        const double down = rig.loss(x, r);
        v = keep;
        const double numeric = (up - down) / (2.0 * double(step));
        const double err = std::abs(numeric - analytic) / std::max(1.0, std::max(std::abs(numeric), std::abs(analytic)));
        worst = std::max(worst, err);
    };
    std::mt19937_64 pick(5);
    for (int p = 0; p < probes; ++p) {
        const size_t i = pick() % x.size();
        compare(x[i], dx[i]);
    }
    for (size_t t = 0; t < rig.params.size(); ++t)
        for (int p = 0; p < probes; ++p) {
            const size_t i = pick() % rig.params[t].size();
            compare(rig.params[t][i], analyticW[t][i]);
        }
    return worst;
}

LayerSpec conv(int filters, int kernel, int stride, bool same) {
    LayerSpec s;
    s.type = LayerType::Conv2d;
    s.name = "conv";
    s.filters = filters;
    s.kernel = kernel;
    s.stride = stride;
    s.samePadding = same;
    return s;
}

LayerSpec pool(int size, int stride, bool same, LayerType type = LayerType::MaxPool) {
    LayerSpec s;
    s.type = type;
    s.name = "pool";
    s.kernel = size;
    s.stride = stride;
    s.samePadding = same;
    return s;
}

LayerSpec lrn(int radius, float bias, float alpha, float beta) {
    LayerSpec s;
    s.type = LayerType::Lrn;
    s.name = "lrn";
    s.depthRadius = radius;
    s.lrnBias = bias;
    s.alpha = alpha;
    s.beta = beta;
    return s;
}

LayerSpec simple(LayerType t) {
    LayerSpec s;
    s.type = t;
    s.name = "layer";
    return s;
}

constexpr double kTolerance = 2e-3;  // float32 forward passes, step 1e-2 (Caffe uses 1e-2 / 1e-3)

// One training step of `spec` (n examples x, labels) from `params` (their first paramCount): the
// loss sum, and every parameter's gradient into grads.
float stepGradients(Backend& be, const ModelSpec& spec, int n, const std::vector<float>& params,
                    const std::vector<float>& x, const int32_t* labels, std::vector<float>& grads) {
    Network net(spec, be, n);
    std::copy(params.begin(), params.begin() + net.paramCount(), net.params());
    std::copy(x.begin(), x.end(), net.input());
    std::copy(labels, labels + n, net.labels());
    float stats[3] = {0, 0, 0};
    net.forward(nullptr, true, 1, n, stats);
    net.backward(nullptr);
    grads.assign(net.grads(), net.grads() + net.paramCount());
    return stats[0];
}

// Gradients [begin, end) that one network sums in another order than the other (a convolution's
// bias gradient that the layer after it sums: PoolDesc::sumDx): equal to within rounding.
struct SummedApart {
    size_t begin = 0, end = 0;
};

// One step of two networks from the same parameters on the same batch: where their losses or
// gradients differ in any bit (beyond rounding in `summed`), the first difference in words; empty
// where they are the same.
QString firstDifference(Backend& be, const ModelSpec& a, const ModelSpec& b, int n, const std::vector<float>& params,
                        const std::vector<float>& x, const int32_t* labels, SummedApart summed = {}) {
    std::vector<float> ga, gb;
    const float la = stepGradients(be, a, n, params, x, labels, ga), lb = stepGradients(be, b, n, params, x, labels, gb);
    if (la != lb) return QStringLiteral("loss %1 against %2").arg(la).arg(lb);
    if (ga.size() != gb.size()) return QStringLiteral("%1 gradients against %2").arg(ga.size()).arg(gb.size());
    for (size_t i = 0; i < ga.size(); ++i) {
        const bool rounded = i >= summed.begin && i < summed.end;
        if (rounded ? std::abs(double(ga[i]) - gb[i]) > 1e-5 * std::max(1e-2, std::abs(double(gb[i]))) : ga[i] != gb[i])
            return QStringLiteral("gradient %1: %2 against %3").arg(i).arg(double(ga[i]), 0, 'g', 9).arg(double(gb[i]), 0, 'g', 9);
    }
    return {};
}

// Counts the pooling and LRN plans asked to sum their input gradient (PoolDesc::sumDx) and the
// convolutions' weight gradients computed without their bias gradient.
class SumWatch final : public tbtest::ForwardingBackend {
public:
    using ForwardingBackend::ForwardingBackend;
    int summingPlans = 0, convsLeavingDb = 0, convsWithoutDx = 0, weightsAlone = 0;
    std::unique_ptr<PoolOp> makePool(const PoolDesc& d) override {
        summingPlans += d.sumDx;
        return ForwardingBackend::makePool(d);
    }
    std::unique_ptr<LrnOp> makeLrn(const LrnDesc& d) override {
        summingPlans += d.sumDx;
        return ForwardingBackend::makeLrn(d);
    }
    std::unique_ptr<ConvOp> makeConv(const ConvDesc& d) override {
        convsLeavingDb += d.bias && !d.biasGradient;
        convsWithoutDx += !d.inputGradient;
        class Watched final : public ConvOp {
        public:
            Watched(std::unique_ptr<ConvOp> op, int& alone) : op_(std::move(op)), alone_(alone) {}
            size_t workspaceBytes() const override { return op_->workspaceBytes(); }
            void forward(Stream s, const float* x, const float* w, const float* b, float* y, void* ws) override {
                op_->forward(s, x, w, b, y, ws);
            }
            void backwardData(Stream s, const float* dy, const float* w, float* dx, void* ws) override {
                op_->backwardData(s, dy, w, dx, ws);
            }
            void backwardWeights(Stream s, const float* x, const float* dy, float* dw, float* db, void* ws) override {
                alone_ += db == nullptr;
                op_->backwardWeights(s, x, dy, dw, db, ws);
            }

        private:
            std::unique_ptr<ConvOp> op_;
            int& alone_;
        };
        return std::make_unique<Watched>(ForwardingBackend::makeConv(d), weightsAlone);
    }
};

}  // namespace

class TestLayers : public QObject {
    Q_OBJECT
private slots:
    // The CPU backend's vector arithmetic on a vector of more than 2^31 floats (8 GiB): OpenBLAS's
    // counts, which it used until 2026-12-05, were 32-bit, and a count cast to them wrapped
    // negative, so nothing was scaled; any count must still reach every element. Run with
    // TB_BIG_TESTS=1 on a machine with 10 GiB free (not in CI's default suite).
    void vectorsPast32BitCounts() {
        if (qEnvironmentVariableIntValue("TB_BIG_TESTS") != 1) QSKIP("needs TB_BIG_TESTS=1 and 10 GiB of memory");
        const size_t n = (size_t(1) << 31) + 64;
        std::vector<float> x(n, 1.0f);
        auto be = makeCpuBackend(2);
        be->scale(nullptr, x.data(), 2.0f, n);
        QCOMPARE(x.front(), 2.0f);
        QCOMPARE(x[n / 2], 2.0f);
        QCOMPARE(x.back(), 2.0f);
        float sum = 0;
        be->addSumSquares(nullptr, x.data() + n - 1024, 1024, 1.0f, &sum);
        QCOMPARE(sum, 4096.0f);
        be->axpy(nullptr, -1.0f, x.data(), x.data(), n);  // x - x
        QCOMPARE(x.back(), 0.0f);
    }

    void samePaddingMatchesTensorFlow() {
        // TF: out = ceil(in / stride); total pad = max((out - 1) * stride + k - in, 0), odd pixel after.
        auto p = tfPadding(24, 3, 2, true);
        QCOMPARE(p.out, 12);
        QCOMPARE(p.before, 0);
        QCOMPARE(p.after, 1);
        p = tfPadding(28, 5, 1, true);
        QCOMPARE(p.out, 28);
        QCOMPARE(p.before, 2);
        QCOMPARE(p.after, 2);
        p = tfPadding(28, 5, 1, false);
        QCOMPARE(p.out, 24);
        QCOMPARE(p.before + p.after, 0);
    }

    void convForwardMatchesDirectSum() {
        Rig rig(conv(3, 3, 2, true), {2, 7, 6}, 2);
        const auto x = randomVector(rig.inSize(), 1);
        const auto y = rig.forward(x);
        const auto p = tfPadding(7, 3, 2, true), q = tfPadding(6, 3, 2, true);
        const auto& w = rig.params[0];  // (out, in, kh, kw)
        const auto& b = rig.params[1];
        double worst = 0;
        for (int n = 0; n < 2; ++n)
            for (int oy = 0; oy < rig.out.h; ++oy)
                for (int ox = 0; ox < rig.out.w; ++ox)
                    for (int k = 0; k < 3; ++k) {
                        double s = b[size_t(k)];
                        for (int c = 0; c < 2; ++c)
                            for (int ky = 0; ky < 3; ++ky)
                                for (int kx = 0; kx < 3; ++kx) {
                                    const int iy = oy * 2 + ky - p.before, ix = ox * 2 + kx - q.before;
                                    if (iy < 0 || iy >= 7 || ix < 0 || ix >= 6) continue;
                                    s += double(x[size_t(((n * 7 + iy) * 6 + ix) * 2 + c)]) *
                                         w[size_t(((k * 2 + c) * 3 + ky) * 3 + kx)];
                                }
                        const float got = y[size_t(((n * rig.out.h + oy) * rig.out.w + ox) * 3 + k)];
                        worst = std::max(worst, std::abs(got - s));
                    }
        QVERIFY2(worst < 1e-5, qPrintable(QString("max abs error %1").arg(worst)));
    }

    void maxPoolSameMatchesTensorFlow() {
        // 3x3 stride 2 SAME on 6x6 (as CIFAR's 24 -> 12): total padding 1, all of it after, so
        // windows start at 0, 2, 4 and the last is padded; the padding never wins even when
        // every value is negative.
        Rig rig(pool(3, 2, true), {1, 6, 6}, 1);
        std::vector<float> x(36);
        for (int i = 0; i < 36; ++i) x[size_t(i)] = -100.f + float(i);
        const auto y = rig.forward(x);
        QCOMPARE(rig.out.h, 3);
        QCOMPARE(y[0], x[14]);   // rows 0-2, cols 0-2 -> (2, 2)
        QCOMPARE(y[2], x[17]);   // rows 0-2, cols 4-5 (+ pad) -> (2, 5)
        QCOMPARE(y[8], x[35]);   // rows 4-5, cols 4-5 (+ pad) -> (5, 5)
    }

    void lrnMatchesTensorFlowFormula() {
        const int c = 12, r = 2;
        const float bias = 1.5f, alpha = 0.3f, beta = 0.75f;
        Rig rig(lrn(r, bias, alpha, beta), {c, 2, 3}, 2);
        const auto x = randomVector(rig.inSize(), 3, -2.f, 2.f);
        const auto y = rig.forward(x);
        double worst = 0;
        for (size_t p = 0; p < x.size() / c; ++p)
            for (int j = 0; j < c; ++j) {
                double s = 0;
                for (int i = std::max(0, j - r); i <= std::min(c - 1, j + r); ++i) s += double(x[p * c + i]) * x[p * c + i];
                const double want = x[p * c + j] / std::pow(bias + alpha * s, beta);
                worst = std::max(worst, std::abs(want - y[p * c + j]));
            }
        QVERIFY2(worst < 1e-5, qPrintable(QString("max abs error %1").arg(worst)));
    }

    void gradients_data() {
        QTest::addColumn<int>("which");
        QTest::newRow("conv 5x5 same") << 0;
        QTest::newRow("conv 3x3 stride 2 same") << 1;
        QTest::newRow("conv 3x3 valid") << 2;
        QTest::newRow("maxpool 2x2/2 same") << 3;
        QTest::newRow("maxpool 3x3/2 same") << 4;
        QTest::newRow("relu") << 5;
        QTest::newRow("lrn cifar (r 4, beta 0.75)") << 6;
        QTest::newRow("lrn general beta") << 7;
        QTest::newRow("dense") << 8;
        QTest::newRow("dropout keep 0.6") << 9;
        QTest::newRow("avgpool 3x3/2 same") << 10;
        QTest::newRow("avgpool 2x2/1 valid") << 11;
        QTest::newRow("global avgpool") << 12;
        QTest::newRow("batch norm (training: the batch's statistics)") << 13;
        QTest::newRow("batch norm, 1x1 (after a dense layer)") << 14;
    }
    void gradients() {
        QFETCH(int, which);
        LayerSpec spec;
        Dims in{3, 6, 5};
        bool kinks = false;  // ReLU and max-pool: inputs spaced so no kink lies within the step
        switch (which) {
        case 0: spec = conv(4, 5, 1, true); break;
        case 1: spec = conv(4, 3, 2, true); break;
        case 2: spec = conv(2, 3, 1, false); break;
        case 3: spec = pool(2, 2, true); kinks = true; break;
        case 4: spec = pool(3, 2, true); kinks = true; break;
        case 5: spec = simple(LayerType::Relu); kinks = true; break;
        case 6: spec = lrn(4, 1.f, 0.001f / 9.f, 0.75f); in = {16, 3, 2}; break;
        case 7: spec = lrn(2, 2.f, 0.2f, 0.6f); in = {9, 2, 2}; break;
        case 8: spec = simple(LayerType::Dense); spec.units = 7; in = {11, 1, 1}; break;
        case 9: spec = simple(LayerType::Dropout); spec.keep = 0.6f; break;
        case 10: spec = pool(3, 2, true, LayerType::AvgPool); break;
        case 11: spec = pool(2, 1, false, LayerType::AvgPool); break;
        case 12: spec = simple(LayerType::GlobalAvgPool); break;
        case 13: spec = simple(LayerType::BatchNorm); break;
        case 14: spec = simple(LayerType::BatchNorm); in = {6, 1, 1}; break;
        }
        Rig rig(spec, in, which == 14 ? 5 : 2);
        const auto x = kinks ? separatedVector(rig.inSize(), 11, 0.05f) : randomVector(rig.inSize(), 11);
        const double err = gradientCheck(rig, x, 1e-2f);
        QVERIFY2(err < kTolerance, qPrintable(QString("worst relative error %1").arg(err)));
    }

    // Average pooling as TensorFlow's avg_pool: SAME's padding is not counted in the mean (a
    // corner window of 3x3 at stride 2 over 5x5 with one pixel of padding averages 4 pixels);
    // global average pooling gives each channel's mean, (c, h, w) -> (c, 1, 1).
    void averagePoolingMeansTheRealPixels() {
        Rig rig(pool(3, 2, true, LayerType::AvgPool), {2, 5, 5}, 1);
        std::vector<float> x(rig.inSize());
        for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) - 3.f;  // (h, w, c), c fastest
        const auto y = rig.forward(x);
        QCOMPARE(int(y.size()), 3 * 3 * 2);
        const auto at = [&](int h, int w, int c) { return double(x[size_t((h * 5 + w) * 2 + c)]); };
        for (int c = 0; c < 2; ++c) {
            // SAME over 5 at stride 2 with a window of 3 pads 1 on each side: window (0, 0) is rows
            // and columns -1..1, of which 0..1 are real.
            const double corner = (at(0, 0, c) + at(0, 1, c) + at(1, 0, c) + at(1, 1, c)) / 4;
            QVERIFY(std::abs(y[size_t(c)] - corner) < 1e-6);
        }
        Rig global(simple(LayerType::GlobalAvgPool), {3, 4, 2}, 2);
        const auto g = global.forward(randomVector(global.inSize(), 5));
        QCOMPARE(int(g.size()), 2 * 3);
        std::vector<float> in = randomVector(global.inSize(), 5);
        for (int n = 0; n < 2; ++n)
            for (int c = 0; c < 3; ++c) {
                double sum = 0;
                for (int p = 0; p < 8; ++p) sum += in[size_t((n * 8 + p) * 3 + c)];
                QVERIFY2(std::abs(g[size_t(n * 3 + c)] - sum / 8) < 1e-6, qPrintable(QString::number(g[size_t(n * 3 + c)])));
            }
    }

    // Batch norm as TensorFlow and PyTorch define it: training normalises each channel with the
    // batch's mean and biased variance and moves the moving statistics toward the mean and the
    // unbiased variance by 1 - momentum; evaluation normalises with the moving statistics.
    void batchNormTrainsAndInfersAsTensorFlow() {
        LayerSpec s = simple(LayerType::BatchNorm);
        s.momentum = 0.8f;
        s.epsilon = 1e-3f;
        Rig rig(s, {3, 2, 2}, 4);  // 16 values per channel
        QCOMPARE(int(rig.layer->statistics().size()), 2);
        auto x = randomVector(rig.inSize(), 21, -2.f, 2.f);
        for (size_t i = 0; i < x.size(); ++i) x[i] += 5.f * float(i % 3);  // channel means 0, 5, 10
        const auto& gamma = rig.params[0];
        const auto& beta = rig.params[1];
        const auto y = rig.forward(x);
        for (int c = 0; c < 3; ++c) {
            double mean = 0, var = 0;
            for (size_t i = size_t(c); i < x.size(); i += 3) mean += x[i] / 16.0;
            for (size_t i = size_t(c); i < x.size(); i += 3) var += (x[i] - mean) * (x[i] - mean) / 16.0;
            for (size_t i = size_t(c); i < x.size(); i += 3) {
                const double want = gamma[size_t(c)] * (x[i] - mean) / std::sqrt(var + 1e-3) + beta[size_t(c)];
                QVERIFY2(std::abs(y[i] - want) < 1e-4, qPrintable(QString("y %1 want %2").arg(y[i]).arg(want)));
            }
            QVERIFY(std::abs(rig.stats[size_t(c)] - 0.2 * mean) < 1e-5);                    // 0.8 x 0 + 0.2 mean
            QVERIFY(std::abs(rig.stats[size_t(3 + c)] - (0.8 + 0.2 * var * 16 / 15)) < 1e-5);  // unbiased
        }
        rig.training = false;
        const std::vector<float> moving = rig.stats;
        const auto inferred = rig.forward(x);
        QCOMPARE(rig.stats, moving);  // evaluation leaves them
        for (size_t i = 0; i < x.size(); ++i) {
            const size_t c = i % 3;
            const double want = gamma[c] * (x[i] - moving[c]) / std::sqrt(moving[3 + c] + 1e-3) + beta[c];
            QVERIFY(std::abs(inferred[i] - want) < 1e-4);
        }
    }

    void lrnGradientScalesWithAlpha() {
        // With a large alpha the cross-channel term dominates: a wrong sign or factor there
        // would fail this even if the diagonal term is right.
        Rig rig(lrn(1, 1.f, 2.f, 0.75f), {5, 1, 2}, 1);
        const double err = gradientCheck(rig, randomVector(rig.inSize(), 4), 1e-3f);
        QVERIFY2(err < 5e-3, qPrintable(QString("worst relative error %1").arg(err)));
    }

    void dropoutMaskIsDeterministicAndScaled() {
        LayerSpec s = simple(LayerType::Dropout);
        s.keep = 0.5f;
        Rig rig(s, {1000, 1, 1}, 4);
        const std::vector<float> x(rig.inSize(), 1.f);
        const auto a = rig.forward(x), b = rig.forward(x);
        QCOMPARE(a, b);
        int kept = 0;
        for (float v : a) {
            QVERIFY(v == 0.f || v == 2.f);
            kept += v == 2.f;
        }
        QVERIFY2(std::abs(kept - 2000) < 150, qPrintable(QString("kept %1 of 4000").arg(kept)));
    }

    // The loss head and weight decay, checked through a whole network: d(mean cross-entropy +
    // sum wd * l2_loss(W)) / dW against central differences of the loss the network reports.
    void networkLossAndWeightDecayGradients() {
        const std::string json = R"({"name": "check", "input": [2, 4, 4], "layers": [
            {"type": "conv2d", "filters": 3, "kernel": 3, "init": {"type": "truncated_normal", "stddev": 0.5}, "bias": 0.1, "weight_decay": 0.3},
            {"type": "relu"}, {"type": "maxpool", "size": 2, "stride": 2},
            {"type": "lrn", "depth_radius": 1, "alpha": 0.5, "beta": 0.75},
            {"type": "flatten"}, {"type": "dropout", "keep": 0.7},
            {"type": "dense", "units": 5, "init": {"type": "glorot"}, "weight_decay": 0.2}]})";
        auto be = makeCpuBackend(1);
        Network net(parseModelSpec(json, "check.json"), *be, 3);
        auto p = net.initialParams(3);
        std::copy(p.begin(), p.end(), net.params());
        const auto x = randomVector(size_t(3 * 2 * 4 * 4), 8);
        std::copy(x.begin(), x.end(), net.input());
        const int32_t labels[3] = {0, 4, 2};
        std::copy(labels, labels + 3, net.labels());
        auto loss = [&] {
            float stats[3] = {0, 0, 0};
            net.forward(nullptr, true, 77, 3, stats);  // same seed: the same dropout mask
            return double(stats[0]) / 3.0 + stats[2];
        };
        loss();
        net.backward(nullptr);
        const std::vector<float> g(net.grads(), net.grads() + net.paramCount());
        double worst = 0;
        for (int64_t i = 0; i < net.paramCount(); i += 7) {
            float& v = net.params()[i];
            const float keep = v;
            v = keep + 1e-2f;
            const double up = loss();
            v = keep - 1e-2f;
            const double down = loss();
            v = keep;
            const double numeric = (up - down) / 2e-2;
            worst = std::max(worst, std::abs(numeric - g[size_t(i)]) / std::max(1.0, std::abs(numeric)));
        }
        QVERIFY2(worst < 5e-3, qPrintable(QString("worst relative error %1").arg(worst)));
    }

    // A ReLU that only a max pooling reads is applied by the pooling, to its smaller output: the
    // model view marks it fused, and the loss and every gradient are bit for bit those of the same
    // network with a 1x1 average pooling (an identity) between them, where nothing folds. Over
    // overlapping 3x3 windows with SAME padding and over 2x2 ones; the convolution's bias is
    // negative so that some windows hold no positive value (the pooled output 0, checked).
    void reluFoldsIntoTheMaxPoolingAfterIt() {
        auto model = [](const char* between, int size) {
            return std::string(R"({"name": "fold", "input": [2, 7, 7], "layers": [
                {"type": "conv2d", "name": "c", "filters": 4, "kernel": 3, "init": {"type": "he_normal"}},
                {"type": "relu", "name": "r"},)") + between + R"(
                {"type": "maxpool", "name": "p", "size": )" + std::to_string(size) + R"(, "stride": 2, "padding": "same"},
                {"type": "flatten", "name": "flat"},
                {"type": "dense", "name": "logits", "units": 3}]})";
        };
        // A ReLU that another layer reads as well stays a layer of its own.
        const ModelSpec shared = parseModelSpec(R"({"name": "shared", "input": [2, 7, 7], "layers": [
            {"type": "conv2d", "name": "c", "filters": 4, "kernel": 3},
            {"type": "relu", "name": "r"},
            {"type": "maxpool", "name": "p", "size": 2, "stride": 2, "padding": "same"},
            {"type": "conv2d", "name": "side", "inputs": ["r"], "filters": 4, "kernel": 2, "stride": 2, "padding": "same"},
            {"type": "add", "name": "sum", "inputs": ["p", "side"]},
            {"type": "flatten", "name": "flat"},
            {"type": "dense", "name": "logits", "units": 3}]})", "shared.json");
        QVERIFY(!summarizeLayers(shared)[1].fused);

        auto be = makeCpuBackend(1);
        const int n = 4;
        const std::vector<float> x = randomVector(size_t(n * 2 * 7 * 7), 9);
        const int32_t labels[n] = {0, 2, 1, 2};
        for (const int size : {3, 2}) {
            const ModelSpec folded = parseModelSpec(model("", size), "fold.json");
            const ModelSpec apart =
                parseModelSpec(model(R"({"type": "avgpool", "name": "id", "size": 1, "stride": 1},)", size), "apart.json");
            QVERIFY(summarizeLayers(folded)[1].fused);
            QVERIFY(!summarizeLayers(apart)[1].fused);
            // The same parameters for all three networks (the 1x1 average pooling has none).
            std::vector<float> params = Network(folded, *be, n).initialParams(5);
            for (size_t b = 4 * 2 * 3 * 3; b < 4 * 2 * 3 * 3 + 4; ++b) params[b] = -0.3f;  // the convolution's bias
            // (The pooling sums the convolution's bias gradient in the folded network, not apart.)
            const QString difference = firstDifference(*be, folded, apart, n, params, x, labels, {72, 76});
            QVERIFY2(difference.isEmpty(), qPrintable(QStringLiteral("%1x%1 windows, folded against apart: %2")
                                                          .arg(size).arg(difference)));
            // The pooled output itself (the network up to the pooling): windows with and without
            // a positive value.
            Network upToPool(folded, *be, n, LayerRange{0, 2});
            std::copy(params.begin(), params.begin() + upToPool.paramCount(), upToPool.params());
            std::copy(x.begin(), x.end(), upToPool.input());
            float stats[3] = {0, 0, 0};
            upToPool.forward(nullptr, true, 1, n, stats);
            const size_t pooled = size_t(n) * size_t(upToPool.outputDims().size());
            const int64_t zeros = std::count(upToPool.output(), upToPool.output() + pooled, 0.f);
            QVERIFY2(zeros > 0 && zeros < int64_t(pooled), qPrintable(QStringLiteral("%1 of %2 pooled outputs 0").arg(zeros).arg(pooled)));
        }
    }

    // A ReLU that only an LRN reads (cifar10_cnn's conv2, relu, norm2) is applied by the LRN as it
    // reads its input: marked fused, and the loss and every gradient bit for bit those of the same
    // network with a 1x1 average pooling (an identity) between them, where nothing folds. The
    // convolution's bias is negative, so that many inputs are cut.
    void reluFoldsIntoTheLrnAfterIt() {
        auto model = [](const char* between) {
            return std::string(R"({"name": "fold", "input": [2, 6, 6], "layers": [
                {"type": "conv2d", "name": "c", "filters": 8, "kernel": 3, "init": {"type": "he_normal"}},
                {"type": "relu", "name": "r"},)") + between + R"(
                {"type": "lrn", "name": "norm", "depth_radius": 2, "bias": 1.0, "alpha": 0.1, "beta": 0.75},
                {"type": "flatten", "name": "flat"},
                {"type": "dense", "name": "logits", "units": 3}]})";
        };
        const ModelSpec folded = parseModelSpec(model(""), "fold.json");
        const ModelSpec apart = parseModelSpec(model(R"({"type": "avgpool", "name": "id", "size": 1, "stride": 1},)"), "apart.json");
        QVERIFY(summarizeLayers(folded)[1].fused);
        QVERIFY(!summarizeLayers(apart)[1].fused);
        auto be = makeCpuBackend(1);
        const int n = 4;
        const std::vector<float> x = randomVector(size_t(n * 2 * 6 * 6), 11);
        const int32_t labels[n] = {1, 0, 2, 2};
        std::vector<float> params = Network(folded, *be, n).initialParams(7);
        for (size_t b = 8 * 2 * 3 * 3; b < 8 * 2 * 3 * 3 + 8; ++b) params[b] = -0.2f;  // the convolution's bias
        // (The LRN sums the convolution's bias gradient in the folded network, not apart.)
        const QString difference = firstDifference(*be, folded, apart, n, params, x, labels, {144, 152});
        QVERIFY2(difference.isEmpty(), qPrintable("folded against apart: " + difference));
    }

    // The bias gradient of a convolution that only a pooling or an LRN reads, directly or through
    // a ReLU folded into it, is summed by that layer as it writes its input gradient
    // (PoolDesc::sumDx; on a GPU in the same kernel, where the convolution ran a GEMV over the
    // gradient): the backend is asked for a plan that sums, the convolution's own backward leaves
    // its bias gradient, and the loss and every gradient are bit for bit those of the same network
    // with an identity (a dropout that keeps everything) after the convolution, where nothing
    // links, the bias gradient, summed in another order, to within rounding. The bias is
    // negative, so that the ReLUs cut. A convolution read by a pooling and by another layer gets
    // the sum of both gradients: nothing links, and it sums its own bias gradient, bit for bit.
    void convolutionBiasGradientIsSummedByTheLayerAfter_data() {
        QTest::addColumn<QString>("after");
        QTest::addColumn<bool>("links");
        QTest::newRow("relu, 3x3 max pooling") << R"({"type": "relu", "name": "r"},
            {"type": "maxpool", "name": "p", "size": 3, "stride": 2, "padding": "same"},)" << true;
        QTest::newRow("relu, 2x2 max pooling") << R"({"type": "relu", "name": "r"},
            {"type": "maxpool", "name": "p", "size": 2, "stride": 2, "padding": "same"},)" << true;
        QTest::newRow("max pooling") << R"({"type": "maxpool", "name": "p", "size": 2, "stride": 2},)" << true;
        QTest::newRow("average pooling") << R"({"type": "avgpool", "name": "p", "size": 3, "stride": 2, "padding": "same"},)"
                                         << true;
        QTest::newRow("global average pooling") << R"({"type": "global_avgpool", "name": "p"},)" << true;
        QTest::newRow("relu, lrn") << R"({"type": "relu", "name": "r"},
            {"type": "lrn", "name": "norm", "depth_radius": 2, "bias": 1.0, "alpha": 0.1, "beta": 0.75},)" << true;
        QTest::newRow("lrn") << R"({"type": "lrn", "name": "norm", "depth_radius": 2, "bias": 1.0, "alpha": 0.1, "beta": 0.75},)"
                             << true;
        QTest::newRow("read twice") << R"({"type": "maxpool", "name": "p", "size": 2, "stride": 2},
            {"type": "conv2d", "name": "side", "inputs": ["c"], "filters": 8, "kernel": 2, "stride": 2},
            {"type": "add", "name": "sum", "inputs": ["p", "side"]},)" << false;
    }
    void convolutionBiasGradientIsSummedByTheLayerAfter() {
        QFETCH(QString, after);
        QFETCH(bool, links);
        auto model = [&](const char* between) {
            return std::string(R"({"name": "sum", "input": [2, 7, 7], "layers": [
                {"type": "conv2d", "name": "c", "filters": 8, "kernel": 3, "init": {"type": "he_normal"}},)") + between +
                   after.toStdString() + R"(
                {"type": "flatten", "name": "flat"},
                {"type": "dense", "name": "logits", "units": 3}]})";
        };
        const ModelSpec linked = parseModelSpec(model(""), "sum.json");
        const ModelSpec apart = parseModelSpec(model(R"({"type": "dropout", "name": "id", "keep": 1.0},)"), "apart.json");
        auto be = std::make_shared<SumWatch>(makeCpuBackend(1));
        const int n = 4;
        const std::vector<float> x = randomVector(size_t(n * 2 * 7 * 7), 19);
        const int32_t labels[n] = {2, 1, 0, 2};
        std::vector<float> params = Network(linked, *be, n).initialParams(3);
        const size_t bias = 8 * 2 * 3 * 3;
        for (size_t b = bias; b < bias + 8; ++b) params[b] = -0.2f;
        std::vector<float> grads;
        for (const ModelSpec* spec : {&linked, &apart}) {
            be->summingPlans = be->convsLeavingDb = be->convsWithoutDx = be->weightsAlone = 0;
            stepGradients(*be, *spec, n, params, x, labels, grads);
            const int expected = spec == &linked && links ? 1 : 0;
            QCOMPARE(be->summingPlans, expected);
            QCOMPARE(be->convsLeavingDb, expected);
            QCOMPARE(be->convsWithoutDx, 1);  // c, reading the model's input (not "side", reading c)
            QCOMPARE(be->weightsAlone, expected);
        }
        const QString difference =
            firstDifference(*be, linked, apart, n, params, x, labels, links ? SummedApart{bias, bias + 8} : SummedApart{});
        QVERIFY2(difference.isEmpty(), qPrintable("linked against apart: " + difference));
    }

    // A ReLU that alone reads an inner product is applied by it (the GEMM's epilogue on a GPU):
    // marked fused, and the loss and every gradient bit for bit those of the same network with a
    // 1x1 average pooling (an identity) between them, where nothing fuses. The inner product's bias
    // is negative, so that many outputs are cut; two ReLUs in a row of inner products, as
    // cifar10_cnn's local3 and local4. The inner product after each ReLU masks the gradient it
    // passes back by the ReLU's mask (DenseDesc::reluMaskIn): the fused network keeps the two
    // masks' bits and no masked copy of a gradient. h is 16 wide, then 200: one mask row of 128
    // bits, then two, the second partly padding.
    void reluFusesIntoTheDenseBeforeIt_data() {
        QTest::addColumn<int>("width");
        QTest::newRow("16") << 16;
        QTest::newRow("200") << 200;
    }
    void reluFusesIntoTheDenseBeforeIt() {
        QFETCH(int, width);
        auto model = [&](const char* between, const char* between2) {
            return std::string(R"({"name": "fuse", "input": [2, 5, 5], "layers": [
                {"type": "flatten", "name": "flat"},
                {"type": "dense", "name": "h", "units": )") + std::to_string(width) + R"(, "init": {"type": "he_normal"}},)" +
                   between + R"(
                {"type": "relu", "name": "r"},
                {"type": "dense", "name": "h2", "units": 8},)" + between2 + R"(
                {"type": "relu", "name": "r2"},
                {"type": "dense", "name": "logits", "units": 3}]})";
        };
        const ModelSpec fused = parseModelSpec(model("", ""), "fuse.json");
        const ModelSpec apart = parseModelSpec(model(R"({"type": "avgpool", "name": "id", "size": 1, "stride": 1},)",
                                                     R"({"type": "avgpool", "name": "id2", "size": 1, "stride": 1},)"),
                                               "apart.json");
        QVERIFY(summarizeLayers(fused)[2].fused && summarizeLayers(fused)[4].fused);
        QVERIFY(!summarizeLayers(apart)[3].fused && !summarizeLayers(apart)[6].fused);
        auto be = makeCpuBackend(1);
        const int n = 4;
        const std::vector<float> x = randomVector(size_t(n * 2 * 5 * 5), 13);
        const int32_t labels[n] = {2, 0, 1, 0};
        std::vector<float> params = Network(fused, *be, n).initialParams(9);
        const size_t hBias = size_t(width) * 50;
        for (size_t b = hBias; b < hBias + size_t(width); ++b) params[b] = -0.4f;
        const QString difference = firstDifference(*be, fused, apart, n, params, x, labels);
        QVERIFY2(difference.isEmpty(), qPrintable("fused against apart: " + difference));
        const NetworkMemory kept = Network(fused, *be, n).memoryUse();
        QCOMPARE(kept.saved, ew::reluMaskBytes(n, width) + ew::reluMaskBytes(n, 8));
        QCOMPARE(kept.workspace, size_t(0));
        // The cut is real: h's output after its ReLU, from the network up to it (where h masks
        // its own gradient: nothing after the ReLU in this range takes its mask).
        Network upToRelu(fused, *be, n, LayerRange{0, 2});
        QCOMPARE(upToRelu.memoryUse().workspace, size_t(n) * size_t(width) * sizeof(float));
        std::copy(params.begin(), params.begin() + upToRelu.paramCount(), upToRelu.params());
        std::copy(x.begin(), x.end(), upToRelu.input());
        float stats[3] = {0, 0, 0};
        upToRelu.forward(nullptr, true, 1, n, stats);
        const int64_t zeros = std::count(upToRelu.output(), upToRelu.output() + n * width, 0.f);
        QVERIFY2(zeros > 0 && zeros < n * width,
                 qPrintable(QStringLiteral("%1 of %2 outputs cut").arg(zeros).arg(n * width)));
    }

    // A fused dense ReLU read by an inner product and by an add (a residual connection): its
    // gradient is the sum of both, so the inner product does not mask it (the dense layer before
    // masks the sum); the same bits as the network with an identity after the ReLU, where nothing
    // fuses.
    void aReluReadTwiceIsMaskedByTheDenseBeforeIt() {
        auto model = [](const char* between) {
            return std::string(R"({"name": "twice", "input": [2, 5, 5], "layers": [
                {"type": "flatten", "name": "flat"},
                {"type": "dense", "name": "h", "units": 16, "init": {"type": "he_normal"}},)") + between + R"(
                {"type": "relu", "name": "r"},
                {"type": "dense", "name": "a", "units": 16, "inputs": ["r"]},
                {"type": "add", "name": "sum", "inputs": ["a", "r"]},
                {"type": "dense", "name": "logits", "units": 3}]})";
        };
        const ModelSpec fused = parseModelSpec(model(""), "twice.json");
        const ModelSpec apart = parseModelSpec(model(R"({"type": "avgpool", "name": "id", "size": 1, "stride": 1},)"),
                                               "apart.json");
        QVERIFY(summarizeLayers(fused)[2].fused);
        auto be = makeCpuBackend(1);
        const int n = 4;
        const std::vector<float> x = randomVector(size_t(n * 2 * 5 * 5), 17);
        const int32_t labels[n] = {1, 2, 0, 1};
        std::vector<float> params = Network(fused, *be, n).initialParams(5);
        for (size_t b = 16 * 50; b < 16 * 50 + 16; ++b) params[b] = -0.4f;  // h's bias
        const QString difference = firstDifference(*be, fused, apart, n, params, x, labels);
        QVERIFY2(difference.isEmpty(), qPrintable("fused against apart: " + difference));
        QCOMPARE(Network(fused, *be, n).memoryUse().saved, size_t(0));  // no mask kept
    }

    // A model as a graph: a residual block (conv, batch norm, relu, conv, batch norm, add of the
    // block's input, relu), a branch read by two layers (its gradient is the sum of both), and a
    // concat; d(mean cross-entropy + weight decay) / dW and dx-free checks against central
    // differences of the loss the network reports.
    void graphGradientsAddUpWhereATensorIsReadTwice() {
        const std::string json = R"({"name": "graph", "input": [2, 4, 4], "layers": [
            {"type": "conv2d", "name": "stem", "filters": 4, "kernel": 3, "init": {"type": "he_normal"}, "bias": false},
            {"type": "batch_norm", "name": "stem_bn", "weight_decay": 0.05},
            {"type": "relu", "name": "stem_relu"},
            {"type": "conv2d", "name": "c1", "filters": 4, "kernel": 3, "init": {"type": "he_normal"}, "bias": false},
            {"type": "batch_norm", "name": "bn1"},
            {"type": "relu", "name": "r1"},
            {"type": "conv2d", "name": "c2", "filters": 4, "kernel": 3, "init": {"type": "he_normal"}, "weight_decay": 0.1},
            {"type": "add", "name": "sum", "inputs": ["c2", "stem_relu"]},
            {"type": "relu", "name": "out1"},
            {"type": "conv2d", "name": "side", "inputs": ["stem_relu"], "filters": 2, "kernel": 1},
            {"type": "concat", "name": "joined", "inputs": ["out1", "side"]},
            {"type": "global_avgpool", "name": "pool"},
            {"type": "flatten", "name": "flat"},
            {"type": "dense", "name": "logits", "units": 3}]})";
        auto be = makeCpuBackend(1);
        const ModelSpec spec = parseModelSpec(json, "graph.json");
        Network net(spec, *be, 4);
        auto p = net.initialParams(5);
        std::copy(p.begin(), p.end(), net.params());
        const auto x = randomVector(size_t(4 * 2 * 4 * 4), 9);
        std::copy(x.begin(), x.end(), net.input());
        const int32_t labels[4] = {0, 2, 1, 2};
        std::copy(labels, labels + 4, net.labels());
        auto loss = [&] {
            float stats[3] = {0, 0, 0};
            net.forward(nullptr, true, 1, 4, stats);
            return double(stats[0]) / 4.0 + stats[2];
        };
        loss();
        net.backward(nullptr);
        const std::vector<float> g(net.grads(), net.grads() + net.paramCount());
        double worst = 0;
        for (int64_t i = 0; i < net.paramCount(); i += 3) {
            float& v = net.params()[i];
            const float keep = v;
            v = keep + 5e-3f;
            const double up = loss();
            v = keep - 5e-3f;
            const double down = loss();
            v = keep;
            const double numeric = (up - down) / 1e-2;
            worst = std::max(worst, std::abs(numeric - g[size_t(i)]) / std::max(1.0, std::abs(numeric)));
        }
        QVERIFY2(worst < 5e-3, qPrintable(QString("worst relative error %1").arg(worst)));
    }
};

QTEST_GUILESS_MAIN(TestLayers)
#include "tst_layers.moc"
