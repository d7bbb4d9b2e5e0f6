// The shared chart style of chart_style.hpp.
#include "charts/chart_style.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>

#include <QFileDialog>
#include <QFileInfo>
#include <QMenu>
#include <QMessageBox>
#include <QRegularExpression>
#include <QSaveFile>
#include <QTextStream>

#include "view_format.hpp"

namespace tb::ui {

QColor towerColour(int tower) {
    static const QColor colours[] = {kBlue, kTeal, kGreen, kPurple, kOrange, kBrown, kPink, kYellow, kGrey};
    return colours[size_t(std::max(0, tower)) % std::size(colours)];
}

double LocaleTicker::getTickStep(const QCPRange& range) {
    step_ = QCPAxisTicker::getTickStep(range);
    return step_;
}

QString LocaleTicker::getTickLabel(double tick, const QLocale&, QChar, int) {
    // As many decimals as it takes to write the step exactly (0.25 -> 2, 2.5 -> 1, 500 -> 0),
    // so neighbouring labels differ and none carries digits the step cannot justify.
    int decimals = 0;
    double scaled = step_;
    while (decimals < 9 && std::abs(scaled - std::round(scaled)) > 1e-6 * std::max(1.0, std::abs(scaled))) {
        scaled *= 10;
        ++decimals;
    }
    if (std::abs(tick) < 1e-9 * step_) tick = 0;  // no "-0.00" from rounding
    return formatCount(tick, decimals);
}

double IntegerTicker::getTickStep(const QCPRange& range) {
    double s = QCPAxisTicker::getTickStep(range);
    if (s < 1) s = 1;
    else if (s < 10) s = std::floor(s);  // the readable 2.5 becomes 2
    step_ = s;
    return s;
}

int IntegerTicker::getSubTickCount(double tickStep) {
    // Sub-ticks only where they fall on whole numbers.
    const int n = int(std::lround(tickStep));
    if (n <= 1) return 0;
    for (int sub : {4, 3, 1})
        if (n % (sub + 1) == 0) return sub;
    return 0;
}

QCustomPlot* makeChart(QWidget* parent, const QString& name, const QString& title, const QString& xLabel,
                       const QString& yLabel) {
    auto* p = new QCustomPlot(parent);
    p->setObjectName(name);
    p->setMinimumSize(200, 160);  // three side by side (async) must fit beside both docks at 1366 px
    p->plotLayout()->insertRow(0);
    QFont titleFont = p->font();
    titleFont.setBold(true);
    p->plotLayout()->addElement(0, 0, new QCPTextElement(p, title, titleFont));
    // The legend leaves the axis rect's inset layout for a row of its own above the data.
    p->plotLayout()->insertRow(1);
    p->plotLayout()->addElement(1, 0, p->legend);
    p->plotLayout()->setRowStretchFactor(1, 0.001);
    p->legend->setFillOrder(QCPLegend::foColumnsFirst);
    p->legend->setRowSpacing(0);
    p->legend->setColumnSpacing(10);
    p->legend->setMargins(QMargins(4, 0, 4, 0));
    p->legend->setIconSize(18, 10);
    QFont legendFont = p->font();
    legendFont.setPointSizeF(std::max(6.0, legendFont.pointSizeF() - 1));
    p->legend->setFont(legendFont);
    p->legend->setVisible(false);  // until a chart gives it entries
    p->xAxis->setLabel(xLabel);
    p->yAxis->setLabel(yLabel);
    p->xAxis->setTicker(QSharedPointer<IntegerTicker>::create());
    p->yAxis->setTicker(QSharedPointer<LocaleTicker>::create());
    p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    // Dragging redraws at mouse rate; without antialiasing that stays fluid with long series.
    p->setNoAntialiasingOnDrag(true);
    // Right click: save the chart as a picture or its data as CSV.
    p->setContextMenuPolicy(Qt::CustomContextMenu);
    QObject::connect(p, &QWidget::customContextMenuRequested, p, [p](const QPoint& at) {
        QMenu menu(p);
        QAction* save = menu.addAction(QObject::tr("Export chart (PNG, PDF or CSV)…"));
        if (menu.exec(p->mapToGlobal(at)) != save) return;
        const QString title = chartTitle(p) ? chartTitle(p)->text() : QStringLiteral("chart");
        const QString path = QFileDialog::getSaveFileName(
            p, QObject::tr("Export chart"), QString(title).replace(QRegularExpression("[^A-Za-z0-9]+"), "-").toLower() + ".png",
            QObject::tr("PNG picture (*.png);;PDF document (*.pdf);;CSV data (*.csv)"));
        QString error;
        if (!path.isEmpty() && !exportChart(p, path, &error)) QMessageBox::warning(p, QObject::tr("Export chart"), error);
    });
    return p;
}

bool exportChart(QCustomPlot* p, const QString& path, QString* error) {
    const QString suffix = QFileInfo(path).suffix().toLower();
    bool ok = false;
    if (suffix == "png") {
        ok = p->savePng(path, 0, 0, 2.0);
    } else if (suffix == "pdf") {
        ok = p->savePdf(path);
    } else if (suffix == "csv") {
        QSaveFile f(path);  // whole or not at all
        if (f.open(QIODevice::WriteOnly | QIODevice::Text)) {
            QTextStream out(&f);
            out.setRealNumberPrecision(17);
            out << "series," << p->xAxis->label() << ',' << p->yAxis->label() << '\n';
            for (int g = 0; g < p->graphCount(); ++g) {
                QString name = p->graph(g)->name();
                name.replace('"', "\"\"");
                for (auto it = p->graph(g)->data()->constBegin(); it != p->graph(g)->data()->constEnd(); ++it)
                    out << '"' << name << "\"," << it->key << ',' << it->value << '\n';
            }
            ok = f.commit();
        }
    } else {
        *error = QObject::tr("%1: not .png, .pdf or .csv").arg(path);
        return false;
    }
    if (!ok) *error = QObject::tr("%1: cannot be written").arg(path);
    return ok;
}

QCPTextElement* chartTitle(QCustomPlot* p) { return qobject_cast<QCPTextElement*>(p->plotLayout()->element(0, 0)); }

void fitToSize(QCustomPlot* p) {
    QCPLegend* legend = p->legend;
    if (legend->visible() && legend->itemCount() > 0) {
        // A wrapped legend is a grid with empty cells: itemCount() counts cells, not entries.
        int widest = 1, entries = 0;
        for (int i = 0; i < legend->itemCount(); ++i)
            if (QCPAbstractLegendItem* item = legend->item(i)) {
                widest = std::max(widest, item->minimumOuterSizeHint().width());
                ++entries;
            }
        const int room = p->width() - legend->margins().left() - legend->margins().right();
        const int columns =
            std::clamp((room + legend->columnSpacing()) / (widest + legend->columnSpacing()), 1, std::max(1, entries));
        if (legend->wrap() != columns) {
            legend->setWrap(columns);
            legend->setFillOrder(QCPLegend::foColumnsFirst, true);  // re-deal the entries into rows
        }
    }
    // Ticks at least one and a half labels apart: a tick count is a hint that readable tick steps
    // (1, 2, 2.5, 5 x 10^k) may exceed by half.
    const QRect r = p->axisRect()->rect();
    const int w = r.width() > 0 ? r.width() : p->width(), h = r.height() > 0 ? r.height() : p->height();
    const QFontMetrics fx(p->xAxis->tickLabelFont());
    const QCPRange keys = p->xAxis->range();
    const QString widestKey = formatCount(std::max(std::abs(keys.lower), std::abs(keys.upper)), 1);
    const double labelW = 1.5 * (fx.horizontalAdvance(widestKey) + 2 * fx.averageCharWidth());
    p->xAxis->ticker()->setTickCount(std::clamp(int(w / labelW), 2, 10));
    const QFontMetrics fy(p->yAxis->tickLabelFont());
    p->yAxis->ticker()->setTickCount(std::clamp(int(h / (2.5 * fy.height())), 2, 8));
}

void applyChartTheme(QCustomPlot* p, const QPalette& pal) {
    // QCustomPlot draws black on white whatever the palette; take the palette's colours so the
    // charts match a dark desktop, where the fixed series colours were chosen to read too.
    const QColor background = pal.color(QPalette::Base), text = pal.color(QPalette::Text);
    QColor gridColour = text, subGridColour = text;
    gridColour.setAlpha(50);
    subGridColour.setAlpha(20);
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
    // Outside the data, the legend needs neither a frame nor a background to stay readable.
    p->legend->setBrush(Qt::NoBrush);
    p->legend->setBorderPen(Qt::NoPen);
    p->legend->setTextColor(text);
    if (QCPTextElement* title = chartTitle(p)) title->setTextColor(text);
}

}  // namespace tb::ui
