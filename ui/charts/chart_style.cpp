// The shared chart style of chart_style.hpp.
#include "file_dialogs.hpp"
#include "charts/chart_style.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>

#include <QDir>
#include <QFileInfo>
#include <QMenu>
#include <QMessageBox>
#include <QRegularExpression>
#include <QSaveFile>
#include <QSettings>
#include <QStandardPaths>
#include <QTextStream>

#include "view_format.hpp"

namespace tb::ui {

QColor towerColour(int tower) {
    static const QColor colours[] = {kBlue, kTeal, kGreen, kPurple, kOrange, kBrown, kPink, kYellow, kGrey};
    return colours[size_t(std::max(0, tower)) % std::size(colours)];
}

namespace {

// Ticks that are multiples of `step` inside `range`.
double ticksInside(const QCPRange& range, double step) {
    return std::floor(range.upper / step + 1e-9) - std::ceil(range.lower / step - 1e-9) + 1;
}

// The next readable step below `step` (10, 5, 2.5, 2, 1 times a power of ten).
double smallerStep(double step) {
    const double decade = std::pow(10.0, std::floor(std::log10(step)));
    for (double m : {5.0, 2.5, 2.0, 1.0})
        if (m * decade < step * (1 - 1e-9)) return m * decade;
    return 0.5 * decade;
}

// Readable steps (1, 2, 2.5, 5 x 10^k) until at least three multiples lie inside `range`.
double stepForThree(const QCPRange& range, double step) {
    while (step > 0 && std::isfinite(step) && range.size() > 0 && ticksInside(range, step) < 3)
        step = smallerStep(step);
    return step;
}

}  // namespace

double LocaleTicker::getTickStep(const QCPRange& range) {
    step_ = stepForThree(range, QCPAxisTicker::getTickStep(range));
    return step_;
}

LogTicker::LogTicker() {
    setLogBase(10);
    setSubTickCount(8);  // 2..9 between decades, the usual log paper
}

QVector<double> LogTicker::createTickVector(double tickStep, const QCPRange& range) {
    decades_ = true;
    QVector<double> ticks = QCPAxisTickerLog::createTickVector(tickStep, range);
    if (std::count_if(ticks.begin(), ticks.end(), [&](double t) { return range.contains(t); }) >= 3 ||
        range.lower <= 0)
        return ticks;
    // Fewer than three decades in view: decades, then 2 and 5, then the other digits times a
    // power of ten, each kept where it lies at least half a hinted tick spacing (about 1.25
    // label heights, see fitToSize) from those kept before it.
    decades_ = false;
    const double minGap = std::log10(range.upper / range.lower) / (2.0 * std::max(2, tickCount()));
    const int lo = int(std::floor(std::log10(range.lower))), hi = int(std::ceil(std::log10(range.upper)));
    ticks.clear();
    for (const std::vector<double>& rank : {std::vector<double>{1}, {2, 5}, {3, 4, 6, 7, 8, 9}})
        for (int e = lo; e <= hi; ++e)
            for (double m : rank) {
                const double t = m * std::pow(10.0, e);
                if (range.contains(t) && std::none_of(ticks.begin(), ticks.end(), [&](double k) {
                        return std::abs(std::log10(t / k)) < minGap * (1 - 1e-9);
                    }))
                    ticks << t;
            }
    std::sort(ticks.begin(), ticks.end());
    if (ticks.size() >= 3) return ticks;
    // Less than a factor of three in view: readable steps, as on a linear axis.
    const double step = stepForThree(range, QCPAxisTicker::getTickStep(range));
    ticks.clear();
    for (double t = std::ceil(range.lower / step) * step; t <= range.upper + 1e-9 * step; t += step) ticks << t;
    return ticks;
}

int LogTicker::getSubTickCount(double tickStep) {
    return decades_ ? QCPAxisTickerLog::getSubTickCount(tickStep) : 0;
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

namespace {
// Fits a chart to its size whenever it is resized, before it lays itself out anew: the charts
// drawn once (the comparison's, the lessons', the lab's) were fitted while still unshown and kept
// two ticks over 1,800 steps at their shown width.
class FitOnResize : public QObject {
public:
    using QObject::QObject;
    bool eventFilter(QObject* watched, QEvent* e) override {
        if (e->type() == QEvent::Resize) fitToSize(static_cast<QCustomPlot*>(watched));
        return false;  // the chart's own resize handling replots it
    }
};
}  // namespace

QCustomPlot* makeChart(QWidget* parent, const QString& name, const QString& title, const QString& xLabel,
                       const QString& yLabel) {
    auto* p = new QCustomPlot(parent);
    p->setObjectName(name);
    p->installEventFilter(new FitOnResize(p));
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
    setYLabel(p, yLabel);
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
        const QString file = QString(title).replace(QRegularExpression("[^A-Za-z0-9]+"), "-").toLower() + ".png";
        // Where the last export went; at first the pictures folder (never the working directory,
        // which for an app started from a menu is anywhere).
        QSettings settings;
        QString dir = settings.value(QStringLiteral("export/dir")).toString();
        if (dir.isEmpty() || !QFileInfo(dir).isDir()) dir = QStandardPaths::writableLocation(QStandardPaths::PicturesLocation);
        if (dir.isEmpty() || !QFileInfo(dir).isDir()) dir = QDir::homePath();
        const QString path = chooseFile(
            p, FileChoice::Save, QObject::tr("Export chart"), QDir(dir).filePath(file),
            QObject::tr("PNG picture (*.png);;PDF document (*.pdf);;CSV data (*.csv)"));
        if (path.isEmpty()) return;
        QString error;
        if (exportChart(p, path, &error))
            settings.setValue(QStringLiteral("export/dir"), QFileInfo(path).absolutePath());
        else
            QMessageBox::warning(p, QObject::tr("Export chart"), error);
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
            out << "series," << p->xAxis->label() << ',' << yLabel(p) << '\n';
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

QCPItemText* addEmptyHint(QCustomPlot* p, const QString& text) {
    auto* hint = new QCPItemText(p);
    hint->position->setType(QCPItemPosition::ptAxisRectRatio);
    hint->position->setCoords(0.5, 0.5);
    hint->setText(text);
    hint->setColor(p->palette().color(QPalette::PlaceholderText));
    return hint;
}

void setYLabel(QCustomPlot* p, const QString& label) {
    p->setProperty("tbYLabel", label);
    p->yAxis->setLabel(label);
    fitToSize(p);
}

QString yLabel(const QCustomPlot* p) { return p->property("tbYLabel").toString(); }

namespace {
// A wrapped legend is a grid with empty cells: itemCount() counts cells, these are its entries.
QVector<QCPAbstractLegendItem*> legendItems(const QCPLegend* legend) {
    QVector<QCPAbstractLegendItem*> items;
    for (int i = 0; i < legend->itemCount(); ++i)
        if (QCPAbstractLegendItem* item = legend->item(i)) items << item;
    return items;
}
}  // namespace

int legendEntries(const QCPLegend* legend) { return int(legendItems(legend).size()); }

void fitToSize(QCustomPlot* p) {
    QCPLegend* legend = p->legend;
    // A legend of no cells (its graphs all cleared) has a largest size of its margins, and
    // QCustomPlot held the chart's whole column to it, hidden or not: the axes shrank to a strip
    // (the scaling lab before a sweep). An empty cell lifts that limit; the first entry fills it.
    if (legend->rowCount() == 0 || legend->columnCount() == 0) legend->expandTo(1, 1);
    if (legend->visible() && legend->itemCount() > 0) {
        const QVector<QCPAbstractLegendItem*> items = legendItems(legend);
        const int entries = int(items.size());
        int widest = 1;
        for (QCPAbstractLegendItem* item : items) {
            // An item is clipped to the height of its text's line, and DejaVu Sans's "_" reaches
            // the bottom of its descent: rounded, its last pixel row was cut away, and "vgg_bn"
            // read "vgg bn". Two pixels below the line keep it.
            if (item->margins().bottom() < 2) item->setMargins(QMargins(0, 0, 0, 2));
            widest = std::max(widest, item->minimumOuterSizeHint().width());
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
    // The axis rect as the next layout makes it: its margins as the last layout left them, the
    // chart's size as it is now (a resize reaches here before the chart lays itself out again).
    const QRect r = p->axisRect()->rect(), v = p->viewport();
    const int w = r.width() > 0 ? r.width() + p->width() - v.width() : p->width();
    const int h = r.height() > 0 ? r.height() + p->height() - v.height() : p->height();
    const QFontMetrics fx(p->xAxis->tickLabelFont());
    const QCPRange keys = p->xAxis->range();
    const QString widestKey = formatCount(std::max(std::abs(keys.lower), std::abs(keys.upper)), 1);
    const double labelW = 1.5 * (fx.horizontalAdvance(widestKey) + 2 * fx.averageCharWidth());
    p->xAxis->ticker()->setTickCount(std::clamp(int(w / labelW), 2, 10));
    const QFontMetrics fy(p->yAxis->tickLabelFont());
    p->yAxis->ticker()->setTickCount(std::clamp(int(h / (2.5 * fy.height())), 2, 8));
    // The y label is centred along the axis: on an axis shorter than it, it spilled over the
    // legend and the title above ("updates missed" over the staleness chart's legend at 1366x768).
    // There it is left out; the chart's title says what is drawn.
    const QString label = yLabel(p);
    const QString shown = QFontMetrics(p->yAxis->labelFont()).horizontalAdvance(label) <= h ? label : QString();
    if (p->yAxis->label() != shown) p->yAxis->setLabel(shown);
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
