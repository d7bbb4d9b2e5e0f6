// tb_window_soak: the window on one long run, measured (issue 36's soak).
//   tb_window_soak CONFIG.json SECONDS OUT.json [SHOTS_DIR]
// Opens the window on CONFIG as `towerbench --config CONFIG --start` does and starts the run.
// While it trains, a 20 ms precise timer on the GUI thread measures the thread's lateness (how
// much later than asked each tick fires: what a click or a repaint waits), and every 10 s the
// process's resident memory (VmRSS) and the charts' points are sampled. At SECONDS it presses
// Stop, waits for the run's end, and reads the run folder (TOWERBENCH_RUNS_DIR decides where):
// the metrics file must hold every step the summary counts, once each, in order. OUT.json gets
// the samples and the figures; the last line of stdout says them in words. Exit status 0 when
// the run ended as stopped and the metrics file is complete, else 1.
// SHOTS_DIR: just before Stop, while the run still trains, the window is saved as
// SHOTS_DIR/window-1366x768.png, then resized and saved as window-1920x1080.png (what the GPU
// machine's device check shows of a real GPU run: the devices' NVML readings and the timeline).
#include <QApplication>
#include <QDir>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMap>
#include <QPixmap>
#include <QTimer>
#include <qcustomplot.h>

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "charts/charts_panel.hpp"
#include "experiment/experiment_panel.hpp"
#include "window/main_window.hpp"

namespace {

constexpr int kTickMs = 20;

// The GUI thread's long events: each delivery over 8 ms counted and timed by the receiver's
// class and the event's type, so the soak says what made the thread late.
class TimedApplication final : public QApplication {
public:
    using QApplication::QApplication;
    bool notify(QObject* receiver, QEvent* e) override {
        QElapsedTimer t;
        t.start();
        const char* cls = receiver->metaObject()->className();
        const int type = int(e->type());
        const bool result = QApplication::notify(receiver, e);
        const double ms = double(t.nsecsElapsed()) / 1e6;
        if (ms > 8) {
            Slow& s = slow[QString::fromLatin1(cls) + " event " + QString::number(type)];
            ++s.count;
            s.totalMs += ms;
            s.maxMs = std::max(s.maxMs, ms);
        }
        return result;
    }
    struct Slow {
        int count = 0;
        double totalMs = 0, maxMs = 0;
    };
    QMap<QString, Slow> slow;  // nested deliveries are counted in each handler they pass through
};
constexpr int kSampleMs = 10000;

int64_t residentKiB() {
    QFile f(QStringLiteral("/proc/self/status"));
    if (!f.open(QIODevice::ReadOnly)) return 0;
    for (const QByteArray& line : f.readAll().split('\n'))
        if (line.startsWith("VmRSS:")) return line.mid(6).trimmed().split(' ').first().toLongLong();
    return 0;
}

int chartPoints(const ChartsPanel& charts) {
    int points = 0;
    for (QCustomPlot* plot : charts.findChildren<QCustomPlot*>())
        for (int i = 0; i < plot->graphCount(); ++i) points += plot->graph(i)->data()->size();
    return points;
}

double percentile(std::vector<float> v, double p) {
    if (v.empty()) return 0;
    const size_t k = std::min(v.size() - 1, size_t(p * double(v.size())));
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(k), v.end());
    return v[k];
}

// The metrics file's step lines: how many, and whether they are steps first, first + 1, ... each once.
struct MetricsCount {
    int64_t steps = 0;
    bool inOrder = true;
};
MetricsCount countSteps(const QString& path) {
    MetricsCount c;
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return {0, false};
    int64_t expected = -1;
    while (!f.atEnd()) {
        const QJsonObject j = QJsonDocument::fromJson(f.readLine()).object();
        if (j[QStringLiteral("type")].toString() != QLatin1String("step")) continue;
        const int64_t step = j[QStringLiteral("step")].toInteger();
        if (expected >= 0 && step != expected) c.inOrder = false;
        expected = step + 1;
        ++c.steps;
    }
    return c;
}

// The devices' readings and the timeline in front (an evaluation brings the predictions forward).
void showDevices(QWidget& window) {
    if (auto* dock = window.findChild<QDockWidget*>(QStringLiteral("devicesDock"))) dock->raise();
    QCoreApplication::processEvents();
}

void saveShot(QWidget& window, const QString& path) {
    showDevices(window);
    if (!window.grab().save(path)) std::fprintf(stderr, "tb_window_soak: %s cannot be written\n", qPrintable(path));
    else std::printf("saved %s (%dx%d)\n", qPrintable(path), window.width(), window.height());
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4 && argc != 5) {
        std::fprintf(stderr, "usage: tb_window_soak CONFIG.json SECONDS OUT.json [SHOTS_DIR]\n");
        return 2;
    }
    const QString shots = argc == 5 ? QString::fromLocal8Bit(argv[4]) : QString();
    TimedApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("TowerbenchSoak"));  // not the user's settings
    const double seconds = QString::fromLocal8Bit(argv[2]).toDouble();
    if (!(seconds > 0)) {
        std::fprintf(stderr, "tb_window_soak: SECONDS '%s' is not a number above 0\n", argv[2]);
        return 2;
    }
    MainWindow window;
    if (!window.loadConfigFile(QString::fromLocal8Bit(argv[1]))) return 2;
    window.resize(1366, 768);
    window.show();

    QElapsedTimer clock;
    clock.start();
    std::vector<float> lateness;  // ms, every tick
    lateness.reserve(size_t(seconds * 1000 / kTickMs) + 16);
    std::vector<float> minuteLateness;
    QJsonArray samples, minutes;
    qint64 lastTick = -1;
    QTimer tick;
    tick.setTimerType(Qt::PreciseTimer);
    tick.setInterval(kTickMs);
    QObject::connect(&tick, &QTimer::timeout, [&] {
        const qint64 now = clock.nsecsElapsed();
        if (lastTick >= 0) {
            const float late = float(double(now - lastTick) / 1e6 - kTickMs);
            lateness.push_back(std::max(0.f, late));
            minuteLateness.push_back(std::max(0.f, late));
        }
        lastTick = now;
    });
    QTimer sample;
    sample.setInterval(kSampleMs);
    QObject::connect(&sample, &QTimer::timeout, [&] {
        const double t = double(clock.elapsed()) / 1000;
        // glibc's account beside the kernel's: what the allocator took from the system (arenas and
        // mapped blocks), what the program holds of it, and what lies free in the arenas (resident
        // once touched; RSS can grow inside an unchanged footprint as untouched pages are first used).
        const struct mallinfo2 heap = mallinfo2();
        samples.append(QJsonObject{{"t_s", t},
                                   {"rss_kib", qint64(residentKiB())},
                                   {"malloc_footprint_kib", qint64((heap.arena + heap.hblkhd) / 1024)},
                                   {"malloc_in_use_kib", qint64((heap.uordblks + heap.hblkhd) / 1024)},
                                   {"malloc_free_kept_kib", qint64(heap.fordblks / 1024)},
                                   {"chart_steps", window.charts()->stepPoints()},
                                   {"chart_points", chartPoints(*window.charts())}});
        if (samples.size() % 6 == 0) {  // each minute: that minute's p99 and worst tick
            minutes.append(QJsonObject{{"minute", samples.size() / 6},
                                       {"p99_ms", percentile(minuteLateness, 0.99)},
                                       {"max_ms", percentile(minuteLateness, 1.0)}});
            minuteLateness.clear();
        }
    });
    bool ended = false;
    QObject::connect(&window, &MainWindow::runEnded, [&] {
        ended = true;
        app.quit();
    });
    bool refused = false;
    QTimer::singleShot(0, &window, [&] {
        window.start();
        if (!window.running()) {  // refused in the form (a GPU that is not there, say): no run to wait for
            const QString why = window.lastError().isEmpty() ? window.experiment()->problem() : window.lastError();
            std::fprintf(stderr, "tb_window_soak: the run did not start: %s\n", qPrintable(why));
            refused = true;
            app.quit();
            return;
        }
        tick.start();
        sample.start();
    });
    QTimer::singleShot(int(seconds * 1000), &window, [&] {
        tick.stop();
        if (shots.isEmpty()) {
            window.stop();
            return;
        }
        // Each size needs a layout pass and a repaint with fresh readings before its picture (the
        // window may have sized itself to the screen when shown).
        window.resize(1366, 768);
        showDevices(window);
        QTimer::singleShot(1500, &window, [&window, &shots] {
            saveShot(window, shots + "/window-1366x768.png");
            window.resize(1920, 1080);
            QTimer::singleShot(1500, &window, [&window, &shots] {
                saveShot(window, shots + "/window-1920x1080.png");
                window.stop();
            });
        });
    });
    app.exec();
    if (refused) return 1;

    // The run folder: the one directory of TOWERBENCH_RUNS_DIR holding a summary.
    const QString runs = qEnvironmentVariable("TOWERBENCH_RUNS_DIR");
    QString folder;
    for (const QString& d : QDir(runs).entryList(QDir::Dirs | QDir::NoDotAndDotDot))
        if (QFile::exists(runs + "/" + d + "/summary.json")) folder = runs + "/" + d;
    const QJsonObject summary = QJsonDocument::fromJson([&] {
        QFile f(folder + "/summary.json");
        return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
    }()).object();
    const MetricsCount metrics = countSteps(folder + "/metrics.jsonl");
    const int64_t steps = summary[QStringLiteral("steps")].toInteger(-1);
    const int64_t dropped = summary[QStringLiteral("dropped_reports")].toInteger();

    // Memory growth after the first minute: the sample at 60 s against the last.
    qint64 atMinute = 0, last = 0, peak = 0;
    for (const QJsonValue& v : samples) {
        const QJsonObject o = v.toObject();
        if (atMinute == 0 && o["t_s"].toDouble() >= 59) atMinute = o["rss_kib"].toInteger();
        last = o["rss_kib"].toInteger();
        peak = std::max(peak, last);
    }
    double worstMinute = 0;
    for (const QJsonValue& v : minutes) worstMinute = std::max(worstMinute, v.toObject()["p99_ms"].toDouble());
    const double growth = atMinute > 0 ? 100.0 * double(last - atMinute) / double(atMinute) : 0;
    const bool complete = ended && steps > 0 && metrics.steps == steps && metrics.inOrder;
    QJsonObject out{{"config", QString::fromLocal8Bit(argv[1])},
                    {"seconds", double(clock.elapsed()) / 1000},
                    {"run_folder", folder},
                    {"steps", qint64(steps)},
                    {"metrics_steps", qint64(metrics.steps)},
                    {"metrics_in_order", metrics.inOrder},
                    {"dropped_reports", qint64(dropped)},
                    {"chart_steps", window.charts()->stepPoints()},
                    {"chart_points_at_end", chartPoints(*window.charts())},
                    {"rss_kib_at_60s", atMinute},
                    {"rss_kib_at_end", last},
                    {"rss_kib_peak", peak},
                    {"rss_growth_after_first_minute_percent", growth},
                    {"gui_ticks", qint64(lateness.size())},
                    {"gui_lateness_p50_ms", percentile(lateness, 0.5)},
                    {"gui_lateness_p99_ms", percentile(lateness, 0.99)},
                    {"gui_lateness_max_ms", percentile(lateness, 1.0)},
                    {"gui_lateness_worst_minute_p99_ms", worstMinute},
                    {"minutes", minutes},
                    {"slow_events", [&] {
                         QJsonArray a;
                         for (auto it = app.slow.cbegin(); it != app.slow.cend(); ++it)
                             a.append(QJsonObject{{"what", it.key()},
                                                  {"count", it->count},
                                                  {"total_ms", it->totalMs},
                                                  {"max_ms", it->maxMs}});
                         return a;
                     }()},
                    {"samples", samples}};
    QFile f(QString::fromLocal8Bit(argv[3]));
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate) || f.write(QJsonDocument(out).toJson()) < 0) {
        std::fprintf(stderr, "tb_window_soak: %s cannot be written\n", argv[3]);
        return 1;
    }
    std::printf("%.0f s, %lld steps (metrics file %lld, %s; %lld reports dropped for the window), chart points "
                "%d; RSS %.1f MiB at 60 s -> %.1f MiB at the end (%+.2f%%, peak %.1f MiB); GUI thread lateness "
                "p50 %.2f ms, p99 %.2f ms (worst minute's p99 %.2f ms), max %.1f ms over %zu ticks\n",
                double(clock.elapsed()) / 1000, (long long)steps, (long long)metrics.steps,
                metrics.inOrder ? "every step once, in order" : "NOT every step once in order", (long long)dropped,
                chartPoints(*window.charts()), double(atMinute) / 1024, double(last) / 1024, growth,
                double(peak) / 1024, percentile(lateness, 0.5), percentile(lateness, 0.99), worstMinute,
                percentile(lateness, 1.0), lateness.size());
    return complete ? 0 : 1;
}
