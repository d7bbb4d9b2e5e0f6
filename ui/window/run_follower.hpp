// RunFollower: a run folder that another process is still writing (a towerbench-run in a
// terminal, a headless run on a GPU server seen through a shared folder), followed live: it reads
// the lines metrics.jsonl gains, five times a second, and hands on the steps, evaluations and
// states they record. A line is read only once it is whole; a file that shrank (a resumed run
// cut it back to its checkpoint) is read again from the start, after reset().
#pragma once
#include <QFile>
#include <QObject>
#include <QString>
#include <QTimer>
#include <vector>

#include "engine/observer.hpp"

class RunFollower : public QObject {
    Q_OBJECT
public:
    static constexpr int kPollMs = 200;
    explicit RunFollower(QString folder, QObject* parent = nullptr);
    const QString& folder() const { return folder_; }
    QStringList towers() const;  // the plan's tower devices, from plan.json
    void poll();                 // reads what is new now (the timer calls it)

signals:
    void reset();                                        // start over: the file was cut back
    void steps(const std::vector<tb::StepMetrics>& s);   // in order
    void evaluated(const tb::EvalResult& r);
    void stateChanged(const QString& state, const QString& detail);  // "running", "finished", ...

private:
    QString folder_;
    QTimer timer_;
    qint64 offset_ = 0;  // bytes of metrics.jsonl already read (whole lines)
};
