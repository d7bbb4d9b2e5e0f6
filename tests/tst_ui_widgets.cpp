// The placement diagram and the devices panel: the model a diagram derives from a deployment
// plan (towers, holder, links, arrow counts, the bytes and kind of each link, the ring's
// all-reduce volume, towers sharing a GPU), that a step changes the painted picture and
// clearing it restores the static one, pictures of GPU plans, the busy bars, the per-GPU bars
// and sparklines fed by device samples, and the timeline's window of steps.
#include <QtTest>

#include <QDir>
#include <QFileDialog>
#include <QHeaderView>
#include <QTreeView>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QImage>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QListWidget>
#include <QMimeData>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QThread>
#include <QLabel>
#include <QProgressBar>
#include <atomic>
#include <cmath>
#include <qcustomplot.h>

#include "background_task.hpp"
#include "file_dialogs.hpp"
#include "backend/backend.hpp"
#include "lessons/concepts_help.hpp"
#include "model/model_view.hpp"
#include "charts/decision_view.hpp"
#include "devices/devices_panel.hpp"
#include "fake_devices.hpp"
#include "nn/network.hpp"
#include "devices/phase_colors.hpp"
#include "placement/placement_diagram.hpp"
#include "lab/augment_view.hpp"
#include "predictions/predictions_panel.hpp"
#include "test_support.hpp"
#include "view_format.hpp"

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

// The colour inside tower i's box in a picture of the diagram: 4 px in from its left edge, at
// mid-height, clear of the centred text and of the border's antialiasing.
QColor towerFill(const PlacementDiagram& d, const QImage& image, int i) {
    const QRectF r = d.towerRect(i);
    const qreal dpr = image.devicePixelRatio();
    return image.pixelColor(QPoint(int((r.left() + 4) * dpr), int(r.center().y() * dpr)));
}

// Whether the row `y` of the picture, across tower i's box, holds colour c exactly (the step's
// phase bar, filled without antialiasing inside).
bool rowOfTowerHas(const PlacementDiagram& d, const QImage& image, int i, double y, const QColor& c) {
    const QRectF r = d.towerRect(i);
    const qreal dpr = image.devicePixelRatio();
    for (int x = int(r.left() * dpr); x < int(r.right() * dpr); ++x)
        if (image.pixelColor(x, int(y * dpr)) == c) return true;
    return false;
}

// A picture of a diagram, static (no step shown): every tower's box in the idle fill; live: every
// tower reported coloured by its phases, with the phase bar along its bottom.
void expectTowersDrawn(const PlacementDiagram& d, const QImage& image, int reported) {
    const QColor idle = d.palette().color(QPalette::AlternateBase);
    for (int i = 0; i < d.model().towers.size(); ++i) {
        const QColor fill = towerFill(d, image, i);
        if (i >= reported) {
            QVERIFY2(fill == idle, qPrintable(QString("tower %1: %2, not the idle fill").arg(i).arg(fill.name())));
            continue;
        }
        QVERIFY2(fill != idle && fill != d.palette().color(QPalette::Base),
                 qPrintable(QString("tower %1 is not coloured by its step (%2)").arg(i).arg(fill.name())));
        // The bar: 5 px (scaled) above the box's bottom, the forward phase's colour somewhere in it.
        const QRectF r = d.towerRect(i);
        const double scale = std::clamp(std::min(d.width() / 520.0, d.height() / 300.0), 0.75, 1.6);
        const double barH = std::max(4.0, 6 * scale);
        QVERIFY2(rowOfTowerHas(d, image, i, r.bottom() - 5 * scale - barH / 2, tb::ui::phaseColor(tb::ui::Phase::Forward)),
                 qPrintable(QString("tower %1 has no phase bar").arg(i)));
    }
}

}  // namespace

class TestUiWidgets : public QObject {
    Q_OBJECT
private slots:
    // Qt's own file dialog (the offscreen platform has no desktop's) opens wide enough for its
    // detail columns and fits them to what they show: at Qt's default size "229 bytes" read
    // "229...tes" and "JSON Document" "JSO...ent".
    void fileDialogColumnsWhole() {
        QFileDialog d(nullptr, "Open run config", TB_SOURCE_DIR "/samples/configs", "Run configs (*.json)");
        d.setViewMode(QFileDialog::Detail);
        tb::ui::fitFileDialog(&d);
        d.show();
        QVERIFY(QTest::qWaitForWindowExposed(&d));
        auto* view = d.findChild<QTreeView*>("treeView");
        QVERIFY(view);
        QTRY_VERIFY(view->model()->rowCount(view->rootIndex()) >= 6);
        // (protected in QTreeView, public in its base)
        auto need = [view](int c) { return static_cast<const QAbstractItemView*>(view)->sizeHintForColumn(c); };
        for (int c = 1; c < view->header()->count(); ++c)
            QTRY_VERIFY2(view->columnWidth(c) >= need(c),
                         qPrintable(QStringLiteral("column %1: %2 px, its entries need %3")
                                        .arg(c).arg(view->columnWidth(c)).arg(need(c))));
        QVERIFY2(view->header()->length() <= view->viewport()->width(),
                 qPrintable(QStringLiteral("columns %1 px in %2 px").arg(view->header()->length()).arg(view->viewport()->width())));
        QVERIFY(view->columnWidth(0) >= need(0));  // the names whole too
    }

    void fromPlanTowers_data();
    void fromPlanTowers();
    void linksAndArrows_data();
    void linksAndArrows();
    void holderOnTower();
    void slowdownCarried();
    void asyncAndAveragingCarried();
    void setModelChangesModel();
    void layerSharesLeaveOutWhatDoesNothing();
    void showStepChangesPicture_data();
    void showStepChangesPicture();
    void showStepToleratesMismatch();
    void slowestFollowsTheRunNotOneStep();
    void gpuLinks_data();
    void gpuLinks();
    void ringVolume_data();
    void ringVolume();
    void sharedGpusGrouped();
    void gpuPicturesRender();
    void shardsSizedRoundRobin();
    void shardPictureBundlesArrows();
    void bytesPerStepAsReadme_data();
    void bytesPerStepAsReadme();
    void diagramTooltipWraps();
    void diagramShowsInvalidSettings();
    void decisionViewDrawsRegions();
    void predictionsShowMistakesFirst();
    void droppedImagesAreClassified();
    void augmentedSamplesAreDrawn();
    void closedWhileReadingLeavesNoThread();
    void emptyGridSaysItsSentenceWhole();
    void tilesFitTheirCaptions();
    void conceptsEachHaveADiagram();
    void devicesPanelBars();
    void devicesPanelAsyncBusyPerTower();
    void timelineAsyncWallClock();
    void timelineAveragingMarks();
    void timelineDrawsPipelineBlocks();
    void diagramDrawsStages();
    void timelineHoverShowsPhases();
    void timelinePicturesRender();
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
    // --sync-bn: the towers' caption says their batch norms' sums move too (where towers meet).
    tb::DeploymentPlan synced = cpuPlan(towers);
    synced.syncBatchNorm = true;
    PlacementDiagram d;
    d.setModel(PlacementModel::fromPlan(synced, 3'276'800));
    QCOMPARE(d.caption().endsWith("; with batch-norm sums (sync-bn)"), towers > 1);
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
    // One pair of arrows per tower to the bus that reaches every shard, not a pair per shard.
    QTest::newRow("2 async towers, 3 shards") << 2 << cpu << 3 << shards << 4 << QStringLiteral("cpu") << true;
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

// The model view's shares of a profiled step: a fused ReLU or a flatten does nothing of its own
// (its times are the profiling events' own cost), so it shows no share and is not counted in the
// step the shares divide: they add up to 100%. (Counted, they were 1.8% of a vgg_bn step under
// AddressSanitizer, and the shown shares added up to 98.2.)
void TestUiWidgets::layerSharesLeaveOutWhatDoesNothing() {
    ModelView v;
    const tb::ModelSpec spec = tb::findModel("mnist_cnn");
    v.setModel(spec);
    const std::vector<tb::LayerSummary> layers = tb::summarizeLayers(spec);
    tb::LayerTimes t;
    t.forward.assign(layers.size(), 1e-3);  // every layer as slow as any other, the idle ones too
    t.backward.assign(layers.size(), 2e-3);
    v.showLayerTimes(t, 5);
    double shares = 0;
    int idle = 0, shown = 0;
    for (size_t l = 0; l < layers.size(); ++l) {
        const QString share = v.table()->item(int(l), 8)->text();
        const bool nothing = layers[l].fused || layers[l].type == tb::LayerType::Flatten;
        idle += nothing;
        if (nothing) {
            QVERIFY2(share.isEmpty(), qPrintable(QString::fromStdString(layers[l].name) + ": " + share));
            continue;
        }
        shares += share.chopped(1).toDouble();
        ++shown;
    }
    QVERIFY(idle >= 3);  // mnist_cnn's two ReLUs folded into their poolings, its flatten
    QVERIFY2(std::abs(shares - 100) < 0.05 * shown, qPrintable(QString::number(shares)));
    // The note's forward and backward are the shown layers' too: 1 and 2 ms each.
    QVERIFY2(v.timingNote().contains(tb::ui::formatMs(1e-3 * shown)) && v.timingNote().contains(tb::ui::formatMs(2e-3 * shown)),
             qPrintable(v.timingNote()));
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
    QCOMPARE(still.size(), QSize(520, 300) * d.devicePixelRatio());
    expectTowersDrawn(d, still, 0);
    // The straggler (the last tower) outlined in the straggle colour: its box's left edge, 1 px in.
    const QRectF last = d.towerRect(towers - 1);
    const QColor edge = still.pixelColor(int(last.left() + 0.5), int(last.center().y()));
    const QColor straggle = tb::ui::phaseColor(tb::ui::Phase::Straggle);
    QVERIFY2(std::abs(edge.hueF() - straggle.hueF()) < 0.05 && edge.saturationF() > 0.3,
             qPrintable(QString("the straggler's edge is %1, not %2").arg(edge.name(), straggle.name())));

    auto step = syntheticStep(towers, 7);
    if (async) {
        step.pusher = towers - 1;
        step.staleness = 1;
    }
    d.showStep(step);
    const QImage live = grabImage(d);
    QVERIFY(live != still);
    expectTowersDrawn(d, live, towers);

    // A second step and a resize exercise the scaling paths too.
    d.showStep(syntheticStep(towers, 8));
    for (const QSize size : {QSize(320, 200), QSize(900, 500)}) {
        d.resize(size);
        const QImage scaled = grabImage(d);
        QCOMPARE(scaled.size(), size * d.devicePixelRatio());
        for (int i = 0; i < towers; ++i)  // every box inside the picture, in order, apart
            QVERIFY(QRectF(d.rect()).contains(d.towerRect(i)) && (i == 0 || d.towerRect(i).left() > d.towerRect(i - 1).right()));
        expectTowersDrawn(d, scaled, towers);
    }

    d.resize(520, 300);
    d.clearActivity();
    QCOMPARE(grabImage(d), still);
}

void TestUiWidgets::showStepToleratesMismatch() {
    // A report with more or fewer towers than the model (a plan changed under a running view)
    // must only be drawn as far as both go.
    PlacementDiagram d;
    d.resize(400, 240);
    d.showStep(syntheticStep(2, 1));  // no model yet: the picture says there is no plan
    const QImage none = grabImage(d);
    QCOMPARE(none.pixelColor(4, 4), d.palette().color(QPalette::Base));
    d.setModel(PlacementModel::fromPlan(cpuPlan(2), 1000));
    d.showStep(syntheticStep(5, 2));  // 5 reported, 2 drawn: both coloured by their step
    expectTowersDrawn(d, grabImage(d), 2);
    d.showStep(tb::StepMetrics{});    // none reported: both idle
    expectTowersDrawn(d, grabImage(d), 0);
    d.clearActivity();
}

// "slowest" marks the tower the others wait for over recent steps: one step in which the
// scheduler held the straggler back (it waited 70%, tower 0 none) does not move the mark (it
// did: the mark jumped to tower 0 for that step); a pattern that lasts does.
void TestUiWidgets::slowestFollowsTheRunNotOneStep() {
    PlacementDiagram d;
    d.setModel(PlacementModel::fromPlan(cpuPlan(4), 1000));
    const auto step = [](int64_t n, int fast) {
        auto m = syntheticStep(4, n);
        m.stepSeconds = 0.0025;
        for (int i = 0; i < 4; ++i) m.towers[size_t(i)].phases.wait = i == fast ? 0 : 0.00175;
        return m;
    };
    int64_t n = 0;
    for (; n < 20; ++n) d.showStep(step(n, 3));
    QCOMPARE(d.slowestTower(), 3);
    QVERIFY(d.waitShare(3) < 0.01 && d.waitShare(0) > 0.69);
    d.showStep(step(n++, 0));
    QCOMPARE(d.slowestTower(), 3);
    for (int k = 0; k < 30; ++k) d.showStep(step(n++, 0));
    QCOMPARE(d.slowestTower(), 0);
    d.clearActivity();
    QCOMPARE(d.slowestTower(), -1);
    QCOMPARE(d.waitShare(0), 0.0);
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
        expectTowersDrawn(d, image, 0);
        for (const QImage& other : images) QVERIFY(image != other);
        images << image;
        const QString path = QDir(QCoreApplication::applicationDirPath()).filePath(QLatin1String(pic.file));
        QVERIFY2(image.save(path), qPrintable(path));
    }
}

// Variables dealt round-robin over the shards, as AsyncParameterServer deals them: variable v to
// shard v mod S. Checked against a real model's variables too: every byte in exactly one shard.
void TestUiWidgets::shardsSizedRoundRobin() {
    auto plan = cpuPlan(2);
    plan.update = tb::UpdateMode::Async;
    plan.psShards = 2;
    const auto m = PlacementModel::fromPlan(plan, QVector<int64_t>{10, 20, 30, 40, 50});
    QCOMPARE(m.paramCount, int64_t(150));
    QCOMPARE(m.shardVariables(0), 3);  // variables 0, 2, 4
    QCOMPARE(m.shardVariables(1), 2);  // variables 1, 3
    QCOMPARE(m.shardBytes(0), int64_t(4 * (10 + 30 + 50)));
    QCOMPARE(m.shardBytes(1), int64_t(4 * (20 + 40)));
    QCOMPARE(m.shardVariables(2), 0);

    auto be = tb::makeCpuBackend(1);
    tb::Network net(tb::findModel("mnist_cnn"), *be, 1);
    QVector<int64_t> sizes;
    for (const auto& info : net.paramInfos()) sizes << info.shape.numel();
    plan.psShards = 3;
    const auto real = PlacementModel::fromPlan(plan, sizes);
    QCOMPARE(real.paramCount, net.paramCount());
    int variables = 0;
    int64_t bytes = 0;
    for (int j = 0; j < 3; ++j) {
        variables += real.shardVariables(j);
        bytes += real.shardBytes(j);
    }
    QCOMPARE(variables, int(net.paramInfos().size()));
    QCOMPARE(bytes, net.paramCount() * 4);
}

// Four towers and two shards: one bus, a pair of arrows per tower (8, not 16), and each shard
// labelled with what it holds. Saved beside the test binary to look at.
void TestUiWidgets::shardPictureBundlesArrows() {
    auto plan = cpuPlan(4);
    plan.update = tb::UpdateMode::Async;
    plan.psShards = 2;
    auto be = tb::makeCpuBackend(1);
    tb::Network net(tb::findModel("mnist_cnn"), *be, 1);
    QVector<int64_t> sizes;
    for (const auto& info : net.paramInfos()) sizes << info.shape.numel();
    const auto m = PlacementModel::fromPlan(plan, sizes);
    QCOMPARE(m.arrowCount(), 8);
    PlacementDiagram d;
    d.resize(640, 360);
    d.setModel(m);
    const QImage still = grabImage(d);
    auto step = syntheticStep(4, 9);
    step.pusher = 2;
    step.staleness = 3;
    step.bytesMoved = 2 * net.paramCount() * 4;
    d.showStep(step);
    const QImage live = grabImage(d);
    QVERIFY(live != still);
    const QString path = QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("diagram-shards.png"));
    QVERIFY2(live.save(path), qPrintable(path));
    d.clearActivity();
}

// The caption's bytes per step are docs/user-guide.md's bytes table, for mnist_cnn (P = 3,274,634).
void TestUiWidgets::bytesPerStepAsReadme_data() {
    QTest::addColumn<QString>("towers");
    QTest::addColumn<QString>("variables");
    QTest::addColumn<bool>("async");
    QTest::addColumn<int>("averageEvery");
    QTest::addColumn<qint64>("bytes");
    QTest::addColumn<QString>("label");
    const qint64 p4 = qint64(3'274'634) * 4;
    QTest::newRow("holder mean, 2 CPU towers") << "cpu:0,cpu:1" << "cpu" << false << 0 << 4 * p4
                                               << QStringLiteral("52.4 MB per step (2 \u00d7 M \u00d7 P \u00d7 4, M = 2)");
    QTest::newRow("holder on cpu:1") << "cpu:0,cpu:1" << "cpu:1" << false << 0 << 2 * p4
                                     << QStringLiteral("26.2 MB per step (2 \u00d7 M \u00d7 P \u00d7 4, M = 1)");
    QTest::newRow("all-reduce") << "cpu:0,cpu:1" << "replicated" << false << 0 << 2 * p4
                                << QStringLiteral("26.2 MB per step (2 \u00d7 (D\u22121) \u00d7 P \u00d7 4, D = 2)");
    QTest::newRow("averaging every 5") << "cpu:0,cpu:1" << "replicated" << false << 5 << 2 * p4
                                       << QStringLiteral("26.2 MB every 5 steps (2 \u00d7 (D\u22121) \u00d7 P \u00d7 4, D = 2)");
    QTest::newRow("async") << "cpu:0,cpu:1" << "cpu" << true << 0 << 2 * p4
                           << QStringLiteral("26.2 MB per update off the holder (2 \u00d7 P \u00d7 4)");
    // bf16 gradients: 2 bytes an element where gradients move, the variables still 4.
    QTest::newRow("holder mean, bf16 gradients") << "cpu:0,cpu:1/bf16" << "cpu" << false << 0 << 3 * p4
                                                 << QStringLiteral("39.3 MB per step (M \u00d7 P \u00d7 (4 + 2), M = 2)");
    QTest::newRow("all-reduce, bf16 gradients") << "cpu:0,cpu:1/bf16" << "replicated" << false << 0 << p4
                                                << QStringLiteral("13.1 MB per step (2 \u00d7 (D\u22121) \u00d7 P \u00d7 2, D = 2)");
    QTest::newRow("async, bf16 gradients") << "cpu:0,cpu:1/bf16" << "cpu" << true << 0 << p4 / 2 * 3
                                           << QStringLiteral("19.6 MB per update off the holder (P \u00d7 (4 + 2))");
    // GPU towers alike (rounded on the GPU, bf16 over the link); towers sharing the holder's GPU
    // send nothing, in either format.
    QTest::newRow("GPUs, host variables, bf16 gradients") << "gpu:0,gpu:1/bf16" << "cpu" << false << 0 << 3 * p4
                                                          << QStringLiteral("39.3 MB per step (M \u00d7 P \u00d7 (4 + 2), M = 2)");
    QTest::newRow("GPU replicas, bf16 gradients") << "gpu:0,gpu:1/bf16" << "replicated" << false << 0 << p4
                                                  << QStringLiteral("13.1 MB per step (2 \u00d7 (D\u22121) \u00d7 P \u00d7 2, D = 2)");
    QTest::newRow("towers sharing the holder's GPU, bf16") << "gpu:0,gpu:0/bf16" << "gpu:0" << false << 0 << qint64(0)
                                                           << QStringLiteral("nothing moves: every tower reads the variables in place");
}

void TestUiWidgets::bytesPerStepAsReadme() {
    QFETCH(QString, towers);
    QFETCH(QString, variables);
    QFETCH(bool, async);
    QFETCH(int, averageEvery);
    QFETCH(qint64, bytes);
    QFETCH(QString, label);
    const bool bf16 = towers.endsWith("/bf16");  // "<towers>/bf16": --comm-precision bf16
    auto plan = planOf(towers.section('/', 0, 0).toStdString(), variables.toStdString());
    if (async) plan.update = tb::UpdateMode::Async;
    plan.averageEvery = averageEvery;
    if (bf16) plan.commPrecision = tb::CommPrecision::Bf16;
    const auto m = PlacementModel::fromPlan(plan, 3'274'634);
    QCOMPARE(m.bytesPerStep(), bytes);
    QCOMPARE(m.bytesLabel(), label);
}

// Qt shows a plain-text tooltip as one line as wide as its text (1,552 px for the diagram's);
// rich text it wraps. Laid out as QToolTip lays it out: a label that word-wraps rich text.
void TestUiWidgets::diagramTooltipWraps() {
    PlacementDiagram d;
    const QString tip = d.toolTip();
    QVERIFY(Qt::mightBeRichText(tip));
    QLabel shown;
    shown.setWordWrap(Qt::mightBeRichText(tip));
    shown.setText(tip);
    QVERIFY2(shown.sizeHint().width() < 700, qPrintable(QString::number(shown.sizeHint().width())));
    QVERIFY(shown.sizeHint().height() > 2 * shown.fontMetrics().height());  // wrapped onto lines
}

void TestUiWidgets::devicesPanelBars() {
    DevicesPanel panel{DeviceCatalog{}};
    panel.reset({QStringLiteral("cpu:0"), QStringLiteral("cpu:1")});
    QCOMPARE(panel.findChildren<QProgressBar*>().size(), 2);
    QCOMPARE(panel.busyPercent(0), 0);
    QCOMPARE(panel.busyPercent(2), -1);

    // Forty steps of 0.1 s: in the first twenty tower 0 is busy 0.09 s of each, then 0.03 s. The
    // bar shows the run (60%), the text beside it the last 2 s (30%); the last step alone
    // (which the bars showed before) would read 30% too, so the run is what tells them apart.
    for (int s = 1; s <= 40; ++s) {
        auto step = syntheticStep(2, s);
        step.stepSeconds = 0.1;
        step.towers[0].phases = {};
        step.towers[0].phases.forward = s <= 20 ? 0.09 : 0.03;
        step.towers[0].phases.wait = 0.1 - step.towers[0].phases.forward;
        step.towers[0].busyFraction = step.towers[0].phases.forward / 0.1;
        panel.addStep(step);
    }
    QCOMPARE(panel.busyPercent(0), 60);
    QCOMPARE(panel.recentBusyPercent(0), 30);
    QVERIFY(panel.findChildren<QProgressBar*>()[0]->text().contains(QStringLiteral("30%")));
    QCOMPARE(panel.timeline()->stepsShown(), TimelineView::kMaxSteps);

    // A new run replaces the bars rather than adding to them, and empties the timeline.
    panel.reset({QStringLiteral("cpu:0"), QStringLiteral("cpu:1"), QStringLiteral("cpu:2")});
    QCOMPARE(panel.findChildren<QProgressBar*>().size(), 3);
    QCOMPARE(panel.busyPercent(0), 0);
    QCOMPARE(panel.timeline()->stepsShown(), 0);
}

// An asynchronous report measures only its pusher, over that tower's own cycle: each tower's run
// figure is its busy time over its own time, whatever the others do.
void TestUiWidgets::devicesPanelAsyncBusyPerTower() {
    DevicesPanel panel{DeviceCatalog{}};
    panel.reset({QStringLiteral("cpu:0"), QStringLiteral("cpu:1")});
    std::vector<tb::StepMetrics> pushes;
    for (int k = 1; k <= 20; ++k) {
        for (int tower = 0; tower < 2; ++tower) {
            auto push = syntheticStep(2, int64_t(pushes.size()) + 1);
            push.pusher = tower;
            push.staleness = 0;
            push.stepSeconds = tower == 0 ? 0.1 : 0.2;  // its cycle since its previous push
            for (auto& t : push.towers) t.phases = {};
            push.towers[size_t(tower)].phases.forward = tower == 0 ? 0.05 : 0.18;
            push.towers[size_t(tower)].phases.dataWait = push.stepSeconds - push.towers[size_t(tower)].phases.forward;
            push.towers[size_t(tower)].busyFraction = k == 20 ? 1.0 : 0.5;  // never read: phases are
            pushes.push_back(push);
        }
    }
    panel.addSteps(pushes);
    QCOMPARE(panel.busyPercent(0), 50);
    QCOMPARE(panel.busyPercent(1), 90);
    QCOMPARE(panel.recentBusyPercent(1), 90);
    QVERIFY(panel.timeline()->wallClock());
    QCOMPARE(panel.timeline()->stepsShown(), 40);  // every push, not the last twelve
}

// Asynchronous pushes on the run's clock: tower 0 pushes every 100 ms, tower 1 (a straggler)
// takes 190 ms. Their bars overlap in time as the towers did, and the straggler's is 1.9 times
// as long; a column per push would have put them side by side, each as wide as its report.
void TestUiWidgets::timelineAsyncWallClock() {
    TimelineView view;
    view.resize(600, 160);
    view.reset(2);
    int64_t update = 0;
    const auto push = [&](int tower, double end, double compute) {
        tb::StepMetrics m = syntheticStep(2, ++update);
        for (auto& t : m.towers) t.phases = {};
        m.pusher = tower;
        m.staleness = tower;
        m.elapsedSeconds = end;
        m.stepSeconds = compute;
        tb::TowerPhases& p = m.towers[size_t(tower)].phases;
        p.reduce = 0.001;  // the pull
        p.forward = (compute - 0.002) / 3;
        p.backward = 2 * (compute - 0.002) / 3;
        p.apply = 0.001;   // the push
        view.addStep(m);
    };
    push(0, 0.10, 0.1);
    push(0, 0.20, 0.1);
    push(1, 0.19, 0.19);
    push(0, 0.30, 0.1);
    push(1, 0.38, 0.19);
    QVERIFY(view.wallClock());
    const QVector<TimelineView::Bar> bars = view.bars();
    const auto find = [&](int tower, double end) {
        for (const auto& b : bars)
            if (b.tower == tower && std::abs(b.end - end) < 1e-9) return b;
        return TimelineView::Bar{};
    };
    const TimelineView::Bar fast = find(0, 0.30), slow = find(1, 0.38);
    QVERIFY(fast.rect.width() > 0 && slow.rect.width() > 0);
    QVERIFY2(fast.rect.left() < slow.rect.right() && slow.rect.left() < fast.rect.right(),
             "pushes that overlapped in time must overlap on the timeline");
    QVERIFY2(std::abs(slow.rect.width() / fast.rect.width() - 1.9) < 0.05,
             qPrintable(QString::number(slow.rect.width() / fast.rect.width())));
    QVERIFY(std::abs(slow.start - 0.19) < 1e-9);  // derived: its time less its phases
    QVERIFY(slow.rect.top() > fast.rect.bottom());  // its own lane
    // The window holds each lane's last two pushes whole: the straggler's first push too.
    const TimelineView::Bar first = find(1, 0.19);
    QVERIFY(first.rect.width() > 0);
    QVERIFY(std::abs(first.rect.width() / fast.rect.width() - 1.9) < 0.05);
    // The picture: the pushes held whole drawn where bars() says, in their phases' colours: along
    // each one's middle row, most pixels are its forward or backward pass (the clock's dotted ticks
    // cross some).
    const QImage image = grabImage(view);
    for (const TimelineView::Bar& b : {fast, slow, first}) {
        int compute = 0, all = 0;
        for (int x = int(b.rect.left()) + 1; x < int(b.rect.right()); ++x, ++all) {
            const QColor c = image.pixelColor(x, int(b.rect.center().y()));
            compute += c == tb::ui::phaseColor(tb::ui::Phase::Forward) || c == tb::ui::phaseColor(tb::ui::Phase::Backward);
        }
        QVERIFY2(all > 10 && compute > all * 8 / 10,
                 qPrintable(QString("tower %1's bar at %2 s: %3 of %4 pixels in compute colours").arg(b.tower).arg(b.end).arg(compute).arg(all)));
    }
}

// A pipeline of 2 stages and 4 micro-batches (gpipe): each stage's lane holds its blocks where
// they ran in the step (stage 2 starts after stage 1's first forward, stage 1's backwards after
// stage 2's), numbered by micro-batch, the rest of the lane hatched as the bubble; lanes and
// tooltips say "stage", and the tooltip the step's bubble against theory.
void TestUiWidgets::timelineDrawsPipelineBlocks() {
    TimelineView view;
    view.resize(700, 160);
    view.reset(2);
    tb::StepMetrics m = syntheticStep(2, 7);
    m.stepSeconds = 0.100;
    m.bubbleFraction = 0.25;
    // 10 ms per block; stage 0: F0..F3 at 0-40 ms, B0..B3 at 50-90 ms; stage 1: F at 10-50, B at 40-80.
    m.stageBlocks.resize(2);
    for (int k = 0; k < 4; ++k) {
        m.stageBlocks[0].push_back({k, true, 0.010 * k, 0.010 * (k + 1)});
        m.stageBlocks[1].push_back({k, true, 0.010 * (k + 1), 0.010 * (k + 2)});
    }
    for (int k = 0; k < 4; ++k) {
        m.stageBlocks[1].push_back({k, false, 0.040 + 0.010 * k, 0.050 + 0.010 * k});
        m.stageBlocks[0].push_back({k, false, 0.050 + 0.010 * k, 0.060 + 0.010 * k});
    }
    for (auto& t : m.towers) t.phases = {0, 0.04, 0.04, 0, 0.015, 0, 0.005, 0};
    view.addStep(m);
    QVERIFY(view.pipeline());
    const QVector<TimelineView::Block> blocks = view.blocks();
    QCOMPARE(blocks.size(), 16);
    const QRectF plot = view.plotArea();
    const double perSecond = plot.width() / 0.100;  // one step fills the plot
    for (const TimelineView::Block& b : blocks) {
        const tb::PipelineBlock& k = *std::find_if(m.stageBlocks[size_t(b.stage)].begin(), m.stageBlocks[size_t(b.stage)].end(),
                                                   [&](const tb::PipelineBlock& x) { return x.micro == b.micro && x.forward == b.forward; });
        QVERIFY2(std::abs(b.rect.left() - (plot.left() + k.start * perSecond)) < 1.0 &&
                     std::abs(b.rect.width() - (k.end - k.start) * perSecond) < 1.0,
                 qPrintable(QString("stage %1 micro %2 %3 at %4 px, %5 wide").arg(b.stage).arg(b.micro).arg(b.forward ? "F" : "B")
                                .arg(b.rect.left()).arg(b.rect.width())));
    }
    const auto at = [&](int stage, int micro, bool forward) {
        return std::find_if(blocks.begin(), blocks.end(), [&](const TimelineView::Block& b) {
            return b.stage == stage && b.micro == micro && b.forward == forward;
        })->rect;
    };
    QVERIFY(at(1, 0, true).left() >= at(0, 0, true).right() - 0.5);   // after the stage before's forward
    QVERIFY(at(0, 0, false).left() >= at(1, 0, false).right() - 0.5); // after the stage after's backward
    QVERIFY(at(1, 0, true).top() > at(0, 0, true).bottom());          // its own lane
    // The legend names the bubble; the picture has hatched idle pixels between stage 2's blocks
    // (before its first forward) and compute colours inside them.
    const QImage image = grabImage(view);
    const QRectF idle(plot.left() + 1, at(1, 0, true).top(), at(1, 0, true).left() - plot.left() - 2, at(1, 0, true).height());
    int notCompute = 0, all = 0;
    for (int x = int(idle.left()); x < int(idle.right()); ++x, ++all) {
        const QColor c = image.pixelColor(x, int(idle.center().y()));
        notCompute += c != tb::ui::phaseColor(tb::ui::Phase::Forward) && c != tb::ui::phaseColor(tb::ui::Phase::Backward);
    }
    QVERIFY2(all > 5 && notCompute == all, qPrintable(QString("%1 of %2 idle pixels drawn as compute").arg(all - notCompute).arg(all)));
    const QRectF busy = at(1, 2, true);
    const QColor mid = image.pixelColor(int(busy.left()) + 2, int(busy.top()) + 2);
    QVERIFY2(mid == tb::ui::phaseColor(tb::ui::Phase::Forward) || mid == tb::ui::phaseColor(tb::ui::Phase::Forward).lighter(118),
             qPrintable(mid.name()));
    const QString tip = view.toolTipAt(QPointF(at(1, 1, true).center()));
    QVERIFY2(tip.contains("stage 2") && tip.contains("bubble") && tip.contains("25.0%") && tip.contains("20.0%"), qPrintable(tip));
}

// Model parallelism in the placement diagram: a box per stage (and per replica, a row each) with
// its device and layers, arrows both ways between neighbours labelled with the bytes a step sends
// across (mlp's boundary after relu2: 512 floats an example x 64 examples = 131,072 bytes), and
// the caption saying that CPU stages move none of it between memories.
void TestUiWidgets::diagramDrawsStages() {
    tb::RunConfig c;
    c.model = "mlp";
    c.batch = 64;
    c.stages = "cpu:0=0..relu2,cpu:1=hidden2..logits";
    c.pipeline = "1f1b";
    c.microBatches = 4;
    const tb::ModelSpec spec = tb::findModel("mlp");
    PlacementModel m = PlacementModel::fromStages(c, spec);
    QCOMPARE(m.stages.size(), 2);
    QCOMPARE(m.stages[0].layers, QString("flatten0..relu2"));
    QCOMPARE(m.stages[1].device, QString("cpu:1"));
    QCOMPARE(m.boundaryBytes, QVector<int64_t>{131072});
    PlacementDiagram d;
    d.resize(520, 300);
    d.setModel(m);
    const QImage image = grabImage(d);
    QVERIFY(!image.isNull());
    QVERIFY2(d.cutTexts().isEmpty(), qPrintable(d.cutTexts().join(" | ")));
    QVERIFY(d.caption().contains("share memory"));
    // Hybrid: 2 replicas, each a row; replica 2's stages on cpu:2 and cpu:3, the boundary's bytes
    // those of its half of the batch.
    c.stageReplicas = 2;
    m = PlacementModel::fromStages(c, spec);
    QCOMPARE(m.stages.size(), 4);
    QCOMPARE(m.stages[2].device, QString("cpu:2"));
    QCOMPARE(m.stages[3].replica, 1);
    QCOMPARE(m.boundaryBytes, QVector<int64_t>{65536});
    d.setModel(m);
    grabImage(d);
    QVERIFY2(d.cutTexts().isEmpty(), qPrintable(d.cutTexts().join(" | ")));
    // --sync-bn: the model knows (the line between a stage's replicas says what they sum).
    c.syncBn = true;
    QVERIFY(PlacementModel::fromStages(c, spec).syncBatchNorm);
    c.syncBn = false;
    // A stage per process: the boundaries' bytes cross as MPI messages (2 x 131,072 a step, the
    // replicas' halves together), and each stage's replicas sum its gradient through replica 0's
    // process, 2 (R - 1) n x 4 bytes a stage: mlp's P = 669,706 floats over both stages, 5.4 MB
    // (tests/mpi checks the chief's share of it against the bytes it sent).
    c.stagePerProcess = true;
    d.setModel(PlacementModel::fromStages(c, spec));
    QVERIFY2(d.caption() == "MPI messages between the stages' processes: 262.1 kB cross between the stages' memories a "
                            "step; the replicas' processes sum each stage's gradient: 5.4 MB a step "
                            "(2 \u00d7 (R\u22121) \u00d7 P \u00d7 4, R = 2)",
             qPrintable(d.caption()));
    grabImage(d);
    QVERIFY2(d.cutTexts().isEmpty(), qPrintable(d.cutTexts().join(" | ")));
    c.stagePerProcess = false;
    // A balanced split is chosen when the run starts: the boxes say so, no bytes are claimed.
    c.stages = "2";
    m = PlacementModel::fromStages(c, spec);
    QCOMPARE(m.stages[0].layers, QString("split at start"));
    QCOMPARE(m.boundaryBytes, QVector<int64_t>{0});
    // GPU stages: sharing one GPU, nothing crosses; on two GPUs, NCCL carries both ways (2 x
    // 131,072 bytes); three stages over gpu:0*2 and gpu:1, only the boundary between the GPUs.
    c.stageReplicas = 1;
    c.stages = "gpu:0*2=0..relu2,gpu:0*2=hidden2..logits";
    d.setModel(PlacementModel::fromStages(c, spec));
    QVERIFY2(d.caption().startsWith("stages on one GPU share its memory: 0 B"), qPrintable(d.caption()));
    c.stages = "gpu:0=0..relu2,gpu:1=hidden2..logits";
    d.setModel(PlacementModel::fromStages(c, spec));
    QVERIFY2(d.caption() == "NCCL send/recv between the GPUs: 262.1 kB cross between the stages' memories a step",
             qPrintable(d.caption()));
    c.stages = "gpu:0*2=0..relu2,gpu:0*2=hidden2..relu4,gpu:1=logits";
    d.setModel(PlacementModel::fromStages(c, spec));
    QVERIFY2(d.caption().startsWith("NCCL send/recv between the GPUs: ") && d.caption().endsWith("; 0 B where stages share a GPU"),
             qPrintable(d.caption()));
}

// Averaging every 5: the steps after which the replicas were averaged carry a mark in the
// timeline, drawn in the reduce colour at the step's end.
void TestUiWidgets::timelineAveragingMarks() {
    TimelineView view;
    view.resize(600, 180);
    view.reset(2);
    for (int s = 1; s <= 12; ++s) {
        auto step = syntheticStep(2, s);
        step.averaged = s % 5 == 0;
        view.addStep(step);
    }
    QCOMPARE(view.averagingMarks(), (QVector<int64_t>{5, 10}));
    const QImage image = grabImage(view);
    const qreal dpr = view.devicePixelRatio();
    const QColor mark = tb::ui::phaseColor(tb::ui::Phase::Reduce);
    for (const auto& b : view.bars()) {
        if (b.tower != 1) continue;
        // Between tower 1's bar and its lane's end nothing is drawn but the step boundary.
        const QPoint at(int(std::round((b.cell.right() - 0.5) * dpr)), int((b.cell.top() + 2) * dpr));
        const QColor seen = image.pixelColor(at);
        const bool isMark = std::abs(seen.red() - mark.red()) < 40 && std::abs(seen.green() - mark.green()) < 40 &&
                            std::abs(seen.blue() - mark.blue()) < 40;
        QVERIFY2(isMark == (b.step % 5 == 0), qPrintable(QStringLiteral("step %1: %2").arg(b.step).arg(seen.name())));
    }
}

// Hovering a bar shows that tower's phases for that step in milliseconds.
void TestUiWidgets::timelineHoverShowsPhases() {
    TimelineView view;
    view.resize(600, 160);
    view.reset(2);
    for (int s = 1; s <= 3; ++s) view.addStep(syntheticStep(2, s));
    const QVector<TimelineView::Bar> bars = view.bars();
    const auto bar = std::find_if(bars.begin(), bars.end(), [](const auto& b) { return b.tower == 1 && b.step == 2; });
    QVERIFY(bar != bars.end());
    const QString tip = view.toolTipAt(bar->rect.center());
    QVERIFY2(tip.contains(QStringLiteral("tower 1")) && tip.contains(QStringLiteral("step 2")), qPrintable(tip));
    const tb::TowerPhases p = syntheticStep(2, 2).towers[1].phases;
    for (const auto& [name, sec] : {std::pair{"forward", p.forward}, {"backward", p.backward}, {"wait", p.wait},
                                    {"reduce", p.reduce}, {"apply", p.apply}, {"data", p.dataWait}}) {
        QVERIFY2(tip.contains(QLatin1String(name)), name);
        QVERIFY2(tip.contains(tb::ui::formatMs(sec)), qPrintable(tb::ui::formatMs(sec) + QStringLiteral(" in ") + tip));
    }
    QVERIFY(Qt::mightBeRichText(tip));
    QVERIFY(view.toolTipAt(QPointF(1, 1)).isEmpty());  // the legend row
}

// Pictures to look at, saved beside the test binary: the timeline of a run averaging every 5
// steps, and of an asynchronous run with a straggler, in a devices panel.
void TestUiWidgets::timelinePicturesRender() {
    const auto save = [](QWidget& w, const char* file) {
        const QImage image = grabImage(w);
        QVERIFY(!image.isNull());
        const QString path = QDir(QCoreApplication::applicationDirPath()).filePath(QLatin1String(file));
        QVERIFY2(image.save(path), qPrintable(path));
    };
    DevicesPanel sync{DeviceCatalog{}};
    sync.resize(380, 420);
    const QStringList four{QStringLiteral("cpu:0"), QStringLiteral("cpu:1"), QStringLiteral("cpu:2"),
                           QStringLiteral("cpu:3")};
    sync.reset(four);
    for (int s = 1; s <= 30; ++s) {
        auto step = syntheticStep(4, s);
        step.averaged = s % 5 == 0;
        if (!step.averaged)
            for (auto& t : step.towers) t.phases.reduce = t.phases.wait = 0;
        sync.addStep(step);
    }
    save(sync, "timeline-averaging.png");

    DevicesPanel async{DeviceCatalog{}};
    async.resize(380, 420);
    async.reset(four);
    // Towers 0-2 push every 13 ms, tower 3 every 190 ms, from the same start.
    std::vector<tb::StepMetrics> pushes;
    std::vector<double> next{0.013, 0.0135, 0.014, 0.19};
    int64_t update = 0;
    while (pushes.size() < 200) {
        const int tower = int(std::min_element(next.begin(), next.end()) - next.begin());
        tb::StepMetrics m = syntheticStep(4, ++update);
        for (auto& t : m.towers) t.phases = {};
        const double cycle = tower == 3 ? 0.19 : 0.013;
        m.pusher = tower;
        m.staleness = tower == 3 ? 40 : 2;
        m.elapsedSeconds = next[size_t(tower)];
        m.stepSeconds = cycle;
        tb::TowerPhases& p = m.towers[size_t(tower)].phases;
        p.dataWait = 0.0005;
        p.reduce = 0.001;
        p.forward = 0.0035;
        p.backward = 0.007;
        p.straggle = tower == 3 ? 0.19 - 0.013 : 0;
        p.apply = 0.001;
        pushes.push_back(m);
        next[size_t(tower)] += cycle;
    }
    async.addSteps(pushes);
    save(async, "timeline-async.png");
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
    QVERIFY(!view.wallClock());
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

// Settings that cannot run leave no stale plan on screen: the reason instead, until a valid one.
void TestUiWidgets::diagramShowsInvalidSettings() {
    PlacementDiagram d;
    d.resize(520, 300);
    d.setModel(PlacementModel::fromPlan(cpuPlan(2), 1000));
    const QImage plan = grabImage(d);
    d.setInvalid(QStringLiteral("Variables replicated needs Reduce allreduce"));
    QCOMPARE(d.invalidReason(), QStringLiteral("Variables replicated needs Reduce allreduce"));
    const QImage invalid = grabImage(d);
    QVERIFY(invalid != plan);
    d.setModel(PlacementModel::fromPlan(cpuPlan(2), 1000));
    QVERIFY(d.invalidReason().isEmpty());
    QCOMPARE(grabImage(d), plan);
}

namespace {
// A 3 x 2 grid over x, y in [0, 1], class 1 right of x = 0.5, and points on either side.
tb::DecisionGrid halfPlane() {
    tb::DecisionGrid g;
    g.step = g.version = 12;
    g.cols = 3;
    g.rows = 2;
    g.xMin = g.yMin = 0;
    g.xMax = g.yMax = 1;
    g.classes = 2;
    g.predicted = {0, 0, 1, 0, 0, 1};
    g.confidence = {0.9f, 0.6f, 0.99f, 0.9f, 0.5f, 0.99f};
    g.points = {0.1f, 0.1f, 0.9f, 0.8f, 0.2f, 0.9f, 0.95f, 0.05f};
    g.labels = {0, 1, 1, 1};  // the third is on the wrong side
    return g;
}
}  // namespace

// Six 2x2 grey examples of three classes: 0, 2 and 4 right; 1, 3 and 5 wrong.
tb::EvalResult smallEvaluation() {
    auto p = std::make_shared<tb::Predictions>();
    p->channels = 1;
    p->height = p->width = 2;
    p->images = std::make_shared<const std::vector<uint8_t>>(24, uint8_t(200));
    p->classNames = {"ant", "bee", "cat"};
    p->labels = {0, 1, 2, 0, 1, 2};
    p->predicted = {0, 2, 2, 1, 1, 0};
    p->confidence = {0.9f, 0.8f, 0.6f, 0.95f, 0.5f, 0.7f};
    tb::EvalResult r;
    r.step = 7;
    r.split = "test";
    r.examples = 6;
    r.classes = 3;
    r.confusion.assign(9, 0);
    for (size_t i = 0; i < 6; ++i) ++r.confusion[size_t(p->labels[i]) * 3 + size_t(p->predicted[i])];
    r.predictions = p;
    return r;
}

// Before any evaluation the grid's sentence is wrapped whole in it, at any width of the dock
// (it was one 40 px row: at 1,366 px its last line, "appear here.", was cut in half).
void TestUiWidgets::emptyGridSaysItsSentenceWhole() {
    for (int width : {220, 300, 420}) {
        PredictionsPanel panel;
        panel.resize(width, 700);
        panel.show();
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        const PredictionGrid* g = panel.grid();
        const QRect text = g->fontMetrics().boundingRect(QRect(8, 8, g->width() - 16, 10000),
                                                         Qt::AlignTop | Qt::AlignHCenter | Qt::TextWordWrap, g->placeholder());
        QVERIFY2(g->height() >= text.bottom() + 8,
                 qPrintable(QStringLiteral("%1 px wide: %2 px high, its sentence needs %3").arg(g->width()).arg(g->height()).arg(text.bottom() + 8)));
    }
}

// A tile is as wide as its widest caption: "T-shirt/top 100%" whole (it was elided to
// "T-shi…p 99%" in the 84 px tiles of 28 x 28 images).
void TestUiWidgets::tilesFitTheirCaptions() {
    tb::EvalResult r = smallEvaluation();
    auto p = std::make_shared<tb::Predictions>(*r.predictions);
    p->classNames = {"T-shirt/top", "Ankle boot", "Pullover"};
    r.predictions = p;
    PredictionsPanel panel;
    panel.resize(420, 700);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    panel.showEval(r);
    const PredictionGrid* g = panel.grid();
    const int widest = g->fontMetrics().horizontalAdvance(QStringLiteral("T-shirt/top 100%"));
    QVERIFY2(g->tileSize().width() - 2 * 4 >= widest,
             qPrintable(QStringLiteral("tile %1 px, caption %2 px").arg(g->tileSize().width()).arg(widest)));
}

// Image files dropped on the Predictions panel are classified with the run's newest checkpoint,
// as `towerbench-run classify` classifies them (the same class and probability in each tile);
// other files in the drop are left out; with no run the panel says so.
void TestUiWidgets::droppedImagesAreClassified() {
    QTemporaryDir tmp;
    const QString run = tmp.filePath("run");
    const tbtest::RunResult r = tbtest::runTowerbench({"--model", "mlp", "--data", "idx:" + tbtest::sourcePath("samples/fashion-mnist-slice"),
                                                       "--steps", "30", "--threads", "2", "--run-dir", run, "--quiet"});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    // Three test images as PNG files, written by convert.
    const QString folder = tmp.filePath("png");
    QCOMPARE(tbtest::runTowerbench({"convert", "idx:" + tbtest::sourcePath("samples/fashion-mnist-slice"), "folder:" + folder}).exitCode, 0);
    QStringList images;
    for (const QString& cls : QDir(folder + "/test").entryList(QDir::Dirs | QDir::NoDotAndDotDot).mid(0, 3))
        images << folder + "/test/" + cls + "/" + QDir(folder + "/test/" + cls).entryList(QDir::Files).first();
    QList<QUrl> urls;
    for (const QString& f : images) urls << QUrl::fromLocalFile(f);
    urls << QUrl::fromLocalFile(tmp.filePath("notes.txt"));
    PredictionsPanel panel;
    panel.resize(420, 700);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    QMimeData mime;
    mime.setUrls(urls);
    auto drop = [&] {
        QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        QCoreApplication::sendEvent(&panel, &enter);
        QVERIFY(enter.isAccepted());
        QDropEvent dropped(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        QSignalSpy done(panel.dropped(), &DroppedImages::classified);
        QCoreApplication::sendEvent(&panel, &dropped);
        QVERIFY(done.count() == 1 || done.wait(60000));
    };
    drop();
    QVERIFY2(panel.dropped()->status().contains("No run"), qPrintable(panel.dropped()->status()));
    panel.dropped()->setRunFolder(run);
    drop();
    QListWidget* list = panel.dropped()->list();
    QCOMPARE(list->count(), 3);
    const tbtest::RunResult cli = tbtest::runTowerbench(QStringList{"classify", run} + images);
    QVERIFY2(cli.exitCode == 0, qPrintable(cli.err));
    const QStringList lines = cli.out.trimmed().split('\n');
    for (int i = 0; i < 3; ++i) {
        const QJsonObject o = QJsonDocument::fromJson(lines[i].toUtf8()).object();
        const QString want = QStringLiteral("%1 %2%").arg(o["class"].toString()).arg(100.0 * o["top"].toArray()[0].toObject()["probability"].toDouble(), 0, 'f', 1);
        QCOMPARE(list->item(i)->text(), want);
        QVERIFY(!list->item(i)->icon().isNull());
    }
    // A damaged image: the status names it, nothing crashes.
    QFile bad(tmp.filePath("bad.png"));
    QVERIFY(bad.open(QIODevice::WriteOnly));
    bad.write("\x89PNG\r\n\x1a\n truncated");
    bad.close();
    mime.setUrls({QUrl::fromLocalFile(tmp.filePath("bad.png"))});
    drop();
    QVERIFY2(panel.dropped()->status().contains("bad.png"), qPrintable(panel.dropped()->status()));
}

// Lab > Augmented samples: 32 training samples of the form's data through the run's own pipeline;
// a bad --augment is said in the view, not thrown.
void TestUiWidgets::augmentedSamplesAreDrawn() {
    AugmentView view;
    view.resize(900, 700);
    view.show();
    tb::RunConfig c;
    c.model = "mnist_cnn";
    c.data = "idx:" + tbtest::sourcePath("samples/fashion-mnist-slice").toStdString();
    c.augment = "crop:4,flip";
    QSignalSpy drawn(&view, &AugmentView::drawnChanged);
    view.setConfig(c);
    QVERIFY(drawn.wait(30000));
    QCOMPARE(view.drawn(), AugmentView::kSamples);
    QVERIFY(!view.grid()->pixmap().isNull());
    QVERIFY2(view.status().contains("crop:4,flip"), qPrintable(view.status()));
    const QImage first = view.grid()->pixmap().toImage();
    view.drawAgain();
    QVERIFY(view.grid()->pixmap().toImage() != first);  // new draws, new crops
    c.augment = "rotate:5";
    view.setConfig(c);
    QCOMPARE(view.drawn(), 0);
    QVERIFY2(view.status().contains("rotate:5"), qPrintable(view.status()));
}

// A panel closed while its background job runs waits for the job and deletes its thread; the
// completion, queued to the panel, never runs. The panels' own QThread* each leaked its thread
// this way (LeakSanitizer in CI: a runs panel closed mid-read).
void TestUiWidgets::closedWhileReadingLeavesNoThread() {
    std::atomic<QThread*> thread{nullptr};
    std::atomic<bool> release{false};
    bool deleted = false, completed = false;
    {
        QObject panel;
        BackgroundTask job(&panel);
        job.start([&] {
            thread = QThread::currentThread();
            while (!release) QThread::msleep(1);
        }, [&] { completed = true; });
        QTRY_VERIFY(thread.load() != nullptr);
        QObject::connect(thread.load(), &QObject::destroyed, [&] { deleted = true; });
        QVERIFY(job.running());
        release = true;
    }
    QVERIFY(deleted);
    QVERIFY(!completed);
    // A real one: the augmented samples view closed while it reads its set (under ASan,
    // LeakSanitizer sees a thread left behind at exit).
    {
        AugmentView view;
        tb::RunConfig c;
        c.model = "mnist_cnn";
        c.data = "idx:" + tbtest::sourcePath("samples/fashion-mnist-slice").toStdString();
        view.setConfig(c);
    }
}

// The grid: mistakes first, most confident first, then the right ones, least sure first; a cell
// of the matrix shows its pair alone, clicked again all; the header counts the matrix's diagonal.
void TestUiWidgets::predictionsShowMistakesFirst() {
    PredictionsPanel panel;
    panel.resize(420, 700);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    QVERIFY(!panel.hasPredictions());
    const tb::EvalResult r = smallEvaluation();
    panel.showEval(r);
    QVERIFY(panel.hasPredictions());
    QCOMPARE(panel.header(), QStringLiteral("test set at step 7: 3 of 6 right (50.0%)"));
    QCOMPARE(panel.grid()->order(), (std::vector<int>{3, 1, 5, 4, 2, 0}));
    QCOMPARE(panel.matrix()->count(1, 2), int64_t(1));
    QCOMPARE(panel.grid()->exampleAt(QPoint(2, 2)), 3);
    // The first tile is a mistake: its frame is red.
    const QImage tiles = panel.grid()->grab().toImage();
    bool red = false;
    for (int y = 0; y < panel.grid()->tileSize().height() && !red; ++y)
        for (int x = 0; x < panel.grid()->tileSize().width() && !red; ++x) {
            const QColor c = tiles.pixelColor(x, y);
            red = c.red() > 150 && c.green() < 80 && c.blue() < 80;
        }
    QVERIFY(red);
    ConfusionView* m = panel.matrix();
    QTest::mouseClick(m, Qt::LeftButton, {}, m->cellRect(1, 2).center());
    QCOMPARE(m->selectedTrue(), 1);
    QCOMPARE(panel.grid()->order(), (std::vector<int>{1}));
    QTest::mouseClick(m, Qt::LeftButton, {}, m->cellRect(0, 0).center());
    QCOMPARE(panel.grid()->order(), (std::vector<int>{0}));
    QTest::mouseClick(m, Qt::LeftButton, {}, m->cellRect(0, 0).center());
    QCOMPARE(m->selectedTrue(), -1);
    QCOMPARE(panel.grid()->order().size(), size_t(6));
    // Malformed predictions are not drawn (a class past the names would be read past its end).
    tb::EvalResult bad = smallEvaluation();
    auto broken = std::make_shared<tb::Predictions>(*bad.predictions);
    broken->predicted[0] = 3;
    bad.predictions = broken;
    panel.showEval(bad);
    QVERIFY(!panel.hasPredictions());
    panel.clear();
    QCOMPARE(panel.matrix()->classes(), 0);
}

void TestUiWidgets::decisionViewDrawsRegions() {
    DecisionView v;
    v.resize(300, 300);
    QVERIFY(!v.hasGrid());
    v.showGrid(halfPlane());
    QVERIFY(v.hasGrid());
    QCOMPARE(v.pointsRight(), 0.75);
    QCOMPARE(v.caption(), QStringLiteral("step 12\n75% of the points in their region"));
    const QImage img = grabImage(v);
    // Left of the plane tinted with class 0's hue, right with class 1's.
    const QColor left = img.pixelColor(40, 200), right = img.pixelColor(260, 200);
    QVERIFY2(left.red() > left.blue() && right.blue() > right.red(),
             qPrintable(left.name() + QLatin1Char(' ') + right.name()));

    auto async = halfPlane();
    async.pusher = 2;
    async.version = 9;
    v.showGrid(async);
    QCOMPARE(v.caption(), QStringLiteral("update 12\ntower 2's copy, version 9\n75% of the points in their region"));

    auto broken = halfPlane();  // sizes that disagree are ignored, not read past their end
    broken.predicted.pop_back();
    v.showGrid(broken);
    QCOMPARE(v.grid().pusher, 2);
    auto noPoints = halfPlane();
    noPoints.labels.pop_back();
    v.showGrid(noPoints);
    QCOMPARE(v.grid().pusher, 2);
    v.clear();
    QVERIFY(!v.hasGrid());
}

// Help covers every concept the window draws, each with a picture that draws something.
void TestUiWidgets::conceptsEachHaveADiagram() {
    ConceptsDialog dialog;
    const QVector<Concept> all = concepts();
    QCOMPARE(dialog.conceptCount(), int(all.size()));
    QStringList titles;
    for (const Concept& c : all) titles << c.title.toLower();
    for (const char* needed : {"tower", "synchronisation point", "holder", "all-reduce", "replicated", "averaging",
                               "shards", "straggler", "staleness", "asynchronous", "busy", "global batch", "phases"}) {
        const bool covered = std::any_of(titles.begin(), titles.end(), [&](const QString& t) { return t.contains(needed); });
        QVERIFY2(covered, needed);
    }
    dialog.resize(820, 560);
    dialog.show();
    QVERIFY(QTest::qWaitForWindowExposed(&dialog));
    const QString dir = QCoreApplication::applicationDirPath();
    for (int i = 0; i < dialog.conceptCount(); ++i) {
        dialog.showConcept(i);
        QWidget* picture = dialog.pictureOf(i);
        QVERIFY(picture && picture->isVisible());
        QVERIFY(!all[i].text.isEmpty());
        const QImage img = picture->grab().toImage();
        QSet<QRgb> colours;
        for (int y = 0; y < img.height(); y += 4)
            for (int x = 0; x < img.width(); x += 4) colours.insert(img.pixel(x, y));
        QVERIFY2(colours.size() > 6, qPrintable(all[i].title));  // more than a blank and a caption
        QVERIFY(dialog.grab().save(QDir(dir).filePath(QStringLiteral("concept-%1.png").arg(i))));
    }
}
