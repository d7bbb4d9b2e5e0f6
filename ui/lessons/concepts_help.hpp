// Help > Concepts: every idea the window draws, each explained in a few sentences beside one
// picture of it. The pictures are the window's own views (placement diagram, timeline, busy
// bars) fed with a worked example, so what a newcomer learns here is what a run shows.
#pragma once
#include <QDialog>
#include <QString>
#include <QVector>
#include <functional>

class QListWidget;
class QStackedWidget;

struct Concept {
    QString title;
    QString text;                          // rich text: a few sentences
    std::function<QWidget*()> picture;     // the diagram that goes with it (a new widget)
};

// In the order a newcomer meets them: a tower, where towers meet, where the variables live,
// what a step is made of, and then each way of running the towers.
QVector<Concept> concepts();

class ConceptsDialog : public QDialog {
    Q_OBJECT
public:
    explicit ConceptsDialog(QWidget* parent = nullptr);
    void showConcept(int index);
    int conceptCount() const;
    QWidget* pictureOf(int index) const;   // the diagram shown for concept `index`

private:
    QListWidget* list_;
    QStackedWidget* pages_;
    QVector<QWidget*> pictures_;
};
