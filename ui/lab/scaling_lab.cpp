#include "lab/scaling_lab.hpp"

#include <qcustomplot.h>

#include <QApplication>
#include <QCheckBox>
#include <QCloseEvent>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScopeGuard>
#include <QScreen>
#include <QScrollArea>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QThread>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>

#include "file_dialogs.hpp"
#include "charts/chart_style.hpp"
#include "data/dataset.hpp"
#include "engine/run_folder.hpp"
#include "engine/run_setup.hpp"
#include "experiment/form_widgets.hpp"
#include "devices/phase_colors.hpp"
#include "util/error.hpp"
#include "view_format.hpp"
#include "window_keys.hpp"

namespace {

using tb::ui::formatCount;
using tb::ui::formatMs;

QString strategyName(const std::string& s) {
    if (s == "mean") return QObject::tr("CPU holder (mean)");
    if (s == "allreduce") return QObject::tr("all-reduce");
    if (s == "async") return QObject::tr("async parameter server");
    if (s.starts_with("average:")) return QObject::tr("average every %1").arg(QString::fromStdString(s.substr(8)));
    if (s == "naive") return QObject::tr("naive pipeline (stages)");
    if (const std::optional<tb::PipelineStrategy> p = tb::pipelineStrategy(s))
        return QObject::tr("%1 pipeline, M = %2 (stages)").arg(QString::fromStdString(p->schedule)).arg(p->microBatches);
    return QString::fromStdString(s);
}

QColor strategyColour(const std::string& s) {
    if (s == "mean") return tb::ui::kBlue;
    if (s == "allreduce") return tb::ui::kGreen;
    if (s == "async") return tb::ui::kOrange;
    if (s == "naive") return tb::ui::kBrown;
    if (s.starts_with("gpipe:")) return tb::ui::kTeal;
    if (s.starts_with("1f1b:")) return tb::ui::kRed;
    return tb::ui::kPurple;
}

// The stacked bar's layers, bottom up, in a step's order (phase_colors.hpp's colours).
struct Layer {
    const char* name;
    tb::ui::Phase colour;
    double tb::StepProfile::*seconds;
};
const Layer kLayers[] = {{"data", tb::ui::Phase::Data, &tb::StepProfile::dataWait},
                         {"compute", tb::ui::Phase::Backward, &tb::StepProfile::compute},
                         {"straggle", tb::ui::Phase::Straggle, &tb::StepProfile::straggle},
                         {"wait", tb::ui::Phase::Wait, &tb::StepProfile::wait},
                         {"reduce", tb::ui::Phase::Reduce, &tb::StepProfile::reduce},
                         {"apply", tb::ui::Phase::Apply, &tb::StepProfile::apply}};

}  // namespace

void SweepWorker::registerTypes() {
    qRegisterMetaType<SweepProgress>();
    qRegisterMetaType<tb::SweepSettings>();
    qRegisterMetaType<tb::RunConfig>();
}

void SweepWorker::stop() {
    std::lock_guard lock(mutex_);
    if (sweep_) sweep_->stop();
    else pending_ = Pending::Stop;  // queued, not yet begun: it begins stopped
}

void SweepWorker::abort() {
    std::lock_guard lock(mutex_);
    if (sweep_) sweep_->abort();
    else pending_ = Pending::Abort;
}

void SweepWorker::run(const tb::RunConfig& base, const tb::SweepSettings& settings, const QString& folder) {
    try {
        tb::ScalingSweep sweep(base, settings, folder.toStdString());
        // Whatever way run() ends, the GUI thread's stop() never reaches a sweep that is gone.
        struct Forget {
            SweepWorker* w;
            ~Forget() {
                std::lock_guard lock(w->mutex_);
                w->sweep_ = nullptr;
                w->pending_ = Pending::None;
            }
        };
        const int total = int(tb::sweepPoints(base, settings).size());
        {
            std::lock_guard lock(mutex_);
            if (pending_ == Pending::Stop) sweep.stop();
            if (pending_ == Pending::Abort) sweep.abort();
            sweep_ = &sweep;
        }
        Forget forget{this};
        int done = 0;
        sweep.run([&](const tb::SweepResult& r) {
            emit pointMeasured({r, sweep.params(), sweep.host(), int(std::max(1u, std::thread::hardware_concurrency())),
                                ++done, total});
        });
        emit finished(folder, done < total);
    } catch (const std::exception& e) {
        emit failed(QString::fromStdString(e.what()));
    }
}

ScalingLab::ScalingLab(QWidget* parent) : QWidget(parent, Qt::Window) {
    setObjectName("scalingLab");
    setWindowTitle(tr("Scaling lab — Towerbench"));
    tb::ui::closeOnKeys(this, tb::ui::EscapeCloses::No);  // closing stops its sweep
    SweepWorker::registerTypes();
    thread_ = new QThread(this);
    worker_ = new SweepWorker;
    worker_->moveToThread(thread_);
    connect(thread_, &QThread::finished, worker_, &QObject::deleteLater);
    connect(this, &ScalingLab::sweepRequested, worker_, &SweepWorker::run);  // queued: the worker's thread
    connect(worker_, &SweepWorker::pointMeasured, this, &ScalingLab::addPoint);
    connect(worker_, &SweepWorker::finished, this, [this](const QString& folder, bool stopped) {
        setRunning(false);
        predict();  // pipelines' stages are measured now that nothing trains beside them
        status_ = (stopped ? tr("Stopped; %1 points kept in %2") : tr("Finished: %1 points in %2"))
                      .arg(results_.size())
                      .arg(folder);
        statusLabel_->setText(tb::ui::breakable(status_));
        emit sweepFinished(folder);
    });
    connect(worker_, &SweepWorker::failed, this, [this](const QString& message) {
        setRunning(false);
        predict();
        status_ = tr("The sweep failed: %1").arg(tb::ui::explained(explain_, message));
        statusLabel_->setText(tb::ui::breakable(status_));
    });
    thread_->start();

    rate_ = tb::ui::makeChart(this, "sweepRate", tr("Examples/sec by towers"), tr("towers"), tr("examples/sec"));
    speedup_ = tb::ui::makeChart(this, "sweepSpeedup", tr("Speedup over one tower (dotted: ideal)"), tr("towers"),
                                 tr("speedup (x)"));
    breakdown_ = tb::ui::makeChart(this, "sweepBreakdown", tr("Where a step goes (one tower, mean)"), QString(),
                                   tr("ms per step"));
    // Before a sweep: no bars, no point labels, and what will come (not QCustomPlot's 0 to 5).
    breakdownHint_ = tb::ui::addEmptyHint(breakdown_, tr("Start a sweep: each point's step appears here, phase by phase."));
    breakdown_->xAxis->setTicker(QSharedPointer<QCPAxisTickerText>::create());
    breakdown_->xAxis->setRange(0, 1);
    breakdown_->yAxis->setRange(0, 1);
    for (QCustomPlot* p : {rate_, speedup_, breakdown_}) tb::ui::applyChartTheme(p, palette());
    table_ = new QTableWidget(0, 12);
    table_->setObjectName("sweepTable");
    table_->setHorizontalHeaderLabels({tr("point"), tr("examples/s"), tr("predicted"), tr("error"), tr("speedup"),
                                       tr("efficiency"), tr("step"), tr("compute"), tr("wait"), tr("reduce"),
                                       tr("apply"), tr("data")});
    table_->verticalHeader()->hide();
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);

    auto* charts = new QWidget;
    auto* grid = new QGridLayout(charts);
    grid->setContentsMargins(0, 0, 0, 0);
    grid->addWidget(rate_, 0, 0);
    grid->addWidget(speedup_, 0, 1);
    grid->addWidget(breakdown_, 1, 0, 1, 2);
    grid->setColumnStretch(0, 1);
    grid->setColumnStretch(1, 1);
    auto* centre = new QSplitter(Qt::Vertical);
    centre->addWidget(charts);
    centre->addWidget(table_);
    centre->setStretchFactor(0, 3);
    centre->setStretchFactor(1, 1);

    auto* side = new QWidget;
    auto* sideLayout = new QVBoxLayout(side);
    sideLayout->addWidget(buildSettings());
    sideLayout->addWidget(buildPredictor());
    sideLayout->addStretch();
    auto* scroll = new QScrollArea;
    scroll->setWidget(side);
    scroll->setWidgetResizable(true);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    scroll->setMinimumWidth(side->sizeHint().width() + 20);

    auto* layout = new QHBoxLayout(this);
    auto* split = new QSplitter(Qt::Horizontal);
    split->addWidget(scroll);
    split->addWidget(centre);
    split->setStretchFactor(1, 1);
    layout->addWidget(split);
    predict();
}

ScalingLab::~ScalingLab() {
    worker_->abort();  // the point in progress ends at its step, without its final evaluation
    thread_->quit();
    thread_->wait();
}

QWidget* ScalingLab::buildSettings() {
    auto* box = new QGroupBox(tr("Sweep"));
    auto* form = new QFormLayout(box);
    baseLabel_ = new QLabel;
    baseLabel_->setWordWrap(true);
    form->addRow(baseLabel_);
    towers_ = new QLineEdit("1,2,4");
    towers_->setObjectName("sweepTowers");
    towers_->setToolTip(tb::ui::wrappedToolTip(
        tr("Tower counts to measure, e.g. 1,2,4. One tower is always measured: speedups are over it. "
           "The batch per tower stays the experiment's, so N towers train N times the examples per step.")));
    form->addRow(tr("Towers"), towers_);
    auto* strategies = new QWidget;
    auto* sl = new QGridLayout(strategies);
    sl->setContentsMargins(0, 0, 0, 0);
    const char* names[] = {"mean", "allreduce", "async", "average"};
    for (int i = 0; i < 4; ++i) {
        auto* c = new QCheckBox(i < 3 ? strategyName(names[i]) : tr("average every K"));
        c->setObjectName(QStringLiteral("sweepStrategy_") + names[i]);
        c->setChecked(i < 2);
        strategyBoxes_.push_back(c);
        sl->addWidget(c, i, 0);
    }
    averageK_ = new QSpinBox;
    averageK_->setRange(1, 9999);
    averageK_->setValue(4);
    averageK_->setPrefix(tr("K = "));
    WheelGuard::guard(averageK_);
    sl->addWidget(averageK_, 3, 1);
    // Model parallelism: N towers become N CPU stages of the model over the one tower's batch.
    auto* pipeline = new QCheckBox(tr("pipeline"));
    pipeline->setObjectName("sweepStrategy_pipeline");
    pipeline->setToolTip(tb::ui::wrappedToolTip(
        tr("Model parallelism: each tower count N also runs as N CPU stages of the model over the experiment's "
           "batch (--stages N), with this schedule and micro-batches (--pipeline, --micro-batches)")));
    strategyBoxes_.push_back(pipeline);
    sl->addWidget(pipeline, 4, 0);
    schedule_ = new QComboBox;
    schedule_->setObjectName("sweepSchedule");
    schedule_->addItems({"naive", "gpipe", "1f1b"});
    schedule_->setCurrentIndex(1);
    WheelGuard::guard(schedule_);
    microBatches_ = new QSpinBox;
    microBatches_->setObjectName("sweepMicroBatches");
    microBatches_->setRange(1, 9999);
    microBatches_->setValue(4);
    microBatches_->setPrefix(tr("M = "));
    WheelGuard::guard(microBatches_);
    connect(schedule_, &QComboBox::currentIndexChanged, this,
            [this](int i) { microBatches_->setEnabled(i > 0); });  // naive: the whole batch at once
    sl->addWidget(schedule_, 4, 1);  // one above the other: the settings column stays narrow
    sl->addWidget(microBatches_, 5, 1);
    form->addRow(tr("Strategies"), strategies);
    warmup_ = new QSpinBox;
    warmup_->setRange(0, 100000);
    warmup_->setValue(5);
    warmup_->setToolTip(tb::ui::wrappedToolTip(tr("Steps of each point left out of its measurement (kernel generation, first touches)")));
    WheelGuard::guard(warmup_);
    form->addRow(tr("Warm-up steps"), warmup_);
    steps_ = new QSpinBox;
    steps_->setRange(2, 1000000);
    steps_->setValue(30);
    WheelGuard::guard(steps_);
    form->addRow(tr("Measured steps"), steps_);
    start_ = new QPushButton(tr("Start sweep"));
    start_->setObjectName("sweepStart");
    stop_ = new QPushButton(tr("Stop"));
    stop_->setEnabled(false);
    open_ = new QPushButton(tr("Open sweep…"));
    open_->setToolTip(tb::ui::wrappedToolTip(tr("Show a sweep kept in the runs folder")));
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(start_);
    buttons->addWidget(stop_);
    buttons->addWidget(open_);
    form->addRow(buttons);
    statusLabel_ = new QLabel;
    statusLabel_->setObjectName("sweepStatus");
    statusLabel_->setWordWrap(true);
    statusLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    form->addRow(statusLabel_);
    connect(start_, &QPushButton::clicked, this, &ScalingLab::startSweep);
    connect(stop_, &QPushButton::clicked, this, &ScalingLab::stopSweep);
    connect(open_, &QPushButton::clicked, this, [this] {
        const QString dir = tb::ui::chooseFile(this, tb::ui::FileChoice::Folder, tr("Open a sweep's folder"),
                                               QString::fromStdString(tb::RunFolder::runsRoot()));
        if (!dir.isEmpty()) openSweep(dir);
    });
    return box;
}

QWidget* ScalingLab::buildPredictor() {
    auto* box = new QGroupBox(tr("What if (predicted)"));
    auto* form = new QFormLayout(box);
    from_ = new QComboBox;
    from_->setToolTip(tb::ui::wrappedToolTip(tr("The measured point the model is calibrated from: its compute per "
                                                "example, update per parameter and reductions")));
    form->addRow(tr("Calibrate from"), from_);
    hardware_ = new QComboBox;
    hardware_->setObjectName("predictHardware");
    hardware_->addItem(tr("this machine (CPU towers)"));
    for (const tb::ProcessorSpec& p : tb::processorPresets())
        hardware_->addItem(tr("%1 GPUs (%2 TFLOP/s fp32, %3 GB/s)")
                               .arg(QString::fromStdString(p.name))
                               .arg(p.flops / 1e12, 0, 'f', 1)
                               .arg(formatCount(p.memoryBandwidth / 1e9)),
                           QString::fromStdString(p.name));
    form->addRow(tr("Towers on"), hardware_);
    link_ = new QComboBox;
    link_->setObjectName("predictLink");
    network_ = new QComboBox;
    for (const tb::LinkSpec& l : tb::linkPresets()) {
        const QString text = tr("%1 (%2 µs, %3 GB/s)")
                                 .arg(QString::fromStdString(l.name))
                                 .arg(l.latency * 1e6, 0, 'g', 3)
                                 .arg(l.bandwidth / 1e9, 0, 'g', 3);
        link_->addItem(text, QString::fromStdString(l.name));
        network_->addItem(text, QString::fromStdString(l.name));
    }
    network_->setCurrentIndex(network_->findData("100gbe"));
    form->addRow(tr("GPU link"), link_);
    machines_ = new QSpinBox;
    machines_->setRange(1, 1024);
    form->addRow(tr("Machines"), machines_);
    form->addRow(tr("Network"), network_);
    shards_ = new QSpinBox;
    shards_->setObjectName("predictShards");
    shards_->setRange(1, 1024);
    shards_->setToolTip(tb::ui::wrappedToolTip(tr("Parameter-server shards: the holder's traffic and updates split over S "
                                                  "holders (async pushes take a shard's lock each)")));
    form->addRow(tr("PS shards"), shards_);
    maxTowers_ = new QSpinBox;
    maxTowers_->setObjectName("predictMaxTowers");
    maxTowers_->setRange(1, 1024);
    maxTowers_->setValue(4);
    form->addRow(tr("Predict up to"), maxTowers_);
    serialShare_ = new QDoubleSpinBox;
    serialShare_->setObjectName("predictSerialShare");
    serialShare_->setRange(0, 1);
    serialShare_->setDecimals(3);
    serialShare_->setSingleStep(0.05);
    serialShare_->setValue(tb::Assumptions{}.serialShare);
    serialShare_->setToolTip(tb::ui::wrappedToolTip(tr("Share of a tower's compute that more threads do not speed up (Amdahl); "
                                                       "fitted to the sweep where it measured towers of different thread counts, "
                                                       "each thread on a core of its own")));
    form->addRow(tr("Serial share"), serialShare_);
    hostLatency_ = new QDoubleSpinBox;
    hostLatency_->setRange(0, 1e6);
    hostLatency_->setValue(tb::Assumptions{}.hostLatency * 1e6);
    hostLatency_->setSuffix(tr(" µs"));
    hostLatency_->setToolTip(tb::ui::wrappedToolTip(tr("Time of one barrier among CPU towers")));
    form->addRow(tr("Barrier latency"), hostLatency_);
    hostGbps_ = new QDoubleSpinBox;
    hostGbps_->setRange(0, 1e4);
    hostGbps_->setDecimals(1);
    hostGbps_->setSuffix(tr(" GB/s"));
    hostGbps_->setSpecialValueText(tr("measured"));
    hostGbps_->setToolTip(tb::ui::wrappedToolTip(tr("One core's reductions in memory; 'measured': from the calibration point where it had "
                             "several towers, else this machine's measured copy rate")));
    form->addRow(tr("Host reductions"), hostGbps_);
    dataScale_ = new QDoubleSpinBox;
    dataScale_->setRange(0, 1000);
    dataScale_->setValue(1);
    dataScale_->setToolTip(tb::ui::wrappedToolTip(tr("The input pipeline's measured wait per step, times this")));
    form->addRow(tr("Data wait x"), dataScale_);
    for (QWidget* w : std::initializer_list<QWidget*>{from_, hardware_, link_, network_, machines_, shards_, maxTowers_, serialShare_,
                                                      hostLatency_, hostGbps_, dataScale_})
        WheelGuard::guard(w);
    for (QComboBox* c : {from_, hardware_, link_, network_})
        connect(c, &QComboBox::currentIndexChanged, this, &ScalingLab::predict);
    for (QSpinBox* s : {machines_, maxTowers_, shards_}) connect(s, &QSpinBox::valueChanged, this, &ScalingLab::predict);
    for (QDoubleSpinBox* s : {serialShare_, hostLatency_, hostGbps_, dataScale_})
        connect(s, &QDoubleSpinBox::valueChanged, this, &ScalingLab::predict);
    bottleneck_ = new QLabel;
    bottleneck_->setObjectName("predictBottleneck");
    bottleneck_->setWordWrap(true);
    bottleneck_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    form->addRow(bottleneck_);
    assumptions_ = new QLabel;
    assumptions_->setObjectName("predictAssumptions");
    assumptions_->setWordWrap(true);
    assumptions_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    QFont small = assumptions_->font();
    small.setPointSizeF(small.pointSizeF() * 0.9);
    assumptions_->setFont(small);
    form->addRow(assumptions_);
    box->setMinimumWidth(330);
    return box;
}

void ScalingLab::showEvent(QShowEvent* e) {
    // A first showing takes most of the screen it opens on, never more.
    if (!sized_) {
        sized_ = true;
        const QRect avail = screen()->availableGeometry();
        resize(std::min(1400, avail.width() - 40), std::min(860, avail.height() - 60));
        move(avail.center() - rect().center());
    }
    QWidget::showEvent(e);
}

void ScalingLab::setBase(const tb::RunConfig& base) {
    base_ = base;
    const int perTower = base.batchPerTower > 0 ? base.batchPerTower : base.batch;
    baseLabel_->setText(tr("%1 on %2, batch %3 per tower, %4")
                            .arg(QString::fromStdString(base.model), QString::fromStdString(base.data))
                            .arg(perTower)
                            .arg(base.threads > 0 ? tr("%1 threads").arg(base.threads) : tr("all cores")));
}

QCheckBox* ScalingLab::strategyBox(const QString& name) const {
    for (QCheckBox* c : strategyBoxes_)
        if (c->objectName() == "sweepStrategy_" + name) return c;
    return nullptr;
}

QString ScalingLab::statusText() const { return status_; }

void ScalingLab::setRunning(bool running) {
    running_ = running;
    start_->setEnabled(!running);
    open_->setEnabled(!running);
    stop_->setEnabled(running);
}

void ScalingLab::startSweep() {
    if (running_) return;
    pipelineCosts_.reset();  // measured again once this sweep has ended
    tb::SweepSettings s;
    s.strategies.clear();
    const char* names[] = {"mean", "allreduce", "async"};
    for (int i = 0; i < 3; ++i)
        if (strategyBoxes_[size_t(i)]->isChecked()) s.strategies.push_back(names[i]);
    if (strategyBoxes_[3]->isChecked()) s.strategies.push_back("average:" + std::to_string(averageK_->value()));
    if (strategyBoxes_[4]->isChecked())
        s.strategies.push_back(schedule_->currentIndex() == 0 ? std::string("naive")
                                                              : schedule_->currentText().toStdString() + ":" +
                                                                    std::to_string(microBatches_->value()));
    s.warmup = warmup_->value();
    s.measure = steps_->value();
    s.towers.clear();
    if (busy_ && busy_()) {
        status_ = tr("The main window is training: a sweep beside it would measure both runs. Stop it first.");
        statusLabel_->setText(tb::ui::breakable(status_));
        return;
    }
    try {
        for (const QString& t : towers_->text().split(',', Qt::SkipEmptyParts)) {
            bool ok = false;
            const int n = t.trimmed().toInt(&ok);
            if (!ok) throw tb::Error(tr("Towers: '%1' is not a whole number").arg(t.trimmed()).toStdString());
            s.towers.push_back(n);
        }
        // Every point's plan checked before anything starts; its messages name the lab's own
        // settings (towers, strategies, micro-batches) by their flags, not the form's fields.
        (void)tb::sweepPoints(base_, s);
    } catch (const tb::Error& e) {
        status_ = QString::fromUtf8(e.what());
        statusLabel_->setText(tb::ui::breakable(status_));
        return;
    }
    try {
        // A model that cannot take the data (the form's settings), said before the first point
        // loads them; then the sweep's folder.
        tb::checkModelTakesData(tb::findModel(base_.model), base_.data);
        folder_ = QString::fromStdString(tb::newSweepFolder(base_));
    } catch (const tb::Error& e) {
        status_ = tb::ui::explained(explain_, QString::fromUtf8(e.what()));
        statusLabel_->setText(tb::ui::breakable(status_));
        return;
    }
    results_.clear();
    cores_ = int(std::max(1u, std::thread::hardware_concurrency()));
    status_ = tr("Measuring the first point…");
    statusLabel_->setText(tb::ui::breakable(status_));
    showResults();
    predict();
    setRunning(true);
    emit sweepRequested(base_, s, folder_);
}

void ScalingLab::stopSweep() {
    if (!running_) return;
    worker_->stop();
    status_ = tr("Stopping after this point's step…");
    statusLabel_->setText(tb::ui::breakable(status_));
}

void ScalingLab::closeEvent(QCloseEvent* e) {
    stopSweep();  // the points measured so far stay in the folder
    e->accept();
}

bool ScalingLab::openSweep(const QString& folder) {
    if (running_) {
        status_ = tr("A sweep is running: %1 opens when it has ended (or been stopped).").arg(folder);
        statusLabel_->setText(tb::ui::breakable(status_));
        return false;
    }
    try {
        const tb::SweepFile f = tb::ScalingSweep::readResults(folder.toStdString());
        results_ = f.points;
        params_ = f.params;
        host_ = f.host;
        cores_ = f.cores;
        folder_ = folder;
        status_ = tr("%1 points from %2").arg(results_.size()).arg(folder);
        tb::RunConfig base = results_.front().point.config;
        base.towers = "cpu:0";
        setBase(base);
    } catch (const tb::Error& e) {
        status_ = QString::fromStdString(e.what());
        statusLabel_->setText(tb::ui::breakable(status_));
        return false;
    }
    statusLabel_->setText(tb::ui::breakable(status_));
    showResults();
    predict();
    return true;
}

void ScalingLab::addPoint(const SweepProgress& p) {
    results_.push_back(p.result);
    params_ = p.params;
    host_ = p.host;
    cores_ = p.cores;
    status_ = p.done < p.total ? tr("Measured %1 of %2 points; next: point %3").arg(p.done).arg(p.total).arg(p.done + 1)
                               : tr("Measured %1 of %2 points").arg(p.done).arg(p.total);
    statusLabel_->setText(tb::ui::breakable(status_));
    showResults();
    predict();
}

std::vector<std::string> ScalingLab::strategies() const {
    std::vector<std::string> out;
    for (const tb::SweepResult& r : results_)
        if (r.point.towers > 1 && std::find(out.begin(), out.end(), r.point.strategy) == out.end())
            out.push_back(r.point.strategy);
    if (out.empty()) out.push_back("mean");
    return out;
}

void ScalingLab::showResults() {
    // A sweep of CPU towers over several thread counts per tower measured the serial share: the
    // box takes it (and can still be changed); without such points it keeps what it holds.
    tb::SweepFile sweep;
    sweep.params = params_;
    sweep.host = host_;
    sweep.cores = cores_;
    sweep.points = results_;
    std::string from;
    const std::optional<double> fit = tb::fitSerialShare(sweep, &from);
    fittedShare_ = fit ? *fit : -1;
    fittedFrom_ = QString::fromStdString(from);
    if (fit) {
        const QSignalBlocker quiet(serialShare_);  // the caller predicts next
        serialShare_->setValue(*fit);
    }

    // The calibration choices follow the points.
    const int keep = from_->currentIndex();
    from_->blockSignals(true);
    from_->clear();
    for (size_t i = 0; i < results_.size(); ++i)
        from_->addItem(tr("point %1: %2").arg(i + 1).arg(QString::fromStdString(results_[i].point.label())));
    from_->setCurrentIndex(std::clamp(keep, 0, std::max(0, from_->count() - 1)));
    from_->blockSignals(false);

    // Stacked bars: one per point, a layer per phase.
    breakdown_->clearPlottables();
    breakdown_->legend->setVisible(!results_.empty());
    breakdownHint_->setVisible(results_.empty());
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    for (size_t i = 0; i < results_.size(); ++i)
        ticker->addTick(double(i + 1), QString::fromStdString(results_[i].point.label()).replace(", ", "\n"));
    breakdown_->xAxis->setTicker(ticker);
    QCPBars* below = nullptr;
    double top = 0;
    for (const Layer& layer : kLayers) {
        auto* bars = new QCPBars(breakdown_->xAxis, breakdown_->yAxis);
        bars->setName(tr(layer.name));
        const QColor c = tb::ui::phaseColor(layer.colour);
        bars->setBrush(c);
        bars->setPen(QPen(c.darker(130)));
        bars->setWidth(0.6);
        if (below) bars->moveAbove(below);
        for (size_t i = 0; i < results_.size(); ++i) bars->addData(double(i + 1), 1e3 * (results_[i].measured.*layer.seconds));
        below = bars;
    }
    for (const tb::SweepResult& r : results_) top = std::max(top, 1e3 * r.measured.stepSeconds());
    breakdown_->xAxis->setRange(0.4, double(results_.size()) + 0.6);
    breakdown_->yAxis->setRange(0, top > 0 ? top * 1.1 : 1);
    tb::ui::fitToSize(breakdown_);
    breakdown_->replot();
}

bool ScalingLab::calibration(tb::Calibration* cal) const {
    const int i = from_->currentIndex();
    if (i < 0 || size_t(i) >= results_.size() || params_ <= 0) return false;
    // A sweep of towers sharing one GPU calibrates from its points there (one GPU per tower: no model).
    const std::string& towers = results_.front().point.config.towers;
    if (towers.starts_with("gpu")) {
        if (towers.find('*') == std::string::npos) return false;
        tb::SweepFile f;
        f.params = params_;
        f.host = host_;
        f.cores = cores_;
        f.points = results_;
        *cal = tb::Calibration::fromDeviceSweep(f);
        return true;
    }
    *cal = tb::Calibration::fromSweepPoint(results_[size_t(i)], params_, host_, cores_);
    return true;
}

tb::Scenario ScalingLab::scenario(int towers, const std::string& strategy, const tb::Calibration& cal) const {
    tb::Scenario s;
    s.towers = towers;
    s.strategy = strategy;
    s.cores = cal.cores;
    s.batchPerTower = cal.batchPerTower;
    s.threadsPerTower = std::max(1, cal.cores / towers);
    s.psShards = shards_->value();
    if (cal.device) {
        s.measuredGpu = cal.device->gpu;
        s.threadsPerTower = 1;
    }
    if (hardware_->currentIndex() > 0) {
        s.device = tb::parseProcessor(hardware_->currentData().toString().toStdString(), "device");
        s.link = tb::parseLink(link_->currentData().toString().toStdString(), "link");
        s.machines = std::min(machines_->value(), towers);
        s.network = tb::parseLink(network_->currentData().toString().toStdString(), "network");
        s.threadsPerTower = 1;
    }
    return s;
}

tb::Prediction ScalingLab::predictStep(const tb::Calibration& cal, const tb::Assumptions& a, const tb::Scenario& s) const {
    // Pipelines measure their stages on this machine once per shape (a fraction of a second each
    // for the shipped models, seconds for a large one): the busy cursor says so meanwhile.
    const std::string& model = results_.front().point.config.model;
    if (!pipelineCosts_ || costsModel_ != model) {
        pipelineCosts_ = std::make_unique<tb::PipelineCostCache>(tb::findModel(model));
        costsModel_ = model;
    }
    const bool measuring = tb::pipelineStrategy(s.strategy) && !pipelineCosts_->has(s, cal);
    // Measured beside a sweep's training, both would be wrong (and the costs kept).
    if (measuring && running_)
        throw tb::Error(s.describe() + ": predicted once the sweep has ended (its stages are measured on this machine)");
    if (measuring) QApplication::setOverrideCursor(Qt::WaitCursor);
    const auto restore = qScopeGuard([measuring] {
        if (measuring) QApplication::restoreOverrideCursor();
    });
    try {
        return tb::predictStep(cal, a, s, *pipelineCosts_);
    } catch (const tb::Error&) {
        throw;
    } catch (const std::exception& e) {  // measuring a large model's stages: its memory
        throw tb::Error(s.describe() + ": measuring its stages failed: " + e.what());
    }
}

tb::Assumptions ScalingLab::assumptions() const {
    tb::Assumptions a;
    a.serialShare = serialShare_->value();
    a.hostLatency = hostLatency_->value() * 1e-6;
    a.hostBandwidth = hostGbps_->value() * 1e9;
    a.dataScale = dataScale_->value();
    return a;
}

double ScalingLab::predicted(const QString& strategy, int towers) const {
    tb::Calibration cal;
    if (!calibration(&cal)) return -1;
    const tb::Assumptions a = assumptions();
    try {
        return predictStep(cal, a, scenario(towers, strategy.toStdString(), cal)).examplesPerSec;
    } catch (const tb::Error&) {
        return -1;
    }
}

void ScalingLab::predict() {
    // A sweep of GPU towers (made by towerbench-run scale on a GPU machine) calibrates from all
    // its points on that GPU, not from one chosen point, and predicts towers sharing it.
    const bool gpuSweep = !results_.empty() && results_.front().point.config.towers.starts_with("gpu");
    hardware_->setItemText(0, gpuSweep ? tr("the sweep's GPU (towers sharing it)") : tr("this machine (CPU towers)"));
    from_->setEnabled(!gpuSweep);
    const bool device = hardware_->currentIndex() > 0;
    for (QWidget* w : std::initializer_list<QWidget*>{link_, machines_, network_}) w->setEnabled(device);
    rate_->clearGraphs();
    speedup_->clearGraphs();
    table_->setRowCount(int(results_.size()));
    tb::Calibration cal;
    const bool calibrated = calibration(&cal);
    const tb::Assumptions a = assumptions();
    int maxN = maxTowers_->value();
    for (const tb::SweepResult& r : results_) maxN = std::max(maxN, r.point.towers);
    ChartTops tops;
    QStringList sentences;
    if (calibrated) sentences = plotPredicted(cal, a, maxN, device, tops);
    if (calibrated && !device) {  // the legend's key to the dashes
        QCPGraph* key = rate_->addGraph();
        key->setName(tr("predicted"));
        key->setPen(QPen(palette().color(QPalette::Text), 1.5, Qt::DashLine));
    }
    // The ideal line: N x the fastest one tower, measured here or predicted on the other hardware
    // (there in either place of the variables: a GPU tower holding them moves nothing over its link).
    double one = 0;
    if (!device)
        for (const tb::SweepResult& r : results_)
            if (r.point.towers == 1) one = std::max(one, r.measured.examplesPerSec);
    if (device && calibrated)
        for (const char* place : {"mean", "allreduce"}) {
            try {
                one = std::max(one, predictStep(cal, a, scenario(1, place, cal)).examplesPerSec);
            } catch (const tb::Error&) {
            }
        }
    plotIdeal(one > 0 ? one : tops.predictedOne, maxN, tops);
    if (!device) plotMeasured(tops);
    finishCharts(device, maxN, tops);
    const double meanError = fillTable(calibrated && !device ? &cal : nullptr, a);
    explain(calibrated ? &cal : nullptr, a, device, maxN, sentences, meanError);
}

// The model's curves (dashed) on both charts, one per strategy; returns what bounds each at maxN.
QStringList ScalingLab::plotPredicted(const tb::Calibration& cal, const tb::Assumptions& a, int maxN, bool device,
                                      ChartTops& tops) {
    QStringList sentences;
    double& top = tops.rate;
    double& topSpeedup = tops.speedup;
    for (const std::string& st : strategies()) {
        // One tower of this strategy's place: on a GPU, host or device; CPU towers have one. (On
        // other hardware, replicas' speedups are over one GPU holding the variables itself, as a
        // sweep's are over the one-tower point of their place: over one reading them from the
        // CPU, averaging every 4 on 16 H100s showed 57x.)
        const std::string single = cal.device ? st : device && tb::variablesReplicated(st) ? "allreduce" : "mean";
        double predictedOne = 0;
        try {
            predictedOne = predictStep(cal, a, scenario(1, single, cal)).examplesPerSec;
        } catch (const tb::Error&) {
        }
        tops.predictedOne = std::max(tops.predictedOne, predictedOne);
        QCPGraph* g = rate_->addGraph();
        QCPGraph* sg = speedup_->addGraph();
        for (QCPGraph* x : {g, sg}) {
            x->setName(strategyName(st));
            x->setPen(QPen(strategyColour(st), 1.5, Qt::DashLine));
            // Beside measured dots, a strategy's entry is its dots', and one says what dashes are.
            if (!device) x->removeFromLegend();
        }
        // A pipeline's stages are measured on this machine to be predicted: its curve reaches the
        // most stages the sweep ran (the measurement of many more would hold the window up).
        int last = maxN;
        if (tb::pipelineStrategy(st)) {
            last = 1;
            for (const tb::SweepResult& r : results_)
                if (r.point.strategy == st) last = std::max(last, r.point.towers);
        }
        for (int n = 1; n <= last; ++n) {
            try {
                const tb::Prediction p = predictStep(cal, a, scenario(n, n == 1 ? single : st, cal));
                g->addData(n, p.examplesPerSec);
                if (predictedOne > 0) sg->addData(n, p.examplesPerSec / predictedOne);
                top = std::max(top, p.examplesPerSec);
                if (predictedOne > 0) topSpeedup = std::max(topSpeedup, p.examplesPerSec / predictedOne);
                if (n == last) sentences << QString::fromStdString(p.bottleneck).toHtmlEscaped();
            } catch (const tb::Error& e) {
                if (n == last) sentences << QString::fromStdString(e.what()).toHtmlEscaped();
            }
        }
    }
    return sentences;
}

// The dotted ideal: `one` x N examples/sec, and a speedup of N (drawn even before a point is
// measured: the speedup's ideal needs none).
void ScalingLab::plotIdeal(double one, int maxN, ChartTops& tops) {
    QCPGraph* ideal = rate_->addGraph();
    ideal->setName(tr("ideal (N x one tower)"));
    QCPGraph* idealSpeedup = speedup_->addGraph();
    idealSpeedup->setName(tr("ideal"));
    for (QCPGraph* x : {ideal, idealSpeedup}) x->setPen(QPen(palette().color(QPalette::Text), 1, Qt::DotLine));
    if (one <= 0) ideal->removeFromLegend();
    for (int n = 1; n <= maxN; ++n) {
        if (one > 0) ideal->addData(n, one * n);
        idealSpeedup->addData(n, n);
    }
    tops.rate = std::max(tops.rate, one * maxN);
    tops.speedup = std::max(tops.speedup, double(maxN));
}

// This machine's measurements (dots): each strategy's points, its one-tower point first.
void ScalingLab::plotMeasured(ChartTops& tops) {
    if (results_.empty()) return;  // (strategies() then names "mean" alone: no legend entry for it)
    double& top = tops.rate;
    for (const std::string& st : strategies()) {
        QCPGraph* g = rate_->addGraph();
        QCPGraph* sg = speedup_->addGraph();
        for (QCPGraph* x : {g, sg}) {
            x->setName(strategyName(st));
            x->setLineStyle(QCPGraph::lsNone);
            x->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, strategyColour(st), 9));
        }
        for (const tb::SweepResult& r : results_)
            if (r.point.towers == 1 ? &r == tb::oneTowerPointFor(results_, st) : r.point.strategy == st) {
                g->addData(r.point.towers, r.measured.examplesPerSec);
                sg->addData(r.point.towers, r.speedup);
                top = std::max(top, r.measured.examplesPerSec);
            }
    }
}

void ScalingLab::finishCharts(bool device, int maxN, const ChartTops& tops) {
    const double top = tops.rate, topSpeedup = tops.speedup;
    const QString where = device ? tr("%1 x %2 over %3").arg(maxN).arg(hardware_->currentData().toString(),
                                                                      link_->currentData().toString())
                                 : tr("this machine");
    tb::ui::chartTitle(rate_)->setText(device ? tr("Examples/sec by towers, predicted on %1").arg(where)
                                              : tr("Examples/sec by towers"));
    rate_->legend->setVisible(tb::ui::legendEntries(rate_->legend) > 0);
    speedup_->legend->setVisible(false);  // the same colours as beside it; the dotted line is the ideal
    for (QCustomPlot* p : {rate_, speedup_}) {
        p->xAxis->setRange(0.5, maxN + 0.5);
        tb::ui::fitToSize(p);
    }
    rate_->yAxis->setRange(0, top > 0 ? top * 1.1 : 1);
    speedup_->yAxis->setRange(0, topSpeedup * 1.1);
    rate_->replot();
    speedup_->replot();
}

// The table: measured beside predicted (this machine's model, where `cal` is given), the error, and
// where the step's time went.
double ScalingLab::fillTable(const tb::Calibration* cal, const tb::Assumptions& a) {
    double errors = 0;
    int held = 0;
    for (size_t i = 0; i < results_.size(); ++i) {
        const tb::SweepResult& r = results_[i];
        const tb::StepProfile& m = r.measured;
        double pred = -1;
        if (cal) {
            try {
                tb::Scenario s = scenario(r.point.towers, r.point.towers == 1 && !cal->device ? "mean" : r.point.strategy, *cal);
                pred = predictStep(*cal, a, s).examplesPerSec;
            } catch (const tb::Error&) {
            }
        }
        if (pred > 0 && m.examplesPerSec > 0 && int(i) != from_->currentIndex())
            errors += std::abs(pred / m.examplesPerSec - 1), ++held;
        const QStringList cells = {QString::fromStdString(r.point.label()),
                                   formatCount(m.examplesPerSec),
                                   pred > 0 ? formatCount(pred) : QStringLiteral("-"),
                                   pred > 0 ? QString("%1%").arg(100 * (pred - m.examplesPerSec) / m.examplesPerSec, 0, 'f', 1)
                                            : QStringLiteral("-"),
                                   QString("%1x").arg(r.speedup, 0, 'f', 2),
                                   QString("%1%").arg(100 * r.efficiency, 0, 'f', 0),
                                   formatMs(m.stepSeconds()),
                                   formatMs(m.compute),
                                   formatMs(m.wait + m.straggle),
                                   formatMs(m.reduce),
                                   formatMs(m.apply),
                                   formatMs(m.dataWait)};
        for (int c = 0; c < cells.size(); ++c) {
            auto* item = new QTableWidgetItem(cells[c]);
            if (c > 0) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
            table_->setItem(int(i), c, item);
        }
    }
    return held > 0 ? errors / held : -1;
}

// What bounds the prediction at maxN, and every assumption, stated.
void ScalingLab::explain(const tb::Calibration* cal, const tb::Assumptions& a, bool device, int maxN,
                         const QStringList& sentences, double meanError) {
    if (!cal) {
        bottleneck_->setText(tr("<i>The predictor is calibrated from a measured point: start a sweep or open one.</i>"));
        assumptions_->clear();
        return;
    }
    bottleneck_->setText(tr("<b>At %1 towers:</b><br>%2").arg(maxN).arg(sentences.join("<br>")));
    QStringList lines;
    if (cal->device) {
        const tb::DeviceCalibration& d = *cal->device;
        lines << tr("Calibration: every point of the sweep on %1: one tower with the variables on the host (%2 "
                    "examples/sec) and on the GPU (%3), %4 towers sharing it; batch %5 per tower.")
                     .arg(QString::fromStdString(d.gpu),
                          d.oneOnHost.steps > 0 ? formatCount(d.oneOnHost.examplesPerSec) : tr("not measured"),
                          d.oneOnGpu.steps > 0 ? formatCount(d.oneOnGpu.examplesPerSec) : tr("not measured"))
                     .arg(d.sharedTowers > 1 ? QString::number(d.sharedTowers) : tr("no more"))
                     .arg(cal->batchPerTower);
        lines << tr("Compute: a fixed part per step that overlaps across the towers' streams plus a part per example "
                    "that they share, from the one-tower and the most-towers points. Data wait, reduce, wait, apply "
                    "and the rest of the step: as measured at one and at the most towers, straight between them; "
                    "averaging every K divides the reduce by K. Other hardware needs a sweep of CPU towers.");
        assumptions_->setText(lines.join("\n"));
        return;
    }
    lines << tr("Calibration: %1, %2 examples/sec; per step of one tower compute %3, apply %4, reduce %5, "
                "data wait %6; %7 threads per tower on %8 cores, batch %9 per tower.")
                 .arg(from_->currentText(), formatCount(cal->measured.examplesPerSec), formatMs(cal->measured.compute),
                      formatMs(cal->measured.apply), formatMs(cal->measured.reduce), formatMs(cal->measured.dataWait))
                 .arg(cal->threadsPerTower)
                 .arg(cal->cores)
                 .arg(cal->batchPerTower);
    if (meanError >= 0)
        lines << tr("Against this sweep: mean |error| %1% over the points it was not calibrated from (the table's "
                    "Error column).")
                     .arg(100 * meanError, 0, 'f', 1);
    lines << tr("Model: %1 parameters (%2 MB of gradients). This machine's core, measured: %3 GFLOP/s sgemm, %4 GB/s "
                "copies.")
                 .arg(formatCount(double(cal->params)))
                 .arg(4.0 * double(cal->params) / 1e6, 0, 'f', 1)
                 .arg(cal->host.flops / 1e9, 0, 'f', 1)
                 .arg(cal->host.bandwidth / 1e9, 0, 'f', 1);
    const bool fitted = fittedShare_ >= 0 && std::abs(a.serialShare - serialShare_->valueFromText(
                                                                        serialShare_->textFromValue(fittedShare_))) < 1e-9;
    lines << tr("Compute: Amdahl with serial share %1 across threads (%2); towers sharing cores share their time.")
                 .arg(a.serialShare)
                 .arg(fitted ? tr("fitted to the sweep's %1").arg(fittedFrom_)
                             : fittedShare_ >= 0 ? tr("the sweep's fit: %1").arg(fittedShare_, 0, 'f', 3)
                                                 : tr("assumed: the sweep measured one thread count per tower"));
    if (device)
        lines << tr("Devices reach the same share of their fp32 peak as this machine's core does; each GPU has its "
                    "own %1 link to the CPU holder; replicas update on the device at 20 bytes per parameter.")
                     .arg(link_->currentData().toString());
    lines << tr("Transfers: latency + bytes / bandwidth each (barrier %1 µs; host reductions %2); no overlap with "
                "compute (the engine reduces after the backward pass). Async: pushes queue at the holder, one at a "
                "time per shard; mean staleness N - 1.")
                 .arg(a.hostLatency * 1e6)
                 .arg(a.hostBandwidth > 0 ? tr("%1 GB/s").arg(a.hostBandwidth / 1e9) : tr("measured"));
    const std::vector<std::string> swept = strategies();
    if (std::any_of(swept.begin(), swept.end(), [](const std::string& st) { return tb::pipelineStrategy(st).has_value(); }))
        lines << tr("Pipelines: each stage's step measured on this machine (gpipe and 1f1b: all stages at once; its layers as one network, M "
                    "micro-batches, their gradients summed), scaled as the calibration's network is; naive runs the "
                    "stages one after another, gpipe and 1f1b take the sum of the stages plus (M - 1) x the slowest; "
                    "the largest stage's update; the calibration's data wait and fixed cost.");
    assumptions_->setText(lines.join("\n"));
}
