#include "window/process_launcher.hpp"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QRegularExpression>
#include <QStandardPaths>
#include <pthread.h>

#include <csignal>
#include <nlohmann/json.hpp>

#include "engine/run_folder.hpp"
#include "util/error.hpp"

namespace {
// towerbench-run beside the window's own program (installed or built together), else on PATH.
QString runProgram() {
    const QString beside = QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("towerbench-run"));
    if (QFileInfo(beside).isExecutable()) return beside;
    return QStandardPaths::findExecutable(QStringLiteral("towerbench-run"));
}

// The settings that differ from the defaults, as towerbench-run's flags.
QStringList settingsAsFlags(const tb::RunConfig& c) {
    const nlohmann::json defaults = tb::RunConfig().toJson(), settings = c.toJson();  // items() refers to them
    QStringList flags;
    for (const auto& [key, value] : settings.items()) {
        if (defaults.contains(key) && defaults[key] == value) continue;
        flags << QString::fromStdString(tb::RunConfig::keyToFlag(key)) << QString::fromStdString(value.is_string() ? value.get<std::string>() : value.dump());
    }
    return flags;
}

// The processes' standard error, kept for the reason of an end: its start (the first reasons) and
// its newest part (the stop), at most 128 KiB of each, however long a run writes.
void keepErrors(QByteArray& kept, const QByteArray& more) {
    constexpr qsizetype kPart = 128 * 1024;
    kept += more;
    if (kept.size() > 2 * kPart) kept = kept.left(kPart) + '\n' + kept.right(kPart);
}
}  // namespace

ProcessLauncher::ProcessLauncher(QObject* parent) : QObject(parent) {
    poll_.setInterval(200);
    connect(&poll_, &QTimer::timeout, this, &ProcessLauncher::poll);
    process_.setProcessChannelMode(QProcess::SeparateChannels);
    connect(&process_, &QProcess::readyReadStandardError, this, [this] { keepErrors(errors_, process_.readAllStandardError()); });
    connect(&process_, &QProcess::readyReadStandardOutput, this, [this] { process_.readAllStandardOutput(); });
    connect(&process_, &QProcess::finished, this, &ProcessLauncher::ended);
    // A child starts with its parent thread's signal mask, and the window's thread blocks the stop
    // signals (StopSignals) and, once it has classified an image, every asynchronous one
    // (util/compute_thread.hpp): mpirun would ignore the SIGUSR1 of Stop and the SIGTERM after it.
    process_.setChildProcessModifier([] {
        sigset_t none;
        sigemptyset(&none);
        pthread_sigmask(SIG_SETMASK, &none, nullptr);  // async-signal-safe, between fork and exec
    });
}

ProcessLauncher::~ProcessLauncher() {
    disconnect(&process_, nullptr, this, nullptr);  // nobody hears of an end the window no longer shows
    if (!running()) return;
    process_.terminate();
    if (!process_.waitForFinished(10000)) process_.kill();
    process_.waitForFinished(2000);
}

QString ProcessLauncher::start(const tb::RunConfig& config, int processes, const QString& hostfile) {
    if (const QString why = whyNot(hostfile); !why.isEmpty()) return why;
    try {
        folder_ = QString::fromStdString(tb::RunFolder::claimNewFolder(config));
    } catch (const tb::Error& e) {
        return QString::fromUtf8(e.what());
    }
    planBefore_ = {};
    tb::RunConfig run = config;
    run.metrics.clear();  // the folder keeps the metrics; a second file is the command line's choice
    run.quiet = false;    // a switch, added below (a followed run's config has quiet true)
    const QString why = launch(processes, hostfile, settingsAsFlags(run) << QStringLiteral("--run-dir") << folder_);
    if (!why.isEmpty()) QDir().rmdir(folder_);
    return why;
}

QString ProcessLauncher::resume(const QString& folder, int processes, const QString& hostfile, int64_t steps) {
    if (const QString why = whyNot(hostfile); !why.isEmpty()) return why;
    folder_ = folder;
    // The folder has its plan already: it is the resumed run's once the processes write it anew,
    // after cutting metrics.jsonl back to the checkpoint (RunFolder::begin).
    planBefore_ = QFileInfo(QDir(folder).filePath(QStringLiteral("plan.json"))).lastModified();
    QStringList flags{QStringLiteral("--resume"), folder};
    if (steps > 0) flags << QStringLiteral("--steps") << QString::number(steps);
    return launch(processes, hostfile, flags);
}

QString ProcessLauncher::whyNot(const QString& hostfile) const {
    if (running()) return tr("A run of several processes is still going; stop it first.");
    if (QStandardPaths::findExecutable(QStringLiteral("mpirun")).isEmpty())
        return tr("mpirun not found: install Open MPI (the openmpi-bin package) to train as several processes, "
                  "or set Processes to 1.");
    if (runProgram().isEmpty())
        return tr("towerbench-run not found beside this program or on PATH: it trains each of the processes.");
    if (!hostfile.isEmpty() && !QFileInfo(hostfile).isFile())
        return tr("Hostfile %1 does not exist (leave it empty to run every process on this machine).").arg(hostfile);
    return {};
}

QString ProcessLauncher::launch(int processes, const QString& hostfile, const QStringList& runFlags) {
    QStringList args{QStringLiteral("-np"), QString::number(processes)};
    // One machine: as many processes as asked, even beyond its cores (they then share them).
    if (hostfile.isEmpty()) args << QStringLiteral("--oversubscribe");
    else args << QStringLiteral("--hostfile") << hostfile;
    args << runProgram() << runFlags << QStringLiteral("--quiet");
    errors_.clear();
    stops_ = 0;
    process_.start(QStandardPaths::findExecutable(QStringLiteral("mpirun")), args);
    if (!process_.waitForStarted(10000)) return tr("mpirun did not start: %1").arg(process_.errorString());
    poll_.start();
    return {};
}

QString ProcessLauncher::commandLine() const {
    return QStringList{process_.program(), process_.arguments().join(' ')}.join(' ');
}

// plan.json is written after config.json: a follower reads both at once.
void ProcessLauncher::poll() {
    if (folder_.isEmpty() || !poll_.isActive()) return;
    const QFileInfo plan(QDir(folder_).filePath(QStringLiteral("plan.json")));
    if (!plan.exists() || (planBefore_.isValid() && plan.lastModified() == planBefore_)) return;
    poll_.stop();
    emit folderReady(folder_);
}

void ProcessLauncher::ended(int code, QProcess::ExitStatus status) {
    poll();  // a run that ended at once may have its folder now
    poll_.stop();
    keepErrors(errors_, process_.readAllStandardError());
    // The processes' own one-line reasons start with the program's name; a stop is not one. A
    // process that died (killed, out of memory) gave none: mpirun names it, its rank and machine
    // ("mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed)."),
    // and that is the reason, before what the others said as they were ended.
    QString reason, mpiLine, lost;
    bool stoppedWell = false;
    for (const QByteArray& raw : errors_.split('\n')) {
        const QString line = QString::fromUtf8(raw).trimmed();
        if (lost.isEmpty() && line.startsWith(QLatin1String("mpirun noticed that process rank"))) {
            lost = line;
            lost.replace(QRegularExpression(QStringLiteral(" with PID \\d+")), QString());
        } else if (line.startsWith(QLatin1String("towerbench-run"))) {
            stoppedWell = stoppedWell || (stops_ > 0 && line.contains(QLatin1String(": stopped by ")));
            if (reason.isEmpty() && !line.contains(QLatin1String("stopping after the step"))) reason = line;
        } else if (mpiLine.isEmpty() && !line.isEmpty() && !line.startsWith(QLatin1Char('-'))) {
            mpiLine = line;  // mpirun's own first words ("There are not enough slots available ...")
        }
    }
    // Stopped before any process could say more than that it was stopping (in MPI's start-up,
    // say): nothing failed.
    stoppedWell = stoppedWell || (stops_ > 0 && reason.isEmpty());
    if (!lost.isEmpty() && stops_ == 0) {
        reason = lost.mid(int(qstrlen("mpirun noticed that "))) + tr(" The other processes were ended; the run folder keeps its last checkpoint.");
        reason[0] = reason[0].toUpper();
        stoppedWell = false;
    }
    int exit = code;
    if (stoppedWell) exit = 0;
    else if (status == QProcess::CrashExit) exit = 128;
    if (exit != 0 && reason.isEmpty())
        reason = status == QProcess::CrashExit ? tr("mpirun was killed") : tr("mpirun ended with exit status %1%2").arg(exit).arg(
                                                                              mpiLine.isEmpty() ? QString() : QStringLiteral(": ") + mpiLine);
    // A run refused or stopped before it began leaves no folder (rmdir removes only an empty one).
    QDir().rmdir(folder_);
    emit finished(exit, exit ? reason : QString());
}

void ProcessLauncher::stop() {
    if (!running()) return;
    if (stops_++ == 0) ::kill(pid_t(process_.processId()), SIGUSR1);
    else process_.terminate();
}
