#include "experiment_panel.hpp"

#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QVBoxLayout>
#include <algorithm>
#include <thread>
#include <utility>

#include "data/dataset.hpp"
#include "engine/trainer.hpp"
#include "nn/model_spec.hpp"
#include "util/error.hpp"

namespace {

// Data choices: label and the --data spec (a trailing ':' takes the folder field).
struct DataChoice {
    const char* label;
    const char* spec;
};
constexpr DataChoice kData[] = {{"Fashion-MNIST (installed)", "fashion-mnist"},
                                {"IDX folder (MNIST format)", "idx:"},
                                {"CIFAR-10 binary folder", "cifar10:"},
                                {"Synthetic: Gaussian blobs", "synthetic:blobs"},
                                {"Synthetic: spirals", "synthetic:spirals"}};

QStringList modelNames() {
    QStringList names;
    for (const std::string& dir : tb::modelSearchPath()) {
        const QDir d(QString::fromStdString(dir));
        for (const QFileInfo& f : d.entryInfoList({"*.json"}, QDir::Files, QDir::Name))
            if (!names.contains(f.completeBaseName())) names << f.completeBaseName();
    }
    return names;
}

QSpinBox* spin(int lo, int hi, int value, const QString& tip) {
    auto* s = new QSpinBox;
    s->setRange(lo, hi);
    s->setValue(value);
    s->setToolTip(tip);
    return s;
}

QComboBox* combo(const QStringList& items, const QString& tip) {
    auto* c = new QComboBox;
    c->addItems(items);
    c->setToolTip(tip);
    return c;
}

}  // namespace

ExperimentPanel::ExperimentPanel(DeviceCatalog catalog, QWidget* parent)
    : QWidget(parent), catalog_(std::move(catalog)) {
    model_ = combo(modelNames(), tr("The network: a JSON file from resources/models or your models folder "
                                    "(~/.local/share/towerbench/models)."));
    data_ = new QComboBox;
    for (const DataChoice& d : kData) data_->addItem(tr(d.label), QString::fromLatin1(d.spec));
    data_->setToolTip(tr("The training data; folders hold MNIST-format IDX files or CIFAR-10 binary batches."));
    folder_ = new QLineEdit;
    folder_->setPlaceholderText(tr("folder"));
    browse_ = new QPushButton(tr("Browse…"));
    auto* folderRow = new QHBoxLayout;
    folderRow->addWidget(folder_);
    folderRow->addWidget(browse_);

    runOn_ = combo({tr("CPU towers"), catalog_.gpus.empty() ? tr("GPUs (none found)") : tr("GPUs")},
                   tr("Where the towers run: threads on the CPU, or GPUs (one or more towers each)."));
    if (catalog_.gpus.empty()) {
        // Not offered, but still shown when a loaded config asks for GPUs: so it is explained.
        QStandardItem* gpuChoice = qobject_cast<QStandardItemModel*>(runOn_->model())->item(kGpus);
        gpuChoice->setEnabled(false);
        gpuChoice->setToolTip(catalog_.whyNoGpu);
    }
    towers_ = spin(1, tb::cpuTowerSlots(), 2,
                   tr("CPU towers: model replicas, each a thread computing gradients on its own slice of every "
                      "batch."));
    gpus_ = new QListWidget;
    gpus_->setToolTip(tr("The GPUs that get towers: each checked GPU holds the towers per GPU below."));
    // Across the form's width and elided in the middle where even that is too narrow, so a name
    // and its memory stay readable (the whole line is the item's tooltip).
    gpus_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    gpus_->setTextElideMode(Qt::ElideMiddle);
    for (int i = 0; i < catalog_.gpuCount(); ++i) {
        auto* item = new QListWidgetItem(catalog_.describe(i), gpus_);
        item->setToolTip(item->text());
        item->setData(Qt::UserRole, i);
        item->setFlags(Qt::ItemIsUserCheckable | Qt::ItemIsEnabled);
        item->setCheckState(Qt::Checked);
    }
    fitGpuList();
    perGpu_ = spin(1, 8, 1,
                   tr("Towers sharing each GPU (gpu:0*2), each with its own stream: they reduce on the device "
                      "and move nothing between them."));
    variables_ = combo({}, tr("Where the variables live and are updated: on the host (cpu, the seeds' default), "
                              "on one of the towers' devices, or a copy on every tower (replicated)."));
    setVariablesChoices(QStringLiteral("cpu"));
    reduce_ = combo({"mean", "allreduce"}, tr("How gradients meet at the synchronisation point: averaged once on "
                                              "the variables' holder, or all-reduced among replicated towers."));
    update_ = combo({"sync", "async"},
                    tr("Synchronous: every step waits for the slowest tower. Asynchronous: a parameter server "
                       "applies each tower's gradients as they arrive; their staleness is how many updates other "
                       "towers applied between this tower reading the variables and pushing its gradients."));
    averageEvery_ = spin(0, 100000, 0,
                         tr("Replicated towers take local steps and average their parameters every K steps "
                            "(0: off, gradients meet every step)."));
    averageEvery_->setSpecialValueText(tr("off"));
    psShards_ = spin(1, 64, 1, tr("Parameter-server shards: variables dealt round-robin over S holders."));
    slow_ = new QLineEdit;
    slow_->setPlaceholderText(tr("e.g. 1=3"));
    slow_->setToolTip(tr("Straggler injection: tower T runs F times slower (sync waits for it, async does not)."));
    batchPerTower_ = spin(1, 65536, 64, tr("Examples each tower computes per step; the global batch is towers × this."));
    optimizer_ = combo({"sgd", "momentum", "nesterov", "adam"}, tr("The optimiser applied to the variables."));
    lr_ = new QDoubleSpinBox;
    lr_->setDecimals(5);
    lr_->setRange(0.00001, 10);
    lr_->setSingleStep(0.001);
    lr_->setToolTip(tr("Learning rate (initial, when a decay is set)."));
    decaySteps_ = spin(0, 100000000, 0, tr("Exponential decay every N steps (staircase); 0: constant."));
    decaySteps_->setSpecialValueText(tr("constant"));
    decayRate_ = new QDoubleSpinBox;
    decayRate_->setRange(0.001, 1);
    decayRate_->setDecimals(3);
    decayRate_->setToolTip(tr("Factor applied at each decay."));
    length_ = combo({"epochs", "steps"}, tr("Train for a number of passes over the data, or of steps."));
    lengthValue_ = new QDoubleSpinBox;
    lengthValue_->setRange(0.01, 1e7);
    lengthValue_->setDecimals(2);
    seed_ = spin(0, 1 << 30, 1, tr("Seeds initialisation, shuffling, augmentation and dropout."));
    auto* lengthRow = new QHBoxLayout;
    lengthRow->addWidget(lengthValue_);
    lengthRow->addWidget(length_);

    auto* what = new QGroupBox(tr("Experiment"));
    auto* f1 = new QFormLayout(what);
    f1->addRow(tr("Model"), model_);
    f1->addRow(tr("Data"), data_);
    f1->addRow(QString(), folderRow);
    auto* where = new QGroupBox(tr("Devices and strategy"));
    auto* f2 = new QFormLayout(where);
    devicesForm_ = f2;
    f2->addRow(tr("Run on"), runOn_);
    f2->addRow(tr("CPU towers"), towers_);
    f2->addRow(gpus_);
    f2->addRow(tr("Towers per GPU"), perGpu_);
    f2->addRow(tr("Variables"), variables_);
    f2->addRow(tr("Reduce"), reduce_);
    f2->addRow(tr("Updates"), update_);
    f2->addRow(tr("Average every"), averageEvery_);
    f2->addRow(tr("PS shards"), psShards_);
    f2->addRow(tr("Stragglers"), slow_);
    auto* how = new QGroupBox(tr("Hyperparameters"));
    auto* f3 = new QFormLayout(how);
    f3->addRow(tr("Batch per tower"), batchPerTower_);
    f3->addRow(tr("Optimiser"), optimizer_);
    f3->addRow(tr("Learning rate"), lr_);
    f3->addRow(tr("Decay every"), decaySteps_);
    f3->addRow(tr("Decay rate"), decayRate_);
    f3->addRow(tr("Length"), lengthRow);
    f3->addRow(tr("Seed"), seed_);
    problem_ = new QLabel;
    problem_->setWordWrap(true);
    problem_->setStyleSheet("color: #c0392b;");
    auto* v = new QVBoxLayout(this);
    v->addWidget(what);
    v->addWidget(where);
    v->addWidget(how);
    v->addWidget(problem_);
    v->addStretch();

    connect(browse_, &QPushButton::clicked, this, &ExperimentPanel::browseFolder);
    connect(runOn_, &QComboBox::currentIndexChanged, this, &ExperimentPanel::devicesChanged);
    connect(gpus_, &QListWidget::itemChanged, this, &ExperimentPanel::devicesChanged);
    for (QSpinBox* s : {towers_, perGpu_}) connect(s, &QSpinBox::valueChanged, this, &ExperimentPanel::devicesChanged);
    for (QComboBox* c : {model_, data_, variables_, reduce_, update_, optimizer_, length_})
        connect(c, &QComboBox::currentIndexChanged, this, &ExperimentPanel::revalidate);
    for (QSpinBox* s : {averageEvery_, psShards_, batchPerTower_, decaySteps_, seed_})
        connect(s, &QSpinBox::valueChanged, this, &ExperimentPanel::revalidate);
    for (QDoubleSpinBox* s : {lr_, decayRate_, lengthValue_})
        connect(s, &QDoubleSpinBox::valueChanged, this, &ExperimentPanel::revalidate);
    for (QLineEdit* e : {folder_, slow_}) connect(e, &QLineEdit::textChanged, this, &ExperimentPanel::revalidate);

    tb::RunConfig defaults;
    defaults.towers = "cpu:0,cpu:1";
    defaults.batch = 128;
    setConfig(defaults);
}

QString ExperimentPanel::dataSpec() const {
    QString spec = data_->currentData().toString();
    if (spec.endsWith(':')) spec += folder_->text();
    return spec;
}

void ExperimentPanel::browseFolder() {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Data folder"), folder_->text());
    if (!dir.isEmpty()) folder_->setText(dir);
}

bool ExperimentPanel::onGpus() const { return runOn_->currentIndex() == kGpus; }

QStringList ExperimentPanel::chosenDevices() const {
    QStringList devices;
    if (onGpus()) {
        for (int i = 0; i < gpus_->count(); ++i)
            if (gpus_->item(i)->checkState() == Qt::Checked)
                devices << QStringLiteral("gpu:%1").arg(gpus_->item(i)->data(Qt::UserRole).toInt());
    } else {
        for (int i = 0; i < towers_->value(); ++i) devices << QStringLiteral("cpu:%1").arg(i);
    }
    return devices;
}

int ExperimentPanel::towersPerDevice() const { return onGpus() ? perGpu_->value() : 1; }

void ExperimentPanel::fitGpuList() {
    // As tall as its rows: a list of two GPUs should not take the height of ten.
    const int rows = std::max(1, gpus_->count());
    const int rowH = gpus_->count() > 0 ? gpus_->sizeHintForRow(0) : gpus_->fontMetrics().height() + 4;
    gpus_->setFixedHeight(rows * rowH + 2 * gpus_->frameWidth() + 2);
}

void ExperimentPanel::setVariablesChoices(const QString& keep) {
    const QSignalBlocker quiet(variables_);  // one revalidation follows, from the caller
    variables_->clear();
    variables_->addItem(QStringLiteral("cpu"), QStringLiteral("cpu"));
    variables_->setItemData(0, tr("On the host, in its memory (the seeds' default)"), Qt::ToolTipRole);
    for (const QString& d : chosenDevices()) {
        variables_->addItem(d, d);
        variables_->setItemData(variables_->count() - 1,
                                tr("On %1: its towers read the variables in place, the others' move").arg(d),
                                Qt::ToolTipRole);
    }
    variables_->addItem(QStringLiteral("replicated"), QStringLiteral("replicated"));
    variables_->setItemData(variables_->count() - 1, tr("A copy on every tower, kept equal by all-reduce"),
                            Qt::ToolTipRole);
    const int i = variables_->findData(keep);
    variables_->setCurrentIndex(i >= 0 ? i : 0);
}

void ExperimentPanel::devicesChanged() {
    const bool gpus = onGpus();
    devicesForm_->setRowVisible(towers_, !gpus);
    devicesForm_->setRowVisible(gpus_, gpus);
    devicesForm_->setRowVisible(perGpu_, gpus);
    setVariablesChoices(variables_->currentData().toString());
    revalidate();
}

void ExperimentPanel::showTowers(const std::string& text) {
    std::vector<tb::Device> towers;
    try {
        towers = tb::DeploymentPlan::parseTowers(text, int(std::max(1u, std::thread::hardware_concurrency())),
                                                 catalog_.gpuCount(), "towers");
    } catch (const tb::Error&) {
        return;  // not a tower list: the controls keep their choice
    }
    // GPUs a previous config named that this machine lacks are listed no longer.
    while (gpus_->count() > catalog_.gpuCount()) delete gpus_->takeItem(gpus_->count() - 1);
    // The form holds towers of one kind, as a valid plan does: the first tower's decides. It
    // holds the same number of towers on every GPU chosen; that of the first GPU is taken.
    if (towers.empty() || towers[0].type == tb::DeviceType::Cpu) {
        runOn_->setCurrentIndex(kCpuTowers);
        towers_->setValue(int(towers.size()));
    } else {
        runOn_->setCurrentIndex(kGpus);
        for (int i = 0; i < gpus_->count(); ++i) gpus_->item(i)->setCheckState(Qt::Unchecked);
        for (const tb::Device& d : towers) {
            if (d.type != tb::DeviceType::Cuda) continue;
            QListWidgetItem* item = nullptr;
            for (int i = 0; i < gpus_->count() && !item; ++i)
                if (gpus_->item(i)->data(Qt::UserRole).toInt() == d.index) item = gpus_->item(i);
            if (!item) {
                // Shown checked, so the config reads as it was written, and refused by validation.
                item = new QListWidgetItem(tr("gpu:%1 \u2014 not on this machine").arg(d.index), gpus_);
                item->setToolTip(item->text());
                item->setData(Qt::UserRole, d.index);
                item->setFlags(Qt::ItemIsUserCheckable | Qt::ItemIsEnabled);
                item->setForeground(QColor(0xc0, 0x39, 0x2b));
            }
            item->setCheckState(Qt::Checked);
        }
        perGpu_->setValue(int(std::count(towers.begin(), towers.end(), towers[0])));
    }
    fitGpuList();
    devicesChanged();
}

tb::RunConfig ExperimentPanel::config() const {
    tb::RunConfig c;
    c.model = model_->currentText().toStdString();
    c.data = dataSpec().toStdString();
    // "gpu:0*2" is two towers on gpu:0 (DeploymentPlan::parseTowers).
    const QStringList devices = chosenDevices();
    const int perDevice = towersPerDevice();
    QStringList items;
    for (const QString& d : devices) items << (perDevice > 1 ? d + QStringLiteral("*%1").arg(perDevice) : d);
    c.towers = items.join(',').toStdString();
    c.variables = variables_->currentData().toString().toStdString();
    c.reduce = reduce_->currentText().toStdString();
    c.update = update_->currentText().toStdString();
    c.averageEvery = averageEvery_->value();
    c.psShards = psShards_->value();
    c.slow = slow_->text().trimmed().toStdString();
    c.batchPerTower = batchPerTower_->value();
    c.batch = int(devices.size()) * perDevice * batchPerTower_->value();
    c.optimizer = optimizer_->currentText().toStdString();
    c.lr = lr_->value();
    c.lrDecaySteps = decaySteps_->value();
    c.lrDecayRate = decayRate_->value();
    if (length_->currentIndex() == 0) {
        c.epochs = lengthValue_->value();
        c.steps = 0;
    } else {
        c.steps = int64_t(lengthValue_->value());
    }
    c.seed = uint64_t(seed_->value());
    return c;
}

void ExperimentPanel::setConfig(const tb::RunConfig& c) {
    loading_ = true;
    if (model_->findText(QString::fromStdString(c.model)) < 0) model_->addItem(QString::fromStdString(c.model));
    model_->setCurrentText(QString::fromStdString(c.model));
    const QString spec = QString::fromStdString(c.data);
    for (int i = 0; i < data_->count(); ++i) {
        const QString choice = data_->itemData(i).toString();
        if (choice == spec || (choice.endsWith(':') && spec.startsWith(choice))) {
            data_->setCurrentIndex(i);
            folder_->setText(choice.endsWith(':') ? spec.mid(choice.size()) : QString());
        }
    }
    showTowers(c.towers);
    // A device named as in the tower list ("cuda:0" is gpu:0); one that is not among the towers
    // is still shown, for validation to explain.
    QString variables = QString::fromStdString(c.variables);
    if (variables != QLatin1String("cpu") && variables != QLatin1String("replicated")) {
        try {
            variables = QString::fromStdString(tb::Device::parse(c.variables).str());
        } catch (const tb::Error&) {
            // Not a device: shown as written, and validation names the problem.
        }
    }
    setVariablesChoices(variables);
    if (variables_->currentData().toString() != variables) {
        variables_->addItem(variables, variables);
        variables_->setCurrentIndex(variables_->count() - 1);
    }
    const int towers = int(chosenDevices().size()) * towersPerDevice();
    reduce_->setCurrentText(QString::fromStdString(c.reduce));
    update_->setCurrentText(QString::fromStdString(c.update));
    averageEvery_->setValue(c.averageEvery);
    psShards_->setValue(c.psShards);
    slow_->setText(QString::fromStdString(c.slow));
    batchPerTower_->setValue(c.batchPerTower > 0 ? c.batchPerTower : std::max(1, c.batch / std::max(1, towers)));
    optimizer_->setCurrentText(QString::fromStdString(c.optimizer));
    lr_->setValue(c.lr);
    decaySteps_->setValue(int(c.lrDecaySteps));
    decayRate_->setValue(c.lrDecayRate);
    length_->setCurrentIndex(c.steps > 0 ? 1 : 0);
    lengthValue_->setValue(c.steps > 0 ? double(c.steps) : c.epochs);
    seed_->setValue(int(c.seed));
    loading_ = false;
    revalidate();
}

QString ExperimentPanel::problem() const { return problem_->text(); }

void ExperimentPanel::revalidate() {
    if (loading_) return;
    const bool folder = data_->currentData().toString().endsWith(':');
    folder_->setEnabled(folder);
    browse_->setEnabled(folder);
    const tb::RunConfig c = config();
    QString why;
    try {
        // No GPU checked leaves no towers and no batch: say so before the engine's checks would
        // complain about the batch size.
        if (onGpus() && chosenDevices().isEmpty()) throw tb::Error("--towers: check at least one GPU");
        // The engine's own checks, in the order a run makes them, so the message is the same
        // (the plan's against the catalog's GPUs).
        c.validate();
        catalog_.makePlan(c);
        tb::findModel(c.model);
        if (folder && folder_->text().isEmpty()) throw tb::Error("--data: choose a folder");
        if (folder && !QFileInfo(folder_->text()).isDir())
            throw tb::Error("--data: " + folder_->text().toStdString() + " is not a folder");
        if (c.data == "fashion-mnist" && !QFileInfo(tb::kFashionMnistDir).isDir())
            throw tb::Error(std::string("--data: Fashion-MNIST is not installed at ") + tb::kFashionMnistDir +
                            " (apt-get install dataset-fashion-mnist)");
    } catch (const std::exception& e) {
        why = QString::fromUtf8(e.what());
    }
    // Flags name the settings in the engine's messages; the window shows them without "--".
    why.replace(QRegularExpression("--([a-z-]+)"), "\\1");
    problem_->setText(why);
    valid_ = why.isEmpty();
    emit configChanged(c, valid_);
}
