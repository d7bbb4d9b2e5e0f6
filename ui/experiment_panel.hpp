// ExperimentPanel: everything a run needs, chosen by pointing and clicking: model, dataset,
// towers and strategy, hyperparameters. It produces a RunConfig (the same settings as the CLI's
// flags and config files) and explains an invalid combination in place, in the engine's own
// words, before Start is allowed.
#pragma once
#include <QWidget>

#include "io/run_config.hpp"

class QComboBox;
class QSpinBox;
class QDoubleSpinBox;
class QLineEdit;
class QLabel;
class QPushButton;

class ExperimentPanel : public QWidget {
    Q_OBJECT
public:
    explicit ExperimentPanel(QWidget* parent = nullptr);
    tb::RunConfig config() const;
    void setConfig(const tb::RunConfig& c);
    bool isValid() const { return valid_; }
    QString problem() const;          // the explanation shown, empty when valid
    QSpinBox* towersBox() const { return towers_; }
    QComboBox* variablesBox() const { return variables_; }
    QComboBox* reduceBox() const { return reduce_; }
    QComboBox* updateBox() const { return update_; }

signals:
    void configChanged(const tb::RunConfig& c, bool valid);

private slots:
    void revalidate();

private:
    QString dataSpec() const;
    void browseFolder();

    QComboBox *model_, *data_, *variables_, *reduce_, *update_, *optimizer_, *length_;
    QLineEdit *folder_, *slow_;
    QPushButton* browse_;
    QSpinBox *towers_, *averageEvery_, *psShards_, *batchPerTower_, *decaySteps_, *seed_;
    QDoubleSpinBox *lr_, *decayRate_, *lengthValue_;
    QLabel* problem_;
    bool valid_ = false;
    bool loading_ = false;  // setConfig in progress: one revalidation at the end
};
