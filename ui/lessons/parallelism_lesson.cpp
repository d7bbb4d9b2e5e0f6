#include "lessons/parallelism_lesson.hpp"

#include <QGridLayout>
#include <QHBoxLayout>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QPushButton>
#include <QScreen>
#include <QTextBrowser>
#include <QVBoxLayout>

#include "devices/devices_panel.hpp"
#include "engine/pipeline_time_model.hpp"
#include "lessons/lesson_runner.hpp"
#include "view_format.hpp"

ParallelismLesson::ParallelismLesson(const Lesson& lesson, QWidget* parent) : LessonWindow(QSize(1300, 700), parent) {
    setObjectName("parallelismLesson");
    setWindowTitle(lesson.title + QStringLiteral(" — Towerbench"));
    // The lesson's config is the pipeline; the other two ways are it without micro-batches, and
    // without stages.
    tb::RunConfig one = lesson.config, naive = lesson.config;
    one.stages.clear();
    one.pipeline.clear();
    one.microBatches = 1;
    naive.pipeline.clear();
    naive.microBatches = 1;
    const std::array<QString, kWays> names = {tr("one device, %1 threads").arg(one.threads), tr("2 stages, naive"),
                                              tr("2 stages, 1f1b, %1 micro-batches").arg(lesson.config.microBatches)};
    const std::array<tb::RunConfig, kWays> configs = {one, naive, lesson.config};
    for (int i = 0; i < kWays; ++i) ways_[size_t(i)].name = names[size_t(i)], ways_[size_t(i)].config = configs[size_t(i)];

    const LessonColumn column =
        makeLessonColumn(lesson, tr("Run the three, one after another"),
                         tr("Press Run: each way trains %1 steps of %2 on batches of %3, alone on the cores.")
                             .arg(lesson.config.steps)
                             .arg(QString::fromStdString(lesson.config.model))
                             .arg(lesson.config.batch),
                         QStringLiteral("lessonConclusion"));
    start_ = column.start;
    stop_ = column.stop;
    conclusion_ = column.result;
    QVBoxLayout* left = column.layout;
    auto* grid = new QGridLayout;
    for (int i = 0; i < kWays; ++i) {
        Way& w = ways_[size_t(i)];
        auto* title = new QLabel(QStringLiteral("<b>%1</b>").arg(w.name));
        title->setWordWrap(true);
        w.timeline = new TimelineView;
        w.timeline->reset(i == 0 ? 1 : 2, i > 0);  // ways 2 and 3: a lane per stage  // ways 2 and 3: a lane per stage
        w.result = new QLabel(tr("not run yet"));
        w.result->setWordWrap(true);
        grid->addWidget(title, 0, i);
        grid->addWidget(w.timeline, 1, i);
        grid->addWidget(w.result, 2, i);
        grid->setColumnStretch(i, 1);
    }
    grid->setRowStretch(1, 1);
    grid->addWidget(conclusion_, 3, 0, 1, kWays);
    auto* layout = new QHBoxLayout(this);
    layout->addLayout(left, 1);
    layout->addLayout(grid, 3);
    connect(start_, &QPushButton::clicked, this, &ParallelismLesson::start);
    connect(stop_, &QPushButton::clicked, this, &ParallelismLesson::stop);

    runner_ = new LessonRunner(this);
    connect(runner_, &LessonRunner::runStarting, this, [this](int way) {
        // Its first quarter left out (oneDNN makes its kernels; pages are touched), as a sweep does.
        if (way == 0) oneDevice_ = std::make_unique<tb::StepProfiler>(std::max<int64_t>(1, ways_[0].config.steps / 4));
        ways_[size_t(way)].timeline->reset(way == 0 ? 1 : 2, way > 0);
        ways_[size_t(way)].result->setText(tr("training…"));
    });
    connect(runner_, &LessonRunner::stepsReady, this, &ParallelismLesson::takeSteps);
    connect(runner_, &LessonRunner::runFinished, this, &ParallelismLesson::finish);
    connect(runner_, &LessonRunner::allFinished, this, [this] {
        start_->setEnabled(true);
        stop_->setEnabled(false);
        conclude();
    });
}

bool ParallelismLesson::running() const { return runner_->running(); }

void ParallelismLesson::start() {
    if (running()) return;
    for (Way& w : ways_) {
        w.examplesPerSec = w.bubble = -1;
        w.result->setText(tr("waiting for its turn"));
    }
    start_->setEnabled(false);
    stop_->setEnabled(true);
    conclusion_->setText(tr("Training the three ways one after another…"));
    runner_->start({ways_[0].config, ways_[1].config, ways_[2].config});
}

void ParallelismLesson::stop() { runner_->stop(); }

void ParallelismLesson::abortRuns() { runner_->abort(); }

void ParallelismLesson::takeSteps() {
    const std::vector<tb::StepMetrics> steps = runner_->takeSteps();
    const int way = runner_->current();
    if (way < 0) return;
    for (const tb::StepMetrics& m : steps) {
        ways_[size_t(way)].timeline->addStep(m);
        if (way == 0 && oneDevice_) oneDevice_->onStepEnd(m);
    }
}

void ParallelismLesson::finish(int way, const QString& summaryJson, bool stopped, const QString& error) {
    Way& w = ways_[size_t(way)];
    if (!error.isEmpty()) {
        w.result->setText(tr("failed: %1").arg(error));
    } else {
        const QJsonObject o = QJsonDocument::fromJson(summaryJson.toUtf8()).object();
        w.examplesPerSec = o.value("steady_examples_per_sec").toDouble(o.value("examples_per_sec").toDouble());
        w.bubble = o.value("bubble_fraction").toDouble(-1);
        params_ = int64_t(o.value("params").toDouble());
        const int stages = way == 0 ? 1 : 2, micro = w.config.microBatches;
        QString line = tr("%1 examples/s").arg(tb::ui::formatCount(w.examplesPerSec));
        if (w.bubble >= 0)
            line += tr("; the stages idled %1% of each step (equal stages: %2%)")
                        .arg(tb::ui::formatCount(100 * w.bubble, 1),
                             tb::ui::formatCount(100.0 * (stages - 1) / (micro + stages - 1), 1));
        if (stopped) line += tr(" (stopped)");
        w.result->setText(line);
    }
}

// What the three measured say, in numbers: why naive model parallelism is slower than one device,
// how much micro-batches win back, and which way is fastest on this machine.
void ParallelismLesson::conclude() {
    const Way &one = ways_[0], &naive = ways_[1], &pipe = ways_[2];
    if (one.examplesPerSec <= 0 || naive.examplesPerSec <= 0 || pipe.examplesPerSec <= 0) {
        conclusion_->setText(tr("Not all three ways ran to the end: nothing to compare."));
        return;
    }
    const auto rate = [](double x) { return tb::ui::formatCount(x); };
    const auto pct = [](double x) { return tb::ui::formatCount(100 * x, 1) + QStringLiteral("%"); };
    QString s = tr("<p><b>Naive model parallelism</b> trained %1 examples/s against one device's %2 (%3x): its two "
                   "stages idled %4 of each step, as (S-1)/S = 50% says, because each waits while the other "
                   "works on the whole batch.</p>")
                    .arg(rate(naive.examplesPerSec), rate(one.examplesPerSec),
                         tb::ui::formatCount(naive.examplesPerSec / one.examplesPerSec, 2), pct(naive.bubble));
    s += pipelineVerdict(naive.examplesPerSec, naive.bubble, pipe.examplesPerSec, pipe.bubble, pipe.config.batch,
                         pipe.config.microBatches);
    if (one.examplesPerSec >= std::max(naive.examplesPerSec, pipe.examplesPerSec))
        s += tr("<p><b>On this machine one device is fastest</b> (%1 examples/s with every core): its layers "
                "run as whole-batch matrix products on all threads, where each stage has half the threads and "
                "small micro-batches, each reading the stage's weights again. Splitting a model pays when it "
                "does not fit one device, or across devices fast enough to keep the stages fed.</p>")
                 .arg(rate(one.examplesPerSec));
    else
        s += tr("<p>Here the pipeline beat one device (%1 against %2 examples/s).</p>")
                 .arg(rate(std::max(naive.examplesPerSec, pipe.examplesPerSec)), rate(one.examplesPerSec));
    conclusion_->setText(s + gpuFigures());
}

QString ParallelismLesson::pipelineVerdict(double naiveRate, double naiveBubble, double pipeRate, double pipeBubble,
                                           int batch, int microBatches) {
    const auto pct = [](double x) { return tb::ui::formatCount(100 * x, 1) + QStringLiteral("%"); };
    const auto times = [](double x) { return tb::ui::formatCount(x, 2) + QStringLiteral("x"); };
    QString s = tr("<p><b>The 1f1b pipeline</b> of %1 micro-batches kept both stages busy at once: they idled %2 "
                   "(equal stages: %3), and it trained %4 examples/s, %5 naive's.")
                    .arg(microBatches)
                    .arg(pct(pipeBubble), pct(1.0 / (microBatches + 1)), tb::ui::formatCount(pipeRate), times(pipeRate / naiveRate));
    // A stage's busy time per step: the step's time (batch over rate) less its idle share. With
    // the same work, the rate would grow as the busy share does.
    const double naiveWork = batch / naiveRate * (1 - naiveBubble), pipeWork = batch / pipeRate * (1 - pipeBubble);
    const double promised = naiveRate * (1 - pipeBubble) / (1 - naiveBubble);
    if (naiveBubble >= 0 && pipeBubble >= 0 && pipeRate < 0.9 * promised) {
        s += (pipeRate < naiveRate ? tr(" Less idle, yet slower here:")
                                   : tr(" Less idle, yet %1 naive's where the smaller bubble alone would give %2:")
                                         .arg(times(pipeRate / naiveRate), times(promised / naiveRate)));
        s += tr(" each stage's work per step grew from %1 to %2 ms. Its matrix products of %3 rows each read all of "
                "the stage's weights again and run slower per example than those of the whole batch's %4, and each "
                "stage adds every micro-batch's gradient to the step's.")
                 .arg(tb::ui::formatCount(1e3 * naiveWork, 1), tb::ui::formatCount(1e3 * pipeWork, 1))
                 .arg(batch / std::max(1, microBatches))
                 .arg(batch);
    }
    return s + QStringLiteral("</p>");
}

QString ParallelismLesson::gpuFigures() const {
    const Way& one = ways_[0];
    const tb::StepProfile measured = oneDevice_ ? oneDevice_->profile() : tb::StepProfile{};
    if (measured.steps < 1 || params_ < 1) return {};
    tb::Calibration cal;
    cal.measured = measured;
    cal.threadsPerTower = cal.cores = std::max(1, one.config.threads);
    cal.batchPerTower = one.config.batch;
    cal.params = params_;
    cal.host = tb::measureHostCore();
    tb::Scenario gpu;
    gpu.device = tb::parseProcessor("h100", "device");
    gpu.link = tb::parseLink("nvlink", "link");
    gpu.batchPerTower = one.config.batch;
    gpu.strategy = "allreduce";  // one GPU holding its variables
    tb::Scenario stages = gpu;
    stages.towers = 2;
    stages.strategy = "1f1b:" + std::to_string(ways_[2].config.microBatches);
    try {
        tb::PipelineCostCache costs(tb::findModel(one.config.model));
        const tb::Prediction alone = tb::predictStep(cal, {}, gpu, costs), split = tb::predictStep(cal, {}, stages, costs);
        return tr("<p><b>On GPUs</b>, the scaling lab's predictor, calibrated from the one-device run, puts one H100 "
                  "at %1 examples/s and the same 1f1b pipeline on two H100s joined by NVLink at %2 (its stages idle "
                  "%3). First order: each GPU reaching the share of its fp32 peak this machine's core reaches, "
                  "activations crossing NVLink without overlap; not validated on GPUs.</p>")
            .arg(tb::ui::formatCount(alone.examplesPerSec), tb::ui::formatCount(split.examplesPerSec),
                 tb::ui::formatCount(100 * split.bubbleFraction, 1) + QStringLiteral("%"));
    } catch (const tb::Error& e) {
        return tr("<p>The predictor's figures for GPUs: %1</p>").arg(QString::fromStdString(e.what()).toHtmlEscaped());
    }
}
