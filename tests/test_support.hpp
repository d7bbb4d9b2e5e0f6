// Helpers shared by the Qt Test suites: a scratch directory and a runner for towerbench-run.
#pragma once
#include <QProcess>
#include <QString>
#include <QStringList>
#include <QTemporaryDir>
#include <QtTest>

namespace tbtest {

struct RunResult {
    int exitCode = -1;
    QString out, err;
};

// Runs the headless program with args and waits up to timeoutMs; a hang fails the test.
inline RunResult runTowerbench(const QStringList& args, int timeoutMs = 120000) {
    QProcess p;
    p.start(QStringLiteral(TB_RUN_BINARY), args);
    RunResult r;
    if (!p.waitForFinished(timeoutMs)) {
        p.kill();
        p.waitForFinished();
        r.err = QStringLiteral("timed out");
        return r;
    }
    r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;  // -2: crashed
    r.out = QString::fromUtf8(p.readAllStandardOutput());
    r.err = QString::fromUtf8(p.readAllStandardError());
    return r;
}

inline QString sourcePath(const QString& rel) { return QStringLiteral(TB_SOURCE_DIR "/") + rel; }

}  // namespace tbtest
