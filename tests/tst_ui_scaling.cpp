// The scaling lab's window and the lessons, driven as a user would (offscreen): a sweep started
// from its button runs on the worker's thread and fills the charts, the table and the
// predictor's curves as its points arrive; the predictor follows its settings (hardware presets,
// assumptions) and names a bottleneck; a bad tower list is refused in the window; the sweep's
// folder opens again from the runs list; stopping mid-sweep keeps the points measured. Every
// lesson's experiment is valid and lands in the form; lesson 2's window trains sync and async
// side by side and draws both curves and the staleness histogram.
#include <QtTest>

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QDir>
#include <QDockWidget>
#include <QFileInfo>
#include <QTableWidget>
#include <QTextBrowser>
#include <QTemporaryDir>
#include <qcustomplot.h>

#include <nlohmann/json.hpp>

#include "engine/run_folder.hpp"
#include "engine/trainer.hpp"
#include "engine/step_profile.hpp"
#include "io/run_config.hpp"
#include "experiment/experiment_panel.hpp"
#include "lessons/lessons.hpp"
#include "fake_devices.hpp"
#include "test_support.hpp"
#include "window/main_window.hpp"
#include "charts/chart_style.hpp"
#include "runs/runs_panel.hpp"
#include "lab/scaling_lab.hpp"
#include "lessons/comparison_lesson.hpp"
#include "lessons/sync_async_lesson.hpp"
#include "lessons/parallelism_lesson.hpp"
#include "devices/devices_panel.hpp"
#include "devices/phase_colors.hpp"

namespace {

tb::RunConfig tinyBase() {
    tb::RunConfig c;
    c.model = "tiny_mlp";
    c.data = "synthetic:blobs";
    c.batch = 32;
    c.threads = 2;
    c.validation = 0;
    return c;
}

MainWindow::TelemetryFactory noTelemetry() {
    return [](std::string* whyNot) -> std::unique_ptr<tb::TelemetrySource> {
        *whyNot = "no GPU in this test";
        return nullptr;
    };
}

}  // namespace

class UiScalingTest : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { qputenv("TOWERBENCH_RUNS_DIR", runs_.path().toUtf8()); }

    // Before a sweep the charts name no strategy: there was a lone "CPU holder (mean)" in the
    // legend, with no dots, whatever strategies were checked.
    void noLegendBeforeASweep() {
        ScalingLab lab;
        lab.setBase(tinyBase());
        lab.show();
        QVERIFY(QTest::qWaitForWindowExposed(&lab));
        auto* rate = lab.findChild<QCustomPlot*>("sweepRate");
        QVERIFY(rate);
        for (int i = 0; i < rate->legend->itemCount(); ++i)
            if (auto* item = qobject_cast<QCPPlottableLegendItem*>(rate->legend->item(i)); item && rate->legend->visible())
                QVERIFY2(!item->plottable()->interface1D() || item->plottable()->interface1D()->dataCount() > 0,
                         qPrintable("a legend entry with no points: " + item->plottable()->name()));
        // The step's breakdown says what it waits for, on axes of no points (it showed 0 to 5).
        QCustomPlot* breakdown = lab.breakdownChart();
        QCOMPARE(breakdown->itemCount(), 1);
        auto* hint = qobject_cast<QCPItemText*>(breakdown->item(0));
        QVERIFY(hint && hint->visible() && hint->text().startsWith("Start a sweep"));
        QCOMPARE(breakdown->yAxis->range().upper, 1.0);
        // Both charts' axes take their width (an empty legend held them to a strip: 98 of 399 px).
        for (QCustomPlot* p : {lab.rateChart(), breakdown})
            QVERIFY2(p->axisRect()->width() > p->width() / 2,
                     qPrintable(QStringLiteral("%1: axes %2 of %3 px").arg(p->objectName()).arg(p->axisRect()->width()).arg(p->width())));
    }

    void sweepFromTheWindow() {
        ScalingLab lab;
        lab.setBase(tinyBase());
        lab.towersEdit()->setText("1,2");
        lab.strategyBox("mean")->setChecked(true);
        lab.strategyBox("allreduce")->setChecked(false);
        lab.strategyBox("async")->setChecked(true);
        lab.warmupBox()->setValue(2);
        lab.stepsBox()->setValue(6);
        lab.show();
        QTest::mouseClick(lab.startButton(), Qt::LeftButton);
        QVERIFY(lab.running());
        QTRY_VERIFY_WITH_TIMEOUT(!lab.running(), 60000);
        QVERIFY2(lab.statusText().startsWith("Finished: 3 points"), qPrintable(lab.statusText()));
        QCOMPARE(int(lab.results().size()), 3);
        QCOMPARE(lab.table()->rowCount(), 3);
        QCOMPARE(lab.table()->item(2, 0)->text(), QString("2 towers, async"));
        // Measured dots and predicted curves for both strategies, the ideal line; a bar layer per phase.
        QStringList names;
        for (int i = 0; i < lab.rateChart()->graphCount(); ++i)
            names << lab.rateChart()->graph(i)->name() + (lab.rateChart()->graph(i)->lineStyle() == QCPGraph::lsNone ? " dots" : "");
        for (const char* n : {"CPU holder (mean)", "async parameter server", "ideal (N x one tower)",
                              "CPU holder (mean) dots", "async parameter server dots", "predicted"})
            QVERIFY2(names.contains(n), qPrintable(names.join(" | ")));
        QCOMPARE(lab.breakdownChart()->plottableCount(), 6);
        QVERIFY(!lab.breakdownChart()->item(0)->visible());  // its empty chart's hint
        // The measured points are the sweep's own: the table's first row is its one-tower rate.
        const double one = lab.results().front().measured.examplesPerSec;
        QVERIFY(one > 0);
        QCOMPARE(lab.table()->item(0, 4)->text(), QString("1.00x"));
        // The predictor, calibrated from point 1, predicts the measured one-tower point itself
        // within rounding (its own calibration), and more for 8 towers on H100s than here.
        QVERIFY2(qAbs(lab.predicted("mean", 1) - one) / one < 0.02, qPrintable(QString("%1 vs %2").arg(lab.predicted("mean", 1)).arg(one)));
        lab.maxTowersBox()->setValue(8);
        const double here = lab.predicted("mean", 8);
        lab.hardwareBox()->setCurrentIndex(lab.hardwareBox()->findData("h100"));
        // Faster, by how much depends on the fixed cost per step tiny_mlp's calibration measured.
        QVERIFY2(lab.predicted("mean", 8) > here, qPrintable(QString("%1 vs %2").arg(lab.predicted("mean", 8)).arg(here)));
        QVERIFY2(lab.bottleneckLabel()->text().contains("8 h100 towers"), qPrintable(lab.bottleneckLabel()->text()));
        QVERIFY(lab.assumptionsLabel()->text().contains("own pcie4 link"));
        // An assumption changed changes the prediction.
        lab.hardwareBox()->setCurrentIndex(0);
        const double before = lab.predicted("mean", 2);
        lab.serialShareBox()->setValue(0.9);
        QVERIFY(lab.predicted("mean", 2) != before);

        // The folder, opened again, shows the same points.
        ScalingLab again;
        QVERIFY(again.openSweep(lab.folder()));
        QCOMPARE(int(again.results().size()), 3);
        QCOMPARE(again.results()[1].measured.examples, lab.results()[1].measured.examples);
        QVERIFY(!again.openSweep(runs_.path()));
        QVERIFY(again.statusText().contains("sweep.json: cannot read it"));
    }

    // Model parallelism in the lab: N towers also run as N CPU stages with a schedule; the
    // predictor draws the pipeline (its stages measured here) beside the measured dot.
    void pipelinesSweptAndPredicted() {
        ScalingLab lab;
        lab.setBase(tinyBase());
        lab.towersEdit()->setText("2");
        lab.strategyBox("mean")->setChecked(false);
        lab.strategyBox("allreduce")->setChecked(false);
        lab.strategyBox("pipeline")->setChecked(true);
        lab.findChild<QComboBox*>("sweepSchedule")->setCurrentText("gpipe");
        lab.findChild<QSpinBox*>("sweepMicroBatches")->setValue(2);
        lab.warmupBox()->setValue(2);
        lab.stepsBox()->setValue(6);
        lab.show();
        QTest::mouseClick(lab.startButton(), Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(!lab.running(), 60000);
        QVERIFY2(lab.statusText().startsWith("Finished: 2 points"), qPrintable(lab.statusText()));
        QCOMPARE(lab.table()->item(1, 0)->text(), QString("2 stages, gpipe:2"));
        QCOMPARE(lab.results()[1].point.config.stages, std::string("2"));
        QCOMPARE(lab.results()[1].point.config.batch, 32);  // the stages share one tower's batch
        QVERIFY(lab.predicted("gpipe:2", 2) > 0);
        QVERIFY2(lab.table()->item(1, 2)->text() != "-", "no prediction beside the measured pipeline");
        QStringList names;
        for (int i = 0; i < lab.rateChart()->graphCount(); ++i)
            names << lab.rateChart()->graph(i)->name() + (lab.rateChart()->graph(i)->lineStyle() == QCPGraph::lsNone ? " dots" : "");
        QVERIFY2(names.contains("gpipe pipeline, M = 2 (stages) dots") && names.contains("gpipe pipeline, M = 2 (stages)"),
                 qPrintable(names.join(" | ")));
        QVERIFY2(lab.bottleneckLabel()->text().contains("2 stages x 1 thread, gpipe:2: the bubble idles the stages"),
                 qPrintable(lab.bottleneckLabel()->text()));
        QVERIFY(lab.assumptionsLabel()->text().contains("Pipelines:"));
        // Micro-batches that do not divide the batch: refused before any point, in the window.
        lab.findChild<QSpinBox*>("sweepMicroBatches")->setValue(5);
        QTest::mouseClick(lab.startButton(), Qt::LeftButton);
        QVERIFY(!lab.running());
        QVERIFY2(lab.statusText().contains("--micro-batches 5 does not divide --batch 32"), qPrintable(lab.statusText()));
    }

    // A sweep of towers sharing a GPU (made by towerbench-run scale on a GPU machine) opens with
    // each point's speedup over its own place's one tower, the predictor calibrated from all its
    // points there (it gives back each point it was calibrated from), and says so.
    void gpuSweepOpensWithItsOwnBaselines() {
        const QString folder = runs_.filePath("gpu-sweep");
        QVERIFY(QDir().mkpath(folder));
        nlohmann::json points = nlohmann::json::array();
        // towers, strategy, examples/sec, compute, reduce (ms): the shape an H100 measured.
        const std::tuple<int, const char*, double, double, double> measured[] = {
            {1, "mean", 58549, 0.88, 0.95}, {1, "allreduce", 128336, 0.88, 0}, {2, "allreduce", 141770, 1.54, 0.08},
            {4, "mean", 78126, 2.64, 2.51}, {4, "allreduce", 153767, 2.82, 0.14}};
        for (const auto& [n, strategy, rate, compute, reduce] : measured) {
            tb::RunConfig c = tinyBase();
            c.towers = "gpu:0*" + std::to_string(n);
            c.batchPerTower = 128;
            c.batch = 128 * n;
            tb::StepProfile m;
            m.steps = 100;
            m.examples = 100 * 128 * n;
            m.examplesPerSec = rate;
            m.seconds = m.examples / rate;
            m.compute = compute * 1e-3;
            m.reduce = reduce * 1e-3;
            m.apply = 0.05e-3;
            points.push_back({{"towers", n}, {"strategy", strategy}, {"config", c.toJson()}, {"measured", m.toJson()}});
        }
        const nlohmann::json sweep = {{"params", 3274634}, {"host", {{"flops", 1e11}, {"bandwidth", 1e10}}}, {"cores", 16},
                                      {"settings", {{"strategies", {"mean", "allreduce"}}}}, {"points", points}};
        QFile f(folder + "/sweep.json");
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray::fromStdString(sweep.dump()));
        f.close();

        ScalingLab lab;
        QVERIFY2(lab.openSweep(folder), qPrintable(lab.statusText()));
        QVERIFY(lab.hardwareBox()->itemText(0).contains("the sweep's GPU"));
        const QTableWidget* t = lab.table();
        QCOMPARE(t->rowCount(), 5);
        QCOMPARE(t->item(1, 0)->text(), QString("1 tower, variables on the GPU"));
        QCOMPARE(t->item(1, 4)->text(), QString("1.00x"));  // its own place's baseline (was 2.19x)
        QCOMPARE(t->item(2, 4)->text(), QString("%1x").arg(141770 / 128336.0, 0, 'f', 2));
        QCOMPARE(t->item(3, 4)->text(), QString("%1x").arg(78126 / 58549.0, 0, 'f', 2));
        for (int row : {0, 1, 3, 4})  // the points it was calibrated from, given back
            QVERIFY2(t->item(row, 3)->text() == "0.0%" || t->item(row, 3)->text() == "-0.0%",
                     qPrintable(t->item(row, 0)->text() + ": " + t->item(row, 3)->text()));
        QVERIFY(qAbs(lab.predicted("allreduce", 4) / 153767 - 1) < 1e-9);
        QVERIFY(lab.assumptionsLabel()->text().contains("every point of the sweep on gpu:0"));
    }

    // The lab on the machine it measured (issue 31, point 6): a sweep recorded on a 2-core AMD
    // EPYC (mlp on Fashion-MNIST, 1, 2, 4 towers x 4 strategies) opens with the serial share
    // fitted to it, predicts its own points within 15% on average (it was 16.2% with the assumed
    // 0.1), says what the towers beyond the cores add in numbers, and draws the dotted ideal on
    // this machine and on other hardware (it was drawn on this machine only).
    void labOnTheMachineItMeasured() {
        ScalingLab lab;
        lab.resize(1366, 768);
        lab.show();
        QVERIFY2(lab.openSweep(tbtest::sourcePath("tests/reference/sweep-mlp-2core")), qPrintable(lab.statusText()));
        QVERIFY2(lab.assumptionsLabel()->text().contains("fitted to the sweep's 5 points of 1 and 2 threads per tower"),
                 qPrintable(lab.assumptionsLabel()->text()));
        QVERIFY2(lab.serialShareBox()->value() > 0.4 && lab.serialShareBox()->value() < 0.5,
                 qPrintable(QString::number(lab.serialShareBox()->value())));
        const QTableWidget* t = lab.table();
        QCOMPARE(t->rowCount(), 9);
        double sum = 0;
        for (int row = 1; row < 9; ++row) {
            QString e = t->item(row, 3)->text();
            QVERIFY2(e.endsWith('%'), qPrintable(e));
            sum += std::abs(e.chopped(1).toDouble());
        }
        QVERIFY2(sum / 8 <= 15, qPrintable(QString("mean |error| %1%").arg(sum / 8)));
        QVERIFY2(lab.assumptionsLabel()->text().contains("Against this sweep: mean |error| "),
                 qPrintable(lab.assumptionsLabel()->text()));
        QVERIFY2(lab.bottleneckLabel()->text().contains("4 threads share 2 cores: the towers beyond 2 towers "),
                 qPrintable(lab.bottleneckLabel()->text()));
        // The ideal: N x one tower on the rate chart, a speedup of N beside it, in both modes.
        auto ideal = [](QCustomPlot* p, const QString& name) -> QCPGraph* {
            for (int i = 0; i < p->graphCount(); ++i)
                if (p->graph(i)->name() == name) return p->graph(i);
            return nullptr;
        };
        for (const char* hardware : {"", "h100"}) {
            lab.hardwareBox()->setCurrentIndex(*hardware ? lab.hardwareBox()->findData(hardware) : 0);
            const int maxN = lab.maxTowersBox()->value();
            QCPGraph* rate = ideal(lab.rateChart(), "ideal (N x one tower)");
            QCPGraph* speedup = ideal(lab.speedupChart(), "ideal");
            QVERIFY2(rate && speedup, hardware);
            QCOMPARE(rate->data()->size(), maxN);
            QCOMPARE(speedup->data()->size(), maxN);
            QCOMPARE(speedup->data()->at(maxN - 1)->value, double(maxN));
            const double one = rate->data()->at(0)->value;
            QVERIFY(one > 0);
            QVERIFY(qAbs(rate->data()->at(maxN - 1)->value - maxN * one) < 1e-6 * one);
        }
    }

    void badTowersAreRefusedInTheWindow() {
        ScalingLab lab;
        lab.setBase(tinyBase());
        lab.towersEdit()->setText("1,two");
        QTest::mouseClick(lab.startButton(), Qt::LeftButton);
        QVERIFY(!lab.running());
        QCOMPARE(lab.statusText(), QString("Towers: 'two' is not a whole number"));
        // A setting the async points cannot take is refused before any point runs.
        tb::RunConfig ema = tinyBase();
        ema.emaDecay = 0.99;
        lab.setBase(ema);
        lab.towersEdit()->setText("1,2");
        lab.strategyBox("async")->setChecked(true);
        QTest::mouseClick(lab.startButton(), Qt::LeftButton);
        QVERIFY(!lab.running());
        QVERIFY2(lab.statusText().startsWith("--sweep-strategies: async cannot keep the weights' moving average"),
                 qPrintable(lab.statusText()));
        lab.setBase(tinyBase());
        lab.towersEdit()->setText("1,100");
        QTest::mouseClick(lab.startButton(), Qt::LeftButton);
        QVERIFY(!lab.running());
        QVERIFY2(lab.statusText().startsWith("--sweep-towers: 100 towers"), qPrintable(lab.statusText()));
    }

    // The lab opened from the window on settings whose model cannot take the data refuses the sweep
    // before its first point loads them, in the form's words (it measured nothing and said
    // "The sweep failed: --model: ..."; seen failing so); a point that fails while it runs is
    // said in the form's words too; a flag the form has no field for is left as written.
    void aModelThatCannotTakeTheDataIsRefusedBeforeTheFirstPoint() {
        MainWindow w(tbtest::fakeCatalog(0), noTelemetry());
        tb::RunConfig c = tinyBase();
        c.model = "mlp";  // (1, 28, 28); the blobs are (2, 1, 1) points
        w.experiment()->setConfig(c);
        ScalingLab* lab = w.openScalingLab();
        lab->towersEdit()->setText("1,100");  // a flag the form has no field for stays as written
        QTest::mouseClick(lab->startButton(), Qt::LeftButton);
        QVERIFY2(lab->statusText().startsWith("--sweep-towers: 100 towers"), qPrintable(lab->statusText()));
        lab->towersEdit()->setText("1");
        QTest::mouseClick(lab->startButton(), Qt::LeftButton);
        QVERIFY(!lab->running());
        QCOMPARE(lab->statusText(), QStringLiteral("Model: mlp expects input (1, 28, 28) but Data synthetic:blobs gives (2, 1, 1)"));
        QTemporaryDir dir;  // an image folder of one class: found only when a point loads it
        QVERIFY(QDir(dir.path()).mkdir("cats"));
        c.data = "folder:" + dir.path().toStdString();
        w.experiment()->setConfig(c);
        lab = w.openScalingLab();
        QTest::mouseClick(lab->startButton(), Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(!lab->running(), 20000);
        QVERIFY2(lab->statusText().startsWith("The sweep failed: Data folder:" + dir.path() + ": 1 class folder in"),
                 qPrintable(lab->statusText()));
    }

    // Stop mid-sweep: the point in progress ends at its step, the rest are skipped, the folder
    // says "stopped" and keeps what was measured.
    void stopKeepsThePointsMeasured() {
        ScalingLab lab;
        tb::RunConfig base = tinyBase();
        lab.setBase(base);
        lab.towersEdit()->setText("1,2");
        lab.strategyBox("async")->setChecked(true);
        lab.warmupBox()->setValue(2);
        lab.stepsBox()->setValue(200000);
        QTest::mouseClick(lab.startButton(), Qt::LeftButton);
        // Stopped once the first point has steps measured after its 2 warm-up steps (its step
        // lines in the sweep folder): a fixed 1.5 s wait left little margin under ASan beside
        // another test, as the sweep first times the host's core and builds the point's trainer.
        const auto stepLines = [&] {
            const QDir points(lab.folder() + "/points");
            const QStringList first = points.entryList({QStringLiteral("01-*.jsonl")}, QDir::Files);
            return first.isEmpty() ? 0 : int(tbtest::readFile(points.filePath(first[0])).count("\"type\":\"step\""));
        };
        QTRY_VERIFY_WITH_TIMEOUT(stepLines() >= 4, 30000);
        lab.stopSweep();
        QTRY_VERIFY_WITH_TIMEOUT(!lab.running(), 30000);
        QVERIFY2(lab.statusText().startsWith("Stopped; 1 points kept"), qPrintable(lab.statusText()));
        QFile run(lab.folder() + "/run.json");
        QVERIFY(run.open(QIODevice::ReadOnly));
        QVERIFY(run.readAll().contains("\"state\": \"stopped\""));
        // The stop was this sweep's: the next one runs to its end (it began stopped before).
        lab.stepsBox()->setValue(4);
        QTest::mouseClick(lab.startButton(), Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(!lab.running(), 60000);
        QVERIFY2(lab.statusText().startsWith("Finished: 4 points"), qPrintable(lab.statusText()));  // 1 tower; 2 x mean, allreduce, async
    }

    // The runs list shows a sweep's folder, and Show sweep opens it in the lab.
    void runsListOpensTheLab() {
        MainWindow w(tbtest::fakeCatalog(0), noTelemetry());
        w.runsPanel()->refresh();
        const auto& runs = w.runsPanel()->runs();
        int row = -1;
        for (size_t i = 0; i < runs.size(); ++i)
            if (runs[i].plan.starts_with("scaling sweep, 3 points")) row = int(i);
        QVERIFY(row >= 0);
        w.runsPanel()->select({QString::fromStdString(runs[size_t(row)].path)});
        QPushButton* button = nullptr;
        for (QPushButton* b : w.runsPanel()->findChildren<QPushButton*>())
            if (b->text() == "Show sweep") button = b;
        QVERIFY(button);
        button->click();
        ScalingLab* lab = w.findChild<ScalingLab*>();
        QVERIFY(lab && lab->isVisible());
        QCOMPARE(int(lab->results().size()), 3);
    }

    // Two sweeps compared: examples/sec and efficiency against towers, a line per strategy of
    // each, with the points each measured.
    void sweepsCompare() {
        QStringList sweeps;
        for (const QFileInfo& f : QDir(runs_.path()).entryInfoList(QDir::Dirs | QDir::NoDotAndDotDot))
            if (QFile::exists(f.filePath() + "/sweep.json")) sweeps << f.filePath();
        QVERIFY(sweeps.size() >= 2);
        CompareDialog d(sweeps);
        QCOMPARE(tb::ui::chartTitle(d.lossPlot())->text(), QString("Examples/sec by towers"));
        QStringList names;
        int points = 0;
        for (int i = 0; i < d.lossPlot()->graphCount(); ++i) {
            names << d.lossPlot()->graph(i)->name();
            points += d.lossPlot()->graph(i)->dataCount();
        }
        QVERIFY2(names.join('|').contains(": mean") && names.join('|').contains(": async"), qPrintable(names.join('|')));
        QVERIFY(points >= 4);  // the full sweep: 1 tower in each of its two lines, 2 towers in each
        QCOMPARE(d.accuracyPlot()->graphCount(), d.lossPlot()->graphCount());
        // A sweep beside a training run is not compared: the dialog drew the run's loss and an
        // empty legend entry for the sweep, over the sweep's base settings.
        tb::RunConfig c = tinyBase();
        c.steps = 3;
        const QString run = runs_.path() + "/a-run";
        {
            auto folder = tb::RunFolder::create(c, run.toStdString());
            tb::Trainer t(c);
            t.setRunFolder(folder.get());
            t.run();
        }
        RunsPanel panel(runs_.path());
        panel.select({sweeps[0], run});
        QCOMPARE(panel.selectedFolders().size(), 2);
        QVERIFY(!panel.compareButton()->isEnabled());
        QVERIFY2(panel.compareButton()->toolTip().contains("sweeps with sweeps"), qPrintable(panel.compareButton()->toolTip()));
        panel.select({sweeps[0], sweeps[1]});
        QVERIFY(panel.compareButton()->isEnabled());
        QDir(run).removeRecursively();
    }

    // Lesson 6's verdict on the pipeline: where it idles less than naive stages but is not faster
    // by as much (2 cores: 1,933 examples/s both ways, idle 50.2% and 21.1%), it says why with
    // each stage's work per step; where the bubble's promise holds, it adds nothing.
    void pipelineVerdictExplainsAShortfall() {
        const QString shortfall = ParallelismLesson::pipelineVerdict(1932.5, 0.5017, 1932.8, 0.2106, 128, 4);
        QVERIFY2(shortfall.contains("trained 1,933 examples/s, 1.00x naive's") &&
                     shortfall.contains("yet 1.00x naive's where the smaller bubble alone would give 1.58x") &&
                     shortfall.contains("grew from 33.0 to 52.3 ms") && shortfall.contains("matrix products of 32 rows"),
                 qPrintable(shortfall));
        QVERIFY(ParallelismLesson::pipelineVerdict(1932.5, 0.5017, 1700, 0.2106, 128, 4).contains("yet slower here"));
        const QString kept = ParallelismLesson::pipelineVerdict(1932.5, 0.5017, 2900, 0.2106, 128, 4);
        QVERIFY2(kept.contains("1.50x naive's") && !kept.contains("Less idle"), qPrintable(kept));
    }

    // Lesson 5's twelve runs each drawn their own way (a colour per number of towers, a dash and a
    // marker per variant: ten colours repeated three pairs), on accuracy's axis before any point.
    void comparisonLessonKeysEachRun() {
        const Lesson l = lessons(2)[4];
        ComparisonLesson lesson(l);
        auto* chart = lesson.findChild<QCustomPlot*>("lessonAccuracy");
        QVERIFY(chart);
        QCOMPARE(chart->graphCount(), 12);
        QSet<QString> looks;
        for (int i = 0; i < chart->graphCount(); ++i) {
            const QCPGraph* g = chart->graph(i);
            looks << QStringLiteral("%1 %2 %3").arg(g->pen().color().name()).arg(int(g->pen().style())).arg(int(g->scatterStyle().shape()));
        }
        QCOMPARE(looks.size(), 12);
        QCOMPARE(chart->yAxis->range().lower, 0.0);
        QCOMPARE(chart->yAxis->range().upper, 1.0);
        QCOMPARE(chart->xAxis->range().upper, l.compare[0].config.epochs);
    }

    // Every lesson's experiment is one the engine takes, and choosing it fills the form.
    void lessonsSetUpTheirExperiments() {
        const std::vector<Lesson> all = lessons(2);
        QCOMPARE(int(all.size()), 7);
        for (const Lesson& l : all) {
            l.config.validate();
            // Data parallelism's lessons have towers; lesson 6 splits one model into stages.
            QVERIFY2(l.threeWays ? !l.config.stages.empty() : tb::makePlan(l.config).towerCount() >= 2, qPrintable(l.title));
            QVERIFY(l.text.size() > 300);
            for (const LessonRun& r : l.compare) r.config.validate();  // lessons 5 and 7's runs
        }
        QVERIFY(all[1].sideBySide && !all[0].sideBySide);
        QVERIFY(all[5].threeWays && !all[5].sideBySide);
        QCOMPARE(int(all[4].compare.size()), 12);  // 1, 2, 4, 8 towers x as given, scaled, scaled + warm-up
        QCOMPARE(all[4].compare[11].config.lrScaling, std::string("linear"));
        QVERIFY(all[4].compare[11].config.warmupSteps > 0);
        QCOMPARE(int(all[6].compare.size()), 3);
        QVERIFY(all[6].compare[2].config.syncBn && !all[6].compare[1].config.syncBn);
        MainWindow w(tbtest::fakeCatalog(0), noTelemetry());
        w.show();
        QVERIFY(!w.openLesson(2));
        QCOMPARE(w.experiment()->config().variables, std::string("replicated"));
        QCOMPARE(w.experiment()->config().reduce, std::string("allreduce"));
        QVERIFY(w.lessonDock()->isVisible());
        QVERIFY(w.lessonPanel()->title().startsWith("3. All-reduce"));
        QVERIFY(!w.openLesson(3));
        QCOMPARE(w.experiment()->config().averageEvery, 8);
        QVERIFY(w.openLesson(1));
    }

    // Lesson 2's window with a small experiment: both runs end, both curves are drawn, and the
    // histogram counts every asynchronous push.
    void syncAndAsyncSideBySide() {
        Lesson l = lessons(2)[1];
        l.config.model = "tiny_mlp";
        l.config.data = "synthetic:spirals";
        l.config.validation = 200;
        l.config.steps = 120;
        l.config.evalEvery = 20;
        l.config.batchPerTower = 16;
        l.config.batch = 64;
        SyncAsyncLesson lesson(l);
        lesson.show();
        lesson.startButton()->click();
        QVERIFY(lesson.running());
        QTRY_VERIFY_WITH_TIMEOUT(!lesson.running(), 60000);
        QVERIFY2(lesson.summary()->text().contains("synchronous: test accuracy") &&
                     lesson.summary()->text().contains("mean staleness"),
                 qPrintable(lesson.summary()->text()));
        QVERIFY(lesson.validationPoints(0) >= 6);  // every 20 of 120 steps
        QVERIFY2(lesson.validationPoints(1) >= 6, qPrintable(QString::number(lesson.validationPoints(1)) + lesson.summary()->text()));  // every 80 of 480 updates (the same examples)
        int64_t pushes = 0;
        for (const auto& [staleness, n] : lesson.stalenessCounts()) pushes += n;
        QCOMPARE(pushes, int64_t(480));
        QVERIFY(lesson.stalenessCounts().rbegin()->first >= 3);  // the slow tower's pushes are stale
    }

    // Lesson 6's window on a small model: the three ways run one after another, each to its end;
    // the naive stages idle about half of each step, the pipeline less; the conclusion quotes
    // the three measured rates; the timelines have a lane per stage with blocks.
    void dataModelPipelineOneAfterAnother() {
        Lesson l = lessons(2)[5];
        l.config.model = "mlp";
        l.config.data = "idx:" + std::string(TB_SOURCE_DIR) + "/samples/fashion-mnist-slice";
        l.config.steps = 30;
        l.config.batch = 64;
        ParallelismLesson lesson(l);
        QCOMPARE(lesson.config(0).stages, std::string());
        QCOMPARE(lesson.config(1).pipeline, std::string());
        QCOMPARE(lesson.config(2).pipeline, std::string("1f1b"));
        lesson.show();
        // Before the runs, the stages' timelines already key the pipeline's phases (they showed the
        // towers' data, wait, reduce... until their first step).
        QVERIFY(!lesson.timeline(0)->pipeline());
        QVERIFY(lesson.timeline(1)->pipeline() && lesson.timeline(2)->pipeline());
        QCOMPARE(int(lesson.timeline(2)->legendLabels().size()), tb::ui::kPipelinePhaseCount);
        lesson.startButton()->click();
        QVERIFY(lesson.running());
        QTRY_VERIFY_WITH_TIMEOUT(!lesson.running(), 120000);
        const QString text = lesson.conclusion()->text();
        QVERIFY2(text.contains("Naive model parallelism") && text.contains("1f1b pipeline"), qPrintable(text));
        QVERIFY2(text.contains("puts one H100 at") && text.contains("on two H100s joined by NVLink at"), qPrintable(text));
        for (int i = 0; i < ParallelismLesson::kWays; ++i)
            QVERIFY2(lesson.result(i)->text().contains("examples/s"), qPrintable(lesson.result(i)->text()));
        QVERIFY2(lesson.result(1)->text().contains("equal stages: 50.0%"), qPrintable(lesson.result(1)->text()));
        QVERIFY2(lesson.result(2)->text().contains("equal stages: 20.0%"), qPrintable(lesson.result(2)->text()));
        QVERIFY(!lesson.timeline(0)->pipeline());
        QVERIFY(lesson.timeline(1)->pipeline() && lesson.timeline(2)->pipeline());
        QVERIFY(lesson.timeline(2)->blocks().size() >= 16);  // a step's 4 forwards and 4 backwards on each stage
    }

private:
    QTemporaryDir runs_;
};

QTEST_MAIN(UiScalingTest)
#include "tst_ui_scaling.moc"
