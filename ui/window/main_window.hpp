// MainWindow: the workbench. Experiment panel (left) with the run controls and, beside Start,
// what stops a run from starting; placement diagram and live charts (centre) under the last
// run's summary; devices panel with the GPUs and the per-tower timeline (right); a toolbar with
// the run controls and the pace (slow motion); a status bar with the run's state, step, epoch,
// examples/sec and ETA. The engine runs in an EngineWorker on its own QThread; a DeviceMonitor
// samples the GPUs on its own thread for as long as the window is open; closing the window
// mid-run asks first, then stops the run cleanly. A fresh start opens the README's default
// experiment (samples/configs/default.json) in a window sized to the screen it opens on.
#pragma once
#include <QElapsedTimer>
#include <QMainWindow>
#include <QThread>
#include <QVector>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "devices/device_catalog.hpp"
#include "engine/device_monitor.hpp"
#include "engine/metrics_file.hpp"
#include "engine/observer.hpp"
#include "io/run_config.hpp"
#include "view_format.hpp"

class ExperimentPanel;
class PlacementDiagram;
class DecisionView;
class RunsPanel;
class ScalingLab;
class LessonPanel;
class SyncAsyncLesson;
class ParallelismLesson;
class RunFollower;
class ProcessLauncher;
class ChartsPanel;
class DevicesPanel;
class PredictionsPanel;
class ModelView;
class AugmentView;
class EngineWorker;
class QAction;
class QComboBox;
class QDockWidget;
class QFrame;
class QLabel;
class QProgressBar;
class QScrollArea;

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
    DecisionView* decisionView() const { return decision_; }
    RunsPanel* runsPanel() const { return runs_; }
    DevicesPanel* devices() const { return devices_; }
    PredictionsPanel* predictions() const { return predictions_; }
    QDockWidget* predictionsDock() const { return predictionsDock_; }
    ModelView* modelView() const { return modelView_; }
    // Lab > Model view: the form's model, its layers and a run's per-layer times, in its own window.
    ModelView* openModelView();
    AugmentView* openAugmentView();  // Lab > Augmented samples: the form's training input, drawn
    QScrollArea* experimentScroll() const { return scroll_; }
    // The scaling lab's window, made on first use, measuring the experiment of the moment; with a
    // folder, that sweep shown.
    ScalingLab* openScalingLab(const QString& sweepFolder = {});
    // Lessons > N: the lesson's settings into the form and its text into the Lesson dock; lessons 2,
    // 5, 6 and 7 (indices 1, 4, 5, 6) open their own windows instead (SyncAsyncLesson,
    // ComparisonLesson, ParallelismLesson), which it returns (else nullptr).
    QWidget* openLesson(int index);
    LessonPanel* lessonPanel() const { return lesson_; }
    QDockWidget* lessonDock() const { return lessonDock_; }
    QComboBox* paceBox() const { return pace_; }
    QAction* startAction() const { return startAct_; }
    bool running() const { return running_; }
    int framesDrawn() const { return framesDrawn_; }  // times new steps were drawn (this window's life)
    bool paused() const { return paused_; }
    QString stateText() const;        // the status bar's state: "Running", "Paused at step 12", ...
    QString etaText() const;
    QString summaryText() const;      // the last run's summary banner (plain text), empty before
    QString lastError() const { return lastError_; }
    QString lastSummary() const { return lastSummary_; }
    bool loadConfigFile(const QString& path);   // false (and a message) on a bad file
    bool saveConfigFile(const QString& path);   // writes every setting; false (and a message) on failure
    // Where the shipped run configs are (the source tree's samples/configs, or the installed
    // copy); the open dialog starts there.
    static QString sampleConfigsDir();
    // Asked before closing the window mid-run; true: stop the run and quit. A dialog by default.
    void setQuitConfirmation(std::function<bool()> ask) { confirmQuit_ = std::move(ask); }
    // Resuming a finished run asks how far to train it (tests answer for the user): the total
    // steps, or 0 to leave it.
    void setResumeStepsQuestion(std::function<int64_t(int64_t done)> ask) { askSteps_ = std::move(ask); }

public slots:
    void start();
    // Continues the run in `folder` from its newest checkpoint, with its own settings (shown in
    // the form); a finished one asks for more steps first.
    void resumeRun(const QString& folder);
    // Shows a run that another process is writing in `folder`, live, until it ends.
    void followRun(const QString& folder);
    bool following() const { return follower_ != nullptr; }
    QString launchedFolder() const;  // the folder of the last run of several processes started here
    bool processesRunning() const;   // mpirun has not ended yet (it may outlive the run's last line)
    void togglePause();
    void stepOnce();   // paused: one more step; with no run: starts one paused at step one
    void stop();

signals:
    void runRequested(const tb::RunConfig& c, const QString& resumeDir);
    void runEnded();                               // finished, stopped or failed
    void stateChanged(const QString& state);       // what the status bar's state now says

protected:
    void markFormKept();
    void clearRunViews(const QStringList& towers);  // charts, timeline, predictions, banner: empty
    // Before Follow or Resume puts a run's settings `incoming` in the form: true when the form
    // holds nothing unkept, or the user agrees to replace it (`action`: "Follow", "Resume").
    bool mayReplaceForm(const tb::RunConfig& incoming, const QString& action);
    void closeEvent(QCloseEvent* e) override;
    // The quit question while a run or processes train: true to stop them and quit.
    bool askToQuit();
    bool eventFilter(QObject* watched, QEvent* e) override;
    void showEvent(QShowEvent* e) override;

private:
    // The constructor's parts.
    void buildExperimentDocks();
    void buildCentre();
    void buildDeviceDocks(const TelemetryFactory& telemetry);
    void buildStatusBar();
    void connectLauncher();
    void connectWorker();
    void restoreSession();
    void createActions();
    void buildMenus();
    QWidget* buildRunBox();
    void updateActions();
    void experimentEdited(const tb::RunConfig& c, bool valid);  // the form changed: the diagram and actions follow
    void showModel(const tb::RunConfig& c, const tb::ModelSpec& spec);
    void showStages(const tb::RunConfig& c, const tb::ModelSpec& spec, int processes);
    void showChosenSplit(const QString& runningDetail, tb::RunConfig run, int processes);
    tb::ui::Explainer formWords() const;  // the form's inFormWords, for the views that show its settings' problems
    void launch(bool paused, const QString& resumeDir = {});
    // Several processes through mpirun, followed; continuing the run in `resumeDir` if given.
    void launchProcesses(const tb::RunConfig& c, const QString& resumeDir);
    void followFolder(const QString& folder, bool takeSettings);
    void showSteps(const std::vector<tb::StepMetrics>& steps);  // a run's steps into every view
    void setState(const QString& text, const QString& detail = {});
    void showStepsTaken();
    // The end-of-run banner from a summary.json; `followed`: another process's run, whose state
    // line says so (it is left as it is).
    void showSummary(const QString& summaryJson, bool stopped, bool followed = false);
    void showSavedLayerTimes(const std::string& model);
    void showError(const QString& message);
    void openConfig();
    void saveConfig();
    // Sizes a window with no saved geometry (or one that no longer fits) to the screen's
    // available area and gives the docks the width their content needs.
    void fitToScreen();
    void fitFormWidth();  // the form's dock at least as wide as the form's widest row

    DeviceCatalog catalog_;
    ExperimentPanel* experiment_;
    QScrollArea* scroll_;
    PlacementDiagram* diagram_;
    ChartsPanel* charts_;
    DecisionView* decision_;
    RunsPanel* runs_ = nullptr;
    std::unique_ptr<RunFollower> follower_;  // a folder followed live; none while this window trains
    std::unique_ptr<RunFollower> ended_;     // the last followed run, after its end: its predictions may still come
    ProcessLauncher* launcher_ = nullptr;    // a run of several processes started from here
    bool followedLaunch_ = false;            // its folder was ready and followed
    DevicesPanel* devices_;
    PredictionsPanel* predictions_;
    ModelView* modelView_;
    AugmentView* augmentView_ = nullptr;  // made at its first opening
    ScalingLab* lab_ = nullptr;
    LessonPanel* lesson_;
    QDockWidget* lessonDock_;
    SyncAsyncLesson* syncAsync_ = nullptr;
    ParallelismLesson* threeWays_ = nullptr;
    std::map<int, class ComparisonLesson*> comparisons_;  // lessons 5 and 7, by index, made on first use
    QDockWidget *left_, *right_, *predictionsDock_;
    QThread thread_;
    EngineWorker* worker_;
    QAction *startAct_, *pauseAct_, *stepAct_, *stopAct_;
    QComboBox* pace_;
    QLabel *problem_, *summary_;
    QFrame* summaryBox_;  // summary_ and its close button
    QLabel *stateLabel_, *stepLabel_, *epochLabel_, *speedLabel_, *etaLabel_;
    QProgressBar* evalBusy_;
    bool running_ = false, paused_ = false, valid_ = false, training_ = false;
    bool stopping_ = false;  // Stop was pressed once this run: the next press skips the final evaluation
    bool fitOnShow_ = false;
    int64_t lastStep_ = 0, totalSteps_ = 0;
    QStringList pendingTowers_;  // the towers of the run requested, shown once it starts
    bool pendingPlanar_ = false;  // the run requested trains on a 2-D set
    // (wall time, step) of the last seconds of steps seen: the ETA's rate, as the user lives it
    // (slow motion included, pauses not).
    std::deque<std::pair<qint64, int64_t>> recentSteps_;
    QElapsedTimer wall_;
    class FrameGate* frames_ = nullptr;  // the engine's steps, drawn at most ~30 times a second
    int framesDrawn_ = 0;
    QString lastError_, lastSummary_;
    QString runDetail_;        // the running plan, in words (the state's tooltip)
    QString paramsModel_;      // model whose parameter count is cached
    QVector<int64_t> variableSizes_;  // elements of each of the model's variables, for the diagram
    std::function<int64_t(int64_t)> askSteps_;
    // The form's settings as last kept (started, saved, opened, restored, or taken from a run): a
    // form that differs holds settings Follow and Resume would lose without asking.
    std::string keptForm_;
    std::function<bool()> confirmQuit_;
    std::set<std::string> openedKeys_;  // the last opened config file's keys, which Save keeps
    // Null without telemetry. A member, so its thread is joined before QWidget's destructor
    // deletes the panel it posts to.
    std::unique_ptr<tb::DeviceMonitor> monitor_;
};
