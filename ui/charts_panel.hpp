// ChartsPanel: live QCustomPlot charts of a run: loss (each tower thin, the mean bold, optional
// log scale), train and test accuracy, examples/sec, learning rate. Data arrival is separate
// from drawing (QCustomPlot's real-time demo): addStep/addEval only append, a timer replots at
// 10 Hz. A scrolling window or the whole run; zoom and pan with the mouse. Series keep every
// point (QCustomPlot's adaptive sampling draws millions smoothly).
#pragma once
#include <QHash>
#include <QString>
#include <QVector>
#include <QWidget>
#include <deque>
#include <limits>

#include "engine/observer.hpp"

class QCustomPlot;
class QCPGraph;
class QCheckBox;
class QTimer;

class ChartsPanel : public QWidget {
    Q_OBJECT
public:
    explicit ChartsPanel(QWidget* parent = nullptr);
    // Points received so far (tests): steps and evaluations.
    int stepPoints() const { return steps_; }
    int evalPoints() const { return evals_; }
    QCustomPlot* lossPlot() const { return loss_; }

public slots:
    void reset(int towers);                  // a new run: clears everything, one thin series per tower
    void addStep(const tb::StepMetrics& m);
    void addEval(const tb::EvalResult& r);
    void setScrolling(bool scrolling);       // last 500 steps, or the whole run
    void setLogLoss(bool log);

private:
    // Smallest and largest value a chart has received, kept as points arrive so fitting the
    // whole run costs nothing per frame (scanning a million points 15 times a second would).
    struct Bounds {
        double lo = std::numeric_limits<double>::infinity();
        double hi = -std::numeric_limits<double>::infinity();
        double loPositive = std::numeric_limits<double>::infinity();  // for a log axis
        void add(double v);
    };

    void replot();
    void changeEvent(QEvent* e) override;   // palette/style change: recolour the charts
    void applyTheme();
    void applyRanges();                      // automatic view: key window, values fitted to it
    void fitValues(QCustomPlot* p, const Bounds& all, bool wholeRun);
    void noteKey(double key);
    void userMovedView(QCustomPlot* source, bool keyAxis);
    QCPGraph* evalGraph(const QString& split);
    QVector<QCustomPlot*> plots() const { return {loss_, accuracy_, speed_, lr_}; }

    QCustomPlot *loss_ = nullptr, *accuracy_ = nullptr, *speed_ = nullptr, *lr_ = nullptr;
    QCheckBox *scrolling_ = nullptr, *logLoss_ = nullptr;
    QTimer* timer_ = nullptr;
    QVector<QCPGraph*> towerLoss_;           // one per tower, drawn under the mean
    QCPGraph *meanLoss_ = nullptr, *trainAccuracy_ = nullptr, *speedGraph_ = nullptr,
             *speedAverage_ = nullptr, *lrGraph_ = nullptr;
    QHash<QString, QCPGraph*> evalAccuracy_; // by split ("validation", "test"), made on first use
    std::deque<double> speedWindow_;         // last kSpeedAverage examples/sec, for the average
    double speedSum_ = 0;
    Bounds lossBounds_, accuracyBounds_, speedBounds_, lrBounds_;
    int towers_ = 0, steps_ = 0, evals_ = 0;
    double firstKey_ = 0, lastKey_ = 0;
    bool haveKey_ = false;
    bool dirty_ = false;
    int skipFrames_ = 0;          // frames left out while drawing runs over its share of time
    bool userView_ = false;       // the user dragged or zoomed: leave the ranges alone
    bool settingRanges_ = false;  // our own range changes, told apart from the user's
};
