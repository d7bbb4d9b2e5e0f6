// ProcessLauncher: a run of several processes started from the window, as a user would start it
// in a terminal: `mpirun -np N [--hostfile FILE | --oversubscribe] towerbench-run --FLAG VALUE ...
// --run-dir D --quiet` (a resume: `towerbench-run --resume D [--steps N] --quiet`), in a run
// folder the window claims (or the resumed run's) and then follows (RunFollower) as it
// follows any run another program writes. The settings travel as flags (no file that processes on
// other machines could not read). Stop sends mpirun SIGUSR1, which it hands to every process:
// they stop after the step in progress, evaluate and write their summary (SIGTERM would make
// mpirun kill the job a few seconds later); a second Stop sends SIGTERM (mpirun ends the job).
// Open MPI's settings (a user running as root, transports) come from the user's environment.
#pragma once
#include <QByteArray>
#include <QDateTime>
#include <QObject>
#include <QProcess>
#include <QString>
#include <QStringList>
#include <QTimer>
#include <cstdint>

#include "io/run_config.hpp"

class ProcessLauncher : public QObject {
    Q_OBJECT
public:
    explicit ProcessLauncher(QObject* parent = nullptr);
    ~ProcessLauncher() override;  // processes still running are ended (mpirun's SIGTERM), without signals
    // Starts the processes; returns an empty string, or one sentence saying why it cannot.
    QString start(const tb::RunConfig& config, int processes, const QString& hostfile);
    // Continues the run in `folder` from its newest checkpoint (towerbench-run --resume), `steps`
    // in all where it is more than 0; the same answers.
    QString resume(const QString& folder, int processes, const QString& hostfile, int64_t steps);
    void stop();                   // the first time SIGUSR1 (stop after the step), then SIGTERM
    bool running() const { return process_.state() != QProcess::NotRunning; }
    const QString& folder() const { return folder_; }
    QString commandLine() const;   // what was started, for the state's tooltip

signals:
    void folderReady(const QString& folder);  // the run's settings and plan are in its folder: follow it
    // exitCode 0: the run ended (finished or stopped); otherwise `error` is one sentence, the
    // processes' own reason where they gave one.
    void finished(int exitCode, const QString& error);

private:
    QString whyNot(const QString& hostfile) const;  // what keeps processes from starting, if anything
    QString launch(int processes, const QString& hostfile, const QStringList& runFlags);
    void poll();
    void ended(int code, QProcess::ExitStatus status);
    QProcess process_;
    QTimer poll_;               // waits for the folder's plan.json
    QString folder_;
    QDateTime planBefore_;      // a resumed folder's plan.json before the processes began again
    QByteArray errors_;         // their standard error, for the reason of a failure
    int stops_ = 0;             // Stops asked for this run
};
