// DevicesPanel: the machine's GPUs live (name, utilisation and memory bars, sparklines of the
// last minute, from the window's device monitor, with or without a run), per-tower busy % (over
// the whole run, and over the last seconds beside it) and a timeline, one lane per tower.
// TimelineView: synchronous runs show the last steps side by side, each as wide as its wall
// time, split into data, forward, backward, straggle, wait, reduce and apply, with the steps that
// ended in an average marked; asynchronous runs show the run's wall clock, each push in its
// tower's lane at the time it happened, so the towers run side by side and a straggler's long
// compute shows at its true length. Pipeline runs (model parallelism) have a lane per stage, and
// each step's bar shows the stage's micro-batch blocks where they ran (forward light, backward
// dark, numbered by micro-batch), the hatched gaps between them the bubble, then its update.
// Hovering a bar shows each phase in milliseconds.
#pragma once
#include <QWidget>
#include <deque>
#include <span>
#include <vector>

#include "devices/device_catalog.hpp"
#include "engine/observer.hpp"
#include "devices/phase_colors.hpp"

class QCPGraph;
class QCustomPlot;
class QLabel;
class QProgressBar;
class QTimer;
class QVBoxLayout;

class TimelineView : public QWidget {
    Q_OBJECT
public:
    static constexpr int kMaxSteps = 12;             // synchronous steps shown
    static constexpr int kMaxPushesPerTower = 400;   // asynchronous pushes kept per lane

    // One tower's part of one step (sync) or one push (async), laid out for the current size.
    struct Bar {
        int tower = 0;
        int64_t step = 0;          // the step, or the update the push made
        QRectF rect;               // the bar as drawn; its phases run left to right
        QRectF cell;               // where hovering finds it (its column or its push in the lane)
        double start = 0, end = 0; // async: seconds on the run's clock
        double stepSeconds = 0;    // sync: the step's wall time
        int64_t staleness = -1;    // async
        bool averaged = false;     // sync: the replicas were averaged after this step
        tb::TowerPhases phases;
        double bubble = -1;        // pipelines: the step's bubble_fraction
        int microBatches = 0, stages = 0;  // pipelines
    };
    // A pipeline stage's forward or backward of one micro-batch, laid out for the current size.
    struct Block {
        int stage = 0;
        int64_t step = 0;
        int micro = 0;
        bool forward = true;
        QRectF rect;
    };

    explicit TimelineView(QWidget* parent = nullptr);
    // A new run of `towers` lanes; `pipeline`: its lanes are stages (its legend is the
    // pipeline's from the start, not once the first step's blocks arrive).
    void reset(int towers, bool pipeline = false);
    void addStep(const tb::StepMetrics& m);
    int stepsShown() const;                     // reports kept: steps, or pushes (async)
    bool wallClock() const { return async_; }   // an asynchronous run: lanes on the run's clock
    bool pipeline() const { return pipeline_; } // a pipeline run: lanes are stages
    QVector<Bar> bars() const;                  // what is drawn at the current size
    QVector<Block> blocks() const;              // pipelines: every micro-batch block drawn
    QVector<int64_t> averagingMarks() const;    // steps drawn with an averaging mark
    QString toolTipAt(const QPointF& pos) const;  // a bar's phases in ms; empty off the bars
    // Where the legend writes each phase's name and where the bars go, at the current size (the
    // legend wraps rather than leave a phase out; the screen test checks both fit).
    QVector<QRectF> legendLabels() const;
    QRectF plotArea() const;
    QSize sizeHint() const override { return {520, 160}; }

protected:
    bool event(QEvent* e) override;  // tooltips per bar
    void paintEvent(QPaintEvent*) override;

private:
    // An asynchronous push as the timeline keeps it.
    struct Push {
        int64_t update = 0, staleness = -1;
        double end = 0;            // the run's clock when the engine recorded it
        tb::TowerPhases phases;
    };
    // The geometry shared by painting, hit-testing and tests.
    struct Frame {
        QRectF legend, marks, plot, axis;  // rows top to bottom; plot holds the lanes
        double labelW = 0, laneH = 0, barH = 0;
        int lanes = 0;
        double t0 = 0, t1 = 0;             // async: the window on the run's clock
        double perSecond = 0;              // pixels per second (sync: all steps fill the plot)
    };
    // One phase's swatch and name in the legend, relative to the legend's top left.
    struct LegendEntry {
        tb::ui::Phase phase;
        QRectF swatch, label;
    };
    Frame frame() const;
    int lanes() const;
    std::span<const tb::ui::Phase> phaseOrder() const;  // the order a step or a push runs them
    QString phaseLabel(tb::ui::Phase phase) const;
    QString laneLabel(int lane) const;
    QVector<LegendEntry> legendEntries(double width) const;  // wrapped into rows of `width`

    int towers_ = 0;
    bool async_ = false;
    bool pipeline_ = false;                // the steps carry stage blocks
    int stages_ = 0;                       // pipelines: stages (lanes are stages x replicas)
    bool sawAverage_ = false;              // a row for averaging marks, kept once needed
    std::deque<tb::StepMetrics> steps_;    // sync: the last kMaxSteps
    std::vector<std::deque<Push>> pushes_; // async: per tower, its last pushes
};

class DevicesPanel : public QWidget {
    Q_OBJECT
public:
    static constexpr double kHistorySeconds = 60;  // what the GPU sparklines show
    static constexpr int kFrameMs = 250;           // sparkline replots: samples come at 5 Hz

    // One row of bars and a sparkline per GPU of the catalog.
    explicit DevicesPanel(const DeviceCatalog& catalog, QWidget* parent = nullptr);
    static constexpr double kRecentSeconds = 2;    // the recent busy window, of each tower's time

    TimelineView* timeline() const { return timeline_; }
    // Busy % of tower i over the whole run (the bar) and over its last kRecentSeconds (beside it).
    int busyPercent(int tower) const;
    int recentBusyPercent(int tower) const;
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
    // Every report of a batch (the run's busy fractions need all of them).
    void addSteps(const std::vector<tb::StepMetrics>& steps);
    // The run ended: each tower's bar shows the summary's busy share (tower_busy).
    void finishRun(const std::vector<double>& towerBusy);
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
    // One tower's busy time and time over the run, and its last reports, on its own clock.
    struct Busy {
        double busy = 0, seconds = 0;
        struct Report {
            double t, busy, seconds;
        };
        std::deque<Report> recent;
        double recentFraction() const;
    };
    void replotGpus();

    QVector<GpuRow> gpus_;
    QLabel* gpuNote_ = nullptr;
    QTimer* timer_ = nullptr;
    bool dirty_ = false;  // samples arrived since the last replot
    QVBoxLayout* bars_ = nullptr;
    QVector<QProgressBar*> busyBars_;
    QVector<Busy> busy_;
    QLabel* timelineTitle_ = nullptr;
    TimelineView* timeline_ = nullptr;
};
