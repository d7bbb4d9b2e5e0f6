// Tests of ui/ChartsPanel: steps and evaluations become points (NaN tower losses skipped),
// reset rebuilds the per-tower loss series, the log-loss switch sets the axis scale, the 10 Hz
// timer replots and scrolls the key axis, a user's zoom turns scrolling off and is kept, a
// million steps leave each series at most 16,384 points (the newest as they came, the extremes
// kept) and are drawn sampled; examples/sec over the run and the last seconds (no
// spike from two pushes landing together), staleness per push and the not-reproducible note
// for asynchronous runs, averaging steps marked on the loss, legends outside the data, numbers
// with thousands separators, whole-number step ticks that do not run together; reports that
// never reached the window counted from the step numbers' gaps and said above the charts.
#include <QtTest>

#include <QCheckBox>
#include <QFileDialog>
#include <QMenu>
#include <QSettings>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <memory>
#include <QSignalSpy>
#include <QVBoxLayout>
#include <QWheelEvent>
#include <cmath>
#include <functional>
#include <limits>
#include <qcustomplot.h>

#include "charts/chart_style.hpp"
#include "charts/charts_panel.hpp"
#include "view_format.hpp"

namespace {

// The suite runs without a display when started by hand; CTest sets the same variable. This
// runs before QTEST_MAIN constructs the QApplication.
[[maybe_unused]] const bool kOffscreen = [] {
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
    return true;
}();

tb::StepMetrics stepAt(int64_t step, int towers, double loss) {
    tb::StepMetrics m;
    m.step = step;
    m.loss = loss;
    m.accuracy = 0.5 + 0.4 * double(step % 100) / 100.0;
    m.lr = 0.1;
    m.examples = 64;
    m.examplesPerSec = 1000 + double(step % 7);
    m.stepSeconds = double(m.examples) / m.examplesPerSec;
    m.towers.resize(size_t(towers));
    for (int i = 0; i < towers; ++i) {
        m.towers[size_t(i)].loss = loss + 0.01 * (i + 1);
        m.towers[size_t(i)].accuracy = m.accuracy;
    }
    return m;
}

QCPGraph* graphNamed(QCustomPlot* p, const QString& name) {
    for (int i = 0; i < p->graphCount(); ++i)
        if (p->graph(i)->name() == name) return p->graph(i);
    return nullptr;
}

// An asynchronous push of `tower` ending at `t` on the run's clock.
tb::StepMetrics pushAt(int64_t update, int towers, int tower, double t, int64_t staleness) {
    tb::StepMetrics m = stepAt(update, towers, 1.0);
    for (int i = 0; i < towers; ++i)
        if (i != tower) m.towers[size_t(i)].loss = std::numeric_limits<double>::quiet_NaN();
    m.pusher = tower;
    m.staleness = staleness;
    m.examples = 64;
    m.elapsedSeconds = t;
    return m;
}

// Tick labels as the chart last drew them.
QStringList tickLabels(QCPAxis* axis) {
    QStringList out;
    for (const QString& l : axis->tickVectorLabels()) out << l;
    return out;
}

// Where two neighbouring x tick labels of `p` run into each other, said; empty where none do.
QString crowdedTicks(const QCustomPlot* p) {
    const QFontMetrics fm(p->xAxis->tickLabelFont());
    const QVector<double> ticks = p->xAxis->tickVector();
    const QVector<QString> labels = p->xAxis->tickVectorLabels();
    if (ticks.size() < 2) return QStringLiteral("%1: %2 tick(s)").arg(p->objectName()).arg(ticks.size());
    for (int i = 1; i < ticks.size(); ++i) {
        const double gap = p->xAxis->coordToPixel(ticks[i]) - p->xAxis->coordToPixel(ticks[i - 1]);
        const double need = (fm.horizontalAdvance(labels[i]) + fm.horizontalAdvance(labels[i - 1])) / 2.0 + 4;
        if (gap < need)
            return QStringLiteral("%1: %2 and %3 are %4 px apart").arg(p->objectName(), labels[i - 1], labels[i]).arg(gap);
    }
    return {};
}

void showPanel(ChartsPanel& panel) {
    panel.resize(1000, 700);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    QTest::qWait(100);  // let the replots that showing and resizing cause pass
}

}  // namespace

class ChartsPanelTest : public QObject {
    Q_OBJECT
private slots:
    void stepsBecomePoints();
    void nanTowerLossIsSkipped();
    void missingReportsAreSaid();
    void resetRebuildsTowerSeries();
    void evaluationsBecomePoints();
    void logLossSetsAxisScale();
    void timerReplotsAndScrolls();
    void userZoomStopsScrolling();
    void millionPointsAreBoundedAndSampled();
    void syncSpeedOverRunAndRecent();
    void asyncSpeedWithoutSpikes();
    void stalenessChartAndNote();
    void averagingStepsMarked();
    void legendsOutsideTheData();
    void legendKeepsUnderscores();
    void learningRateFromZero();
    void thousandsSeparators();
    void wholeStepTicks();
    void ticksDoNotRunTogether();
    void aChartFitsTheSizeItIsShownAt();
    void valueAxesShowThreeTicks_data();
    void valueAxesShowThreeTicks();
    void picturesRender();
    void exportWritesPngPdfCsv();
    void exportDialogStartsWhereItShould();
};

void ChartsPanelTest::stepsBecomePoints() {
    ChartsPanel panel;
    panel.reset(2);
    for (int s = 1; s <= 1000; ++s) panel.addStep(stepAt(s, 2, 2.0 / s));
    QCOMPARE(panel.stepPoints(), 1000);
    QCOMPARE(panel.lossPlot()->graphCount(), 4);  // tower 0, tower 1, mean, averaging marks
    QCPGraph* mean = graphNamed(panel.lossPlot(), QStringLiteral("mean"));
    QVERIFY(mean != nullptr);
    QCOMPARE(mean->data()->size(), 1000);
    for (const char* tower : {"tower 0", "tower 1"}) {
        QCPGraph* g = graphNamed(panel.lossPlot(), QString::fromLatin1(tower));
        QVERIFY2(g != nullptr, tower);
        QCOMPARE(g->data()->size(), 1000);
        QVERIFY(g->adaptiveSampling());
    }
    QVERIFY(mean->adaptiveSampling());
    QVERIFY(mean->pen().widthF() > graphNamed(panel.lossPlot(), "tower 0")->pen().widthF());
}

void ChartsPanelTest::nanTowerLossIsSkipped() {
    ChartsPanel panel;
    panel.reset(2);
    // Async reports carry NaN for towers that did not push: tower 1 pushes every other step.
    for (int s = 1; s <= 10; ++s) {
        tb::StepMetrics m = stepAt(s, 2, 1.0);
        if (s % 2) m.towers[1].loss = std::numeric_limits<double>::quiet_NaN();
        panel.addStep(m);
    }
    QCOMPARE(graphNamed(panel.lossPlot(), "tower 0")->data()->size(), 10);
    QCOMPARE(graphNamed(panel.lossPlot(), "tower 1")->data()->size(), 5);
    QCOMPARE(graphNamed(panel.lossPlot(), "mean")->data()->size(), 10);
    QCOMPARE(panel.stepPoints(), 10);
}

// Reports the window never got (steps 11-14, dropped by the engine for a window that fell
// behind) are counted from the gap and said above the charts; an asynchronous report that comes
// after a later one is no gap once it arrives; a new run starts with none.
void ChartsPanelTest::missingReportsAreSaid() {
    ChartsPanel panel;
    panel.reset(1);
    for (int s = 1; s <= 10; ++s) panel.addStep(stepAt(s, 1, 1.0));
    QCOMPARE(panel.missingSteps(), 0);
    QVERIFY(panel.shortNote()->isHidden());
    for (int s = 15; s <= 20; ++s) panel.addStep(stepAt(s, 1, 1.0));
    QCOMPARE(panel.missingSteps(), 4);
    QVERIFY(!panel.shortNote()->isHidden());
    QVERIFY2(panel.shortNote()->text().contains("4 step reports did not reach the window"),
             qPrintable(panel.shortNote()->text()));
    panel.reset(2);
    QCOMPARE(panel.missingSteps(), 0);
    QVERIFY(panel.shortNote()->isHidden());
    for (int u : {1, 2, 4, 3, 5}) panel.addStep(pushAt(u, 2, u % 2, 0.1 * u, 0));
    QCOMPARE(panel.missingSteps(), 0);
    QVERIFY(panel.shortNote()->isHidden());
}

void ChartsPanelTest::resetRebuildsTowerSeries() {
    ChartsPanel panel;
    panel.reset(2);
    for (int s = 1; s <= 20; ++s) panel.addStep(stepAt(s, 2, 1.0));
    panel.addEval({20, "validation", 1.0, 0.7, 100, false, 0, {}, nullptr});
    auto* accuracy = panel.findChild<QCustomPlot*>(QStringLiteral("accuracyPlot"));
    QVERIFY(accuracy != nullptr);
    QCOMPARE(accuracy->graphCount(), 2);  // train, validation

    panel.reset(4);
    QCOMPARE(panel.stepPoints(), 0);
    QCOMPARE(panel.evalPoints(), 0);
    QCOMPARE(panel.lossPlot()->graphCount(), 6);
    for (int i = 0; i < panel.lossPlot()->graphCount(); ++i)
        QCOMPARE(panel.lossPlot()->graph(i)->data()->size(), 0);
    QVERIFY(graphNamed(panel.lossPlot(), "tower 3") != nullptr);
    QCOMPARE(accuracy->graphCount(), 1);  // the evaluation series goes with the old run
    QCOMPARE(accuracy->graph(0)->data()->size(), 0);
}

void ChartsPanelTest::evaluationsBecomePoints() {
    ChartsPanel panel;
    panel.reset(1);
    panel.addEval({100, "validation", 0.9, 0.6, 1000, false, 0, {}, nullptr});
    panel.addEval({200, "validation", 0.7, 0.7, 1000, false, 0, {}, nullptr});
    panel.addEval({200, "test", 0.75, 0.68, 1000, false, 0, {}, nullptr});
    QCOMPARE(panel.evalPoints(), 3);
    QCOMPARE(panel.stepPoints(), 0);
    auto* accuracy = panel.findChild<QCustomPlot*>(QStringLiteral("accuracyPlot"));
    QVERIFY(accuracy != nullptr);
    QCPGraph* validation = graphNamed(accuracy, "validation");
    QCPGraph* test = graphNamed(accuracy, "test");
    QVERIFY(validation != nullptr && test != nullptr);
    QCOMPARE(validation->data()->size(), 2);
    QCOMPARE(test->data()->size(), 1);
    QVERIFY(validation->scatterStyle().shape() != QCPScatterStyle::ssNone);
}

void ChartsPanelTest::logLossSetsAxisScale() {
    ChartsPanel panel;
    panel.reset(1);
    auto* box = panel.findChild<QCheckBox*>(QStringLiteral("logLoss"));
    QVERIFY(box != nullptr);
    QVERIFY(!box->isChecked());
    QVERIFY(!box->toolTip().isEmpty());
    QCPAxis* axis = panel.lossPlot()->yAxis;
    QCOMPARE(axis->scaleType(), QCPAxis::stLinear);

    panel.setLogLoss(true);
    QCOMPARE(axis->scaleType(), QCPAxis::stLogarithmic);
    QVERIFY(dynamic_cast<QCPAxisTickerLog*>(axis->ticker().data()) != nullptr);
    QVERIFY(box->isChecked());
    QVERIFY(axis->range().lower > 0);

    box->click();  // the box drives the same slot
    QCOMPARE(axis->scaleType(), QCPAxis::stLinear);
    QVERIFY(dynamic_cast<QCPAxisTickerLog*>(axis->ticker().data()) == nullptr);
    box->click();
    QCOMPARE(axis->scaleType(), QCPAxis::stLogarithmic);
}

void ChartsPanelTest::timerReplotsAndScrolls() {
    ChartsPanel panel;
    panel.reset(2);
    auto* scrolling = panel.findChild<QCheckBox*>(QStringLiteral("scrolling"));
    QVERIFY(scrolling != nullptr);
    QVERIFY(scrolling->isChecked());  // the default
    QVERIFY(!scrolling->toolTip().isEmpty());
    showPanel(panel);

    QSignalSpy replots(panel.lossPlot(), &QCustomPlot::afterReplot);
    for (int s = 1; s <= 1000; ++s) panel.addStep(stepAt(s, 2, 2.0 / s));
    QCOMPARE(replots.count(), 0);  // appending alone draws nothing
    // The 15 Hz timer picks the new points up within a frame or two. (Waiting on the range as
    // well, so a stray replot from showing the window cannot end the wait early.)
    QCPAxis* keys = panel.lossPlot()->xAxis;
    QTRY_VERIFY_WITH_TIMEOUT(replots.count() > 0 && keys->range().upper == 1000.0, 10000);
    QCOMPARE(keys->range().size(), 500.0);
    // Values fitted to the window: the mean's 2/s over steps 500..1000 lies within 0.002..0.004
    // (towers add 0.01, 0.02), far below the run's first losses near 2.
    QVERIFY(panel.lossPlot()->yAxis->range().upper < 0.1);

    // Whole run: every step in view, and the value axis covers the first, large losses.
    replots.clear();
    panel.setScrolling(false);
    QVERIFY(!scrolling->isChecked());
    QTRY_VERIFY_WITH_TIMEOUT(replots.count() > 0 && keys->range().lower <= 1.0, 10000);
    QVERIFY(keys->range().upper >= 1000.0);
    QVERIFY(panel.lossPlot()->yAxis->range().upper >= 2.0);

    // The other charts share the key range.
    auto* lr = panel.findChild<QCustomPlot*>(QStringLiteral("lrPlot"));
    QVERIFY(lr != nullptr);
    QCOMPARE(lr->xAxis->range().lower, keys->range().lower);
    QCOMPARE(lr->xAxis->range().upper, keys->range().upper);
}

void ChartsPanelTest::userZoomStopsScrolling() {
    ChartsPanel panel;
    panel.reset(1);
    showPanel(panel);
    // Spy first: the timer consumes the dirty flag, so points added before it may be drawn
    // before the spy exists.
    QSignalSpy replots(panel.lossPlot(), &QCustomPlot::afterReplot);
    for (int s = 1; s <= 1000; ++s) panel.addStep(stepAt(s, 1, 1.0));
    QCPAxis* keys = panel.lossPlot()->xAxis;
    QTRY_VERIFY_WITH_TIMEOUT(replots.count() > 0 && keys->range().upper == 1000.0, 10000);

    // One wheel notch over the middle of the loss chart zooms in.
    const QPointF at = panel.lossPlot()->axisRect()->rect().center();
    QWheelEvent wheel(at, panel.lossPlot()->mapToGlobal(at), QPoint(), QPoint(0, 120),
                      Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
    QCoreApplication::sendEvent(panel.lossPlot(), &wheel);
    const QCPRange zoomed = keys->range();
    QVERIFY2(zoomed.size() < 500.0, "the wheel did not zoom the key axis");
    auto* scrolling = panel.findChild<QCheckBox*>(QStringLiteral("scrolling"));
    QVERIFY(!scrolling->isChecked());
    auto* speed = panel.findChild<QCustomPlot*>(QStringLiteral("speedPlot"));
    QCOMPARE(speed->xAxis->range().lower, zoomed.lower);  // the charts pan and zoom together
    QCOMPARE(speed->xAxis->range().upper, zoomed.upper);

    // New steps arrive and are drawn, but the user's view stays put.
    replots.clear();
    for (int s = 1001; s <= 1100; ++s) panel.addStep(stepAt(s, 1, 1.0));
    QTRY_VERIFY_WITH_TIMEOUT(replots.count() > 0, 10000);
    QCOMPARE(keys->range().lower, zoomed.lower);
    QCOMPARE(keys->range().upper, zoomed.upper);

    // Checking the box again resumes following the newest step.
    replots.clear();
    scrolling->click();
    QTRY_VERIFY_WITH_TIMEOUT(replots.count() > 0 && keys->range().upper == 1100.0, 10000);
    QCOMPARE(keys->range().size(), 500.0);
}

// A million steps: every series holds at most 16,384 points, the newest 4,096 exactly as they
// came, the lowest and highest loss of the whole run among the rest, and the replot of all of it
// in view samples every series.
void ChartsPanelTest::millionPointsAreBoundedAndSampled() {
    ChartsPanel panel;
    panel.reset(2);
    showPanel(panel);
    QSignalSpy replots(panel.lossPlot(), &QCustomPlot::afterReplot);
    tb::StepMetrics m = stepAt(1, 2, 1.0);
    double lowest = 1e300, highest = -1e300;
    for (int s = 1; s <= 1000000; ++s) {
        m.step = s;
        m.loss = 2.0 / std::sqrt(double(s)) + 0.01 * double(s % 13);  // noisy, so sampling works
        if (s == 123457) m.loss = 7.5;                                 // spikes long before the end
        if (s == 234567) m.loss = 0.001;
        lowest = std::min(lowest, m.loss);
        highest = std::max(highest, m.loss);
        m.towers[0].loss = m.loss + 0.02;
        m.towers[1].loss = m.loss - 0.02;
        m.examplesPerSec = 1000 + double(s % 97);
        panel.addStep(m);
    }
    for (QCustomPlot* plot : panel.findChildren<QCustomPlot*>())
        for (int i = 0; i < plot->graphCount(); ++i)
            QVERIFY2(plot->graph(i)->data()->size() <= 16384,
                     qPrintable(plot->objectName() + ": '" + plot->graph(i)->name() + "' holds " +
                                QString::number(plot->graph(i)->data()->size()) + " points"));
    const QCPGraphDataContainer& mean = *graphNamed(panel.lossPlot(), "mean")->data();
    QVERIFY(mean.size() > 4096);
    auto newest = mean.constEnd() - 4096;
    for (int s = 1000000 - 4095; s <= 1000000; ++s, ++newest)
        QVERIFY2(newest->key == s, qPrintable(QString("point for step %1 has key %2").arg(s).arg(newest->key)));
    double lo = 1e300, hi = -1e300;
    for (auto d = mean.constBegin(); d != mean.constEnd(); ++d) {
        lo = std::min(lo, d->value);
        hi = std::max(hi, d->value);
    }
    QCOMPARE(lo, lowest);
    QCOMPARE(lo, 0.001);
    QCOMPARE(hi, highest);
    QCOMPARE(mean.constBegin()->key, 1.0);  // the run's start still drawn
    panel.setScrolling(false);  // all of it in view
    QTRY_VERIFY_WITH_TIMEOUT(
        replots.count() > 0 && panel.lossPlot()->xAxis->range().upper == 1000000.0, 60000);
    for (QCustomPlot* plot : panel.findChildren<QCustomPlot*>())
        for (int i = 0; i < plot->graphCount(); ++i)
            QVERIFY2(plot->graph(i)->adaptiveSampling(),
                     qPrintable(plot->objectName() + ": '" + plot->graph(i)->name() + "' is drawn unsampled"));
}

void ChartsPanelTest::syncSpeedOverRunAndRecent() {
    ChartsPanel panel;
    panel.reset(1);
    // Ten steps of 0.5 s, then four of 0.25 s, 100 examples each: 6 s of training.
    for (int s = 1; s <= 14; ++s) {
        tb::StepMetrics m = stepAt(s, 1, 1.0);
        m.examples = 100;
        m.stepSeconds = s <= 10 ? 0.5 : 0.25;
        m.examplesPerSec = 100 / m.stepSeconds;
        panel.addStep(m);
    }
    QVERIFY(std::abs(panel.runExamplesPerSec() - 1400 / 6.0) < 1e-9);
    // The last 2 s are the four short steps and the two before them (whole steps, ending
    // after 4 s): 600 examples in 2 s.
    QVERIFY(std::abs(panel.recentExamplesPerSec() - 600 / 2.0) < 1e-9);
    // Per step: the engine's own figure, the step's examples over its time.
    QCPGraph* perStep = graphNamed(panel.speedPlot(), QStringLiteral("per step"));
    QVERIFY(perStep != nullptr);
    QCOMPARE((perStep->data()->constEnd() - 1)->value, 400.0);
}

void ChartsPanelTest::asyncSpeedWithoutSpikes() {
    ChartsPanel panel;
    panel.reset(2);
    // The run's first two pushes land 10 us apart, 50 ms into the run. Over the span between
    // them (the engine's window) that would be 6.4 million examples/sec.
    panel.addStep(pushAt(1, 2, 0, 0.05, 0));
    panel.addStep(pushAt(2, 2, 1, 0.05001, 1));
    QVERIFY2(std::abs(panel.recentExamplesPerSec() - 128 / 0.05001) < 1e-6,
             qPrintable(QString::number(panel.recentExamplesPerSec())));
    QVERIFY(std::abs(panel.runExamplesPerSec() - 128 / 0.05001) < 1e-6);
    // Later: a push every 10 ms from each tower for 3 s; the recent window holds the last 2 s.
    int64_t update = 2;
    for (int k = 1; k <= 300; ++k)
        for (int tower = 0; tower < 2; ++tower) panel.addStep(pushAt(++update, 2, tower, 0.05001 + 0.01 * k, 0));
    const double t = 0.05001 + 3.0;
    QVERIFY(std::abs(panel.runExamplesPerSec() - 64.0 * double(update) / t) < 1e-6);
    QVERIFY2(std::abs(panel.recentExamplesPerSec() - 64.0 * 2 * 200 / 2.0) < 1e-6,
             qPrintable(QString::number(panel.recentExamplesPerSec())));
    // Nothing per push: a push alone says nothing about throughput.
    QVERIFY(graphNamed(panel.speedPlot(), QStringLiteral("per step"))->data()->isEmpty());
}

void ChartsPanelTest::stalenessChartAndNote() {
    ChartsPanel panel;
    panel.reset(2);
    showPanel(panel);
    for (int s = 1; s <= 5; ++s) panel.addStep(stepAt(s, 2, 1.0));
    QVERIFY(!panel.stalenessPlot()->isVisible());
    QVERIFY(!panel.asyncNote()->isVisible());

    panel.reset(2);
    const int64_t staleness[] = {0, 1, 1, 2, 0, 3};
    for (int s = 1; s <= 6; ++s) panel.addStep(pushAt(s, 2, s % 2, 0.01 * s, staleness[s - 1]));
    QVERIFY(panel.stalenessPlot()->isVisible());
    QVERIFY(panel.asyncNote()->isVisible());
    QVERIFY(panel.asyncNote()->text().contains(QStringLiteral("not reproducible")));
    QCPGraph* tower0 = graphNamed(panel.stalenessPlot(), QStringLiteral("tower 0"));
    QCPGraph* tower1 = graphNamed(panel.stalenessPlot(), QStringLiteral("tower 1"));
    QVERIFY(tower0 != nullptr && tower1 != nullptr);
    QCOMPARE(tower0->data()->size(), 3);  // updates 2, 4, 6
    QCOMPARE(tower1->data()->size(), 3);  // updates 1, 3, 5
    QCOMPARE(tower0->data()->at(2)->key, 6.0);
    QCOMPARE(tower0->data()->at(2)->value, 3.0);
    QCOMPARE(tower1->data()->at(1)->value, 1.0);
    QTRY_VERIFY_WITH_TIMEOUT(
        panel.stalenessPlot()->plotLayout()->element(0, 0) &&
            tb::ui::chartTitle(panel.stalenessPlot())->text().contains(tb::ui::formatCount(7.0 / 6, 2)),
        10000);

    panel.reset(2);  // a new run starts synchronous until told otherwise
    QVERIFY(!panel.stalenessPlot()->isVisible());
    QVERIFY(!panel.asyncNote()->isVisible());
}

void ChartsPanelTest::averagingStepsMarked() {
    ChartsPanel panel;
    panel.reset(2);
    for (int s = 1; s <= 20; ++s) {
        tb::StepMetrics m = stepAt(s, 2, 1.0 / s);
        m.averaged = s % 5 == 0;
        panel.addStep(m);
    }
    QCPGraph* marks = graphNamed(panel.lossPlot(), QStringLiteral("averaged"));
    QVERIFY(marks != nullptr);
    QCOMPARE(marks->data()->size(), 4);
    for (int i = 0; i < 4; ++i) {
        QCOMPARE(marks->data()->at(i)->key, 5.0 * (i + 1));
        QCOMPARE(marks->data()->at(i)->value, 1.0 / (5 * (i + 1)));  // on the mean loss
    }
    QVERIFY(panel.lossPlot()->legend->hasItemWithPlottable(marks));
    panel.reset(2);
    QVERIFY(!panel.lossPlot()->legend->hasItemWithPlottable(graphNamed(panel.lossPlot(), "averaged")));
}

void ChartsPanelTest::legendsOutsideTheData() {
    ChartsPanel panel;
    panel.reset(4);  // five loss entries: four towers and the mean
    showPanel(panel);
    panel.resize(700, 600);  // narrow charts: the legends must wrap, not spill
    for (int s = 1; s <= 300; ++s) {
        tb::StepMetrics m = stepAt(s, 4, 1.0 / s);
        m.averaged = s % 10 == 0;
        panel.addStep(m);
    }
    panel.addEval({300, "validation", 1.0, 0.7, 100, false, 0, {}, nullptr});
    QSignalSpy replots(panel.lossPlot(), &QCustomPlot::afterReplot);
    QTRY_VERIFY_WITH_TIMEOUT(replots.count() > 0, 10000);
    for (const char* name : {"lossPlot", "accuracyPlot", "speedPlot"}) {
        auto* p = panel.findChild<QCustomPlot*>(QLatin1String(name));
        QVERIFY(p != nullptr);
        p->replot(QCustomPlot::rpImmediateRefresh);
        const QRect legend = p->legend->outerRect(), data = p->axisRect()->rect();
        QVERIFY2(!legend.intersects(data), name);
        QVERIFY2(p->rect().contains(legend), name);  // wrapped within the chart, nothing spills
        QVERIFY(legend.height() > 0);
    }
}

// A constant learning rate was a line at mid-chart between ticks 0.000975 and 0.001050: the
// rate's axis starts at zero, in the scrolling window and over the whole run.
void ChartsPanelTest::learningRateFromZero() {
    ChartsPanel panel;
    panel.reset(1);
    showPanel(panel);
    QSignalSpy replots(panel.lossPlot(), &QCustomPlot::afterReplot);
    for (int s = 1; s <= 300; ++s) panel.addStep(stepAt(s, 1, 1.0));  // lr 0.1 throughout
    auto* lr = panel.findChild<QCustomPlot*>(QStringLiteral("lrPlot"));
    QVERIFY(lr != nullptr);
    for (bool scrolling : {true, false}) {
        panel.setScrolling(scrolling);
        replots.clear();
        QTRY_VERIFY_WITH_TIMEOUT(replots.count() > 0, 10000);
        const QCPRange r = lr->yAxis->range();
        QVERIFY2(r.lower == 0 && r.upper > 0.1 && r.upper <= 0.11,
                 qPrintable(QStringLiteral("%1 .. %2").arg(r.lower).arg(r.upper)));
    }
}

// A legend item is clipped to its own rectangle: the "_" of "vgg_bn", at the bottom of the font's
// descent, lost its last pixel row there at some sizes and read as a space (seen in the Compare
// dialog under X11). Entries of underscores alone, made as that dialog makes its chart (series,
// theme and fit before the chart is shown) at each size a screen's font may give the legend,
// must leave ink where the screen shows them.
void ChartsPanelTest::legendKeepsUnderscores() {
    for (double points = 6; points <= 13; points += 0.5) {
        QWidget host;
        QCustomPlot* p = tb::ui::makeChart(&host, QStringLiteral("underscores"), QStringLiteral("Training loss"),
                                           QStringLiteral("step"), QStringLiteral("loss"));
        QFont font = p->legend->font();
        font.setPointSizeF(points);
        p->legend->setFont(font);
        for (const char* name : {"________", "________ "}) {  // two entries, as the Compare dialog's two runs
            QCPGraph* g = p->addGraph();
            g->setName(QLatin1String(name));
            g->setData({0, 1000}, {2.5, 0.5});
        }
        p->legend->setVisible(true);
        p->rescaleAxes();
        tb::ui::applyChartTheme(p, host.palette());
        tb::ui::fitToSize(p);
        p->replot();
        p->resize(600, 300);
        host.resize(600, 300);
        host.show();
        QVERIFY(QTest::qWaitForWindowExposed(&host));
        QTest::qWait(50);
        const QImage image = p->grab().toImage();  // as the screen shows it: through the plot's buffers
        auto* item = p->legend->itemWithPlottable(p->graph(0));
        QVERIFY(item != nullptr);
        const QRect text = item->outerRect().adjusted(p->legend->iconSize().width() + p->legend->iconTextPadding(), 0, 0, 0);
        int ink = 0;
        for (int y = text.top(); y <= text.bottom(); ++y)
            for (int x = text.left(); x <= text.right(); ++x) ink += qGray(image.pixel(x, y)) < 160;
        QVERIFY2(ink > 0, qPrintable(QStringLiteral("at %1 points the underscores left no ink in %2x%3 at (%4, %5)")
                                         .arg(points).arg(text.width()).arg(text.height()).arg(text.left()).arg(text.top())));
    }
}

void ChartsPanelTest::thousandsSeparators() {
    ChartsPanel panel;
    panel.reset(1);
    showPanel(panel);
    QSignalSpy replots(panel.speedPlot(), &QCustomPlot::afterReplot);
    for (int s = 1; s <= 50; ++s) {
        tb::StepMetrics m = stepAt(s, 1, 1.0);
        m.examples = 963834;
        m.stepSeconds = 1.0;
        m.examplesPerSec = 963834;
        panel.addStep(m);
    }
    const QString separated = tb::ui::formatCount(963834);
    QVERIFY(separated.contains(tb::ui::groupedLocale().groupSeparator()));
    QTRY_VERIFY_WITH_TIMEOUT(graphNamed(panel.speedPlot(), QStringLiteral("whole run: %1").arg(separated)) != nullptr, 10000);
    QTRY_VERIFY_WITH_TIMEOUT(replots.count() > 0, 10000);
    panel.speedPlot()->replot(QCustomPlot::rpImmediateRefresh);
    const QStringList labels = tickLabels(panel.speedPlot()->yAxis);
    QVERIFY(!labels.isEmpty());
    for (const QString& l : labels) {
        QVERIFY2(!l.contains(QLatin1Char('e')), qPrintable(l));  // no 9.6e+05
        QVERIFY2(l.contains(tb::ui::groupedLocale().groupSeparator()), qPrintable(labels.join(" | ")));
    }
}

void ChartsPanelTest::wholeStepTicks() {
    ChartsPanel panel;
    panel.reset(1);
    showPanel(panel);
    // A short run in full view: keys 199..201 would tick at halves.
    for (int s = 199; s <= 201; ++s) panel.addStep(stepAt(s, 1, 1.0));
    panel.setScrolling(false);
    QSignalSpy replots(panel.lossPlot(), &QCustomPlot::afterReplot);
    QTRY_VERIFY_WITH_TIMEOUT(replots.count() > 0 && panel.lossPlot()->xAxis->range().upper >= 201, 10000);
    panel.lossPlot()->replot(QCustomPlot::rpImmediateRefresh);
    const QStringList labels = tickLabels(panel.lossPlot()->xAxis);
    QVERIFY(!labels.isEmpty());
    for (const QString& l : labels) QVERIFY2(!l.contains(tb::ui::groupedLocale().decimalPoint()), qPrintable(l));
    QVERIFY(labels.contains(QStringLiteral("200")));
}

void ChartsPanelTest::ticksDoNotRunTogether() {
    ChartsPanel panel;
    panel.reset(1);
    showPanel(panel);
    panel.resize(560, 420);  // charts about 260 px wide
    for (int s = 999001; s <= 1000000; s += 10) panel.addStep(stepAt(s, 1, 1.0));
    QSignalSpy replots(panel.lossPlot(), &QCustomPlot::afterReplot);
    QTRY_VERIFY_WITH_TIMEOUT(replots.count() > 0, 10000);
    for (auto* p : panel.findChildren<QCustomPlot*>()) {
        if (!p->isVisible()) continue;
        p->replot(QCustomPlot::rpImmediateRefresh);
        const QString crowded = crowdedTicks(p);
        QVERIFY2(crowded.isEmpty(), qPrintable(crowded));
    }
}

// A chart fitted while still unshown (as the Runs tab's comparison draws its charts once, in its
// constructor) is fitted again at the size it is shown at, and at every size after: it kept two
// ticks, 0 and 1,000, over 1,800 steps.
void ChartsPanelTest::aChartFitsTheSizeItIsShownAt() {
    QWidget host;
    auto* layout = new QVBoxLayout(&host);
    QCustomPlot* p = tb::ui::makeChart(&host, QStringLiteral("drawnOnce"), QStringLiteral("Training loss"),
                                       QStringLiteral("step"), QStringLiteral("loss"));
    layout->addWidget(p);
    QCPGraph* g = p->addGraph();
    g->setData({0, 1800}, {2.5, 0.5});
    p->rescaleAxes();
    tb::ui::fitToSize(p);
    p->replot();
    host.resize(700, 320);
    host.show();
    QVERIFY(QTest::qWaitForWindowExposed(&host));
    for (int width : {700, 1000, 260}) {
        host.resize(width, 320);
        QTRY_COMPARE(p->width(), width - layout->contentsMargins().left() - layout->contentsMargins().right());
        p->replot(QCustomPlot::rpImmediateRefresh);
        const QString crowded = crowdedTicks(p);
        QVERIFY2(crowded.isEmpty(), qPrintable(crowded));
        // Labels a readable step apart (1, 2, 2.5, 5 x 10^k) and about one per 120 px.
        const int ticks = int(p->xAxis->tickVector().size());
        QVERIFY2(ticks >= std::min(4, p->axisRect()->width() / 120),
                 qPrintable(QStringLiteral("%1 ticks over %2 px: %3").arg(ticks).arg(p->axisRect()->width())
                                .arg(QStringList(p->xAxis->tickVectorLabels().toList()).join(", "))));
    }
}

// Every chart's value axis labels at least three ticks inside its range, linear or log, in a
// small chart or a large one (the loss axis once showed only "2").
void ChartsPanelTest::valueAxesShowThreeTicks_data() {
    QTest::addColumn<bool>("log");
    QTest::addColumn<double>("from");
    QTest::addColumn<double>("to");
    QTest::addColumn<int>("height");
    for (bool log : {false, true})
        for (auto [from, to] : {std::pair{2.4, 1.7}, {2.31, 2.2}, {0.9, 0.3}, {2.5, 0.05}, {3.0, 0.002}})
            for (int height : {300, 700})
                QTest::addRow("%s %g..%g, %d px", log ? "log" : "linear", from, to, height) << log << from << to << height;
}

void ChartsPanelTest::valueAxesShowThreeTicks() {
    QFETCH(bool, log);
    QFETCH(double, from);
    QFETCH(double, to);
    QFETCH(int, height);
    ChartsPanel panel;
    panel.reset(1);
    showPanel(panel);
    panel.setLogLoss(log);
    for (int s = 1; s <= 200; ++s) panel.addStep(stepAt(s, 1, from * std::pow(to / from, (s - 1) / 199.0)));
    // Within a few frames of the steps and of the new height (the panel fits each chart's ticks
    // to its axis rect, which takes the new height in the replot after the resize): every value
    // axis shows at least three labels, none twice, none overlapping. Waited for, not timed.
    auto tickProblem = [&]() -> QString {
        if (!panel.lossPlot()->yAxis->range().contains(from) || !panel.lossPlot()->yAxis->range().contains(to))
            return QStringLiteral("the loss axis does not show the steps yet");
        for (auto* p : panel.findChildren<QCustomPlot*>()) {
            if (!p->isVisible() || p->graphCount() == 0) continue;
            const QCPRange r = p->yAxis->range();
            QStringList inside;
            const QVector<double> ticks = p->yAxis->tickVector();
            const QVector<QString> labels = p->yAxis->tickVectorLabels();
            for (int i = 0; i < ticks.size(); ++i)
                if (r.contains(ticks[i]) && !labels[i].isEmpty()) inside << labels[i];
            if (inside.size() < 3 || inside.removeDuplicates() != 0)
                return QStringLiteral("%1 (%2 px high, %3..%4): %5")
                    .arg(p->objectName()).arg(p->axisRect()->height()).arg(r.lower).arg(r.upper).arg(inside.join(' '));
            const QFontMetrics fm(p->yAxis->tickLabelFont());
            for (int i = 1; i < ticks.size(); ++i) {
                if (labels[i].isEmpty() || labels[i - 1].isEmpty() || !r.contains(ticks[i]) || !r.contains(ticks[i - 1]))
                    continue;
                const double gap = std::abs(p->yAxis->coordToPixel(ticks[i]) - p->yAxis->coordToPixel(ticks[i - 1]));
                if (gap < fm.height())
                    return QStringLiteral("%1: %2 and %3 are %4 px apart; range %5..%6, %7 px")
                        .arg(p->objectName(), labels[i - 1], labels[i]).arg(gap)
                        .arg(r.lower).arg(r.upper).arg(p->axisRect()->height());
            }
        }
        return {};
    };
    QString problem;
    QTRY_VERIFY2_WITH_TIMEOUT((problem = tickProblem()).isEmpty(), qPrintable(problem), 10000);
    // Then the window is made shorter with no step coming: the ticks follow the new height (they
    // had stayed spaced for the old one until the next step).
    panel.resize(900, height);
    QTRY_VERIFY2_WITH_TIMEOUT((problem = tickProblem()).isEmpty(), qPrintable(problem), 10000);
}

// Pictures to look at, saved beside the test binary: a synchronous run with averaging every 10
// steps and 4 towers, and an asynchronous run with staleness.
void ChartsPanelTest::picturesRender() {
    const auto save = [](ChartsPanel& panel, const char* file) {
        QTest::qWait(250);
        const QImage image = panel.grab().toImage();
        QVERIFY(!image.isNull());
        const QString path = QDir(QCoreApplication::applicationDirPath()).filePath(QLatin1String(file));
        QVERIFY2(image.save(path), qPrintable(path));
    };
    ChartsPanel sync;
    sync.reset(4);
    showPanel(sync);
    sync.resize(900, 560);
    for (int s = 1; s <= 200; ++s) {
        tb::StepMetrics m = stepAt(s, 4, 2.0 / std::sqrt(double(s)));
        m.averaged = s % 10 == 0;
        m.examples = 512;
        m.stepSeconds = 0.0005 + 0.0001 * (s % 3);
        m.examplesPerSec = 512 / m.stepSeconds;
        sync.addStep(m);
        if (s % 50 == 0) sync.addEval({s, "validation", 1.0, 0.6 + s / 1000.0, 1000, false, 0, {}, nullptr});
    }
    sync.setScrolling(false);
    save(sync, "charts-averaging.png");

    ChartsPanel async;
    async.reset(4);
    showPanel(async);
    async.resize(900, 600);
    for (int s = 1; s <= 400; ++s) {
        const int tower = s % 7 == 0 ? 3 : s % 3;  // tower 3 is a straggler
        tb::StepMetrics m = pushAt(s, 4, tower, 0.004 * s, tower == 3 ? 9 + s % 3 : s % 4);
        m.loss = m.towers[size_t(tower)].loss = 2.0 / std::sqrt(double(s));
        async.addStep(m);
    }
    async.setScrolling(false);
    save(async, "charts-async.png");
}


// A chart saved as a picture (PNG twice the pixels, vector PDF) and as its data: every point of
// every graph in the CSV, and a bad suffix refused in one sentence.
void ChartsPanelTest::exportWritesPngPdfCsv() {
    QTemporaryDir dir;
    QCustomPlot* p = tb::ui::makeChart(nullptr, "export", "Loss", "step", "loss");
    std::unique_ptr<QCustomPlot> owner(p);
    p->resize(400, 300);
    QCPGraph* a = p->addGraph();
    a->setName("tower 0");
    QCPGraph* b = p->addGraph();
    b->setName("mean \"all\"");
    for (int i = 1; i <= 50; ++i) {
        a->addData(i, 1.0 / i);
        b->addData(i, 2.0 / i);
    }
    p->rescaleAxes();
    QString error;
    QVERIFY2(tb::ui::exportChart(p, dir.filePath("c.png"), &error), qPrintable(error));
    const QImage png(dir.filePath("c.png"));
    QCOMPARE(png.size(), QSize(800, 600));
    QVERIFY2(tb::ui::exportChart(p, dir.filePath("c.pdf"), &error), qPrintable(error));
    QFile pdf(dir.filePath("c.pdf"));
    QVERIFY(pdf.open(QIODevice::ReadOnly) && pdf.read(5) == "%PDF-");
    QVERIFY2(tb::ui::exportChart(p, dir.filePath("c.csv"), &error), qPrintable(error));
    QFile csv(dir.filePath("c.csv"));
    QVERIFY(csv.open(QIODevice::ReadOnly | QIODevice::Text));
    const QStringList lines = QString::fromUtf8(csv.readAll()).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), 101);
    QCOMPARE(lines[0], QStringLiteral("series,step,loss"));
    QCOMPARE(lines[3], QStringLiteral("\"tower 0\",3,0.33333333333333331"));
    QVERIFY(lines.contains(QStringLiteral("\"mean \"\"all\"\"\",50,0.040000000000000001")));
    QVERIFY(!tb::ui::exportChart(p, dir.filePath("c.bmp"), &error));
    QVERIFY2(error.contains("c.bmp: not .png, .pdf or .csv"), qPrintable(error));
    QVERIFY(!tb::ui::exportChart(p, dir.filePath("no/such/dir/c.csv"), &error));
    QVERIFY2(error.contains("cannot be written"), qPrintable(error));
}
QTEST_MAIN(ChartsPanelTest)
// The export dialog opens in the pictures folder, then where the last export went, never in the
// working directory; driven as a user does: right click, the menu's entry, the dialog.
void ChartsPanelTest::exportDialogStartsWhereItShould() {
    QCoreApplication::setOrganizationName(QStringLiteral("TowerbenchTest"));  // not the user's settings
    QSettings().remove(QStringLiteral("export/dir"));
    ChartsPanel panel;
    panel.reset(1);
    showPanel(panel);
    for (int s = 1; s <= 20; ++s) panel.addStep(stepAt(s, 1, 1.0 / s));
    QCustomPlot* plot = panel.lossPlot();
    QTemporaryDir out;
    // Opens the dialog from the chart's menu; `fill` sees it (and may choose a file), then it closes.
    const auto exportVia = [&](const std::function<void(QFileDialog*)>& fill) {
        bool seen = false;
        QTimer::singleShot(200, [&] {
            auto* menu = qobject_cast<QMenu*>(QApplication::activePopupWidget());
            if (!menu) return;
            QTest::keyClick(menu, Qt::Key_Down);
            QTest::keyClick(menu, Qt::Key_Return);
        });
        std::function<void()> look = [&] {
            auto* dialog = qobject_cast<QFileDialog*>(QApplication::activeModalWidget());
            if (!dialog) return void(QTimer::singleShot(100, look));
            seen = true;
            fill(dialog);
            if (dialog->isVisible()) dialog->reject();
        };
        QTimer::singleShot(400, look);
        emit plot->customContextMenuRequested(plot->rect().center());
        QTRY_VERIFY(seen);
    };
    const QString pictures = QStandardPaths::writableLocation(QStandardPaths::PicturesLocation);
    QString first;
    exportVia([&](QFileDialog* d) { first = d->directory().absolutePath(); });
    QVERIFY2(first != QDir::currentPath(), qPrintable(first));
    QCOMPARE(first, QDir(QFileInfo(pictures).isDir() ? pictures : QDir::homePath()).absolutePath());
    exportVia([&](QFileDialog* d) {
        d->selectFile(out.filePath(QStringLiteral("loss.png")));
        QMetaObject::invokeMethod(d, "accept");
    });
    QVERIFY(QFileInfo::exists(out.filePath(QStringLiteral("loss.png"))));
    QString second;
    exportVia([&](QFileDialog* d) { second = d->directory().absolutePath(); });
    QCOMPARE(second, QDir(out.path()).absolutePath());
    QSettings().remove(QStringLiteral("export/dir"));
}

#include "tst_ui_charts.moc"
