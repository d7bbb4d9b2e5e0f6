// Tests of ui/ChartsPanel: steps and evaluations become points (NaN tower losses skipped),
// reset rebuilds the per-tower loss series, the log-loss switch sets the axis scale, the 15 Hz
// timer replots and scrolls the key axis, a user's zoom turns scrolling off and is kept, and a
// million points replot within a second.
#include <QtTest>

#include <QCheckBox>
#include <QElapsedTimer>
#include <QSignalSpy>
#include <QWheelEvent>
#include <cmath>
#include <limits>
#include <qcustomplot.h>

#include "charts_panel.hpp"

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
    m.examplesPerSec = 1000 + double(step % 7);
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
    void resetRebuildsTowerSeries();
    void evaluationsBecomePoints();
    void logLossSetsAxisScale();
    void timerReplotsAndScrolls();
    void userZoomStopsScrolling();
    void millionPointsReplotQuickly();
};

void ChartsPanelTest::stepsBecomePoints() {
    ChartsPanel panel;
    panel.reset(2);
    for (int s = 1; s <= 1000; ++s) panel.addStep(stepAt(s, 2, 2.0 / s));
    QCOMPARE(panel.stepPoints(), 1000);
    QCOMPARE(panel.lossPlot()->graphCount(), 3);  // tower 0, tower 1, mean
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

void ChartsPanelTest::resetRebuildsTowerSeries() {
    ChartsPanel panel;
    panel.reset(2);
    for (int s = 1; s <= 20; ++s) panel.addStep(stepAt(s, 2, 1.0));
    panel.addEval({20, "validation", 1.0, 0.7, 100, false});
    auto* accuracy = panel.findChild<QCustomPlot*>(QStringLiteral("accuracyPlot"));
    QVERIFY(accuracy != nullptr);
    QCOMPARE(accuracy->graphCount(), 2);  // train, validation

    panel.reset(4);
    QCOMPARE(panel.stepPoints(), 0);
    QCOMPARE(panel.evalPoints(), 0);
    QCOMPARE(panel.lossPlot()->graphCount(), 5);
    for (int i = 0; i < panel.lossPlot()->graphCount(); ++i)
        QCOMPARE(panel.lossPlot()->graph(i)->data()->size(), 0);
    QVERIFY(graphNamed(panel.lossPlot(), "tower 3") != nullptr);
    QCOMPARE(accuracy->graphCount(), 1);  // the evaluation series goes with the old run
    QCOMPARE(accuracy->graph(0)->data()->size(), 0);
}

void ChartsPanelTest::evaluationsBecomePoints() {
    ChartsPanel panel;
    panel.reset(1);
    panel.addEval({100, "validation", 0.9, 0.6, 1000, false});
    panel.addEval({200, "validation", 0.7, 0.7, 1000, false});
    panel.addEval({200, "test", 0.75, 0.68, 1000, false});
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
    QTRY_VERIFY_WITH_TIMEOUT(replots.count() > 0 && keys->range().upper == 1000.0, 1000);
    QCOMPARE(keys->range().size(), 500.0);
    // Values fitted to the window: the mean's 2/s over steps 500..1000 lies within 0.002..0.004
    // (towers add 0.01, 0.02), far below the run's first losses near 2.
    QVERIFY(panel.lossPlot()->yAxis->range().upper < 0.1);

    // Whole run: every step in view, and the value axis covers the first, large losses.
    replots.clear();
    panel.setScrolling(false);
    QVERIFY(!scrolling->isChecked());
    QTRY_VERIFY_WITH_TIMEOUT(replots.count() > 0 && keys->range().lower <= 1.0, 1000);
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
    QTRY_VERIFY_WITH_TIMEOUT(replots.count() > 0 && keys->range().upper == 1000.0, 1000);

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
    QTRY_VERIFY_WITH_TIMEOUT(replots.count() > 0, 1000);
    QCOMPARE(keys->range().lower, zoomed.lower);
    QCOMPARE(keys->range().upper, zoomed.upper);

    // Checking the box again resumes following the newest step.
    replots.clear();
    scrolling->click();
    QTRY_VERIFY_WITH_TIMEOUT(replots.count() > 0 && keys->range().upper == 1100.0, 1000);
    QCOMPARE(keys->range().size(), 500.0);
}

void ChartsPanelTest::millionPointsReplotQuickly() {
    ChartsPanel panel;
    panel.reset(2);
    showPanel(panel);
    QSignalSpy replots(panel.lossPlot(), &QCustomPlot::afterReplot);
    tb::StepMetrics m = stepAt(1, 2, 1.0);
    for (int s = 1; s <= 1000000; ++s) {
        m.step = s;
        m.loss = 2.0 / std::sqrt(double(s)) + 0.01 * double(s % 13);  // noisy, so sampling works
        m.towers[0].loss = m.loss + 0.02;
        m.towers[1].loss = m.loss - 0.02;
        m.examplesPerSec = 1000 + double(s % 97);
        panel.addStep(m);
    }
    QCOMPARE(graphNamed(panel.lossPlot(), "mean")->data()->size(), 1000000);
    panel.setScrolling(false);  // the worst case: all million points in view
    QTRY_VERIFY_WITH_TIMEOUT(
        replots.count() > 0 && panel.lossPlot()->xAxis->range().upper == 1000000.0, 5000);

    // A bound, not a measurement (this suite was written where it could not be built): adaptive
    // sampling reduces each series to a few points per pixel column, so a replot of 3 x 10^6
    // points is a linear scan plus ~1000 px of drawing, expected to take a few tens of ms.
    QElapsedTimer clock;
    clock.start();
    panel.lossPlot()->replot(QCustomPlot::rpImmediateRefresh);
    const qint64 ms = clock.elapsed();
    QVERIFY2(ms < 1000, qPrintable(QStringLiteral("replot of 10^6 points took %1 ms").arg(ms)));
}

QTEST_MAIN(ChartsPanelTest)
#include "tst_ui_charts.moc"
