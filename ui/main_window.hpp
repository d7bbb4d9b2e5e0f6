// MainWindow: the workbench. Experiment panel (left), placement diagram and live charts
// (centre), devices panel with the GPUs and the per-tower timeline (right), run controls in a
// toolbar and menu, status bar with step, epoch, examples/sec and ETA. The engine runs in an
// EngineWorker on its own QThread; a DeviceMonitor samples the GPUs on its own thread for as
// long as the window is open; closing the window stops a run cleanly.
#pragma once
#include <QMainWindow>
#include <QThread>
#include <functional>
#include <memory>
#include <string>

#include "device_catalog.hpp"
#include "engine/device_monitor.hpp"
#include "io/run_config.hpp"

class ExperimentPanel;
class PlacementDiagram;
class ChartsPanel;
class DevicesPanel;
class EngineWorker;
class QAction;
class QLabel;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    // Where GPU telemetry comes from (NVML in the program, a fake in tests): a source, or
    // nullptr and one sentence in *whyNot.
    using TelemetryFactory = std::function<std::unique_ptr<tb::TelemetrySource>(std::string* whyNot)>;

    // The GPUs offered and watched, and their telemetry, are injected so tests can fake them.
    explicit MainWindow(DeviceCatalog catalog = DeviceCatalog::detect(),
                        const TelemetryFactory& telemetry = &tb::makeNvmlSource, QWidget* parent = nullptr);
    ~MainWindow() override;

    ExperimentPanel* experiment() const { return experiment_; }
    PlacementDiagram* diagram() const { return diagram_; }
    ChartsPanel* charts() const { return charts_; }
    DevicesPanel* devices() const { return devices_; }
    bool running() const { return running_; }
    bool paused() const { return paused_; }
    QString lastError() const { return lastError_; }
    QString lastSummary() const { return lastSummary_; }
    bool loadConfigFile(const QString& path);   // false (and a message) on a bad file

public slots:
    void start();
    void togglePause();
    void stepOnce();
    void stop();

signals:
    void runRequested(const tb::RunConfig& c);
    void runEnded();                               // finished, stopped or failed

protected:
    void closeEvent(QCloseEvent* e) override;

private:
    void buildMenus();
    void updateActions();
    void configChanged(const tb::RunConfig& c, bool valid);
    void showError(const QString& message);
    void openConfig();
    void saveConfig();

    DeviceCatalog catalog_;
    ExperimentPanel* experiment_;
    PlacementDiagram* diagram_;
    ChartsPanel* charts_;
    DevicesPanel* devices_;
    QThread thread_;
    EngineWorker* worker_;
    QAction *startAct_, *pauseAct_, *stepAct_, *stopAct_;
    QLabel *stepLabel_, *epochLabel_, *speedLabel_, *etaLabel_;
    bool running_ = false, paused_ = false, valid_ = false;
    bool stopping_ = false;  // Stop was pressed once this run: the next press skips the final evaluation
    QString lastError_, lastSummary_;
    QString paramsModel_;      // model whose parameter count is cached
    int64_t paramCount_ = 0;
    // Null without telemetry. A member, so its thread is joined before QWidget's destructor
    // deletes the panel it posts to.
    std::unique_ptr<tb::DeviceMonitor> monitor_;
};
