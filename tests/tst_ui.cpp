// The workbench window, driven as a user would (offscreen): the diagram follows the experiment,
// invalid combinations are explained before Start, a short run fills the charts, pause /
// single-step / resume / stop behave, closing mid-run does not hang, and a screenshot is saved.
#include <QtTest>

#include <QComboBox>
#include <QSpinBox>

#include "charts_panel.hpp"
#include "engine_worker.hpp"
#include "devices_panel.hpp"
#include "experiment_panel.hpp"
#include "main_window.hpp"
#include "placement_diagram.hpp"

namespace {

tb::RunConfig syntheticRun(int64_t steps) {
    tb::RunConfig c;
    c.model = "tiny_mlp";
    c.data = "synthetic:blobs";
    c.towers = "cpu:0,cpu:1";
    c.batchPerTower = 32;
    c.batch = 64;
    c.steps = steps;
    c.optimizer = "sgd";
    c.lr = 0.1;
    return c;
}

}  // namespace

class TestUi : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() {
        QCoreApplication::setOrganizationName("TowerbenchTest");  // keep the user's settings out of it
        QSettings().clear();
    }

    void diagramFollowsTheExperiment() {
        MainWindow w;
        ExperimentPanel* e = w.experiment();
        e->setConfig(syntheticRun(10));
        e->towersBox()->setValue(1);
        QCOMPARE(w.diagram()->model().towers.size(), 1);
        e->towersBox()->setValue(4);
        QCOMPARE(w.diagram()->model().towers.size(), 4);
        QCOMPARE(w.diagram()->model().links, PlacementModel::Links::HolderArrows);
        QCOMPARE(w.diagram()->model().arrowCount(), 8);
        e->variablesBox()->setCurrentText("replicated");
        e->reduceBox()->setCurrentText("allreduce");
        QCOMPARE(w.diagram()->model().links, PlacementModel::Links::Ring);
        QCOMPARE(w.diagram()->model().arrowCount(), 4);
        QVERIFY(w.diagram()->model().holder.isEmpty());
    }

    void invalidCombinationIsExplained() {
        MainWindow w;
        ExperimentPanel* e = w.experiment();
        e->setConfig(syntheticRun(10));
        QVERIFY(e->isValid());
        e->reduceBox()->setCurrentText("allreduce");  // with variables on the cpu
        QVERIFY(!e->isValid());
        QVERIFY2(e->problem().contains("replicated"), qPrintable(e->problem()));
        w.start();
        QVERIFY(!w.running());  // Start refused
    }

    void shortRunPauseStepResumeStop() {
        MainWindow w;
        w.show();
        w.experiment()->setConfig(syntheticRun(100000));
        QSignalSpy ended(&w, &MainWindow::runEnded);
        w.start();
        QVERIFY(w.running());
        QTRY_VERIFY_WITH_TIMEOUT(w.charts()->stepPoints() > 20, 20000);
        QTRY_VERIFY(w.devices()->timeline()->stepsShown() > 0);

        w.togglePause();
        QVERIFY(w.paused());
        // Steps already queued may still arrive; then the count must hold still.
        int held = -1;
        QTRY_VERIFY_WITH_TIMEOUT(
            [&] {
                const int now = w.charts()->stepPoints();
                const bool same = now == held;
                held = now;
                return same;
            }(),
            5000);
        QTest::qWait(300);
        QCOMPARE(w.charts()->stepPoints(), held);

        w.stepOnce();
        QTRY_COMPARE_WITH_TIMEOUT(w.charts()->stepPoints(), held + 1, 5000);
        QTest::qWait(200);
        QCOMPARE(w.charts()->stepPoints(), held + 1);

        // A screenshot of the window mid-run, for the README and for people reading CI logs.
        const QString png = QDir(QCoreApplication::applicationDirPath()).filePath("towerbench-window.png");
        QVERIFY(w.grab().save(png));
        QVERIFY(QFileInfo(png).size() > 10000);

        w.togglePause();  // resume
        QTRY_VERIFY_WITH_TIMEOUT(w.charts()->stepPoints() > held + 10, 10000);
        w.stop();
        QTRY_VERIFY_WITH_TIMEOUT(!w.running(), 10000);
        QCOMPARE(ended.count(), 1);
        QVERIFY2(w.lastSummary().contains("\"stopped\":true"), qPrintable(w.lastSummary()));
        QVERIFY(w.charts()->evalPoints() > 0);  // the final evaluation reached the charts
    }

    void engineErrorIsShownNotFatal() {
        MainWindow w;
        tb::RunConfig c = syntheticRun(10);
        c.model = "mlp";  // 784 inputs; the blobs are 2-D points
        w.experiment()->setConfig(c);
        QVERIFY(w.experiment()->isValid());  // only the run finds out
        QSignalSpy ended(&w, &MainWindow::runEnded);
        w.start();
        QTRY_COMPARE_WITH_TIMEOUT(ended.count(), 1, 20000);
        QVERIFY(!w.running());
        QVERIFY2(w.lastError().contains("expects input"), qPrintable(w.lastError()));
    }

    // A stop that reaches the worker before its queued run has made the trainer is kept (it was
    // dropped once), and the run ends at once instead of training.
    void stopBeforeTheRunStartsIsKept() {
        EngineWorker worker;
        QSignalSpy finished(&worker, &EngineWorker::finished);
        worker.expectRun();
        worker.stop();
        QElapsedTimer t;
        t.start();
        worker.run(syntheticRun(1000000));  // on this thread: returns when the run ends
        QVERIFY2(t.elapsed() < 5000, qPrintable(QString("the run took %1 ms").arg(t.elapsed())));
        QCOMPARE(finished.count(), 1);
        QVERIFY(finished.at(0).at(1).toBool());  // stopped
        // Without a run announced, a stray stop is not kept for the next one.
        worker.stop();
        worker.expectRun();
        t.restart();
        worker.run(syntheticRun(20));
        QCOMPARE(finished.count(), 2);
        QVERIFY2(!finished.at(1).at(1).toBool(), "a stale stop stopped the next run");
    }

    // Closing while the full Fashion-MNIST loads takes effect within a second: loading gives way.
    void closingWhileLoadingIsPrompt() {
        if (!QFileInfo::exists(QStringLiteral("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")))
            QSKIP("Debian's dataset-fashion-mnist is not installed");
        auto* w = new MainWindow;
        w->show();
        tb::RunConfig c;
        c.model = "mnist_cnn";
        c.data = "fashion-mnist";
        c.steps = 1000000;
        w->experiment()->setConfig(c);
        w->start();
        QTest::qWait(100);  // the worker is reading the training images now (they take ~0.35 s here)
        QElapsedTimer t;
        t.start();
        QVERIFY(w->close());
        QVERIFY(!w->running());
        QVERIFY2(t.elapsed() < 1000, qPrintable(QString("close took %1 ms").arg(t.elapsed())));
        delete w;
    }

    void closingMidRunStopsCleanly() {
        auto* w = new MainWindow;
        w->show();
        w->experiment()->setConfig(syntheticRun(1000000));
        w->start();
        QTRY_VERIFY_WITH_TIMEOUT(w->charts()->stepPoints() > 5, 20000);
        QElapsedTimer t;
        t.start();
        QVERIFY(w->close());
        QVERIFY(!w->running());
        QVERIFY2(t.elapsed() < 5000, qPrintable(QString("close took %1 ms").arg(t.elapsed())));
        delete w;
    }
};

QTEST_MAIN(TestUi)
#include "tst_ui.moc"
