// ChartsPanel: four QCustomPlot charts (loss, accuracy, examples/sec, learning rate) fed by the
// engine's step and evaluation reports. addStep/addEval append and mark the panel dirty; a 10 Hz
// timer fits the axes and queues one replot per chart (QCustomPlot's real-time demo), so a burst
// of fast steps costs one redraw, not one per step.
#include "charts_panel.hpp"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QEvent>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <iterator>

namespace {

constexpr double kWindowSteps = 500;  // the scrolling window
constexpr int kFrameMs = 100;         // 10 Hz: smooth enough to watch, cheap beside training
constexpr double kDrawShare = 0.1;    // most of a frame period that drawing may use, on average
constexpr size_t kSpeedAverage = 50;  // steps in the examples/sec moving average
constexpr int kTowersInLegend = 8;    // beyond this the legend would cover the chart

// Tableau 10: mid-luminance hues chosen to stay legible on white and on near-black, which is
// what the charts' background is under a light or a dark palette (applyTheme).
const QColor kBlue(0x4E, 0x79, 0xA7), kOrange(0xF2, 0x8E, 0x2B), kRed(0xE1, 0x57, 0x59),
    kTeal(0x76, 0xB7, 0xB2), kGreen(0x59, 0xA1, 0x4F), kYellow(0xED, 0xC9, 0x48),
    kPurple(0xB0, 0x7A, 0xA1), kPink(0xFF, 0x9D, 0xA7), kBrown(0x9C, 0x75, 0x5F),
    kGrey(0xBA, 0xB0, 0xAC);
// Towers cycle through these; red is kept for the mean so it never looks like one tower.
const QColor kTowerColours[] = {kBlue, kTeal, kGreen, kPurple, kOrange, kBrown, kPink, kYellow, kGrey};

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

QCustomPlot* makePlot(QWidget* parent, const QString& name, const QString& title,
                      const QString& valueLabel) {
    auto* p = new QCustomPlot(parent);
    p->setObjectName(name);
    p->setMinimumSize(240, 160);
    p->plotLayout()->insertRow(0);
    QFont titleFont = p->font();
    titleFont.setBold(true);
    p->plotLayout()->addElement(0, 0, new QCPTextElement(p, title, titleFont));
    p->xAxis->setLabel(QObject::tr("step"));
    p->xAxis->setNumberPrecision(7);  // step 1000000 as digits, not 1·10⁶
    p->yAxis->setLabel(valueLabel);
    p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    // Dragging redraws at mouse rate; without antialiasing that stays fluid with long series.
    p->setNoAntialiasingOnDrag(true);
    QFont legendFont = p->font();
    legendFont.setPointSizeF(std::max(6.0, legendFont.pointSizeF() - 1));
    p->legend->setFont(legendFont);
    p->legend->setRowSpacing(0);
    p->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
    return p;
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
    double pad = 0.05 * r.size();
    if (pad == 0) pad = std::max(std::abs(r.upper) * 0.05, 1e-9);
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
    scrolling_->setToolTip(
        tr("Follow the last %1 steps; unchecked shows the whole run.\n"
           "Dragging or zooming a chart unchecks it; double-click a chart to fit it again.")
            .arg(int(kWindowSteps)));
    logLoss_ = new QCheckBox(tr("Log loss"), this);
    logLoss_->setObjectName(QStringLiteral("logLoss"));
    logLoss_->setToolTip(tr("Logarithmic loss axis: late, small improvements stay visible."));
    auto* bar = new QHBoxLayout;
    bar->addWidget(scrolling_);
    bar->addWidget(logLoss_);
    bar->addStretch(1);

    loss_ = makePlot(this, QStringLiteral("lossPlot"), tr("Loss"), tr("loss"));
    accuracy_ = makePlot(this, QStringLiteral("accuracyPlot"), tr("Accuracy"), tr("accuracy"));
    speed_ = makePlot(this, QStringLiteral("speedPlot"), tr("Examples/sec"), tr("examples/sec"));
    lr_ = makePlot(this, QStringLiteral("lrPlot"), tr("Learning rate"), tr("learning rate"));
    loss_->legend->setVisible(true);
    accuracy_->legend->setVisible(true);
    speed_->legend->setVisible(true);

    trainAccuracy_ = addLine(accuracy_, tr("train"), kBlue, 1.5);
    QColor rawSpeed = kGreen;
    rawSpeed.setAlpha(110);  // per-step speed is noisy; the average on top carries the trend
    speedGraph_ = addLine(speed_, tr("per step"), rawSpeed, 1);
    speedAverage_ = addLine(speed_, tr("average of %1").arg(kSpeedAverage), kPurple, 2);
    lrGraph_ = addLine(lr_, tr("learning rate"), kTeal, 1.5);

    auto* grid = new QGridLayout;
    grid->addWidget(loss_, 0, 0);
    grid->addWidget(accuracy_, 0, 1);
    grid->addWidget(speed_, 1, 0);
    grid->addWidget(lr_, 1, 1);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(bar);
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
    firstKey_ = lastKey_ = 0;
    haveKey_ = false;
    userView_ = false;

    loss_->clearGraphs();  // also takes them out of the legend
    towerLoss_.clear();
    for (int i = 0; i < towers_; ++i) {
        QColor c = kTowerColours[i % std::size(kTowerColours)];
        c.setAlpha(110);  // towers overlap; translucency keeps the mean readable through them
        QCPGraph* g = addLine(loss_, tr("tower %1").arg(i), c, 1);
        if (i >= kTowersInLegend) g->removeFromLegend();
        towerLoss_.push_back(g);
    }
    meanLoss_ = addLine(loss_, tr("mean"), kRed, 2.5);  // added last: drawn on top

    for (QCPGraph* g : evalAccuracy_) accuracy_->removeGraph(g);
    evalAccuracy_.clear();
    for (QCPGraph* g : {trainAccuracy_, speedGraph_, speedAverage_, lrGraph_}) g->data()->clear();
    speedWindow_.clear();
    speedSum_ = 0;
    lossBounds_ = accuracyBounds_ = speedBounds_ = lrBounds_ = Bounds{};

    for (QCustomPlot* p : plots()) {
        p->xAxis->setRange(0, kWindowSteps);
        if (p->yAxis->scaleType() == QCPAxis::stLogarithmic)
            p->yAxis->setRange(0.01, 10);
        else
            p->yAxis->setRange(0, 1);
    }
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
    // Non-finite values are skipped, not drawn: NaN marks a tower that did not report this
    // step (async), and an infinite loss would flatten every other point against the axis.
    const int n = std::min<int>(towerLoss_.size(), int(m.towers.size()));
    for (int i = 0; i < n; ++i) {
        const double v = m.towers[size_t(i)].loss;
        if (!std::isfinite(v)) continue;
        towerLoss_[i]->addData(key, v);
        lossBounds_.add(v);
    }
    if (std::isfinite(m.loss)) {
        meanLoss_->addData(key, m.loss);
        lossBounds_.add(m.loss);
    }
    if (std::isfinite(m.accuracy)) {
        trainAccuracy_->addData(key, m.accuracy);
        accuracyBounds_.add(m.accuracy);
    }
    if (std::isfinite(m.examplesPerSec)) {
        speedGraph_->addData(key, m.examplesPerSec);
        speedBounds_.add(m.examplesPerSec);
        speedWindow_.push_back(m.examplesPerSec);
        speedSum_ += m.examplesPerSec;
        if (speedWindow_.size() > kSpeedAverage) {
            speedSum_ -= speedWindow_.front();
            speedWindow_.pop_front();
        }
        speedAverage_->addData(key, speedSum_ / double(speedWindow_.size()));
    }
    if (std::isfinite(m.lr)) {
        lrGraph_->addData(key, m.lr);
        lrBounds_.add(m.lr);
    }
    ++steps_;
    dirty_ = true;
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
        evalGraph(QString::fromStdString(r.split))->addData(key, r.accuracy);
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
            auto ticker = QSharedPointer<QCPAxisTickerLog>::create();
            ticker->setLogBase(10);
            ticker->setSubTickCount(8);  // 2..9 between decades, the usual log paper
            loss_->yAxis->setTicker(ticker);
        } else {
            loss_->yAxis->setTicker(QSharedPointer<QCPAxisTicker>::create());
        }
        // Refit now even in a user's view: the old linear range means little on a log axis.
        fitValues(loss_, lossBounds_, !userView_ && !scrolling_->isChecked());
    }
    loss_->replot(QCustomPlot::rpQueuedReplot);
    dirty_ = true;
}

void ChartsPanel::fitValues(QCustomPlot* p, const Bounds& all, bool wholeRun) {
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
    if (found) p->yAxis->setRange(padded(r, log));
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
    fitValues(lr_, lrBounds_, !scrolling);
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
    // Queued: each chart redraws in its own event-loop turn, so the GUI never stalls for all
    // four at once, and repeated requests within a turn collapse into one.
    double drawMs = 0;
    for (QCustomPlot* p : plots()) {
        p->replot(QCustomPlot::rpQueuedReplot);
        drawMs += p->replotTime(true);  // running average of this chart's recent replots
    }
    // Training shares the cores with the window: when a long run in full view makes drawing
    // cost more than a tenth of the frame period, draw less often rather than slow it down.
    skipFrames_ = int(drawMs / (kDrawShare * kFrameMs));
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
    // QCustomPlot draws black on white whatever the palette; take the palette's colours so the
    // charts match a dark desktop, where the fixed series colours were chosen to read too.
    const QPalette pal = palette();
    const QColor background = pal.color(QPalette::Base), text = pal.color(QPalette::Text);
    QColor gridColour = text, subGridColour = text, legendBackground = background;
    gridColour.setAlpha(50);
    subGridColour.setAlpha(20);
    legendBackground.setAlpha(200);  // the lines under the legend stay faintly visible
    for (QCustomPlot* p : plots()) {
        p->setBackground(background);
        for (QCPAxis* a : {p->xAxis, p->yAxis, p->xAxis2, p->yAxis2}) {
            a->setBasePen(QPen(text, 1));
            a->setTickPen(QPen(text, 1));
            a->setSubTickPen(QPen(text, 1));
            a->setLabelColor(text);
            a->setTickLabelColor(text);
            a->grid()->setPen(QPen(gridColour, 1, Qt::DotLine));
            a->grid()->setSubGridPen(QPen(subGridColour, 1, Qt::DotLine));
            a->grid()->setZeroLinePen(QPen(gridColour, 1));
        }
        p->legend->setBrush(legendBackground);
        p->legend->setBorderPen(QPen(gridColour, 1));
        p->legend->setTextColor(text);
        if (auto* title = qobject_cast<QCPTextElement*>(p->plotLayout()->element(0, 0)))
            title->setTextColor(text);
    }
}
