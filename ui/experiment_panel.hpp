// ExperimentPanel: everything a run needs, chosen by pointing and clicking: model, dataset,
// towers (CPU towers, or GPUs from a DeviceCatalog with a number of towers per GPU) and
// strategy, hyperparameters. It produces a RunConfig (the same settings as the CLI's flags and
// config files) and explains an invalid combination in place, in the engine's own words, before
// Start is allowed.
#pragma once
#include <QWidget>

#include "device_catalog.hpp"
#include "io/run_config.hpp"

class QComboBox;
class QFormLayout;
class QListWidget;
class QSpinBox;
class QDoubleSpinBox;
class QLineEdit;
class QLabel;
class QPushButton;

class ExperimentPanel : public QWidget {
    Q_OBJECT
public:
    // The GPUs offered are the catalog's; a config may still name others, which are listed as
    // missing and refused.
    explicit ExperimentPanel(DeviceCatalog catalog, QWidget* parent = nullptr);
    tb::RunConfig config() const;
    void setConfig(const tb::RunConfig& c);
    bool isValid() const { return valid_; }
    QString problem() const;          // the explanation shown, empty when valid
    QComboBox* runOnBox() const { return runOn_; }    // kCpuTowers or kGpus
    QSpinBox* towersBox() const { return towers_; }   // CPU towers
    QListWidget* gpuList() const { return gpus_; }    // one checkable item per GPU
    QSpinBox* towersPerGpuBox() const { return perGpu_; }
    QComboBox* variablesBox() const { return variables_; }
    QComboBox* reduceBox() const { return reduce_; }
    QComboBox* updateBox() const { return update_; }

    static constexpr int kCpuTowers = 0, kGpus = 1;  // runOnBox() indexes

signals:
    void configChanged(const tb::RunConfig& c, bool valid);

private slots:
    void revalidate();

private:
    QString dataSpec() const;
    void browseFolder();
    bool onGpus() const;
    // The devices chosen, each once, in order: cpu:0 ... cpu:N-1, or the GPUs checked.
    QStringList chosenDevices() const;
    int towersPerDevice() const;                    // 1 for CPU towers (a CPU tower is a device of its own)
    // Run on, CPU towers, GPU checks or towers per GPU changed: show the rows of the choice made
    // and offer its devices as the variables' places.
    void devicesChanged();
    void setVariablesChoices(const QString& keep);  // keeps `keep` selected where it is offered
    void showTowers(const std::string& towers);     // setConfig's part for the device controls
    void fitGpuList();

    DeviceCatalog catalog_;
    QComboBox *model_, *data_, *runOn_, *variables_, *reduce_, *update_, *optimizer_, *length_;
    QListWidget* gpus_;
    QFormLayout* devicesForm_;
    QLineEdit *folder_, *slow_;
    QPushButton* browse_;
    QSpinBox *towers_, *perGpu_, *averageEvery_, *psShards_, *batchPerTower_, *decaySteps_, *seed_;
    QDoubleSpinBox *lr_, *decayRate_, *lengthValue_;
    QLabel* problem_;
    bool valid_ = false;
    bool loading_ = false;  // setConfig in progress: one revalidation at the end
};
