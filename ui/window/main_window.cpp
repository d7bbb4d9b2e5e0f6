#include "window/main_window.hpp"

#include "file_dialogs.hpp"
#include "window/frame_gate.hpp"

#include <thread>

#include <QAction>
#include <climits>

#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDir>
#include <QDockWidget>
#include <QInputDialog>
#include <QFileInfo>
#include <QJsonArray>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLocale>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QTimer>
#include <QToolBar>
#include <QToolButton>
#include <QFrame>
#include <QHBoxLayout>
#include <QVBoxLayout>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "parallel/stage_plan.hpp"
#include "charts/charts_panel.hpp"
#include "lessons/concepts_help.hpp"
#include "lessons/parallelism_lesson.hpp"
#include "devices/devices_panel.hpp"
#include "window/engine_worker.hpp"
#include "experiment/experiment_panel.hpp"
#include "window/process_launcher.hpp"
#include "experiment/form_widgets.hpp"
#include "view_format.hpp"
#include "nn/model_spec.hpp"
#include "nn/network.hpp"
#include "charts/decision_view.hpp"
#include "lab/augment_view.hpp"
#include "predictions/predictions_panel.hpp"
#include "lessons/comparison_lesson.hpp"
#include "model/model_view.hpp"
#include "engine/run_folder.hpp"
#include "engine/checkpoint.hpp"
#include "engine/metrics_file.hpp"
#include "io/run_index.hpp"
#include "window/run_follower.hpp"
#include "runs/runs_panel.hpp"
#include "lab/scaling_lab.hpp"
#include "lessons/lessons.hpp"
#include "lessons/sync_async_lesson.hpp"
#include "placement/placement_diagram.hpp"
#include "window_keys.hpp"

namespace {

// Slow motion: steps per second (0: as fast as the machine goes).
struct Pace {
    const char* label;
    double stepsPerSecond;
};
constexpr Pace kPaces[] = {{"full speed", 0}, {"20 steps/s", 20}, {"5 steps/s", 5},
                           {"2 steps/s", 2},  {"1 step/s", 1},    {"1 step / 2 s", 0.5}};

QString duration(double seconds) {
    if (seconds < 0.1) return QObject::tr("%1 ms").arg(seconds * 1e3, 0, 'f', 0);  // (a short run read "0.0 s")
    if (seconds < 60) return QObject::tr("%1 s").arg(seconds, 0, 'f', seconds < 10 ? 1 : 0);
    const qint64 s = qint64(seconds + 0.5);
    if (s < 3600) return QObject::tr("%1 min %2 s").arg(s / 60).arg(s % 60);
    return QObject::tr("%1 h %2 min").arg(s / 3600).arg(s % 3600 / 60);
}

QString percent(double fraction) { return QLocale().toString(100 * fraction, 'f', 1) + QLatin1Char('%'); }

// The status bar's readouts change every frame. A label of fixed size asks no relayout of the
// window when its text changes (QWidget::updateGeometry stops at a widget whose minimum and
// maximum size agree); free ones made the window lay itself out 20 times a second while training
// (tb_window_soak: 738 layouts in 36 s, up to 4.7 ms each). The size grows when a text needs more
// room, with a digit to spare, and never shrinks while it shows something; an empty readout lets
// go of its room.
void setReadout(QLabel* l, const QString& text) {
    l->setText(text);
    if (text.isEmpty()) {
        l->setMinimumSize(0, 0);
        l->setMaximumSize(QWIDGETSIZE_MAX, QWIDGETSIZE_MAX);
        return;
    }
    const QSize need = l->sizeHint();
    if (need.width() > l->maximumWidth() || l->minimumWidth() != l->maximumWidth() || need.height() != l->height())
        l->setFixedSize(std::max(l->minimumWidth(), need.width() + l->fontMetrics().horizontalAdvance(QLatin1Char('0'))),
                        need.height());
}

}  // namespace

namespace {
// The synthetic sets are the 2-D ones (dataset.hpp): their decision regions can be drawn.
bool isPlanar(const tb::RunConfig& c) { return c.data.rfind("synthetic:", 0) == 0; }

// A pipeline run's lanes, one per stage and its device; empty without --stages, or where the
// stages do not read against the model (the form says why, and the run is refused).
QStringList stageLanes(const tb::RunConfig& c) {
    QStringList out;
    if (c.stages.empty()) return out;
    try {
        std::vector<std::string> names;
        for (const tb::LayerSpec& l : tb::findModel(c.model).layers) names.push_back(l.name);
        const tb::StagePlan plan = tb::parseStagePlan(c.stages, names);
        const int replicas = std::max(1, c.stageReplicas);
        for (int r = 0; r < replicas; ++r)
            for (int i = 0; i < plan.count(); ++i) {
                tb::Device d = plan.stages[size_t(i)].device;
                d.index += plan.count() * r;  // as StagePipeline numbers a replica's devices
                out << tb::ui::stageLane(i, QString::fromStdString(d.str()), replicas > 1 ? r : -1);
            }
    } catch (const tb::Error&) {
        out.clear();
    }
    return out;
}
}  // namespace

MainWindow::MainWindow(DeviceCatalog catalog, const TelemetryFactory& telemetry, QWidget* parent)
    : QMainWindow(parent), catalog_(std::move(catalog)) {
    setWindowTitle(tr("Towerbench"));
    setWindowIcon(QIcon(":/towerbench.svg"));
    EngineWorker::registerTypes();
    wall_.start();
    createActions();

    buildExperimentDocks();
    buildCentre();
    buildDeviceDocks(telemetry);
    buildStatusBar();
    connectLauncher();
    connectWorker();
    connect(experiment_, &ExperimentPanel::configChanged, this, &MainWindow::experimentEdited);
    buildMenus();
    restoreSession();
}

// Left: the experiment form above the run controls, and the history of runs as a tab beside it.
void MainWindow::buildExperimentDocks() {
    experiment_ = new ExperimentPanel(catalog_);
    scroll_ = new QScrollArea;
    scroll_->setWidget(experiment_);
    scroll_->setWidgetResizable(true);
    experiment_->installEventFilter(this);
    auto* leftBody = new QWidget;
    auto* leftLayout = new QVBoxLayout(leftBody);
    leftLayout->setContentsMargins(0, 0, 0, 0);
    leftLayout->addWidget(scroll_, 1);
    leftLayout->addWidget(buildRunBox());
    left_ = new QDockWidget(tr("Experiment"), this);
    left_->setObjectName("experimentDock");
    left_->setWidget(leftBody);
    addDockWidget(Qt::LeftDockWidgetArea, left_);

    // The history of runs, a tab beside the form (it lists the run folders' index).
    runs_ = new RunsPanel(QString::fromStdString(tb::RunFolder::runsRoot()));
    runs_->setSettingNames([this](const QString& key) { return experiment_->settingName(key); });
    runs_->setExplainer(formWords());
    auto* runsDock = new QDockWidget(tr("Runs"), this);
    runsDock->setObjectName("runsDock");
    runsDock->setWidget(runs_);
    addDockWidget(Qt::LeftDockWidgetArea, runsDock);
    tabifyDockWidget(runsDock, left_);  // the form on top: a fresh start shows the experiment
    connect(runsDock, &QDockWidget::visibilityChanged, runs_, [this](bool shown) {
        if (shown) runs_->refresh();
    });
    connect(runs_, &RunsPanel::resumeRequested, this, &MainWindow::resumeRun);
    connect(runs_, &RunsPanel::followRequested, this, &MainWindow::followRun);
    connect(runs_, &RunsPanel::sweepRequested, this, [this](const QString& folder) { openScalingLab(folder); });
    askSteps_ = [this](int64_t done) {
        bool ok = false;
        const int total = QInputDialog::getInt(this, tr("Resume a finished run"),
                                               tr("It trained %1 steps. Train to step:").arg(done),
                                               int(std::min<int64_t>(INT_MAX, 2 * done)), int(done + 1), INT_MAX, 100, &ok);
        return ok ? int64_t(total) : int64_t(0);
    };
    connect(runs_, &RunsPanel::openSettings, this, [this](const tb::RunConfig& c, int processes) {
        if (!mayReplaceForm(c, tr("Open the settings"))) return;
        experiment_->setConfig(c);
        experiment_->setProcesses(processes);  // (mpirun's count is the run's plan, not its config)
        markFormKept();
        left_->raise();
    });
    connect(this, &MainWindow::runEnded, runs_, &RunsPanel::refresh);
}

// Centre: the placement diagram (and the 2-D decision regions) over the charts, the summary on top.
void MainWindow::buildCentre() {
    diagram_ = new PlacementDiagram;
    decision_ = new DecisionView;
    decision_->setObjectName("decisionView");
    decision_->hide();  // shown for the 2-D sets only
    auto* top = new QSplitter(Qt::Horizontal);
    top->addWidget(diagram_);
    top->addWidget(decision_);
    top->setStretchFactor(0, 2);
    top->setStretchFactor(1, 1);
    charts_ = new ChartsPanel;
    auto* centre = new QSplitter(Qt::Vertical);
    centre->addWidget(top);
    centre->addWidget(charts_);
    centre->setStretchFactor(1, 2);
    // The run's summary over the centre until the next run, or until its × closes it: on a
    // laptop's screen its three lines come out of the diagram's height.
    summaryBox_ = new QFrame;
    summaryBox_->setObjectName("runSummary");
    // Its own text colour with its own background: the palette's on a dark desktop is light.
    summaryBox_->setStyleSheet("#runSummary { background: #eef5ea; border: 1px solid #9fc49a; }"
                               "#runSummary QLabel { color: #1b2a18; }");
    summary_ = new QLabel;
    summary_->setObjectName("runSummaryText");
    summary_->setWordWrap(true);
    summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* close = new QToolButton;
    close->setObjectName("closeSummary");
    close->setAutoRaise(true);
    close->setText(QStringLiteral("×"));
    close->setToolTip(tr("Hide this summary (the Runs tab keeps the run's figures)"));
    connect(close, &QToolButton::clicked, summaryBox_, &QWidget::hide);
    auto* summaryLayout = new QHBoxLayout(summaryBox_);
    summaryLayout->setContentsMargins(6, 4, 2, 4);
    summaryLayout->addWidget(summary_, 1);
    summaryLayout->addWidget(close, 0, Qt::AlignTop);
    summaryBox_->hide();
    auto* centreBody = new QWidget;
    auto* centreLayout = new QVBoxLayout(centreBody);
    centreLayout->setContentsMargins(0, 0, 0, 0);
    centreLayout->addWidget(summaryBox_);
    centreLayout->addWidget(centre, 1);
    setCentralWidget(centreBody);
}

// Right: the devices and the towers' timeline, with the predictions and a lesson as tabs behind;
// telemetry from `telemetry`, or why there is none.
void MainWindow::buildDeviceDocks(const TelemetryFactory& telemetry) {
    devices_ = new DevicesPanel(catalog_);
    right_ = new QDockWidget(tr("Devices and timeline"), this);
    right_->setObjectName("devicesDock");
    right_->setWidget(devices_);
    addDockWidget(Qt::RightDockWidgetArea, right_);
    // What the model gets wrong: a tab behind the devices, raised when a run ends with predictions.
    predictions_ = new PredictionsPanel;
    predictionsDock_ = new QDockWidget(tr("Predictions"), this);
    predictionsDock_->setObjectName("predictionsDock");
    predictionsDock_->setWidget(predictions_);
    addDockWidget(Qt::RightDockWidgetArea, predictionsDock_);
    tabifyDockWidget(right_, predictionsDock_);
    // The model, in a window of its own (Lab > Model view): its layer graph, sizes and FLOPs, and
    // where a run's step goes layer by layer; it follows the form whether shown or not.
    modelView_ = new ModelView(this);
    modelView_->setWindowFlag(Qt::Window);
    modelView_->setWindowTitle(tr("Model — Towerbench"));
    tb::ui::closeOnKeys(modelView_, tb::ui::EscapeCloses::Yes);
    lesson_ = new LessonPanel;
    lessonDock_ = new QDockWidget(tr("Lesson"), this);
    lessonDock_->setObjectName("lessonDock");
    lessonDock_->setWidget(lesson_);
    addDockWidget(Qt::RightDockWidgetArea, lessonDock_);
    tabifyDockWidget(predictionsDock_, lessonDock_);
    lessonDock_->hide();  // until a lesson is chosen
    right_->raise();
    std::string noTelemetry;
    if (std::unique_ptr<tb::TelemetrySource> source = telemetry ? telemetry(&noTelemetry) : nullptr) {
        monitor_ = std::make_unique<tb::DeviceMonitor>(
            std::move(source), [panel = devices_](const std::vector<tb::DeviceSample>& samples) {
                // On the monitor's thread: the panel gets a copy on the GUI thread, where it lives
                // (and a batch still queued when it is destroyed is dropped with it).
                QMetaObject::invokeMethod(panel, [panel, samples] { panel->addSamples(samples); },
                                          Qt::QueuedConnection);
            });
    } else {
        devices_->setTelemetryUnavailable(QString::fromStdString(noTelemetry));
    }
}

// The state takes the free width and says one short thing; its detail is its tooltip, so
// nothing in the bar ever overlaps or is cut.
void MainWindow::buildStatusBar() {
    stateLabel_ = new QLabel;
    statusBar()->addWidget(stateLabel_, 1);
    evalBusy_ = new QProgressBar;
    evalBusy_->setRange(0, 0);  // busy: the evaluation reports no progress
    evalBusy_->setMaximumWidth(120);
    evalBusy_->hide();
    stepLabel_ = new QLabel;
    epochLabel_ = new QLabel;
    speedLabel_ = new QLabel;
    speedLabel_->setObjectName("speedLabel");
    speedLabel_->setToolTip(tb::ui::wrappedToolTip(
        tr("Examples per second over the run so far: examples trained over training wall time (pauses, slow "
           "motion, evaluations and checkpoints excluded), as the speed chart's \"whole run\" and the summary "
           "count them.")));
    etaLabel_ = new QLabel;
    statusBar()->addPermanentWidget(evalBusy_);
    for (QLabel* l : {stepLabel_, epochLabel_, speedLabel_, etaLabel_}) statusBar()->addPermanentWidget(l);
    setState(tr("Ready"));
}

// Runs of several processes: mpirun starts them, the window follows their folder.
void MainWindow::connectLauncher() {
    launcher_ = new ProcessLauncher(this);
    connect(launcher_, &ProcessLauncher::folderReady, this, [this](const QString& folder) {
        followedLaunch_ = true;
        followFolder(folder, false);
    });
    connect(launcher_, &ProcessLauncher::finished, this, [this](int exitCode, const QString& error) {
        if (follower_) follower_->poll();  // the run's last lines, written before mpirun ended
        if (exitCode != 0) {
            follower_.reset();
            // Started from the form: its fields' names, as a run on this thread says them.
            const QString message = experiment_->inFormWords(error);
            setState(tr("The processes failed"), message);
            showError(message);
        } else if (follower_) {  // no final state reached the folder: the processes were ended
            follower_.reset();
            diagram_->clearActivity();
            setState(tr("The processes ended"), launcher_->folder());
        } else if (!followedLaunch_) {  // ended before their folder was ready
            setState(stopping_ ? tr("Stopped before training") : tr("The processes ended"));
        }
        updateActions();
        runs_->refresh();
    });
}

// The engine on its own thread: what it reports reaches the window as queued signals.
void MainWindow::connectWorker() {
    worker_ = new EngineWorker;
    worker_->moveToThread(&thread_);
    connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);
    connect(this, &MainWindow::runRequested, worker_, &EngineWorker::run);  // queued: another thread
    connect(worker_, &EngineWorker::started, this, [this](const QString& plan) {
        // The data loaded and training begins: only now do the last run's charts give way.
        clearRunViews(pendingTowers_);
        for (const tb::MetricsLine& m : worker_->takeResumedPast()) {  // a resumed run's charts go on from its past
            if (m.kind == tb::MetricsLine::Kind::Step) {
                charts_->addStep(m.step);
            } else {
                charts_->addEval(m.eval);
                predictions_->showEval(m.eval);  // its confusion matrix, as a followed run's
            }
        }
        decision_->setVisible(pendingPlanar_);
        training_ = true;
        recentSteps_.clear();
        runDetail_ = plan;
        setState(paused_ ? tr("Paused at step 0") : tr("Running"), plan);
        showChosenSplit(plan, experiment_->config(), experiment_->processes());  // (the form is locked while it trains)
    });
    frames_ = new FrameGate([this] { showSteps(worker_->takeSteps()); }, this);
    connect(worker_, &EngineWorker::stepsReady, frames_, &FrameGate::request);
    // An evaluation is shown after the steps before it (connected first, so called first).
    connect(worker_, &EngineWorker::evaluated, frames_, &FrameGate::flush);
    connect(worker_, &EngineWorker::evaluated, charts_, &ChartsPanel::addEval);
    connect(worker_, &EngineWorker::evaluated, predictions_, &PredictionsPanel::showEval);
    connect(worker_, &EngineWorker::decisionGrid, decision_, &DecisionView::showGrid);
    connect(worker_, &EngineWorker::evaluating, this, [this](const QString& splits) {
        frames_->flush();  // the last steps before the state line moves on
        training_ = false;
        evalBusy_->show();
        setReadout(etaLabel_, {});
        setState(stopping_ ? tr("Stopping: evaluating on the %1 (Stop again to skip)").arg(splits)
                           : tr("Evaluating on the %1").arg(splits));
    });
    connect(worker_, &EngineWorker::finished, this, [this](const QString& summary, bool stopped) {
        frames_->flush();
        lastSummary_ = summary;
        // Dropped images are classified with this run's newest checkpoint.
        predictions_->dropped()->setRunFolder(
            QJsonDocument::fromJson(summary.toUtf8()).object().value("run_dir").toString());
        running_ = paused_ = training_ = false;
        showSummary(summary, stopped);
        diagram_->clearActivity();
        if (predictions_->hasPredictions()) predictionsDock_->raise();
        updateActions();
        emit runEnded();
    });
    connect(worker_, &EngineWorker::failed, this, [this](const QString& engineMessage) {
        frames_->flush();  // before the state says Failed, not after it
        running_ = paused_ = training_ = false;
        diagram_->clearActivity();
        updateActions();
        // The run was started from the form: its fields' names, not the flags (log.txt keeps those).
        const QString message = experiment_->inFormWords(engineMessage);
        setState(tr("Failed"), message);
        showError(message);
        emit runEnded();
    });
    thread_.start();
}

// The window's geometry and the last experiment, or on a fresh start the README's default one.
void MainWindow::restoreSession() {
    QSettings settings;
    fitOnShow_ = !restoreGeometry(settings.value("window/geometry").toByteArray());
    restoreState(settings.value("window/state").toByteArray());
    const QByteArray last = settings.value("experiment/last").toByteArray();
    tb::RunConfig c;
    bool restored = false;
    if (!last.isEmpty()) {
        try {
            const auto j = nlohmann::json::parse(last.toStdString());
            for (const auto& [k, v] : j.items()) c.set(k, v, "saved settings");
            restored = true;
        } catch (const std::exception&) {
            c = tb::RunConfig();  // settings from another version: the default experiment
        }
    }
    const QString defaults = QDir(sampleConfigsDir()).filePath(QStringLiteral("default.json"));
    if (!restored && QFileInfo::exists(defaults)) {
        try {
            c.loadFile(defaults.toStdString());
        } catch (const std::exception&) {
            c = tb::RunConfig();  // a damaged installation: the engine's defaults
        }
    }
    experiment_->setConfig(c);
    experimentEdited(experiment_->config(), experiment_->isValid());
    markFormKept();
}

void MainWindow::markFormKept() { keptForm_ = experiment_->config().toJson().dump(); }

bool MainWindow::mayReplaceForm(const tb::RunConfig& incoming, const QString& action) {
    const std::string form = experiment_->config().toJson().dump();
    if (form == keptForm_ || form == incoming.toJson().dump()) return true;
    QMessageBox box(QMessageBox::Question, tr("Replace the experiment's settings?"),
                    tr("%1 puts the run's settings in the experiment form, in place of the ones there now, which "
                       "were neither started nor saved (File > Save run config as… keeps them).")
                        .arg(action),
                    QMessageBox::NoButton, this);
    QAbstractButton* replace = box.addButton(action, QMessageBox::AcceptRole);
    QPushButton* keep = box.addButton(tr("Keep my settings"), QMessageBox::RejectRole);
    box.setDefaultButton(keep);
    box.setEscapeButton(keep);
    box.exec();
    return box.clickedButton() == replace;
}

MainWindow::~MainWindow() {
    worker_->abort();
    thread_.quit();
    thread_.wait();
}

QString MainWindow::sampleConfigsDir() {
    for (const char* dir : {TB_SAMPLES_DIR, TB_INSTALLED_SAMPLES_DIR})
        if (QFileInfo(QString::fromUtf8(dir)).isDir()) return QString::fromUtf8(dir);
    return QDir::homePath();
}

void MainWindow::createActions() {
    startAct_ = new QAction(tr("&Start"), this);
    pauseAct_ = new QAction(tr("&Pause"), this);
    stepAct_ = new QAction(tr("S&tep"), this);
    stopAct_ = new QAction(tr("St&op"), this);
    startAct_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
    pauseAct_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_P));
    stepAct_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_T));
    stopAct_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Period));
    pauseAct_->setToolTip(tr("Pause after the step in progress, or resume (Ctrl+P)"));
    stepAct_->setToolTip(tb::ui::wrappedToolTip(tr("Run exactly one step, then pause: watch the towers meet. With "
                                                   "no run, starts one paused at step one (Ctrl+T)")));
    stopAct_->setToolTip(tb::ui::wrappedToolTip(tr("Stop after the step in progress and evaluate; press again to "
                                                   "skip the evaluation (Ctrl+.)")));
    connect(startAct_, &QAction::triggered, this, &MainWindow::start);
    connect(pauseAct_, &QAction::triggered, this, &MainWindow::togglePause);
    connect(stepAct_, &QAction::triggered, this, &MainWindow::stepOnce);
    connect(stopAct_, &QAction::triggered, this, &MainWindow::stop);

    pace_ = new QComboBox;
    for (const Pace& p : kPaces) pace_->addItem(tr(p.label), p.stepsPerSecond);
    pace_->setToolTip(tb::ui::wrappedToolTip(tr("Slow motion: at most this many steps per second, to watch the "
                                                "towers and the synchronisation point step by step. Time held "
                                                "back is not training time.")));
    WheelGuard::guard(pace_);
    connect(pace_, &QComboBox::currentIndexChanged, this, [this] {
        worker_->setPace(pace_->currentData().toDouble());
        recentSteps_.clear();  // the ETA's rate starts again at the new pace
    });
}

QWidget* MainWindow::buildRunBox() {
    auto* box = new QWidget;
    auto* v = new QVBoxLayout(box);
    v->setContentsMargins(6, 4, 6, 6);
    problem_ = new QLabel;
    problem_->setObjectName("startProblem");
    problem_->setWordWrap(true);
    problem_->setTextFormat(Qt::RichText);
    problem_->setStyleSheet("#startProblem { color: #b03a2e; }");
    v->addWidget(problem_);
    auto* buttons = new QHBoxLayout;
    for (QAction* a : {startAct_, pauseAct_, stepAct_, stopAct_}) {
        auto* b = new QToolButton;
        b->setDefaultAction(a);
        b->setToolButtonStyle(Qt::ToolButtonTextOnly);
        buttons->addWidget(b);
    }
    buttons->addStretch();
    v->addLayout(buttons);
    return box;
}

void MainWindow::buildMenus() {
    auto* file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("&Open run config…"), QKeySequence::Open, this, &MainWindow::openConfig);
    file->addAction(tr("&Save run config as…"), QKeySequence::SaveAs, this, &MainWindow::saveConfig);
    file->addSeparator();
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

    auto* run = menuBar()->addMenu(tr("&Run"));
    run->addActions({startAct_, pauseAct_, stepAct_, stopAct_});
    auto* bar = addToolBar(tr("Run"));
    bar->setObjectName("runToolBar");
    bar->addActions({startAct_, pauseAct_, stepAct_, stopAct_});
    bar->addSeparator();
    auto* paceLabel = new QLabel(tr(" Pace "));
    paceLabel->setToolTip(pace_->toolTip());
    bar->addWidget(paceLabel);
    bar->addWidget(pace_);

    auto* lab = menuBar()->addMenu(tr("&Lab"));
    lab->addAction(tr("&Scaling lab…"), QKeySequence(tr("Ctrl+L")), this, [this] { openScalingLab(); });
    lab->addAction(tr("&Model view…"), QKeySequence(tr("Ctrl+M")), this, [this] { openModelView(); });
    lab->addAction(tr("&Augmented samples…"), this, [this] { openAugmentView(); });

    auto* teach = menuBar()->addMenu(tr("Les&sons"));
    const std::vector<Lesson> all = lessons(1);
    for (size_t i = 0; i < all.size(); ++i) teach->addAction(all[i].title, this, [this, i] { openLesson(int(i)); });

    auto* view = menuBar()->addMenu(tr("&View"));
    for (QDockWidget* d : findChildren<QDockWidget*>()) view->addAction(d->toggleViewAction());

    auto* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&Concepts"), this, [this] {
        auto* dialog = new ConceptsDialog(this);
        dialog->setAttribute(Qt::WA_DeleteOnClose);
        dialog->show();
    });
    help->addAction(tr("&About Towerbench"), this, [this] {
        QMessageBox::about(this, tr("About Towerbench"),
                           tr("Towerbench %1: run and see data-parallel training in the tower pattern.")
                               .arg(TB_VERSION));
    });
    updateActions();
}

void MainWindow::clearRunViews(const QStringList& towers) {
    // A pipeline's stages have one loss between them (the last stage's): no per-lane loss lines.
    charts_->reset(tb::ui::isStageLane(towers.value(0)) ? 0 : int(towers.size()));
    devices_->reset(towers);
    decision_->clear();
    predictions_->clear();
    summaryBox_->hide();
}

QWidget* MainWindow::openLesson(int index) {
    const std::vector<Lesson> all = lessons(int(std::max(1u, std::thread::hardware_concurrency())));
    if (index < 0 || size_t(index) >= all.size()) return nullptr;
    const Lesson& lesson = all[size_t(index)];
    if (lesson.sideBySide || lesson.threeWays || !lesson.compare.empty()) {  // a window of its own
        QWidget* own = nullptr;
        if (lesson.sideBySide) own = syncAsync_ ? syncAsync_ : (syncAsync_ = new SyncAsyncLesson(lesson, this));
        else if (lesson.threeWays) own = threeWays_ ? threeWays_ : (threeWays_ = new ParallelismLesson(lesson, this));
        else own = comparisons_[index] ? comparisons_[index] : (comparisons_[index] = new ComparisonLesson(lesson, this));
        own->show();
        own->raise();
        own->activateWindow();
        return own;
    }
    if (!running_ && !launcher_->running() && !follower_) {
        // The lesson's experiment on a clean slate: no banner or charts of the run before it.
        experiment_->setConfig(lesson.config);
        clearRunViews(QString::fromStdString(lesson.config.towers).split(','));
        setState(tr("Ready: %1").arg(lesson.title));
    }
    lesson_->show(lesson);
    disconnect(lesson_, &LessonPanel::setUpAgain, nullptr, nullptr);
    connect(lesson_, &LessonPanel::setUpAgain, this, [this, config = lesson.config] {
        if (!running_) experiment_->setConfig(config);
    });
    lessonDock_->show();
    lessonDock_->raise();
    return nullptr;
}

tb::ui::Explainer MainWindow::formWords() const {
    return [this](const QString& message) { return experiment_->inFormWords(message); };
}

AugmentView* MainWindow::openAugmentView() {
    if (!augmentView_) {
        augmentView_ = new AugmentView(this);
        augmentView_->setExplainer(formWords());
        augmentView_->setWindowFlag(Qt::Window);
        augmentView_->setWindowTitle(tr("Augmented samples — Towerbench"));
        tb::ui::closeOnKeys(augmentView_, tb::ui::EscapeCloses::Yes);
        fitLessonWindow(*augmentView_, QSize(900, 760));
    }
    augmentView_->setConfig(experiment_->config());
    augmentView_->show();
    augmentView_->raise();
    augmentView_->activateWindow();
    return augmentView_;
}

ModelView* MainWindow::openModelView() {
    if (!modelView_->isVisible()) fitLessonWindow(*modelView_, QSize(1300, 760));
    modelView_->show();
    modelView_->raise();
    modelView_->activateWindow();
    return modelView_;
}

ScalingLab* MainWindow::openScalingLab(const QString& sweepFolder) {
    if (!lab_) {
        lab_ = new ScalingLab(this);
        lab_->setBusyCheck([this] { return running_; });
        lab_->setExplainer(formWords());
        connect(lab_, &ScalingLab::sweepFinished, runs_, &RunsPanel::refresh);
    }
    if (!lab_->running()) lab_->setBase(experiment_->config());
    if (!sweepFolder.isEmpty()) lab_->openSweep(sweepFolder);
    lab_->show();
    lab_->raise();
    lab_->activateWindow();
    return lab_;
}

void MainWindow::updateActions() {
    // A run of several processes is followed: it stops (through mpirun) but does not pause.
    const bool processes = launcher_ && launcher_->running();
    startAct_->setEnabled(!running_ && !processes && valid_);
    startAct_->setToolTip(valid_ || running_ ? tr("Start training with this experiment (Ctrl+R)")
                                             : tb::ui::wrappedToolTip(tr("Cannot start: %1").arg(experiment_->problem())));
    pauseAct_->setEnabled(running_);
    pauseAct_->setText(paused_ ? tr("&Resume") : tr("&Pause"));
    stepAct_->setEnabled(!processes && (running_ || valid_));
    stopAct_->setEnabled(running_ || processes);
    experiment_->setEnabled(!running_ && !processes);
    const QString why = running_ ? QString() : experiment_->problemHtml();
    problem_->setText(why.isEmpty() ? QString() : tb::ui::breakable(tr("Cannot start: %1").arg(why)));
    problem_->setVisible(!why.isEmpty());
}

void MainWindow::experimentEdited(const tb::RunConfig& c, bool valid) {
    valid_ = valid;
    if (!running_) updateActions();
    if (augmentView_ && augmentView_->isVisible()) augmentView_->setConfig(c);  // it follows the form
    if (!valid) {
        diagram_->setInvalid(experiment_->problem());
        // The model view still follows the form's model: one picked before the data it takes.
        try {
            showModel(c, tb::findModel(c.model));
        } catch (const std::exception&) {
            // (An unknown model: the form says so.)
        }
        return;
    }
    // The decision view stays with the last run's regions until a new run starts.
    if (!running_) decision_->setVisible(isPlanar(c) || decision_->hasGrid());
    try {
        const tb::ModelSpec spec = tb::findModel(c.model);
        if (paramsModel_ != QString::fromStdString(c.model)) {
            // Variables' sizes for the diagram's megabytes and shards: a batch-1 replica is cheap.
            auto be = tb::makeCpuBackend(1);
            tb::Network net(spec, *be, 1);
            variableSizes_.clear();
            for (const auto& info : net.paramInfos()) variableSizes_ << info.shape.numel();
            paramsModel_ = QString::fromStdString(c.model);
        }
        showModel(c, spec);
        if (!c.stages.empty()) {  // model parallelism: the stages, not towers
            showStages(c, spec, experiment_->processes());
        } else {
            diagram_->setModel(PlacementModel::fromPlan(catalog_.makePlan(c), variableSizes_)
                                   .acrossProcesses(experiment_->processes(), c.psTasks, c.batchPerTower > 0));
        }
    } catch (const std::exception& e) {
        setState(tr("Ready"), QString::fromUtf8(e.what()));
    }
}

// Model parallelism in the diagram: the stages and their replicas, in `processes` processes
// (hybrid: stages in each process, each training its share of the batch).
void MainWindow::showStages(const tb::RunConfig& c, const tb::ModelSpec& spec, int processes) {
    PlacementModel stages = PlacementModel::fromStages(c, spec);
    stages.processes = processes;
    if (!c.stagePerProcess)
        for (int64_t& b : stages.boundaryBytes) b /= stages.processes;
    diagram_->setModel(stages);
}

// A pipeline's split, chosen as the run starts where its settings left it to the balancer: the
// running state's detail begins "stages SPEC;" (from this window's engine, or a followed run's
// chief), and the diagram and the model view draw that split of the run's settings `run`.
void MainWindow::showChosenSplit(const QString& detail, tb::RunConfig run, int processes) {
    if (!detail.startsWith(QLatin1String("stages "))) return;
    tb::RunConfig& c = run;
    c.stages = detail.section(QLatin1Char(';'), 0, 0).mid(7).toStdString();
    try {
        const tb::ModelSpec spec = tb::findModel(c.model);
        showStages(c, spec, processes);
        showModel(c, spec);  // the model view's stage bands too
    } catch (const std::exception&) {
        // The form's own picture stays (the run refuses a split that does not read).
    }
}

// The model view: the form's model, its stages where --stages gives their layers (a balanced
// split is drawn once the run has chosen it).
void MainWindow::showModel(const tb::RunConfig& c, const tb::ModelSpec& spec) {
    std::vector<std::pair<int, int>> bands;
    if (!c.stages.empty()) {
        std::vector<std::string> names;
        for (const tb::LayerSpec& l : spec.layers) names.push_back(l.name);
        try {
            const tb::StagePlan plan = tb::parseStagePlan(c.stages, names);
            if (!plan.balanced)
                for (const tb::Stage& s : plan.stages) bands.push_back({s.first, s.last});
        } catch (const std::exception&) {
            // (The form says why the stages do not read.)
        }
    }
    const bool newModel = modelView_->modelName() != QString::fromStdString(spec.name);
    modelView_->setModel(spec, bands);
    if (newModel && !running_) showSavedLayerTimes(spec.name);  // (the index names a run's model by its spec)
}

// Where the step went in the newest saved run of `model` that profiled one (the last layer_times
// line of its metrics file), named in the view, until a run of this window measures its own.
// A few runs are looked at: a run too short to profile has none.
void MainWindow::showSavedLayerTimes(const std::string& model) {
    if (!runs_) return;  // (the form's first model, before the Runs tab exists)
    int looked = 0;
    for (const tb::RunRecord& r : runs_->allRuns()) {
        if (r.model != model || r.state == "running") continue;
        if (++looked > 3) return;
        std::ifstream in(r.path + "/metrics.jsonl", std::ios::binary);
        tb::MetricsLine m;
        const QString run = tr("%1 (%2)").arg(QString::fromStdString(r.name), QString::fromStdString(r.plan));
        if (tb::lastLayerTimes(in, m) && modelView_->showLayerTimes(m.layers, m.step.step, run)) return;
    }
}

void MainWindow::start() { launch(false); }

void MainWindow::showSteps(const std::vector<tb::StepMetrics>& steps) {
    if (steps.empty()) return;
    ++framesDrawn_;
    for (const tb::StepMetrics& m : steps) {
        charts_->addStep(m);  // every point is plotted
        if (m.layerTimes) modelView_->showLayerTimes(*m.layerTimes, m.step);
    }
    // Busy fractions, the async lanes and the diagram's "slowest" need every report (the
    // timeline keeps its own window); the diagram draws and the status bar shows the latest.
    devices_->addSteps(steps);
    for (const tb::StepMetrics& step : steps) diagram_->showStep(step);
    const tb::StepMetrics& m = steps.back();
    const QLocale locale;
    lastStep_ = m.step;
    totalSteps_ = m.totalSteps;
    setReadout(stepLabel_, tr("step %1 / %2").arg(locale.toString(m.step), locale.toString(m.totalSteps)));
    setReadout(epochLabel_, tr("epoch %1").arg(locale.toString(m.epoch, 'f', 2)));
    // The run's average, the same figure as the speed chart's "whole run" and the summary's.
    setReadout(speedLabel_, tr("%1 ex/s").arg(locale.toString(charts_->runExamplesPerSec(), 'f', 0)));
    const qint64 now = wall_.elapsed();
    recentSteps_.emplace_back(now, m.step);
    while (recentSteps_.size() > 2 && now - recentSteps_.front().first > 5000) recentSteps_.pop_front();
    showStepsTaken();
}

void MainWindow::followRun(const QString& folder) {
    if (launcher_->running()) {
        showError(tr("Processes started here are training; stop them before following another run."));
        return;
    }
    followFolder(folder, true);
}

void MainWindow::followFolder(const QString& folder, bool takeSettings) {
    if (running_) {
        showError(tr("A run is training in this window; stop it before following another."));
        return;
    }
    // The followed run's settings and processes in the form, so the diagram draws its plan (a run
    // of several processes started here has the form's own, which stay as they are). Kept for its
    // chosen split too: the form of a followed run may be edited while it trains.
    tb::RunConfig run = experiment_->config();
    int processes = experiment_->processes();
    if (takeSettings) {
        try {
            run = tb::RunFolder::resumeConfig(folder.toStdString());
            if (!mayReplaceForm(run, tr("Follow"))) return;
            experiment_->setConfig(run);
            processes = tb::readRunFolder(folder.toStdString()).processes;
            experiment_->setProcesses(processes);
            markFormKept();
        } catch (const tb::Error& e) {
            showError(QString::fromUtf8(e.what()));
            return;
        }
    }
    ended_.reset();
    follower_ = std::make_unique<RunFollower>(folder);
    predictions_->dropped()->setRunFolder(folder);
    const QStringList towers = follower_->towers();
    auto start = [this, towers] {
        charts_->reset(tb::ui::isStageLane(towers.value(0)) ? 0 : int(towers.size()));
        devices_->reset(towers);
        recentSteps_.clear();
    };
    start();
    summaryBox_->hide();
    decision_->clear();
    decision_->hide();
    predictions_->clear();
    setState(tr("Following %1").arg(QDir(folder).dirName()), folder);
    connect(follower_.get(), &RunFollower::reset, this, start);
    connect(follower_.get(), &RunFollower::steps, this, &MainWindow::showSteps);
    connect(follower_.get(), &RunFollower::evaluated, charts_, &ChartsPanel::addEval);
    connect(follower_.get(), &RunFollower::evaluated, predictions_, &PredictionsPanel::showEval);  // the matrix
    connect(follower_.get(), &RunFollower::predictionsRead, this, [this](const tb::EvalResult& r) {
        predictions_->showEval(r);
        if (predictions_->hasPredictions()) predictionsDock_->raise();
    });
    connect(follower_.get(), &RunFollower::problem, predictions_, &PredictionsPanel::showProblem);
    connect(follower_.get(), &RunFollower::layerTimes, modelView_,
            [this](const tb::LayerTimes& times, int64_t step) { modelView_->showLayerTimes(times, step); });
    // The banner a run in this window ends with; the state line keeps saying it was followed.
    connect(follower_.get(), &RunFollower::summaryRead, this,
            [this](const QString& json, bool stopped) { showSummary(json, stopped, true); });
    connect(follower_.get(), &RunFollower::stateChanged, this,
            [this, folder, run, processes](const QString& state, const QString& detail) {
        if (state == "running") showChosenSplit(detail, run, processes);
        if (state != "finished" && state != "stopped" && state != "failed") return;
        setState(tr("Followed run %1").arg(state), detail.isEmpty() ? folder : detail);
        diagram_->clearActivity();
        follower_->awaitSummary();
        ended_ = std::move(follower_);  // kept (this very signal is its own) for the predictions to come
    });
    follower_->poll();  // what is there already
}

void MainWindow::resumeRun(const QString& folder) {
    if (running_ || launcher_->running()) return;
    try {
        tb::RunConfig c = tb::RunFolder::resumeConfig(folder.toStdString());
        if (const QString why = RunsPanel::noCheckpoint(folder); !why.isEmpty()) {  // (before the form is touched)
            showError(why);
            return;
        }
        const tb::RunRecord r = tb::readRunFolder(folder.toStdString());
        if (r.state == "finished") {  // it trained all its steps: how many more?
            const int64_t total = askSteps_(r.steps);
            if (total <= r.steps) return;
            c.steps = total;
        }
        if (!mayReplaceForm(c, tr("Resume"))) return;
        experiment_->setConfig(c);
        // It goes on as the processes it trained as (mpirun -np; plan.json), whatever the form held:
        // with 2 there, a run of one process was started anew as two instead of resumed.
        experiment_->setProcesses(r.processes);  // (the form refuses too many)
        markFormKept();
    } catch (const tb::Error& e) {
        showError(QString::fromUtf8(e.what()));
        return;
    }
    // A run that failed for its settings (a model that cannot take its data) is not tried again:
    // the form, now holding them, says why, and so does this.
    if (!experiment_->isValid()) {
        showError(tr("%1 cannot be resumed: %2").arg(QDir(folder).dirName(), experiment_->problem()));
        return;
    }
    launch(false, folder);
}

void MainWindow::launch(bool startPaused, const QString& resumeDir) {
    if (running_ || !experiment_->isValid()) return;
    if (lab_ && lab_->running()) {  // both would run on the same cores, and the sweep would measure both
        showError(tr("A scaling sweep is measuring in the scaling lab: training beside it would skew its numbers. "
                     "Stop the sweep first."));
        return;
    }
    if (launcher_->running()) return;
    follower_.reset();  // a run of this window's own takes the views
    ended_.reset();
    const tb::RunConfig c = experiment_->config();
    QSettings().setValue("experiment/last", QByteArray::fromStdString(c.toJson().dump()));
    markFormKept();
    if (experiment_->processes() > 1) {
        launchProcesses(c, resumeDir);
        return;
    }
    const tb::DeploymentPlan plan = catalog_.makePlan(c);  // tb::makePlan's, on a real catalog
    pendingTowers_ = stageLanes(c);
    if (pendingTowers_.isEmpty())
        for (const auto& d : plan.towers) pendingTowers_ << QString::fromStdString(d.str());
    pendingPlanar_ = isPlanar(c);
    lastError_.clear();
    running_ = true;
    paused_ = startPaused;
    stopping_ = training_ = false;
    lastStep_ = 0;
    updateActions();
    setState(tr("Loading data…"), QString::fromStdString(c.data));
    worker_->expectRun();
    if (startPaused) worker_->stepOnce();  // kept for the run: it starts paused and takes one step
    emit runRequested(c, resumeDir);
}

QString MainWindow::launchedFolder() const { return launcher_->folder(); }

bool MainWindow::processesRunning() const { return launcher_->running(); }

void MainWindow::launchProcesses(const tb::RunConfig& c, const QString& resumeDir) {
    const int n = experiment_->processes();
    const QString why = resumeDir.isEmpty() ? launcher_->start(c, n, experiment_->hostfile())
                                            : launcher_->resume(resumeDir, n, experiment_->hostfile(), c.steps);
    if (!why.isEmpty()) {
        showError(why);
        return;
    }
    summaryBox_->hide();
    stopping_ = followedLaunch_ = false;
    setState(tr("Starting %1 processes…").arg(n), launcher_->commandLine());
    updateActions();
}

void MainWindow::togglePause() {
    if (!running_) return;
    paused_ = !paused_;
    if (paused_) worker_->pause();
    else worker_->resume();
    recentSteps_.clear();
    updateActions();
    showStepsTaken();
}

void MainWindow::stepOnce() {
    if (!running_) {
        launch(true);
        return;
    }
    paused_ = true;
    worker_->stepOnce();
    updateActions();
    showStepsTaken();
}

void MainWindow::stop() {
    if (launcher_->running()) {  // mpirun passes the first on (stop after the step); the second ends the job
        setState(stopping_ ? tr("Ending the processes…") : tr("Stopping the processes after the step in progress…"));
        stopping_ = true;
        launcher_->stop();
        return;
    }
    if (!running_) return;
    // The first Stop ends training within a step and the run then reports its test accuracy; a
    // second Stop skips that final evaluation too.
    if (stopping_) {
        worker_->abort();
        setState(tr("Stopping without the final evaluation…"));
    } else {
        worker_->stop();
        setState(tr("Stopping after the step in progress…"));
    }
    paused_ = false;
    stopping_ = true;
    setReadout(etaLabel_, {});
    updateActions();
}

void MainWindow::setState(const QString& text, const QString& detail) {
    if (text != stateLabel_->text()) emit stateChanged(text);
    stateLabel_->setText(text);
    stateLabel_->setToolTip(detail.isEmpty() ? text : QStringLiteral("<p>%1</p>").arg(detail.toHtmlEscaped()));
}

QString MainWindow::stateText() const { return stateLabel_->text(); }
QString MainWindow::etaText() const { return etaLabel_->text(); }
QString MainWindow::summaryText() const { return summary_->text(); }

// The state and ETA while training: paused, or running at the rate of the last seconds.
void MainWindow::showStepsTaken() {
    if (!running_ || !training_ || stopping_) return;
    const QLocale locale;
    if (paused_) {
        setState(tr("Paused at step %1").arg(locale.toString(lastStep_)),
                 tr("Step (Ctrl+T) takes one more step; Resume (Ctrl+P) goes on."));
        setReadout(etaLabel_, tr("ETA: paused"));
        return;
    }
    setState(tr("Running"), runDetail_);
    if (recentSteps_.size() < 2 || recentSteps_.back().first == recentSteps_.front().first) return;
    const double rate = double(recentSteps_.back().second - recentSteps_.front().second) /
                        (double(recentSteps_.back().first - recentSteps_.front().first) / 1000.0);
    if (rate > 0) setReadout(etaLabel_, tr("ETA %1").arg(duration(double(totalSteps_ - lastStep_) / rate)));
}

void MainWindow::showSummary(const QString& summaryJson, bool stopped, bool followed) {
    evalBusy_->hide();
    setReadout(etaLabel_, {});
    const QJsonObject j = QJsonDocument::fromJson(summaryJson.toUtf8()).object();
    const QLocale locale;
    // The run's final figures, everywhere they show: the summary's.
    charts_->finishRun(j["examples_per_sec"].toDouble());
    setReadout(speedLabel_, tr("%1 ex/s").arg(locale.toString(j["examples_per_sec"].toDouble(), 'f', 0)));
    std::vector<double> towerBusy;
    for (const QJsonValue& b : j["tower_busy"].toArray()) towerBusy.push_back(b.toDouble());
    devices_->finishRun(towerBusy);
    const qint64 steps = j["steps"].toInteger();
    const bool async = j["plan"].toObject()["update"].toString() == QLatin1String("async");
    QString text = stopped ? tr("<b>Stopped</b> at step %1 of %2 after %3 of training")
                                 .arg(locale.toString(steps), locale.toString(totalSteps_),
                                      duration(j["train_seconds"].toDouble()))
                           : (steps == 1 ? tr("<b>Finished</b> %1 step in %2 of training")
                                         : tr("<b>Finished</b> %1 steps in %2 of training"))
                                 .arg(locale.toString(steps), duration(j["train_seconds"].toDouble()));
    text += tr(" (%1 epochs; pauses, slow motion, evaluations and checkpoints not counted): %2 examples/s on "
               "average.")
                .arg(locale.toString(j["epochs"].toDouble(), 'f', 2),
                     locale.toString(j["examples_per_sec"].toDouble(), 'f', 0));
    // Whole sentences, each begun with a capital, whichever figures the run has.
    // (A figure the summary lacks is not shown as 0: a followed run's summary is another writer's.)
    const QString test = !j["test_accuracy"].isDouble() ? tr("no test evaluation (skipped)")
                                                        : tr("test accuracy <b>%1</b>").arg(percent(j["test_accuracy"].toDouble()));
    if (j["validation_accuracy"].isDouble())
        text += tr(" Validation accuracy %1, %2.").arg(percent(j["validation_accuracy"].toDouble()), test);
    else text += QLatin1Char(' ') + test.at(0).toUpper() + test.mid(1) + QLatin1Char('.');
    QStringList busy;
    for (const QJsonValue& b : j["tower_busy"].toArray()) busy << percent(b.toDouble());
    if (j["stages"].isString() && !busy.isEmpty()) {  // a pipeline's lanes are its stages (and replicas)
        // Replica r's stage s is lane s + S r (docs/model-parallelism.md): the stages of each replica.
        const int replicas = std::max(1, j["stage_replicas"].toInt(1));
        const qsizetype stages = busy.size() % replicas == 0 ? busy.size() / replicas : busy.size();
        text += tr(" Stages busy %1 of the time").arg(busy.mid(0, stages).join(QStringLiteral(" / ")));
        for (qsizetype r = 1; stages * (r + 1) <= busy.size(); ++r) {
            if (r == 1) text += tr(" in replica 1");
            text += tr(", %1 in replica %2").arg(busy.mid(r * stages, stages).join(QStringLiteral(" / ")), QString::number(r + 1));
        }
        // (-1 where no step after the first was timed: a run stopped at its first step)
        const double bubble = j["bubble_fraction"].toDouble(-1);
        text += bubble >= 0 ? tr("; the pipeline's bubble idled them %1.").arg(percent(bubble)) : QStringLiteral(".");
    } else if (busy.size() == 1) {
        text += tr(" The tower was busy %1 of the time.").arg(busy.front());
    } else if (!busy.isEmpty()) {
        text += tr(" Towers busy %1 of the time.").arg(busy.join(QStringLiteral(" / ")));
    }
    if (async) {
        // (That the run is not reproducible, the note over the charts says.)
        text += tr(" Mean staleness %1 updates.")
                    .arg(locale.toString(j["mean_staleness"].toDouble(), 'f', 2));
    }
    if (const qint64 dropped = j["dropped_reports"].toInteger(); dropped > 0)
        text += tr(" <b>%n step report(s) did not reach the window</b> (it fell behind): its charts, timeline and "
                   "profile are short by them; the run folder's metrics file has every step.",
                   nullptr, int(std::min<qint64>(dropped, INT_MAX)));
    summary_->setText(text);
    summaryBox_->show();
    if (!followed) setState(stopped ? tr("Stopped at step %1").arg(locale.toString(steps)) : tr("Finished"));
}

void MainWindow::showError(const QString& message) {
    lastError_ = message;
    evalBusy_->hide();
    setReadout(etaLabel_, {});
    // Window-modal and non-blocking: the event loop (and a test driving it) keeps running.
    auto* box = new QMessageBox(QMessageBox::Warning, tr("Towerbench"), message, QMessageBox::Ok, this);
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->open();
}

bool MainWindow::loadConfigFile(const QString& path) {
    tb::RunConfig c;
    try {
        c.loadFile(path.toStdString());
    } catch (const std::exception& e) {
        showError(QString::fromUtf8(e.what()));
        return false;
    }
    experiment_->setConfig(c);
    openedKeys_ = c.keysFrom(c.file);
    markFormKept();
    return true;
}

bool MainWindow::saveConfigFile(const QString& path) {
    std::ofstream f(path.toStdString());
    f << experiment_->config().changes(openedKeys_).dump(2) << "\n";
    f.close();
    if (!f) {
        showError(tr("%1: could not be written").arg(path));
        return false;
    }
    markFormKept();
    return true;
}

void MainWindow::openConfig() {
    const QString path =
        tb::ui::chooseFile(this, tb::ui::FileChoice::Open, tr("Open run config"), sampleConfigsDir(), tr("Run configs (*.json)"));
    if (!path.isEmpty()) loadConfigFile(path);
}

void MainWindow::saveConfig() {
    QString path = tb::ui::chooseFile(this, tb::ui::FileChoice::Save, tr("Save run config"), QDir::homePath(), tr("Run configs (*.json)"));
    if (path.isEmpty()) return;
    if (QFileInfo(path).suffix().isEmpty()) path += QStringLiteral(".json");
    saveConfigFile(path);
}

void MainWindow::fitToScreen() {
    const QRect avail = screen()->availableGeometry();
    // Small screens get all of it (maximised, where a window manager does that), large ones
    // most of it, centred; the frame (title bar, borders, where known yet) included.
    const QSize frame = frameGeometry().size() - geometry().size();
    const QSize size = (avail.width() <= 1600 ? avail.size() : avail.size() * 0.85) - frame;
    setGeometry(QStyle::alignedRect(Qt::LeftToRight, Qt::AlignCenter, size, avail));
    if (avail.width() <= 1600) setWindowState(windowState() | Qt::WindowMaximized);
    // The form as wide as its widest row plus the scroll bar it may need (never a horizontal
    // one); the devices panel as wide as it asks, within a quarter of the window.
    fitFormWidth();
    const int formWidth = scroll_->minimumWidth();
    const int devicesWidth = std::min(devices_->sizeHint().width(), size.width() / 4);
    resizeDocks({left_, right_}, {formWidth, devicesWidth}, Qt::Horizontal);
}

void MainWindow::fitFormWidth() {
    // Its size hint, not its minimum: a combo box's minimum would cut its longest item. Never
    // more than 40% of the screen, whatever a field holds: the window must not outgrow the
    // screen (long texts are the fields' to elide).
    const int wanted = experiment_->sizeHint().width() + scroll_->verticalScrollBar()->sizeHint().width() +
                       2 * scroll_->frameWidth();
    scroll_->setMinimumWidth(std::min(wanted, screen()->availableGeometry().width() * 2 / 5));
}

bool MainWindow::eventFilter(QObject* watched, QEvent* e) {
    // The form's rows changed (another config, GPUs shown, the advanced settings unfolded):
    // its dock follows its widest row, so the form never scrolls sideways.
    if (watched == experiment_ && e->type() == QEvent::LayoutRequest) fitFormWidth();
    return QMainWindow::eventFilter(watched, e);
}

void MainWindow::showEvent(QShowEvent* e) {
    QMainWindow::showEvent(e);
    fitFormWidth();
    if (fitOnShow_ || !screen()->availableGeometry().contains(frameGeometry())) fitToScreen();
    fitOnShow_ = false;
}

bool MainWindow::askToQuit() {
    if (confirmQuit_) return confirmQuit_();
    const QString question =
        running_ ? tr("A run is in progress (step %1 of %2). Quitting stops it without the final evaluation, and "
                      "its charts close with the window.")
                 : tr("Processes are training (step %1 of %2). Quitting stops them after their step; they "
                      "evaluate and write their summary into the run's folder.");
    QMessageBox box(QMessageBox::Question, tr("Quit Towerbench?"), QString(), QMessageBox::NoButton, this);
    QAbstractButton* quit = box.addButton(running_ ? tr("Stop the run and quit") : tr("Stop the processes and quit"),
                                          QMessageBox::DestructiveRole);
    QPushButton* keep = box.addButton(tr("Keep training"), QMessageBox::RejectRole);
    box.setDefaultButton(keep);
    box.setEscapeButton(keep);
    // The run trains on behind the question, so its step count does too.
    const auto describe = [&] {
        box.setText(question.arg(QLocale().toString(lastStep_), QLocale().toString(totalSteps_)));
    };
    describe();
    QTimer tick;
    connect(&tick, &QTimer::timeout, &box, describe);
    tick.start(250);
    box.exec();
    return box.clickedButton() == quit;
}

void MainWindow::closeEvent(QCloseEvent* e) {
    if ((running_ || launcher_->running()) && !askToQuit()) {
        e->ignore();
        return;
    }
    QSettings settings;
    settings.setValue("window/geometry", saveGeometry());
    settings.setValue("window/state", saveState());
    if (launcher_->running()) {
        // The processes stop after their step and report; the window waits for mpirun (up to a
        // minute; its destructor then ends the job).
        if (!stopping_) stop();
        QEventLoop loop;
        connect(launcher_, &ProcessLauncher::finished, &loop, &QEventLoop::quit);
        QTimer::singleShot(60000, &loop, &QEventLoop::quit);
        if (launcher_->running()) loop.exec();
    }
    if (running_) {
        // Stop the run and wait for the worker to return (a step at most), so nothing outlives us.
        worker_->abort();
        QEventLoop loop;
        connect(this, &MainWindow::runEnded, &loop, &QEventLoop::quit);
        if (running_) loop.exec();
    }
    e->accept();
}
