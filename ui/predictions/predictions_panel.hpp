// PredictionsPanel: what the model gets wrong, after an evaluation of an image set. A header
// ("test set at step 300: 388 of 500 right, 77.6%"), the confusion matrix (ConfusionView), and a
// grid of the split's images, each with the class the model predicted and its confidence, and
// the true class where they differ: mistakes first, the most confident mistakes at the top (the
// ones worth looking at), then the right ones, least confident first. Clicking a cell of the
// matrix shows that (true, predicted) pair alone.
#pragma once
#include <QLabel>
#include <QScrollArea>
#include <QWidget>
#include <memory>
#include <vector>

#include "predictions/confusion_view.hpp"
#include "predictions/dropped_images.hpp"
#include "engine/observer.hpp"

// The grid itself: paints only the tiles in view, so a split of 10,000 images costs nothing
// until scrolled to.
class PredictionGrid : public QWidget {
    Q_OBJECT
public:
    explicit PredictionGrid(QWidget* parent = nullptr);
    void setPredictions(std::shared_ptr<const tb::Predictions> p, std::vector<int> order);
    const std::vector<int>& order() const { return order_; }  // example indices, in the grid's order
    QSize tileSize() const;
    int columns() const;
    int exampleAt(const QPoint& p) const;  // -1 where no tile is
    QSize sizeHint() const override;
    bool hasHeightForWidth() const override { return true; }
    int heightForWidth(int w) const override;
    // What the grid says while it has no tile to show; it is tall enough for it at any width.
    QString placeholder() const;

protected:
    void paintEvent(QPaintEvent*) override;
    void resizeEvent(QResizeEvent*) override;
    bool event(QEvent*) override;  // tooltip: example number, true class, prediction, confidence

private:
    QRect placeholderRect(int width) const;
    QImage image(int example) const;
    QString className(int k) const;
    int scale() const;  // pixels per image pixel

    std::shared_ptr<const tb::Predictions> p_;
    std::vector<int> order_;
};

class PredictionsPanel : public QWidget {
    Q_OBJECT
public:
    explicit PredictionsPanel(QWidget* parent = nullptr);
    bool hasPredictions() const { return p_ != nullptr; }
    QString header() const { return header_->text(); }
    QString note() const { return filter_->text(); }  // above the grid: what it shows, or why nothing
    ConfusionView* matrix() const { return matrix_; }
    PredictionGrid* grid() const { return grid_; }
    // PNG and JPEG files dropped on the panel, classified with the run's model (its folder set by
    // the window when a run ends or is followed).
    DroppedImages* dropped() const { return dropped_; }
    // Mistakes first (most confident first), then the right ones (least confident first); only
    // those of class `trueClass` predicted as `predicted` where both are >= 0.
    static std::vector<int> order(const tb::Predictions& p, int trueClass = -1, int predicted = -1);
    static bool wellFormed(const tb::Predictions& p, int classes);

public slots:
    // Every evaluation: the matrix follows each; the grid those that carry predictions (image
    // sets; malformed ones are not drawn).
    void showEval(const tb::EvalResult& r);
    void clear();
    // Why the examples cannot be shown (a followed run's predictions or images unreadable).
    void showProblem(const QString& message);

protected:
    bool eventFilter(QObject* watched, QEvent* e) override;  // the viewport resized: the grid follows
    void dragEnterEvent(QDragEnterEvent* e) override;        // accepted when it holds image files
    void dropEvent(QDropEvent* e) override;

private:
    void refill();

    QLabel* header_;
    ConfusionView* matrix_;
    PredictionGrid* grid_;
    QScrollArea* scroll_;
    QLabel* filter_;
    DroppedImages* dropped_;
    std::shared_ptr<const tb::Predictions> p_;
};
