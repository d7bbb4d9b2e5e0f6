// ScalingLab: the scaling lab's window. "Why is my multi-tower run not N times faster, and what
// would be?" A measured sweep of the current experiment over tower counts x strategies
// (engine/scaling_sweep.hpp, run by a SweepWorker on a thread of its own), drawn as it comes:
// examples/sec and speedup over one tower against the ideal line, and a stacked bar of where
// each point's step goes. Beside the measurements, the what-if predictor
// (engine/step_time_model.hpp) calibrated from one measured point draws its curves for this
// machine or for hardware picked from presets, with every assumption listed and editable and the
// bottleneck named in one sentence per strategy. A finished sweep's folder opens again from the
// runs list.
#pragma once
#include <QObject>
#include <QString>
#include <QWidget>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/pipeline_time_model.hpp"
#include "engine/scaling_sweep.hpp"
#include "engine/step_time_model.hpp"
#include "view_format.hpp"

class QCheckBox;
class QComboBox;
class QCustomPlot;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;

// One measured point as the window receives it, with what the predictor needs of the sweep.
struct SweepProgress {
    tb::SweepResult result;
    int64_t params = 0;
    tb::HostCore host;
    int cores = 0;  // the machine's, which points with --threads 0 use
    int done = 0, total = 0;
};

// Runs a ScalingSweep on the thread it lives in (Qt's worker-object pattern); stop() from any.
class SweepWorker : public QObject {
    Q_OBJECT
public:
    static void registerTypes();
    void stop();   // the point in progress ends at its step (with its final evaluation)
    void abort();  // the same without it (the window is closing)

public slots:
    void run(const tb::RunConfig& base, const tb::SweepSettings& settings, const QString& folder);

signals:
    void pointMeasured(const SweepProgress& p);
    void finished(const QString& folder, bool stopped);
    void failed(const QString& message);

private:
    std::mutex mutex_;
    tb::ScalingSweep* sweep_ = nullptr;  // the sweep in progress, owned by run()'s stack
    enum class Pending { None, Stop, Abort } pending_ = Pending::None;  // asked before run() began
};

class ScalingLab : public QWidget {
    Q_OBJECT
public:
    explicit ScalingLab(QWidget* parent = nullptr);
    ~ScalingLab() override;

    // The experiment the sweep measures (model, data, batch per tower, threads, optimiser...).
    void setBase(const tb::RunConfig& base);
    // A sweep's folder read back; false (and the reason in statusText()) when it is not one.
    bool openSweep(const QString& folder);
    bool running() const { return running_; }
    QString statusText() const;
    QString folder() const { return folder_; }
    // Asked before a sweep starts: true while the main window trains (a sweep beside a run
    // would measure both).
    void setBusyCheck(std::function<bool()> busy) { busy_ = std::move(busy); }
    // Says why a sweep of the form's settings cannot run in the form's words; unset, as the engine
    // says it.
    void setExplainer(tb::ui::Explainer explain) { explain_ = std::move(explain); }

    // For tests and screenshots.
    QLineEdit* towersEdit() const { return towers_; }
    QCheckBox* strategyBox(const QString& name) const;
    QSpinBox* warmupBox() const { return warmup_; }
    QSpinBox* stepsBox() const { return steps_; }
    QPushButton* startButton() const { return start_; }
    QComboBox* hardwareBox() const { return hardware_; }
    QComboBox* linkBox() const { return link_; }
    QSpinBox* maxTowersBox() const { return maxTowers_; }
    QDoubleSpinBox* serialShareBox() const { return serialShare_; }
    QCustomPlot* rateChart() const { return rate_; }
    QCustomPlot* speedupChart() const { return speedup_; }
    QCustomPlot* breakdownChart() const { return breakdown_; }
    QTableWidget* table() const { return table_; }
    QLabel* bottleneckLabel() const { return bottleneck_; }
    QLabel* assumptionsLabel() const { return assumptions_; }
    const std::vector<tb::SweepResult>& results() const { return results_; }
    // The predicted examples/sec of `strategy` on `towers` towers as the charts draw it; -1 where
    // nothing is predicted (no point measured yet).
    double predicted(const QString& strategy, int towers) const;

public slots:
    void startSweep();
    void stopSweep();

signals:
    void sweepRequested(const tb::RunConfig& base, const tb::SweepSettings& settings, const QString& folder);
    void sweepFinished(const QString& folder);

protected:
    void closeEvent(QCloseEvent* e) override;
    void showEvent(QShowEvent* e) override;

private:
    // predict()'s parts: the charts' curves and dots (tops: the highest rate and speedup drawn),
    // their ranges, the table, and the explanation.
    struct ChartTops {
        double rate = 0, speedup = 1;
        double predictedOne = 0;  // the fastest one-tower prediction (the ideal's base on other hardware)
    };
    QStringList plotPredicted(const tb::Calibration& cal, const tb::Assumptions& a, int maxN, bool device,
                              ChartTops& tops);
    void plotMeasured(ChartTops& tops);
    void plotIdeal(double one, int maxN, ChartTops& tops);
    void finishCharts(bool device, int maxN, const ChartTops& tops);
    // Returns the model's mean |error| over the points other than its calibration point (-1: none).
    double fillTable(const tb::Calibration* cal, const tb::Assumptions& a);
    void explain(const tb::Calibration* cal, const tb::Assumptions& a, bool device, int maxN,
                 const QStringList& sentences, double meanError);
    QWidget* buildSettings();
    QWidget* buildPredictor();
    void addPoint(const SweepProgress& p);
    void showResults();  // table, measured series, bars
    void predict();      // the model's curves and sentences, from the settings of the moment
    bool calibration(tb::Calibration* cal) const;
    tb::Assumptions assumptions() const;  // as the spin boxes say
    tb::Scenario scenario(int towers, const std::string& strategy, const tb::Calibration& cal) const;
    // tb::predictStep with this sweep's model's pipeline costs (measured once per shape).
    tb::Prediction predictStep(const tb::Calibration& cal, const tb::Assumptions& a, const tb::Scenario& s) const;
    std::vector<std::string> strategies() const;  // of the results, in the sweep's order
    void setRunning(bool running);

    tb::RunConfig base_;
    QString folder_, status_;
    bool running_ = false;
    bool sized_ = false;  // sized to its screen at its first showing
    std::vector<tb::SweepResult> results_;
    int64_t params_ = 0;
    tb::HostCore host_;
    int cores_ = 1;
    std::function<bool()> busy_;
    tb::ui::Explainer explain_;
    QThread* thread_;
    SweepWorker* worker_;

    QLineEdit* towers_;
    std::vector<QCheckBox*> strategyBoxes_;  // mean, allreduce, async, average, pipeline
    QSpinBox *averageK_, *microBatches_, *warmup_, *steps_;
    QComboBox* schedule_;
    mutable std::unique_ptr<tb::PipelineCostCache> pipelineCosts_;  // of costsModel_
    mutable std::string costsModel_;
    QPushButton *start_, *stop_, *open_;
    QLabel *baseLabel_, *statusLabel_;
    QComboBox *from_, *hardware_, *link_, *network_;
    QSpinBox *machines_, *shards_, *maxTowers_;
    QDoubleSpinBox *serialShare_, *hostLatency_, *hostGbps_, *dataScale_;
    // The serial share fitted to the sweep (tb::fitSerialShare) and its points in words; -1: none.
    double fittedShare_ = -1;
    QString fittedFrom_;
    QLabel *assumptions_, *bottleneck_;
    QCustomPlot *rate_, *speedup_, *breakdown_;
    class QCPItemText* breakdownHint_;  // over the empty breakdown: what it will show
    QTableWidget* table_;
};

Q_DECLARE_METATYPE(SweepProgress)
Q_DECLARE_METATYPE(tb::SweepSettings)
