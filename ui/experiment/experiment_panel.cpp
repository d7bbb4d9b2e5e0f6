#include "experiment/experiment_panel.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <cmath>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QLocale>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QVBoxLayout>
#include <algorithm>
#include <climits>
#include <filesystem>
#include <thread>
#include <utility>

#include "file_dialogs.hpp"
#include "data/dataset.hpp"
#include "engine/run_setup.hpp"
#include "engine/trainer.hpp"
#include "experiment/form_widgets.hpp"
#include "view_format.hpp"
#include "nn/model_spec.hpp"
#include "parallel/stage_plan.hpp"
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
                                {"TFRecord folder (tf.train.Example)", "tfrecord:"},
                                {"Image folder (PNG, JPEG)", "folder:"},
                                {"Synthetic 2-D: Gaussian blobs", "synthetic:blobs"},
                                {"Synthetic 2-D: spirals", "synthetic:spirals"}};

QStringList modelNames() {
    QStringList names;
    for (const std::string& dir : tb::modelSearchPath()) {
        const QDir d(QString::fromStdString(dir));
        for (const QFileInfo& f : d.entryInfoList({"*.json"}, QDir::Files, QDir::Name))
            if (!names.contains(f.completeBaseName())) names << f.completeBaseName();
    }
    return names;
}

constexpr int kMaxProcesses = 256;

// An integer field from lo (shown as offText where that means "off" or "automatic"); hi is
// INT_MAX wherever the run's own checks say what is too large, so a typed number is kept as typed.
QSpinBox* spin(int lo, int hi, const QString& tip, const QString& offText = {}) {
    auto* s = new QSpinBox;
    s->setRange(lo, hi);
    s->setToolTip(tb::ui::wrappedToolTip(tip));
    s->setSpecialValueText(offText);  // shown at the minimum, where the minimum means "off" or "automatic"
    s->setGroupSeparatorShown(true);
    WheelGuard::guard(s);
    return s;
}

// A number field (NumberBox: what is typed is kept; the run's checks say what it cannot take).
NumberBox* real(double step, const QString& tip) {
    auto* s = new NumberBox;
    s->setSingleStep(step);
    s->setToolTip(tb::ui::wrappedToolTip(tip));
    WheelGuard::guard(s);
    return s;
}

QComboBox* combo(const QStringList& items, const QString& tip) {
    auto* c = new QComboBox;
    c->addItems(items);
    c->setToolTip(tb::ui::wrappedToolTip(tip));
    // As wide as the longest item, also one added later (a model from a loaded config).
    c->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    WheelGuard::guard(c);
    return c;
}

// A row of widgets as one form field.
QWidget* row(std::initializer_list<QWidget*> widgets) {
    auto* w = new QWidget;
    auto* h = new QHBoxLayout(w);
    h->setContentsMargins(0, 0, 0, 0);
    for (QWidget* x : widgets) h->addWidget(x, x == *widgets.begin() ? 1 : 0);
    return w;
}

}  // namespace

ExperimentPanel::ExperimentPanel(DeviceCatalog catalog, QWidget* parent)
    : QWidget(parent), catalog_(std::move(catalog)) {
    makeExperimentFields();
    makeDeviceFields();
    makeTrainingFields();
    makeEvaluationFields();
    makeAdvancedFields();
    layOutForm();
    connectFields();
    setConfig(tb::RunConfig());
}

// Experiment: what is learnt from what.
void ExperimentPanel::makeExperimentFields() {

    // A model may be a file under a run's folder: a long path, elided in the middle (tooltip: whole).
    auto* model = new ElidingCombo(24);
    model->addItems(modelNames());
    model->setFieldToolTip(tb::ui::wrappedToolTip(tr("The network: a JSON file from resources/models or your models "
                                                     "folder (~/.local/share/towerbench/models).")));
    WheelGuard::guard(model);
    model_ = model;
    data_ = new QComboBox;
    for (const DataChoice& d : kData) data_->addItem(tr(d.label), QString::fromLatin1(d.spec));
    data_->setToolTip(tb::ui::wrappedToolTip(tr("The training data; folders hold MNIST-format IDX files or CIFAR-10 "
                                                "binary batches. The 2-D sets draw their decision boundary as "
                                                "they train.")));
    WheelGuard::guard(data_);
    folder_ = new QLineEdit;
    folder_->setPlaceholderText(tr("folder"));
    browse_ = new QPushButton(tr("Browse…"));
    folderRow_ = row({folder_, browse_});
}

// Devices and strategy: the deployment plan.
void ExperimentPanel::makeDeviceFields() {
    runOn_ = combo({tr("CPU towers"), catalog_.gpus.empty() ? tr("GPUs (none found)") : tr("GPUs")},
                   tr("Where the towers run: threads on the CPU, or GPUs (one or more towers each)."));
    if (catalog_.gpus.empty()) {
        // Not offered, but still shown when a loaded config asks for GPUs: so it is explained.
        QStandardItem* gpuChoice = qobject_cast<QStandardItemModel*>(runOn_->model())->item(kGpus);
        gpuChoice->setEnabled(false);
        gpuChoice->setToolTip(catalog_.whyNoGpu);
    }
    towers_ = spin(1, INT_MAX,
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
    perGpu_ = spin(1, INT_MAX,
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
                       "towers applied between this tower reading the variables and pushing its gradients. "
                       "Asynchronous runs are not reproducible: thread timing decides the order of updates."));
    averageEvery_ = spin(0, INT_MAX,
                         tr("Replicated towers take local steps and average their parameters every K steps "
                            "(off: gradients meet every step)."),
                         tr("off"));
    psShards_ = spin(1, INT_MAX, tr("Parameter-server shards: variables dealt round-robin over S holders."));
    processes_ = spin(1, INT_MAX,
                      tr("1: this window trains the run. N: N processes through mpirun (Open MPI), each with the "
                         "towers above on its slice of every global batch, meeting over MPI; the window follows "
                         "their run folder. Under a root account Open MPI asks for OMPI_ALLOW_RUN_AS_ROOT=1 and "
                         "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 in the environment."));
    hostfile_ = new QLineEdit;
    hostfile_->setPlaceholderText(tr("this machine"));
    hostfile_->setToolTip(tb::ui::wrappedToolTip(tr("An MPI hostfile spreading the processes over machines (each must have towerbench-run "
                             "and the data at the same paths; the chief writes the run's folder on its machine, so list "
                             "this machine first or share the runs folder); empty: every process on this machine.")));
    psTasks_ = spin(0, INT_MAX,
                    tr("Parameter servers as processes (with several processes): the first P processes hold the "
                       "variables, dealt round-robin by variable; the others are workers that push their gradients "
                       "to them (sync or async) and the first worker reports the run."),
                    tr("none"));
    slow_ = new QLineEdit;
    slow_->setPlaceholderText(tr("none, e.g. 1=3"));
    slow_->setToolTip(tr("Straggler injection: tower T runs F times slower (sync waits for it, async does not)."));
    parallelism_ = combo({"data", "model", "hybrid"},
                         tr("Data: every tower holds the whole model and trains on its slice of the batch (the "
                            "seeds' towers). Model: the model's layers split into stages, each on its own device, "
                            "the batch flowing through them (a pipeline). Hybrid: the stages replicated, each "
                            "stage's replicas summing their gradients (data parallel inside the pipeline)."));
    stages_ = new QLineEdit;
    stages_->setPlaceholderText(tr("2 (balanced), or cpu:0=FROM..TO,..."));
    stages_->setToolTip(tb::ui::wrappedToolTip(
        tr("Model parallelism: the model's layers split into consecutive stages, each on its own CPU device and "
           "thread: N (balanced by each layer's measured time), cpu:0,cpu:1, or cpu:0=FROM..TO,cpu:1=FROM..TO by "
           "layer names or indices. Activations go forward from stage to stage, their gradients back. One "
           "pipeline, synchronous, on CPU stages for now.")));
    pipeline_ = combo({"naive", "gpipe", "1f1b"},
                      tr("How the stages take the batch: naive (all of it through each stage in turn: each stage idles "
                         "(S-1)/S of the step), gpipe (micro-batches: all forwards, then all backwards) or 1f1b (one "
                         "forward, one backward: the same bubble, fewer activations held)."));
    microBatches_ = spin(1, INT_MAX, tr("gpipe and 1f1b: each replica's share of the batch cut into M micro-batches; "
                                        "the bubble shrinks to (S-1)/(M+S-1)."));
    stageReplicas_ = spin(1, INT_MAX, tr("Hybrid parallelism: R copies of the pipeline, each on 1/R of the batch, every "
                                         "stage's copies summing their gradients before its update (data parallel "
                                         "inside the pipeline; stages x replicas CPU devices)."));
    stagePerProcess_ = new QCheckBox(tr("one mpirun process each"));
    stagePerProcess_->setToolTip(tb::ui::wrappedToolTip(
        tr("Model parallelism across processes, as across machines: process s holds stage s's layers alone and "
           "runs it on every batch, sending the activations forward and their gradients back as MPI messages. "
           "With hybrid's replicas, a process per stage of each replica, each stage's replicas summing their "
           "gradients as messages too. The window starts them through mpirun and follows their run folder.")));
}

// Training: the batch, the optimiser, the length.
void ExperimentPanel::makeTrainingFields() {
    batch_ = spin(1, INT_MAX, tr("Examples per step: the global batch (split over the towers), or each tower's."));
    batchMeaning_ = combo({tr("global"), tr("per tower")}, {});  // (its tooltip: showChosenRows)
    split_ = new QLabel;
    split_->setToolTip(tb::ui::wrappedToolTip(tr("The global batch of one step and how it is split: over the towers, "
                                                 "or over a pipeline's replicas and micro-batches.")));
    optimizer_ = combo({"sgd", "momentum", "nesterov", "adam"}, tr("The optimiser applied to the variables."));
    precision_ = combo({"fp32", "bf16"}, tr("The number format of the convolutions and inner products. bf16: mixed "
                                           "precision (bf16 inputs, fp32 sums, fp32 master weights and optimiser); "
                                           "CPU towers on a processor with AVX512-BF16 or AMX; GPU towers on "
                                           "Ampere or later (tensor cores)."));
    commPrecision_ = combo({"fp32", "bf16"},
                           tr("The number format of the gradients the towers, the holder and the processes exchange. "
                              "bf16: 2 bytes an element instead of 4 (the diagram's bytes and the bytes counter "
                              "show it), rounded on each tower's device and summed in fp32 on the host (NCCL and "
                              "processes round each partial sum to bf16); the variables always move in fp32. Not "
                              "with averaging every K steps; variables on a GPU take them through NCCL only."));
    lr_ = real(0.001, tr("Learning rate (initial, when a decay is set)."));
    momentum_ = real(0.01, tr("Momentum coefficient (momentum and Nesterov)."));
    decaySteps_ = spin(0, INT_MAX, tr("Exponential: decay every N steps. Cosine: fall to 0 over N steps. Constant: no decay."),
                       tr("constant"));
    lrDecay_ = combo({"exponential", "cosine"},
                     tr("Exponential: the rate below, every N steps. Cosine: a half cosine from the learning rate to 0 "
                        "over N steps (Loshchilov and Hutter)."));
    warmup_ = spin(0, INT_MAX, tr("Gradual warm-up (Goyal et al.): the learning rate ramps up linearly over the first N "
                                  "steps, for large global batches."),
                   tr("none"));
    lrScaling_ = combo({"none", "linear"},
                       tr("Linear: the learning rate above is for a batch of the reference below, and is scaled by the "
                          "update's batch (the global batch x accumulation) over it: the linear scaling rule of "
                          "Goyal et al. 2017, with the warm-up for large factors."));
    referenceBatch_ = spin(1, tb::RunConfig::kMaxBatch, tr("The batch the learning rate is given for (linear scaling)."));
    accumulate_ = spin(1, 1024, tr("Micro-steps per update: each tower computes its slice in K micro-steps of the batch "
                                   "and their gradients are summed before one update, one step on K times the batch "
                                   "in the memory of one (batch norm's statistics are each micro-step's)."));
    syncBn_ = new QCheckBox(tr("synchronised (sync-bn)"));
    syncBn_->setToolTip(tb::ui::wrappedToolTip(
        tr("Batch norm normalises each channel by the batch's statistics. Off (TensorFlow's towers): each tower by "
           "its own slice, tower 0's moving statistics kept for evaluation. On (PyTorch's SyncBatchNorm): every "
           "tower's and process's sums added before each batch norm normalises, forward and backward, so N towers "
           "compute what one tower on the whole batch does. With stages, each stage's replicas (and processes) add "
           "theirs, micro-batch by micro-batch. CPU towers and stages, synchronous updates.")));
    decayRate_ = real(0.01, tr("Factor applied at each decay."));
    staircase_ = new QCheckBox(tr("in steps (staircase)"));
    staircase_->setToolTip(tr("Decay at whole multiples of N steps rather than smoothly."));
    length_ = combo({tr("epochs"), tr("steps")}, tr("Train for a number of passes over the data, or of steps."));
    lengthValue_ = real(1, tr("How long to train."));
    seed_ = spin(0, INT_MAX, tr("Seeds initialisation, shuffling, augmentation and dropout."));
}

// Evaluation.
void ExperimentPanel::makeEvaluationFields() {
    emaDecay_ = real(0.001,
                     tr("Evaluate with a moving average of the weights with this decay (e.g. 0.999); off: the "
                        "weights as trained."));
    emaDecay_->setSpecial(0, tr("off"));
    evalEvery_ = spin(0, INT_MAX, tr("Steps between evaluations during training (validation set, or the test set "
                                     "when none is held out)."),
                      tr("at the end only"));
    validation_ = spin(-1, INT_MAX, tr("Training examples held out for validation; automatic: 10% of the training "
                                       "set, at most 5,000; 0: none."),
                       tr("automatic"));
}

// Advanced and checkpoints (folded).
void ExperimentPanel::makeAdvancedFields() {
    threads_ = spin(0, INT_MAX, tr("Compute threads in all; all cores: one share per tower."), tr("all cores"));
    prefetch_ = spin(-1, INT_MAX,
                     tr("Batches the loader thread prepares ahead of training; 0: none, the training thread "
                        "makes each batch. Automatic: 2, or none with one CPU tower on every core of a "
                        "machine of up to 4 (a loader thread would have no core of its own)."),
                     tr("automatic"));
    shuffleBuffer_ = spin(0, 1 << 30, tr("Examples shuffled at a time; whole set: a full shuffle every epoch "
                                         "(a streamed set: 10,000 records)."),
                          tr("whole set"));
    stream_ = combo({"auto", "true", "false"},
                    tr("TFRecord folders: read the training shards as they are used (true) instead of into memory "
                       "(false); auto: stream when they hold more than a quarter of the memory."));
    loaderThreads_ = spin(0, 1024, tr("Threads that decode a streamed set's batches; automatic: the run's threads "
                                      "when no batch is prefetched, else the cores the towers leave (at least one)."),
                          tr("automatic"));
    metrics_ = new QLineEdit;
    metrics_->setPlaceholderText(tr("none"));
    metrics_->setToolTip(tr("A JSON-lines file that receives every step, evaluation and device sample."));
    browseMetrics_ = new QPushButton(tr("Browse…"));
    tfrecordFeatures_ = new QLineEdit;
    tfrecordFeatures_->setPlaceholderText(tr("image_raw, label"));
    tfrecordFeatures_->setToolTip(tb::ui::wrappedToolTip(
        tr("TFRecord folders: the features that hold the image bytes and the label, as "
           "image=KEY,label=KEY (also height=, width=, depth=); empty: image_raw and label, as TensorFlow's "
           "MNIST article writes them.")));
    augment_ = new QLineEdit;
    augment_->setObjectName("augment");
    augment_->setPlaceholderText(tr("auto"));
    augment_->setToolTip(tb::ui::wrappedToolTip(
        tr("Training augmentation of image sets: crop:P (a random window of the image padded by P pixels), flip, "
           "brightness:D (±D/255), contrast:LOW:HIGH, comma-separated; empty or auto: CIFAR-10's distorted_inputs, "
           "none for other sets; none: off. Lab > Augmented samples shows what it does.")));
    normalise_ = combo({"auto", "none", "standardize", "mean-std"},
                       tr("standardize: each image to mean 0, deviation 1 (tf.image.per_image_standardization); "
                          "mean-std: each channel by the training split's mean and deviation; auto: CIFAR-10 standardized."));
    skipBadImages_ = new QCheckBox(tr("skip unreadable"));
    skipBadImages_->setToolTip(tb::ui::wrappedToolTip(tr("Image folders: leave corrupt or truncated images out (counted, "
                                                         "the first named in the log) instead of stopping at the first.")));
    transfers_ = combo({"auto", "copies", "nccl"},
                       tr("How GPU towers exchange data: auto picks NCCL where it fits, otherwise explicit copies."));
    tf32_ = new QCheckBox(tr("tensor-core TF32 math"));
    tf32_->setToolTip(tr("GPU towers: faster, less exact matrix math; off: plain FP32."));
    reportLag_ = spin(-1, tb::RunConfig::kMaxReportLag,
                      tr("GPU towers: steps the host reads each step's loss, accuracy and times after launching it, "
                         "waiting for no stream within a step, so the GPU never idles while the host reports. "
                         "Automatic: 2 for one GPU tower with its variables on that GPU, else 0 (each step read "
                         "before the next starts). Evaluations, checkpoints and pauses see every step."),
                      tr("automatic"));
    deterministic_ = new QCheckBox(tr("deterministic"));
    deterministic_->setToolTip(tb::ui::wrappedToolTip(
        tr("GPU towers: only cuDNN's deterministic algorithms, so two runs give the same losses bit for bit; off: "
           "the fastest, some of which sum gradients with atomics. CPU towers are deterministic either way.")));

    // --- Checkpoints (folded): the run's folder keeps them.
    checkpointEvery_ = spin(0, INT_MAX, tr("Steps between checkpoints in the run's folder; off: by time only. A "
                                           "checkpoint is always written at the end."),
                            tr("off"));
    checkpointMinutes_ = real(1, tr("Minutes between checkpoints; 0: by steps only."));
    keepCheckpoints_ = spin(1, INT_MAX, tr("Checkpoints kept: the last ones, besides the best by validation accuracy."));
    initFrom_ = new QLineEdit;
    initFrom_->setPlaceholderText(tr("fresh weights"));
    initFrom_->setToolTip(tb::ui::wrappedToolTip(tr("A checkpoint (.safetensors) whose weights the run starts from, "
                                                    "whatever plan trained them.")));
    browseInit_ = new QPushButton(tr("Browse…"));
}

// The fields in their sections, each bound to its run-config key.
void ExperimentPanel::layOutForm() {
    auto* what = new QGroupBox(tr("Experiment"));
    dataForm_ = new QFormLayout(what);
    auto* where = new QGroupBox(tr("Devices and strategy"));
    devicesForm_ = new QFormLayout(where);
    auto* how = new QGroupBox(tr("Training"));
    trainingForm_ = new QFormLayout(how);
    auto* judge = new QGroupBox(tr("Evaluation"));
    auto* evalForm = new QFormLayout(judge);
    advanced_ = new FoldSection(tr("Advanced"));
    checkpoints_ = new FoldSection(tr("Checkpoints"));

    auto add = [&](QFormLayout* form, const QString& key, const QString& label, QWidget* field, QWidget* shown = nullptr) {
        form->addRow(label, shown ? shown : field);
        if (!key.isEmpty()) bind(key, field, label);
    };
    add(dataForm_, "model", tr("Model"), model_);
    add(dataForm_, "data", tr("Data"), data_);
    add(dataForm_, {}, tr("Folder"), folderRow_);
    add(devicesForm_, {}, tr("Parallelism"), parallelism_);
    add(devicesForm_, {}, tr("Run on"), runOn_);
    add(devicesForm_, "towers", tr("CPU towers"), towers_);
    devicesForm_->addRow(gpus_);
    add(devicesForm_, {}, tr("Towers per GPU"), perGpu_);
    add(devicesForm_, {}, tr("Processes"), processes_);
    add(devicesForm_, {}, tr("Hostfile"), hostfile_);
    add(devicesForm_, "variables", tr("Variables"), variables_);
    add(devicesForm_, "reduce", tr("Reduce"), reduce_);
    add(devicesForm_, "update", tr("Updates"), update_);
    add(devicesForm_, "comm_precision", tr("Gradients sent as"), commPrecision_);
    add(devicesForm_, "average_every", tr("Average every"), averageEvery_);
    add(devicesForm_, "ps_shards", tr("PS shards"), psShards_);
    add(devicesForm_, "ps_tasks", tr("PS processes"), psTasks_);
    add(devicesForm_, "slow", tr("Stragglers"), slow_);
    add(devicesForm_, "stages", tr("Stages"), stages_);
    add(devicesForm_, "pipeline", tr("Pipeline"), pipeline_);
    add(devicesForm_, "micro_batches", tr("Micro-batches"), microBatches_);
    add(devicesForm_, "stage_replicas", tr("Stage replicas"), stageReplicas_);
    add(devicesForm_, "stage_per_process", tr("Stage processes"), stagePerProcess_);
    add(trainingForm_, "batch", tr("Batch"), batch_, row({batch_, batchMeaning_}));
    bind("batch_per_tower", batchMeaning_, tr("Batch per tower"));
    add(trainingForm_, {}, tr("Global batch"), split_);
    add(trainingForm_, "optimizer", tr("Optimiser"), optimizer_);
    add(trainingForm_, "precision", tr("Precision"), precision_);
    add(trainingForm_, "lr", tr("Learning rate"), lr_);
    add(trainingForm_, "momentum", tr("Momentum"), momentum_);
    add(trainingForm_, "lr_decay", tr("Decay"), lrDecay_);
    add(trainingForm_, "lr_decay_steps", tr("Decay over"), decaySteps_);
    add(trainingForm_, "lr_decay_rate", tr("Decay rate"), decayRate_);
    add(trainingForm_, "lr_staircase", QString(), staircase_);
    add(trainingForm_, "warmup_steps", tr("Warm-up steps"), warmup_);
    add(trainingForm_, "lr_scaling", tr("LR scaling"), lrScaling_, row({lrScaling_, referenceBatch_}));
    bind("lr_reference_batch", referenceBatch_, tr("Reference batch"));
    add(trainingForm_, "accumulate", tr("Accumulate"), accumulate_);
    add(trainingForm_, "sync_bn", tr("Batch norm"), syncBn_);
    add(trainingForm_, "epochs", tr("Length"), lengthValue_, row({lengthValue_, length_}));
    bind("steps", length_, tr("Steps"));
    add(trainingForm_, "seed", tr("Seed"), seed_);
    add(evalForm, "ema_decay", tr("Weight average"), emaDecay_);
    add(evalForm, "eval_every", tr("Evaluate every"), evalEvery_);
    add(evalForm, "validation", tr("Validation"), validation_);
    add(advanced_->form(), "threads", tr("Threads"), threads_);
    add(advanced_->form(), "prefetch", tr("Prefetch"), prefetch_);
    add(advanced_->form(), "shuffle_buffer", tr("Shuffle buffer"), shuffleBuffer_);
    add(advanced_->form(), "stream", tr("Stream"), stream_);
    add(advanced_->form(), "loader_threads", tr("Loader threads"), loaderThreads_);
    add(advanced_->form(), "metrics", tr("Metrics file"), metrics_, row({metrics_, browseMetrics_}));
    add(advanced_->form(), "tfrecord_features", tr("TFRecord features"), tfrecordFeatures_);
    add(advanced_->form(), "augment", tr("Augmentation"), augment_);
    add(advanced_->form(), "normalise", tr("Normalise"), normalise_);
    add(advanced_->form(), "skip_bad_images", tr("Bad images"), skipBadImages_);
    add(advanced_->form(), "transfers", tr("Transfers"), transfers_);
    add(advanced_->form(), "tf32", tr("GPU math"), tf32_);
    add(advanced_->form(), "deterministic", tr("GPU algorithms"), deterministic_);
    add(advanced_->form(), "report_lag", tr("Results read late"), reportLag_);
    add(checkpoints_->form(), "checkpoint_every", tr("Every (steps)"), checkpointEvery_);
    add(checkpoints_->form(), "checkpoint_minutes", tr("Every (minutes)"), checkpointMinutes_);
    add(checkpoints_->form(), "keep_checkpoints", tr("Keep last"), keepCheckpoints_);
    add(checkpoints_->form(), "init_from", tr("Start from"), initFrom_, row({initFrom_, browseInit_}));
    names_["lr_staircase"] = tr("Staircase");
    names_["towers"] = tr("Towers");
    // Where a setting is named without its form around it (a problem in a dialog, a row of the
    // Runs tab's comparison), the label alone would not say what it sets: "Every (steps)" of what?
    names_["epochs"] = tr("Length (epochs)");
    names_["steps"] = tr("Length (steps)");
    names_["checkpoint_every"] = tr("Checkpoint every (steps)");
    names_["checkpoint_minutes"] = tr("Checkpoint every (minutes)");
    names_["keep_checkpoints"] = tr("Checkpoints kept");
    names_["init_from"] = tr("Start from checkpoint");

    auto* v = new QVBoxLayout(this);
    for (QWidget* w : std::initializer_list<QWidget*>{what, where, how, judge, checkpoints_, advanced_}) v->addWidget(w);
    v->addStretch();
}

// Every edit revalidates the form; device choices re-plan the towers first.
void ExperimentPanel::connectFields() {
    connect(browse_, &QPushButton::clicked, this, &ExperimentPanel::browseFolder);
    connect(browseMetrics_, &QPushButton::clicked, this, &ExperimentPanel::browseMetrics);
    connect(browseInit_, &QPushButton::clicked, this, [this] {
        const QString file = tb::ui::chooseFile(this, tb::ui::FileChoice::Open, tr("Start from a checkpoint"),
                                                initFrom_->text(), tr("Checkpoints (*.safetensors)"));
        if (!file.isEmpty()) initFrom_->setText(file);
    });
    connect(runOn_, &QComboBox::currentIndexChanged, this, &ExperimentPanel::devicesChanged);
    connect(parallelism_, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (i == kHybridParallel && stageReplicas_->value() < 2 && !loading_) stageReplicas_->setValue(2);
        showChosenRows();
        revalidate();
    });
    connect(gpus_, &QListWidget::itemChanged, this, &ExperimentPanel::devicesChanged);
    connect(stagePerProcess_, &QCheckBox::toggled, this, [this] {
        showChosenRows();  // (hybrid: the process count follows stages x replicas)
        revalidate();
    });
    for (QSpinBox* s : {towers_, perGpu_}) connect(s, &QSpinBox::valueChanged, this, &ExperimentPanel::devicesChanged);
    connect(syncBn_, &QCheckBox::toggled, this, &ExperimentPanel::revalidate);
    for (QComboBox* c : {normalise_, stream_, lrDecay_, model_, data_, variables_, reduce_, update_, optimizer_, precision_, length_, batchMeaning_, transfers_,
                          commPrecision_, pipeline_, lrScaling_})
        connect(c, &QComboBox::currentIndexChanged, this, &ExperimentPanel::revalidate);
    for (QSpinBox* s : {processes_, averageEvery_, psShards_, psTasks_, microBatches_, stageReplicas_, batch_, decaySteps_, warmup_, seed_, evalEvery_, validation_, shuffleBuffer_,
                        prefetch_, loaderThreads_, threads_, checkpointEvery_, keepCheckpoints_, referenceBatch_, accumulate_, reportLag_})
        connect(s, &QSpinBox::valueChanged, this, &ExperimentPanel::revalidate);
    for (QDoubleSpinBox* s : {lr_, momentum_, decayRate_, lengthValue_, emaDecay_, checkpointMinutes_})
        connect(s, &QDoubleSpinBox::valueChanged, this, &ExperimentPanel::revalidate);
    for (QLineEdit* e : {folder_, slow_, stages_, metrics_, initFrom_, tfrecordFeatures_, hostfile_, augment_}) connect(e, &QLineEdit::textChanged, this, &ExperimentPanel::revalidate);
    // Paths are often longer than their field: the field shows the end (the folder's or file's
    // own name), its tooltip the whole path, and its usual help while empty.
    for (QLineEdit* e : {folder_, metrics_, initFrom_}) {
        e->setProperty("pathField", true);
        const QString help = e->toolTip();
        connect(e, &QLineEdit::textChanged, e, [e, help](const QString& text) {
            e->setToolTip(text.isEmpty() ? help : text);
            if (!e->hasFocus()) e->setCursorPosition(int(text.size()));
        });
    }
    for (QCheckBox* b : {staircase_, tf32_, deterministic_, skipBadImages_})
        connect(b, &QCheckBox::toggled, this, &ExperimentPanel::revalidate);
    // The length's unit changes what its number means: whole steps, or epochs to two decimals
    // (and the other unit's number is kept for switching back).
    connect(length_, &QComboBox::currentIndexChanged, this, [this](int unit) {
        const QSignalBlocker quiet(lengthValue_);
        const bool steps = unit == 1;
        lengthValue_->setSingleStep(steps ? 100 : 1);
        lengthValue_->setValue(steps ? double(base_.steps > 0 ? base_.steps : 1000) : base_.epochs);
        revalidate();
    });
}

void ExperimentPanel::bind(const QString& key, QWidget* field, const QString& label) {
    fields_[key] = field;
    names_[key] = label;
    field->setProperty("configKey", key);
}

QString ExperimentPanel::dataSpec() const {
    QString spec = data_->currentData().toString();
    if (spec.endsWith(':')) spec += folder_->text();
    return spec;
}

void ExperimentPanel::browseFolder() {
    const QString dir = tb::ui::chooseFile(this, tb::ui::FileChoice::Folder, tr("Data folder"), folder_->text());
    if (!dir.isEmpty()) folder_->setText(dir);
}

void ExperimentPanel::browseMetrics() {
    const QString file = tb::ui::chooseFile(
        this, tb::ui::FileChoice::Save, tr("Metrics file"), metrics_->text().isEmpty() ? QStringLiteral("metrics.jsonl") : metrics_->text(),
        tr("JSON lines (*.jsonl)"));
    if (!file.isEmpty()) metrics_->setText(file);
}

bool ExperimentPanel::staged() const { return parallelism_->currentIndex() != kDataParallel; }

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

void ExperimentPanel::showChosenRows() {
    const bool gpus = onGpus(), data = !staged();
    for (QWidget* f : std::initializer_list<QWidget*>{runOn_, variables_, reduce_, update_, commPrecision_,
                                                      averageEvery_, psShards_, psTasks_, slow_})
        devicesForm_->setRowVisible(f, data);
    // Data parallelism, or the lecture's hybrid (stages inside each process, data parallel across
    // mpirun's processes), takes a process count; a stage per process has one per stage and replica.
    // Either may spread its processes over machines.
    devicesForm_->setRowVisible(processes_, acrossProcesses());
    devicesForm_->setRowVisible(hostfile_, acrossProcesses() || stagePerProcess());
    devicesForm_->setRowVisible(towers_, data && !gpus);
    devicesForm_->setRowVisible(gpus_, data && gpus);
    devicesForm_->setRowVisible(perGpu_, data && gpus);
    for (QWidget* f : std::initializer_list<QWidget*>{stages_, pipeline_, microBatches_}) devicesForm_->setRowVisible(f, !data);
    devicesForm_->setRowVisible(stageReplicas_, parallelism_->currentIndex() == kHybridParallel);
    devicesForm_->setRowVisible(stagePerProcess_, !data);
    // Stages take the step's whole batch: a batch per tower has no towers to follow.
    batchMeaning_->setEnabled(data);
    batchMeaning_->setToolTip(tb::ui::wrappedToolTip(
        data ? tr("Global: the batch is split evenly over the towers. Per tower: each tower computes this many, and "
                  "the global batch grows with the towers.")
             : tr("Stages take the step's whole batch: Batch is the global batch.")));
}

void ExperimentPanel::devicesChanged() {
    showChosenRows();
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

// Model parallelism runs in one process, or a process per stage; data and hybrid parallelism
// across mpirun's processes (the Processes row).
// (A stage per process: as many processes as stages x replicas, each a stage of one replica.)
bool ExperimentPanel::acrossProcesses() const {
    return (!staged() || parallelism_->currentIndex() == kHybridParallel) && !stagePerProcess();
}

void ExperimentPanel::setProcesses(int processes) {
    if (processes > 1 && staged() && !stagePerProcess() && parallelism_->currentIndex() == kModelParallel) {
        loading_ = true;  // (one replica stays one: the hybrid's switch would make it two)
        parallelism_->setCurrentIndex(kHybridParallel);
        loading_ = false;
    }
    processes_->setValue(processes);
    revalidate();
}

bool ExperimentPanel::stagePerProcess() const { return staged() && stagePerProcess_->isChecked(); }

// The stages the form's Stages field gives (2 where it is empty; 2 where it does not read, which
// the form's check then names).
int ExperimentPanel::stageCount() const {
    const QString text = stages_->text().trimmed();
    try {
        std::vector<std::string> names;
        for (const tb::LayerSpec& l : tb::findModel(model_->currentText().toStdString()).layers) names.push_back(l.name);
        return tb::parseStagePlan(text.isEmpty() ? std::string("2") : text.toStdString(), names).count();
    } catch (const std::exception&) {
        return 2;
    }
}

int ExperimentPanel::processes() const {
    if (stagePerProcess())
        return stageCount() * (parallelism_->currentIndex() == kHybridParallel ? stageReplicas_->value() : 1);
    return acrossProcesses() ? processes_->value() : 1;
}

QString ExperimentPanel::hostfile() const {
    return acrossProcesses() || stagePerProcess() ? hostfile_->text().trimmed() : QString();
}

tb::RunConfig ExperimentPanel::config() const {
    tb::RunConfig c = base_;
    c.model = model_->currentText().toStdString();
    c.data = dataSpec().toStdString();
    // "gpu:0*2" is two towers on gpu:0 (DeploymentPlan::parseTowers).
    const int perDevice = towersPerDevice();
    QStringList items;
    for (const QString& d : chosenDevices()) items << (perDevice > 1 ? d + QStringLiteral("*%1").arg(perDevice) : d);
    c.towers = items.join(',').toStdString();
    c.variables = variables_->currentData().toString().toStdString();
    c.reduce = reduce_->currentText().toStdString();
    c.update = update_->currentText().toStdString();
    c.averageEvery = averageEvery_->value();
    c.psShards = psShards_->value();
    c.psTasks = psTasks_->value();
    c.slow = slow_->text().trimmed().toStdString();
    if (staged()) {
        // The stages' rows only: what data parallelism's hidden rows hold is not combined with
        // stages, so their defaults go.
        c.clearTowerStrategy();
        const QString stages = stages_->text().trimmed();
        c.stages = stages.isEmpty() ? std::string("2") : stages.toStdString();
        // "naive" is the default schedule: a config that named none keeps naming none.
        const std::string schedule = pipeline_->currentText().toStdString();
        c.pipeline = schedule == "naive" && base_.pipeline.empty() ? std::string() : schedule;
        c.microBatches = microBatches_->value();
        c.stageReplicas = parallelism_->currentIndex() == kHybridParallel ? stageReplicas_->value() : 1;
        c.stagePerProcess = stagePerProcess();
    } else {
        c.stages.clear();
        c.pipeline.clear();
        c.microBatches = c.stageReplicas = 1;
        c.stagePerProcess = false;
    }
    // A global batch leaves the split to the plan; a batch per tower makes the global batch
    // follow the towers (written out, so a saved file says what a step is).
    // Stages take the step's whole batch (one pipeline): a batch per tower is that batch.
    if (batchMeaning_->currentIndex() == kGlobalBatch || staged()) {
        c.batch = batch_->value();
        c.batchPerTower = 0;
    } else {
        c.batchPerTower = batch_->value();
        c.batch = int(std::min<int64_t>(INT_MAX, int64_t(towerCount()) * batch_->value()));
    }
    c.optimizer = optimizer_->currentText().toStdString();
    c.precision = precision_->currentText().toStdString();
    c.lr = lr_->value();
    c.momentum = momentum_->value();
    c.lrDecaySteps = decaySteps_->value();
    c.lrDecayRate = decayRate_->value();
    c.lrStaircase = staircase_->isChecked();
    c.lrDecay = lrDecay_->currentText().toStdString();
    c.warmupSteps = warmup_->value();
    c.lrScaling = lrScaling_->currentText().toStdString();
    c.lrReferenceBatch = referenceBatch_->value();
    c.accumulate = accumulate_->value();
    c.syncBn = syncBn_->isChecked();
    if (length_->currentIndex() == 0) {
        c.epochs = lengthValue_->value();
        c.steps = 0;
    } else {
        c.steps = int64_t(lengthValue_->value());
    }
    c.seed = uint64_t(seed_->value());
    c.emaDecay = emaDecay_->value();
    c.evalEvery = evalEvery_->value();
    c.validation = validation_->value();
    c.threads = threads_->value();
    c.prefetch = prefetch_->value();
    c.shuffleBuffer = shuffleBuffer_->value();
    c.stream = stream_->currentText().toStdString();
    c.loaderThreads = loaderThreads_->value();
    c.metrics = metrics_->text().trimmed().toStdString();
    c.transfers = transfers_->currentText().toStdString();
    c.commPrecision = commPrecision_->currentText().toStdString();
    c.tfrecordFeatures = tfrecordFeatures_->text().trimmed().toStdString();
    c.augment = augment_->text().trimmed().isEmpty() ? "auto" : augment_->text().trimmed().toStdString();
    c.normalise = normalise_->currentText().toStdString();
    c.skipBadImages = skipBadImages_->isChecked();
    c.tf32 = tf32_->isChecked();
    c.deterministic = deterministic_->isChecked();
    c.reportLag = reportLag_->value();
    c.checkpointEvery = checkpointEvery_->value();
    c.checkpointMinutes = checkpointMinutes_->value();
    c.keepCheckpoints = keepCheckpoints_->value();
    c.initFrom = initFrom_->text().trimmed().toStdString();
    return c;
}

void ExperimentPanel::setConfig(const tb::RunConfig& c) {
    loading_ = true;
    base_ = c;
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
    reduce_->setCurrentText(QString::fromStdString(c.reduce));
    update_->setCurrentText(QString::fromStdString(c.update));
    averageEvery_->setValue(c.averageEvery);
    psShards_->setValue(c.psShards);
    psTasks_->setValue(c.psTasks);
    slow_->setText(QString::fromStdString(c.slow));
    parallelism_->setCurrentIndex(c.stages.empty() ? kDataParallel : c.stageReplicas > 1 ? kHybridParallel : kModelParallel);
    stages_->setText(QString::fromStdString(c.stages));
    pipeline_->setCurrentText(c.pipeline.empty() ? QStringLiteral("naive") : QString::fromStdString(c.pipeline));
    microBatches_->setValue(c.microBatches);
    stageReplicas_->setValue(c.stageReplicas);
    stagePerProcess_->setChecked(c.stagePerProcess);
    batchMeaning_->setCurrentIndex(c.batchPerTower > 0 ? kBatchPerTower : kGlobalBatch);
    batch_->setValue(c.batchPerTower > 0 ? c.batchPerTower : c.batch);
    optimizer_->setCurrentText(QString::fromStdString(c.optimizer));
    precision_->setCurrentText(QString::fromStdString(c.precision));
    lr_->setValue(c.lr);
    momentum_->setValue(c.momentum);
    decaySteps_->setValue(int(std::min<int64_t>(INT_MAX, c.lrDecaySteps)));
    decayRate_->setValue(c.lrDecayRate);
    staircase_->setChecked(c.lrStaircase);
    lrDecay_->setCurrentText(QString::fromStdString(c.lrDecay));
    warmup_->setValue(int(std::min<int64_t>(INT_MAX, c.warmupSteps)));
    lrScaling_->setCurrentText(QString::fromStdString(c.lrScaling));
    referenceBatch_->setValue(c.lrReferenceBatch);
    accumulate_->setValue(c.accumulate);
    syncBn_->setChecked(c.syncBn);
    length_->setCurrentIndex(c.steps > 0 ? 1 : 0);  // its handler sets the value from base_
    lengthValue_->setValue(c.steps > 0 ? double(c.steps) : c.epochs);
    seed_->setValue(int(std::min<uint64_t>(INT_MAX, c.seed)));
    emaDecay_->setValue(c.emaDecay);
    evalEvery_->setValue(int(std::min<int64_t>(INT_MAX, c.evalEvery)));
    validation_->setValue(int(std::min<int64_t>(INT_MAX, c.validation)));
    threads_->setValue(c.threads);
    prefetch_->setValue(c.prefetch);
    shuffleBuffer_->setValue(int(std::min<int64_t>(INT_MAX, c.shuffleBuffer)));
    stream_->setCurrentText(QString::fromStdString(c.stream));
    loaderThreads_->setValue(c.loaderThreads);
    metrics_->setText(QString::fromStdString(c.metrics));
    transfers_->setCurrentText(QString::fromStdString(c.transfers));
    commPrecision_->setCurrentText(QString::fromStdString(c.commPrecision));
    tfrecordFeatures_->setText(QString::fromStdString(c.tfrecordFeatures));
    augment_->setText(c.augment == "auto" ? QString() : QString::fromStdString(c.augment));
    normalise_->setCurrentText(QString::fromStdString(c.normalise));
    skipBadImages_->setChecked(c.skipBadImages);
    tf32_->setChecked(c.tf32);
    deterministic_->setChecked(c.deterministic);
    reportLag_->setValue(c.reportLag);
    checkpointEvery_->setValue(int(std::min<int64_t>(INT_MAX, c.checkpointEvery)));
    checkpointMinutes_->setValue(c.checkpointMinutes);
    keepCheckpoints_->setValue(c.keepCheckpoints);
    initFrom_->setText(QString::fromStdString(c.initFrom));
    // Advanced settings someone changed are shown, not hidden behind the fold.
    const tb::RunConfig defaults;
    if (c.threads != defaults.threads || c.prefetch != defaults.prefetch || c.shuffleBuffer != defaults.shuffleBuffer ||
        c.stream != defaults.stream || c.loaderThreads != defaults.loaderThreads ||
        !c.metrics.empty() || c.transfers != defaults.transfers || c.tf32 != defaults.tf32 || c.deterministic != defaults.deterministic || c.reportLag != defaults.reportLag ||
        !c.tfrecordFeatures.empty() ||
        c.augment != defaults.augment || c.normalise != defaults.normalise || c.skipBadImages)
        advanced_->setOpen(true);
    if (c.checkpointEvery != defaults.checkpointEvery || c.checkpointMinutes != defaults.checkpointMinutes ||
        c.keepCheckpoints != defaults.keepCheckpoints || !c.initFrom.empty())
        checkpoints_->setOpen(true);
    loading_ = false;
    revalidate();
}

QString ExperimentPanel::batchSplit() const {
    if (staged()) return pipelineBatchSplit();
    // Several processes: the batch splits over every worker process's towers.
    const int workers = tb::workerProcesses(config(), processes());
    const int towers = towerCount() * workers;
    if (towers == 0) return tr("no towers");
    const QLocale locale;
    const int per = batchMeaning_->currentIndex() == kGlobalBatch ? batch_->value() / towers : batch_->value();
    QString towersText = towerCount() == 1 ? tr("1 tower") : tr("%1 towers").arg(towerCount());
    if (workers > 1) towersText = tr("%1 processes × %2").arg(workers).arg(towersText);
    if (batchMeaning_->currentIndex() == kGlobalBatch && batch_->value() % towers != 0)
        return tr("%1 does not split over %2").arg(locale.toString(batch_->value()), towersText);
    return tr("%1 = %2 × %3").arg(locale.toString(int64_t(per) * towers), towersText, locale.toString(per));
}

// Stages take the step's whole batch, whatever Batch's meaning says (config()): the hybrid's
// processes each take their share (RunPlan::of), and a pipeline's share is cut over its replicas,
// then into micro-batches (StagePipeline). A stage per process is one pipeline on the whole batch.
QString ExperimentPanel::pipelineBatchSplit() const {
    const QLocale locale;
    const int batch = batch_->value();
    const int workers = tb::workerProcesses(config(), processes());
    const int replicas = parallelism_->currentIndex() == kHybridParallel ? stageReplicas_->value() : 1;
    const int micro = microBatches_->value();
    QStringList parts;
    if (workers > 1) parts << tr("%1 processes").arg(workers);
    if (replicas > 1) parts << tr("%1 replicas").arg(replicas);
    if (micro > 1) parts << tr("%1 micro-batches").arg(micro);
    if (parts.isEmpty()) return tr("%1, all through each stage").arg(locale.toString(batch));
    const int64_t pieces = int64_t(workers) * replicas * micro;
    if (batch % pieces != 0) return tr("%1 does not split over %2").arg(locale.toString(batch), parts.join(" × "));
    return tr("%1 = %2 × %3").arg(locale.toString(batch), parts.join(" × "), locale.toString(batch / pieces));
}

QString ExperimentPanel::inFormWords(const QString& message, bool bold) const {
    static const QRegularExpression flag(QStringLiteral("--([a-z0-9-]+)"));
    QString out;
    qsizetype at = 0;
    for (auto it = flag.globalMatch(message); it.hasNext();) {
        const QRegularExpressionMatch m = it.next();
        const QString key = QString::fromStdString(tb::RunConfig::flagToKey(m.captured(1).toStdString()));
        const QString name = names_.value(key, m.captured(0));  // a flag no field sets stays as written
        const QString between = message.mid(at, m.capturedStart() - at);
        out += (bold ? between.toHtmlEscaped() : between) + (bold ? "<b>" + name.toHtmlEscaped() + "</b>" : name);
        at = m.capturedEnd();
    }
    const QString rest = message.mid(at);
    return out + (bold ? rest.toHtmlEscaped() : rest);
}

QString ExperimentPanel::problemHtml() const { return inFormWords(engineProblem_, true); }

// A model that cannot take the data's samples, said before Start rather than after the run has
// loaded them. At most an IDX header is read, and only when the model, the data or the data's
// folder (a file added, removed or renamed) changed: revalidate runs on every edit.
void ExperimentPanel::checkModelTakesData(const tb::ModelSpec& model, const tb::RunConfig& c) {
    std::error_code ec;  // (no folder: no time; the check says why)
    const auto changed = std::filesystem::last_write_time(tb::dataFolderOf(c.data), ec).time_since_epoch().count();
    const std::string key = c.model + '\n' + c.data + '\n' + std::to_string(ec ? 0 : changed);
    if (key != dataCheckKey_) {
        dataCheckKey_ = key;
        dataCheckProblem_.clear();
        try {
            tb::checkModelTakesData(model, c.data);
        } catch (const std::exception& e) {
            dataCheckProblem_ = e.what();
        }
    }
    if (!dataCheckProblem_.empty()) throw tb::Error(dataCheckProblem_);
}

void ExperimentPanel::revalidate() {
    if (loading_) return;
    const bool folder = data_->currentData().toString().endsWith(':');
    dataForm_->setRowVisible(folderRow_, folder);
    const QString optimizer = optimizer_->currentText();
    momentum_->setEnabled(optimizer == QLatin1String("momentum") || optimizer == QLatin1String("nesterov"));
    const bool exponential = lrDecay_->currentText() == QLatin1String("exponential");
    lrDecay_->setEnabled(decaySteps_->value() > 0);
    decayRate_->setEnabled(decaySteps_->value() > 0 && exponential);
    staircase_->setEnabled(decaySteps_->value() > 0 && exponential);
    referenceBatch_->setEnabled(lrScaling_->currentText() == QLatin1String("linear"));
    split_->setText(batchSplit());
    const tb::RunConfig c = config();
    QString why;
    try {
        // No GPU checked leaves no towers and no batch: say so before the engine's checks would
        // complain about the batch size.
        if (onGpus() && chosenDevices().isEmpty()) throw tb::Error("--towers: check at least one GPU");
        // The engine's own checks, in the order a run makes them, so the message is the same
        // (the plan's against the catalog's GPUs).
        // What only the form knows: its length in steps, its hostfile and its process count.
        if (length_->currentIndex() == 1 && (lengthValue_->value() < 1 || lengthValue_->value() != std::floor(lengthValue_->value())))
            throw tb::Error("--steps: " + lengthValue_->text().toStdString() + " is not a whole number of steps from 1");
        if (!hostfile().isEmpty() && !QFileInfo(hostfile()).isFile())
            throw tb::Error("Hostfile: " + hostfile().toStdString() +
                            " does not exist (leave it empty to run every process on this machine)");
        if (processes() > kMaxProcesses)
            throw tb::Error("Processes: " + std::to_string(processes()) + " is more than the " +
                            std::to_string(kMaxProcesses) + " this window starts through mpirun");
        c.validate();
        tb::checkProcessRoles(c, processes());
        const tb::DeploymentPlan plan = catalog_.makePlan(c);
        if (processes() > 1) plan.checkAcrossProcesses();
        tb::checkPrecision(c.precision, plan, catalog_.gpus);
        const tb::ModelSpec model = tb::findModel(c.model);
        if (folder && folder_->text().isEmpty()) throw tb::Error("--data: choose a folder");
        if (folder && !QFileInfo(folder_->text()).isDir())
            throw tb::Error("--data: " + folder_->text().toStdString() + " is not a folder");
        checkModelTakesData(model, c);  // also says Fashion-MNIST is not installed, as a run would
    } catch (const std::exception& e) {
        why = QString::fromUtf8(e.what());
    }
    engineProblem_ = why;
    problem_ = inFormWords(why, false);
    valid_ = why.isEmpty();
    emit configChanged(c, valid_);
}
