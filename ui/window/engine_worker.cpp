#include "window/engine_worker.hpp"

#include <memory>
#include <utility>
#include <nlohmann/json.hpp>

#include "engine/run_folder.hpp"
#include "util/error.hpp"

EngineWorker::EngineWorker(QObject* parent) : QObject(parent) {}

void EngineWorker::registerTypes() {
    qRegisterMetaType<tb::StepMetrics>();
    qRegisterMetaType<tb::EvalResult>();
    qRegisterMetaType<tb::DecisionGrid>();
    qRegisterMetaType<tb::RunConfig>();
}

void EngineWorker::expectRun() {
    std::lock_guard lock(mutex_);
    expecting_ = true;
    pendingPause_ = false;
    pendingSteps_ = 0;
    pendingStop_ = Pending::None;
}

void EngineWorker::pause() {
    std::lock_guard lock(mutex_);
    if (trainer_) trainer_->control().pause();
    else if (expecting_) pendingPause_ = true;
}

void EngineWorker::resume() {
    std::lock_guard lock(mutex_);
    pendingPause_ = false;
    pendingSteps_ = 0;
    if (trainer_) trainer_->control().resume();
}

void EngineWorker::stepOnce() {
    std::lock_guard lock(mutex_);
    if (trainer_) trainer_->control().stepOnce();
    else if (expecting_) ++pendingSteps_;
}

void EngineWorker::setPace(double stepsPerSecond) {
    std::lock_guard lock(mutex_);
    pace_ = stepsPerSecond;
    if (trainer_) trainer_->control().setPace(stepsPerSecond);
}

void EngineWorker::stop() {
    std::lock_guard lock(mutex_);
    if (trainer_) trainer_->control().stop();
    else if (expecting_ && pendingStop_ == Pending::None) pendingStop_ = Pending::Stop;
}

void EngineWorker::abort() {
    std::lock_guard lock(mutex_);
    if (trainer_) trainer_->control().abort();
    else if (expecting_) pendingStop_ = Pending::Abort;
}

void EngineWorker::onStepEnd(const tb::StepMetrics& m) {
    {
        std::lock_guard lock(stepsMutex_);
        steps_.push_back(m);
        if (signalled_) return;
        signalled_ = true;
    }
    emit stepsReady();
}

std::vector<tb::StepMetrics> EngineWorker::takeSteps() {
    std::lock_guard lock(stepsMutex_);
    signalled_ = false;
    return std::exchange(steps_, {});
}

std::vector<tb::MetricsLine> EngineWorker::takeResumedPast() {
    std::lock_guard lock(stepsMutex_);
    return std::exchange(past_, {});
}

void EngineWorker::onStateChanged(tb::RunState s, const std::string& detail) {
    if (s == tb::RunState::Running) {
        {
            std::lock_guard lock(stepsMutex_);
            if (folder_) past_ = folder_->takeResumedPast();  // (the folder began before the run runs)
        }
        emit started(QString::fromStdString(detail));
    }
    if (s == tb::RunState::Evaluating) emit evaluating(QString::fromStdString(detail));
}

void EngineWorker::run(const tb::RunConfig& config, const QString& resumeDir) {
    std::unique_ptr<tb::RunFolder> folder;  // outlives the trainer that writes to it
    tb::Trainer trainer(config);
    trainer.addObserver(this);
    {
        std::lock_guard lock(mutex_);
        trainer_ = &trainer;
        expecting_ = false;
        trainer.control().setPace(pace_);
        if (pendingPause_) trainer.control().pause();
        for (; pendingSteps_ > 0; --pendingSteps_) trainer.control().stepOnce();
        if (pendingStop_ == Pending::Stop) trainer.control().stop();
        if (pendingStop_ == Pending::Abort) trainer.control().abort();
        pendingPause_ = false;
        pendingStop_ = Pending::None;
    }
    try {
        // Every run from the window keeps a folder, as from the command line.
        folder = resumeDir.isEmpty() ? tb::RunFolder::create(config) : tb::RunFolder::reopen(resumeDir.toStdString());
        folder->keepResumedPast();  // read on this thread as the resume cuts its metrics file
        folder_ = folder.get();
        trainer.setRunFolder(folder.get());
        const tb::RunSummary s = trainer.run();
        {
            std::lock_guard lock(mutex_);
            trainer_ = nullptr;
            folder_ = nullptr;
        }
        nlohmann::json summary = s.toJson();
        summary["run_dir"] = folder->path();  // as the command line's summary: where its checkpoints are
        emit finished(QString::fromStdString(summary.dump()), s.stopped);
    } catch (const std::exception& e) {  // tb::Error: bad input; anything else: still one message
        {
            std::lock_guard lock(mutex_);
            trainer_ = nullptr;
            folder_ = nullptr;
        }
        emit failed(QString::fromUtf8(e.what()));
    }
}
