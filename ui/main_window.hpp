// MainWindow: the workbench. Experiment panel (left), placement diagram and live charts
// (centre), devices panel with the per-tower timeline (right), run controls in a toolbar and
// menu, status bar with step, epoch, examples/sec and ETA. The engine runs in an EngineWorker
// on its own QThread; closing the window stops a run cleanly.
#pragma once
#include <QMainWindow>
#include <QThread>

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
    explicit MainWindow(QWidget* parent = nullptr);
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
};
