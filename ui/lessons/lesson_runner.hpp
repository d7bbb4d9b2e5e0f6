// LessonRunner: trains a lesson's runs one after another on one engine worker of its own thread,
// so that no two share the cores (lessons 5, 6 and 7 compare runs by their speed and accuracy).
// A run's end starts the next unless the user stopped or the run failed. The steps the worker
// reports reach the lesson at most ~30 times a second (FrameGate), all of a run's before its
// runFinished and each evaluation's before it.
#pragma once
#include <QObject>
#include <QString>
#include <vector>

#include "engine/observer.hpp"
#include "io/run_config.hpp"

class EngineWorker;
class FrameGate;
class QThread;

class LessonRunner : public QObject {
    Q_OBJECT
public:
    explicit LessonRunner(QObject* parent);
    ~LessonRunner() override;  // the running run abandoned, its thread joined

    void start(std::vector<tb::RunConfig> runs);
    void stop();   // the running run stops (its final evaluation kept); none after it
    void abort();  // the window closes: the running run abandoned, none after it
    bool running() const { return current_ >= 0; }
    int current() const { return current_; }  // the run training now; -1: none
    std::vector<tb::StepMetrics> takeSteps();  // the running run's steps since the last take

signals:
    void runStarting(int run);
    void stepsReady();
    void evaluated(const tb::EvalResult& r);
    void runFinished(int run, const QString& summaryJson, bool stopped, const QString& error);
    void allFinished();  // the last run ended, or a stop or a failure ended the sequence

private:
    void runNext(int run);
    void finish(const QString& summaryJson, bool stopped, const QString& error);

    std::vector<tb::RunConfig> runs_;
    int current_ = -1;
    bool stopping_ = false;
    QThread* thread_ = nullptr;
    EngineWorker* worker_ = nullptr;
    FrameGate* frames_ = nullptr;
};
