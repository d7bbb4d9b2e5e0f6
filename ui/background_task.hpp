#pragma once
// One job at a time off the window's thread (reading a data set, the runs index, a checkpoint),
// its result taken on the window's thread. The panels that read in the background each kept a raw
// QThread* deleted from its own finished() slot; a panel closed while its job ran waited for the
// thread but never deleted it, since that slot is queued to a receiver that is gone (LeakSanitizer
// found the QThread of a runs panel closed mid-read). Owning the thread here ends that in one place.
#include <functional>
#include <utility>

#include <QObject>
#include <QThread>

class BackgroundTask {
public:
    // `owner` is the panel: the completion runs on its thread, and never once it is destroyed.
    explicit BackgroundTask(QObject* owner) : owner_(owner) {}
    BackgroundTask(const BackgroundTask&) = delete;
    BackgroundTask& operator=(const BackgroundTask&) = delete;

    // Waits for a job still running (whatever it reads must outlive it: a cancel flag is the
    // owner's, set before this runs) and deletes its thread.
    ~BackgroundTask() {
        if (thread_) {
            thread_->wait();
            delete thread_;
        }
    }

    bool running() const { return thread_ != nullptr; }

    // Runs `work` on a new thread, then `done` on the owner's thread. Not while running().
    void start(std::function<void()> work, std::function<void()> done) {
        thread_ = QThread::create(std::move(work));
        QObject::connect(thread_, &QThread::finished, owner_, [this, done = std::move(done)] {
            thread_->deleteLater();
            thread_ = nullptr;
            done();
        });
        thread_->start();
    }

private:
    QObject* owner_;
    QThread* thread_ = nullptr;
};
