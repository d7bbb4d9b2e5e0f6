// DevicesPanel: the machine's GPUs live (name, utilisation and memory bars, sparklines of the
// last minute, from the window's device monitor, with or without a run), per-tower busy % and
// a timeline of the last steps, one lane per tower, each step split into data, forward,
// backward, reduce, wait and apply.
#pragma once
#include <QWidget>
#include <deque>

#include "device_catalog.hpp"
#include "engine/observer.hpp"

class QCPGraph;
class QCustomPlot;
class QLabel;
class QProgressBar;
class QTimer;
class QVBoxLayout;

class TimelineView : public QWidget {
    Q_OBJECT
public:
    explicit TimelineView(QWidget* parent = nullptr);
    void reset(int towers);
    void addStep(const tb::StepMetrics& m);   // keeps the last kMaxSteps
    int stepsShown() const { return int(steps_.size()); }
    QSize sizeHint() const override { return {520, 160}; }
    static constexpr int kMaxSteps = 12;

protected:
    void paintEvent(QPaintEvent*) override;

private:
    int towers_ = 0;
    std::deque<tb::StepMetrics> steps_;
};

class DevicesPanel : public QWidget {
    Q_OBJECT
public:
    static constexpr double kHistorySeconds = 60;  // what the GPU sparklines show
    static constexpr int kFrameMs = 250;           // sparkline replots: samples come at 5 Hz

    // One row of bars and a sparkline per GPU of the catalog.
    explicit DevicesPanel(const DeviceCatalog& catalog, QWidget* parent = nullptr);
    TimelineView* timeline() const { return timeline_; }
    // Busy % shown for tower i (tests).
    int busyPercent(int tower) const;
    // What GPU row i shows (tests): utilisation % (-1 before a reading), the memory bar's text,
    // its sparkline (graph 0 utilisation, graph 1 memory used, both in %).
    int gpuRows() const { return int(gpus_.size()); }
    int gpuUtilPercent(int gpu) const;
    QString gpuMemoryText(int gpu) const;
    QCustomPlot* gpuPlot(int gpu) const;
    QString gpuNote() const;  // why there are no GPUs or no telemetry; empty when both exist

public slots:
    void reset(const QStringList& towerDevices);
    void addStep(const tb::StepMetrics& m);
    // A batch from the device monitor, delivered on the GUI thread. Samples are matched to rows
    // by index: NVML's, which is CUDA's where CUDA_VISIBLE_DEVICES does not renumber the GPUs
    // (DeviceSample carries no PCI bus id to match on).
    void addSamples(const std::vector<tb::DeviceSample>& samples);
    void setTelemetryUnavailable(const QString& why);

private:
    struct GpuRow {
        QProgressBar *util = nullptr, *memory = nullptr;
        QCustomPlot* plot = nullptr;
        QCPGraph *utilGraph = nullptr, *memoryGraph = nullptr;
        double lastT = 0;
    };
    void replotGpus();

    QVector<GpuRow> gpus_;
    QLabel* gpuNote_ = nullptr;
    QTimer* timer_ = nullptr;
    bool dirty_ = false;  // samples arrived since the last replot
    QVBoxLayout* bars_ = nullptr;
    QVector<QProgressBar*> busy_;
    TimelineView* timeline_ = nullptr;
};
