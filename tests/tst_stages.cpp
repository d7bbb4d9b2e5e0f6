// Model parallelism's plan (issue 32): --stages read against a model's layers, every bad spec
// refused in one sentence naming the flag and the layer or device at fault, and the balancer's
// split checked against every split there is.
#include <QtTest>

#include <functional>
#include <random>

#include "parallel/stage_plan.hpp"
#include "util/error.hpp"

using namespace tb;

namespace {

// mnist_cnn's layers as its JSON names them, the unnamed ones type + index.
const std::vector<std::string> kMnistCnn = {"conv1", "relu1",    "pool1", "conv2", "relu4",
                                            "pool2", "flatten6", "fc1",   "relu8", "logits"};

QString refusal(const std::string& spec) {
    try {
        parseStagePlan(spec, kMnistCnn);
    } catch (const Error& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

// The slowest stage of the best split, by trying every split (n - 1 choose count - 1 of them).
// The best split's slowest stage among those where fits(stage, first, last) holds for every
// stage, every split tried; 1e300 where none fits.
double bruteForce(const std::vector<double>& cost, int count, const StageFits& fits = [](int, int, int) { return true; }) {
    const int n = int(cost.size());
    double best = 1e300;
    std::function<void(int, int, double)> go = [&](int from, int left, double worst) {
        const int stage = count - left;
        if (left == 1) {
            double sum = 0;
            for (int i = from; i < n; ++i) sum += cost[size_t(i)];
            if (fits(stage, from, n - 1)) best = std::min(best, std::max(worst, sum));
            return;
        }
        double sum = 0;
        for (int end = from; end <= n - left; ++end) {  // this stage is [from, end]
            sum += cost[size_t(end)];
            if (fits(stage, from, end)) go(end + 1, left - 1, std::max(worst, sum));
        }
    };
    go(0, count, 0);
    return best;
}

}  // namespace

class StagesTest : public QObject {
    Q_OBJECT

private slots:
    // By names or indices, the same plan; describe() gives back what --stages takes.
    void explicitStages() {
        const StagePlan byName = parseStagePlan("cpu:0=conv1..flatten6, cpu:1=fc1..logits", kMnistCnn);
        QCOMPARE(byName.count(), 2);
        QVERIFY(!byName.balanced);
        QCOMPARE(byName.stages[0].first, 0);
        QCOMPARE(byName.stages[0].last, 6);
        QCOMPARE(byName.stages[1].first, 7);
        QCOMPARE(byName.stages[1].last, 9);
        QCOMPARE(byName.stages[1].device.str(), std::string("cpu:1"));
        const StagePlan byIndex = parseStagePlan("cpu:0=0..6,cpu:1=7..9", kMnistCnn);
        QCOMPARE(byIndex.describe(kMnistCnn), byName.describe(kMnistCnn));
        QCOMPARE(QString::fromStdString(byName.describe(kMnistCnn)), QString("cpu:0=conv1..flatten6,cpu:1=fc1..logits"));
        // A stage of one layer; two stages sharing a GPU, written as such on each.
        const StagePlan three = parseStagePlan("gpu:0*2=conv1..relu8,gpu:0*2=logits", kMnistCnn);
        QCOMPARE(three.sharing(0), 2);
        QCOMPARE(three.stages[1].first, 9);
        QCOMPARE(QString::fromStdString(three.describe(kMnistCnn)), QString("gpu:0*2=conv1..relu8,gpu:0*2=logits"));
        const StagePlan again = parseStagePlan(three.describe(kMnistCnn), kMnistCnn);
        QCOMPARE(again.describe(kMnistCnn), three.describe(kMnistCnn));
    }

    // The automatic forms: a count on CPU devices, a device list, a shared device.
    void balancedStages() {
        StagePlan p = parseStagePlan("2", kMnistCnn);
        QVERIFY(p.balanced);
        QCOMPARE(p.count(), 2);
        QCOMPARE(QString::fromStdString(p.describe(kMnistCnn)), QString("cpu:0,cpu:1"));
        p = parseStagePlan("gpu:0*2", kMnistCnn);
        QCOMPARE(p.count(), 2);
        QCOMPARE(p.sharing(1), 2);
        QCOMPARE(QString::fromStdString(p.describe(kMnistCnn)), QString("gpu:0*2"));
        p = parseStagePlan("gpu:0, gpu:1, cpu:0", kMnistCnn);
        QCOMPARE(p.count(), 3);
        QCOMPARE(p.sharing(0), 1);
        QCOMPARE(QString::fromStdString(p.describe(kMnistCnn)), QString("gpu:0,gpu:1,cpu:0"));
    }

    void badStagesAreRefused_data() {
        QTest::addColumn<QString>("spec");
        QTest::addColumn<QString>("said");
        const std::pair<const char*, const char*> rows[] = {
            {"", "--stages: it is empty"},
            {"1", "--stages: one stage is the whole model on one device; give at least 2"},
            {"11", "--stages: 11 stages need at least 11 layers; the model has 10"},
            {"cpu:0=conv1..pool2,cpu:1=fc1..logits",
             "--stages: layer 'flatten6' (layer 6) is in no stage (before stage 2)"},
            {"cpu:0=conv1..fc1,cpu:1=fc1..logits", "--stages: layer 'fc1' (layer 7) is in stage 1 and stage 2"},
            {"cpu:0=conv1..relu8,cpu:1=logits..fc1",
             "--stages: stage 2 (cpu:1=logits..fc1) is empty: 'logits' (layer 9) comes after 'fc1' (layer 7)"},
            {"cpu:0=conv1..pool1,cpu:1=conv2..pool2",
             "--stages: layers 'flatten6' (layer 6) to 'logits' (layer 9) are in no stage (after the last)"},
            {"cpu:0=conv1..logits", "--stages: one stage is the whole model on one device; give at least 2"},
            {"cpu:0=conv1..flatten6,cpu:0=fc1..logits",
             "--stages: cpu:0 is given to stages 1 and 2; stages share a device only as cpu:0*2"},
            {"cpu:0,cpu:0", "--stages: cpu:0 is given to stages 1 and 2; stages share a device only as cpu:0*2"},
            {"gpu:0*3=conv1..flatten6,gpu:0*3=fc1..logits", "--stages: gpu:0*3 is given to 2 stages"},
            {"cpu:0=conv1..flatten6,cpu:1=fc2..logits", "--stages: the model has no layer 'fc2' (did you mean 'fc1'?)"},
            {"cpu:0=conv1..flatten6,cpu:1=fc1.weights..logits",
             "--stages: 'fc1.weights' names part of a layer; stages split the model between whole layers"},
            {"cpu:0=conv1..flatten6,cpu:1=7..12",
             "--stages: layer index 12 is past the model's last layer, 'logits' (layer 9)"},
            {"cpu:0=conv1..flatten6,cpu:1", "--stages: give every stage its layers (DEV=FROM..TO) or none of them"},
            {"cpu:0,,cpu:1", "--stages: 'cpu:0,,cpu:1' has an empty entry between commas"},
            {"tpu:0,cpu:1", "--stages: device 'tpu:0': expected cpu:N or gpu:N"},
            {"gpu:0*0", "--stages: 'gpu:0*0': the count after '*' must be a whole number from 1 to 64"},
            {"gpu:0*99999999", "--stages: 'gpu:0*99999999': the count after '*' must be a whole number from 1 to 64"},
            {"cpu:0*64,cpu:1*64", "--stages: 64 stages need at least 64 layers; the model has 10"},
            {"cpu:0=conv1..pool1..pool2,cpu:1=conv2..logits",
             "--stages: 'cpu:0=conv1..pool1..pool2': a stage's layers are FROM..TO, one range"},
            {"cpu:0=..pool2,cpu:1=flatten6..logits", "--stages: a stage's layer range is missing a layer"},
        };
        for (const auto& [spec, said] : rows) QTest::newRow(spec) << QString(spec) << QString(said);
    }

    void badStagesAreRefused() {
        QFETCH(QString, spec);
        QFETCH(QString, said);
        const QString got = refusal(spec.toStdString());
        QVERIFY2(got.startsWith(said), qPrintable("got: " + got));
        QVERIFY2(!got.contains('\n'), qPrintable(got));
    }

    // The balancer's slowest stage is the least any split achieves (every split of up to 9
    // layers tried), every stage holds a layer, and the stages cover the layers in order.
    void balancerFindsTheBestSplit() {
        std::mt19937 rng(7);
        std::uniform_real_distribution<double> u(0.0, 10.0);
        for (int trial = 0; trial < 300; ++trial) {
            const int n = 2 + trial % 8, count = 2 + trial % std::min(4, n - 1);
            std::vector<double> cost(static_cast<size_t>(n));
            for (double& c : cost) c = trial % 5 == 0 ? std::round(u(rng)) : u(rng);  // ties too
            const auto ranges = balanceStages(cost, count);
            QCOMPARE(int(ranges.size()), count);
            double worst = 0;
            int next = 0;
            for (const auto& [first, last] : ranges) {
                QCOMPARE(first, next);
                QVERIFY(last >= first);
                double sum = 0;
                for (int i = first; i <= last; ++i) sum += cost[size_t(i)];
                worst = std::max(worst, sum);
                next = last + 1;
            }
            QCOMPARE(next, n);
            QVERIFY2(std::abs(worst - bruteForce(cost, count)) < 1e-9,
                     qPrintable(QString("trial %1: %2 against %3").arg(trial).arg(worst).arg(bruteForce(cost, count))));
        }
        // With memory as a constraint (each layer's made-up bytes against each stage's room): the
        // best split among those that fit, or none.
        int none = 0;
        for (int trial = 0; trial < 300; ++trial) {
            const int n = 2 + trial % 8, count = 2 + trial % std::min(4, n - 1);
            std::vector<double> cost(static_cast<size_t>(n)), bytes(static_cast<size_t>(n)), room(static_cast<size_t>(count));
            for (double& c : cost) c = u(rng);
            for (double& b : bytes) b = u(rng);
            for (double& r : room) r = 5 + 2 * u(rng);
            const StageFits fits = [&](int stage, int first, int last) {
                double sum = 0;
                for (int i = first; i <= last; ++i) sum += bytes[size_t(i)];
                return sum <= room[size_t(stage)];
            };
            const auto ranges = balanceStages(cost, count, fits);
            const double best = bruteForce(cost, count, fits);
            if (ranges.empty()) {
                QVERIFY2(best == 1e300, qPrintable(QString("trial %1: no split found, but one fits").arg(trial)));
                ++none;
                continue;
            }
            double worst = 0;
            for (int s = 0; s < count; ++s) {
                const auto [first, last] = ranges[size_t(s)];
                QVERIFY2(fits(s, first, last), qPrintable(QString("trial %1: stage %2 does not fit").arg(trial).arg(s)));
                double sum = 0;
                for (int i = first; i <= last; ++i) sum += cost[size_t(i)];
                worst = std::max(worst, sum);
            }
            QVERIFY2(std::abs(worst - best) < 1e-9, qPrintable(QString("trial %1: %2 against %3").arg(trial).arg(worst).arg(best)));
        }
        QVERIFY(none > 0 && none < 300);  // both cases were met
        // Equal layers split evenly; a heavy first layer stands alone.
        QCOMPARE(balanceStages({1, 1, 1, 1}, 2), (std::vector<std::pair<int, int>>{{0, 1}, {2, 3}}));
        QCOMPARE(balanceStages({5, 1, 1, 1, 1, 1}, 2), (std::vector<std::pair<int, int>>{{0, 0}, {1, 5}}));
        QVERIFY_THROWS_EXCEPTION(Error, balanceStages({1, 1}, 3));
        QVERIFY_THROWS_EXCEPTION(Error, balanceStages({1, -1}, 2));
    }
};

QTEST_GUILESS_MAIN(StagesTest)
#include "tst_stages.moc"
