#include "charts/decision_view.hpp"

#include <QPainter>
#include <QPainterPath>
#include <algorithm>
#include <cmath>

#include "view_format.hpp"

namespace {

// Cell (col, row) of the grid: the nearest cell centre to (x, y); -1 outside the grid.
int cellOf(const tb::DecisionGrid& g, double x, double y) {
    const double fx = g.cols > 1 ? (x - g.xMin) / (g.xMax - g.xMin) * (g.cols - 1) : 0;
    const double fy = g.rows > 1 ? (y - g.yMin) / (g.yMax - g.yMin) * (g.rows - 1) : 0;
    const int c = int(std::lround(fx)), r = int(std::lround(fy));
    if (c < 0 || c >= g.cols || r < 0 || r >= g.rows) return -1;
    return r * g.cols + c;
}

}  // namespace

DecisionView::DecisionView(QWidget* parent) : QWidget(parent) {
    setToolTip(tb::ui::wrappedToolTip(
        tr("Decision regions: the class the model predicts at each point of the plane, paler where it "
           "is less sure, with the training points in their true class. Drawn from the variables the "
           "towers share, during the run, so the boundary is seen forming.\n\nAveraging every K steps: "
           "drawn after each averaging, where the replicas agree. Asynchronous updates: drawn from the "
           "copy the pushing tower had pulled.")));
}

QColor DecisionView::classColor(int k) {
    // Distinct hues that stay apart when paled (ColorBrewer Set1, yellow left out).
    static const QColor colors[] = {QColor(228, 26, 28), QColor(55, 126, 184), QColor(77, 175, 74),
                                    QColor(152, 78, 163), QColor(255, 127, 0), QColor(166, 86, 40),
                                    QColor(247, 129, 191), QColor(153, 153, 153)};
    return colors[std::max(0, k) % int(std::size(colors))];
}

void DecisionView::showGrid(const tb::DecisionGrid& g) {
    const size_t cells = size_t(std::max(0, g.cols)) * size_t(std::max(0, g.rows));
    if (g.cols < 2 || g.rows < 2 || g.predicted.size() != cells || g.confidence.size() != cells ||
        g.points.size() != 2 * g.labels.size())
        return;
    grid_ = g;
    regions_ = QImage(g.cols, g.rows, QImage::Format_RGB32);
    const QColor paper(255, 255, 255);
    for (int r = 0; r < g.rows; ++r) {
        // Row 0 of the grid is at yMin, the bottom of the plane; images count rows from the top.
        auto* line = reinterpret_cast<QRgb*>(regions_.scanLine(g.rows - 1 - r));
        for (int c = 0; c < g.cols; ++c) {
            const size_t i = size_t(r) * size_t(g.cols) + size_t(c);
            const QColor k = classColor(g.predicted[i]);
            // Confidence 1/classes (a guess) is nearly paper; 1.0 is a clear tint.
            const double floor = g.classes > 0 ? 1.0 / g.classes : 0.0;
            const double sure = std::clamp((double(g.confidence[i]) - floor) / std::max(1e-6, 1.0 - floor), 0.0, 1.0);
            const double a = 0.12 + 0.43 * sure;
            line[c] = qRgb(int(paper.red() + (k.red() - paper.red()) * a), int(paper.green() + (k.green() - paper.green()) * a),
                           int(paper.blue() + (k.blue() - paper.blue()) * a));
        }
    }
    update();
}

void DecisionView::clear() {
    grid_ = {};
    regions_ = {};
    update();
}

double DecisionView::pointsRight() const {
    if (!hasGrid() || grid_.labels.empty()) return 0;
    size_t right = 0;
    for (size_t i = 0; i < grid_.labels.size(); ++i) {
        const int cell = cellOf(grid_, grid_.points[2 * i], grid_.points[2 * i + 1]);
        right += cell >= 0 && grid_.predicted[size_t(cell)] == grid_.labels[i];
    }
    return double(right) / double(grid_.labels.size());
}

QString DecisionView::caption() const {
    if (!hasGrid()) return tr("Decision regions appear here\nwhile a 2-D set trains");
    const QString right = tr("%1% of the points in their region").arg(std::lround(100 * pointsRight()));
    if (grid_.pusher >= 0)  // async: one tower's pulled copy, as old as its staleness
        return tr("update %1\ntower %2's copy, version %3\n%4")
            .arg(tb::ui::formatCount(double(grid_.step)))
            .arg(grid_.pusher)
            .arg(tb::ui::formatCount(double(grid_.version)), right);
    return tr("step %1\n%2").arg(tb::ui::formatCount(double(grid_.step)), right);
}

QRectF DecisionView::plane() const {
    const QFontMetricsF fm(font());
    const int lines = int(caption().count(QLatin1Char('\n'))) + 1;
    const QRectF area = QRectF(rect()).adjusted(6, fm.height() * (lines + 0.3), -6, -6);  // under the caption
    const double side = std::max(0.0, std::min(area.width(), area.height()));
    return {area.center().x() - side / 2, area.top(), side, side};
}

void DecisionView::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing);
    const QPalette& pal = palette();
    p.fillRect(rect(), pal.color(QPalette::Base));
    const QFontMetricsF fm(font());
    p.setPen(pal.color(QPalette::Text));
    const QStringList lines = caption().split(QLatin1Char('\n'));
    for (int i = 0; i < lines.size(); ++i)
        p.drawText(QRectF(6, 2 + i * fm.height(), width() - 12, fm.height()), Qt::AlignLeft | Qt::AlignVCenter,
                   fm.elidedText(lines[i], Qt::ElideRight, width() - 12));
    const QRectF sq = plane();
    if (!hasGrid() || sq.width() < 4) return;

    // Cells are drawn as the smooth image of their centres; the plane runs from the first cell's
    // centre less half a cell to the last's plus half a cell.
    p.setRenderHint(QPainter::SmoothPixmapTransform);
    p.drawImage(sq, regions_);
    const double cw = (grid_.xMax - grid_.xMin) / (grid_.cols - 1), ch = (grid_.yMax - grid_.yMin) / (grid_.rows - 1);
    const double x0 = grid_.xMin - cw / 2, y0 = grid_.yMin - ch / 2;
    const double sx = sq.width() / (cw * grid_.cols), sy = sq.height() / (ch * grid_.rows);
    const double radius = std::clamp(sq.width() / 120.0, 1.8, 4.0);
    for (size_t i = 0; i < grid_.labels.size(); ++i) {
        const QPointF at(sq.left() + (grid_.points[2 * i] - x0) * sx, sq.bottom() - (grid_.points[2 * i + 1] - y0) * sy);
        p.setPen(QPen(QColor(40, 40, 40), 0.8));
        p.setBrush(classColor(grid_.labels[i]));
        p.drawEllipse(at, radius, radius);
    }
    p.setPen(QPen(pal.color(QPalette::Mid), 1));
    p.setBrush(Qt::NoBrush);
    p.drawRect(sq);
}
