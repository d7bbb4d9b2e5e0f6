// DecisionView: what the model being trained predicts over the plane of a 2-D synthetic set
// (blobs, spirals), as the engine's DecisionGridProbe last reported it: each cell of the grid
// tinted with its predicted class, paler where the model is less sure, the training points drawn
// over it in their true class. Frames come during the run, so the boundary is seen forming; an
// asynchronous run's frame is the variables one tower had pulled, and says so.
#pragma once
#include <QImage>
#include <QWidget>

#include "engine/observer.hpp"

class DecisionView : public QWidget {
    Q_OBJECT
public:
    explicit DecisionView(QWidget* parent = nullptr);
    QSize sizeHint() const override { return {280, 300}; }
    QSize minimumSizeHint() const override { return {220, 200}; }  // as the diagram beside it: the pane can give room to a run's summary

    bool hasGrid() const { return grid_.cols > 0; }
    const tb::DecisionGrid& grid() const { return grid_; }
    QString caption() const;           // "step 120\n97% of the points in their region"
    double pointsRight() const;        // fraction of the drawn training points the grid classifies as labelled
    static QColor classColor(int k);   // the same colour for class k in regions and points

public slots:
    void showGrid(const tb::DecisionGrid& g);  // a malformed grid (sizes disagree) is ignored
    void clear();

protected:
    void paintEvent(QPaintEvent*) override;

private:
    QRectF plane() const;              // where the grid is drawn: a square, centred
    tb::DecisionGrid grid_;
    QImage regions_;                   // (rows, cols) one pixel per cell, row 0 at the top
};
