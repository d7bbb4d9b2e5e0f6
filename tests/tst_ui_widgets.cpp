// The placement diagram and the devices panel: the model a diagram derives from a deployment
// plan (towers, holder, links, arrow counts, the bytes and kind of each link, the ring's
// all-reduce volume, towers sharing a GPU), that a step changes the painted picture and
// clearing it restores the static one, pictures of GPU plans, the busy bars, the per-GPU bars
// and sparklines fed by device samples, and the timeline's window of steps.
#include <QtTest>

#include <QImage>
#include <QLabel>
#include <QProgressBar>
#include <cmath>
#include <qcustomplot.h>

#include "devices_panel.hpp"
#include "fake_devices.hpp"
#include "placement_diagram.hpp"

namespace {

constexpr int64_t kParams = 3'276'800;  // 13.1072 MB of variables

// A plan from the tower and variables settings' text, as the CLI writes them, on a machine with
// 8 GPUs (the diagram draws plans; whether the GPUs exist is the experiment panel's question).
tb::DeploymentPlan planOf(const std::string& towers, const std::string& variables) {
    tb::DeploymentPlan plan;
    plan.towers = tb::DeploymentPlan::parseTowers(towers, 8, 8, "towers");
    tb::DeploymentPlan::parseVariables(variables, plan, "variables");
    plan.batchPerTower = 64;
    return plan;
}

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
    void gpuLinks_data();
    void gpuLinks();
    void ringVolume_data();
    void ringVolume();
    void sharedGpusGrouped();
    void gpuPicturesRender();
    void devicesPanelBars();
    void devicesPanelAsyncKeepsOthers();
    void devicesPanelGpus();
    void devicesPanelWithoutGpus();
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
    QVERIFY(qAbs(m.variablesMB() - 13.1072) < 1e-9);
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

void TestUiWidgets::gpuLinks_data() {
    QTest::addColumn<QString>("towers");
    QTest::addColumn<QString>("variables");
    QTest::addColumn<bool>("async");
    QTest::addColumn<QList<qint64>>("bytes");  // linkBytes per tower
    QTest::addColumn<QStringList>("kinds");    // linkKind per tower
    QTest::addColumn<QString>("label");        // linkLabel of every tower whose variables move
    const qint64 p4 = kParams * 4;
    const QString hostGpu = QStringLiteral("host\u2194GPU"), gpuGpu = QStringLiteral("GPU\u2194GPU");
    const QString perStep = QStringLiteral("13.1 MB \u2193\u2191 per step");
    QTest::newRow("2 GPUs, variables on the host")
        << "gpu:0,gpu:1" << "cpu" << false << QList<qint64>{p4, p4} << QStringList{hostGpu, hostGpu} << perStep;
    QTest::newRow("2 GPUs, variables on gpu:0")
        << "gpu:0,gpu:1" << "gpu:0" << false << QList<qint64>{0, p4} << QStringList{QString(), gpuGpu} << perStep;
    QTest::newRow("2 towers on gpu:0, variables there")
        << "gpu:0*2" << "gpu:0" << false << QList<qint64>{0, 0} << QStringList{QString(), QString()} << QString();
    QTest::newRow("2 towers on gpu:0, variables on the host")
        << "gpu:0*2" << "cpu" << false << QList<qint64>{p4, p4} << QStringList{hostGpu, hostGpu} << perStep;
    // CPU towers share the host's memory with the holder: the bytes they stand for, no link.
    QTest::newRow("2 CPU towers") << "cpu:0,cpu:1" << "cpu" << false << QList<qint64>{p4, p4}
                                  << QStringList{QString(), QString()} << perStep;
    QTest::newRow("2 GPUs, asynchronous") << "gpu:0,gpu:1" << "cpu" << true << QList<qint64>{p4, p4}
                                          << QStringList{hostGpu, hostGpu}
                                          << QStringLiteral("13.1 MB \u2193\u2191 per update");
}

void TestUiWidgets::gpuLinks() {
    QFETCH(QString, towers);
    QFETCH(QString, variables);
    QFETCH(bool, async);
    QFETCH(QList<qint64>, bytes);
    QFETCH(QStringList, kinds);
    QFETCH(QString, label);
    auto plan = planOf(towers.toStdString(), variables.toStdString());
    if (async) plan.update = tb::UpdateMode::Async;
    const auto m = PlacementModel::fromPlan(plan, kParams);
    QCOMPARE(m.towers.size(), bytes.size());
    for (int i = 0; i < m.towers.size(); ++i) {
        QCOMPARE(m.linkBytes(i), bytes[i]);
        QCOMPARE(m.linkKind(i), kinds[i]);
        QCOMPARE(m.linkLabel(i), bytes[i] ? label : QString());
    }
    QCOMPARE(m.ringBytesPerDevice(), 0.0);
    QVERIFY(m.ringLabel().isEmpty());
}

void TestUiWidgets::ringVolume_data() {
    QTest::addColumn<QString>("towers");
    QTest::addColumn<int>("averageEvery");
    QTest::addColumn<int>("devices");
    QTest::addColumn<double>("bytes");  // per device: 2(D-1)/D x P x 4
    QTest::addColumn<QString>("label");
    const QString formula = QStringLiteral("(2(D\u22121)/D \u00d7 P \u00d7 4, D = %1)");
    QTest::newRow("4 GPUs") << "gpu:0,gpu:1,gpu:2,gpu:3" << 0 << 4 << 19'660'800.0
                            << "all-reduce: 19.7 MB per GPU per step " + formula.arg(4);
    QTest::newRow("2 GPUs, 2 towers each") << "gpu:0*2,gpu:1*2" << 0 << 2 << 13'107'200.0
                                           << "all-reduce: 13.1 MB per GPU per step " + formula.arg(2);
    QTest::newRow("3 GPUs") << "gpu:0,gpu:1,gpu:2" << 0 << 3 << 2.0 * 2 / 3 * kParams * 4
                            << "all-reduce: 17.5 MB per GPU per step " + formula.arg(3);
    QTest::newRow("2 towers on gpu:0") << "gpu:0*2" << 0 << 1 << 0.0
                                       << QStringLiteral("all-reduce within gpu:0: nothing leaves the device");
    QTest::newRow("4 CPU towers, averaging every 5") << "cpu:0,cpu:1,cpu:2,cpu:3" << 5 << 4 << 19'660'800.0
                                                     << "average every 5 steps: 19.7 MB per tower each time " +
                                                            formula.arg(4);
}

void TestUiWidgets::ringVolume() {
    QFETCH(QString, towers);
    QFETCH(int, averageEvery);
    QFETCH(int, devices);
    QFETCH(double, bytes);
    QFETCH(QString, label);
    auto plan = planOf(towers.toStdString(), "replicated");
    plan.reduce = tb::ReduceMode::AllReduce;
    plan.averageEvery = averageEvery;
    const auto m = PlacementModel::fromPlan(plan, kParams);
    QCOMPARE(m.distinctDevices(), devices);
    QVERIFY2(std::abs(m.ringBytesPerDevice() - bytes) < 1e-6, qPrintable(QString::number(m.ringBytesPerDevice())));
    QCOMPARE(m.ringLabel(), label);
    for (int i = 0; i < m.towers.size(); ++i) QCOMPARE(m.linkBytes(i), 0);
}

void TestUiWidgets::sharedGpusGrouped() {
    using Group = PlacementModel::DeviceGroup;
    const auto groupsOf = [](const std::string& towers) {
        return PlacementModel::fromPlan(planOf(towers, "cpu"), kParams).sharedDevices();
    };
    QCOMPARE(groupsOf("gpu:0*2,gpu:1*2"),
             (QVector<Group>{{QStringLiteral("gpu:0"), 0, 2}, {QStringLiteral("gpu:1"), 2, 2}}));
    QCOMPARE(groupsOf("gpu:0*3"), (QVector<Group>{{QStringLiteral("gpu:0"), 0, 3}}));
    QCOMPARE(groupsOf("gpu:0,gpu:1*2"), (QVector<Group>{{QStringLiteral("gpu:1"), 1, 2}}));
    QVERIFY(groupsOf("gpu:0,gpu:1").isEmpty());
    QVERIFY(groupsOf("cpu:0,cpu:1").isEmpty());
}

// The pictures of docs/window-gpu-*.png, saved beside the test binary: (a) 2 GPUs with the
// variables on the host, (b) two towers sharing gpu:0 with the variables there, (c) 4 GPUs
// replicated. Each must be drawn, and differ from the others.
void TestUiWidgets::gpuPicturesRender() {
    auto replicated = planOf("gpu:0,gpu:1,gpu:2,gpu:3", "replicated");
    replicated.reduce = tb::ReduceMode::AllReduce;
    const struct {
        const char* file;
        tb::DeploymentPlan plan;
    } pictures[] = {{"window-gpu-2-gpus-host-variables.png", planOf("gpu:0,gpu:1", "cpu")},
                    {"window-gpu-shared-gpu0.png", planOf("gpu:0*2", "gpu:0")},
                    {"window-gpu-4-gpus-replicated.png", replicated}};
    QVector<QImage> images;
    for (const auto& pic : pictures) {
        PlacementDiagram d;
        d.resize(640, 360);
        d.setModel(PlacementModel::fromPlan(pic.plan, kParams));
        const QImage image = grabImage(d);
        QVERIFY(!image.isNull());
        for (const QImage& other : images) QVERIFY(image != other);
        images << image;
        const QString path = QDir(QCoreApplication::applicationDirPath()).filePath(QLatin1String(pic.file));
        QVERIFY2(image.save(path), qPrintable(path));
    }
}

void TestUiWidgets::devicesPanelBars() {
    DevicesPanel panel{DeviceCatalog{}};
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
    DevicesPanel panel{DeviceCatalog{}};
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

void TestUiWidgets::devicesPanelGpus() {
    DevicesPanel panel(tbtest::fakeCatalog(2));
    panel.resize(360, 640);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    QCOMPARE(panel.gpuRows(), 2);
    QStringList labels;
    for (const QLabel* l : panel.findChildren<QLabel*>()) labels << l->text();
    QVERIFY2(labels.contains(QStringLiteral("gpu:1 NVIDIA H200")), qPrintable(labels.join(" | ")));
    QVERIFY(panel.gpuNote().isEmpty());
    QCOMPARE(panel.gpuUtilPercent(0), -1);  // no reading yet
    QCOMPARE(panel.gpuMemoryText(0), QStringLiteral("\u2014 / 139.7 GiB"));

    const int64_t gib = int64_t(1) << 30;
    const auto batchAt = [&](double t, double util0, int64_t mem0) {
        std::vector<tb::DeviceSample> batch(3);
        for (int i = 0; i < 3; ++i) {
            batch[size_t(i)].index = i;  // index 2 is not in the catalog: ignored
            batch[size_t(i)].t = t;
            batch[size_t(i)].utilGpu = util0 + 10 * i;
            batch[size_t(i)].memUsed = mem0 + i * gib;
            batch[size_t(i)].memTotal = tbtest::kFakeGpuBytes;
        }
        return batch;
    };
    panel.addSamples(batchAt(1.0, 37, 25 * gib / 2));
    QCOMPARE(panel.gpuUtilPercent(0), 37);
    QCOMPARE(panel.gpuUtilPercent(1), 47);
    QCOMPARE(panel.gpuMemoryText(0), QStringLiteral("12.5 / 139.7 GiB"));
    QCOMPARE(panel.gpuMemoryText(1), QStringLiteral("13.5 / 139.7 GiB"));
    QCustomPlot* plot = panel.gpuPlot(0);
    QVERIFY(plot != nullptr);
    QCOMPARE(plot->graph(0)->data()->size(), 1);
    QCOMPARE(plot->graph(0)->data()->constBegin()->value, 37.0);
    QVERIFY(std::abs(plot->graph(1)->data()->constBegin()->value - 100.0 * 12.5 * gib / tbtest::kFakeGpuBytes) < 1e-9);

    // Seventy seconds of samples: the charts keep about the last minute and scroll to the newest.
    for (int t = 2; t <= 70; ++t) panel.addSamples(batchAt(t, t % 100, t * gib));
    QCOMPARE(panel.gpuUtilPercent(0), 70);
    QCOMPARE(panel.gpuMemoryText(0), QStringLiteral("70.0 / 139.7 GiB"));
    QVERIFY(plot->graph(0)->data()->constBegin()->key >= 70 - DevicesPanel::kHistorySeconds - 1);
    QCOMPARE((plot->graph(0)->data()->constEnd() - 1)->value, 70.0);
    QTRY_COMPARE_WITH_TIMEOUT(plot->xAxis->range().upper, 70.0, 1000);
    QCOMPARE(plot->xAxis->range().lower, 70.0 - DevicesPanel::kHistorySeconds);

    // A reading the board does not give empties the bar and leaves a gap in the line, not a zero.
    auto unknown = batchAt(71, 0, 0);
    unknown[0].utilGpu = tb::DeviceSample::kUnknown;
    panel.addSamples(unknown);
    QCOMPARE(panel.gpuUtilPercent(0), -1);
    QVERIFY(std::isnan((plot->graph(0)->data()->constEnd() - 1)->value));
}

void TestUiWidgets::devicesPanelWithoutGpus() {
    // No GPU: the catalog's reason, and nothing about telemetry (there is nothing to watch).
    DevicesPanel none(tbtest::fakeCatalog(0));
    QCOMPARE(none.gpuRows(), 0);
    QCOMPARE(none.gpuNote(), QStringLiteral("No GPU: the fake machine has no GPU"));
    none.setTelemetryUnavailable(QStringLiteral("NVML is missing"));
    QCOMPARE(none.gpuNote(), QStringLiteral("No GPU: the fake machine has no GPU"));
    none.addSamples(std::vector<tb::DeviceSample>(1));  // nowhere to go: ignored

    // GPUs but no NVML: the GPUs are listed, and the reason their bars stay empty.
    DevicesPanel blind(tbtest::fakeCatalog(2));
    QCOMPARE(blind.gpuRows(), 2);
    blind.setTelemetryUnavailable(QStringLiteral("libnvidia-ml.so.1: cannot open shared object file"));
    QCOMPARE(blind.gpuNote(), QStringLiteral("No GPU telemetry: libnvidia-ml.so.1: cannot open shared object file"));
    QCOMPARE(blind.gpuUtilPercent(1), -1);
}

QTEST_MAIN(TestUiWidgets)
#include "tst_ui_widgets.moc"
