// SyncAsyncLesson: lesson 2's window. The same experiment (same seed, same straggler, same
// examples) trained synchronously and asynchronously at once, each by an EngineWorker on a
// thread of its own with half the cores, each kept as a run folder: validation accuracy against
// time and against steps (updates for the asynchronous run) for both, and the histogram of the
// asynchronous pushes' staleness, with a line per run saying where it ended.
#pragma once
#include <vector>
#include <QString>
#include <array>
#include <map>

#include "engine/observer.hpp"
#include "lessons/lessons.hpp"

class EngineWorker;
class QCPBars;
class QCPGraph;
class QCPItemText;
class QCustomPlot;
class QLabel;
class QPushButton;
class QThread;

class SyncAsyncLesson : public LessonWindow {
    Q_OBJECT
public:
    explicit SyncAsyncLesson(const Lesson& lesson, QWidget* parent = nullptr);
    ~SyncAsyncLesson() override;
    bool running() const override;
    QCustomPlot* byTime() const { return byTime_; }
    QCustomPlot* bySteps() const { return bySteps_; }
    QCustomPlot* stalenessChart() const { return staleness_; }
    QLabel* summary() const { return summary_; }
    QPushButton* startButton() const { return start_; }
    const std::map<int64_t, int64_t>& stalenessCounts() const { return counts_; }
    int validationPoints(int side) const;  // 0: sync, 1: async

public slots:
    void start() override;
    void stop() override;

protected:
    void abortRuns() override;

private:
    struct Side {
        QString name;
        tb::RunConfig config;
        QThread* thread = nullptr;
        EngineWorker* worker = nullptr;
        class FrameGate* frames = nullptr;  // its steps, drawn at most ~30 times a second
        QCPGraph *time = nullptr, *steps = nullptr;
        std::map<int64_t, double> elapsed;  // step -> seconds since training started
        double lastElapsed = 0;
        bool running = false;
        QString outcome;                    // the line the summary shows
    };
    void takeSteps(int side);
    void addEval(int side, const tb::EvalResult& r);
    void finish(int side, const QString& summaryJson, bool stopped, const QString& error = {});
    void showSummary();
    void replot();

    std::array<Side, 2> sides_;
    std::map<int64_t, int64_t> counts_;  // staleness -> pushes
    QCustomPlot *byTime_, *bySteps_, *staleness_;
    QCPBars* bars_;
    std::vector<QCPItemText*> hints_;  // "Start both: ..." on the accuracy charts until a point comes
    QLabel* summary_;
    QPushButton *start_, *stop_;
};
