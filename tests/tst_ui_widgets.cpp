// The placement diagram and the devices panel: the model a diagram derives from a deployment
// plan (towers, holder, links, arrow counts), that a step changes the painted picture and
// clearing it restores the static one, the busy bars, and the timeline's window of steps.
#include <QtTest>

#include <QImage>
#include <QProgressBar>

#include "devices_panel.hpp"
#include "placement_diagram.hpp"

namespace {

tb::DeploymentPlan cpuPlan(int towers, tb::VariablePlacement variables = tb::VariablePlacement::Cpu) {
    tb::DeploymentPlan plan;
    plan.towers.clear();
    for (int i = 0; i < towers; ++i) plan.towers.push_back(tb::Device{tb::DeviceType::Cpu, i});
    plan.variables = variables;
    plan.batchPerTower = 64;
    return plan;
}

// A step in which tower i computes for longer the higher its index (the last is slowest) and
// the others wait for it at the synchronisation point.
tb::StepMetrics syntheticStep(int towers, int64_t step) {
    tb::StepMetrics m;
    m.step = step;
    m.totalSteps = 100;
    m.stepSeconds = 0.1;
    m.bytesMoved = 4'000'000;
    for (int i = 0; i < towers; ++i) {
        tb::TowerMetrics t;
        t.loss = 2.0;
        t.accuracy = 0.25;
        t.phases.dataWait = 0.005;
        t.phases.forward = 0.02 + 0.005 * i;
        t.phases.backward = 0.04 + 0.01 * i;
        t.phases.wait = 0.015 * (towers - 1 - i);
        t.phases.reduce = 0.01;
        t.phases.apply = 0.005;
        t.busyFraction = 0.5 + 0.1 * i;
        m.towers.push_back(t);
    }
    return m;
}

QImage grabImage(QWidget& w) { return w.grab().toImage(); }

}  // namespace

class TestUiWidgets : public QObject {
    Q_OBJECT
private slots:
    void fromPlanTowers_data();
    void fromPlanTowers();
    void linksAndArrows_data();
    void linksAndArrows();
    void holderOnTower();
    void slowdownCarried();
    void asyncAndAveragingCarried();
    void setModelChangesModel();
    void showStepChangesPicture_data();
    void showStepChangesPicture();
    void showStepToleratesMismatch();
    void devicesPanelBars();
    void devicesPanelAsyncKeepsOthers();
    void timelineKeepsLastSteps();
};

void TestUiWidgets::fromPlanTowers_data() {
    QTest::addColumn<int>("towers");
    QTest::newRow("1 tower") << 1;
    QTest::newRow("2 towers") << 2;
    QTest::newRow("4 towers") << 4;
}

void TestUiWidgets::fromPlanTowers() {
    QFETCH(int, towers);
    const auto m = PlacementModel::fromPlan(cpuPlan(towers), 3'276'800);
    QCOMPARE(m.towers.size(), towers);
    for (int i = 0; i < towers; ++i) {
        QCOMPARE(m.towers[i].device, QStringLiteral("cpu:%1").arg(i));
        QCOMPARE(m.towers[i].batch, 64);
        QCOMPARE(m.towers[i].slowdown, 1.0);
    }
    QCOMPARE(m.holder, QStringLiteral("cpu"));
    QVERIFY(m.links == PlacementModel::Links::HolderArrows);
    QCOMPARE(m.arrowCount(), 2 * towers);
    QVERIFY(!m.async);
    QCOMPARE(m.psShards, 1);
    QVERIFY(qAbs(m.variablesMB - 13.1072) < 1e-9);
}

void TestUiWidgets::linksAndArrows_data() {
    QTest::addColumn<int>("towers");
    QTest::addColumn<int>("variables");  // tb::VariablePlacement
    QTest::addColumn<int>("shards");
    QTest::addColumn<int>("links");      // PlacementModel::Links
    QTest::addColumn<int>("arrows");
    QTest::addColumn<QString>("holder");
    QTest::addColumn<bool>("async");
    const int cpu = int(tb::VariablePlacement::Cpu), replicated = int(tb::VariablePlacement::Replicated);
    const int arrowsLink = int(PlacementModel::Links::HolderArrows), ring = int(PlacementModel::Links::Ring),
              shards = int(PlacementModel::Links::Shards);
    QTest::newRow("2 towers, holder") << 2 << cpu << 1 << arrowsLink << 4 << QStringLiteral("cpu") << false;
    QTest::newRow("4 towers, ring") << 4 << replicated << 1 << ring << 4 << QString() << false;
    QTest::newRow("2 async towers, 3 shards") << 2 << cpu << 3 << shards << 12 << QStringLiteral("cpu") << true;
    // Synchronous updates take the variables as one: shards are not drawn where they do nothing.
    QTest::newRow("2 sync towers, 3 shards") << 2 << cpu << 1 << arrowsLink << 4 << QStringLiteral("cpu") << false;
    QTest::newRow("1 tower, ring") << 1 << replicated << 1 << ring << 0 << QString() << false;
    QTest::newRow("2 towers, ring") << 2 << replicated << 1 << ring << 2 << QString() << false;
}

void TestUiWidgets::linksAndArrows() {
    QFETCH(int, towers);
    QFETCH(int, variables);
    QFETCH(int, shards);
    QFETCH(int, links);
    QFETCH(int, arrows);
    QFETCH(QString, holder);
    QFETCH(bool, async);
    auto plan = cpuPlan(towers, tb::VariablePlacement(variables));
    plan.psShards = 3;
    plan.update = async ? tb::UpdateMode::Async : tb::UpdateMode::Sync;
    const auto m = PlacementModel::fromPlan(plan, 1000);
    QCOMPARE(int(m.links), links);
    QCOMPARE(m.arrowCount(), arrows);
    QCOMPARE(m.holder, holder);
    QCOMPARE(m.psShards, shards);
}

void TestUiWidgets::holderOnTower() {
    auto plan = cpuPlan(2, tb::VariablePlacement::Tower);
    plan.variablesTower = 1;
    const auto m = PlacementModel::fromPlan(plan, 1000);
    QCOMPARE(m.holder, QStringLiteral("cpu:1"));
    QVERIFY(m.links == PlacementModel::Links::HolderArrows);
    // Tower 1 is on the holder's device and reads the variables in place: only tower 0's
    // parameters and gradients move.
    QVERIFY(!m.towers[0].local && m.towers[1].local);
    QCOMPARE(m.arrowCount(), 2);
}

void TestUiWidgets::slowdownCarried() {
    auto plan = cpuPlan(2);
    plan.slowdown = {1.0, 3.0};
    const auto m = PlacementModel::fromPlan(plan, 1000);
    QCOMPARE(m.towers[0].slowdown, 1.0);
    QCOMPARE(m.towers[1].slowdown, 3.0);
}

void TestUiWidgets::asyncAndAveragingCarried() {
    auto plan = cpuPlan(2);
    plan.update = tb::UpdateMode::Async;
    QVERIFY(PlacementModel::fromPlan(plan, 1000).async);

    auto avg = cpuPlan(4, tb::VariablePlacement::Replicated);
    avg.averageEvery = 5;
    const auto m = PlacementModel::fromPlan(avg, 1000);
    QCOMPARE(m.averageEvery, 5);
    QVERIFY(m.links == PlacementModel::Links::Ring);
}

void TestUiWidgets::setModelChangesModel() {
    PlacementDiagram d;
    QVERIFY(d.model().towers.isEmpty());
    const auto m = PlacementModel::fromPlan(cpuPlan(2), 3'276'800);
    d.setModel(m);
    QVERIFY(d.model() == m);
    const auto ring = PlacementModel::fromPlan(cpuPlan(4, tb::VariablePlacement::Replicated), 1000);
    d.setModel(ring);
    QVERIFY(d.model() == ring);
    QVERIFY(!(d.model() == m));
}

void TestUiWidgets::showStepChangesPicture_data() {
    QTest::addColumn<int>("towers");
    QTest::addColumn<int>("variables");
    QTest::addColumn<int>("shards");
    QTest::addColumn<bool>("async");
    QTest::addColumn<int>("averageEvery");
    const int cpu = int(tb::VariablePlacement::Cpu), replicated = int(tb::VariablePlacement::Replicated);
    QTest::newRow("holder, 2 towers") << 2 << cpu << 1 << false << 0;
    QTest::newRow("holder, 1 tower") << 1 << cpu << 1 << false << 0;
    QTest::newRow("ring, 4 towers") << 4 << replicated << 1 << false << 0;
    QTest::newRow("ring, averaging") << 2 << replicated << 1 << false << 3;
    QTest::newRow("shards, 2x3") << 2 << cpu << 3 << false << 0;
    QTest::newRow("async, 2 towers") << 2 << cpu << 1 << true << 0;
}

void TestUiWidgets::showStepChangesPicture() {
    QFETCH(int, towers);
    QFETCH(int, variables);
    QFETCH(int, shards);
    QFETCH(bool, async);
    QFETCH(int, averageEvery);
    auto plan = cpuPlan(towers, tb::VariablePlacement(variables));
    plan.psShards = shards;
    plan.averageEvery = averageEvery;
    plan.slowdown.assign(size_t(towers), 1.0);
    plan.slowdown.back() = 2.5;
    if (async) plan.update = tb::UpdateMode::Async;

    PlacementDiagram d;
    d.resize(520, 300);
    d.setModel(PlacementModel::fromPlan(plan, 3'276'800));
    const QImage still = grabImage(d);
    QVERIFY(!still.isNull());
    QCOMPARE(still.size(), QSize(520, 300) * d.devicePixelRatio());

    auto step = syntheticStep(towers, 7);
    if (async) {
        step.pusher = towers - 1;
        step.staleness = 1;
    }
    d.showStep(step);
    const QImage live = grabImage(d);
    QVERIFY(!live.isNull());
    QVERIFY(live != still);

    // A second step and a resize exercise the scaling paths too.
    d.showStep(syntheticStep(towers, 8));
    d.resize(320, 200);
    QVERIFY(!grabImage(d).isNull());
    d.resize(900, 500);
    QVERIFY(!grabImage(d).isNull());

    d.resize(520, 300);
    d.clearActivity();
    QCOMPARE(grabImage(d), still);
}

void TestUiWidgets::showStepToleratesMismatch() {
    // A report with more or fewer towers than the model (a plan changed under a running view)
    // must only be drawn as far as both go.
    PlacementDiagram d;
    d.resize(400, 240);
    d.showStep(syntheticStep(2, 1));  // no model yet
    QVERIFY(!grabImage(d).isNull());
    d.setModel(PlacementModel::fromPlan(cpuPlan(2), 1000));
    d.showStep(syntheticStep(5, 2));
    QVERIFY(!grabImage(d).isNull());
    d.showStep(tb::StepMetrics{});
    QVERIFY(!grabImage(d).isNull());
    d.clearActivity();
}

void TestUiWidgets::devicesPanelBars() {
    DevicesPanel panel;
    panel.reset({QStringLiteral("cpu:0"), QStringLiteral("cpu:1")});
    QCOMPARE(panel.findChildren<QProgressBar*>().size(), 2);
    QCOMPARE(panel.busyPercent(0), 0);
    QCOMPARE(panel.busyPercent(2), -1);

    auto step = syntheticStep(2, 1);
    step.towers[0].busyFraction = 0.734;
    step.towers[1].busyFraction = 0.456;
    panel.addStep(step);
    QCOMPARE(panel.busyPercent(0), qRound(0.734 * 100));
    QCOMPARE(panel.busyPercent(1), qRound(0.456 * 100));
    QCOMPARE(panel.timeline()->stepsShown(), 1);

    // A new run replaces the bars rather than adding to them, and empties the timeline.
    panel.reset({QStringLiteral("cpu:0"), QStringLiteral("cpu:1"), QStringLiteral("cpu:2")});
    QCOMPARE(panel.findChildren<QProgressBar*>().size(), 3);
    QCOMPARE(panel.busyPercent(0), 0);
    QCOMPARE(panel.timeline()->stepsShown(), 0);
}

void TestUiWidgets::devicesPanelAsyncKeepsOthers() {
    DevicesPanel panel;
    panel.reset({QStringLiteral("cpu:0"), QStringLiteral("cpu:1")});
    auto sync = syntheticStep(2, 1);
    sync.towers[0].busyFraction = 0.6;
    sync.towers[1].busyFraction = 0.8;
    panel.addStep(sync);

    auto push = syntheticStep(2, 2);
    push.pusher = 1;
    push.staleness = 0;
    push.towers[0].busyFraction = 0;  // not measured in this report
    push.towers[1].busyFraction = 0.9;
    panel.addStep(push);
    QCOMPARE(panel.busyPercent(0), 60);
    QCOMPARE(panel.busyPercent(1), 90);
}

void TestUiWidgets::timelineKeepsLastSteps() {
    TimelineView view;
    view.resize(520, 160);
    view.reset(2);
    QCOMPARE(view.stepsShown(), 0);
    const QImage empty = grabImage(view);
    QVERIFY(!empty.isNull());
    for (int i = 1; i <= TimelineView::kMaxSteps + 5; ++i) {
        auto step = syntheticStep(2, i);
        step.towers[1].phases.straggle = 0.01;
        view.addStep(step);
        QVERIFY(view.stepsShown() <= TimelineView::kMaxSteps);
    }
    QCOMPARE(view.stepsShown(), TimelineView::kMaxSteps);
    const QImage full = grabImage(view);
    QVERIFY(!full.isNull());
    QVERIFY(full != empty);
    view.reset(2);
    QCOMPARE(view.stepsShown(), 0);
}

QTEST_MAIN(TestUiWidgets)
#include "tst_ui_widgets.moc"
