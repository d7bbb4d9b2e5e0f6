// DevicesPanel and TimelineView: see devices_panel.hpp. The timeline lays its bars out from the
// reports it keeps (the last kMaxSteps steps, or each tower's last pushes) on every paint and
// hover: a few rectangles per tower, so a full repaint per report costs next to nothing. GPU samples set the bars and append to the sparklines at
// once; a timer replots the sparklines (QCustomPlot's real-time demo, as the charts panel).
#include "devices/devices_panel.hpp"

#include <qcustomplot.h>

#include <QFontMetricsF>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHelpEvent>
#include <QLabel>
#include <QMap>
#include <QPainter>
#include <QProgressBar>
#include <QScrollArea>
#include <QTimer>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <span>

#include "devices/phase_colors.hpp"
#include "view_format.hpp"

using tb::ui::Phase;

namespace {

// The charts panel's Tableau blue and orange: legible on light and dark palettes alike.
const QColor kUtilColour(0x4E, 0x79, 0xA7), kMemoryColour(0xF2, 0x8E, 0x2B);
constexpr double kGiB = double(1ull << 30);

// A chart with no decoration but a 0-100 % scale: a minute of one GPU at a glance.
QCustomPlot* sparkline(QWidget* parent) {
    auto* p = new QCustomPlot(parent);
    p->setMinimumHeight(48);
    p->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
    const QPalette pal = parent->palette();
    const QColor text = pal.color(QPalette::Text);
    QColor grid = text;
    grid.setAlpha(40);
    p->setBackground(pal.color(QPalette::Base));
    p->xAxis->setTicks(false);
    p->xAxis->setTickLabels(false);
    p->xAxis->setBasePen(QPen(grid, 1));
    p->xAxis->grid()->setVisible(false);
    QFont small = p->font();
    small.setPointSizeF(std::max(6.0, small.pointSizeF() - 2));
    p->yAxis->setRange(0, 100);
    auto ticker = QSharedPointer<QCPAxisTickerFixed>::create();
    ticker->setTickStep(50);
    ticker->setScaleStrategy(QCPAxisTickerFixed::ssNone);
    p->yAxis->setTicker(ticker);
    p->yAxis->setSubTicks(false);
    p->yAxis->setBasePen(QPen(grid, 1));
    p->yAxis->setTickPen(QPen(grid, 1));
    p->yAxis->setTickLabelColor(text);
    p->yAxis->setTickLabelFont(small);
    p->yAxis->grid()->setPen(QPen(grid, 1, Qt::DotLine));
    // Room above for the 100 label, which sits on the plot's top edge (QCustomPlot leaves out a
    // label that would cross the widget's edge), and below for half of the 0 label.
    const int labelH = QFontMetrics(small).height();
    p->axisRect()->setAutoMargins(QCP::msLeft);
    p->axisRect()->setMargins(QMargins(0, labelH, 4, labelH / 2 + 1));
    p->xAxis->setRange(-DevicesPanel::kHistorySeconds, 0);
    return p;
}

QCPGraph* sparkLine(QCustomPlot* p, const QColor& colour) {
    QCPGraph* g = p->addGraph();
    g->setPen(QPen(colour, 1.5));
    return g;
}

QLabel* legendLabel(const QString& text, const QColor& colour, QWidget* parent) {
    auto* l = new QLabel(QStringLiteral("\u25A0 ") + text, parent);
    l->setStyleSheet(QStringLiteral("color: %1;").arg(colour.name()));
    return l;
}

// How long a step lasted: its wall time, or, where a report has none, its longest tower.
double stepDuration(const tb::StepMetrics& m) {
    if (m.stepSeconds > 0) return m.stepSeconds;
    double longest = 0;
    for (const auto& t : m.towers) longest = std::max(longest, tb::ui::phasesTotal(t.phases));
    return longest;
}

// Seconds the trainer counts as busy (Trainer::execute's busy sum): everything but waiting.
double busySeconds(const tb::TowerPhases& p) { return p.forward + p.backward + p.straggle + p.reduce + p.apply; }

// A tick step of 1, 2 or 5 x 10^k seconds that leaves at least `minGap` between labels.
double timeTickStep(double secondsPerPixel, double minGap) {
    const double want = secondsPerPixel * minGap;
    const double decade = std::pow(10.0, std::floor(std::log10(want)));
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (m * decade >= want) return m * decade;
    return 10 * decade;
}

// Decimals that write multiples of `step` exactly (0.05 -> 2).
int decimalsFor(double step) { return std::max(0, int(std::ceil(-std::log10(step) - 1e-9))); }

// A step's or a push's phases stacked from x0 in `order`, `perSecond` pixels a second, drawn
// only between lo and hi (a step's end; the window's left edge).
void paintPhases(QPainter& p, const tb::TowerPhases& ph, std::span<const Phase> order, double x0, double perSecond,
                 double lo, double hi, double top, double h) {
    const QBrush hatch(QColor(0, 0, 0, 110), Qt::BDiagPattern);
    double x = x0;
    for (Phase phase : order) {
        const double sec = tb::ui::phaseSeconds(ph, phase);
        if (sec <= 0) continue;
        const double a = std::max(x, lo), b = std::min(x + sec * perSecond, hi);
        x += sec * perSecond;
        if (b <= a) continue;
        const QRectF seg(a, top, b - a, h);
        p.fillRect(seg, tb::ui::phaseColor(phase));
        if (phase == Phase::Straggle) p.fillRect(seg, hatch);
    }
}

}  // namespace

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
    setMinimumHeight(90);
    setToolTip(tb::ui::wrappedToolTip(
        tr("One lane per tower. Synchronous runs: the last %1 steps, left to right, each as wide as it took, split "
           "into the phases of the legend; amber is time spent waiting for the slowest tower, pale grey ('other') "
           "the rest of the step outside the named phases (threads woken and joined, the step's bookkeeping), "
           "so each bar spans its step; a blue mark ends a step after which the replicas were averaged.\n"
           "Asynchronous runs: the run's clock, each push in its tower's lane where it happened; the towers "
           "work side by side and nobody waits.\nHover a bar for its phases in milliseconds.")
            .arg(kMaxSteps)));
}

void TimelineView::reset(int towers, bool pipeline) {
    towers_ = std::max(0, towers);
    async_ = sawAverage_ = false;
    pipeline_ = pipeline;
    stages_ = 0;
    steps_.clear();
    pushes_.clear();
    update();
}

void TimelineView::addStep(const tb::StepMetrics& m) {
    if (m.pusher >= 0) {
        // An asynchronous report measures the pusher alone: it joins that tower's lane.
        async_ = true;
        if (int(pushes_.size()) <= m.pusher) pushes_.resize(size_t(m.pusher) + 1);
        if (size_t(m.pusher) >= m.towers.size()) return;
        auto& lane = pushes_[size_t(m.pusher)];
        lane.push_back({m.step, m.staleness, m.elapsedSeconds, m.towers[size_t(m.pusher)].phases});
        while (int(lane.size()) > kMaxPushesPerTower) lane.pop_front();
    } else {
        steps_.push_back(m);
        while (int(steps_.size()) > kMaxSteps) steps_.pop_front();
        pipeline_ = pipeline_ || !m.stageBlocks.empty();
        if (m.stages > 0) stages_ = m.stages;
        sawAverage_ = sawAverage_ || m.averaged;
    }
    update();
}

int TimelineView::stepsShown() const {
    if (!async_) return int(steps_.size());
    int n = 0;
    for (const auto& lane : pushes_) n += int(lane.size());
    return n;
}

std::span<const Phase> TimelineView::phaseOrder() const {
    if (pipeline_) return std::span<const Phase>(tb::ui::kPipelinePhaseOrder);
    return async_ ? std::span<const Phase>(tb::ui::kAsyncPhaseOrder) : std::span<const Phase>(tb::ui::kPhaseOrder);
}

QString TimelineView::phaseLabel(Phase phase) const {
    // A pipeline stage's wait is the bubble; its apply, its own update.
    if (pipeline_ && phase == Phase::Wait) return tr("bubble (idle)");
    if (pipeline_ && phase == Phase::Apply) return tr("update");
    // An asynchronous push has no wait; its reduce and apply are the pull and the push.
    return QLatin1String(async_ ? tb::ui::asyncPhaseName(phase) : tb::ui::phaseName(phase));
}

QString TimelineView::laneLabel(int lane) const {
    if (!pipeline_) return tr("tower %1").arg(lane);
    // Replicas of the pipeline (hybrid) follow replica by replica.
    const int stages = stages_ > 0 ? stages_ : std::max(1, lanes());
    return lanes() > stages ? tr("stage %1 \u00b7 r%2").arg(lane % stages + 1).arg(lane / stages + 1)
                            : tr("stage %1").arg(lane + 1);
}

QVector<TimelineView::LegendEntry> TimelineView::legendEntries(double width) const {
    const QFontMetricsF fm(font());
    const double lineH = fm.height(), sw = std::max(6.0, lineH * 0.7);
    QVector<LegendEntry> out;
    double x = 0, y = 0;
    for (Phase phase : phaseOrder()) {
        const double textW = fm.horizontalAdvance(phaseLabel(phase));
        if (x > 0 && x + sw + 4 + textW > width) {  // wrap rather than leave a phase out
            x = 0;
            y += lineH;
        }
        out.push_back({phase, QRectF(x, y + (lineH - sw) / 2, sw, sw), QRectF(x + sw + 4, y, textW + 2, lineH)});
        x += sw + 4 + textW + 12;
    }
    return out;
}

QVector<QRectF> TimelineView::legendLabels() const {
    const Frame f = frame();
    QVector<QRectF> out;
    for (const LegendEntry& e : legendEntries(f.legend.width())) out << e.label.translated(f.legend.topLeft());
    return out;
}

QRectF TimelineView::plotArea() const { return frame().plot; }

int TimelineView::lanes() const {
    int n = std::max(towers_, int(pushes_.size()));
    for (const auto& m : steps_) n = std::max(n, int(m.towers.size()));
    return n;
}

TimelineView::Frame TimelineView::frame() const {
    Frame f;
    const QFontMetricsF fm(font());
    const double lineH = fm.height();
    const QRectF area = QRectF(rect()).adjusted(6, 4, -6, -4);
    f.lanes = lanes();
    const QVector<LegendEntry> entries = legendEntries(area.width());
    f.legend = QRectF(area.left(), area.top(), area.width(), entries.isEmpty() ? lineH : entries.back().label.bottom());
    const double marksH = !async_ && sawAverage_ ? lineH : 0;
    f.marks = QRectF(area.left(), f.legend.bottom() + 4, area.width(), marksH);
    f.labelW = fm.horizontalAdvance(laneLabel(std::max(0, f.lanes - 1))) + 8;
    const double top = f.marks.bottom() + (marksH > 0 ? 2 : 0);
    f.plot = QRectF(area.left() + f.labelW, top, area.width() - f.labelW, area.bottom() - lineH - 2 - top);
    f.axis = QRectF(f.plot.left(), f.plot.bottom() + 2, f.plot.width(), lineH);
    f.laneH = f.lanes > 0 ? f.plot.height() / f.lanes : 0;
    f.barH = std::max(2.0, f.laneH * 0.72);
    if (async_) {
        // Each lane shows at least its last two pushes whole, so the window is as long as the
        // slowest tower needs: a straggler's long compute is seen at its true length, and the
        // fast towers' many pushes in the same time beside it.
        for (const auto& lane : pushes_)
            if (!lane.empty()) f.t1 = std::max(f.t1, lane.back().end);
        double span = 0;
        for (const auto& lane : pushes_) {
            if (lane.empty()) continue;
            const Push& older = lane.size() > 1 ? lane[lane.size() - 2] : lane.back();
            span = std::max(span, f.t1 - (older.end - tb::ui::phasesTotal(older.phases)));
        }
        f.t0 = f.t1 - std::max(span * 1.04, 1e-3);
        f.perSecond = f.plot.width() / (f.t1 - f.t0);
    } else {
        double total = 0;
        for (const auto& m : steps_) total += stepDuration(m);
        f.perSecond = total > 0 ? f.plot.width() / total : 0;
    }
    return f;
}

QVector<TimelineView::Bar> TimelineView::bars() const {
    QVector<Bar> out;
    const Frame f = frame();
    if (f.lanes == 0 || f.plot.width() <= 0) return out;
    auto laneTop = [&](int lane) { return f.plot.top() + lane * f.laneH; };
    if (async_) {
        const double perSecond = f.perSecond;
        for (int lane = 0; lane < int(pushes_.size()); ++lane)
            for (const Push& push : pushes_[size_t(lane)]) {
                // The engine stamps a push when it records it, just after the holder applied it;
                // no start time is reported, so it is derived: that stamp less the phases the
                // tower measured (its input, pull, compute, slowdown and push).
                const double start = push.end - tb::ui::phasesTotal(push.phases);
                if (push.end <= f.t0) continue;
                Bar b;
                b.tower = lane;
                b.step = push.update;
                b.start = start;
                b.end = push.end;
                b.staleness = push.staleness;
                b.phases = push.phases;
                const double x0 = f.plot.left() + (start - f.t0) * perSecond;
                const double x1 = f.plot.left() + (push.end - f.t0) * perSecond;
                b.rect = QRectF(QPointF(std::max(x0, f.plot.left()), laneTop(lane) + (f.laneH - f.barH) / 2),
                                QPointF(x1, laneTop(lane) + (f.laneH + f.barH) / 2));
                b.cell = QRectF(b.rect.left(), laneTop(lane), std::max(3.0, b.rect.width()), f.laneH);
                out.push_back(b);
            }
        return out;
    }
    if (f.perSecond <= 0) return out;
    const double perSecond = f.perSecond;
    double x = f.plot.left();
    for (const auto& m : steps_) {
        const double w = stepDuration(m) * perSecond;
        for (int lane = 0; lane < int(m.towers.size()); ++lane) {
            Bar b;
            b.tower = lane;
            b.step = m.step;
            b.stepSeconds = m.stepSeconds;
            b.averaged = m.averaged;
            b.phases = m.towers[size_t(lane)].phases;
            b.bubble = m.bubbleFraction;
            b.stages = int(m.stageBlocks.size());
            if (size_t(lane) < m.stageBlocks.size())
                b.microBatches = int(std::count_if(m.stageBlocks[size_t(lane)].begin(), m.stageBlocks[size_t(lane)].end(),
                                                   [](const tb::PipelineBlock& k) { return k.forward; }));
            // Timings that overrun the step's wall time (clocks read on different threads) are
            // clipped at the step's end.
            const double len = std::min(tb::ui::phasesTotal(b.phases) * perSecond, w);
            b.rect = QRectF(x, laneTop(lane) + (f.laneH - f.barH) / 2, len, f.barH);
            b.cell = QRectF(x, laneTop(lane), w, f.laneH);
            out.push_back(b);
        }
        x += w;
    }
    return out;
}

QVector<TimelineView::Block> TimelineView::blocks() const {
    QVector<Block> out;
    const Frame f = frame();
    if (!pipeline_ || async_ || f.lanes == 0 || f.perSecond <= 0) return out;
    double x = f.plot.left();
    for (const auto& m : steps_) {
        const double w = stepDuration(m) * f.perSecond;
        for (size_t s = 0; s < m.stageBlocks.size() && int(s) < f.lanes; ++s) {
            const double top = f.plot.top() + double(s) * f.laneH + (f.laneH - f.barH) / 2;
            for (const tb::PipelineBlock& k : m.stageBlocks[s]) {
                // Where it ran in its step, clipped at the step's end (clocks of two threads).
                const double a = x + std::clamp(k.start * f.perSecond, 0.0, w), b = x + std::clamp(k.end * f.perSecond, 0.0, w);
                out.push_back({int(s), m.step, k.micro, k.forward, QRectF(a, top, std::max(1.0, b - a), f.barH)});
            }
        }
        x += w;
    }
    return out;
}

QVector<int64_t> TimelineView::averagingMarks() const {
    QVector<int64_t> marks;
    if (async_) return marks;
    for (const auto& m : steps_)
        if (m.averaged) marks.push_back(m.step);
    return marks;
}

QString TimelineView::toolTipAt(const QPointF& pos) const {
    const QVector<Bar> all = bars();
    // The last hit is the one drawn on top (async pushes of one lane may touch).
    auto hit = std::find_if(all.rbegin(), all.rend(), [&](const Bar& b) { return b.cell.contains(pos); });
    if (hit == all.rend()) return {};
    const Bar& b = *hit;
    QString head = async_ ? tr("<b>tower %1 \u00b7 update %2</b> \u00b7 staleness %3")
                                .arg(b.tower)
                                .arg(tb::ui::formatCount(double(b.step)))
                                .arg(b.staleness)
                          : tr("<b>%1 \u00b7 step %2</b>").arg(laneLabel(b.tower), tb::ui::formatCount(double(b.step)));
    QString rows;
    double sum = 0;
    for (Phase phase : phaseOrder()) {
        const double sec = tb::ui::phaseSeconds(b.phases, phase);
        sum += std::max(0.0, sec);
        rows += QStringLiteral("<tr><td><span style='color:%1'>\u25A0</span> %2</td><td align='right'>%3</td></tr>")
                    .arg(tb::ui::phaseColor(phase).name(), phaseLabel(phase), tb::ui::formatMs(sec));
    }
    rows += tr("<tr><td><b>total</b></td><td align='right'><b>%1</b></td></tr>").arg(tb::ui::formatMs(sum));
    QString foot;
    if (async_)
        foot = tr("From %1 s to %2 s on the run's clock; the start is the push's time less its phases.")
                   .arg(tb::ui::formatCount(b.start, 3), tb::ui::formatCount(b.end, 3));
    else if (pipeline_ && b.bubble >= 0)
        foot = tr("%1 micro-batch(es) through %2 stages; the step took %3. The stages idled %4 of it until the last "
                  "backward (the bubble); equal stages would idle (S-1)/(M+S-1) = %5.")
                   .arg(b.microBatches)
                   .arg(b.stages)
                   .arg(tb::ui::formatMs(b.stepSeconds), tb::ui::formatCount(100 * b.bubble, 1) + QStringLiteral("%"),
                        tb::ui::formatCount(100.0 * (b.stages - 1) / std::max(1, b.microBatches + b.stages - 1), 1) +
                            QStringLiteral("%"));
    else
        foot = tr("The step took %1 of wall time.%2")
                   .arg(tb::ui::formatMs(b.stepSeconds),
                        b.averaged ? tr(" The replicas were averaged after it (its reduce phase).") : QString());
    return QStringLiteral("<p>%1</p><table cellspacing='0' cellpadding='1'>%2</table><p>%3</p>").arg(head, rows, foot);
}

bool TimelineView::event(QEvent* e) {
    if (e->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(e);
        const QString tip = toolTipAt(help->pos());
        QToolTip::showText(help->globalPos(), tip.isEmpty() ? toolTip() : tip, this);
        return true;
    }
    return QWidget::event(e);
}

void TimelineView::paintEvent(QPaintEvent*) {
    QPainter p(this);
    const QPalette& pal = palette();
    const QColor text = pal.color(QPalette::Text);
    QColor faint = text;
    faint.setAlphaF(0.6f);
    p.fillRect(rect(), pal.color(QPalette::Base));
    const QFontMetricsF fm(font());
    const Frame f = frame();

    // Legend: a swatch and a name per phase, in rows as the frame laid them out.
    const std::span<const Phase> order = phaseOrder();
    for (const LegendEntry& e : legendEntries(f.legend.width())) {
        const QRectF swatch = e.swatch.translated(f.legend.topLeft());
        p.fillRect(swatch, tb::ui::phaseColor(e.phase));
        if (e.phase == Phase::Straggle || (pipeline_ && e.phase == Phase::Wait))
            p.fillRect(swatch, QBrush(QColor(0, 0, 0, 110), Qt::BDiagPattern));
        p.setPen(text);
        p.drawText(e.label.translated(f.legend.topLeft()), Qt::AlignLeft | Qt::AlignVCenter, phaseLabel(e.phase));
    }

    const QVector<Bar> all = bars();
    if (all.isEmpty()) {
        p.setPen(faint);
        p.drawText(f.plot.united(f.axis), Qt::AlignCenter, tr("No steps yet"));
        return;
    }
    p.setPen(text);
    for (int lane = 0; lane < f.lanes; ++lane)
        p.drawText(QRectF(f.plot.left() - f.labelW, f.plot.top() + lane * f.laneH, f.labelW - 6, f.laneH),
                   Qt::AlignRight | Qt::AlignVCenter, laneLabel(lane));

    p.save();
    p.setClipRect(f.plot.adjusted(0, 0, 1, 0));
    for (const Bar& b : all) {
        // A push starts where its derived start lies, clipped at the window's left edge; a
        // step's phases start at its column's left and are clipped at its end.
        if (async_)
            paintPhases(p, b.phases, order, f.plot.left() + (b.start - f.t0) * f.perSecond, f.perSecond, f.plot.left(),
                        b.rect.right(), b.rect.top(), b.rect.height());
        else if (pipeline_) {
            // The stage's whole step is idle (the bubble, hatched) but where a block ran; its
            // update follows its last block.
            const QRectF lane(b.cell.left(), b.rect.top(), b.cell.width(), b.rect.height());
            p.fillRect(lane, tb::ui::phaseColor(Phase::Wait).lighter(130));
            p.fillRect(lane, QBrush(QColor(0, 0, 0, 60), Qt::BDiagPattern));
        } else
            paintPhases(p, b.phases, order, b.cell.left(), f.perSecond, b.cell.left(), b.cell.right(), b.rect.top(),
                        b.rect.height());
    }
    if (pipeline_) {
        QMap<std::pair<int, int64_t>, QRectF> last;  // per stage and step: the block that ended last
        for (const Block& k : blocks()) {
            // Neighbouring micro-batches in alternating shades, each numbered where it fits.
            QColor c = tb::ui::phaseColor(k.forward ? Phase::Forward : Phase::Backward);
            if (k.micro % 2) c = c.lighter(118);
            p.fillRect(k.rect, c);
            p.setPen(QPen(pal.color(QPalette::Base), 1));
            p.drawLine(k.rect.topLeft(), k.rect.bottomLeft());
            const QString num = QString::number(k.micro + 1);
            if (fm.horizontalAdvance(num) + 3 <= k.rect.width() && fm.height() <= k.rect.height() + 2) {
                p.setPen(k.forward ? QColor(20, 40, 20) : QColor(235, 245, 235));
                p.drawText(k.rect, Qt::AlignCenter, num);
            }
            QRectF& end = last[{k.stage, k.step}];
            if (end.isNull() || k.rect.right() > end.right()) end = k.rect;
        }
        for (const Bar& b : all) {
            const auto it = last.constFind({b.tower, b.step});
            if (it == last.constEnd() || b.phases.apply <= 0) continue;
            const double a = it->right(), w = std::min(b.phases.apply * f.perSecond, b.cell.right() - a);
            if (w > 0) p.fillRect(QRectF(a, b.rect.top(), w, b.rect.height()), tb::ui::phaseColor(Phase::Apply));
        }
    }
    p.restore();

    if (async_) {
        // The run's clock along the bottom, in ticks of 1, 2 or 5 x 10^k seconds.
        const double perSecond = f.perSecond;
        const double widest = fm.horizontalAdvance(tb::ui::formatCount(f.t1, 3) + QStringLiteral(" s"));
        const double tick = timeTickStep(1 / perSecond, widest + 16);
        const int decimals = decimalsFor(tick);
        for (double t = std::ceil(f.t0 / tick) * tick; t <= f.t1 + 1e-12; t += tick) {
            const double tx = f.plot.left() + (t - f.t0) * perSecond;
            p.setPen(QPen(faint, 1, Qt::DotLine));
            p.drawLine(QPointF(tx, f.plot.top()), QPointF(tx, f.plot.bottom()));
            const QString label = tb::ui::formatCount(t, decimals) + QStringLiteral(" s");
            const double lw = fm.horizontalAdvance(label);
            if (tx - lw / 2 < f.axis.left() - f.labelW || tx + lw / 2 > f.axis.right() + 6) continue;
            p.setPen(faint);
            p.drawText(QRectF(tx - lw / 2 - 2, f.axis.top(), lw + 4, f.axis.height()), Qt::AlignCenter, label);
        }
        return;
    }

    // Step boundaries, averaging marks, step numbers where they fit without overlapping.
    double lastLabelEnd = -1e9;
    const QColor averaging = tb::ui::phaseColor(Phase::Reduce);
    for (const Bar& b : all) {
        if (b.tower != 0) continue;  // one per step
        const double stepEnd = b.cell.right();
        if (b.averaged) {
            p.setPen(QPen(averaging, 2));
            p.drawLine(QPointF(stepEnd, f.marks.top() + f.marks.height() / 2), QPointF(stepEnd, f.plot.bottom()));
            p.setPen(averaging);
            const QString avg = tr("avg");
            const double aw = fm.horizontalAdvance(avg);
            p.drawText(QRectF(stepEnd - aw - 3, f.marks.top(), aw + 2, f.marks.height()), Qt::AlignRight | Qt::AlignVCenter,
                       avg);
        } else {
            p.setPen(QPen(faint, 1));
            p.drawLine(QPointF(stepEnd, f.plot.top()), QPointF(stepEnd, f.plot.bottom()));
        }
        const QString num = tb::ui::formatCount(double(b.step));
        const double numW = fm.horizontalAdvance(num);
        if (numW + 4 <= b.cell.width() && b.cell.left() >= lastLabelEnd) {
            p.setPen(faint);
            p.drawText(QRectF(b.cell.left(), f.axis.top(), b.cell.width(), f.axis.height()),
                       Qt::AlignHCenter | Qt::AlignTop, num);
            lastLabelEnd = b.cell.left() + (b.cell.width() + numW) / 2 + 4;
        }
    }
}

DevicesPanel::DevicesPanel(const DeviceCatalog& catalog, QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    QFont bold = font();
    bold.setBold(true);

    auto* gpuTitle = new QLabel(tr("GPUs"), this);
    gpuTitle->setFont(bold);
    gpuTitle->setToolTip(tb::ui::wrappedToolTip(tr("Every GPU of the machine, read through NVML 5 times a second, during a run or not: "
                            "utilisation is the share of time a kernel was running, memory is used as nvidia-smi "
                            "shows it. The charts show the last %1 s in percent.")
                             .arg(kHistorySeconds)));
    layout->addWidget(gpuTitle);
    if (catalog.gpuCount() > 0) {
        // Scrolls where a machine has more GPUs than the dock has height (8 is common).
        auto* box = new QWidget;
        auto* boxLayout = new QVBoxLayout(box);
        boxLayout->setContentsMargins(0, 0, 0, 0);
        for (int i = 0; i < catalog.gpuCount(); ++i) {
            const tb::GpuInfo& info = catalog.gpus[size_t(i)];
            GpuRow row;
            auto* name = new QLabel(QStringLiteral("gpu:%1 %2").arg(i).arg(QString::fromStdString(info.name)), box);
            row.util = new QProgressBar(box);
            row.util->setRange(0, 100);
            row.util->setFormat(QStringLiteral("%p%"));
            row.util->reset();  // no reading yet: no value shown
            row.memory = new QProgressBar(box);
            row.memory->setRange(0, 1000);
            row.memory->setFormat(tr("\u2014 / %1 GiB").arg(double(info.totalBytes) / kGiB, 0, 'f', 1));
            row.memory->setValue(0);
            row.plot = sparkline(box);
            row.plot->setToolTip(tb::ui::wrappedToolTip(tr("gpu:%1 over the last %2 s: utilisation (blue) and memory used (orange), "
                                    "in percent")
                                     .arg(i)
                                     .arg(kHistorySeconds)));
            row.utilGraph = sparkLine(row.plot, kUtilColour);
            row.memoryGraph = sparkLine(row.plot, kMemoryColour);
            auto* grid = new QGridLayout;
            grid->setContentsMargins(0, 0, 0, 6);
            grid->setVerticalSpacing(2);
            grid->addWidget(name, 0, 0, 1, 2);
            grid->addWidget(legendLabel(tr("util"), kUtilColour, box), 1, 0);
            grid->addWidget(row.util, 1, 1);
            grid->addWidget(legendLabel(tr("memory"), kMemoryColour, box), 2, 0);
            grid->addWidget(row.memory, 2, 1);
            grid->addWidget(row.plot, 3, 0, 1, 2);
            grid->setColumnStretch(1, 1);
            grid->setRowStretch(3, 1);  // height to spare goes to the chart
            boxLayout->addLayout(grid);
            gpus_.push_back(row);
        }
        auto* scroll = new QScrollArea(this);
        scroll->setWidget(box);
        scroll->setWidgetResizable(true);
        scroll->setFrameShape(QFrame::NoFrame);
        scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
        scroll->setSizeAdjustPolicy(QAbstractScrollArea::AdjustToContents);
        layout->addWidget(scroll, 1);
    }
    gpuNote_ = new QLabel(this);
    gpuNote_->setWordWrap(true);
    QPalette faint = gpuNote_->palette();
    QColor faintText = faint.color(QPalette::WindowText);
    faintText.setAlphaF(0.7f);
    faint.setColor(QPalette::WindowText, faintText);
    gpuNote_->setPalette(faint);
    if (catalog.gpuCount() == 0) gpuNote_->setText(tr("No GPU: %1").arg(catalog.whyNoGpu));
    gpuNote_->setVisible(!gpuNote_->text().isEmpty());
    layout->addWidget(gpuNote_);

    auto* title = new QLabel(tr("Towers (busy %)"), this);
    title->setFont(bold);
    title->setToolTip(tb::ui::wrappedToolTip(
        tr("Share of its time a tower spent computing, reducing or applying the update, rather than waiting for "
           "input or for the other towers: over the whole run (the bar, as the run's summary counts it), and "
           "over its last %1 s beside it.")
            .arg(kRecentSeconds)));
    layout->addWidget(title);
    bars_ = new QVBoxLayout;
    layout->addLayout(bars_);
    timelineTitle_ = new QLabel(this);
    timelineTitle_->setFont(bold);
    layout->addWidget(timelineTitle_);
    timeline_ = new TimelineView(this);
    layout->addWidget(timeline_, 1);

    timer_ = new QTimer(this);
    connect(timer_, &QTimer::timeout, this, &DevicesPanel::replotGpus);
    timer_->start(kFrameMs);
}

int DevicesPanel::gpuUtilPercent(int gpu) const {
    return gpu >= 0 && gpu < gpus_.size() ? gpus_[gpu].util->value() : -1;  // reset(): below the range
}

QString DevicesPanel::gpuMemoryText(int gpu) const {
    return gpu >= 0 && gpu < gpus_.size() ? gpus_[gpu].memory->text() : QString();
}

QCustomPlot* DevicesPanel::gpuPlot(int gpu) const {
    return gpu >= 0 && gpu < gpus_.size() ? gpus_[gpu].plot : nullptr;
}

QString DevicesPanel::gpuNote() const { return gpuNote_->text(); }

void DevicesPanel::setTelemetryUnavailable(const QString& why) {
    // Only where there are GPUs to watch: "No GPU" already says everything otherwise.
    if (gpus_.isEmpty()) return;
    gpuNote_->setText(tr("No GPU telemetry: %1").arg(why));
    gpuNote_->setVisible(true);
}

void DevicesPanel::addSamples(const std::vector<tb::DeviceSample>& samples) {
    for (const tb::DeviceSample& s : samples) {
        if (s.index < 0 || s.index >= gpus_.size()) continue;
        GpuRow& row = gpus_[s.index];
        // Unknown readings (NaN, -1) leave the bar empty and the line with a gap, not a zero.
        if (std::isfinite(s.utilGpu)) {
            row.util->setValue(std::clamp(qRound(s.utilGpu), 0, 100));
            row.utilGraph->addData(s.t, s.utilGpu);
        } else {
            row.util->reset();
            row.utilGraph->addData(s.t, qQNaN());
        }
        if (s.memUsed >= 0 && s.memTotal > 0) {
            const double share = double(s.memUsed) / double(s.memTotal);
            row.memory->setValue(std::clamp(qRound(share * 1000), 0, 1000));
            row.memory->setFormat(tr("%1 / %2 GiB")
                                      .arg(double(s.memUsed) / kGiB, 0, 'f', 1)
                                      .arg(double(s.memTotal) / kGiB, 0, 'f', 1));
            row.memoryGraph->addData(s.t, 100 * share);
        } else {
            row.memoryGraph->addData(s.t, qQNaN());
        }
        // A little more than the window is kept, so the line enters from the left edge.
        for (QCPGraph* g : {row.utilGraph, row.memoryGraph}) g->data()->removeBefore(s.t - kHistorySeconds - 1);
        row.lastT = s.t;
        dirty_ = true;
    }
}

void DevicesPanel::replotGpus() {
    // A hidden panel (dock closed) keeps dirty_ and catches up when shown.
    if (!dirty_ || !isVisible()) return;
    dirty_ = false;
    for (const GpuRow& row : gpus_) {
        row.plot->xAxis->setRange(std::max(row.lastT, kHistorySeconds), kHistorySeconds, Qt::AlignRight);
        row.plot->replot(QCustomPlot::rpQueuedReplot);
    }
}

int DevicesPanel::busyPercent(int tower) const {
    return tower >= 0 && tower < busyBars_.size() ? busyBars_[tower]->value() : -1;
}

int DevicesPanel::recentBusyPercent(int tower) const {
    return tower >= 0 && tower < busy_.size() ? qRound(100 * busy_[tower].recentFraction()) : -1;
}

double DevicesPanel::Busy::recentFraction() const {
    double b = 0, t = 0;
    for (const Report& r : recent) {
        b += r.busy;
        t += r.seconds;
    }
    return t > 0 ? std::min(1.0, b / t) : 0;
}

void DevicesPanel::reset(const QStringList& towerDevices) {
    // Deleted now, not later: a new run's bars replace the old ones before anything repaints.
    while (QLayoutItem* item = bars_->takeAt(0)) {
        delete item->widget();
        delete item;
    }
    busyBars_.clear();
    busy_.clear();
    for (const QString& device : towerDevices) {
        auto* row = new QWidget(this);
        auto* rowLayout = new QHBoxLayout(row);
        rowLayout->setContentsMargins(0, 0, 0, 0);
        auto* name = new QLabel(device, row);
        name->setMinimumWidth(name->fontMetrics().horizontalAdvance(QStringLiteral("cpu:00")) + 6);
        auto* bar = new QProgressBar(row);
        bar->setRange(0, 100);
        bar->setValue(0);
        bar->setFormat(QStringLiteral("%p%"));
        rowLayout->addWidget(name);
        rowLayout->addWidget(bar, 1);
        bars_->addWidget(row);
        busyBars_.push_back(bar);
        busy_.push_back({});
    }
    timeline_->reset(int(towerDevices.size()), tb::ui::isStageLane(towerDevices.value(0)));
    timelineTitle_->setText(tr("Timeline: the last %1 steps").arg(TimelineView::kMaxSteps));
}

void DevicesPanel::addStep(const tb::StepMetrics& m) {
    // Every tower of a synchronous step reports; an asynchronous report measures the pusher
    // alone, over its own cycle (stepSeconds), and the others keep their figures.
    const bool async = m.pusher >= 0;
    const int n = std::min(int(busyBars_.size()), int(m.towers.size()));
    for (int i = 0; i < n && m.stepSeconds > 0; ++i) {
        if (async && i != m.pusher) continue;
        Busy& b = busy_[i];
        const double busy = busySeconds(m.towers[size_t(i)].phases);
        b.busy += busy;
        b.seconds += m.stepSeconds;
        // The recent window on the tower's own clock (its time summed), whole reports, at least one.
        b.recent.push_back({b.seconds, busy, m.stepSeconds});
        while (b.recent.size() > 1 && b.recent.front().t <= b.seconds - kRecentSeconds) b.recent.pop_front();
        QProgressBar* bar = busyBars_[i];
        // The run's share as the engine counts it for the summary, where the step says (older
        // metrics files do not: then over the steps' own times).
        const double run = m.towers[size_t(i)].runBusyFraction >= 0 ? m.towers[size_t(i)].runBusyFraction
                                                                      : std::min(1.0, b.busy / b.seconds);
        bar->setValue(std::clamp(qRound(100 * run), 0, 100));
        bar->setFormat(tr("run %p% \u00b7 last %1 s %2%").arg(kRecentSeconds).arg(qRound(100 * b.recentFraction())));
    }
    if (async && !timeline_->wallClock())
        timelineTitle_->setText(tr("Timeline: each tower's pushes on the run's clock"));
    timeline_->addStep(m);
}

void DevicesPanel::finishRun(const std::vector<double>& towerBusy) {
    for (size_t i = 0; i < towerBusy.size() && i < size_t(busyBars_.size()); ++i)
        busyBars_[qsizetype(i)]->setValue(std::clamp(qRound(100 * towerBusy[i]), 0, 100));
}

void DevicesPanel::addSteps(const std::vector<tb::StepMetrics>& steps) {
    for (const tb::StepMetrics& m : steps) addStep(m);
}
