// DevicesPanel: per-tower busy % (CPU towers; per-GPU utilisation and memory once the CUDA
// backend lands) and a timeline of the last steps, one lane per tower, each step split into
// data, forward, backward, reduce, wait and apply.
#pragma once
#include <QWidget>
#include <deque>

#include "engine/observer.hpp"

class QProgressBar;
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
    explicit DevicesPanel(QWidget* parent = nullptr);
    TimelineView* timeline() const { return timeline_; }
    // Busy % shown for tower i (tests).
    int busyPercent(int tower) const;

public slots:
    void reset(const QStringList& towerDevices);
    void addStep(const tb::StepMetrics& m);

private:
    QVBoxLayout* bars_ = nullptr;
    QVector<QProgressBar*> busy_;
    TimelineView* timeline_ = nullptr;
};
