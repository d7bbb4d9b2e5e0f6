#include "lessons/lesson_runner.hpp"

#include <QThread>
#include <utility>

#include "window/engine_worker.hpp"
#include "window/frame_gate.hpp"

LessonRunner::LessonRunner(QObject* parent) : QObject(parent) {
    EngineWorker::registerTypes();
    thread_ = new QThread(this);
    worker_ = new EngineWorker;
    worker_->moveToThread(thread_);
    connect(thread_, &QThread::finished, worker_, &QObject::deleteLater);
    frames_ = new FrameGate([this] { emit stepsReady(); }, this);
    connect(worker_, &EngineWorker::stepsReady, frames_, &FrameGate::request);
    connect(worker_, &EngineWorker::evaluated, this, [this](const tb::EvalResult& r) {
        frames_->flush();  // the steps before it
        emit evaluated(r);
    });
    connect(worker_, &EngineWorker::finished, this,
            [this](const QString& summary, bool stopped) { finish(summary, stopped, {}); });
    connect(worker_, &EngineWorker::failed, this, [this](const QString& message) { finish({}, false, message); });
    thread_->start();
}

LessonRunner::~LessonRunner() {
    worker_->abort();
    thread_->quit();
    thread_->wait();
}

void LessonRunner::start(std::vector<tb::RunConfig> runs) {
    if (running() || runs.empty()) return;
    runs_ = std::move(runs);
    stopping_ = false;
    runNext(0);
}

void LessonRunner::runNext(int run) {
    current_ = run;
    emit runStarting(run);
    worker_->expectRun();
    EngineWorker* worker = worker_;
    const tb::RunConfig c = runs_[size_t(run)];
    QMetaObject::invokeMethod(worker, [worker, c] { worker->run(c); }, Qt::QueuedConnection);  // on its thread
}

void LessonRunner::stop() {
    stopping_ = true;
    if (running()) worker_->stop();
}

void LessonRunner::abort() {
    stopping_ = true;
    if (running()) worker_->abort();
}

std::vector<tb::StepMetrics> LessonRunner::takeSteps() { return worker_->takeSteps(); }

void LessonRunner::finish(const QString& summaryJson, bool stopped, const QString& error) {
    if (current_ < 0) return;
    frames_->flush();  // its last steps
    const int run = current_;
    emit runFinished(run, summaryJson, stopped, error);
    if (!stopping_ && !stopped && error.isEmpty() && run + 1 < int(runs_.size())) {
        runNext(run + 1);
        return;
    }
    current_ = -1;
    emit allFinished();
}
