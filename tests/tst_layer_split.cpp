// One dense layer split over devices (issue 32, point 4): by columns (its outputs, all-gathered)
// and by rows (its inputs, all-reduced), over 2 and 4 CPU devices, through the shared-memory
// and the copying communicators, must compute what one device computes: the output, the input's
// gradient and the weights' gradients each step, and the weights after 10 steps of SGD, within
// float tolerance; and move the bytes the communicators' one definition says.
#include <QtTest>

#include <cmath>
#include <random>
#include <thread>

#include "backend/backend.hpp"
#include "comm/communicator.hpp"
#include "parallel/split_dense.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace tb;
using namespace tbtest;

namespace {

constexpr int kN = 16, kIn = 24, kOut = 20, kSteps = 10;
constexpr float kLr = 0.05f;

double relativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0, n = 0;
    for (size_t i = 0; i < a.size(); ++i) d += double(a[i] - b[i]) * (a[i] - b[i]), n += double(b[i]) * b[i];
    return std::sqrt(d / std::max(n, 1e-30));
}

std::vector<float> normal(size_t count, float stddev, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.f, stddev);
    std::vector<float> v(count);
    for (float& x : v) x = d(rng);
    return v;
}

// Every rank's work of one call, each on its own thread (the collectives need them all).
template <class F>
void onEveryRank(int ranks, F&& f) {
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) threads.emplace_back([&, r] { f(r); });
    for (std::thread& t : threads) t.join();
}

// D CPU devices of one thread each, as a communicator's ranks.
struct Devices {
    std::vector<std::shared_ptr<Backend>> backends;
    std::vector<RankEndpoint> ranks;
    explicit Devices(int d) {
        for (int r = 0; r < d; ++r) {
            backends.push_back(makeCpuBackend(1, r));
            ranks.push_back({backends.back().get(), backends.back()->createStream(), Device{DeviceType::Cpu, r}});
        }
    }
    ~Devices() {
        for (size_t r = 0; r < ranks.size(); ++r) backends[r]->destroyStream(ranks[r].stream);
    }
};

}  // namespace

class LayerSplitTest : public QObject {
    Q_OBJECT

private slots:
    void splitEqualsOneDevice_data() {
        QTest::addColumn<int>("split");
        QTest::addColumn<int>("devices");
        QTest::addColumn<int>("kind");
        for (int split : {int(LayerSplit::Columns), int(LayerSplit::Rows)})
            for (int d : {2, 4})
                for (int kind : {int(CommKind::SharedMemory), int(CommKind::Copies)})
                    QTest::newRow(qPrintable(QString("%1 over %2, %3")
                                                 .arg(split == int(LayerSplit::Columns) ? "columns" : "rows")
                                                 .arg(d)
                                                 .arg(kind == int(CommKind::Copies) ? "copies" : "shared memory")))
                        << split << d << kind;
    }

    void splitEqualsOneDevice() {
        QFETCH(int, split);
        QFETCH(int, devices);
        QFETCH(int, kind);
        const LayerSplit how = LayerSplit(split);
        Devices ranks(devices);
        auto comm = makeCommunicator(CommKind(kind), ranks.ranks, HolderEndpoint{}, size_t(kN) * std::max(kIn, kOut),
                                     nullptr, CommPrecision::Fp32);
        SplitDense layer(*comm, how, kN, kIn, kOut);
        // The reference: the whole layer on one device.
        auto one = makeCpuBackend(1);
        Stream s = one->createStream();
        auto op = one->makeDense({kN, kIn, kOut});
        std::vector<float> w = normal(size_t(kOut) * kIn, 0.3f, 1), b = normal(kOut, 0.1f, 2);
        layer.setWeights(w.data(), b.data());
        std::vector<float> dw(w.size()), db(b.size());
        const size_t perStep = how == LayerSplit::Columns
                                   ? size_t(devices) * (devices - 1) * (kN * kOut / devices) * 4 + 2 * size_t(devices - 1) * kN * kIn * 4
                                   : 2 * size_t(devices - 1) * kN * kOut * 4 + size_t(devices) * (devices - 1) * (kN * kIn / devices) * 4;
        for (int step = 0; step < kSteps; ++step) {
            const std::vector<float> x = normal(size_t(kN) * kIn, 1.f, 10 + unsigned(step)),
                                     target = normal(size_t(kN) * kOut, 1.f, 100 + unsigned(step));
            std::vector<float> y(target.size()), dx(x.size());
            op->forward(s, x.data(), w.data(), nullptr, b.data(), y.data(), nullptr);
            std::vector<float> dy(y.size());
            for (size_t i = 0; i < y.size(); ++i) dy[i] = (y[i] - target[i]) / kN;  // 0.5 |y - t|^2 / n
            op->backwardWeights(s, x.data(), dy.data(), dw.data(), db.data());
            op->backwardData(s, dy.data(), w.data(), nullptr, dx.data(), nullptr);
            // The split layer: every rank its own output and input gradient, all whole.
            std::vector<std::vector<float>> ys(size_t(devices), std::vector<float>(y.size())),
                dxs(size_t(devices), std::vector<float>(x.size()));
            const int64_t before = comm->bytesMoved();
            onEveryRank(devices, [&](int r) { layer.forward(r, x.data(), ys[size_t(r)].data()); });
            onEveryRank(devices, [&](int r) { layer.backward(r, x.data(), dy.data(), dxs[size_t(r)].data()); });
            QCOMPARE(size_t(comm->bytesMoved() - before), perStep);
            for (int r = 0; r < devices; ++r) {
                QVERIFY2(relativeDifference(ys[size_t(r)], y) < 1e-5,
                         qPrintable(QString("step %1 rank %2: y differs by %3").arg(step).arg(r).arg(relativeDifference(ys[size_t(r)], y))));
                QVERIFY2(relativeDifference(dxs[size_t(r)], dx) < 1e-5,
                         qPrintable(QString("step %1 rank %2: dx differs by %3").arg(step).arg(r).arg(relativeDifference(dxs[size_t(r)], dx))));
            }
            std::vector<float> sdw(dw.size()), sdb(db.size());
            layer.gradients(sdw.data(), sdb.data());
            QVERIFY2(relativeDifference(sdw, dw) < 1e-5 && relativeDifference(sdb, db) < 1e-5,
                     qPrintable(QString("step %1: weight gradients differ by %2, bias %3").arg(step).arg(relativeDifference(sdw, dw)).arg(relativeDifference(sdb, db))));
            onEveryRank(devices, [&](int r) { layer.sgdStep(r, kLr); });
            for (size_t i = 0; i < w.size(); ++i) w[i] -= kLr * dw[i];
            for (size_t i = 0; i < b.size(); ++i) b[i] -= kLr * db[i];
        }
        std::vector<float> sw(w.size()), sb(b.size());
        layer.weights(sw.data(), sb.data());
        QVERIFY2(relativeDifference(sw, w) < 1e-5 && relativeDifference(sb, b) < 1e-5,
                 qPrintable(QString("after %1 steps: weights differ by %2, bias %3").arg(kSteps).arg(relativeDifference(sw, w)).arg(relativeDifference(sb, b))));
        one->destroyStream(s);
    }

    void refusals() {
        Devices ranks(3);
        auto comm = makeCommunicator(CommKind::SharedMemory, ranks.ranks, HolderEndpoint{}, 1024, nullptr, CommPrecision::Fp32);
        QVERIFY(mentions(errorOf([&] { SplitDense l(*comm, LayerSplit::Columns, 4, 6, 10); }),
                         {"10 outputs", "does not split evenly over 3 devices"}));
        QVERIFY(mentions(errorOf([&] { SplitDense l(*comm, LayerSplit::Rows, 4, 10, 6); }), {"10 inputs", "3 devices"}));
        QVERIFY(mentions(errorOf([&] { parseLayerSplit("diagonal", "--split"); }), {"--split", "'diagonal'", "columns", "rows"}));
        QCOMPARE(int(parseLayerSplit("rows", "--split")), int(LayerSplit::Rows));
    }
};

QTEST_GUILESS_MAIN(LayerSplitTest)
#include "tst_layer_split.moc"
