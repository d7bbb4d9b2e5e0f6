#include "window/run_follower.hpp"

#include "engine/run_setup.hpp"
#include "nn/model_spec.hpp"

#include <algorithm>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include "engine/metrics_file.hpp"
#include "engine/run_folder.hpp"
#include "engine/run_setup.hpp"
#include "nn/model_spec.hpp"
#include "util/error.hpp"
#include "view_format.hpp"

RunFollower::RunFollower(QString folder, QObject* parent) : QObject(parent), folder_(std::move(folder)) {
    timer_.setInterval(kPollMs);
    connect(&timer_, &QTimer::timeout, this, &RunFollower::poll);
    timer_.start();
}

RunFollower::~RunFollower() {
    stopReading_ = true;  // a read in flight asks between chunks; reading_ then waits for it
}

QStringList RunFollower::towers() const {
    QFile f(folder_ + "/plan.json");
    QStringList out;
    if (!f.open(QIODevice::ReadOnly)) return out;
    const QJsonObject plan = QJsonDocument::fromJson(f.readAll()).object();
    // A pipeline's lanes are its stages, which plan.json names explicitly (DEV=FROM..TO,...).
    // Replicas of the pipeline (hybrid) follow replica by replica, replica r's stage s on the
    // CPU device numbered s + S r.
    if (const QString stages = plan.value("stages").toString(); !stages.isEmpty()) {
        const QStringList items = stages.split(',');
        const int replicas = std::max(1, plan.value("stage_replicas").toInt(1));
        const bool ownProcesses = plan.value("stage_per_process").toBool();  // stage s of replica r in process r S + s
        for (int r = 0; r < replicas; ++r)
            for (int i = 0; i < items.size(); ++i) {
                const QString device = items[i].section('=', 0, 0).section('*', 0, 0);
                const int index = device.section(':', 1).toInt() + int(items.size()) * r;
                const QString where = ownProcesses ? QObject::tr("process %1").arg(int(items.size()) * r + i)
                                      : r == 0     ? device
                                                   : device.section(':', 0, 0) + ':' + QString::number(index);
                out << tb::ui::stageLane(i, where, replicas > 1 ? r : -1);
            }
        return out;
    }
    const QJsonArray towers = plan.value("towers").toArray();
    // A run of several processes: each worker's towers, worker by worker, as its step lines list
    // them (asynchronous parameter-server workers report the chief's alone).
    const int servers = std::max(0, plan.value("ps_tasks").toInt()), processes = plan.value("processes").toInt(1);
    const int workers = plan.value("update").toString() == QLatin1String("async") ? 1 : processes - servers;
    for (int p = servers; p < servers + std::max(1, workers); ++p)
        for (const QJsonValue& v : towers)
            out << (processes > 1 ? QStringLiteral("%1 (process %2)").arg(v.toString()).arg(p) : v.toString());
    return out;
}

void RunFollower::poll() {
    QFile f(folder_ + "/metrics.jsonl");
    if (!f.open(QIODevice::ReadOnly)) return;  // not yet written
    if (f.size() < offset_) {
        offset_ = 0;
        emit reset();
    }
    if (f.size() == offset_ || !f.seek(offset_)) return;
    const QByteArray fresh = f.read(f.size() - offset_);
    const qsizetype end = fresh.lastIndexOf('\n');
    if (end < 0) return;  // no whole line yet
    offset_ += end + 1;
    std::vector<tb::StepMetrics> batch;
    tb::MetricsLine m;
    for (const QByteArray& line : fresh.left(end).split('\n')) {
        if (!tb::parseMetricsLine(line.toStdString(), m)) continue;
        switch (m.kind) {
        case tb::MetricsLine::Kind::Step: batch.push_back(m.step); break;
        case tb::MetricsLine::Kind::Eval:
            if (!batch.empty()) emit steps(std::exchange(batch, {}));
            emit evaluated(m.eval);
            if (m.eval.split == "test") latestTest_ = m.eval;
            break;
        case tb::MetricsLine::Kind::State:
            if (!batch.empty()) emit steps(std::exchange(batch, {}));
            emit stateChanged(QString::fromStdString(m.state), QString::fromStdString(m.detail));
            break;
        case tb::MetricsLine::Kind::LayerTimes:
            if (!batch.empty()) emit steps(std::exchange(batch, {}));
            emit layerTimes(m.layers, m.step.step);
            break;
        }
    }
    if (!batch.empty()) emit steps(batch);
    attachPredictions();
}

void RunFollower::awaitSummary() {
    disconnect(&timer_, &QTimer::timeout, this, &RunFollower::poll);
    connect(&timer_, &QTimer::timeout, this, &RunFollower::readSummary);
    summaryWait_.start();
    readSummary();
}

void RunFollower::readSummary() {
    QFile run(folder_ + "/run.json");
    const QString state =
        run.open(QIODevice::ReadOnly) ? QJsonDocument::fromJson(run.read(1 << 20)).object().value("state").toString() : QString();
    if (state == QLatin1String("finished") || state == QLatin1String("stopped")) {
        timer_.stop();
        QFile f(folder_ + "/summary.json");
        // A summary is an object with its step count; anything else (a foreign file) shows nothing.
        const QJsonDocument summary = f.open(QIODevice::ReadOnly) ? QJsonDocument::fromJson(f.read(16 << 20)) : QJsonDocument();
        if (summary.isObject() && summary.object().value("steps").isDouble())
            emit summaryRead(QString::fromUtf8(summary.toJson(QJsonDocument::Compact)), state == QLatin1String("stopped"));
        return;
    }
    if (state == QLatin1String("failed") || summaryWait_.elapsed() > kSummaryWaitMs) timer_.stop();
}

void RunFollower::attachPredictions() {
    if (!latestTest_ || !QFile::exists(folder_ + "/predictions.json")) return;
    const std::string folder = folder_.toStdString();
    if (testSet_) {
        const tb::EvalResult r = *std::exchange(latestTest_, std::nullopt);
        try {
            tb::EvalResult withPredictions = r;
            withPredictions.predictions = tb::RunFolder::readPredictions(folder, r.step, *testSet_);
            if (withPredictions.predictions) emit predictionsRead(withPredictions);
        } catch (const tb::Error& e) {
            emit problem(QString::fromUtf8(e.what()));
        }
        return;
    }
    if (reading_.running()) return;  // attached when the set is read
    // The run's own test set, as it was trained (its config.json): Fashion-MNIST's 10,000 images
    // take a second or so, off the window's thread.
    auto read = std::make_shared<std::shared_ptr<const tb::Dataset>>();
    auto error = std::make_shared<QString>();
    reading_.start([folder, read, error, this] {
        try {
            const tb::RunConfig c = tb::RunFolder::resumeConfig(folder);
            tb::DataSplits data = tb::loadData(c.data, 0, c.seed, [this] { return stopReading_.load(); },
                                               tb::dataOptions(c, tb::findModel(c.model)));
            *read = std::make_shared<const tb::Dataset>(std::move(data.test));
        } catch (const std::exception& e) {
            *error = QString::fromUtf8(e.what());
        }
    }, [this, read, error] {
        if (!error->isEmpty()) {
            emit problem(tr("The test images could not be read for the predictions: %1").arg(*error));
            latestTest_.reset();
            return;
        }
        testSet_ = *read;
        attachPredictions();
    });
}
