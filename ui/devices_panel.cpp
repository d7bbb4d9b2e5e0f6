// DevicesPanel and TimelineView: see devices_panel.hpp. The timeline paints straight from the
// last kMaxSteps StepMetrics it keeps; a step is a few rectangles per tower, so a full repaint
// per step costs next to nothing. GPU samples set the bars and append to the sparklines at
// once; a timer replots the sparklines (QCustomPlot's real-time demo, as the charts panel).
#include "devices_panel.hpp"

#include <qcustomplot.h>

#include <QFontMetricsF>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPainter>
#include <QProgressBar>
#include <QScrollArea>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "phase_colors.hpp"

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

DevicesPanel::DevicesPanel(const DeviceCatalog& catalog, QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    QFont bold = font();
    bold.setBold(true);

    auto* gpuTitle = new QLabel(tr("GPUs"), this);
    gpuTitle->setFont(bold);
    gpuTitle->setToolTip(tr("Every GPU of the machine, read through NVML 5 times a second, during a run or not: "
                            "utilisation is the share of time a kernel was running, memory is used as nvidia-smi "
                            "shows it. The charts show the last %1 s in percent.")
                             .arg(kHistorySeconds));
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
            row.plot->setToolTip(tr("gpu:%1 over the last %2 s: utilisation (blue) and memory used (orange), "
                                    "in percent")
                                     .arg(i)
                                     .arg(kHistorySeconds));
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
    title->setToolTip(tr("Share of each step a tower spent computing, reducing or applying the update, rather "
                         "than waiting for input or for the other towers."));
    layout->addWidget(title);
    bars_ = new QVBoxLayout;
    layout->addLayout(bars_);
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
