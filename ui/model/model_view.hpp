// ModelView: a model as the window shows it before and during a run, where a user checks a JSON
// model before training it. Left, the layer graph: each layer a box in the order the layers run,
// coloured by type, a line from each input (a residual shortcut is an arc beside the column) and
// the stages of model parallelism as bands; right, a table of each layer's inputs, output shape,
// parameters and FLOPs, and, from a run, where tower 0's step went layer by layer (forward and
// backward, measured on the steps it profiles: TowerSet::kProfileEvery). Selecting a box selects
// its row and back.
#pragma once
#include <QLabel>
#include <QTableWidget>
#include <QWidget>
#include <vector>

#include "nn/network.hpp"

// The graph's column of boxes (LayerSummary of each layer), drawn by hand.
class LayerGraph : public QWidget {
    Q_OBJECT
public:
    explicit LayerGraph(QWidget* parent = nullptr);
    void setLayers(std::vector<tb::LayerSummary> layers, std::vector<int> stageOf);
    void setSelected(int layer);
    // Each layer's share of the step's time (0..1), or empty: drawn as a bar beside its box.
    void setShares(std::vector<double> shares);
    int rowAt(int y) const;
    QRect boxOf(int layer) const;
    QSize sizeHint() const override;

signals:
    void layerClicked(int layer);

protected:
    void paintEvent(QPaintEvent*) override;
    void mousePressEvent(QMouseEvent* e) override;

private:
    std::vector<tb::LayerSummary> layers_;
    std::vector<int> stageOf_;   // per layer, its stage (-1: no stages)
    std::vector<int> arcLane_;   // per layer, the lane of the arcs into it (-1: none)
    std::vector<double> shares_;
    int selected_ = -1;
    int lanes_ = 0;
};

class ModelView : public QWidget {
    Q_OBJECT
public:
    explicit ModelView(QWidget* parent = nullptr);
    // The model (and, for model parallelism, each layer's stage: Stage::first/last per stage, in
    // order; empty for none). A model that does not configure shows why instead.
    void setModel(const tb::ModelSpec& spec, const std::vector<std::pair<int, int>>& stages = {});
    void showProblem(const QString& message);
    // A run's measured step (tower 0's), layer by layer; `step` names it, and `run` the run where
    // it is not the one being trained or followed (a saved run's, read from its folder). Times of
    // another model (a stale report, a model file changed since) are ignored: false.
    bool showLayerTimes(const tb::LayerTimes& times, int64_t step, const QString& run = {});
    void clearTimes();

    QString modelName() const { return model_; }  // the model shown (its spec's name)
    QString header() const { return header_->text(); }
    QString timingNote() const { return timing_->text(); }
    QTableWidget* table() const { return table_; }
    LayerGraph* graph() const { return graph_; }

private:
    void select(int layer);

    QLabel* header_;
    QLabel* timing_;
    LayerGraph* graph_;
    class QScrollArea* graphArea_;
    QTableWidget* table_;
    std::vector<tb::LayerSummary> layers_;
    QString model_;
};

