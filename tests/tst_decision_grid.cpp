// The engine's views for the window, without Qt Widgets: decision grids over the plane of the
// 2-D synthetic sets (only when asked, only for 2-D data; frames spread over the run; the last
// one classifies the blob centres as trained; averaging frames only where the replicas agree;
// async frames from the pusher's pulled variables), the averaging flag on exactly the steps
// K, 2K, ..., and the examples each report trained on.
#include <QtTest>

#include <cmath>
#include <mutex>
#include <numbers>
#include <vector>

#include "data/dataset.hpp"
#include "engine/decision_grid.hpp"
#include "engine/trainer.hpp"
#include "nn/model_spec.hpp"

using namespace tb;

namespace {

// Keeps every report and every grid; asks for `frames` grids of `cells` x `cells`.
class Recorder final : public TrainingObserver {
public:
    Recorder(int frames, int cells, double maxGapSeconds = 0) : request_{frames, cells, maxGapSeconds} {}
    DecisionGridRequest decisionGridRequest() const override { return request_; }
    void onStepEnd(const StepMetrics& m) override {
        std::lock_guard lock(mutex_);
        steps.push_back(m);
    }
    void onDecisionGrid(const DecisionGrid& g) override {
        std::lock_guard lock(mutex_);
        grids.push_back(g);
    }
    std::vector<StepMetrics> steps;
    std::vector<DecisionGrid> grids;

private:
    DecisionGridRequest request_;
    std::mutex mutex_;
};

RunConfig blobs(int64_t steps) {
    RunConfig c;
    c.model = "tiny_mlp";
    c.data = "synthetic:blobs";
    c.batch = 64;
    c.steps = steps;
    c.lr = 0.05;
    c.threads = 2;
    c.quiet = true;
    return c;
}

// The class the grid predicts in the cell nearest (x, y).
int predictedAt(const DecisionGrid& g, double x, double y) {
    const int c = int(std::lround((x - g.xMin) / (g.xMax - g.xMin) * (g.cols - 1)));
    const int r = int(std::lround((y - g.yMin) / (g.yMax - g.yMin) * (g.rows - 1)));
    return g.predicted[size_t(std::clamp(r, 0, g.rows - 1) * g.cols + std::clamp(c, 0, g.cols - 1))];
}

}  // namespace

class DecisionGridTest : public QObject {
    Q_OBJECT
private slots:
    void onlyWhenAskedAndTwoDimensional();
    void blobsFramesFollowTraining();
    void longRunsKeepFramesComing();
    void averagingFlagsAndFrames();
    void asyncFramesFromPulledVariables();
    void reportsCountTheirExamples();
};

void DecisionGridTest::onlyWhenAskedAndTwoDimensional() {
    const ModelSpec spec = findModel("tiny_mlp");
    const Dataset points = makeBlobs(100, 4, 1);
    Recorder none(0, 32), asks(10, 32);
    QVERIFY(DecisionGridProbe::make({}, spec, points, 100, false) == nullptr);
    QVERIFY(DecisionGridProbe::make({&none}, spec, points, 100, false) == nullptr);
    QVERIFY(DecisionGridProbe::make({&none, &asks}, spec, points, 100, false) != nullptr);
    // Images have no plane to draw on.
    Dataset images;
    images.channels = 1;
    images.height = images.width = 28;
    images.numClasses = 10;
    images.pixels.assign(28 * 28, 0);
    images.labels.assign(1, 0);
    QVERIFY(DecisionGridProbe::make({&asks}, spec, images, 100, false) == nullptr);

    // A run nobody asks grids of makes none.
    Recorder quiet(0, 32);
    Trainer t(blobs(20));
    t.addObserver(&quiet);
    t.run();
    QCOMPARE(int(quiet.steps.size()), 20);
    QVERIFY(quiet.grids.empty());
}

void DecisionGridTest::blobsFramesFollowTraining() {
    Recorder rec(10, 32);
    Trainer t(blobs(200));
    t.addObserver(&rec);
    t.run();
    // The first step, then every 20: 1, 20, 40, ..., 200.
    QCOMPARE(int(rec.grids.size()), 11);
    for (size_t i = 0; i < rec.grids.size(); ++i) {
        const DecisionGrid& g = rec.grids[i];
        QCOMPARE(g.step, i == 0 ? int64_t(1) : int64_t(20 * i));
        QCOMPARE(g.version, g.step);
        QCOMPARE(g.pusher, -1);
        QCOMPARE(g.cols, 32);
        QCOMPARE(g.rows, 32);
        QCOMPARE(int(g.predicted.size()), 32 * 32);
        QCOMPARE(int(g.confidence.size()), 32 * 32);
        QCOMPARE(g.classes, 4);  // tiny_mlp's logits
        for (uint8_t k : g.predicted) QVERIFY(k < 4);
        for (float p : g.confidence) QVERIFY(p >= 0.25f - 1e-6f && p <= 1.0f + 1e-6f);  // an arg-max of 4
        QCOMPARE(int(g.points.size()), 2 * DecisionGridProbe::kMaxPoints);
        QCOMPARE(int(g.labels.size()), DecisionGridProbe::kMaxPoints);
        QVERIFY(g.xMin < -3 && g.xMax > 3 && g.yMin < -3 && g.yMax > 3);  // the blobs sit on radius 3
        QVERIFY(std::abs((g.xMax - g.xMin) - (g.yMax - g.yMin)) < 1e-9);  // square: no axis stretched
    }
    // The boundary moves as the model trains, and ends where the blobs are: each centre is its
    // own class (the Bayes accuracy is about 96%).
    QVERIFY(rec.grids.front().predicted != rec.grids.back().predicted);
    const DecisionGrid& last = rec.grids.back();
    for (int k = 0; k < 4; ++k) {
        const double a = 2 * std::numbers::pi * k / 4;
        QCOMPARE(predictedAt(last, 3 * std::cos(a), 3 * std::sin(a)), k);
    }
}

// Two frames asked over a run (steps 1, 30 and the last), and one at least every 0.02 s of the
// run's clock besides: with slowed steps, frames come exactly where that gap has passed, as the
// reports' own clock says, where without the gap there would be three.
void DecisionGridTest::longRunsKeepFramesComing() {
    RunConfig c = blobs(60);
    c.slow = "0=30";
    Recorder rec(2, 16, 0.02);
    Trainer t(c);
    t.addObserver(&rec);
    t.run();
    QCOMPARE(int(rec.steps.size()), 60);
    std::vector<int64_t> expected{1};
    double last = rec.steps[0].elapsedSeconds;
    for (const StepMetrics& m : rec.steps) {
        if (m.step == 1) continue;
        if (m.step % 30 == 0 || m.elapsedSeconds - last >= 0.02) {
            expected.push_back(m.step);
            last = m.elapsedSeconds;
        }
    }
    std::vector<int64_t> got;
    for (const DecisionGrid& g : rec.grids) got.push_back(g.step);
    QCOMPARE(got, expected);
    QVERIFY2(got.size() > 5, qPrintable(QStringLiteral("%1 frames in %2 s").arg(got.size()).arg(rec.steps.back().elapsedSeconds)));
}

void DecisionGridTest::averagingFlagsAndFrames() {
    RunConfig c = blobs(40);
    c.towers = "cpu:0,cpu:1";
    c.variables = "replicated";
    c.reduce = "allreduce";
    c.averageEvery = 5;
    Recorder rec(40, 16);  // a frame due every step, but only averages can honestly have one
    Trainer t(c);
    t.addObserver(&rec);
    t.run();
    QCOMPARE(int(rec.steps.size()), 40);
    for (const StepMetrics& m : rec.steps) QCOMPARE(m.averaged, m.step % 5 == 0);
    QCOMPARE(int(rec.grids.size()), 8);
    for (size_t i = 0; i < rec.grids.size(); ++i) QCOMPARE(rec.grids[i].step, int64_t(5 * (i + 1)));

    // Without averaging nothing claims an average.
    Recorder plain(0, 16);
    c.averageEvery = 0;
    Trainer u(c);
    u.addObserver(&plain);
    u.run();
    for (const StepMetrics& m : plain.steps) QVERIFY(!m.averaged);
}

void DecisionGridTest::asyncFramesFromPulledVariables() {
    RunConfig c = blobs(60);
    c.towers = "cpu:0,cpu:1";
    c.update = "async";
    Recorder rec(6, 16);
    Trainer t(c);
    t.addObserver(&rec);
    t.run();
    QVERIFY(rec.grids.size() >= 6);  // every 10 updates, and the last (reports arrive in any order)
    for (const DecisionGrid& g : rec.grids) {
        QVERIFY(g.pusher == 0 || g.pusher == 1);
        QVERIFY2(g.version < g.step, "a pusher's pulled copy predates its own update");
        QCOMPARE(int(g.predicted.size()), 16 * 16);
    }
}

void DecisionGridTest::reportsCountTheirExamples() {
    RunConfig c = blobs(6);
    c.towers = "cpu:0,cpu:1";
    Recorder sync(0, 16);
    Trainer t(c);
    t.addObserver(&sync);
    t.run();
    for (const StepMetrics& m : sync.steps) QCOMPARE(m.examples, int64_t(64));

    c.update = "async";
    Recorder async(0, 16);
    Trainer u(c);
    u.addObserver(&async);
    u.run();
    for (const StepMetrics& m : async.steps) QCOMPARE(m.examples, int64_t(32));  // one tower's push
}

QTEST_MAIN(DecisionGridTest)
#include "tst_decision_grid.moc"
