// EngineWorker: the one adapter between the Qt-free engine and the window. It lives in a
// QThread of its own (Qt's worker-object pattern), runs a Trainer there, and turns the engine's
// observer callbacks into queued signals that carry plain values, so the GUI thread never
// blocks and never touches engine state. Pause/resume/step/stop go straight to the engine's
// thread-safe RunControl.
#pragma once
#include <QObject>
#include <QString>
#include <mutex>
#include <vector>

#include "engine/metrics_file.hpp"
#include "engine/observer.hpp"
#include "engine/trainer.hpp"
#include "io/run_config.hpp"

namespace tb {
class RunFolder;
}

class EngineWorker : public QObject, public tb::TrainingObserver {
    Q_OBJECT
public:
    explicit EngineWorker(QObject* parent = nullptr);
    static void registerTypes();

    // The GUI thread announces a run it has queued: controls that arrive before run() has made
    // its trainer are kept for it (and only then: a stray stop must not hit the next run).
    void expectRun();
    // Thread-safe controls, callable from the GUI thread while run() is busy.
    void pause();
    void resume();
    void stepOnce();     // before the run has started: it starts paused and takes one step
    void setPace(double stepsPerSecond);  // slow motion; 0: full speed (kept for later runs)
    void stop();
    void abort();   // stop without the final evaluation (the window is closing)
    // The steps reported since the last call (GUI thread, after stepsReady).
    std::vector<tb::StepMetrics> takeSteps();
    // A resumed run's steps and evaluations up to its checkpoint, read as its folder cut them
    // (GUI thread, after started(); empty for a new run).
    std::vector<tb::MetricsLine> takeResumedPast();

public slots:
    // Runs to the end on the worker's thread, in a new run folder, or continuing the run in
    // `resumeDir` from its newest checkpoint.
    void run(const tb::RunConfig& config, const QString& resumeDir = {});

signals:
    void started(const QString& plan);       // data loaded, training begins
    void evaluating(const QString& splits);  // training ended, the final evaluation runs
    // New steps wait in takeSteps(). At most one of these is queued at a time, so an engine
    // faster than the window's drawing never floods the GUI event queue: the window takes
    // whatever piled up in one go.
    void stepsReady();
    void evaluated(const tb::EvalResult& r);
    void decisionGrid(const tb::DecisionGrid& g);  // 2-D sets: the model's regions, ~kGridFrames a run
    void finished(const QString& summaryJson, bool stopped);
    void failed(const QString& message);     // one sentence from the engine (bad input, ...)

private:
    void onStateChanged(tb::RunState, const std::string& detail) override;
    void onStepEnd(const tb::StepMetrics& m) override;
    void onEval(const tb::EvalResult& r) override { emit evaluated(r); }
    // Frames enough to watch a boundary form, and ten a second of training however long the
    // run; 64 x 64 cells are a 4,096-row forward pass each (about a millisecond for tiny_mlp).
    static constexpr int kGridFrames = 120;
    tb::DecisionGridRequest decisionGridRequest() const override { return {kGridFrames, 64, 0.1}; }
    void onDecisionGrid(const tb::DecisionGrid& g) override { emit decisionGrid(g); }

    std::mutex mutex_;                 // guards trainer_ against controls racing its start/end
    tb::Trainer* trainer_ = nullptr;   // the run in progress, owned by run()'s stack
    // Controls that arrived after expectRun() and before the trainer existed (guarded by mutex_).
    bool expecting_ = false;
    bool pendingPause_ = false;
    int pendingSteps_ = 0;             // single steps granted before the trainer existed
    double pace_ = 0;                  // steps per second for every run, 0: full speed
    enum class Pending { None, Stop, Abort } pendingStop_ = Pending::None;
    std::mutex stepsMutex_;
    std::vector<tb::StepMetrics> steps_;  // reported, not yet taken by the window
    std::vector<tb::MetricsLine> past_;   // takeResumedPast()'s
    // The run's folder while run() runs: set there before the trainer starts its observer hub's
    // thread, which reads it in onStateChanged; the hub is joined before run() clears it.
    tb::RunFolder* folder_ = nullptr;
    bool signalled_ = false;              // a stepsReady is queued and not yet answered
};
