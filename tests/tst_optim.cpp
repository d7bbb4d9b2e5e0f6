// Tests of core/optim on the CPU backend (its device pointers are host memory): SGD, momentum,
// Nesterov and Adam against references computed here in double precision from TF's update
// formulas, on short vectors and on vectors long enough for the OpenMP path; learning-rate
// schedules; the weights' moving average; optimizer-name parsing; and a small end-to-end
// training run (tiny_mlp on Gaussian blobs) that must learn.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "data/dataset.hpp"
#include "nn/model_spec.hpp"
#include "nn/network.hpp"
#include "optim/optimizer.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

namespace {

using tbtest::errorOf;
using tbtest::mentions;



// Starting parameters in [1, 2) and per-step gradients in [-1, 1] of both signs and varied sizes:
// three steps move a parameter by less than 0.5, so none comes near 0 (where a relative
// tolerance would mean nothing).
std::vector<float> startParams(size_t n) {
    std::vector<float> p(n);
    for (size_t i = 0; i < n; ++i) p[i] = 1.f + float((i * 7919) % 1000) / 1000.f;
    return p;
}

std::vector<float> gradsAt(size_t n, int step) {
    std::vector<float> g(n);
    for (size_t i = 0; i < n; ++i) g[i] = float(std::sin(0.37 * double(i) + 1.3 * step) * (1.0 + double(i % 5)) / 5.0);
    return g;
}

// The update formulas documented in cpu_backend.cpp applyUpdate, in double precision, with the
// hyper-parameters the backend sees (floats widened to double).
struct Reference {
    tb::UpdateRule rule;
    double lr, mu, b1, b2, eps;
    std::vector<double> p, m, v;
    void step(const std::vector<float>& g, int64_t t /* 1-based */) {
        for (size_t i = 0; i < p.size(); ++i) {
            const double gi = g[i];
            switch (rule) {
            case tb::UpdateRule::Sgd: p[i] -= lr * gi; break;
            case tb::UpdateRule::Momentum:
                m[i] = mu * m[i] + gi;
                p[i] -= lr * m[i];
                break;
            case tb::UpdateRule::Nesterov:
                m[i] = mu * m[i] + gi;
                p[i] -= lr * (gi + mu * m[i]);
                break;
            case tb::UpdateRule::Adam: {
                const double lrT = lr * std::sqrt(1 - std::pow(b2, double(t))) / (1 - std::pow(b1, double(t)));
                m[i] = b1 * m[i] + (1 - b1) * gi;
                v[i] = b2 * v[i] + (1 - b2) * gi * gi;
                p[i] -= lrT * m[i] / (std::sqrt(v[i]) + eps);
                break;
            }
            }
        }
    }
};

// The largest relative error of got against ref.
double maxRelError(const std::vector<float>& got, const std::vector<double>& ref, size_t* where = nullptr) {
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double e = std::abs(double(got[i]) - ref[i]) / std::max(std::abs(ref[i]), 1e-30);
        if (e > worst) {
            worst = e;
            if (where) *where = i;
        }
    }
    return worst;
}

// Fills the network's input and labels with samples [first, first + n) of a point set (shape
// (2, 1, 1), so (n, h, w, c) and (n, c, h, w) agree); rows past n repeat the last sample.
void loadBatch(tb::Network& net, const tb::Dataset& d, const std::vector<size_t>& order, size_t first, int n) {
    const int batch = net.batch();
    for (int r = 0; r < batch; ++r) {
        const size_t i = order[std::min(first + size_t(std::min(r, n - 1)), order.size() - 1)];
        net.input()[2 * r] = d.features[2 * i];
        net.input()[2 * r + 1] = d.features[2 * i + 1];
        net.labels()[r] = d.labels[i];
    }
}

// Accuracy and mean loss of the network on the whole set, in evaluation mode.
std::pair<double, double> evaluate(tb::Network& net, const tb::Dataset& d) {
    std::vector<size_t> order(d.size());
    std::iota(order.begin(), order.end(), size_t(0));
    float stats[3] = {0, 0, 0};
    for (size_t first = 0; first < d.size(); first += size_t(net.batch())) {
        const int n = int(std::min(d.size() - first, size_t(net.batch())));
        loadBatch(net, d, order, first, n);
        net.forward(nullptr, false, 0, n, stats);
    }
    net.backend().synchronize(nullptr);
    return {double(stats[1]) / double(d.size()), double(stats[0]) / double(d.size())};
}

}  // namespace

class TestOptim : public QObject {
    Q_OBJECT

private slots:
    void rulesMatchReference_data();
    void rulesMatchReference();
    void momentumZeroIsSgd();
    void applyRangeMatchesWhole();
    void scheduleConstant();
    void scheduleExponentialStaircase();
    void scheduleExponentialContinuous();
    void scheduleCosineWithWarmup();
    void optimizerUsesSchedule();
    void weightEmaClosedForm();
    void partialWeightEmaIsReadOnlyWhole();
    void parseUpdateRuleNamesTheFlag();
    void networkLearnsBlobs();
};

// ---------------------------------------------------------------- update rules

void TestOptim::rulesMatchReference_data() {
    QTest::addColumn<int>("rule");
    QTest::addColumn<qlonglong>("count");
    QTest::addColumn<float>("lr");
    const std::pair<const char*, tb::UpdateRule> rules[] = {{"sgd", tb::UpdateRule::Sgd},
                                                           {"momentum", tb::UpdateRule::Momentum},
                                                           {"nesterov", tb::UpdateRule::Nesterov},
                                                           {"adam", tb::UpdateRule::Adam}};
    for (auto [name, rule] : rules) {
        const float lr = rule == tb::UpdateRule::Adam ? 0.01f : 0.05f;
        QTest::newRow(qPrintable(QStringLiteral("%1 x 7").arg(name))) << int(rule) << 7LL << lr;
        // Longer than 1 << 15: the OpenMP loops; an odd size for the tails.
        QTest::newRow(qPrintable(QStringLiteral("%1 x 100003").arg(name))) << int(rule) << 100003LL << lr;
    }
}

void TestOptim::rulesMatchReference() {
    QFETCH(int, rule);
    QFETCH(qlonglong, count);
    QFETCH(float, lr);
    const auto r = tb::UpdateRule(rule);
    const size_t n = size_t(count);
    auto backend = tb::makeCpuBackend(2);
    tb::UpdateParams hyper;
    hyper.momentum = 0.9f;
    hyper.beta1 = 0.9f;
    hyper.beta2 = 0.999f;
    hyper.epsilon = 1e-8f;
    tb::LrSchedule schedule;
    schedule.initial = lr;
    tb::Optimizer opt(*backend, r, hyper, schedule, n, nullptr);
    QVERIFY(opt.rule() == r);

    std::vector<float> p = startParams(n);
    Reference ref{r, lr, hyper.momentum, hyper.beta1, hyper.beta2, hyper.epsilon,
                  std::vector<double>(p.begin(), p.end()), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
    for (int step = 0; step < 3; ++step) {
        const std::vector<float> g = gradsAt(n, step);
        const float used = opt.apply(nullptr, p.data(), g.data(), step);
        backend->synchronize(nullptr);
        QCOMPARE(used, lr);
        ref.step(g, step + 1);
        size_t where = 0;
        const double err = maxRelError(p, ref.p, &where);
        QVERIFY2(err <= 1e-6, qPrintable(QStringLiteral("step %1: p[%2] = %3, reference %4 (relative error %5)")
                                             .arg(step)
                                             .arg(where)
                                             .arg(double(p[where]), 0, 'g', 10)
                                             .arg(ref.p[where], 0, 'g', 10)
                                             .arg(err)));
    }
    // The updates moved every parameter by a visible amount (the test would pass an optimizer
    // that does nothing only if the reference did nothing too).
    const std::vector<float> p0 = startParams(n);
    size_t moved = 0;
    for (size_t i = 0; i < n; ++i) moved += std::abs(p[i] - p0[i]) > 1e-4f;
    QVERIFY2(moved > n * 9 / 10, qPrintable(QString::number(moved)));
}

void TestOptim::momentumZeroIsSgd() {
    // With mu = 0 momentum and Nesterov reduce to plain SGD exactly (same float operations).
    auto backend = tb::makeCpuBackend(1);
    const size_t n = 33;
    tb::UpdateParams hyper;
    hyper.momentum = 0.f;
    tb::LrSchedule schedule;
    schedule.initial = 0.1f;
    tb::Optimizer sgd(*backend, tb::UpdateRule::Sgd, hyper, schedule, n, nullptr);
    tb::Optimizer mom(*backend, tb::UpdateRule::Momentum, hyper, schedule, n, nullptr);
    tb::Optimizer nes(*backend, tb::UpdateRule::Nesterov, hyper, schedule, n, nullptr);
    std::vector<float> a = startParams(n), b = a, c = a;
    for (int step = 0; step < 3; ++step) {
        const std::vector<float> g = gradsAt(n, step);
        sgd.apply(nullptr, a.data(), g.data(), step);
        mom.apply(nullptr, b.data(), g.data(), step);
        nes.apply(nullptr, c.data(), g.data(), step);
    }
    for (size_t i = 0; i < n; ++i) {
        QVERIFY2(std::abs(a[i] - b[i]) <= 1e-6f * std::abs(a[i]), qPrintable(QString::number(i)));
        QVERIFY2(std::abs(a[i] - c[i]) <= 1e-6f * std::abs(a[i]), qPrintable(QString::number(i)));
    }
    QVERIFY(a != startParams(n));
}

void TestOptim::applyRangeMatchesWhole() {
    // Updating [0, 40000) and [40000, n) separately (as parameter-server shards do) gives exactly
    // what one update of the whole buffer gives, slots included; a range past the end is refused.
    const size_t n = 100003, cut = 40000;
    for (tb::UpdateRule r : {tb::UpdateRule::Sgd, tb::UpdateRule::Momentum, tb::UpdateRule::Nesterov,
                             tb::UpdateRule::Adam}) {
        auto backend = tb::makeCpuBackend(2);
        tb::LrSchedule schedule;
        schedule.initial = 0.01f;
        tb::Optimizer whole(*backend, r, {}, schedule, n, nullptr), parts(*backend, r, {}, schedule, n, nullptr);
        std::vector<float> a = startParams(n), b = a;
        for (int step = 0; step < 3; ++step) {
            const std::vector<float> g = gradsAt(n, step);
            whole.apply(nullptr, a.data(), g.data(), step);
            parts.applyRange(nullptr, b.data(), g.data(), cut, n - cut, step);  // either order
            parts.applyRange(nullptr, b.data(), g.data(), 0, cut, step);
        }
        QVERIFY2(a == b, qPrintable(QString::fromStdString(tb::toString(r))));
        QVERIFY(a != startParams(n));
        QString msg = errorOf([&] { parts.applyRange(nullptr, b.data(), b.data(), cut, n - cut + 1, 3); });
        QVERIFY2(mentions(msg, {"range past the end"}), qPrintable(msg));
    }
}

// ---------------------------------------------------------------- schedules

void TestOptim::scheduleConstant() {
    tb::LrSchedule s;
    s.initial = 0.025f;
    for (int64_t step : {0LL, 1LL, 349LL, 350LL, 1000000LL}) QCOMPARE(s.at(step), 0.025f);
}

void TestOptim::scheduleExponentialStaircase() {
    // The CIFAR-10 tutorial: 0.1 * 0.1 ^ floor(step / 350).
    tb::LrSchedule s;
    s.kind = tb::LrSchedule::Kind::Exponential;
    s.initial = 0.1f;
    s.decaySteps = 350;
    s.decayRate = 0.1f;
    s.staircase = true;
    const std::pair<int64_t, double> expect[] = {{0, 0.1},   {1, 0.1},    {349, 0.1},  {350, 0.01},
                                                 {699, 0.01}, {700, 0.001}, {1050, 1e-4}};
    for (auto [step, lr] : expect)
        QVERIFY2(std::abs(s.at(step) / lr - 1) < 1e-6,
                 qPrintable(QStringLiteral("step %1: %2, expected %3").arg(step).arg(double(s.at(step))).arg(lr)));
}

// Cosine decay to 0 over decaySteps (half of initial at its middle, 0 from its end on), and a
// linear warm-up of its first steps: (step + 1) / warmupSteps of the decayed rate, then the
// schedule alone.
void TestOptim::scheduleCosineWithWarmup() {
    tb::LrSchedule s;
    s.kind = tb::LrSchedule::Kind::Cosine;
    s.initial = 0.4f;
    s.decaySteps = 1000;
    const auto cosine = [](int64_t step) {
        return 0.4 * 0.5 * (1 + std::cos(3.14159265358979323846 * double(std::min<int64_t>(step, 1000)) / 1000.0));
    };
    for (int64_t step : {0LL, 1LL, 250LL, 500LL, 999LL})
        QVERIFY2(std::abs(s.at(step) - cosine(step)) < 1e-7,
                 qPrintable(QStringLiteral("step %1: %2, expected %3").arg(step).arg(double(s.at(step))).arg(cosine(step))));
    QVERIFY(std::abs(s.at(500) - 0.2f) < 1e-7f);
    QCOMPARE(s.at(1000), 0.f);
    QCOMPARE(s.at(5000), 0.f);
    s.warmupSteps = 10;
    for (int64_t step : {0LL, 4LL, 9LL})
        QVERIFY(std::abs(s.at(step) - cosine(step) * double(step + 1) / 10.0) < 1e-7);
    QVERIFY(std::abs(s.at(10) - cosine(10)) < 1e-7);  // warmed up: the schedule alone
    QVERIFY(s.at(0) < s.at(4) && s.at(4) < s.at(9));
    // Warm-up of a constant rate: 0.4 / 10 at the first step, 0.4 from step 9 on.
    tb::LrSchedule flat;
    flat.initial = 0.4f;
    flat.warmupSteps = 10;
    QVERIFY(std::abs(flat.at(0) - 0.04f) < 1e-7f);
    QCOMPARE(flat.at(9), 0.4f);
    QCOMPARE(flat.at(100), 0.4f);
}

void TestOptim::scheduleExponentialContinuous() {
    tb::LrSchedule s;
    s.kind = tb::LrSchedule::Kind::Exponential;
    s.initial = 0.1f;
    s.decaySteps = 350;
    s.decayRate = 0.1f;
    s.staircase = false;
    for (int64_t step : {0LL, 1LL, 175LL, 349LL, 350LL, 525LL, 700LL}) {
        const double lr = 0.1 * std::pow(0.1, double(step) / 350.0);
        QVERIFY2(std::abs(s.at(step) / lr - 1) < 1e-6,
                 qPrintable(QStringLiteral("step %1: %2, expected %3").arg(step).arg(double(s.at(step))).arg(lr)));
    }
    // Strictly decreasing between the stairs.
    QVERIFY(s.at(174) > s.at(175));
    QVERIFY(s.at(175) > s.at(176));
    QVERIFY(std::abs(s.at(175) / (0.1 / std::sqrt(10.0)) - 1) < 1e-6);
}

void TestOptim::optimizerUsesSchedule() {
    // SGD with lr 0.5 * 0.5 ^ step: p_3 = p_0 - sum_t lr_t g_t, and apply() returns lr_t.
    auto backend = tb::makeCpuBackend(1);
    tb::LrSchedule s;
    s.kind = tb::LrSchedule::Kind::Exponential;
    s.initial = 0.5f;
    s.decaySteps = 1;
    s.decayRate = 0.5f;
    tb::Optimizer opt(*backend, tb::UpdateRule::Sgd, {}, s, 4, nullptr);
    std::vector<float> p = {1.f, 2.f, 3.f, 4.f};
    const std::vector<float> g = {1.f, -1.f, 0.5f, 0.f};
    const float expectLr[] = {0.5f, 0.25f, 0.125f};
    for (int step = 0; step < 3; ++step) QCOMPARE(opt.apply(nullptr, p.data(), g.data(), step), expectLr[step]);
    QCOMPARE(p[0], 1.f - 0.875f);
    QCOMPARE(p[1], 2.f + 0.875f);
    QCOMPARE(p[2], 3.f - 0.4375f);
    QCOMPARE(p[3], 4.f);
}

// ---------------------------------------------------------------- moving average

void TestOptim::weightEmaClosedForm() {
    // shadow = d_t shadow + (1 - d_t) params with d_t = min(decay, (1 + t) / (10 + t)), as
    // tf.train.ExponentialMovingAverage with num_updates. Three updates at steps 0, 1, 2 (where
    // the warm-up factor 0.1, 0.18, 0.25 is below the decay) and three at steps 1000.. (where
    // the decay wins): shadow = prod d * p0 + sum_k (1 - d_k) prod_{j > k} d_j * p_k.
    const float decay = 0.75f;
    for (int64_t firstStep : {int64_t(0), int64_t(1000)}) {
        for (size_t n : {size_t(5), size_t(70001)}) {
            auto backend = tb::makeCpuBackend(2);
            std::vector<float> p = startParams(n);
            const std::vector<float> p0 = p;
            tb::WeightEma ema(*backend, decay, p.data(), n, nullptr);
            QCOMPARE(ema.decay(), decay);
            QVERIFY(std::equal(p.begin(), p.end(), ema.average()));  // starts equal to the params
            p[0] = -100.f;                                          // a copy, not a view
            QCOMPARE(ema.average()[0], p0[0]);
            std::vector<double> ref(p0.begin(), p0.end());
            std::vector<double> used;
            for (int k = 1; k <= 3; ++k) {
                const int64_t t = firstStep + k - 1;
                for (size_t i = 0; i < n; ++i) p[i] = p0[i] + float(k) * 0.25f * float(std::cos(double(i)));  // >= 0.25
                ema.update(nullptr, p.data(), t);
                const double d = std::min(decay, float(1 + t) / float(10 + t));
                used.push_back(d);
                for (size_t i = 0; i < n; ++i) ref[i] = d * ref[i] + (1 - d) * p[i];
            }
            backend->synchronize(nullptr);
            if (firstStep == 0) QVERIFY(used[0] < 0.11 && used[1] < 0.19 && used[2] == 0.25);
            else QVERIFY(used[0] == decay && used[2] == decay);
            double worst = 0;
            for (size_t i = 0; i < n; ++i)
                worst = std::max(worst, std::abs(double(ema.average()[i]) - ref[i]) / std::abs(ref[i]));
            QVERIFY2(worst < 1e-6, qPrintable(QStringLiteral("first step %1, n %2: relative error %3")
                                                  .arg(firstStep)
                                                  .arg(n)
                                                  .arg(worst)));
            // The closed form for the constant-decay case, spelled out.
            if (firstStep == 1000) {
                const double d = decay;
                const double c = 0.25 * std::cos(1.0);  // element 1
                const double closed = d * d * d * p0[1] + (1 - d) * (d * d * (p0[1] + 1 * c) + d * (p0[1] + 2 * c) +
                                                                     (p0[1] + 3 * c));
                QVERIFY2(std::abs(ema.average()[1] / closed - 1) < 1e-6, qPrintable(QString::number(ema.average()[1])));
            }
        }
    }
}

// A moving average that keeps floats trained elsewhere (a stage per process, on the chief) is
// read only once those were written after the last update: before, an internal error, not an
// average with other stages' floats zero or a step behind. One that trains all it keeps, always.
void TestOptim::partialWeightEmaIsReadOnlyWhole() {
    auto backend = tb::makeCpuBackend(1);
    std::vector<float> p = startParams(3);
    tb::WeightEma part(*backend, 0.9f, {0, 8}, {2, 3}, p.data(), nullptr);
    const auto unread = [&] { return mentions(errorOf([&] { part.average(); }), {"internal error", "gathered"}); };
    QVERIFY2(unread(), "read with 5 of its 8 floats never written");
    std::fill(part.toWrite(), part.toWrite() + 8, 1.f);
    QCOMPARE(part.average()[0], 1.f);
    part.update(nullptr, p.data(), 0);
    QVERIFY2(unread(), "read a step after its other floats were written");
    part.toWrite();
    QCOMPARE(part.average()[7], 1.f);
    tb::WeightEma whole(*backend, 0.9f, p.data(), 3, nullptr);
    whole.update(nullptr, p.data(), 0);
    QCOMPARE(whole.average()[1], p[1]);
}

void TestOptim::parseUpdateRuleNamesTheFlag() {
    for (tb::UpdateRule r : {tb::UpdateRule::Sgd, tb::UpdateRule::Momentum, tb::UpdateRule::Nesterov,
                             tb::UpdateRule::Adam})
        QVERIFY(tb::parseUpdateRule(tb::toString(r), "--optimizer") == r);
    QCOMPARE(tb::toString(tb::UpdateRule::Nesterov), std::string("nesterov"));
    QString msg = errorOf([] { tb::parseUpdateRule("rmsprop", "--optimizer"); });
    QVERIFY2(mentions(msg, {"--optimizer", "unknown optimizer 'rmsprop'", "sgd", "momentum", "nesterov", "adam"}),
             qPrintable(msg));
    msg = errorOf([] { tb::parseUpdateRule("Adam", "run.json"); });  // names are case-sensitive
    QVERIFY2(mentions(msg, {"run.json", "'Adam'"}), qPrintable(msg));
}

// ---------------------------------------------------------------- end to end

void TestOptim::networkLearnsBlobs() {
    // tiny_mlp on 2000 points of 4 Gaussian blobs (nearest-centre accuracy about 96%), 200 steps
    // of batch 64 with momentum SGD, by hand: the training accuracy must pass 0.9 and the loss
    // must fall well below ln 4 = 1.386 (chance).
    auto backend = tb::makeCpuBackend(2);
    const tb::Dataset d = tb::makeBlobs(2000, 4, 11);
    tb::Network net(tb::findModel("tiny_mlp"), *backend, 64);
    QCOMPARE(net.outputs(), 4);
    const std::vector<float> init = net.initialParams(5);
    backend->copyFromHost(nullptr, net.params(), init.data(), init.size() * sizeof(float));
    tb::UpdateParams hyper;
    hyper.momentum = 0.9f;
    tb::LrSchedule schedule;
    schedule.initial = 0.05f;
    tb::Optimizer opt(*backend, tb::UpdateRule::Momentum, hyper, schedule, size_t(net.paramCount()), nullptr);

    const auto [acc0, loss0] = evaluate(net, d);
    std::vector<size_t> order(d.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::vector<double> losses;
    uint64_t shuffle = 0x1234567;
    size_t cursor = d.size();  // start with a shuffle
    for (int step = 0; step < 200; ++step) {
        if (cursor + 64 > d.size()) {  // a new epoch: reshuffle (xorshift Fisher-Yates), drop the remainder
            for (size_t i = order.size(); i-- > 1;) {
                shuffle ^= shuffle << 13, shuffle ^= shuffle >> 7, shuffle ^= shuffle << 17;
                std::swap(order[i], order[shuffle % (i + 1)]);
            }
            cursor = 0;
        }
        loadBatch(net, d, order, cursor, 64);
        cursor += 64;
        float stats[3] = {0, 0, 0};
        net.forward(nullptr, true, uint64_t(step), 64, stats);
        net.backward(nullptr);
        opt.apply(nullptr, net.params(), net.grads(), step);
        backend->synchronize(nullptr);
        QVERIFY2(std::isfinite(stats[0]), qPrintable(QStringLiteral("step %1").arg(step)));
        losses.push_back(stats[0] / 64.0);
    }
    const auto [acc, loss] = evaluate(net, d);
    qInfo("tiny_mlp on blobs: accuracy %.3f -> %.3f, loss %.3f -> %.3f (batch losses %.3f -> %.3f)", acc0, acc, loss0,
          loss, losses.front(), losses.back());
    QVERIFY2(acc > 0.9, qPrintable(QString::number(acc)));
    QVERIFY2(loss < 0.5 && loss < loss0 / 2, qPrintable(QStringLiteral("%1 from %2").arg(loss).arg(loss0)));
    const double early = std::accumulate(losses.begin(), losses.begin() + 10, 0.0) / 10;
    const double late = std::accumulate(losses.end() - 10, losses.end(), 0.0) / 10;
    QVERIFY2(late < early / 2, qPrintable(QStringLiteral("%1 -> %2").arg(early).arg(late)));
}

QTEST_GUILESS_MAIN(TestOptim)
#include "tst_optim.moc"
