#include "process_launcher.hpp"

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QStandardPaths>

#include "engine/run_folder.hpp"
#include "util/error.hpp"

namespace {
// towerbench-run beside the window's own program (installed or built together), else on PATH.
QString runProgram() {
    const QString beside = QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("towerbench-run"));
    if (QFileInfo(beside).isExecutable()) return beside;
    return QStandardPaths::findExecutable(QStringLiteral("towerbench-run"));
}
}  // namespace

ProcessLauncher::ProcessLauncher(QObject* parent) : QObject(parent) {
    poll_.setInterval(200);
    connect(&poll_, &QTimer::timeout, this, &ProcessLauncher::poll);
    process_.setProcessChannelMode(QProcess::SeparateChannels);
    connect(&process_, &QProcess::readyReadStandardError, this, [this] { errors_ += process_.readAllStandardError(); });
    connect(&process_, &QProcess::readyReadStandardOutput, this, [this] { process_.readAllStandardOutput(); });
    connect(&process_, &QProcess::finished, this, [this](int code, QProcess::ExitStatus status) {
        poll();  // a run that ended at once may have its folder now
        poll_.stop();
        errors_ += process_.readAllStandardError();
        QString reason;
        bool stoppedWell = false;  // stopped by the user: mpirun passes SIGTERM on, the run ends well
        for (const QByteArray& line : errors_.split('\n')) {
            if (!line.startsWith("towerbench-run")) continue;  // the processes' own one-line reasons
            stoppedWell = stoppedWell || (terminated_ && line.contains(": stopped by "));
            if (reason.isEmpty() && !line.contains("stopping after the step")) reason = QString::fromUtf8(line);
        }
        // Stopped before any process could say more than that it was stopping (in MPI's start-up,
        // say): mpirun ends the job, nothing failed.
        stoppedWell = stoppedWell || (terminated_ && reason.isEmpty());
        const int exit = stoppedWell ? 0 : status == QProcess::CrashExit ? 128 : code;
        if (exit != 0 && reason.isEmpty())
            reason = tr("mpirun ended with exit status %1: %2")
                         .arg(exit)
                         .arg(QString::fromUtf8(errors_.trimmed().right(300)).simplified());
        emit finished(exit, exit ? reason : QString());
    });
}

ProcessLauncher::~ProcessLauncher() {
    if (running()) {
        process_.terminate();
        if (!process_.waitForFinished(10000)) process_.kill();
        process_.waitForFinished(2000);
    }
}

QString ProcessLauncher::start(const tb::RunConfig& config, int processes, const QString& hostfile) {
    if (running()) return tr("A run of several processes is still going; stop it first.");
    const QString mpirun = QStandardPaths::findExecutable(QStringLiteral("mpirun"));
    if (mpirun.isEmpty())
        return tr("mpirun not found: install Open MPI (the openmpi-bin package) to train as several processes, "
                  "or set Processes to 1.");
    const QString program = runProgram();
    if (program.isEmpty())
        return tr("towerbench-run not found beside this program or on PATH: it trains each of the processes.");
    if (!hostfile.isEmpty() && !QFileInfo(hostfile).isFile())
        return tr("Hostfile %1 does not exist (leave it empty to run every process on this machine).").arg(hostfile);
    if (!configDir_.isValid()) return tr("Cannot make a temporary folder for the run's settings.");
    const QString configFile = configDir_.filePath(QStringLiteral("run.json"));
    QFile f(configFile);
    tb::RunConfig written = config;
    written.metrics.clear();  // the folder keeps the metrics; a second file is the command line's choice
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate) ||
        f.write(QByteArray::fromStdString(written.toJson().dump(2))) < 0 || !f.flush())
        return tr("Cannot write the run's settings to %1.").arg(configFile);
    f.close();
    try {
        folder_ = QString::fromStdString(tb::RunFolder::claimNewFolder(config));
    } catch (const tb::Error& e) {
        return QString::fromUtf8(e.what());
    }
    QStringList args{QStringLiteral("-np"), QString::number(processes)};
    if (!hostfile.isEmpty()) args << QStringLiteral("--hostfile") << hostfile;
    args << program << QStringLiteral("--config") << configFile << QStringLiteral("--run-dir") << folder_
         << QStringLiteral("--quiet");
    errors_.clear();
    terminated_ = false;
    process_.start(mpirun, args);
    if (!process_.waitForStarted(10000)) return tr("mpirun did not start: %1").arg(process_.errorString());
    poll_.start();
    return {};
}

QString ProcessLauncher::commandLine() const {
    return QStringList{process_.program(), process_.arguments().join(' ')}.join(' ');
}

void ProcessLauncher::poll() {
    if (folder_.isEmpty() || !poll_.isActive()) return;
    if (!QFileInfo::exists(QDir(folder_).filePath(QStringLiteral("config.json")))) return;
    poll_.stop();
    emit folderReady(folder_);
}

void ProcessLauncher::stop() {
    if (!running()) return;
    if (terminated_) {
        process_.kill();
        return;
    }
    terminated_ = true;
    process_.terminate();
}
