// ComparisonLesson: a lesson that trains several prepared runs one after another (so that no two
// share the cores) and sets their measured results side by side: each run's validation accuracy
// over the epochs in one chart, and a table of its final test accuracy, examples/sec and wall
// time. The conclusion under them is written from those measurements (Lesson::conclude). Lesson 5
// (the batch and the learning rate as towers multiply) and lesson 7 (batch norm across towers)
// are such lessons.
#pragma once
#include <QString>
#include <functional>
#include <map>
#include <vector>

#include "lessons/lessons.hpp"

class LessonRunner;
class QCustomPlot;
class QLabel;
class QPushButton;
class QTableWidget;

class ComparisonLesson : public LessonWindow {
    Q_OBJECT
public:
    explicit ComparisonLesson(const Lesson& lesson, QWidget* parent = nullptr);
    bool running() const override;
    QPushButton* startButton() const { return start_; }
    QLabel* conclusion() const { return conclusion_; }
    QTableWidget* table() const { return table_; }
    QCustomPlot* chart() const { return chart_; }
    const std::vector<LessonRun>& runs() const { return runs_; }
    const std::vector<LessonResult>& results() const { return results_; }

public slots:
    void start() override;
    void stop() override;

protected:
    void abortRuns() override;

private:
    void takeSteps();
    void evaluated(double accuracy, int64_t step, bool validation);
    void finish(int run, const QString& summaryJson, bool stopped, const QString& error);
    void showRow(int run);
    void clearChart();

    std::vector<LessonRun> runs_;
    std::vector<LessonResult> results_;
    std::function<QString(const std::vector<LessonRun>&, const std::vector<LessonResult>&)> conclude_;
    std::map<int64_t, double> epochOf_;  // the running run's steps -> epochs (the chart's axis)
    LessonRunner* runner_ = nullptr;
    QPushButton *start_ = nullptr, *stop_ = nullptr;
    QLabel* conclusion_ = nullptr;
    QTableWidget* table_ = nullptr;
    QCustomPlot* chart_ = nullptr;
};
