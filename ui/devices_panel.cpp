// DevicesPanel and TimelineView: see devices_panel.hpp. The timeline paints straight from the
// last kMaxSteps StepMetrics it keeps; a step is a few rectangles per tower, so a full repaint
// per step costs next to nothing.
#include "devices_panel.hpp"

#include <QFontMetricsF>
#include <QHBoxLayout>
#include <QLabel>
#include <QPainter>
#include <QProgressBar>
#include <QVBoxLayout>
#include <algorithm>

#include "phase_colors.hpp"

using tb::ui::Phase;

namespace {

// How long a step lasted: its wall time, or, where a report has none, its longest tower.
double stepDuration(const tb::StepMetrics& m) {
    if (m.stepSeconds > 0) return m.stepSeconds;
    double longest = 0;
    for (const auto& t : m.towers) longest = std::max(longest, tb::ui::phasesTotal(t.phases));
    return longest;
}

}  // namespace

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
    setMinimumHeight(90);
    setToolTip(tr("The last %1 steps, left to right, one lane per tower; each step is as wide as it took, split "
                  "into the phases of the legend. Amber is time spent waiting for the slowest tower.")
                   .arg(kMaxSteps));
}

void TimelineView::reset(int towers) {
    towers_ = std::max(0, towers);
    steps_.clear();
    update();
}

void TimelineView::addStep(const tb::StepMetrics& m) {
    steps_.push_back(m);
    while (int(steps_.size()) > kMaxSteps) steps_.pop_front();
    update();
}

void TimelineView::paintEvent(QPaintEvent*) {
    QPainter p(this);
    const QPalette& pal = palette();
    const QColor text = pal.color(QPalette::Text);
    QColor faint = text;
    faint.setAlphaF(0.6f);
    p.fillRect(rect(), pal.color(QPalette::Base));

    const QFontMetricsF fm(font());
    const double lineH = fm.height();
    const QRectF area = QRectF(rect()).adjusted(6, 4, -6, -4);

    // Legend row: a swatch and a name per phase, as many as fit.
    double x = area.left();
    const double sw = std::max(6.0, lineH * 0.7);
    for (Phase phase : tb::ui::kPhaseOrder) {
        const QString name = QLatin1String(tb::ui::phaseName(phase));
        const double w = sw + 4 + fm.horizontalAdvance(name) + 12;
        if (x + w - 12 > area.right()) break;
        const QRectF swatch(x, area.top() + (lineH - sw) / 2, sw, sw);
        p.fillRect(swatch, tb::ui::phaseColor(phase));
        if (phase == Phase::Straggle) p.fillRect(swatch, QBrush(QColor(0, 0, 0, 110), Qt::BDiagPattern));
        p.setPen(text);
        p.drawText(QRectF(x + sw + 4, area.top(), w, lineH), Qt::AlignLeft | Qt::AlignVCenter, name);
        x += w;
    }

    int lanes = towers_;
    for (const auto& m : steps_) lanes = std::max(lanes, int(m.towers.size()));
    double total = 0;
    for (const auto& m : steps_) total += stepDuration(m);
    const QRectF body(area.left(), area.top() + lineH + 6, area.width(), area.height() - lineH - 6);
    if (steps_.empty() || lanes == 0 || total <= 0) {
        p.setPen(faint);
        p.drawText(body, Qt::AlignCenter, tr("No steps yet"));
        return;
    }

    // Lane labels on the left, step numbers along the bottom, the plot between.
    const double labelW = fm.horizontalAdvance(tr("tower %1").arg(lanes - 1)) + 8;
    const QRectF plot(body.left() + labelW, body.top(), body.width() - labelW, body.height() - lineH - 2);
    const double laneH = plot.height() / lanes;
    const double barH = std::max(2.0, laneH * 0.72);
    p.setPen(text);
    for (int lane = 0; lane < lanes; ++lane)
        p.drawText(QRectF(body.left(), plot.top() + lane * laneH, labelW - 6, laneH), Qt::AlignRight | Qt::AlignVCenter,
                   tr("tower %1").arg(lane));

    const QBrush hatch(QColor(0, 0, 0, 110), Qt::BDiagPattern);
    const double perSecond = plot.width() / total;
    x = plot.left();
    double lastLabelEnd = -1e9;
    for (const auto& m : steps_) {
        const double dur = stepDuration(m);
        const double stepW = dur * perSecond;
        const double stepEnd = x + stepW;
        for (int lane = 0; lane < int(m.towers.size()); ++lane) {
            const tb::TowerPhases& ph = m.towers[size_t(lane)].phases;
            const double top = plot.top() + lane * laneH + (laneH - barH) / 2;
            double sx = x;
            // Phases in the order the tower lived them; timings that overrun the step's wall time
            // (clocks read on different threads) are clipped at the step's end.
            for (Phase phase : tb::ui::kPhaseOrder) {
                const double sec = tb::ui::phaseSeconds(ph, phase);
                if (sec <= 0 || sx >= stepEnd) continue;
                const double w = std::min(sec * perSecond, stepEnd - sx);
                const QRectF seg(sx, top, w, barH);
                p.fillRect(seg, tb::ui::phaseColor(phase));
                if (phase == Phase::Straggle) p.fillRect(seg, hatch);
                sx += w;
            }
        }
        p.setPen(QPen(faint, 1));
        p.drawLine(QPointF(stepEnd, plot.top()), QPointF(stepEnd, plot.bottom()));
        // A step number under the step where there is room for it without overlapping the last.
        const QString num = QString::number(m.step);
        const double numW = fm.horizontalAdvance(num);
        if (numW + 4 <= stepW && x >= lastLabelEnd) {
            p.setPen(faint);
            p.drawText(QRectF(x, plot.bottom() + 2, stepW, lineH), Qt::AlignHCenter | Qt::AlignTop, num);
            lastLabelEnd = x + (stepW + numW) / 2 + 4;
        }
        x = stepEnd;
    }
}

DevicesPanel::DevicesPanel(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    auto* title = new QLabel(tr("CPU towers (busy %)"), this);
    QFont bold = title->font();
    bold.setBold(true);
    title->setFont(bold);
    title->setToolTip(tr("Share of each step a tower spent computing, reducing or applying the update, rather "
                         "than waiting for input or for the other towers."));
    layout->addWidget(title);
    bars_ = new QVBoxLayout;
    layout->addLayout(bars_);
    timeline_ = new TimelineView(this);
    layout->addWidget(timeline_, 1);
}

int DevicesPanel::busyPercent(int tower) const {
    return tower >= 0 && tower < busy_.size() ? busy_[tower]->value() : -1;
}

void DevicesPanel::reset(const QStringList& towerDevices) {
    // Deleted now, not later: a new run's bars replace the old ones before anything repaints.
    while (QLayoutItem* item = bars_->takeAt(0)) {
        delete item->widget();
        delete item;
    }
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
        busy_.push_back(bar);
    }
    timeline_->reset(int(towerDevices.size()));
}

void DevicesPanel::addStep(const tb::StepMetrics& m) {
    // An async report measures only the tower that pushed; the others keep their last value.
    const bool async = m.pusher >= 0;
    const int n = std::min(int(busy_.size()), int(m.towers.size()));
    for (int i = 0; i < n; ++i) {
        if (async && i != m.pusher) continue;
        busy_[i]->setValue(std::clamp(qRound(m.towers[size_t(i)].busyFraction * 100), 0, 100));
    }
    timeline_->addStep(m);
}
