// EngineWorker: the one adapter between the Qt-free engine and the window. It lives in a
// QThread of its own (Qt's worker-object pattern), runs a Trainer there, and turns the engine's
// observer callbacks into queued signals that carry plain values, so the GUI thread never
// blocks and never touches engine state. Pause/resume/step/stop go straight to the engine's
// thread-safe RunControl.
#pragma once
#include <QObject>
#include <QString>
#include <atomic>
#include <mutex>

#include "engine/observer.hpp"
#include "engine/trainer.hpp"
#include "io/run_config.hpp"


class EngineWorker : public QObject, public tb::TrainingObserver {
    Q_OBJECT
public:
    explicit EngineWorker(QObject* parent = nullptr);
    static void registerTypes();

    // Thread-safe controls, callable from the GUI thread while run() is busy.
    void pause();
    void resume();
    void stepOnce();
    void stop();

public slots:
    void run(const tb::RunConfig& config);   // runs to the end on the worker's thread

signals:
    void started(const QString& plan);
    void stepEnded(const tb::StepMetrics& m);
    void evaluated(const tb::EvalResult& r);
    void finished(const QString& summaryJson, bool stopped);
    void failed(const QString& message);     // one sentence from the engine (bad input, ...)

private:
    void onStateChanged(tb::RunState, const std::string& detail) override;
    void onStepEnd(const tb::StepMetrics& m) override { emit stepEnded(m); }
    void onEval(const tb::EvalResult& r) override { emit evaluated(r); }

    std::mutex mutex_;                 // guards trainer_ against controls racing its start/end
    tb::Trainer* trainer_ = nullptr;   // the run in progress, owned by run()'s stack
    std::atomic<int> pendingPause_{0}; // controls that arrived before the trainer existed
};
