// ChartsPanel: live QCustomPlot charts of a run: loss (each tower thin, the mean bold, optional
// log scale, averaging steps marked), train and test accuracy, examples/sec (per step, over the
// last seconds, over the whole run), learning rate, and for asynchronous runs the staleness of
// every push with a note that such runs are not reproducible. Data arrival is separate from
// drawing (QCustomPlot's real-time demo): addStep/addEval only append, a timer replots at 10 Hz.
// A scrolling window or the whole run; zoom and pan with the mouse. A series keeps its newest
// 4,096 points as they came and at most 16,384 in all, older ones thinned to their lows and highs
// (bounded memory over a long run; the run folder's metrics file has every step), and
// QCustomPlot's adaptive sampling draws them smoothly.
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
class QLabel;
class QTimer;

class ChartsPanel : public QWidget {
    Q_OBJECT
public:
    static constexpr double kRecentSeconds = 2;  // the "recent" window of examples/sec

    explicit ChartsPanel(QWidget* parent = nullptr);
    // Points received so far (tests): steps and evaluations.
    int stepPoints() const { return steps_; }
    int evalPoints() const { return evals_; }
    QCustomPlot* lossPlot() const { return loss_; }
    QCustomPlot* speedPlot() const { return speed_; }
    QCustomPlot* stalenessPlot() const { return staleness_; }
    QLabel* asyncNote() const { return asyncNote_; }
    // Steps between the first and the last whose reports never came (the note above the charts
    // says so while there are any).
    int64_t missingSteps() const { return missing_; }
    QLabel* shortNote() const { return shortNote_; }
    // Examples/sec over the whole run and over the last kRecentSeconds (0 before any step).
    double runExamplesPerSec() const;
    double recentExamplesPerSec() const;

public slots:
    void reset(int towers);                  // a new run: clears everything, one thin series per tower
    void addStep(const tb::StepMetrics& m);
    void addEval(const tb::EvalResult& r);
    // The run ended: its whole-run figure becomes the summary's (which counts the training time to
    // the run's very end, a millisecond or so past the last step's report).
    void finishRun(double examplesPerSec);
    void setScrolling(bool scrolling);       // last 500 steps, or the whole run
    void setLogLoss(bool log);

    // The least height that shows every chart whole at the panel's present width: the notes
    // above the charts wrap, and a QSplitter asks only minimumSizeHint (not heightForWidth), so
    // a pane sized by it alone laid the second row of charts over the first.
    QSize minimumSizeHint() const override;

protected:
    bool eventFilter(QObject* watched, QEvent* e) override;  // a chart resized: refit legend and ticks
    void resizeEvent(QResizeEvent* e) override;               // a new width: a new minimum height

private:
    // Smallest and largest value a chart has received, kept as points arrive so fitting the
    // whole run costs nothing per frame (scanning a million points 15 times a second would).
    struct Bounds {
        double lo = std::numeric_limits<double>::infinity();
        double hi = -std::numeric_limits<double>::infinity();
        double loPositive = std::numeric_limits<double>::infinity();  // for a log axis
        void add(double v);
    };
    // Examples and seconds of one report, for the run's and the recent examples/sec.
    struct Span {
        double t;        // when it ended: training seconds (sync) or the run's clock (async)
        double seconds;  // how long it took (sync); unused for async
        double examples;
    };

    void replot();
    void changeEvent(QEvent* e) override;   // palette/style change: recolour the charts
    void applyTheme();
    void applyRanges();                      // automatic view: key window, values fitted to it
    // `fromZero`: a value axis of positive values starts at 0 (the learning rate's).
    void fitValues(QCustomPlot* p, const Bounds& all, bool wholeRun, bool fromZero = false);
    void noteKey(double key);
    void userMovedView(QCustomPlot* source, bool keyAxis);
    void addSpeed(const tb::StepMetrics& m, double key);
    void addStaleness(const tb::StepMetrics& m, double key);
    void noteMissing(int64_t step);
    void showAsync(bool async);
    QCPGraph* evalGraph(const QString& split);
    QVector<QCustomPlot*> plots() const { return {loss_, accuracy_, speed_, lr_, staleness_}; }

    QCustomPlot *loss_ = nullptr, *accuracy_ = nullptr, *speed_ = nullptr, *lr_ = nullptr, *staleness_ = nullptr;
    QCheckBox *scrolling_ = nullptr, *logLoss_ = nullptr;
    QLabel* asyncNote_ = nullptr;
    QLabel* shortNote_ = nullptr;
    QTimer* timer_ = nullptr;
    QVector<QCPGraph*> towerLoss_;           // one per tower, drawn under the mean
    QVector<QCPGraph*> towerStaleness_;      // async: one dot per push, per tower
    QCPGraph *meanLoss_ = nullptr, *averagedLoss_ = nullptr, *trainAccuracy_ = nullptr, *speedGraph_ = nullptr,
             *speedRecent_ = nullptr, *speedRun_ = nullptr, *lrGraph_ = nullptr, *stalenessMean_ = nullptr;
    QHash<QString, QCPGraph*> evalAccuracy_; // by split ("validation", "test"), made on first use
    std::deque<Span> recent_;                // reports within the last kRecentSeconds
    double runExamples_ = 0, runSeconds_ = 0;
    std::deque<double> stalenessWindow_;     // last pushes' staleness, for the mean line
    double stalenessSum_ = 0, stalenessTotal_ = 0;
    int64_t pushes_ = 0;
    Bounds lossBounds_, accuracyBounds_, speedBounds_, lrBounds_, stalenessBounds_;
    int towers_ = 0, steps_ = 0, evals_ = 0;
    int64_t firstStep_ = -1, lastStep_ = -1, missing_ = 0;
    bool async_ = false;
    double firstKey_ = 0, lastKey_ = 0;
    bool haveKey_ = false;
    bool dirty_ = false;
    int skipFrames_ = 0;          // frames left out while drawing runs over its share of time
    bool userView_ = false;       // the user dragged or zoomed: leave the ranges alone
    bool settingRanges_ = false;  // our own range changes, told apart from the user's
};
