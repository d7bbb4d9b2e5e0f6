#include "main_window.hpp"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDockWidget>
#include <QFile>
#include <QFileDialog>
#include <QJsonDocument>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QScrollArea>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QToolBar>
#include <fstream>

#include "backend/backend.hpp"
#include "charts_panel.hpp"
#include "devices_panel.hpp"
#include "engine_worker.hpp"
#include "experiment_panel.hpp"
#include "nn/model_spec.hpp"
#include "nn/network.hpp"
#include "placement_diagram.hpp"

MainWindow::MainWindow(DeviceCatalog catalog, const TelemetryFactory& telemetry, QWidget* parent)
    : QMainWindow(parent), catalog_(std::move(catalog)) {
    setWindowTitle(tr("Towerbench"));
    setWindowIcon(QIcon(":/towerbench.svg"));
    EngineWorker::registerTypes();

    experiment_ = new ExperimentPanel(catalog_);
    auto* scroll = new QScrollArea;
    scroll->setWidget(experiment_);
    scroll->setWidgetResizable(true);
    auto* left = new QDockWidget(tr("Experiment"), this);
    left->setObjectName("experimentDock");
    left->setWidget(scroll);
    addDockWidget(Qt::LeftDockWidgetArea, left);

    diagram_ = new PlacementDiagram;
    charts_ = new ChartsPanel;
    auto* centre = new QSplitter(Qt::Vertical);
    centre->addWidget(diagram_);
    centre->addWidget(charts_);
    centre->setStretchFactor(1, 2);
    setCentralWidget(centre);

    devices_ = new DevicesPanel(catalog_);
    auto* right = new QDockWidget(tr("Devices and timeline"), this);
    right->setObjectName("devicesDock");
    right->setWidget(devices_);
    addDockWidget(Qt::RightDockWidgetArea, right);
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

    stepLabel_ = new QLabel;
    epochLabel_ = new QLabel;
    speedLabel_ = new QLabel;
    etaLabel_ = new QLabel;
    for (QLabel* l : {stepLabel_, epochLabel_, speedLabel_, etaLabel_}) statusBar()->addPermanentWidget(l);
    statusBar()->showMessage(tr("Ready"));

    worker_ = new EngineWorker;
    worker_->moveToThread(&thread_);
    connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);
    connect(this, &MainWindow::runRequested, worker_, &EngineWorker::run);  // queued: another thread
    connect(worker_, &EngineWorker::started, this, [this](const QString& plan) {
        statusBar()->showMessage(tr("Running: %1").arg(plan));
    });
    connect(worker_, &EngineWorker::stepsReady, this, [this] {
        const std::vector<tb::StepMetrics> steps = worker_->takeSteps();
        if (steps.empty()) return;
        for (const tb::StepMetrics& m : steps) charts_->addStep(m);  // every point is plotted
        // The timeline shows the last few steps; the diagram and status bar the latest one.
        for (size_t i = steps.size() > size_t(TimelineView::kMaxSteps) ? steps.size() - TimelineView::kMaxSteps : 0;
             i < steps.size(); ++i)
            devices_->addStep(steps[i]);
        const tb::StepMetrics& m = steps.back();
        diagram_->showStep(m);
        stepLabel_->setText(tr("step %1/%2").arg(m.step).arg(m.totalSteps));
        epochLabel_->setText(tr("epoch %1").arg(m.epoch, 0, 'f', 2));
        speedLabel_->setText(tr("%1 ex/s").arg(m.examplesPerSec, 0, 'f', 0));
        const double perStep = m.elapsedSeconds / double(std::max<int64_t>(1, m.step));
        etaLabel_->setText(tr("ETA %1 s").arg(double(m.totalSteps - m.step) * perStep, 0, 'f', 0));
    });
    connect(worker_, &EngineWorker::evaluated, charts_, &ChartsPanel::addEval);
    connect(worker_, &EngineWorker::finished, this, [this](const QString& summary, bool stopped) {
        lastSummary_ = summary;
        const auto j = QJsonDocument::fromJson(summary.toUtf8());
        statusBar()->showMessage(stopped ? tr("Stopped") : tr("Finished: test accuracy %1%")
                                                                  .arg(100 * j["test_accuracy"].toDouble(), 0, 'f', 2));
        running_ = paused_ = false;
        diagram_->clearActivity();
        updateActions();
        emit runEnded();
    });
    connect(worker_, &EngineWorker::failed, this, [this](const QString& message) {
        running_ = paused_ = false;
        diagram_->clearActivity();
        updateActions();
        showError(message);
        emit runEnded();
    });
    thread_.start();

    connect(experiment_, &ExperimentPanel::configChanged, this, &MainWindow::configChanged);
    buildMenus();

    QSettings settings;
    restoreGeometry(settings.value("window/geometry").toByteArray());
    restoreState(settings.value("window/state").toByteArray());
    const QByteArray last = settings.value("experiment/last").toByteArray();
    tb::RunConfig c = experiment_->config();
    if (!last.isEmpty()) {
        try {
            const auto j = nlohmann::json::parse(last.toStdString());
            for (const auto& [k, v] : j.items()) c.set(k, v, "saved settings");
            experiment_->setConfig(c);
        } catch (const std::exception&) {
            // Settings from another version: keep the defaults.
        }
    }
    configChanged(experiment_->config(), experiment_->isValid());
}

MainWindow::~MainWindow() {
    worker_->abort();
    thread_.quit();
    thread_.wait();
}

void MainWindow::buildMenus() {
    auto* file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("&Open run config…"), QKeySequence::Open, this, &MainWindow::openConfig);
    file->addAction(tr("&Save run config as…"), QKeySequence::SaveAs, this, &MainWindow::saveConfig);
    file->addSeparator();
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

    auto* run = menuBar()->addMenu(tr("&Run"));
    startAct_ = run->addAction(tr("&Start"), QKeySequence(Qt::CTRL | Qt::Key_R), this, &MainWindow::start);
    pauseAct_ = run->addAction(tr("&Pause"), QKeySequence(Qt::CTRL | Qt::Key_P), this, &MainWindow::togglePause);
    stepAct_ = run->addAction(tr("S&tep"), QKeySequence(Qt::CTRL | Qt::Key_T), this, &MainWindow::stepOnce);
    stopAct_ = run->addAction(tr("St&op"), QKeySequence(Qt::CTRL | Qt::Key_Period), this, &MainWindow::stop);
    startAct_->setToolTip(tr("Start training with this experiment (Ctrl+R)"));
    pauseAct_->setToolTip(tr("Pause after the step in progress, or resume (Ctrl+P)"));
    stepAct_->setToolTip(tr("Run exactly one synchronous step, then pause: watch the towers meet (Ctrl+T)"));
    stopAct_->setToolTip(tr("Stop after the step in progress and evaluate (Ctrl+.)"));
    auto* bar = addToolBar(tr("Run"));
    bar->setObjectName("runToolBar");
    bar->addActions({startAct_, pauseAct_, stepAct_, stopAct_});

    auto* view = menuBar()->addMenu(tr("&View"));
    for (QDockWidget* d : findChildren<QDockWidget*>()) view->addAction(d->toggleViewAction());

    auto* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&Concepts"), this, [this] {
        QMessageBox::information(
            this, tr("Concepts"),
            tr("<p><b>Tower</b>: one replica of the model on one device, computing gradients on its own slice "
               "of the batch.</p><p><b>Synchronisation point</b>: where the towers' gradients meet and are "
               "averaged before one update is applied; every step waits there for the slowest tower.</p>"
               "<p><b>Parameter server</b>: the holder of the variables that applies updates; asynchronous "
               "towers push to it without waiting for each other.</p><p><b>Staleness</b>: how many updates "
               "others applied between a tower reading the variables and pushing its gradients.</p>"));
    });
    help->addAction(tr("&About Towerbench"), this, [this] {
        QMessageBox::about(this, tr("About Towerbench"),
                           tr("Towerbench %1: run and see data-parallel training in the tower pattern.")
                               .arg(TB_VERSION));
    });
    updateActions();
}

void MainWindow::updateActions() {
    startAct_->setEnabled(!running_ && valid_);
    pauseAct_->setEnabled(running_);
    pauseAct_->setText(paused_ ? tr("&Resume") : tr("&Pause"));
    stepAct_->setEnabled(running_);
    stopAct_->setEnabled(running_);
    experiment_->setEnabled(!running_);
}

void MainWindow::configChanged(const tb::RunConfig& c, bool valid) {
    valid_ = valid;
    if (!running_) updateActions();
    if (!valid) return;
    try {
        if (paramsModel_ != QString::fromStdString(c.model)) {
            // Parameter count for the diagram's "variables: N MB": a batch-1 replica is cheap.
            auto be = tb::makeCpuBackend(1);
            tb::Network net(tb::findModel(c.model), *be, 1);
            paramCount_ = net.paramCount();
            paramsModel_ = QString::fromStdString(c.model);
        }
        diagram_->setModel(PlacementModel::fromPlan(catalog_.makePlan(c), paramCount_));
    } catch (const std::exception& e) {
        statusBar()->showMessage(QString::fromUtf8(e.what()));
    }
}

void MainWindow::start() {
    if (running_ || !experiment_->isValid()) return;
    const tb::RunConfig c = experiment_->config();
    QSettings().setValue("experiment/last", QByteArray::fromStdString(c.toJson().dump()));
    const tb::DeploymentPlan plan = catalog_.makePlan(c);  // tb::makePlan's, on a real catalog
    QStringList devices;
    for (const auto& d : plan.towers) devices << QString::fromStdString(d.str());
    charts_->reset(plan.towerCount());
    devices_->reset(devices);
    lastError_.clear();
    running_ = true;
    paused_ = false;
    stopping_ = false;
    updateActions();
    statusBar()->showMessage(tr("Loading data…"));
    worker_->expectRun();
    emit runRequested(c);
}

void MainWindow::togglePause() {
    if (!running_) return;
    paused_ = !paused_;
    if (paused_) worker_->pause();
    else worker_->resume();
    updateActions();
}

void MainWindow::stepOnce() {
    if (!running_) return;
    paused_ = true;
    worker_->stepOnce();
    updateActions();
}

void MainWindow::stop() {
    if (!running_) return;
    // The first Stop ends training within a step and the run then reports its test accuracy; a
    // second Stop skips that final evaluation too.
    if (stopping_) {
        worker_->abort();
        statusBar()->showMessage(tr("Stopping without the final evaluation…"));
    } else {
        worker_->stop();
        statusBar()->showMessage(tr("Stopping: the final evaluation runs next (Stop again to skip it)…"));
    }
    stopping_ = true;
}

void MainWindow::showError(const QString& message) {
    lastError_ = message;
    statusBar()->showMessage(message);
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
    return true;
}

void MainWindow::openConfig() {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open run config"), {}, tr("Run configs (*.json)"));
    if (!path.isEmpty()) loadConfigFile(path);
}

void MainWindow::saveConfig() {
    const QString path = QFileDialog::getSaveFileName(this, tr("Save run config"), {}, tr("Run configs (*.json)"));
    if (path.isEmpty()) return;
    std::ofstream f(path.toStdString());
    f << experiment_->config().toJson().dump(2) << "\n";
    if (!f) showError(tr("%1: could not be written").arg(path));
}

void MainWindow::closeEvent(QCloseEvent* e) {
    QSettings settings;
    settings.setValue("window/geometry", saveGeometry());
    settings.setValue("window/state", saveState());
    if (running_) {
        // Stop the run and wait for the worker to return (a step at most), so nothing outlives us.
        worker_->abort();
        QEventLoop loop;
        connect(this, &MainWindow::runEnded, &loop, &QEventLoop::quit);
        if (running_) loop.exec();
    }
    e->accept();
}
