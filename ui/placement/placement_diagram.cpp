#include "placement/placement_diagram.hpp"

#include <QFontMetricsF>
#include <QHelpEvent>
#include <QPainter>
#include <QPainterPath>
#include <QTimer>
#include <QToolTip>
#include <algorithm>
#include <cmath>

#include "devices/phase_colors.hpp"
#include "placement/placement_format.hpp"
#include "view_format.hpp"

using tb::ui::Phase;

namespace {

constexpr int kPulseMs = 100;      // 10 Hz: dashes move visibly at negligible cost
constexpr int kPulsePeriod = 12;   // Qt::DashLine repeats every 6 pen widths; half a width per tick
constexpr int kIdleTicks = 40;     // 2 s without a step (paused, or the run stalled): stop pulsing

// The share of a step a tower spent on each kind of activity, for its box's colour.
QColor dominantColor(const tb::TowerPhases& p) {
    const double compute = p.forward + p.backward + p.straggle;
    const double sync = p.reduce + p.apply;
    double best = compute;
    Phase phase = Phase::Forward;
    if (p.wait > best) {
        best = p.wait;
        phase = Phase::Wait;
    }
    if (p.dataWait > best) {
        best = p.dataWait;
        phase = Phase::Data;
    }
    if (sync > best) phase = Phase::Reduce;
    return tb::ui::phaseColor(phase);
}

QColor mix(const QColor& a, const QColor& b, double t) {
    return QColor::fromRgbF(float(a.redF() + (b.redF() - a.redF()) * t), float(a.greenF() + (b.greenF() - a.greenF()) * t),
                            float(a.blueF() + (b.blueF() - a.blueF()) * t));
}

// Draws a line from a to b with a filled head at b, using the painter's pen for the shaft.
void drawArrow(QPainter& p, QPointF a, QPointF b, double head) {
    const QPointF d = b - a;
    const double len = std::hypot(d.x(), d.y());
    if (len < 1e-3) return;
    const QPointF u = d / len;
    const QPointF normal(-u.y(), u.x());
    const QPointF base = b - u * std::min(head, len * 0.5);
    p.drawLine(a, base);
    const QPen pen = p.pen();
    const QBrush brush = p.brush();
    const QPointF tri[3] = {b, base + normal * (head * 0.45), base - normal * (head * 0.45)};
    p.setPen(Qt::NoPen);
    p.setBrush(pen.color());
    p.drawPolygon(tri, 3);
    p.setPen(pen);
    p.setBrush(brush);
}

// A tower box's lines: its device, its slice of the batch, its slowdown.
QStringList towerLines(const PlacementModel::Tower& t) {
    QStringList lines{t.device};
    if (t.batch > 0) lines << PlacementDiagram::tr("batch %1").arg(t.batch);
    if (t.slowdown > 1) lines << PlacementDiagram::tr("\u00d7%1 slower").arg(t.slowdown, 0, 'g', 3);
    return lines;
}

// The same lines in a narrow box: "×4" for "×4 slower" (the box's orange outline says slower).
QString shortForm(const QString& line) {
    const qsizetype space = line.indexOf(QLatin1Char(' '));
    return line.startsWith(QChar(0x00d7)) && space > 0 ? line.left(space) : line;
}

}  // namespace

PlacementDiagram::PlacementDiagram(QWidget* parent) : QWidget(parent) {
    setToolTip(tb::ui::wrappedToolTip(
        tr("A tower is one replica of the model training on its own slice of each batch; at the "
           "synchronisation point the towers' gradients meet and are averaged, and the parameter "
           "server (the variables' holder) keeps the one copy of the parameters every tower reads.")));
    timer_ = new QTimer(this);
    timer_->setInterval(kPulseMs);
    connect(timer_, &QTimer::timeout, this, [this] {
        if (!active_ || ++idleTicks_ > kIdleTicks) {
            timer_->stop();  // arrows stand still: nothing is moving between places any more
            update();
            return;
        }
        pulse_ = (pulse_ + 1) % kPulsePeriod;
        if (isVisible()) update();
    });
}

void PlacementDiagram::setModel(const PlacementModel& model) {
    model_ = model;
    invalid_.clear();
    update();
}

void PlacementDiagram::setInvalid(const QString& why) {
    invalid_ = why;
    update();
}

void PlacementDiagram::showStep(const tb::StepMetrics& m) {
    last_ = m;
    if (!recent_.empty() && recent_.back().wait.size() != m.towers.size()) recent_.clear();  // a new plan
    Waits w{m.stepSeconds, {}};
    for (const tb::TowerMetrics& t : m.towers) w.wait.push_back(t.phases.wait);
    recent_.push_back(std::move(w));
    while (int(recent_.size()) > kRecentSteps) recent_.pop_front();
    active_ = true;
    idleTicks_ = 0;
    if (!timer_->isActive()) timer_->start();
    update();
}

void PlacementDiagram::clearActivity() {
    active_ = false;
    timer_->stop();
    pulse_ = 0;
    idleTicks_ = 0;
    last_ = {};
    recent_.clear();
    update();
}

// Where everything goes at the widget's size, recomputed on every paint (a handful of rectangles,
// so the picture scales freely and nothing cached can go stale). Vertical bands, top down: header
// (step, push), holder, links, towers, the "slowest" mark, caption.
struct PlacementDiagram::Layout {
    Layout(const PlacementModel& m, const QRect& widget, const QFont& widgetFont, const QString& captionText)
        : scale(std::clamp(std::min(widget.width() / 520.0, widget.height() / 300.0), 0.75, 1.6)), font(widgetFont) {
        if (font.pointSizeF() > 0) font.setPointSizeF(font.pointSizeF() * std::min(scale, 1.3));
        lineH = QFontMetricsF(font).height();
        area = QRectF(widget).adjusted(8 * scale, 6 * scale, -8 * scale, -6 * scale);
        n = int(m.towers.size());
        ring = m.links == PlacementModel::Links::Ring;
        shards = m.links == PlacementModel::Links::Shards;
        headerH = lineH * 1.3;
        markH = lineH * 1.2;
        // The caption on as many lines as it needs while the picture above keeps the height it
        // needs (the stages' rows of 3 lines each; the holder, links and towers), the last line
        // taking the rest where it does not.
        const int rows = std::max(1, m.stageReplicas);
        const double picture = m.stages.isEmpty() ? markH + lineH * 8 : lineH * 3 * rows + 10 * scale * rows;
        captionLines = wrapAtClauses(captionText, QFontMetricsF(font), area.width());
        while (captionLines.size() > 1 &&
               area.height() - headerH - lineH * (0.3 + double(captionLines.size())) < picture) {
            const QString last = captionLines.takeLast();
            captionLines.back() += QStringLiteral("; ") + last;
        }
        captionH = lineH * (0.3 + double(captionLines.size()));
        const double avail = area.height() - headerH - markH - captionH;
        holderH = ring ? lineH * 1.6
                       : std::max(shards ? lineH * (m.variableSizes.isEmpty() ? 3.0 : 4.8) : lineH * 1.8, avail * 0.22);
        towerH = std::max(lineH * 3.4, avail * 0.34);
        holderTop = area.top() + headerH;
        holderBottom = holderTop + holderH;
        towerTop = area.bottom() - captionH - markH - towerH;
        apexY = holderBottom + (towerTop - holderBottom) * 0.4;  // top of the ring's wrap arrow
        // The row of towers, centred, with wider gaps for the ring's arrows between neighbours and
        // for the frames around towers that share a device or a process.
        const bool framed = !m.sharedDevices().isEmpty() || !m.processFrames().isEmpty();
        gap = (ring ? 36 : framed ? 22 : 14) * scale;
        // A process's frame stands 9 px outside its towers: the row leaves room for it at both ends.
        const double edge = m.processFrames().isEmpty() ? 0 : (kProcessPad + 2) * scale;
        boxW = n > 0 ? std::max(8.0, std::min((area.width() - 2 * edge - gap * (n - 1)) / n, 170 * scale)) : 0;
        rowLeft = area.center().x() - (n * boxW + (n - 1) * gap) / 2;
    }
    QRectF tower(int i) const { return QRectF(rowLeft + i * (boxW + gap), towerTop, boxW, towerH); }
    QRectF caption() const { return QRectF(area.left(), area.bottom() - captionH, area.width(), captionH); }
    static constexpr double kProcessPad = 9;  // a process's frame around its towers, at scale 1
    static constexpr int kCaptionLines = 3;
    // The caption's clauses ("; "-separated) on as few lines as fit `width`, at most kCaptionLines
    // (the last then takes the rest, shrunk or elided as any line that does not fit).
    static QStringList wrapAtClauses(const QString& text, const QFontMetricsF& fm, double width) {
        QStringList lines;
        for (const QString& clause : text.split(QStringLiteral("; "))) {
            const QString joined = lines.isEmpty() ? clause : lines.back() + QStringLiteral("; ") + clause;
            if (!lines.isEmpty() && (fm.horizontalAdvance(joined) <= width || lines.size() == kCaptionLines))
                lines.back() = joined;
            else
                lines << clause;
        }
        return lines;
    }

    double scale;
    QFont font;
    double lineH = 0;
    QRectF area;
    int n = 0;
    bool ring = false, shards = false;
    QStringList captionLines;
    double headerH = 0, markH = 0, captionH = 0, holderH = 0, towerH = 0;
    double holderTop = 0, holderBottom = 0, towerTop = 0, apexY = 0;
    double gap = 0, boxW = 0, rowLeft = 0;
};

QRectF PlacementDiagram::towerRect(int i) const { return Layout(model_, rect(), font(), caption()).tower(i); }

// One paint, part by part, each drawing one thing of the picture.
class PlacementDiagram::Painting {
public:
    Painting(const PlacementDiagram& d, QPainter& p)
        : d_(d), m_(d.model_), p_(p), g_(d.model_, d.rect(), d.font(), d.caption()), fm_(g_.font), pal_(d.palette()) {
        base_ = pal_.color(QPalette::Base);
        text_ = pal_.color(QPalette::Text);
        faint_ = text_;
        faint_.setAlphaF(0.6f);
        p_.setRenderHint(QPainter::Antialiasing);
        p_.fillRect(d.rect(), base_);
        p_.setFont(g_.font);
        reported_ = int(d.last_.towers.size());  // may differ from the model's if a plan changed mid-run
        pusher_ = m_.async && d.active_ ? d.last_.pusher : -1;
        // Pens: quiet when static; while a step is shown, the links that carried it are highlighted,
        // as wide as the log of the bytes moved, and dashes travel along them.
        staticW_ = 1.3 * g_.scale;
        liveW_ = g_.scale *
                 std::clamp(1.2 + 0.35 * std::log10(1.0 + double(std::max<int64_t>(0, d.last_.bytesMoved))), 1.2, 4.5);
        staticPen_ = QPen(faint_, staticW_, Qt::SolidLine, Qt::FlatCap);
        livePen_ = QPen(pal_.color(QPalette::Highlight), liveW_, Qt::SolidLine, Qt::FlatCap);
        if (d.active_ && d.timer_->isActive()) {
            livePen_.setStyle(Qt::DashLine);
            livePen_.setDashOffset(-0.5 * d.pulse_);  // negative: the dashes travel toward the head
        }
        size_ = formatBytes(double(m_.paramCount) * 4);  // "13.1 MB", "18.4 kB"
    }

    // Nothing to draw but why: no plan, or the form's settings cannot run.
    bool blank() {
        if (g_.n > 0 && d_.invalid_.isEmpty()) return false;
        p_.setPen(faint_);
        const QString why = d_.invalid_.isEmpty() ? tr("No deployment plan")
                                                  : tr("No placement: these settings cannot run.\n%1").arg(d_.invalid_);
        p_.drawText(g_.area.adjusted(12 * g_.scale, 0, -12 * g_.scale, 0), Qt::AlignCenter | Qt::TextWordWrap, why);
        return true;
    }
    void holder();
    void syncPoint();
    void ringLinks();
    void holderLinks();
    void sharedDeviceFrames();
    void machineFrames();
    void towers();
    void headerAndCaption();
    void stagePicture();  // model parallelism: the stages in a row per replica, arrows both ways

private:
    static QString tr(const char* s) { return PlacementDiagram::tr(s); }
    bool linkLive(int tower) const { return d_.active_ && (!m_.async || tower == pusher_); }
    double headFor(bool live) const { return 7 * g_.scale + (live ? liveW_ : staticW_); }
    // A label with the background behind it, so it stays readable over arrows and lines.
    void label(const QRectF& r, int align, const QString& s, const QColor& c) {
        const QRectF b = fm_.boundingRect(r, align, s).adjusted(-2, 0, 2, 0);
        p_.fillRect(b, base_);
        p_.setPen(c);
        p_.drawText(r, align, s);
    }
    // Lines centred in `r` in the diagram's font or, where the widest does not fit, a smaller one
    // (down to 3/4 of it: eight towers across a narrow window); a line that still does not fit is
    // shortened where it has a short form, else elided and noted (the box's tooltip says it whole).
    void fittedLines(const QRectF& r, const QStringList& lines) {
        QFont f = g_.font;
        QFontMetricsF fm(f);
        double widest = 0;
        for (const QString& l : lines) widest = std::max(widest, fm.horizontalAdvance(l));
        if (widest > r.width() && f.pointSizeF() > 0) {
            f.setPointSizeF(std::max(0.75, r.width() / widest) * f.pointSizeF());
            fm = QFontMetricsF(f);
        }
        QStringList shown;
        for (const QString& l : lines) {
            const QString fits = fm.horizontalAdvance(l) <= r.width() ? l : shortForm(l);
            shown << fm.elidedText(fits, Qt::ElideRight, r.width());
            if (shown.back() != fits) d_.cut_ << l;
        }
        p_.setFont(f);
        p_.drawText(r, Qt::AlignCenter, shown.join(QLatin1Char('\n')));
        p_.setFont(g_.font);
    }
    void linkLabels();
    void frame(const PlacementModel::DeviceGroup& g, double pad, const QPen& pen, double radius, int titleAlign);

    const PlacementDiagram& d_;
    const PlacementModel& m_;
    QPainter& p_;
    const Layout g_;
    const QFontMetricsF fm_;
    const QPalette pal_;
    QColor base_, text_, faint_;
    int reported_ = 0, pusher_ = -1;
    double staticW_ = 0, liveW_ = 0;
    QPen staticPen_, livePen_;
    QString size_;
    QRectF holder_;          // the holder's box (replicated: the note's line; shards: their row)
    double shardW_ = 0;
};

// The variables' holder, its shards, or the note that every tower holds a copy.
void PlacementDiagram::Painting::holder() {
    const QRectF& area = g_.area;
    const double scale = g_.scale;
    if (g_.ring) {
        holder_ = QRectF(area.left(), g_.holderTop, area.width(), g_.holderH);
        p_.setPen(text_);
        p_.drawText(holder_, Qt::AlignCenter, tr("Variables replicated on every tower \u2014 %1 each").arg(size_));
    } else if (g_.shards) {
        const int s = m_.psShards;
        const QRectF title(area.left(), g_.holderTop, area.width(), g_.lineH * 1.2);
        p_.setPen(text_);
        p_.drawText(title, Qt::AlignCenter,
                    m_.serverProcesses > 0 ? tr("Variables on %1, apart \u2014 %2").arg(m_.holder, size_)
                                           : tr("Variables on %1 \u2014 %2 in %3 shards").arg(m_.holder, size_).arg(s));
        const double sGap = 10 * scale;
        const double shardTop = title.bottom() + 2 * scale;
        const double rowW = area.width() * 0.8;
        shardW_ = std::max(8.0, std::min((rowW - sGap * (s - 1)) / s, 90 * scale));
        const double left = area.center().x() - (s * shardW_ + (s - 1) * sGap) / 2;
        holder_ = QRectF(left, shardTop, s * shardW_ + (s - 1) * sGap, g_.holderBottom - shardTop);
        p_.setBrush(pal_.color(QPalette::AlternateBase));
        for (int j = 0; j < s; ++j) {
            const QRectF r(left + j * (shardW_ + sGap), shardTop, shardW_, g_.holderBottom - shardTop);
            p_.setPen(QPen(faint_, staticW_));
            p_.drawRoundedRect(r, 4 * scale, 4 * scale);
            // What round-robin dealing gave this shard, where the model's variables are known.
            QString what = m_.serverProcesses > 0 ? tr("process %1").arg(j) : QStringLiteral("ps %1").arg(j);
            if (!m_.variableSizes.isEmpty()) {
                const int k = m_.shardVariables(j);
                what += QLatin1Char('\n') + (k == 1 ? tr("1 variable") : tr("%1 variables").arg(k)) + QLatin1Char('\n') +
                        formatBytes(double(m_.shardBytes(j)));
            }
            p_.setPen(text_);
            p_.drawText(r.adjusted(2, 0, -2, 0), Qt::AlignCenter, what);
        }
    } else {
        const QString title = m_.processes > 1 ? tr("Variables on %1 in every process \u2014 %2").arg(m_.holder, size_)
                                               : tr("Variables on %1 \u2014 %2").arg(m_.holder, size_);
        const double w = std::clamp(fm_.horizontalAdvance(title) + 28 * scale, area.width() * 0.35, area.width() * 0.6);
        holder_ = QRectF(area.center().x() - w / 2, g_.holderTop, w, g_.holderH);
        p_.setPen(QPen(faint_, staticW_));
        p_.setBrush(pal_.color(QPalette::AlternateBase));
        p_.drawRoundedRect(holder_, 5 * scale, 5 * scale);
        p_.setPen(text_);
        p_.drawText(holder_.adjusted(4, 0, -4, 0), Qt::AlignCenter,
                    fm_.elidedText(title, Qt::ElideRight, holder_.width() - 8));
    }
}

// The synchronisation point, on the steps where the towers' work meets.
void PlacementDiagram::Painting::syncPoint() {
    const bool now = d_.active_ && !m_.async &&
                     (m_.averageEvery <= 1 || (d_.last_.step > 0 && d_.last_.step % m_.averageEvery == 0));
    if (!now) return;
    const double y = g_.ring ? g_.apexY - g_.lineH * 1.0 : (g_.holderBottom + g_.towerTop) / 2;
    p_.setPen(QPen(text_, 1.0 * g_.scale, Qt::DashDotLine));
    p_.drawLine(QPointF(g_.area.left(), y), QPointF(g_.area.right(), y));
    label(QRectF(g_.area.left(), y - g_.lineH - 1, g_.area.width(), g_.lineH), Qt::AlignRight | Qt::AlignBottom,
          tr("sync point"), text_);
}

// Replicated: the ring of all-reduce among neighbours, the last tower's arrow arching back over the row.
void PlacementDiagram::Painting::ringLinks() {
    const int n = g_.n;
    const double scale = g_.scale;
    p_.setBrush(Qt::NoBrush);
    for (int i = 0; n > 1 && i < n; ++i) {
        const int j = (i + 1) % n;
        const bool live = linkLive(i);
        p_.setPen(live ? livePen_ : staticPen_);
        const QRectF a = g_.tower(i), b = g_.tower(j);
        if (j == i + 1) {
            drawArrow(p_, QPointF(a.right() + 3 * scale, a.center().y()), QPointF(b.left() - 3 * scale, b.center().y()),
                      headFor(live));
            continue;
        }
        const QPointF from(a.center().x(), g_.towerTop - 2 * scale), to(b.center().x(), g_.towerTop - 2 * scale);
        const QPointF ctrl((from.x() + to.x()) / 2, 2 * g_.apexY - g_.towerTop);
        QPainterPath path(from);
        path.quadTo(ctrl, to);
        p_.drawPath(path);
        // The head follows the curve's tangent at its end (from the control point).
        const QPointF dir = to - ctrl;
        const double len = std::hypot(dir.x(), dir.y());
        drawArrow(p_, to - dir / len * (2 * headFor(live)), to, headFor(live));
    }
    if (n > 1)
        label(QRectF(g_.area.left(), g_.apexY - g_.lineH / 2, g_.area.width(), g_.lineH), Qt::AlignCenter,
              fm_.elidedText(m_.ringLabel(), Qt::ElideRight, g_.area.width()), text_);
}

// A holder: parameters down and gradients up between it and each tower off its device (shards:
// through one bus that reaches every shard), then what each link carries.
void PlacementDiagram::Painting::holderLinks() {
    const int n = g_.n;
    const double scale = g_.scale;
    p_.setBrush(Qt::NoBrush);
    const double d = 4 * scale + liveW_ / 2;  // params and grads side by side
    double linkTop = g_.holderBottom;
    if (g_.shards) {  // one pair of arrows per tower, not one per tower and shard
        linkTop = g_.holderBottom + (g_.towerTop - g_.holderBottom) * 0.28;
        const double first = std::min(holder_.left() + shardW_ / 2, g_.tower(0).center().x());
        const double last = std::max(holder_.right() - shardW_ / 2, g_.tower(n - 1).center().x());
        const bool anyLive = d_.active_ && pusher_ >= 0 && !m_.towers[std::min(pusher_, n - 1)].local;
        QPen bus = anyLive ? livePen_ : staticPen_;
        bus.setWidthF(bus.widthF() * 1.6);
        p_.setPen(bus);
        p_.drawLine(QPointF(first, linkTop), QPointF(last, linkTop));
        for (int j = 0; j < m_.psShards; ++j) {
            const double x = holder_.left() + j * (shardW_ + 10 * scale) + shardW_ / 2;
            p_.drawLine(QPointF(x, g_.holderBottom + 1), QPointF(x, linkTop));
        }
        label(QRectF(g_.area.left(), linkTop - g_.lineH - 1, first - g_.area.left() + shardW_, g_.lineH),
              Qt::AlignRight | Qt::AlignBottom, tr("every shard"), faint_);
    }
    bool labelled = false;
    for (int i = 0; i < n; ++i) {
        const QRectF t = g_.tower(i);
        const bool live = linkLive(i);
        if (m_.towers[i].local) {  // on the holder's device: the tower reads the variables in place
            label(QRectF(t.left(), g_.holderBottom, t.width(), g_.towerTop - g_.holderBottom), Qt::AlignCenter,
                  tr("in place"), faint_);
            continue;
        }
        p_.setPen(live ? livePen_ : staticPen_);
        const double tx = t.center().x();
        const double hx = g_.shards ? tx : holder_.left() + holder_.width() * (i + 0.5) / n;
        const QPointF down0(hx - d, linkTop + 1), down1(tx - d, g_.towerTop - 1);
        const QPointF up0(tx + d, g_.towerTop - 1), up1(hx + d, linkTop + 1);
        drawArrow(p_, down0, down1, headFor(live));  // parameters out to the tower
        drawArrow(p_, up0, up1, headFor(live));      // gradients back to the holder
        // Nearer the holder than the middle, where the sync point line runs; on the first pair of
        // arrows with room for both words inside the view (the first tower's could leave
        // 'params' cut at the view's left edge).
        const QPointF mDown = down0 + (down1 - down0) * 0.3, mUp = up1 + (up0 - up1) * 0.3;
        if (!labelled && mDown.x() - 4 * scale - fm_.horizontalAdvance(tr("params")) >= d_.rect().left() &&
            mUp.x() + 4 * scale + fm_.horizontalAdvance(tr("grads")) <= d_.rect().right()) {
            labelled = true;
            const double w = 80 * scale;
            label(QRectF(mDown.x() - w - 4 * scale, mDown.y() - g_.lineH / 2, w, g_.lineH),
                  Qt::AlignRight | Qt::AlignVCenter, tr("params"), faint_);
            label(QRectF(mUp.x() + 4 * scale, mUp.y() - g_.lineH / 2, w, g_.lineH), Qt::AlignLeft | Qt::AlignVCenter,
                  tr("grads"), faint_);
        }
    }
    linkLabels();
}

// What each link carries, near its tower, drawn after every arrow so none crosses a label. All
// moving towers' labels read the same (one holder, towers of one kind): where they do not fit
// side by side, one line says it for all.
void PlacementDiagram::Painting::linkLabels() {
    const double labelY = g_.holderBottom + (g_.towerTop - g_.holderBottom) * 0.72;
    double widest = 0;
    for (int i = 0; i < g_.n; ++i)
        widest = std::max({widest, fm_.horizontalAdvance(m_.linkLabel(i)), fm_.horizontalAdvance(m_.linkKind(i))});
    const bool each = widest + 8 * g_.scale <= g_.boxW + g_.gap / 2;  // a clear space between neighbours
    for (int i = 0; i < g_.n; ++i) {
        const QString bytes = m_.linkLabel(i), kind = m_.linkKind(i);
        if (bytes.isEmpty()) continue;
        if (!each) {
            const QString all = tr("each tower: %1").arg(kind.isEmpty() ? bytes : bytes + QStringLiteral(", ") + kind);
            label(QRectF(g_.area.left(), labelY - g_.lineH / 2, g_.area.width(), g_.lineH), Qt::AlignCenter,
                  fm_.elidedText(all, Qt::ElideRight, g_.area.width()), text_);
            return;
        }
        const double cx = g_.tower(i).center().x();
        label(QRectF(cx - (g_.boxW + g_.gap) / 2, labelY - g_.lineH, g_.boxW + g_.gap, 2 * g_.lineH), Qt::AlignCenter,
              kind.isEmpty() ? bytes : bytes + QLatin1Char('\n') + kind, text_);
    }
}

// A frame around towers g.first .. g.first + g.count - 1, titled on its top edge.
void PlacementDiagram::Painting::frame(const PlacementModel::DeviceGroup& g, double pad, const QPen& pen,
                                       double radius, int titleAlign) {
    const double scale = g_.scale;
    const QRectF r = g_.tower(g.first).united(g_.tower(g.first + g.count - 1)).adjusted(-pad, -pad, pad, pad);
    p_.setPen(pen);
    p_.setBrush(Qt::NoBrush);
    p_.drawRoundedRect(r, radius, radius);
    const QString title = fm_.elidedText(g.device, Qt::ElideRight, r.width() - 16 * scale);
    if (title != g.device) d_.cut_ << g.device;
    if (!QRectF(d_.rect()).contains(r)) d_.cut_ << g.device + QStringLiteral(" (its frame leaves the view)");
    label(QRectF(r.left() + 8 * scale, r.top() - g_.lineH / 2, r.width() - 16 * scale, g_.lineH),
          titleAlign | Qt::AlignVCenter, title, text_);
}

// Towers that share a device: dashed, titled on the left as a group box (clear of the arrows,
// which meet the towers in their middle).
void PlacementDiagram::Painting::sharedDeviceFrames() {
    for (const PlacementModel::DeviceGroup& g : m_.sharedDevices())
        frame(g, 5 * g_.scale, QPen(faint_, staticW_, Qt::DashLine), 7 * g_.scale, Qt::AlignLeft);
}

// Each process's towers, solid, titled on the right (the "slowest" mark stays clear below).
void PlacementDiagram::Painting::machineFrames() {
    for (const PlacementModel::DeviceGroup& g : m_.processFrames())
        frame(g, Layout::kProcessPad * g_.scale, QPen(text_, staticW_), 3 * g_.scale, Qt::AlignRight);
}

// The towers: device and batch, coloured by the phase that took most of the step, the step's
// phases as one stacked bar, the pusher and stragglers outlined, the slowest marked.
int PlacementDiagram::slowestTower() const {
    const int shown = recent_.empty() ? 0 : std::min(int(model_.towers.size()), int(recent_.back().wait.size()));
    if (!active_ || model_.async || shown < 2) return -1;
    // The tower the others waited for: the one that waited least at the synchronisation point,
    // marked only where every other tower waited a tenth of the time more (towers that finish
    // together have no slowest; marking the busiest by a hair put the mark on a bar of wait).
    int slowest = 0;
    for (int i = 1; i < shown; ++i)
        if (waitShare(i) < waitShare(slowest)) slowest = i;
    for (int i = 0; i < shown; ++i)
        if (i != slowest && waitShare(i) < waitShare(slowest) + 0.1) return -1;
    return slowest;
}

double PlacementDiagram::waitShare(int tower) const {
    double waited = 0, stepped = 0;
    for (const Waits& w : recent_)
        if (tower >= 0 && size_t(tower) < w.wait.size()) waited += w.wait[size_t(tower)], stepped += w.stepSeconds;
    return stepped > 0 ? waited / stepped : 0;
}

void PlacementDiagram::Painting::towers() {
    const double scale = g_.scale;
    const int slowest = d_.slowestTower();
    const double barH = std::max(4.0, 6 * scale);
    for (int i = 0; i < g_.n; ++i) {
        const PlacementModel::Tower& t = m_.towers[i];
        const QRectF r = g_.tower(i);
        const tb::TowerPhases* ph = d_.active_ && i < reported_ ? &d_.last_.towers[size_t(i)].phases : nullptr;
        const double total = ph ? tb::ui::phasesTotal(*ph) : 0;
        if (i == pusher_) p_.setPen(QPen(pal_.color(QPalette::Highlight), 2.5 * scale));
        else if (t.slowdown > 1) p_.setPen(QPen(tb::ui::phaseColor(Phase::Straggle), 2 * scale));
        else p_.setPen(QPen(faint_, staticW_));
        p_.setBrush(total > 0 ? mix(base_, dominantColor(*ph), 0.45) : pal_.color(QPalette::AlternateBase));
        p_.drawRoundedRect(r, 5 * scale, 5 * scale);

        p_.setPen(text_);
        fittedLines(r.adjusted(3, 2, -3, -(barH + 4 * scale)), towerLines(t));

        if (total > 0) {  // in the order the tower went through them
            const QRectF bar(r.left() + 5 * scale, r.bottom() - 5 * scale - barH, r.width() - 10 * scale, barH);
            double x = bar.left();
            for (Phase phase : tb::ui::kPhaseOrder) {
                const double sec = tb::ui::phaseSeconds(*ph, phase);
                if (sec <= 0) continue;
                const double w = bar.width() * sec / total;
                p_.fillRect(QRectF(x, bar.top(), w, bar.height()), tb::ui::phaseColor(phase));
                x += w;
            }
        }
        if (i == slowest) {
            QFont bold = g_.font;
            bold.setBold(true);
            p_.setFont(bold);
            p_.setPen(QColor(220, 40, 40));
            p_.drawText(QRectF(r.left(), r.bottom() + 1, r.width(), g_.markH), Qt::AlignHCenter | Qt::AlignTop,
                        tr("slowest"));
            p_.setFont(g_.font);
        }
    }
}

// The step shown and the bytes it moved; the pusher; the plan's bytes per step under it all.
void PlacementDiagram::Painting::headerAndCaption() {
    const QRectF header(g_.area.left(), g_.area.top(), g_.area.width(), g_.headerH);
    p_.setPen(text_);
    if (d_.active_)  // the bytes the communicator counted for this step, beside the plan's figure below
        p_.drawText(header, Qt::AlignLeft | Qt::AlignVCenter,
                    tr("%1 %2: %3 moved")
                        .arg(m_.async ? tr("update") : tr("step"), tb::ui::formatCount(double(d_.last_.step)),
                             formatBytes(double(std::max<int64_t>(0, d_.last_.bytesMoved)))));
    if (pusher_ >= 0)
        p_.drawText(header, Qt::AlignRight | Qt::AlignVCenter,
                    tr("tower %1 pushed, staleness %2").arg(pusher_).arg(std::max<int64_t>(0, d_.last_.staleness)));
    p_.setPen(faint_);
    fittedLines(g_.caption(), g_.captionLines);
}

// Model parallelism: a row of stage boxes per replica of the pipeline, each with its device and
// layers; between neighbours the activations forward (above) and their gradients back (below),
// labelled with the bytes a step sends across that boundary each way; between a stage's
// replicas (hybrid), the data parallelism inside the pipeline: their gradients summed before the
// stage's update (with --sync-bn also batch norm's statistics, at every micro-batch). During a
// run each box is filled by its stage's busy share of the last step, and the header gives the
// step's bubble.
void PlacementDiagram::Painting::stagePicture() {
    const double scale = g_.scale;
    const int replicas = std::max(1, m_.stageReplicas);
    const int stages = int(m_.stages.size()) / replicas;
    const QRectF header(g_.area.left(), g_.area.top(), g_.area.width(), g_.headerH);
    p_.setPen(text_);
    const QString what = tr("Model parallelism: %1 stages%2, %3%4")
                             .arg(stages)
                             .arg(replicas > 1 ? tr(" \u00d7 %1 replicas").arg(replicas) : QString())
                             .arg(m_.schedule)
                             .arg(m_.microBatches > 1 ? tr(" over %1 micro-batches").arg(m_.microBatches) : QString());
    const QString live = d_.active_ && d_.last_.bubbleFraction >= 0
                             ? tr("step %1: bubble %2%").arg(tb::ui::formatCount(double(d_.last_.step)),
                                                             tb::ui::formatCount(100 * d_.last_.bubbleFraction, 1))
                             : QString();
    fittedLines(header, {live.isEmpty() ? what : what + QStringLiteral(" \u2014 ") + live});
    const QRectF body(g_.area.left(), header.bottom() + 4 * scale, g_.area.width(),
                      g_.area.height() - g_.headerH - g_.captionH - 8 * scale);
    const double gap = std::min(120 * scale, body.width() * 0.4 / std::max(1, stages - 1));
    const double boxW = std::max(8.0, (body.width() - gap * (stages - 1)) / std::max(1, stages));
    // Replicas: room between their rows for the line that sums a stage's replicas, and its label
    // where the rows leave it (each row needs its 3 lines of text).
    const double roomy = (body.height() - g_.lineH * 3 * replicas) / std::max(1, replicas - 1);
    const double rowGap = std::clamp(roomy, 10 * scale, g_.lineH * 1.4);
    const double rowH = std::max(g_.lineH * 3, (body.height() - rowGap * (replicas - 1)) / replicas);
    const double boxH = std::min(rowH, g_.lineH * 4.2);
    for (int r = 0; r < replicas; ++r) {
        const double top = body.top() + r * (rowH + rowGap) + (rowH - boxH) / 2;
        for (int s = 0; s < stages; ++s) {
            const int lane = r * stages + s;
            const PlacementModel::StageBox& b = m_.stages[lane];
            const QRectF box(body.left() + s * (boxW + gap), top, boxW, boxH);
            p_.setPen(QPen(text_, 1.2 * scale));
            p_.setBrush(base_);
            p_.drawRoundedRect(box, 5 * scale, 5 * scale);
            if (d_.active_ && size_t(lane) < d_.last_.towers.size() && d_.last_.stepSeconds > 0) {
                // Its busy share of the last step, as a bar along the box's bottom.
                const tb::TowerPhases& ph = d_.last_.towers[size_t(lane)].phases;
                const double busy = std::clamp((ph.forward + ph.backward) / d_.last_.stepSeconds, 0.0, 1.0);
                const QRectF bar(box.left() + 3 * scale, box.bottom() - 6 * scale, (box.width() - 6 * scale) * busy, 3 * scale);
                p_.fillRect(bar, tb::ui::phaseColor(tb::ui::Phase::Forward));
            }
            p_.setPen(text_);
            QStringList lines = {tr("stage %1 \u00b7 %2").arg(s + 1).arg(b.device), b.layers};
            if (replicas > 1) lines << tr("replica %1").arg(r + 1);
            fittedLines(box.adjusted(3 * scale, 2 * scale, -3 * scale, -6 * scale), lines);
            if (r + 1 < replicas) {  // this stage's replicas meet: a line both ways to the next row's box
                const double x = box.left() + boxW * 0.2, below = top + rowH + rowGap;
                p_.setPen(staticPen_);
                drawArrow(p_, QPointF(x, box.bottom() + 1 * scale), QPointF(x, below - 1 * scale), headFor(false) * 0.6);
                drawArrow(p_, QPointF(x, below - 1 * scale), QPointF(x, box.bottom() + 1 * scale), headFor(false) * 0.6);
                const QRectF room(x + 4 * scale, box.bottom(), box.right() - x - 4 * scale, below - box.bottom());
                // The longest form that fits (the sign alone at the narrowest).
                const QStringList forms = m_.syncBatchNorm
                                              ? QStringList{tr("\u03a3 gradients, batch-norm sums"), tr("\u03a3 grad., BN sums"),
                                                            QStringLiteral("\u03a3")}
                                              : QStringList{tr("\u03a3 gradients"), tr("\u03a3 grad."), QStringLiteral("\u03a3")};
                const auto fits = std::find_if(forms.begin(), forms.end() - 1,
                                               [&](const QString& f) { return fm_.horizontalAdvance(f) <= room.width(); });
                if (r == 0 && rowGap >= g_.lineH) label(room, Qt::AlignLeft | Qt::AlignVCenter, *fits, faint_);
            }
            if (s + 1 == stages) continue;
            const QRectF next(box.right() + gap, top, boxW, boxH);
            const double head = headFor(false);
            const QString bytes = s < m_.boundaryBytes.size() && m_.boundaryBytes[s] > 0
                                      ? formatBytes(double(m_.boundaryBytes[s]))
                                      : QString();
            p_.setPen(staticPen_);
            const double yF = box.top() + boxH * 0.3, yB = box.top() + boxH * 0.7;
            drawArrow(p_, QPointF(box.right() + 2 * scale, yF), QPointF(next.left() - 2 * scale, yF), head);
            drawArrow(p_, QPointF(next.left() - 2 * scale, yB), QPointF(box.right() + 2 * scale, yB), head);
            if (r == 0) {  // the bytes once, on the first replica's arrows
                const QRectF above(box.right(), yF - g_.lineH * 1.05, gap, g_.lineH);
                const QRectF below(box.right(), yB + g_.lineH * 0.05, gap, g_.lineH);
                label(above, Qt::AlignCenter, bytes.isEmpty() ? tr("activations") : tr("act. %1").arg(bytes), faint_);
                label(below, Qt::AlignCenter, bytes.isEmpty() ? tr("gradients") : tr("grad. %1").arg(bytes), faint_);
            }
        }
    }
    p_.setPen(faint_);
    fittedLines(g_.caption(), g_.captionLines);
}

QString PlacementDiagram::caption() const {
    if (!model_.stages.isEmpty()) {
        // What crosses between memories: every boundary with explicit copies; otherwise those
        // between two GPUs (NCCL). CPU stages, and stages sharing a GPU, read each other's buffers.
        const bool gpus = model_.stages.front().device.startsWith(QLatin1String("gpu"));
        int64_t bytes = 0;  // each replica's crossing boundaries, both ways (-1: not known yet)
        int crossing = 0;
        for (int s = 0; s < model_.boundaryBytes.size(); ++s) {
            const bool copied = model_.stageCopies || model_.stagePerProcess;
            if (!copied && model_.stages[s].device == model_.stages[s + 1].device) continue;
            if (!copied && !gpus) continue;
            ++crossing;
            const int64_t b = model_.boundaryBytes[s];
            bytes = b > 0 && bytes >= 0 ? bytes + 2 * b * model_.stageReplicas : -1;
        }
        const QString how = model_.stagePerProcess ? tr("MPI messages between the stages' processes")
                            : model_.stageCopies   ? tr("explicit copies")
                                                   : tr("NCCL send/recv between the GPUs");
        QString text = crossing == 0 ? (gpus ? tr("stages on one GPU share its memory: 0 B cross between them a step")
                                             : tr("CPU stages share memory: 0 B cross between them a step"))
                       : bytes > 0 ? tr("%1: %2 cross between the stages' memories a step").arg(how, formatBytes(double(bytes)))
                                   : tr("%1: the activations and their gradients cross between the stages' memories").arg(how);
        if (crossing > 0 && crossing < model_.boundaryBytes.size())
            text += tr("; 0 B where stages share a GPU");
        if (model_.stagePerProcess && model_.stageReplicas > 1 && model_.paramCount > 0) {
            // Each stage's replicas sum its gradient through replica 0's process: every other
            // replica's n x 4 bytes go up and the sum comes back, 2 (R - 1) n x 4 a stage; over
            // the stages, whose n add up to the model's P.
            const double sums = 2.0 * (model_.stageReplicas - 1) * double(model_.paramCount) * sizeof(float);
            text += tr("; the replicas' processes sum each stage's gradient: %2 a step (2 \u00d7 (R\u22121) \u00d7 P "
                       "\u00d7 4, R = %1)")
                        .arg(model_.stageReplicas)
                        .arg(formatBytes(sums));
            // (Batch norm's sums, 2 x 2c floats a layer and micro-batch, are in the run's bytes.)
            if (model_.syncBatchNorm) text += tr(", and its batch norms' sums");
        }
        if (model_.processes > 1 && !model_.stagePerProcess)
            text += model_.syncBatchNorm
                        ? tr("; in each of %1 processes, every stage's gradient averaged across them, its batch norm's "
                             "statistics summed").arg(model_.processes)
                        : tr("; in each of %1 processes, every stage's gradient averaged across them").arg(model_.processes);
        return text;
    }
    const QString bytes = !model_.async ? model_.bytesLabel()
                          : model_.serverProcesses > 0 ? tr("async: workers push without waiting; %1").arg(model_.bytesLabel())
                                                       : tr("async: towers push without waiting; %1").arg(model_.bytesLabel());
    // (Their bytes, a few floats per channel, are counted in the run's bytes moved, not here.)
    return model_.syncBatchNorm && model_.towers.size() > 1
               ? bytes + tr("; with batch-norm sums (sync-bn)")
               : bytes;
}

QString PlacementDiagram::towerText(int i) const {
    if (i < 0 || i >= model_.towers.size()) return {};
    QStringList lines = towerLines(model_.towers[i]);
    for (const PlacementModel::DeviceGroup& g : model_.processFrames() + model_.sharedDevices())
        if (i >= g.first && i < g.first + g.count) lines << tr("in %1").arg(g.device);
    if (active_ && size_t(i) < last_.towers.size()) {
        const tb::TowerPhases& ph = last_.towers[size_t(i)].phases;
        lines << tr("step %1: %2 ms, %3 ms of it waiting")
                     .arg(tb::ui::formatCount(double(last_.step)))
                     .arg(1e3 * tb::ui::phasesTotal(ph), 0, 'f', 2)
                     .arg(1e3 * ph.wait, 0, 'f', 2);
    }
    return lines.join(QLatin1Char('\n'));
}

bool PlacementDiagram::event(QEvent* e) {
    // Over a tower's box its own text, whole (a narrow box elides it); over the caption the
    // caption, whole; elsewhere what a tower (or a stage) is.
    if (e->type() == QEvent::ToolTip) {
        const auto* help = static_cast<QHelpEvent*>(e);
        const QRectF under = Layout(model_, rect(), font(), caption()).caption();
        if (under.contains(help->pos()) && (!model_.towers.isEmpty() || !model_.stages.isEmpty())) {
            QToolTip::showText(help->globalPos(), tb::ui::wrappedToolTip(caption()), this, under.toAlignedRect());
            return true;
        }
        if (!model_.stages.isEmpty()) {  // model parallelism: what the picture shows
            QToolTip::showText(
                help->globalPos(),
                tb::ui::wrappedToolTip(
                    tr("Each stage holds a run of the model's layers on its own device. Every step, the activations "
                       "at each boundary go forward (the upper arrow) and their gradients come back (the lower one), "
                       "as many bytes each way as the arrows say. CPU stages, and stages sharing a GPU (each on a "
                       "stream of its own), read them in place in the memory they share, so nothing crosses between "
                       "memories (0 B moved), unless told to copy them (Transfers: copies); stages on two GPUs send "
                       "them with NCCL, and stages in processes of their own as MPI messages: those bytes cross.")),
                this);
            return true;
        }
        for (int i = 0; i < model_.towers.size(); ++i)
            if (towerRect(i).contains(help->pos())) {
                QToolTip::showText(help->globalPos(), towerText(i), this, towerRect(i).toAlignedRect());
                return true;
            }
    }
    return QWidget::event(e);
}

void PlacementDiagram::paintEvent(QPaintEvent*) {
    cut_.clear();
    QPainter p(this);
    Painting draw(*this, p);
    if (!model_.stages.isEmpty() && invalid_.isEmpty()) {
        draw.stagePicture();
        return;
    }
    if (draw.blank()) return;
    draw.holder();
    draw.syncPoint();
    if (model_.links == PlacementModel::Links::Ring) draw.ringLinks();
    else draw.holderLinks();
    draw.sharedDeviceFrames();
    draw.machineFrames();
    draw.towers();
    draw.headerAndCaption();
}
