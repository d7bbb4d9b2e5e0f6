#include "predictions/confusion_view.hpp"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <algorithm>

ConfusionView::ConfusionView(QWidget* parent) : QWidget(parent) {
    setObjectName("confusionView");
    setMouseTracking(false);
}

void ConfusionView::setMatrix(const std::vector<int64_t>& counts, int classes, const QStringList& names) {
    if (classes <= 0 || counts.size() != size_t(classes) * size_t(classes)) {
        clear();
        return;
    }
    counts_ = counts;
    classes_ = classes;
    names_ = names.size() == classes ? names : QStringList();
    rowTotals_.assign(size_t(classes), 0);
    for (int r = 0; r < classes; ++r)
        for (int c = 0; c < classes; ++c) rowTotals_[size_t(r)] += counts_[size_t(r) * size_t(classes) + size_t(c)];
    if (selTrue_ >= classes || selPred_ >= classes) select(-1, -1);
    update();
}

void ConfusionView::clear() {
    counts_.clear();
    rowTotals_.clear();
    classes_ = 0;
    names_.clear();
    select(-1, -1);
    update();
}

int64_t ConfusionView::count(int t, int p) const {
    if (t < 0 || p < 0 || t >= classes_ || p >= classes_) return 0;
    return counts_[size_t(t) * size_t(classes_) + size_t(p)];
}

void ConfusionView::select(int t, int p) {
    if (t < 0 || p < 0 || t >= classes_ || p >= classes_) t = p = -1;
    if (t == selTrue_ && p == selPred_) return;
    selTrue_ = t;
    selPred_ = p;
    update();
    emit selectionChanged(t, p);
}

QString ConfusionView::name(int k) const { return names_.isEmpty() ? QString::number(k) : names_[k]; }

// "3 Dress" where the classes have names; "3" alone where they are numbers (not "3 3").
QString ConfusionView::rowLabel(int k) const {
    return names_.isEmpty() ? QString::number(k) : QStringLiteral("%1 %2").arg(k).arg(names_[k]);
}

// Row labels (the true classes' names) on the left, column numbers on top (names would not fit
// above narrow columns: the rows' labels carry the numbers too), square cells filling the rest.
ConfusionView::Layout ConfusionView::layout() const {
    Layout l;
    const QFontMetrics fm(font());
    for (int k = 0; k < classes_; ++k)
        l.labelWidth = std::max(l.labelWidth, fm.horizontalAdvance(rowLabel(k)));
    l.labelWidth += 8;
    l.headerHeight = fm.height() * 2 + 4;  // "predicted" and the column numbers
    const int w = width() - l.labelWidth - 4, h = height() - l.headerHeight - fm.height() - 4;
    l.cell = classes_ ? std::max(8, std::min(w, h) / classes_) : 0;
    return l;
}

QRect ConfusionView::cellRect(int t, int p) const {
    const Layout l = layout();
    return {l.labelWidth + p * l.cell, l.headerHeight + t * l.cell, l.cell, l.cell};
}

bool ConfusionView::cellAt(const QPoint& pt, int& t, int& p) const {
    if (!classes_) return false;
    const Layout l = layout();
    const int x = pt.x() - l.labelWidth, y = pt.y() - l.headerHeight;
    if (x < 0 || y < 0) return false;
    p = x / l.cell;
    t = y / l.cell;
    return t < classes_ && p < classes_;
}

void ConfusionView::paintEvent(QPaintEvent*) {
    QPainter g(this);
    g.fillRect(rect(), palette().base());
    const QFontMetrics fm(font());
    if (!classes_) {
        g.setPen(palette().color(QPalette::PlaceholderText));
        g.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap, tr("The confusion matrix appears after an evaluation."));
        return;
    }
    const Layout l = layout();
    g.setPen(palette().color(QPalette::Text));
    g.drawText(QRect(l.labelWidth, 0, l.cell * classes_, fm.height()), Qt::AlignCenter, tr("predicted"));
    for (int k = 0; k < classes_; ++k) {
        g.drawText(QRect(l.labelWidth + k * l.cell, fm.height() + 2, l.cell, fm.height()), Qt::AlignCenter,
                   QString::number(k));
        g.drawText(QRect(0, l.headerHeight + k * l.cell, l.labelWidth - 6, l.cell), Qt::AlignRight | Qt::AlignVCenter,
                   rowLabel(k));
    }
    g.drawText(QRect(0, l.headerHeight + classes_ * l.cell + 2, l.labelWidth - 6, fm.height()),
               Qt::AlignRight | Qt::AlignVCenter, tr("true"));
    QFont small = font();
    small.setPointSizeF(std::max(6.0, font().pointSizeF() * std::min(1.0, l.cell / 26.0)));
    g.setFont(small);
    for (int t = 0; t < classes_; ++t) {
        for (int p = 0; p < classes_; ++p) {
            const int64_t n = count(t, p);
            const double share = rowTotals_[size_t(t)] ? double(n) / double(rowTotals_[size_t(t)]) : 0;
            // Right: green, wrong: red; the share of the row sets how strong (a trace of a
            // mistake still shows).
            const QColor full = t == p ? QColor(46, 139, 87) : QColor(200, 40, 40);
            const double a = n ? 0.12 + 0.88 * share : 0;
            const QColor fill(int(255 + (full.red() - 255) * a), int(255 + (full.green() - 255) * a),
                              int(255 + (full.blue() - 255) * a));
            const QRect r = cellRect(t, p);
            g.fillRect(r, fill);
            g.setPen(QColor(220, 220, 220));
            g.drawRect(r.adjusted(0, 0, -1, -1));
            if (n) {
                g.setPen(a > 0.55 ? Qt::white : Qt::black);
                g.drawText(r, Qt::AlignCenter, QString::number(n));
            }
        }
    }
    if (selTrue_ >= 0) {
        g.setPen(QPen(palette().color(QPalette::Highlight), 3));
        g.setBrush(Qt::NoBrush);
        g.drawRect(cellRect(selTrue_, selPred_).adjusted(1, 1, -2, -2));
    }
}

void ConfusionView::mousePressEvent(QMouseEvent* e) {
    int t = -1, p = -1;
    if (e->button() != Qt::LeftButton || !cellAt(e->position().toPoint(), t, p)) return;
    if (t == selTrue_ && p == selPred_) select(-1, -1);
    else select(t, p);
}

bool ConfusionView::event(QEvent* e) {
    if (e->type() == QEvent::ToolTip) {
        auto* h = static_cast<QHelpEvent*>(e);
        int t = -1, p = -1;
        if (cellAt(h->pos(), t, p)) {
            const int64_t n = count(t, p), total = rowTotals_[size_t(t)];
            const QString what = t == p ? tr("%1 right").arg(name(t)) : tr("%1 predicted as %2").arg(name(t), name(p));
            QToolTip::showText(h->globalPos(),
                               tr("%1: %2 of %3 (%4%)\nClick to show these examples; again for all.")
                                   .arg(what)
                                   .arg(n)
                                   .arg(total)
                                   .arg(total ? 100.0 * double(n) / double(total) : 0.0, 0, 'f', 1),
                               this);
        } else {
            QToolTip::hideText();
        }
        return true;
    }
    return QWidget::event(e);
}
