// towerbench: the workbench window. `towerbench [--config FILE.json] [--start]` opens the window
// on a run config (and starts it). With no display it says so in one line and runs the same
// experiment headless, as towerbench-run would.
#include <QApplication>
#include <QStringList>
#include <cstdio>
#include <cstdlib>

#include "headless_run.hpp"
#include "io/run_config.hpp"
#include "window/main_window.hpp"
#include "stop_signals.hpp"
#include "util/error.hpp"

namespace {
bool haveDisplay() {
    const char* platform = std::getenv("QT_QPA_PLATFORM");
    if (platform && *platform) return true;  // offscreen, xcb, wayland... chosen explicitly
    return (std::getenv("DISPLAY") && *std::getenv("DISPLAY")) ||
           (std::getenv("WAYLAND_DISPLAY") && *std::getenv("WAYLAND_DISPLAY"));
}
}  // namespace

int main(int argc, char** argv) {
    QString config;
    bool start = false;
    for (int i = 1; i < argc; ++i) {
        const QString a = QString::fromLocal8Bit(argv[i]);
        if (a == "--config" && i + 1 < argc) config = QString::fromLocal8Bit(argv[++i]);
        else if (a == "--start") start = true;
        else if (a == "--help" || a == "-h") {
            std::puts("usage: towerbench [--config FILE.json] [--start]");
            return 0;
        } else {
            return failWith("towerbench", "unknown argument '" + a.toStdString() + "' (see --help)");
        }
    }
    if (!haveDisplay()) {
        std::fprintf(stderr, "towerbench: no display (DISPLAY and WAYLAND_DISPLAY are unset); running the experiment headless\n");
        tb::RunConfig c;
        try {
            if (!config.isEmpty()) c.loadFile(config.toStdString());
        } catch (const tb::Error& e) {
            return failWith("towerbench", e.what());
        }
        return runHeadless(c);
    }
    QApplication app(argc, argv);
    QApplication::setOrganizationName("Towerbench");
    QApplication::setApplicationName("Towerbench");
    QApplication::setApplicationVersion(TB_VERSION);
    MainWindow window;
    if (!config.isEmpty() && !window.loadConfigFile(config)) return 2;
    window.show();
    if (start) QMetaObject::invokeMethod(&window, &MainWindow::start, Qt::QueuedConnection);
    // SIGINT / SIGTERM: Stop (the run ends after its step, evaluates, keeps its checkpoint and
    // summary), then the window closes as if the user closed it, and the exit status says which
    // signal ended it. A second signal ends the process at once.
    StopSignals stopSignals("towerbench", [&window](int sig) {
        std::fprintf(stderr, "towerbench: %s: stopping the run after the step in progress, then closing "
                             "(again: end at once)\n", StopSignals::name(sig));
        QMetaObject::invokeMethod(&window, [&window] {
            if (window.processesRunning()) {  // closing stops them after their step and waits for them
                window.setQuitConfirmation([] { return true; });
                window.close();
                return;
            }
            if (!window.running()) {
                window.close();
                return;
            }
            QObject::connect(&window, &MainWindow::runEnded, &window, &QWidget::close, Qt::QueuedConnection);
            window.stop();
        }, Qt::QueuedConnection);
    });
    const int status = app.exec();
    return stopSignals.received() ? stopSignals.exitStatus() : status;
}
