// ExperimentPanel: every setting of a run, chosen by pointing and clicking: model and data,
// towers (CPU towers, or GPUs from a DeviceCatalog with a number of towers per GPU) and
// strategy, training, evaluation, and the advanced settings folded away. It produces a RunConfig
// (the same settings as the CLI's flags and config files: every key of RunConfig has a field
// here, or is on commandLineOnlyKeys()) and explains an invalid combination in plain words,
// naming the form's fields, before Start is allowed.
#pragma once
#include <QHash>
#include <QWidget>

#include "devices/device_catalog.hpp"
#include "io/run_config.hpp"

class QCheckBox;
class QComboBox;
class NumberBox;
class QFormLayout;
class QLabel;
class QLineEdit;
class QListWidget;
class QPushButton;
class QSpinBox;
class FoldSection;
namespace tb {
struct ModelSpec;
}

class ExperimentPanel : public QWidget {
    Q_OBJECT
public:
    // The GPUs offered are the catalog's; a config may still name others, which are listed as
    // missing and refused.
    explicit ExperimentPanel(DeviceCatalog catalog, QWidget* parent = nullptr);
    tb::RunConfig config() const;
    // Shows `c`; settings the form has no field for (commandLineOnlyKeys) are kept as they are,
    // so config() gives back exactly what was set.
    void setConfig(const tb::RunConfig& c);
    // The processes a run trained as (its plan.json), after setConfig: the count, and for stages
    // in each of several processes the hybrid choice, whose rows take a process count (the config
    // alone, one replica, opens as model parallelism).
    void setProcesses(int processes);
    bool isValid() const { return valid_; }
    // The explanation of an invalid combination in the form's own words ("Reduce allreduce
    // needs Variables replicated ..."), empty when valid; problemHtml() the same with the fields'
    // names in bold.
    QString problem() const { return problem_; }
    QString problemHtml() const;
    // An engine message ("--reduce allreduce needs --variables replicated") with the flags
    // replaced by the fields' names (a flag no field sets stays as written); `bold` marks them up
    // for a rich-text label.
    QString inFormWords(const QString& engineMessage, bool bold = false) const;
    // "128 = 2 towers × 64": the global batch and its split (or why there is none).
    QString batchSplit() const;  // "Global batch": the step's batch and how it is cut

    // The field that sets a RunConfig key (file key, e.g. "ema_decay"), nullptr for the keys
    // without one. Keys whose field sets them through a choice ("steps": the length's unit,
    // "batch_per_tower": the batch's meaning) give that choice.
    QWidget* fieldFor(const QString& key) const { return fields_.value(key); }
    // Its field's label, or where the label leans on its group ("Every (steps)" under Checkpoints)
    // a name that says it whole: problems and the Runs tab's comparison show it alone.
    QString settingName(const QString& key) const { return names_.value(key); }
    // Keys that only the command line sets: their meaning is the terminal's.
    static QStringList commandLineOnlyKeys() { return {QStringLiteral("quiet")}; }
    FoldSection* advancedSection() const { return advanced_; }

    // Processes (a run launch's choice, not a setting of the run): 1 trains in this window; N
    // starts N processes through mpirun (ProcessLauncher), on this machine or a hostfile's. Data
    // and hybrid parallelism (stages inside each process); model parallelism alone runs in one.
    int processes() const;
    QString hostfile() const;
    QSpinBox* processesBox() const { return processes_; }
    QLineEdit* hostfileBox() const { return hostfile_; }

    QComboBox* modelBox() const { return model_; }
    QComboBox* parallelismBox() const { return parallelism_; }  // kDataParallel, kModelParallel or kHybridParallel
    QComboBox* runOnBox() const { return runOn_; }    // kCpuTowers or kGpus
    QSpinBox* towersBox() const { return towers_; }   // CPU towers
    QListWidget* gpuList() const { return gpus_; }    // one checkable item per GPU
    QSpinBox* towersPerGpuBox() const { return perGpu_; }
    QComboBox* variablesBox() const { return variables_; }
    QComboBox* reduceBox() const { return reduce_; }
    QComboBox* updateBox() const { return update_; }
    QSpinBox* batchBox() const { return batch_; }
    QComboBox* batchMeaningBox() const { return batchMeaning_; }  // kGlobalBatch or kBatchPerTower

    static constexpr int kCpuTowers = 0, kGpus = 1;         // runOnBox() indexes
    static constexpr int kDataParallel = 0, kModelParallel = 1, kHybridParallel = 2;  // parallelismBox() indexes
    static constexpr int kGlobalBatch = 0, kBatchPerTower = 1;  // batchMeaningBox() indexes

signals:
    void configChanged(const tb::RunConfig& c, bool valid);

private slots:
    void revalidate();

private:
    QString pipelineBatchSplit() const;  // batchSplit() where stages run
    // The constructor's parts: the fields of each section, the form, the connections.
    void makeExperimentFields();
    void makeDeviceFields();
    void makeTrainingFields();
    void makeEvaluationFields();
    void makeAdvancedFields();
    void layOutForm();
    void connectFields();
    QString dataSpec() const;
    void browseFolder();
    void browseMetrics();
    bool onGpus() const;
    // The devices chosen, each once, in order: cpu:0 ... cpu:N-1, or the GPUs checked.
    QStringList chosenDevices() const;
    int towersPerDevice() const;                    // 1 for CPU towers (a CPU tower is a device of its own)
    int towerCount() const { return int(chosenDevices().size()) * towersPerDevice(); }
    // Run on, CPU towers, GPU checks or towers per GPU changed: show the rows of the choice made
    // and offer its devices as the variables' places.
    void devicesChanged();
    // Shows the rows of the parallelism and devices chosen: data parallelism's (towers, variables,
    // processes, ...) or the stages' (stages, schedule, micro-batches; replicas for hybrid).
    void showChosenRows();
    bool staged() const;  // model or hybrid parallelism chosen
    // Data or hybrid parallelism, without Stage processes: the Processes and Hostfile rows apply.
    bool acrossProcesses() const;
    // Model or hybrid parallelism with each stage (of each replica) in a process of its own
    // (--stage-per-process): as many processes as stages x replicas, on this machine.
    bool stagePerProcess() const;
    int stageCount() const;
    void setVariablesChoices(const QString& keep);  // keeps `keep` selected where it is offered
    void showTowers(const std::string& towers);     // setConfig's part for the device controls
    void fitGpuList();
    // Registers `field` as the one that sets `key`, and its form label as the key's name in
    // explanations.
    void bind(const QString& key, QWidget* field, const QString& label);
    void checkModelTakesData(const tb::ModelSpec& model, const tb::RunConfig& c);  // revalidate's, remembered

    DeviceCatalog catalog_;
    tb::RunConfig base_;  // the last config set: what the form has no field for comes from here
    QHash<QString, QWidget*> fields_;
    QHash<QString, QString> names_;  // key -> settingName
    QComboBox *normalise_, *stream_, *lrDecay_, *model_, *data_, *parallelism_, *runOn_, *variables_, *reduce_, *update_, *optimizer_, *precision_, *length_, *batchMeaning_,
        *transfers_, *commPrecision_, *pipeline_, *lrScaling_;
    QListWidget* gpus_;
    QFormLayout *devicesForm_, *trainingForm_, *dataForm_;
    QWidget* folderRow_;
    QLineEdit *folder_, *slow_, *stages_, *metrics_, *initFrom_, *tfrecordFeatures_, *hostfile_, *augment_;
    QPushButton *browse_, *browseMetrics_, *browseInit_;
    QSpinBox *towers_, *perGpu_, *processes_, *averageEvery_, *psShards_, *psTasks_, *microBatches_, *stageReplicas_, *batch_, *decaySteps_, *warmup_, *seed_, *evalEvery_, *validation_,
        *shuffleBuffer_, *loaderThreads_, *prefetch_, *threads_, *checkpointEvery_, *keepCheckpoints_, *referenceBatch_, *accumulate_, *reportLag_;
    NumberBox *lr_, *momentum_, *decayRate_, *lengthValue_, *emaDecay_, *checkpointMinutes_;
    QCheckBox *staircase_, *tf32_, *deterministic_, *stagePerProcess_, *syncBn_, *skipBadImages_;
    QLabel* split_;
    FoldSection *advanced_, *checkpoints_;
    QString problem_, engineProblem_;
    std::string dataCheckKey_;      // the model, data and data folder's time checkModelTakesData last saw
    std::string dataCheckProblem_;  // and what it found ("" fits)
    bool valid_ = false;
    bool loading_ = false;  // setConfig in progress: one revalidation at the end
};
