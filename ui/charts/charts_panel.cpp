// ChartsPanel: QCustomPlot charts (loss, accuracy, examples/sec, learning rate; staleness for
// asynchronous runs) fed by the engine's step and evaluation reports. addStep/addEval append and mark the panel dirty; a 10 Hz
// timer fits the axes and queues one replot per chart (QCustomPlot's real-time demo), so a burst
// of fast steps costs one redraw, not one per step.
#include "charts/charts_panel.hpp"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QEvent>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLocale>
#include <QTimer>
#include <QResizeEvent>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "charts/chart_style.hpp"
#include "view_format.hpp"

namespace {

using namespace tb::ui;

constexpr double kWindowSteps = 500;  // the scrolling window
constexpr int kFrameMs = 100;         // 10 Hz: smooth enough to watch, cheap beside training
constexpr double kDrawShare = 0.1;    // most of a frame period that drawing may use, on average
constexpr int kTowersInLegend = 8;    // beyond this the legend would take more room than the chart
constexpr size_t kStalenessMean = 50; // pushes in the staleness moving average

// Marks range changes made by the panel itself, so the rangeChanged handler can tell them from
// the user's drags and zooms.
class RangeGuard {
public:
    explicit RangeGuard(bool& flag) : flag_(flag), old_(flag) { flag_ = true; }
    ~RangeGuard() { flag_ = old_; }
    RangeGuard(const RangeGuard&) = delete;
    RangeGuard& operator=(const RangeGuard&) = delete;

private:
    bool& flag_;
    bool old_;
};

// A series keeps at most kMaxPoints, so a long run's charts stay in bounded memory (the metrics
// file keeps every step). The newest kRecentPoints stay as they came; whenever the cap is reached
// the older ones but the first are thinned, each run of four becoming its lowest and highest
// point (in key order), so spikes and the envelope survive while their count halves. Points
// thinned once are thinned again later: resolution falls off with age, and each point costs
// O(1) amortised.
constexpr int kRecentPoints = 4096;
constexpr int kMaxPoints = 16384;

void append(QCPGraph* g, double key, double value) {
    QCPGraphDataContainer& d = *g->data();
    d.add(QCPGraphData(key, value));
    if (d.size() <= kMaxPoints) return;
    const int old = d.size() - kRecentPoints;
    QVector<QCPGraphData> kept;
    kept.reserve(old / 2 + kRecentPoints + 4);
    auto it = d.constBegin();
    kept.push_back(*it++);  // the run's first point stays: the line starts where the run did
    int i = 1;
    for (; i + 4 <= old; i += 4, it += 4) {
        auto lo = it, hi = it;
        for (auto p = it + 1; p != it + 4; ++p) {
            if (p->value < lo->value) lo = p;
            if (p->value > hi->value) hi = p;
        }
        if (hi < lo) std::swap(lo, hi);
        kept.push_back(*lo);
        if (hi != lo) kept.push_back(*hi);
    }
    for (; it != d.constEnd(); ++it) kept.push_back(*it);
    d.set(kept, true);
}

QCPGraph* addLine(QCustomPlot* p, const QString& name, const QColor& colour, double width) {
    QCPGraph* g = p->addGraph();
    g->setName(name);
    g->setPen(QPen(colour, width));
    g->setAdaptiveSampling(true);  // the 2.1 default, stated: it is what keeps 10⁶ points smooth
    return g;
}

// Widens a fitted range a little so lines do not run along the frame, and gives a flat series
// (constant learning rate) a visible band instead of a zero-height range.
QCPRange padded(QCPRange r, bool log) {
    if (log) {
        if (r.lower == r.upper) return {r.lower / 2, r.upper * 2};
        return {r.lower / 1.15, r.upper * 1.15};
    }
    // A range within rounding noise of one value (a steady 16,000 examples/sec) is flat.
    double pad = 0.05 * r.size();
    if (pad <= 1e-9 * std::abs(r.upper)) pad = std::max(std::abs(r.upper) * 0.05, 1e-9);
    return {r.lower - pad, r.upper + pad};
}

}  // namespace

void ChartsPanel::Bounds::add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    if (v > 0) loPositive = std::min(loPositive, v);
}

ChartsPanel::ChartsPanel(QWidget* parent) : QWidget(parent) {
    scrolling_ = new QCheckBox(tr("Scrolling window"), this);
    scrolling_->setObjectName(QStringLiteral("scrolling"));
    scrolling_->setChecked(true);
    scrolling_->setToolTip(wrappedToolTip(
        tr("Follow the last %1 steps; unchecked shows the whole run.\n"
           "Dragging or zooming a chart unchecks it; double-click a chart to fit it again.")
            .arg(int(kWindowSteps))));
    logLoss_ = new QCheckBox(tr("Log loss"), this);
    logLoss_->setObjectName(QStringLiteral("logLoss"));
    logLoss_->setToolTip(wrappedToolTip(tr("Logarithmic loss axis: late, small improvements stay visible.")));
    auto* bar = new QHBoxLayout;
    bar->addWidget(scrolling_);
    bar->addWidget(logLoss_);
    bar->addStretch(1);

    asyncNote_ = new QLabel(
        tr("<b>Asynchronous updates: this run is not reproducible.</b> Thread timing decides the order in which "
           "the towers' updates reach the variables, so the same seed gives a different run each time."),
        this);
    asyncNote_->setObjectName(QStringLiteral("asyncNote"));
    asyncNote_->setWordWrap(true);
    asyncNote_->setAutoFillBackground(true);
    asyncNote_->setMargin(4);
    asyncNote_->setVisible(false);

    // Steps whose reports the window never got (the engine drops reports for a window that falls
    // behind; its metrics file keeps them): counted from the gaps in the step numbers.
    shortNote_ = new QLabel(this);
    shortNote_->setObjectName(QStringLiteral("shortNote"));
    shortNote_->setWordWrap(true);
    shortNote_->setAutoFillBackground(true);
    shortNote_->setMargin(4);
    shortNote_->setVisible(false);

    const QString step = tr("step"), update = tr("update");
    loss_ = makeChart(this, QStringLiteral("lossPlot"), tr("Loss"), step, tr("loss"));
    accuracy_ = makeChart(this, QStringLiteral("accuracyPlot"), tr("Accuracy"), step, tr("accuracy"));
    speed_ = makeChart(this, QStringLiteral("speedPlot"), tr("Examples/sec"), step, tr("examples/sec"));
    lr_ = makeChart(this, QStringLiteral("lrPlot"), tr("Learning rate"), step, tr("learning rate"));
    staleness_ = makeChart(this, QStringLiteral("stalenessPlot"), tr("Staleness per push"), update,
                           tr("updates missed"));
    staleness_->yAxis->setTicker(QSharedPointer<IntegerTicker>::create());
    staleness_->setToolTip(wrappedToolTip(
        tr("Each dot is one push: how many updates other towers applied between this tower's pull of the "
           "variables and its push of gradients computed on them. Its gradients are that many updates old.")));
    staleness_->setVisible(false);
    for (QCustomPlot* p : {loss_, accuracy_, speed_, staleness_}) p->legend->setVisible(true);

    trainAccuracy_ = addLine(accuracy_, tr("train"), kBlue, 1.5);
    QColor rawSpeed = kGreen;
    rawSpeed.setAlpha(110);  // per-step speed is noisy; the windows on top carry the trend
    speedGraph_ = addLine(speed_, tr("per step"), rawSpeed, 1);
    speedRecent_ = addLine(speed_, tr("last %1 s").arg(kRecentSeconds), kPurple, 2);
    speedRun_ = addLine(speed_, tr("whole run"), kRed, 2);
    lrGraph_ = addLine(lr_, tr("learning rate"), kTeal, 1.5);
    speed_->setToolTip(wrappedToolTip(
        tr("Per step: the step's examples over its wall time (synchronous runs only; an asynchronous push "
           "alone says nothing about throughput).\nLast %1 s: examples trained in the last %1 s of training "
           "time over that time.\nWhole run: all examples so far over the training wall time so far (pauses, "
           "slow motion, evaluations and checkpoints excluded), as the status bar and the run's summary count it.")
            .arg(kRecentSeconds)));

    auto* grid = new QGridLayout;
    grid->addWidget(loss_, 0, 0);
    grid->addWidget(accuracy_, 0, 1);
    // Staleness joins the second row of asynchronous runs, which have no averaging marks to
    // show and one more thing to watch.
    auto* second = new QHBoxLayout;
    second->setSpacing(grid->horizontalSpacing());
    for (QCustomPlot* p : {speed_, lr_, staleness_}) second->addWidget(p, 1);
    grid->addLayout(second, 1, 0, 1, 2);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(bar);
    layout->addWidget(asyncNote_);
    layout->addWidget(shortNote_);
    layout->addLayout(grid, 1);

    for (QCustomPlot* p : plots()) {
        // Any range change not made by applyRanges is the user's: stop steering the view.
        connect(p->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this,
                [this, p](const QCPRange&) { userMovedView(p, true); });
        connect(p->yAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this,
                [this, p](const QCPRange&) { userMovedView(p, false); });
        connect(p, &QCustomPlot::mouseDoubleClick, this, [this](QMouseEvent*) {
            userView_ = false;
            dirty_ = true;
        });
        p->installEventFilter(this);
    }
    connect(scrolling_, &QCheckBox::toggled, this, &ChartsPanel::setScrolling);
    connect(logLoss_, &QCheckBox::toggled, this, &ChartsPanel::setLogLoss);

    applyTheme();
    reset(0);

    timer_ = new QTimer(this);
    connect(timer_, &QTimer::timeout, this, &ChartsPanel::replot);
    timer_->start(kFrameMs);
}

void ChartsPanel::reset(int towers) {
    RangeGuard guard(settingRanges_);
    towers_ = std::max(0, towers);
    steps_ = evals_ = 0;
    firstStep_ = lastStep_ = -1;
    missing_ = 0;
    shortNote_->setVisible(false);
    firstKey_ = lastKey_ = 0;
    haveKey_ = false;
    userView_ = false;

    loss_->clearGraphs();  // also takes them out of the legend
    towerLoss_.clear();
    for (int i = 0; i < towers_; ++i) {
        QColor c = towerColour(i);
        c.setAlpha(110);  // towers overlap; translucency keeps the mean readable through them
        QCPGraph* g = addLine(loss_, tr("tower %1").arg(i), c, 1);
        if (i >= kTowersInLegend) g->removeFromLegend();
        towerLoss_.push_back(g);
    }
    meanLoss_ = addLine(loss_, tr("mean"), kRed, 2.5);  // added last but one: drawn over the towers
    // Averaging every K: a ring on the mean at each step that ended in an average; in the
    // legend only once there is one.
    averagedLoss_ = addLine(loss_, tr("averaged"), kBlue, 1.5);
    averagedLoss_->setLineStyle(QCPGraph::lsNone);
    averagedLoss_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 7));
    averagedLoss_->removeFromLegend();

    staleness_->clearGraphs();
    towerStaleness_.clear();
    for (int i = 0; i < towers_; ++i) {
        QCPGraph* g = addLine(staleness_, tr("tower %1").arg(i), towerColour(i), 1);
        g->setLineStyle(QCPGraph::lsNone);
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 4));
        if (i >= kTowersInLegend) g->removeFromLegend();
        towerStaleness_.push_back(g);
    }
    stalenessMean_ = addLine(staleness_, tr("mean of %1").arg(kStalenessMean), kRed, 2);

    for (QCPGraph* g : evalAccuracy_) accuracy_->removeGraph(g);
    evalAccuracy_.clear();
    for (QCPGraph* g : {trainAccuracy_, speedGraph_, speedRecent_, speedRun_, lrGraph_}) g->data()->clear();
    recent_.clear();
    runExamples_ = runSeconds_ = 0;
    stalenessWindow_.clear();
    stalenessSum_ = stalenessTotal_ = 0;
    pushes_ = 0;
    lossBounds_ = accuracyBounds_ = speedBounds_ = lrBounds_ = stalenessBounds_ = Bounds{};
    showAsync(false);

    for (QCustomPlot* p : plots()) {
        p->xAxis->setRange(0, kWindowSteps);
        if (p->yAxis->scaleType() == QCPAxis::stLogarithmic)
            p->yAxis->setRange(0.01, 10);
        else
            p->yAxis->setRange(0, 1);
    }
    dirty_ = true;
}

void ChartsPanel::showAsync(bool async) {
    async_ = async;
    // Asynchronous reports count applied updates, each one tower's push, not global steps.
    for (QCustomPlot* p : plots()) p->xAxis->setLabel(async ? tr("update") : tr("step"));
    asyncNote_->setVisible(async);
    staleness_->setVisible(async);
    // A push alone says nothing about throughput: asynchronous runs draw only the windows.
    speedGraph_->setVisible(!async);
    if (async) speedGraph_->removeFromLegend();
    else speedGraph_->addToLegend();
    dirty_ = true;
}

void ChartsPanel::noteKey(double key) {
    if (!haveKey_) {
        firstKey_ = lastKey_ = key;
        haveKey_ = true;
        return;
    }
    firstKey_ = std::min(firstKey_, key);
    lastKey_ = std::max(lastKey_, key);
}

void ChartsPanel::addStep(const tb::StepMetrics& m) {
    const double key = double(m.step);
    noteKey(key);
    if (m.pusher >= 0 && !async_) showAsync(true);
    // Non-finite values are skipped, not drawn: NaN marks a tower that did not report this
    // step (async), and an infinite loss would flatten every other point against the axis.
    const int n = std::min<int>(towerLoss_.size(), int(m.towers.size()));
    for (int i = 0; i < n; ++i) {
        const double v = m.towers[size_t(i)].loss;
        if (!std::isfinite(v)) continue;
        append(towerLoss_[i], key, v);
        lossBounds_.add(v);
    }
    if (std::isfinite(m.loss)) {
        append(meanLoss_, key, m.loss);
        lossBounds_.add(m.loss);
        if (m.averaged) {
            if (averagedLoss_->data()->isEmpty()) averagedLoss_->addToLegend();
            append(averagedLoss_, key, m.loss);
        }
    }
    if (std::isfinite(m.accuracy)) {
        append(trainAccuracy_, key, m.accuracy);
        accuracyBounds_.add(m.accuracy);
    }
    addSpeed(m, key);
    if (std::isfinite(m.lr)) {
        append(lrGraph_, key, m.lr);
        lrBounds_.add(m.lr);
    }
    if (m.pusher >= 0 && m.staleness >= 0) addStaleness(m, key);
    ++steps_;
    noteMissing(m.step);
    dirty_ = true;
}

// Every step (every update, asynchronous) makes one report, numbered on from the first: the
// numbers between the first and the last that never came are reports the window missed. (An
// asynchronous report may come after a later one; the count is of those still missing.)
void ChartsPanel::noteMissing(int64_t step) {
    firstStep_ = firstStep_ < 0 ? step : std::min(firstStep_, step);
    lastStep_ = std::max(lastStep_, step);
    const int64_t missing = std::max<int64_t>(0, lastStep_ - firstStep_ + 1 - steps_);
    if (missing == missing_) return;
    missing_ = missing;
    shortNote_->setVisible(missing > 0);
    const QString count = missing == 1 ? tr("1 step report did") : tr("%1 step reports did").arg(QLocale().toString(qlonglong(missing)));
    shortNote_->setText(tr("<b>%1 not reach the window</b> (it fell behind): the charts, the timeline and the "
                           "profile are short by them; the run folder's metrics file has every step.")
                            .arg(count));
}

void ChartsPanel::addSpeed(const tb::StepMetrics& m, double key) {
    const double examples = double(std::max<int64_t>(0, m.examples));
    double recentExamples = 0, recentSeconds = 0;
    if (m.pusher < 0) {
        // Synchronous: training time is the sum of the steps' wall times (evaluations and
        // pauses lie between steps), and the window holds whole steps.
        if (!(m.stepSeconds > 0)) return;
        runExamples_ += examples;
        runSeconds_ += m.stepSeconds;
        recent_.push_back({runSeconds_, m.stepSeconds, examples});
        while (recent_.size() > 1 && recent_.front().t <= runSeconds_ - kRecentSeconds) recent_.pop_front();
        for (const Span& s : recent_) {
            recentExamples += s.examples;
            recentSeconds += s.seconds;
        }
        if (std::isfinite(m.examplesPerSec)) {
            append(speedGraph_, key, m.examplesPerSec);  // the step's examples over its wall time
            speedBounds_.add(m.examplesPerSec);
        }
    } else {
        // Asynchronous: towers push at their own pace on one clock, the run's; the window is the
        // last kRecentSeconds of it (all of it, early on), not the span between the pushes in
        // it, which two pushes landing together would make microseconds long.
        runExamples_ += examples;
        runSeconds_ = std::max(runSeconds_, m.elapsedSeconds);
        recent_.push_back({m.elapsedSeconds, 0, examples});
        while (!recent_.empty() && recent_.front().t <= runSeconds_ - kRecentSeconds) recent_.pop_front();
        for (const Span& s : recent_) recentExamples += s.examples;
        recentSeconds = std::min(kRecentSeconds, runSeconds_);
    }
    if (recentSeconds > 0) {
        append(speedRecent_, key, recentExamples / recentSeconds);
        speedBounds_.add(recentExamples / recentSeconds);
    }
    // The whole run as the engine counts it for the summary (RunStatistics), where the step says;
    // the sum above for reports that do not (a metrics file of an older version).
    const double run = m.runExamplesPerSec > 0 ? m.runExamplesPerSec : runSeconds_ > 0 ? runExamples_ / runSeconds_ : 0;
    if (run > 0) {
        append(speedRun_, key, run);
        speedBounds_.add(run);
    }
}

void ChartsPanel::finishRun(double examplesPerSec) {
    if (speedRun_->data()->isEmpty() || !(examplesPerSec > 0)) return;
    const double key = (speedRun_->data()->constEnd() - 1)->key;
    speedRun_->data()->remove(key);
    append(speedRun_, key, examplesPerSec);
    speedBounds_.add(examplesPerSec);
    dirty_ = true;
}

double ChartsPanel::runExamplesPerSec() const {
    return speedRun_->data()->isEmpty() ? 0 : (speedRun_->data()->constEnd() - 1)->value;
}

double ChartsPanel::recentExamplesPerSec() const {
    return speedRecent_->data()->isEmpty() ? 0 : (speedRecent_->data()->constEnd() - 1)->value;
}

void ChartsPanel::addStaleness(const tb::StepMetrics& m, double key) {
    const double s = double(m.staleness);
    if (m.pusher < towerStaleness_.size()) append(towerStaleness_[m.pusher], key, s);
    stalenessBounds_.add(s);
    stalenessWindow_.push_back(s);
    stalenessSum_ += s;
    if (stalenessWindow_.size() > kStalenessMean) {
        stalenessSum_ -= stalenessWindow_.front();
        stalenessWindow_.pop_front();
    }
    append(stalenessMean_, key, stalenessSum_ / double(stalenessWindow_.size()));
    stalenessTotal_ += s;
    ++pushes_;
}

QCPGraph* ChartsPanel::evalGraph(const QString& split) {
    if (QCPGraph* g = evalAccuracy_.value(split)) return g;
    const QColor colour = split == QLatin1String("validation") ? kOrange
                          : split == QLatin1String("test")     ? kRed
                                                                : kPurple;
    QCPGraph* g = addLine(accuracy_, split, colour, 1.5);
    // Evaluations are sparse: each one is a dot, joined so the trend still reads as a line.
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 6));
    evalAccuracy_.insert(split, g);
    return g;
}

void ChartsPanel::addEval(const tb::EvalResult& r) {
    const double key = double(r.step);
    noteKey(key);
    if (std::isfinite(r.accuracy)) {
        append(evalGraph(QString::fromStdString(r.split)), key, r.accuracy);
        accuracyBounds_.add(r.accuracy);
    }
    ++evals_;
    dirty_ = true;
}

void ChartsPanel::setScrolling(bool scrolling) {
    scrolling_->setChecked(scrolling);  // no-op (and no signal) when called from the box itself
    userView_ = false;                  // either choice is a request for an automatic view
    dirty_ = true;
}

void ChartsPanel::setLogLoss(bool log) {
    logLoss_->setChecked(log);
    {
        RangeGuard guard(settingRanges_);  // setScaleType clamps the range for log scale
        loss_->yAxis->setScaleType(log ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
        if (log) {
            loss_->yAxis->setTicker(QSharedPointer<LogTicker>::create());
        } else {
            loss_->yAxis->setTicker(QSharedPointer<LocaleTicker>::create());
        }
        // Refit now even in a user's view: the old linear range means little on a log axis.
        fitValues(loss_, lossBounds_, !userView_ && !scrolling_->isChecked());
    }
    loss_->replot(QCustomPlot::rpQueuedReplot);
    dirty_ = true;
}

void ChartsPanel::fitValues(QCustomPlot* p, const Bounds& all, bool wholeRun, bool fromZero) {
    const bool log = p->yAxis->scaleType() == QCPAxis::stLogarithmic;
    QCPRange r;
    bool found = false;
    if (wholeRun) {
        // Every point is in view: the running bounds are exact and free.
        r = QCPRange(log ? all.loPositive : all.lo, all.hi);
        found = std::isfinite(r.lower) && std::isfinite(r.upper) && r.lower <= r.upper;
    } else {
        // Only the points in the key window count (binary search, then a scan of the window).
        const QCPRange keys = p->xAxis->range();
        for (int i = 0; i < p->graphCount(); ++i) {
            bool foundHere = false;
            const QCPRange gr = p->graph(i)->getValueRange(
                foundHere, log ? QCP::sdPositive : QCP::sdBoth, keys);
            if (!foundHere) continue;
            if (found) {
                r.expand(gr);
            } else {
                r = gr;
                found = true;
            }
        }
    }
    if (!found) return;
    r = padded(r, log);
    if (fromZero && !log && r.lower > 0) r.lower = 0;
    p->yAxis->setRange(r);
}

void ChartsPanel::applyRanges() {
    RangeGuard guard(settingRanges_);
    const bool scrolling = scrolling_->isChecked();
    for (QCustomPlot* p : plots()) {
        if (scrolling) {
            // Until a full window has arrived, show it from the run's first step rather than
            // squeezing the data against the right edge.
            p->xAxis->setRange(std::max(lastKey_, firstKey_ + kWindowSteps), kWindowSteps,
                               Qt::AlignRight);
        } else {
            // One key range for all four charts (not each chart's own rescale), so a step
            // lines up vertically across them.
            const double pad = firstKey_ == lastKey_ ? 1 : 0;
            p->xAxis->setRange(firstKey_ - pad, lastKey_ + pad);
        }
    }
    fitValues(loss_, lossBounds_, !scrolling);
    fitValues(accuracy_, accuracyBounds_, !scrolling);
    fitValues(speed_, speedBounds_, !scrolling);
    // A learning rate is drawn from zero: its schedule's shape (a warm-up from 0, a decay toward
    // it) reads as a share of the rate, and a constant one is a flat line at its height, not at
    // mid-chart between ticks 0.000975 and 0.001050.
    fitValues(lr_, lrBounds_, !scrolling, true);
    fitValues(staleness_, stalenessBounds_, !scrolling);
}

void ChartsPanel::replot() {
    // A hidden panel (another tab in front) keeps dirty_ and catches up when shown.
    if (!dirty_ || !isVisible()) return;
    if (skipFrames_ > 0) {
        --skipFrames_;
        return;
    }
    dirty_ = false;
    if (!userView_ && haveKey_) applyRanges();
    // The latest figures in the legend, where each names its line.
    speedRun_->setName(runExamples_ > 0 ? tr("whole run: %1").arg(formatCount(runExamplesPerSec())) : tr("whole run"));
    speedRecent_->setName(runExamples_ > 0
                              ? tr("last %1 s: %2").arg(kRecentSeconds).arg(formatCount(recentExamplesPerSec()))
                              : tr("last %1 s").arg(kRecentSeconds));
    if (pushes_ > 0)
        chartTitle(staleness_)->setText(
            tr("Staleness \u2014 mean %1").arg(formatCount(stalenessTotal_ / double(pushes_), 2)));
    // Queued: each chart redraws in its own event-loop turn, so the GUI never stalls for all
    // of them at once, and repeated requests within a turn collapse into one.
    double drawMs = 0;
    for (QCustomPlot* p : plots()) {
        if (!p->isVisible()) continue;
        fitToSize(p);
        p->replot(QCustomPlot::rpQueuedReplot);
        drawMs += p->replotTime(true);  // running average of this chart's recent replots
    }
    // Training shares the cores with the window: when a long run in full view makes drawing
    // cost more than a tenth of the frame period, draw less often rather than slow it down.
    skipFrames_ = int(drawMs / (kDrawShare * kFrameMs));
}

QSize ChartsPanel::minimumSizeHint() const {
    QSize least = QWidget::minimumSizeHint();
    if (width() > 0) least.setHeight(std::max(least.height(), layout()->totalMinimumHeightForWidth(width())));
    return least;
}

void ChartsPanel::resizeEvent(QResizeEvent* e) {
    if (e->size().width() != e->oldSize().width()) updateGeometry();
    QWidget::resizeEvent(e);
}

bool ChartsPanel::eventFilter(QObject* watched, QEvent* e) {
    if (e->type() == QEvent::Resize)
        if (qobject_cast<QCustomPlot*>(watched)) {
            // The chart fitted itself to the new size (makeChart); the next frame fits it again
            // to the axis rect its replot made (a chart made shorter while nothing trained kept
            // ticks spaced for its old height, labels 13 px apart).
            dirty_ = true;
        }
    return QWidget::eventFilter(watched, e);
}

void ChartsPanel::userMovedView(QCustomPlot* source, bool keyAxis) {
    if (settingRanges_) return;
    if (!userView_) {
        // Scrolling would yank the view back on the next frame; unchecking the box shows the
        // user why it stopped. setScrolling (via toggled) clears userView_, so set it after.
        scrolling_->setChecked(false);
        userView_ = true;
    }
    if (!keyAxis) return;
    // Keep the four charts on the same steps while the user pans or zooms one of them.
    RangeGuard guard(settingRanges_);
    const QCPRange keys = source->xAxis->range();
    for (QCustomPlot* p : plots()) {
        if (p == source) continue;
        p->xAxis->setRange(keys);
        p->replot(QCustomPlot::rpQueuedReplot);
    }
}

void ChartsPanel::changeEvent(QEvent* e) {
    QWidget::changeEvent(e);
    if (e->type() == QEvent::PaletteChange || e->type() == QEvent::StyleChange) {
        applyTheme();
        for (QCustomPlot* p : plots()) p->replot(QCustomPlot::rpQueuedReplot);
    }
}

void ChartsPanel::applyTheme() {
    for (QCustomPlot* p : plots()) applyChartTheme(p, palette());
    // The notes on the tooltip colours: set apart from the charts in either theme.
    QPalette note = asyncNote_->palette();
    note.setColor(QPalette::Window, palette().color(QPalette::ToolTipBase));
    note.setColor(QPalette::WindowText, palette().color(QPalette::ToolTipText));
    asyncNote_->setPalette(note);
    shortNote_->setPalette(note);
}
