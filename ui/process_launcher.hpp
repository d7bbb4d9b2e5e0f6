// ProcessLauncher: a run of several processes started from the window, as a user would start it
// in a terminal: `mpirun -np N [--hostfile FILE] towerbench-run --config C --run-dir D --quiet`,
// in a run folder the window claims and then follows (RunFollower) as it follows any run another
// program writes. Stop passes SIGTERM to mpirun, which hands it to every process: they stop
// after the step in progress, evaluate and write their summary, as a terminal's Ctrl+C does.
// Open MPI's settings (a user running as root, transports) come from the user's environment.
#pragma once
#include <QByteArray>
#include <QObject>
#include <QProcess>
#include <QString>
#include <QTemporaryDir>
#include <QTimer>

#include "io/run_config.hpp"

class ProcessLauncher : public QObject {
    Q_OBJECT
public:
    explicit ProcessLauncher(QObject* parent = nullptr);
    ~ProcessLauncher() override;
    // Starts the processes; returns an empty string, or one sentence saying why it cannot.
    QString start(const tb::RunConfig& config, int processes, const QString& hostfile);
    void stop();                   // the first time SIGTERM (stop after the step), then SIGKILL
    bool running() const { return process_.state() != QProcess::NotRunning; }
    const QString& folder() const { return folder_; }
    QString commandLine() const;   // what was started, for the state's tooltip

signals:
    void folderReady(const QString& folder);  // the run's settings are in its folder: follow it
    // exitCode 0: the run ended (finished or stopped); otherwise `error` is the processes' own
    // one-line reason where they gave one.
    void finished(int exitCode, const QString& error);

private:
    void poll();
    QProcess process_;
    QTimer poll_;               // waits for the folder's config.json
    QTemporaryDir configDir_;   // the run config file the processes read
    QString folder_;
    QByteArray errors_;         // their standard error, for the reason of a failure
    bool terminated_ = false;
};
