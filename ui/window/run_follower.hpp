// RunFollower: a run folder that another process is still writing (a towerbench-run in a
// terminal, a headless run on a GPU server seen through a shared folder), followed live: it reads
// the lines metrics.jsonl gains, five times a second, and hands on the steps, evaluations,
// states and profiled layer times they record. A line is read only once it is whole; a file that shrank (a resumed run
// cut it back to its checkpoint) is read again from the start, after reset(). A test evaluation
// of an image set is handed on twice: from its line (the confusion matrix), then with the run's
// predictions.json over the test set's images, which a thread of its own reads from the run's data
// once (the grid, and the classes' names).
#pragma once
#include <QElapsedTimer>
#include <QFile>
#include <QObject>
#include <QString>
#include <QTimer>
#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "background_task.hpp"
#include "data/dataset.hpp"
#include "engine/observer.hpp"

class RunFollower : public QObject {
    Q_OBJECT
public:
    static constexpr int kPollMs = 200;
    explicit RunFollower(QString folder, QObject* parent = nullptr);
    ~RunFollower() override;
    const QString& folder() const { return folder_; }
    QStringList towers() const;  // the plan's tower devices, from plan.json
    void poll();                 // reads what is new now (the timer calls it)
    // The run's final state line was read: metrics.jsonl is read no more, and its summary.json is
    // handed on (summaryRead) once run.json says the run ended, which the writer says after that
    // line (a resumed run's folder holds the earlier segment's until then); none for a failed run
    // or where it takes over kSummaryWaitMs. Predictions being read still arrive.
    void awaitSummary();
    static constexpr int kSummaryWaitMs = 60000;  // the run's last checkpoint is written first

signals:
    void reset();                                        // start over: the file was cut back
    void steps(const std::vector<tb::StepMetrics>& s);   // in order
    void evaluated(const tb::EvalResult& r);             // as its line has it
    void predictionsRead(const tb::EvalResult& r);       // a test evaluation again, with predictions
    void stateChanged(const QString& state, const QString& detail);  // "running", "finished", ...
    void layerTimes(const tb::LayerTimes& times, int64_t step);      // tower 0's profiled step, per layer
    void problem(const QString& message);  // the predictions could not be read: why, in one sentence
    void summaryRead(const QString& json, bool stopped);  // the ended run's summary.json

private:
    void attachPredictions();  // to the latest test evaluation, once the test set is read
    void readSummary();        // summary.json, if run.json says the run ended

    QString folder_;
    QTimer timer_;
    qint64 offset_ = 0;  // bytes of metrics.jsonl already read (whole lines)
    QElapsedTimer summaryWait_;  // since the final state line
    std::optional<tb::EvalResult> latestTest_;   // the latest test evaluation still without predictions
    std::shared_ptr<const tb::Dataset> testSet_; // the run's test set, once read
    std::atomic<bool> stopReading_{false};       // before reading_: it waits for a reader that asks
    BackgroundTask reading_{this};               // reading it
};
