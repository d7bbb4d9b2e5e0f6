// ParallelismLesson: lesson 6's window, "Data, model, pipeline". The same model and batch trained
// three ways one after another, so that no two share the cores: one device with every core, the
// model split into two stages of one thread each (naive model parallelism: the whole batch
// through each stage in turn), and the same two stages as a 1f1b pipeline of micro-batches. Each
// way's timeline of its last steps side by side (a lane per stage), its examples/sec and its
// measured bubble against (S-1)/(M+S-1), and a conclusion written from the measured numbers, with
// the scaling lab's first-order figures for the same ways on GPUs.
#pragma once
#include <QString>
#include <array>
#include <memory>

#include "engine/step_profile.hpp"
#include "lessons/lessons.hpp"

class LessonRunner;
class QLabel;
class QPushButton;
class TimelineView;

class ParallelismLesson : public LessonWindow {
    Q_OBJECT
public:
    static constexpr int kWays = 3;
    explicit ParallelismLesson(const Lesson& lesson, QWidget* parent = nullptr);
    bool running() const override;
    QPushButton* startButton() const { return start_; }
    QLabel* conclusion() const { return conclusion_; }
    TimelineView* timeline(int way) const { return ways_[size_t(way)].timeline; }
    QLabel* result(int way) const { return ways_[size_t(way)].result; }
    const tb::RunConfig& config(int way) const { return ways_[size_t(way)].config; }
    // The pipeline against the naive stages: its rate beside naive's, and, where it falls short of
    // what its smaller bubble alone would give (naive's rate x busy share over naive's), why, with
    // each stage's work per step measured both ways. Rates in examples/s, bubbles as fractions.
    static QString pipelineVerdict(double naiveRate, double naiveBubble, double pipeRate, double pipeBubble,
                                   int batch, int microBatches);

public slots:
    void start() override;
    void stop() override;

protected:
    void abortRuns() override;

private:
    struct Way {
        QString name;
        tb::RunConfig config;
        TimelineView* timeline = nullptr;
        QLabel* result = nullptr;
        double examplesPerSec = -1, bubble = -1;  // the summary's (steady examples/sec)
    };
    void takeSteps();
    void finish(int way, const QString& summaryJson, bool stopped, const QString& error);
    void conclude();
    // The scaling lab's predictor on GPUs, calibrated from the one-device way: one H100 against
    // the pipeline on two joined by NVLink (first order, and said so); empty where it cannot.
    QString gpuFigures() const;

    std::array<Way, kWays> ways_;
    std::unique_ptr<tb::StepProfiler> oneDevice_;  // the one-device way's steps past a warm-up
    int64_t params_ = 0;                            // the model's, from its summary
    LessonRunner* runner_ = nullptr;
    QPushButton *start_ = nullptr, *stop_ = nullptr;
    QLabel* conclusion_ = nullptr;
};
