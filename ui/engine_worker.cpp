#include "engine_worker.hpp"

#include <utility>

#include "util/error.hpp"

EngineWorker::EngineWorker(QObject* parent) : QObject(parent) {}

void EngineWorker::registerTypes() {
    qRegisterMetaType<tb::StepMetrics>();
    qRegisterMetaType<tb::EvalResult>();
    qRegisterMetaType<tb::RunConfig>();
}

void EngineWorker::pause() {
    std::lock_guard lock(mutex_);
    if (trainer_) trainer_->control().pause();
    else pendingPause_ = 1;
}

void EngineWorker::resume() {
    std::lock_guard lock(mutex_);
    pendingPause_ = 0;
    if (trainer_) trainer_->control().resume();
}

void EngineWorker::stepOnce() {
    std::lock_guard lock(mutex_);
    if (trainer_) trainer_->control().stepOnce();
}

void EngineWorker::stop() {
    std::lock_guard lock(mutex_);
    if (trainer_) trainer_->control().stop();
}

void EngineWorker::abort() {
    std::lock_guard lock(mutex_);
    if (trainer_) trainer_->control().abort();
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

void EngineWorker::onStateChanged(tb::RunState s, const std::string& detail) {
    if (s == tb::RunState::Running) emit started(QString::fromStdString(detail));
}

void EngineWorker::run(const tb::RunConfig& config) {
    tb::Trainer trainer(config);
    trainer.addObserver(this);
    {
        std::lock_guard lock(mutex_);
        trainer_ = &trainer;
        if (pendingPause_.exchange(0)) trainer.control().pause();
    }
    try {
        const tb::RunSummary s = trainer.run();
        {
            std::lock_guard lock(mutex_);
            trainer_ = nullptr;
        }
        emit finished(QString::fromStdString(s.toJson().dump()), s.stopped);
    } catch (const std::exception& e) {  // tb::Error: bad input; anything else: still one message
        {
            std::lock_guard lock(mutex_);
            trainer_ = nullptr;
        }
        emit failed(QString::fromUtf8(e.what()));
    }
}
