#include "lessons/sync_async_lesson.hpp"

#include <qcustomplot.h>

#include <QGridLayout>
#include <QHBoxLayout>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QPushButton>
#include <QScreen>
#include <QTextBrowser>
#include <QThread>
#include <QVBoxLayout>

#include "charts/chart_style.hpp"
#include "window/engine_worker.hpp"
#include "window/frame_gate.hpp"

SyncAsyncLesson::SyncAsyncLesson(const Lesson& lesson, QWidget* parent) : LessonWindow(QSize(1300, 800), parent) {
    setObjectName("syncAsyncLesson");
    setWindowTitle(lesson.title + QStringLiteral(" — Towerbench"));
    EngineWorker::registerTypes();
    sides_[0].name = tr("synchronous");
    sides_[0].config = lesson.config;
    sides_[0].config.update = "sync";
    sides_[1].name = tr("asynchronous");
    sides_[1].config = lesson.config;
    sides_[1].config.update = "async";
    // The same examples: an asynchronous update is one tower's batch, a step all of theirs, so the
    // asynchronous run evaluates every towers x as many updates.
    const int towers = int(std::count(lesson.config.towers.begin(), lesson.config.towers.end(), ',')) + 1;
    sides_[1].config.evalEvery = lesson.config.evalEvery * towers;
    sides_[1].config.steps = lesson.config.steps * towers;  // a lesson given in steps, not epochs

    byTime_ = tb::ui::makeChart(this, "lessonByTime", tr("Validation accuracy against time"), tr("seconds"), tr("accuracy"));
    byTime_->xAxis->setTicker(QSharedPointer<tb::ui::LocaleTicker>::create());
    bySteps_ = tb::ui::makeChart(this, "lessonBySteps", tr("Against steps (async: updates)"), tr("steps / updates"),
                                 tr("accuracy"));
    staleness_ = tb::ui::makeChart(this, "lessonStaleness", tr("Staleness of the asynchronous pushes"),
                                   tr("updates applied since the pull"), tr("pushes"));
    const QColor colours[2] = {tb::ui::kBlue, tb::ui::kOrange};
    for (int i = 0; i < 2; ++i) {
        Side& s = sides_[size_t(i)];
        s.time = byTime_->addGraph();
        s.steps = bySteps_->addGraph();
        for (QCPGraph* g : {s.time, s.steps}) {
            g->setName(s.name);
            g->setPen(QPen(colours[i], 2));
            g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 5));
        }
    }
    for (QCustomPlot* p : {byTime_, bySteps_}) {
        p->legend->setVisible(true);
        hints_.push_back(tb::ui::addEmptyHint(p, tr("Start both: the two runs' validation accuracy appears here.")));
    }
    bars_ = new QCPBars(staleness_->xAxis, staleness_->yAxis);
    bars_->setBrush(tb::ui::kOrange);
    bars_->setPen(QPen(tb::ui::kOrange.darker(130)));
    for (QCustomPlot* p : {byTime_, bySteps_, staleness_}) tb::ui::applyChartTheme(p, palette());

    const LessonColumn column = makeLessonColumn(lesson, tr("Start both"),
                                                 tr("Both runs: %1, %2 towers, tower 3 slowed x4, seed %3, one epoch each.")
                                                     .arg(QString::fromStdString(lesson.config.model))
                                                     .arg(towers)
                                                     .arg(lesson.config.seed),
                                                 QStringLiteral("lessonSummary"));
    start_ = column.start;
    stop_ = column.stop;
    summary_ = column.result;
    QVBoxLayout* left = column.layout;
    left->addWidget(summary_);
    auto* grid = new QGridLayout;
    grid->addWidget(byTime_, 0, 0);
    grid->addWidget(bySteps_, 0, 1);
    grid->addWidget(staleness_, 1, 0, 1, 2);
    grid->setColumnStretch(0, 1);
    grid->setColumnStretch(1, 1);
    auto* layout = new QHBoxLayout(this);
    layout->addLayout(left, 1);
    layout->addLayout(grid, 3);
    replot();  // the empty charts' axes: accuracy 0-1, the runs' steps
    connect(start_, &QPushButton::clicked, this, &SyncAsyncLesson::start);
    connect(stop_, &QPushButton::clicked, this, &SyncAsyncLesson::stop);

    for (int i = 0; i < 2; ++i) {
        Side& s = sides_[size_t(i)];
        s.thread = new QThread(this);
        s.worker = new EngineWorker;
        s.worker->moveToThread(s.thread);
        connect(s.thread, &QThread::finished, s.worker, &QObject::deleteLater);
        s.frames = new FrameGate([this, i] { takeSteps(i); }, this);
        connect(s.worker, &EngineWorker::stepsReady, s.frames, &FrameGate::request);
        connect(s.worker, &EngineWorker::evaluated, this, [this, i](const tb::EvalResult& r) { addEval(i, r); });
        connect(s.worker, &EngineWorker::finished, this,
                [this, i](const QString& summary, bool stopped) { finish(i, summary, stopped); });
        connect(s.worker, &EngineWorker::failed, this, [this, i](const QString& message) { finish(i, {}, false, message); });
        s.thread->start();
    }
}

SyncAsyncLesson::~SyncAsyncLesson() {
    for (Side& s : sides_) {
        s.worker->abort();
        s.thread->quit();
        s.thread->wait();
    }
}

bool SyncAsyncLesson::running() const { return sides_[0].running || sides_[1].running; }

int SyncAsyncLesson::validationPoints(int side) const { return sides_[size_t(side)].steps->dataCount(); }

void SyncAsyncLesson::start() {
    if (running()) return;
    counts_.clear();
    bars_->data()->clear();
    for (Side& s : sides_) {
        s.time->data()->clear();
        s.steps->data()->clear();
        s.elapsed.clear();
        s.lastElapsed = 0;
        s.outcome.clear();
        s.running = true;
        s.worker->expectRun();
        EngineWorker* w = s.worker;
        const tb::RunConfig c = s.config;
        QMetaObject::invokeMethod(w, [w, c] { w->run(c); }, Qt::QueuedConnection);  // on its thread
    }
    start_->setEnabled(false);
    stop_->setEnabled(true);
    showSummary();
    replot();
}

void SyncAsyncLesson::stop() {
    for (Side& s : sides_)
        if (s.running) s.worker->stop();
}

void SyncAsyncLesson::abortRuns() {
    for (Side& s : sides_)
        if (s.running) s.worker->abort();
}

void SyncAsyncLesson::takeSteps(int side) {
    Side& s = sides_[size_t(side)];
    for (const tb::StepMetrics& m : s.worker->takeSteps()) {
        s.elapsed[m.step] = m.elapsedSeconds;
        s.lastElapsed = m.elapsedSeconds;
        if (m.staleness >= 0) ++counts_[m.staleness];
    }
    if (side == 1) {
        bars_->data()->clear();
        int64_t most = 1;
        for (const auto& [staleness, n] : counts_) {
            bars_->addData(double(staleness), double(n));
            most = std::max(most, n);
        }
        staleness_->xAxis->setRange(-0.5, counts_.empty() ? 4.5 : double(counts_.rbegin()->first) + 0.5);
        staleness_->yAxis->setRange(0, double(most) * 1.1);
        tb::ui::fitToSize(staleness_);
        staleness_->replot();
    }
}

void SyncAsyncLesson::addEval(int side, const tb::EvalResult& r) {
    if (r.split != "validation") return;
    Side& s = sides_[size_t(side)];
    s.frames->flush();  // the steps before it, whose times it is placed by
    auto it = s.elapsed.find(r.step);
    const double t = it != s.elapsed.end() ? it->second : s.lastElapsed;
    s.time->addData(t, r.accuracy);
    s.steps->addData(double(r.step), r.accuracy);
    replot();
}

void SyncAsyncLesson::finish(int side, const QString& summaryJson, bool stopped, const QString& error) {
    Side& s = sides_[size_t(side)];
    s.frames->flush();  // its last steps, before the summary reads them
    s.running = false;
    if (!error.isEmpty()) {
        s.outcome = tr("%1: failed: %2").arg(s.name, error);
    } else {
        const QJsonObject o = QJsonDocument::fromJson(summaryJson.toUtf8()).object();
        s.outcome = tr("%1: test accuracy %2% after %3 %4 in %5 s%6%7")
                        .arg(s.name)
                        .arg(100 * o.value("test_accuracy").toDouble(), 0, 'f', 1)
                        .arg(o.value("steps").toInteger())
                        .arg(side == 0 ? tr("steps") : tr("updates"))
                        .arg(o.value("train_seconds").toDouble(), 0, 'f', 1)
                        .arg(o.contains("mean_staleness") ? tr(", mean staleness %1").arg(o.value("mean_staleness").toDouble(), 0, 'f', 2)
                                                          : QString())
                        .arg(stopped ? tr(" (stopped)") : QString());
    }
    if (!running()) {
        start_->setEnabled(true);
        stop_->setEnabled(false);
    }
    showSummary();
}

void SyncAsyncLesson::showSummary() {
    QStringList lines;
    for (const Side& s : sides_) lines << (s.outcome.isEmpty() ? tr("%1: training…").arg(s.name) : s.outcome);
    summary_->setText(lines.join('\n'));
}

void SyncAsyncLesson::replot() {
    double tMax = 1, sMax = 1, lo = 1, hi = 0;
    for (const Side& s : sides_)
        for (auto it = s.time->data()->constBegin(); it != s.time->data()->constEnd(); ++it) {
            tMax = std::max(tMax, it->key);
            lo = std::min(lo, it->value);
            hi = std::max(hi, it->value);
        }
    for (const Side& s : sides_)
        if (!s.steps->data()->isEmpty()) sMax = std::max(sMax, (s.steps->data()->constEnd() - 1)->key);
    const bool empty = hi < lo;
    for (QCPItemText* hint : hints_) hint->setVisible(empty);
    byTime_->xAxis->setRange(0, tMax * 1.05);
    bySteps_->xAxis->setRange(0, sMax * 1.05);
    for (QCustomPlot* p : {byTime_, bySteps_}) {
        p->yAxis->setRange(empty ? QCPRange(0, 1) : QCPRange(std::max(0.0, lo - 0.05), std::min(1.0, hi + 0.05)));
        tb::ui::fitToSize(p);
        p->replot();
    }
}
