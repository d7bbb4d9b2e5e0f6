// PlacementDiagram and PlacementModel: see placement_diagram.hpp. The geometry is recomputed
// from the widget's size on every paint (a handful of rectangles), so the picture scales
// freely and there is no cached layout to invalidate when the model or the size changes.
#include "placement/placement_diagram.hpp"

#include <QFontMetricsF>
#include <QPainter>
#include <QPainterPath>
#include <QSet>
#include <QTimer>
#include <algorithm>
#include <cmath>

#include "devices/phase_colors.hpp"
#include "view_format.hpp"

using tb::ui::Phase;

namespace {

bool isGpu(const QString& device) { return device.startsWith(QLatin1String("gpu:")); }

// Decimal units, as the holder's "N MB" and the README's bytes table.
QString formatBytes(double bytes) {
    if (bytes >= 1e9) return QStringLiteral("%1 GB").arg(bytes / 1e9, 0, 'f', 1);
    if (bytes >= 1e6) return QStringLiteral("%1 MB").arg(bytes / 1e6, 0, 'f', 1);
    if (bytes >= 1e3) return QStringLiteral("%1 kB").arg(bytes / 1e3, 0, 'f', 1);
    return QStringLiteral("%1 B").arg(qRound64(bytes));
}

}  // namespace

PlacementModel PlacementModel::fromPlan(const tb::DeploymentPlan& plan, int64_t paramCount) {
    PlacementModel m;
    const int n = plan.towerCount();
    m.towers.reserve(n);
    for (int i = 0; i < n; ++i) {
        Tower t;
        t.device = QString::fromStdString(plan.towers[size_t(i)].str());
        t.batch = plan.batchPerTower;
        t.slowdown = size_t(i) < plan.slowdown.size() ? plan.slowdown[size_t(i)] : 1.0;
        t.local = plan.variables == tb::VariablePlacement::Tower && plan.variablesTower >= 0 &&
                  plan.variablesTower < n && plan.towers[size_t(i)] == plan.towers[size_t(plan.variablesTower)];
        m.towers.push_back(t);
    }
    switch (plan.variables) {
    case tb::VariablePlacement::Cpu: m.holder = QStringLiteral("cpu"); break;
    case tb::VariablePlacement::Tower:
        // validate() refuses an index out of range; clamp anyway so a diagram never crashes.
        if (n > 0) m.holder = m.towers[std::clamp(plan.variablesTower, 0, n - 1)].device;
        break;
    case tb::VariablePlacement::Replicated: break;
    }
    // Shards act only in asynchronous mode (each has its own lock); a synchronous plan updates
    // the variables as one, so the diagram draws one holder. (Parameter-server processes are
    // shards in either mode: acrossProcesses.)
    m.psShards = plan.update == tb::UpdateMode::Async ? std::max(1, plan.psShards) : 1;
    m.gradientBytes = int(tb::gradientElementBytes(plan.commPrecision));
    if (plan.variables == tb::VariablePlacement::Replicated)
        m.links = Links::Ring;
    else if (m.psShards > 1)
        m.links = Links::Shards;
    else
        m.links = Links::HolderArrows;
    m.async = plan.update == tb::UpdateMode::Async;
    m.averageEvery = plan.averageEvery;
    m.paramCount = paramCount;
    return m;
}

PlacementModel PlacementModel::fromPlan(const tb::DeploymentPlan& plan, const QVector<int64_t>& variableSizes) {
    int64_t count = 0;
    for (int64_t v : variableSizes) count += v;
    PlacementModel m = fromPlan(plan, count);
    m.variableSizes = variableSizes;
    return m;
}

PlacementModel PlacementModel::acrossProcesses(int processes, int servers, bool batchPerTowerGiven) const {
    PlacementModel m = *this;
    m.processes = std::max(1, processes);
    m.serverProcesses = std::clamp(servers, 0, m.processes - 1);
    const int workers = m.processes - m.serverProcesses;
    if (m.processes == 1) return m;
    m.towers.clear();
    for (int w = 0; w < workers; ++w)
        for (Tower t : towers) {
            t.process = m.serverProcesses + w;
            if (!batchPerTowerGiven) t.batch = std::max(1, t.batch / workers);
            m.towers.push_back(t);
        }
    if (m.serverProcesses > 0) {  // the variables' shards are the server processes
        m.links = Links::Shards;
        m.psShards = m.serverProcesses;
        m.holder = m.serverProcesses == 1 ? QObject::tr("a parameter-server process")
                                          : QObject::tr("%1 parameter-server processes").arg(m.serverProcesses);
    }
    return m;
}

QVector<PlacementModel::DeviceGroup> PlacementModel::processFrames() const {
    QVector<DeviceGroup> frames;
    if (processes == 1) return frames;
    for (int i = 0; i < towers.size();) {
        int j = i + 1;
        while (j < towers.size() && towers[j].process == towers[i].process) ++j;
        const int rank = towers[i].process;
        frames.push_back({rank == serverProcesses ? QObject::tr("process %1 (chief)").arg(rank)
                                                  : QObject::tr("process %1").arg(rank),
                          i, j - i});
        i = j;
    }
    return frames;
}

int PlacementModel::arrowCount() const {
    const int n = int(towers.size());
    const int moving = int(std::count_if(towers.begin(), towers.end(), [](const Tower& t) { return !t.local; }));
    switch (links) {
    case Links::HolderArrows:
    case Links::Shards: return 2 * moving;
    case Links::Ring: return n > 1 ? n : 0;
    }
    return 0;
}

int PlacementModel::shardVariables(int shard) const {
    const int v = int(variableSizes.size());
    if (shard < 0 || shard >= psShards || shard >= v) return 0;
    return (v - shard + psShards - 1) / psShards;  // shard, shard + S, shard + 2S, ... below v
}

int64_t PlacementModel::shardBytes(int shard) const {
    int64_t elements = 0;
    for (int v = shard; shard >= 0 && v < variableSizes.size(); v += std::max(1, psShards)) elements += variableSizes[v];
    return elements * 4;
}

int64_t PlacementModel::bytesPerStep() const {
    const int64_t p4 = paramCount * 4, pg = paramCount * gradientBytes;
    if (links == Links::Ring) return 2 * int64_t(std::max(0, distinctDevices() - 1)) * pg;
    if (async) return p4 + pg;  // per update: the pusher's pull and push (a tower off the holder's device)
    int64_t moved = 0;
    for (int i = 0; i < towers.size(); ++i) moved += linkBytes(i) / 4 * (4 + gradientBytes);
    return moved;
}

QString PlacementModel::bothWays(const QString& towers) const {
    const QString m = towers.isEmpty() ? QString() : towers + QStringLiteral(" \u00d7 ");
    return gradientBytes == 4 ? QStringLiteral("2 \u00d7 %1P \u00d7 4").arg(m)
                              : QStringLiteral("%1P \u00d7 (4 + %2)").arg(m).arg(gradientBytes);
}

QString PlacementModel::bytesLabel() const {
    if (towers.isEmpty()) return {};
    const int64_t bytes = bytesPerStep();
    if (links == Links::Ring) {
        const int d = distinctDevices();
        if (d < 2) return QObject::tr("nothing moves between devices");
        const QString when = averageEvery > 1 ? QObject::tr("every %1 steps").arg(averageEvery) : QObject::tr("per step");
        return QObject::tr("%1 %2 (2 \u00d7 (D\u22121) \u00d7 P \u00d7 %3, D = %4)")
            .arg(formatBytes(double(bytes)), when)
            .arg(gradientBytes)
            .arg(d);
    }
    if (async) {
        const int local = int(std::count_if(towers.begin(), towers.end(), [](const Tower& t) { return t.local; }));
        return local == towers.size() ? QObject::tr("nothing moves: every tower reads the variables in place")
                                       : QObject::tr("%1 per update off the holder (%2)")
                                             .arg(formatBytes(double(bytes)), bothWays());
    }
    int moving = 0;
    for (int i = 0; i < towers.size(); ++i) moving += linkBytes(i) > 0 ? 1 : 0;
    if (moving == 0) return QObject::tr("nothing moves: every tower reads the variables in place");
    return QObject::tr("%1 per step (%2, M = %3)").arg(formatBytes(double(bytes)), bothWays(QStringLiteral("M"))).arg(moving);
}

int64_t PlacementModel::linkBytes(int tower) const {
    if (links == Links::Ring || tower < 0 || tower >= towers.size() || towers[tower].local) return 0;
    // Parameter-server processes: a worker's towers meet on its host, and its mean goes up once.
    if (serverProcesses > 0 && tower > 0 && towers[tower - 1].process == towers[tower].process) return 0;
    return paramCount * 4;
}

QString PlacementModel::linkKind(int tower) const {
    if (linkBytes(tower) == 0 || !isGpu(towers[tower].device)) return {};
    return isGpu(holder) ? QStringLiteral("GPU\u2194GPU") : QStringLiteral("host\u2194GPU");
}

QString PlacementModel::linkLabel(int tower) const {
    const int64_t bytes = linkBytes(tower);
    if (bytes == 0) return {};
    const QString per = async ? QObject::tr("update") : QObject::tr("step");
    if (gradientBytes != 4)  // the variables down in fp32, the gradients up in bf16
        return QObject::tr("%1 \u2193 %2 \u2191 per %3")
            .arg(formatBytes(double(bytes)), formatBytes(double(bytes / 4 * gradientBytes)), per);
    return QObject::tr("%1 \u2193\u2191 per %2").arg(formatBytes(double(bytes)), per);
}

int PlacementModel::distinctDevices() const {
    // Processes: each reduces its towers first, then the processes meet (one ring among them).
    if (processes > 1) return processes - serverProcesses;
    QSet<QString> devices;
    for (const Tower& t : towers) devices.insert(t.device);
    return int(devices.size());
}

double PlacementModel::ringBytesPerDevice() const {
    const int d = distinctDevices();
    if (links != Links::Ring || d < 2) return 0;
    return 2.0 * (d - 1) / d * double(paramCount) * double(gradientBytes);
}

QString PlacementModel::ringLabel() const {
    if (links != Links::Ring || towers.size() < 2) return {};
    const QString how = averageEvery == 1  ? QObject::tr("average every step")
                        : averageEvery > 1 ? QObject::tr("average every %1 steps").arg(averageEvery)
                                           : QObject::tr("all-reduce");
    const int d = distinctDevices();
    if (d < 2) return QObject::tr("%1 within %2: nothing leaves the device").arg(how, towers[0].device);
    return QObject::tr("%1: %2 %3 %4 (2(D\u22121)/D \u00d7 P \u00d7 %5, D = %6)")
        .arg(how, formatBytes(ringBytesPerDevice()),
             processes > 1             ? QObject::tr("per process")
             : isGpu(towers[0].device) ? QObject::tr("per GPU")
                                       : QObject::tr("per tower"),
             averageEvery > 1 ? QObject::tr("each time") : QObject::tr("per step"))
        .arg(gradientBytes)
        .arg(d);
}

QVector<PlacementModel::DeviceGroup> PlacementModel::sharedDevices() const {
    QVector<DeviceGroup> groups;
    for (int i = 0; i < towers.size();) {
        int j = i + 1;
        while (j < towers.size() && towers[j].device == towers[i].device && towers[j].process == towers[i].process) ++j;
        if (j - i > 1) groups.push_back({towers[i].device, i, j - i});
        i = j;
    }
    return groups;
}

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
    update();
}

void PlacementDiagram::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing);
    const QPalette& pal = palette();
    const QColor base = pal.color(QPalette::Base);
    const QColor text = pal.color(QPalette::Text);
    QColor faint = text;
    faint.setAlphaF(0.6f);
    p.fillRect(rect(), base);

    const double scale = std::clamp(std::min(width() / 520.0, height() / 300.0), 0.75, 1.6);
    QFont font = this->font();
    if (font.pointSizeF() > 0) font.setPointSizeF(font.pointSizeF() * std::min(scale, 1.3));
    p.setFont(font);
    const QFontMetricsF fm(font);
    const double lineH = fm.height();
    const QRectF area = QRectF(rect()).adjusted(8 * scale, 6 * scale, -8 * scale, -6 * scale);

    const int n = int(model_.towers.size());
    if (n == 0 || !invalid_.isEmpty()) {
        p.setPen(faint);
        const QString why = invalid_.isEmpty() ? tr("No deployment plan")
                                               : tr("No placement: these settings cannot run.\n%1").arg(invalid_);
        p.drawText(area.adjusted(12 * scale, 0, -12 * scale, 0), Qt::AlignCenter | Qt::TextWordWrap, why);
        return;
    }
    const int reported = int(last_.towers.size());  // may differ from n if a plan changed mid-run
    const bool ring = model_.links == PlacementModel::Links::Ring;
    const bool shards = model_.links == PlacementModel::Links::Shards;
    const bool pulsing = active_ && timer_->isActive();
    const int pusher = model_.async && active_ ? last_.pusher : -1;

    // Vertical bands: header (step, push), holder, arrows, towers, "slowest" marks, caption.
    const double headerH = lineH * 1.3;
    const double markH = lineH * 1.2;
    const double captionH = lineH * 1.3;
    const double avail = area.height() - headerH - markH - captionH;
    const double holderH = ring ? lineH * 1.6 : std::max(shards ? lineH * (model_.variableSizes.isEmpty() ? 3.0 : 4.8) : lineH * 1.8, avail * 0.22);
    const double towerH = std::max(lineH * 3.4, avail * 0.34);
    const double holderTop = area.top() + headerH;
    const double holderBottom = holderTop + holderH;
    const double towerTop = area.bottom() - captionH - markH - towerH;

    // The row of towers, centred, wider gaps for the ring's arrows between neighbours and for
    // the frames around towers that share a device.
    const QVector<PlacementModel::DeviceGroup> groups = model_.sharedDevices();
    const QVector<PlacementModel::DeviceGroup> machines = model_.processFrames();
    const double gap = (ring ? 36 : groups.isEmpty() && machines.isEmpty() ? 14 : 22) * scale;
    const double boxW = std::max(8.0, std::min((area.width() - gap * (n - 1)) / n, 170 * scale));
    const double rowLeft = area.center().x() - (n * boxW + (n - 1) * gap) / 2;
    auto towerRect = [&](int i) { return QRectF(rowLeft + i * (boxW + gap), towerTop, boxW, towerH); };

    // Pens: quiet when static; while a step is shown, the links that carried it are highlighted,
    // as wide as the log of the bytes moved, and dashed dashes travel along them.
    const double staticW = 1.3 * scale;
    const double liveW =
        scale * std::clamp(1.2 + 0.35 * std::log10(1.0 + double(std::max<int64_t>(0, last_.bytesMoved))), 1.2, 4.5);
    const QPen staticPen(faint, staticW, Qt::SolidLine, Qt::FlatCap);
    QPen livePen(pal.color(QPalette::Highlight), liveW, Qt::SolidLine, Qt::FlatCap);
    if (pulsing) {
        livePen.setStyle(Qt::DashLine);
        livePen.setDashOffset(-0.5 * pulse_);  // negative: the dashes travel toward the head
    }
    auto linkLive = [&](int tower) { return active_ && (!model_.async || tower == pusher); };
    auto headFor = [&](bool live) { return 7 * scale + (live ? liveW : staticW); };

    // A label with the background behind it, so it stays readable over arrows and lines.
    auto label = [&](const QRectF& r, int align, const QString& s, const QColor& c) {
        const QRectF b = fm.boundingRect(r, align, s).adjusted(-2, 0, 2, 0);
        p.fillRect(b, base);
        p.setPen(c);
        p.drawText(r, align, s);
    };

    const QString size = formatBytes(double(model_.paramCount) * 4);  // "13.1 MB", "18.4 kB"

    // --- the variables' holder, its shards, or the note that every tower holds a copy ----------
    QRectF holder;
    double shardW = 0, shardTop = holderTop;
    if (ring) {
        holder = QRectF(area.left(), holderTop, area.width(), holderH);
        p.setPen(text);
        p.drawText(holder, Qt::AlignCenter,
                   tr("Variables replicated on every tower \u2014 %1 each").arg(size));
    } else if (shards) {
        const int s = model_.psShards;
        const QRectF title(area.left(), holderTop, area.width(), lineH * 1.2);
        p.setPen(text);
        p.drawText(title, Qt::AlignCenter,
                   model_.serverProcesses > 0 ? tr("Variables on %1, apart \u2014 %2").arg(model_.holder, size)
                                              : tr("Variables on %1 \u2014 %2 in %3 shards").arg(model_.holder, size).arg(s));
        const double sGap = 10 * scale;
        shardTop = title.bottom() + 2 * scale;
        const double rowW = area.width() * 0.8;
        shardW = std::max(8.0, std::min((rowW - sGap * (s - 1)) / s, 90 * scale));
        const double left = area.center().x() - (s * shardW + (s - 1) * sGap) / 2;
        holder = QRectF(left, shardTop, s * shardW + (s - 1) * sGap, holderBottom - shardTop);
        p.setBrush(pal.color(QPalette::AlternateBase));
        for (int j = 0; j < s; ++j) {
            const QRectF r(left + j * (shardW + sGap), shardTop, shardW, holderBottom - shardTop);
            p.setPen(QPen(faint, staticW));
            p.drawRoundedRect(r, 4 * scale, 4 * scale);
            // What round-robin dealing gave this shard, where the model's variables are known.
            QString what = model_.serverProcesses > 0 ? tr("process %1").arg(j) : QStringLiteral("ps %1").arg(j);
            if (!model_.variableSizes.isEmpty())
            {
                const int k = model_.shardVariables(j);
                what += QLatin1Char('\n') + (k == 1 ? tr("1 variable") : tr("%1 variables").arg(k)) +
                        QLatin1Char('\n') + formatBytes(double(model_.shardBytes(j)));
            }
            p.setPen(text);
            p.drawText(r.adjusted(2, 0, -2, 0), Qt::AlignCenter, what);
        }
    } else {
        const QString title = model_.processes > 1 ? tr("Variables on %1 in every process \u2014 %2").arg(model_.holder, size)
                                                   : tr("Variables on %1 \u2014 %2").arg(model_.holder, size);
        const double w = std::clamp(fm.horizontalAdvance(title) + 28 * scale, area.width() * 0.35, area.width() * 0.6);
        holder = QRectF(area.center().x() - w / 2, holderTop, w, holderH);
        p.setPen(QPen(faint, staticW));
        p.setBrush(pal.color(QPalette::AlternateBase));
        p.drawRoundedRect(holder, 5 * scale, 5 * scale);
        p.setPen(text);
        p.drawText(holder.adjusted(4, 0, -4, 0), Qt::AlignCenter,
                   fm.elidedText(title, Qt::ElideRight, holder.width() - 8));
    }

    // --- the synchronisation point ---------------------------------------------------------------
    const double apexY = holderBottom + (towerTop - holderBottom) * 0.4;  // top of the ring's wrap arrow
    const bool syncNow = active_ && !model_.async &&
                         (model_.averageEvery <= 1 || (last_.step > 0 && last_.step % model_.averageEvery == 0));
    if (syncNow) {
        const double y = ring ? apexY - lineH * 1.0 : (holderBottom + towerTop) / 2;
        QPen pen(text, 1.0 * scale, Qt::DashDotLine);
        p.setPen(pen);
        p.drawLine(QPointF(area.left(), y), QPointF(area.right(), y));
        label(QRectF(area.left(), y - lineH - 1, area.width(), lineH), Qt::AlignRight | Qt::AlignBottom, tr("sync point"),
              text);
    }

    // --- the links --------------------------------------------------------------------------------
    p.setBrush(Qt::NoBrush);
    if (ring) {
        for (int i = 0; n > 1 && i < n; ++i) {
            const int j = (i + 1) % n;
            const bool live = linkLive(i);
            p.setPen(live ? livePen : staticPen);
            const QRectF a = towerRect(i), b = towerRect(j);
            if (j == i + 1) {
                drawArrow(p, QPointF(a.right() + 3 * scale, a.center().y()), QPointF(b.left() - 3 * scale, b.center().y()),
                          headFor(live));
            } else {
                // The wrap-around from the last tower back to the first arches over the row.
                const QPointF from(a.center().x(), towerTop - 2 * scale), to(b.center().x(), towerTop - 2 * scale);
                const QPointF ctrl((from.x() + to.x()) / 2, 2 * apexY - towerTop);
                QPainterPath path(from);
                path.quadTo(ctrl, to);
                p.drawPath(path);
                // The head follows the curve's tangent at its end (from the control point).
                const QPointF dir = to - ctrl;
                const double len = std::hypot(dir.x(), dir.y());
                drawArrow(p, to - dir / len * (2 * headFor(live)), to, headFor(live));
            }
        }
        if (n > 1)
            label(QRectF(area.left(), apexY - lineH / 2, area.width(), lineH), Qt::AlignCenter,
                  fm.elidedText(model_.ringLabel(), Qt::ElideRight, area.width()), text);
    } else {
        const double d = 4 * scale + liveW / 2;  // params and grads side by side
        // Shards: every tower pulls from and pushes to every shard. One bus under the shards
        // says so with one pair of arrows per tower (4 towers, 2 shards: 8 arrows, not 16).
        double linkTop = holderBottom;
        if (shards) {
            linkTop = holderBottom + (towerTop - holderBottom) * 0.28;
            const double first = std::min(holder.left() + shardW / 2, towerRect(0).center().x());
            const double last = std::max(holder.right() - shardW / 2, towerRect(n - 1).center().x());
            const bool anyLive = active_ && pusher >= 0 && !model_.towers[std::min(pusher, n - 1)].local;
            QPen bus = anyLive ? livePen : staticPen;
            bus.setWidthF(bus.widthF() * 1.6);
            p.setPen(bus);
            p.drawLine(QPointF(first, linkTop), QPointF(last, linkTop));
            for (int j = 0; j < model_.psShards; ++j) {
                const double x = holder.left() + j * (shardW + 10 * scale) + shardW / 2;
                p.drawLine(QPointF(x, holderBottom + 1), QPointF(x, linkTop));
            }
            label(QRectF(area.left(), linkTop - lineH - 1, first - area.left() + shardW, lineH),
                  Qt::AlignRight | Qt::AlignBottom, tr("every shard"), faint);
        }
        bool labelled = false;
        for (int i = 0; i < n; ++i) {
            const QRectF t = towerRect(i);
            const bool live = linkLive(i);
            if (model_.towers[i].local) {
                // On the holder's device: the tower reads the variables in place; nothing moves.
                label(QRectF(t.left(), holderBottom, t.width(), towerTop - holderBottom), Qt::AlignCenter,
                      tr("in place"), faint);
                continue;
            }
            p.setPen(live ? livePen : staticPen);
            const double tx = t.center().x();
            const double hx = shards ? tx : holder.left() + holder.width() * (i + 0.5) / n;
            const QPointF down0(hx - d, linkTop + 1), down1(tx - d, towerTop - 1);
            const QPointF up0(tx + d, towerTop - 1), up1(hx + d, linkTop + 1);
            drawArrow(p, down0, down1, headFor(live));  // parameters out to the tower
            drawArrow(p, up0, up1, headFor(live));      // gradients back to the holder
            if (!labelled) {
                labelled = true;
                // Nearer the holder than the middle, where the sync point line runs.
                const QPointF mDown = down0 + (down1 - down0) * 0.3, mUp = up1 + (up0 - up1) * 0.3;
                const double w = 80 * scale;
                label(QRectF(mDown.x() - w - 4 * scale, mDown.y() - lineH / 2, w, lineH),
                      Qt::AlignRight | Qt::AlignVCenter, tr("params"), faint);
                label(QRectF(mUp.x() + 4 * scale, mUp.y() - lineH / 2, w, lineH), Qt::AlignLeft | Qt::AlignVCenter,
                      tr("grads"), faint);
            }
        }
        // What each link carries, near its tower, drawn after every arrow so none crosses a
        // label. The labels of all moving towers read the same (one holder, towers of one kind):
        // where they do not fit side by side, one line says it for all.
        const double labelY = holderBottom + (towerTop - holderBottom) * 0.72;
        double widest = 0;
        for (int i = 0; i < n; ++i)
            widest = std::max({widest, fm.horizontalAdvance(model_.linkLabel(i)),
                               fm.horizontalAdvance(model_.linkKind(i))});
        const bool each = widest + 8 * scale <= boxW + gap / 2;  // a clear space between neighbours
        for (int i = 0; i < n; ++i) {
            const QString bytes = model_.linkLabel(i), kind = model_.linkKind(i);
            if (bytes.isEmpty()) continue;
            if (!each) {
                const QString all =
                    tr("each tower: %1").arg(kind.isEmpty() ? bytes : bytes + QStringLiteral(", ") + kind);
                label(QRectF(area.left(), labelY - lineH / 2, area.width(), lineH), Qt::AlignCenter,
                      fm.elidedText(all, Qt::ElideRight, area.width()), text);
                break;
            }
            const double cx = towerRect(i).center().x();
            label(QRectF(cx - (boxW + gap) / 2, labelY - lineH, boxW + gap, 2 * lineH), Qt::AlignCenter,
                  kind.isEmpty() ? bytes : bytes + QLatin1Char('\n') + kind, text);
        }
    }

    // --- frames around towers that share a device --------------------------------------------------
    for (const PlacementModel::DeviceGroup& g : groups) {
        const double pad = 5 * scale;
        const QRectF frame = towerRect(g.first).united(towerRect(g.first + g.count - 1)).adjusted(-pad, -pad, pad, pad);
        p.setPen(QPen(faint, staticW, Qt::DashLine));
        p.setBrush(Qt::NoBrush);
        p.drawRoundedRect(frame, 7 * scale, 7 * scale);
        // On the frame's top edge, left, as a group box's title: short and clear of the arrows,
        // which meet the towers in their middle.
        label(QRectF(frame.left() + 8 * scale, frame.top() - lineH / 2, frame.width() - 16 * scale, lineH),
              Qt::AlignLeft | Qt::AlignVCenter, g.device, text);
    }

    // --- machine boxes: each process's towers, solid, titled on the top edge's right (a shared
    // device's dashed frame is titled on the left; the "slowest" mark stays clear below) ------------
    for (const PlacementModel::DeviceGroup& g : machines) {
        const double pad = 9 * scale;
        const QRectF frame = towerRect(g.first).united(towerRect(g.first + g.count - 1)).adjusted(-pad, -pad, pad, pad);
        p.setPen(QPen(text, staticW));
        p.setBrush(Qt::NoBrush);
        p.drawRoundedRect(frame, 3 * scale, 3 * scale);
        label(QRectF(frame.left() + 8 * scale, frame.top() - lineH / 2, frame.width() - 16 * scale, lineH),
              Qt::AlignRight | Qt::AlignVCenter, fm.elidedText(g.device, Qt::ElideRight, frame.width() - 16 * scale), text);
    }

    // --- the towers -------------------------------------------------------------------------------
    const QColor straggler = tb::ui::phaseColor(Phase::Straggle);
    int slowest = -1;
    if (active_ && !model_.async && std::min(n, reported) > 1) {
        double most = 0;
        for (int i = 0; i < std::min(n, reported); ++i) {
            const auto& ph = last_.towers[size_t(i)].phases;
            const double busy = ph.forward + ph.backward + ph.straggle;
            if (busy > most) {
                most = busy;
                slowest = i;
            }
        }
    }
    const double barH = std::max(4.0, 6 * scale);
    for (int i = 0; i < n; ++i) {
        const PlacementModel::Tower& t = model_.towers[i];
        const QRectF r = towerRect(i);
        const tb::TowerPhases* ph = active_ && i < reported ? &last_.towers[size_t(i)].phases : nullptr;
        const double total = ph ? tb::ui::phasesTotal(*ph) : 0;
        QColor fill = pal.color(QPalette::AlternateBase);
        if (total > 0) fill = mix(base, dominantColor(*ph), 0.45);
        if (i == pusher)
            p.setPen(QPen(pal.color(QPalette::Highlight), 2.5 * scale));
        else if (t.slowdown > 1)
            p.setPen(QPen(straggler, 2 * scale));
        else
            p.setPen(QPen(faint, staticW));
        p.setBrush(fill);
        p.drawRoundedRect(r, 5 * scale, 5 * scale);

        QString s = t.device;
        if (t.batch > 0) s += tr("\nbatch %1").arg(t.batch);
        if (t.slowdown > 1) s += tr("\n\u00d7%1 slower").arg(t.slowdown, 0, 'g', 3);
        p.setPen(text);
        p.drawText(r.adjusted(3, 2, -3, -(barH + 4 * scale)), Qt::AlignCenter, s);

        if (total > 0) {
            // The step's phases as one stacked bar, in the order the tower went through them.
            const QRectF bar(r.left() + 5 * scale, r.bottom() - 5 * scale - barH, r.width() - 10 * scale, barH);
            double x = bar.left();
            for (Phase phase : tb::ui::kPhaseOrder) {
                const double sec = tb::ui::phaseSeconds(*ph, phase);
                if (sec <= 0) continue;
                const double w = bar.width() * sec / total;
                p.fillRect(QRectF(x, bar.top(), w, bar.height()), tb::ui::phaseColor(phase));
                x += w;
            }
        }
        if (i == slowest) {
            QFont bold = font;
            bold.setBold(true);
            p.setFont(bold);
            p.setPen(QColor(220, 40, 40));
            p.drawText(QRectF(r.left(), r.bottom() + 1, r.width(), markH), Qt::AlignHCenter | Qt::AlignTop, tr("slowest"));
            p.setFont(font);
        }
    }

    // --- header and caption ---------------------------------------------------------------------
    const QRectF header(area.left(), area.top(), area.width(), headerH);
    p.setPen(text);
    if (active_)  // the bytes the communicator counted for this step, beside the plan's figure below
        p.drawText(header, Qt::AlignLeft | Qt::AlignVCenter,
                   tr("%1 %2: %3 moved")
                       .arg(model_.async ? tr("update") : tr("step"), tb::ui::formatCount(double(last_.step)),
                            formatBytes(double(std::max<int64_t>(0, last_.bytesMoved)))));
    if (pusher >= 0)
        p.drawText(header, Qt::AlignRight | Qt::AlignVCenter,
                   tr("tower %1 pushed, staleness %2").arg(pusher).arg(std::max<int64_t>(0, last_.staleness)));
    const QString caption = !model_.async              ? model_.bytesLabel()
                            : model_.serverProcesses > 0 ? tr("async: workers push without waiting; %1").arg(model_.bytesLabel())
                                                         : tr("async: towers push without waiting; %1").arg(model_.bytesLabel());
    p.setPen(faint);
    p.drawText(QRectF(area.left(), area.bottom() - captionH, area.width(), captionH), Qt::AlignCenter,
               fm.elidedText(caption, Qt::ElideRight, area.width()));
}
