// ConfusionView: an evaluation's confusion matrix, classes x classes. Row r, column c counts the
// examples of true class r the model called c; each cell is shaded by its share of the row (so a
// rare class reads as clearly as a common one), the diagonal in green and the mistakes in red,
// with the count written in it. Clicking a cell selects that (true, predicted) pair, for the grid
// of predictions beside it to show those examples alone; clicking it again clears the selection.
#pragma once
#include <QString>
#include <QStringList>
#include <QWidget>
#include <vector>

class ConfusionView : public QWidget {
    Q_OBJECT
public:
    explicit ConfusionView(QWidget* parent = nullptr);
    QSize sizeHint() const override { return {340, 260}; }  // ten classes in cells of about 20 px
    QSize minimumSizeHint() const override { return {220, 180}; }

    // counts: (classes, classes) row-major; names: (classes) or empty (the classes' numbers).
    // Malformed input (sizes disagree) shows nothing.
    void setMatrix(const std::vector<int64_t>& counts, int classes, const QStringList& names);
    void clear();
    int classes() const { return classes_; }
    int64_t count(int trueClass, int predicted) const;
    // The selected cell (-1, -1 when none).
    int selectedTrue() const { return selTrue_; }
    int selectedPredicted() const { return selPred_; }
    void select(int trueClass, int predicted);  // (-1, -1): none; emits selectionChanged
    // The cell under a point of the widget, or false.
    bool cellAt(const QPoint& p, int& trueClass, int& predicted) const;
    QRect cellRect(int trueClass, int predicted) const;
    QString rowLabel(int k) const;  // the row's label: "3 Dress", or "3" where classes have no names

signals:
    void selectionChanged(int trueClass, int predicted);

protected:
    void paintEvent(QPaintEvent*) override;
    void mousePressEvent(QMouseEvent*) override;
    bool event(QEvent*) override;  // tooltips: "Shirt predicted as T-shirt/top: 7 of 47 (15%)"

    QString name(int k) const;

private:
    struct Layout {
        int labelWidth = 0, headerHeight = 0, cell = 0;
    };
    Layout layout() const;

    std::vector<int64_t> counts_;
    std::vector<int64_t> rowTotals_;
    int classes_ = 0;
    QStringList names_;
    int selTrue_ = -1, selPred_ = -1;
};
