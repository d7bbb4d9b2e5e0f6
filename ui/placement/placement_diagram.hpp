// PlacementDiagram: where the variables and the towers of a deployment plan live, drawn as the
// seeds' pictures are: the variables' holder (with their size in MB), one box per tower with its
// device and batch slice, arrows for parameters out and gradients back labelled with the bytes
// each link carries per step and its kind (host↔GPU, GPU↔GPU), or the ring among replicated
// towers with its all-reduce volume, or the parameter-server shards (each with the variables
// and megabytes dealt to it, joined to the towers by one bus); towers sharing a GPU are framed
// together; the bytes the whole step moves are written under it. During a run it animates each
// step: towers coloured by phase, arrows pulsing with the bytes moved, the straggler marked.
#pragma once
#include <QRectF>
#include <QString>
#include <QStringList>
#include <QWidget>

#include <deque>
#include <vector>

#include "engine/observer.hpp"
#include "placement/placement_model.hpp"

class PlacementDiagram : public QWidget {
    Q_OBJECT
public:
    explicit PlacementDiagram(QWidget* parent = nullptr);
    const PlacementModel& model() const { return model_; }
    QSize sizeHint() const override { return {520, 300}; }
    QSize minimumSizeHint() const override { return {320, 200}; }

public slots:
    void setModel(const PlacementModel& model);   // redraws at once; clears an invalid state
    // The form's settings cannot run: the diagram shows why instead of a plan the form no longer
    // describes (the diagram and the form never disagree).
    void setInvalid(const QString& why);
    QString invalidReason() const { return invalid_; }
    const tb::StepMetrics& lastStep() const { return last_; }  // the step shown (its bytes counter); none after a run
    void showStep(const tb::StepMetrics& m);      // animates one step (phases, bytes, step number); give it every step
    void clearActivity();                         // back to the static picture (run ended)

public:
    QRectF towerRect(int i) const;                // where tower i's box is drawn at the current size
    // The tower marked "slowest": the one that waited least at the synchronisation point over the
    // last several steps (waitShare); -1: none.
    int slowestTower() const;
    double waitShare(int tower) const;            // its wait / wall time over the last ten steps; 0 before any
    // Tower i's text whole (device, batch, slowdown; its last step's phases during a run): the
    // tooltip over its box, which may be too narrow for the text.
    QString towerText(int i) const;
    // The line under the plan: the bytes a step moves (async: per update); its tooltip says it whole.
    QString caption() const;
    // Texts the last paint could not show whole (elided even in the smallest font it takes).
    const QStringList& cutTexts() const { return cut_; }

protected:
    void paintEvent(QPaintEvent*) override;
    bool event(QEvent* e) override;

private:
    struct Layout;
    class Painting;
    PlacementModel model_;
    QString invalid_;  // non-empty: no plan is drawn, this is
    bool active_ = false;
    tb::StepMetrics last_;
    // The last ten steps' waits (s per tower) and wall times: on a machine with fewer cores than
    // towers one step's waits follow the scheduler (a x4 straggler waited 70% of one step now and
    // then), so the mark follows the last ten steps, as the timeline draws them.
    struct Waits {
        double stepSeconds = 0;
        std::vector<double> wait;
    };
    static constexpr int kRecentSteps = 10;
    std::deque<Waits> recent_;
    mutable QStringList cut_;  // filled by each paint
    int pulse_ = 0;      // animation phase of the arrows, advanced by a timer while active
    int idleTicks_ = 0;  // timer ticks since the last step; the pulse stops when steps stop coming
    class QTimer* timer_ = nullptr;
};
