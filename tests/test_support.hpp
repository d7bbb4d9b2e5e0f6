// Helpers shared by the Qt Test suites: writing test files, checking tb::Error messages, and
// running towerbench-run.
#pragma once
#include <sys/types.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QString>
#include <QStringList>
#include <QTemporaryDir>
#include <QtTest>

#include "util/error.hpp"

namespace tbtest {

struct RunResult {
    int exitCode = -1;
    QString out, err;
};

// Runs the headless program with args (in `env`) and waits up to timeoutMs; a hang fails the test.
inline RunResult runTowerbench(const QStringList& args, int timeoutMs = 120000,
                               const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment()) {
    QProcess p;
    p.setProcessEnvironment(env);
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

// The process of `rank` among those mpirun started for the run writing `folder` (Open MPI gives
// each its rank in the environment); 0 where there is none.
inline pid_t processWithRank(const QString& folder, int rank) {
    const QByteArray want = "OMPI_COMM_WORLD_RANK=" + QByteArray::number(rank);
    for (const QString& entry : QDir(QStringLiteral("/proc")).entryList(QDir::Dirs)) {
        bool number = false;
        const pid_t pid = pid_t(entry.toInt(&number));
        if (!number) continue;
        QFile cmdline("/proc/" + entry + "/cmdline"), environ("/proc/" + entry + "/environ");
        if (!cmdline.open(QIODevice::ReadOnly) || !cmdline.readAll().contains(folder.toUtf8())) continue;
        if (!environ.open(QIODevice::ReadOnly)) continue;
        if (environ.readAll().split('\0').contains(want)) return pid;
    }
    return 0;
}

inline QString sourcePath(const QString& rel) { return QStringLiteral(TB_SOURCE_DIR "/") + rel; }

// A 32-bit big-endian integer, as IDX headers store them.
inline QByteArray be32(uint32_t v) {
    const char b[4] = {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
    return QByteArray(b, 4);
}

inline void writeFile(const QString& path, const QByteArray& bytes) {
    QFile f(path);
    QVERIFY2(f.open(QIODevice::WriteOnly | QIODevice::Truncate), qPrintable(path));
    QCOMPARE(f.write(bytes), bytes.size());
}

// The whole of a file; empty where it cannot be read.
inline QByteArray readFile(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

inline void writeGz(const QString& path, const QByteArray& bytes) {
    gzFile gz = gzopen(path.toLocal8Bit().constData(), "wb");
    QVERIFY2(gz != nullptr, qPrintable(path));
    QCOMPARE(gzwrite(gz, bytes.constData(), unsigned(bytes.size())), int(bytes.size()));
    QCOMPARE(gzclose(gz), Z_OK);
}

// The tb::Error message of f(), or a marker saying what happened instead.
template <typename F>
QString errorOf(F&& f) {
    try {
        f();
    } catch (const tb::Error& e) {
        return QString::fromUtf8(e.what());
    } catch (const std::exception& e) {
        return QStringLiteral("<not a tb::Error: ") + QString::fromUtf8(e.what()) + QStringLiteral(">");
    }
    return QStringLiteral("<no exception>");
}

// What f() writes to this process's stderr (file descriptor 2, through a temporary file), which
// the terminal shows no more of meanwhile; f's exceptions pass through, stderr given back first.
template <typename F>
QString stderrOf(F&& f) {
    std::fflush(stderr);
    FILE* into = std::tmpfile();
    const int saved = dup(2);
    if (!into || saved < 0 || dup2(fileno(into), 2) < 0) qFatal("stderrOf: cannot redirect stderr");
    const auto restore = [&] {
        std::fflush(stderr);
        dup2(saved, 2);
        close(saved);
    };
    try {
        f();
    } catch (...) {
        restore();
        std::fclose(into);
        throw;
    }
    restore();
    QByteArray text;
    std::rewind(into);
    char chunk[4096];
    for (size_t got; (got = std::fread(chunk, 1, sizeof chunk, into)) > 0;) text.append(chunk, qsizetype(got));
    std::fclose(into);
    return QString::fromUtf8(text);
}

// True when msg contains every part; used as QVERIFY2(mentions(...), qPrintable(msg)).
inline bool mentions(const QString& msg, std::initializer_list<QString> parts) {
    for (const QString& p : parts)
        if (!msg.contains(p)) return false;
    return true;
}

// This process's resident memory (VmRSS), KiB; -1 where /proc cannot be read.
inline qint64 residentKiB() {
    QFile status(QStringLiteral("/proc/self/status"));
    if (!status.open(QIODevice::ReadOnly)) return -1;
    for (const QByteArray& line : status.readAll().split('\n'))
        if (line.startsWith("VmRSS:")) return line.mid(6).trimmed().split(' ').first().toLongLong();
    return -1;
}

}  // namespace tbtest
