#include "lessons/comparison_lesson.hpp"

#include <algorithm>

#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include "charts/chart_style.hpp"
#include "lessons/lesson_runner.hpp"
#include "view_format.hpp"

ComparisonLesson::ComparisonLesson(const Lesson& lesson, QWidget* parent)
    : LessonWindow(QSize(1300, 760), parent), runs_(lesson.compare), conclude_(lesson.conclude) {
    setObjectName("comparisonLesson");
    setWindowTitle(lesson.title + QStringLiteral(" — Towerbench"));
    results_.assign(runs_.size(), {});

    chart_ = tb::ui::makeChart(this, "lessonAccuracy", tr("Validation accuracy of each run"), tr("epochs"),
                               tr("accuracy"));
    chart_->xAxis->setTicker(QSharedPointer<tb::ui::LocaleTicker>::create());
    // A colour per setup of towers, a dash and a marker per variant of it (lesson 5: 1, 2, 4 and 8
    // towers, each as given, scaled and scaled with a warm-up): twelve runs in ten colours drew
    // three pairs alike.
    const Qt::PenStyle dashes[] = {Qt::SolidLine, Qt::DashLine, Qt::DotLine, Qt::DashDotLine};
    const QCPScatterStyle::ScatterShape marks[] = {QCPScatterStyle::ssDisc, QCPScatterStyle::ssSquare,
                                                   QCPScatterStyle::ssTriangle, QCPScatterStyle::ssDiamond};
    std::vector<std::string> setups;
    std::vector<int> variants;
    for (size_t i = 0; i < runs_.size(); ++i) {
        const std::string& towers = runs_[i].config.towers;
        const size_t setup = size_t(std::find(setups.begin(), setups.end(), towers) - setups.begin());
        if (setup == setups.size()) setups.push_back(towers), variants.push_back(0);
        const int variant = variants[setup]++;
        QCPGraph* g = chart_->addGraph();
        g->setName(runs_[i].name);
        g->setPen(QPen(tb::ui::towerColour(int(setup)), 2, dashes[variant % 4]));
        g->setScatterStyle(QCPScatterStyle(marks[variant % 4], 6));
    }
    chart_->legend->setVisible(true);
    clearChart();
    tb::ui::applyChartTheme(chart_, palette());

    table_ = new QTableWidget(int(runs_.size()), 5);
    table_->setObjectName("lessonResults");
    table_->setHorizontalHeaderLabels(
        {tr("Run"), tr("Test accuracy"), tr("Best validation"), tr("Examples/sec"), tr("Training time")});
    table_->verticalHeader()->setVisible(false);
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
    for (int c = 1; c < 5; ++c) table_->horizontalHeader()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
    for (int i = 0; i < int(runs_.size()); ++i) showRow(i);

    const LessonColumn column = makeLessonColumn(
        lesson, tr("Run the %1, one after another").arg(runs_.size()),
        tr("Press Run: each trains alone on the cores (%1 on %2), and its numbers fill the table as it ends.")
            .arg(QString::fromStdString(lesson.config.model), QString::fromStdString(lesson.config.data)),
        QStringLiteral("lessonConclusion"));
    start_ = column.start;
    stop_ = column.stop;
    conclusion_ = column.result;
    auto* right = new QVBoxLayout;
    right->addWidget(chart_, 3);
    right->addWidget(table_, 2);
    right->addWidget(conclusion_);
    auto* layout = new QHBoxLayout(this);
    layout->addLayout(column.layout, 1);
    layout->addLayout(right, 2);
    connect(start_, &QPushButton::clicked, this, &ComparisonLesson::start);
    connect(stop_, &QPushButton::clicked, this, &ComparisonLesson::stop);

    runner_ = new LessonRunner(this);
    connect(runner_, &LessonRunner::runStarting, this, [this](int run) {
        epochOf_.clear();
        table_->setItem(run, 1, new QTableWidgetItem(tr("training…")));
    });
    connect(runner_, &LessonRunner::stepsReady, this, &ComparisonLesson::takeSteps);
    connect(runner_, &LessonRunner::evaluated, this, [this](const tb::EvalResult& r) {
        evaluated(r.accuracy, r.step, r.split == "validation");
    });
    connect(runner_, &LessonRunner::runFinished, this, &ComparisonLesson::finish);
    connect(runner_, &LessonRunner::allFinished, this, [this] {
        start_->setEnabled(true);
        stop_->setEnabled(false);
        conclusion_->setText(conclude_ ? conclude_(runs_, results_) : QString());
    });
}

bool ComparisonLesson::running() const { return runner_->running(); }

void ComparisonLesson::start() {
    if (running()) return;
    results_.assign(runs_.size(), {});
    clearChart();
    for (int i = 0; i < int(runs_.size()); ++i) showRow(i);
    start_->setEnabled(false);
    stop_->setEnabled(true);
    conclusion_->setText(tr("Training the runs one after another…"));
    std::vector<tb::RunConfig> configs;
    for (const LessonRun& r : runs_) configs.push_back(r.config);
    runner_->start(std::move(configs));
}

// No points, and the axes of what is to come: accuracy from 0 to 1 over the runs' epochs (before,
// QCustomPlot's default 0 to 5 on both).
void ComparisonLesson::clearChart() {
    for (int i = 0; i < chart_->graphCount(); ++i) chart_->graph(i)->data()->clear();
    double epochs = 0;
    for (const LessonRun& r : runs_) epochs = std::max(epochs, r.config.epochs);
    chart_->xAxis->setRange(0, epochs > 0 ? epochs : 1);
    chart_->yAxis->setRange(0, 1);
    tb::ui::fitToSize(chart_);
    chart_->replot();
}

void ComparisonLesson::stop() { runner_->stop(); }

void ComparisonLesson::abortRuns() { runner_->abort(); }

void ComparisonLesson::takeSteps() {
    for (const tb::StepMetrics& m : runner_->takeSteps()) epochOf_[m.step] = m.epoch;
}

void ComparisonLesson::evaluated(double accuracy, int64_t step, bool validation) {
    const int run = runner_->current();
    if (run < 0 || !validation) return;
    LessonResult& r = results_[size_t(run)];
    r.validationAccuracy = std::max(r.validationAccuracy, accuracy);
    const auto it = epochOf_.find(step);
    if (it == epochOf_.end()) return;  // (an evaluation before any step: nothing to place it at)
    chart_->graph(run)->addData(it->second, accuracy);
    chart_->rescaleAxes();
    chart_->yAxis->setRange(std::max(0.0, chart_->yAxis->range().lower - 0.02), std::min(1.0, chart_->yAxis->range().upper + 0.02));
    tb::ui::fitToSize(chart_);
    chart_->replot();
}

void ComparisonLesson::finish(int run, const QString& summaryJson, bool stopped, const QString& error) {
    LessonResult& r = results_[size_t(run)];
    r.stopped = stopped;
    r.failure = error;
    if (error.isEmpty()) {
        const QJsonObject o = QJsonDocument::fromJson(summaryJson.toUtf8()).object();
        r.testAccuracy = o.value("test_accuracy").toDouble(-1);
        r.examplesPerSec = o.value("steady_examples_per_sec").toDouble(o.value("examples_per_sec").toDouble(-1));
        r.seconds = o.value("train_seconds").toDouble(-1);
        if (o.contains("validation_accuracy"))
            r.validationAccuracy = std::max(r.validationAccuracy, o.value("validation_accuracy").toDouble(-1));
    }
    showRow(run);
}

void ComparisonLesson::showRow(int run) {
    const LessonResult& r = results_[size_t(run)];
    const auto percent = [](double a) { return a >= 0 ? tb::ui::groupedLocale().toString(100 * a, 'f', 2) + "%" : QString(); };
    const QString cells[] = {runs_[size_t(run)].name,
                             !r.failure.isEmpty() ? tr("failed: %1").arg(r.failure)
                             : r.stopped          ? tr("stopped")
                                                  : percent(r.testAccuracy),
                             percent(r.validationAccuracy),
                             r.examplesPerSec >= 0 ? tb::ui::formatCount(r.examplesPerSec) : QString(),
                             r.seconds >= 0 ? tb::ui::groupedLocale().toString(r.seconds, 'f', 1) + " s" : QString()};
    for (int c = 0; c < 5; ++c) {
        auto* item = new QTableWidgetItem(cells[c]);
        if (c > 0) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
        table_->setItem(run, c, item);
    }
}
