// What every QCustomPlot chart of the window shares: a bold title row, the legend in a row of its
// own between the title and the data (so it never covers the newest points), tick labels with
// thousands separators and as many ticks as fit without running together, integer ticks for
// step axes, and colours from the widget's palette (light or dark).
#pragma once
#include <qcustomplot.h>

#include <QColor>
#include <QPalette>
#include <QString>

namespace tb::ui {

// Tableau 10: mid-luminance hues chosen to stay legible on white and on near-black.
inline const QColor kBlue(0x4E, 0x79, 0xA7), kOrange(0xF2, 0x8E, 0x2B), kRed(0xE1, 0x57, 0x59),
    kTeal(0x76, 0xB7, 0xB2), kGreen(0x59, 0xA1, 0x4F), kYellow(0xED, 0xC9, 0x48), kPurple(0xB0, 0x7A, 0xA1),
    kPink(0xFF, 0x9D, 0xA7), kBrown(0x9C, 0x75, 0x5F), kGrey(0xBA, 0xB0, 0xAC);
// Towers cycle through these; red is kept for means so a mean never looks like one tower.
QColor towerColour(int tower);

// Labels in the user's locale with group separators; as many decimals as the tick step needs; a
// smaller readable step where the hinted one leaves fewer than three ticks in view.
class LocaleTicker : public QCPAxisTicker {
protected:
    double getTickStep(const QCPRange& range) override;
    QString getTickLabel(double tick, const QLocale& locale, QChar formatChar, int precision) override;
    double step_ = 1;  // of the ticks being labelled
};

// Decades on a log axis where three or more fit; inside less than three decades, 1-2-5 or 1..9
// times a power of ten, then plain readable steps, so a short axis is never left with one label.
class LogTicker : public QCPAxisTickerLog {
public:
    LogTicker();
protected:
    QVector<double> createTickVector(double tickStep, const QCPRange& range) override;
    int getSubTickCount(double tickStep) override;
    bool decades_ = true;  // the ticks last made are decades (sub-ticks 2..9 between them)
};

// Whole numbers only (steps, updates, staleness): never 200.5, never "200.00".
class IntegerTicker : public LocaleTicker {
protected:
    double getTickStep(const QCPRange& range) override;
    int getSubTickCount(double tickStep) override;
};

// A chart with a title row, its legend in the row under the title (filled by columns, wrapped
// to the chart's width by fitToSize), and locale tickers on both axes (integer on x); fitted to
// its size again whenever it is resized.
QCustomPlot* makeChart(QWidget* parent, const QString& name, const QString& title, const QString& xLabel,
                       const QString& yLabel);
QCPTextElement* chartTitle(QCustomPlot* p);
// What an empty chart waits for, centred in its axes in the placeholder colour; the caller shows
// and hides it.
QCPItemText* addEmptyHint(QCustomPlot* p, const QString& text);
// The y axis's label, drawn where it fits along the axis (fitToSize); yLabel is it whole, shown
// or not.
void setYLabel(QCustomPlot* p, const QString& label);
QString yLabel(const QCustomPlot* p);
// A legend's entries (its itemCount() counts the cells of its grid, empty ones too).
int legendEntries(const QCPLegend* legend);
// Legend columns, tick counts and whether the y label fits, for the chart's current size (call
// before a replot).
void fitToSize(QCustomPlot* p);
// Writes the chart as it is shown: .png (twice the screen's pixels), .pdf (vector), or .csv (every
// graph's points: series,x,y); false with `error` set when the file cannot be written or its
// suffix is none of these.
bool exportChart(QCustomPlot* p, const QString& path, QString* error);
// Background, axes, grid, legend and title colours from a palette.
void applyChartTheme(QCustomPlot* p, const QPalette& pal);

}  // namespace tb::ui
