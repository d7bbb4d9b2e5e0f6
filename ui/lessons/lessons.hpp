// Lessons: prepared experiments on data parallelism, each a short explanation beside a
// configured run that the user starts and watches (Lessons menu). A lesson puts its settings
// into the experiment form and its text into the Lesson dock; lesson 2 (a straggler, sync vs
// async) runs both updates side by side in a window of its own (SyncAsyncLesson), lesson 6
// (data, model, pipeline) three ways one after another in its own (ParallelismLesson), and
// lessons 5 and 7 (large batches; batch norm across towers) a list of runs one after another,
// their measured accuracies side by side (ComparisonLesson).
#pragma once
#include <QString>
#include <QSize>
#include <QWidget>
#include <functional>
#include <utility>
#include <vector>

#include "io/run_config.hpp"

class QLabel;
class QPushButton;
class QTextBrowser;
class QVBoxLayout;

// One run of a lesson that compares several (ComparisonLesson), and what it measured (-1: not
// measured; failure: why it did not run).
struct LessonRun {
    QString name;
    tb::RunConfig config;
};
struct LessonResult {
    double testAccuracy = -1, validationAccuracy = -1, examplesPerSec = -1, seconds = -1;
    bool stopped = false;
    QString failure;
};

struct Lesson {
    Lesson(QString title, QString text, tb::RunConfig config, bool sideBySide = false, bool threeWays = false)
        : title(std::move(title)), text(std::move(text)), config(std::move(config)), sideBySide(sideBySide),
          threeWays(threeWays) {}
    QString title;
    QString text;           // rich text: what to watch, and why it happens
    tb::RunConfig config;   // the experiment it sets up (lesson 2: the synchronous one)
    bool sideBySide = false;  // lesson 2: sync and async at once (SyncAsyncLesson)
    bool threeWays = false;   // lesson 6: one device, naive stages, a pipeline (ParallelismLesson)
    // Lessons 5 and 7: the runs compared one after another (ComparisonLesson), and the
    // conclusion written from what they measured.
    std::vector<LessonRun> compare;
    std::function<QString(const std::vector<LessonRun>&, const std::vector<LessonResult>&)> conclude;
};

// The seven, in teaching order: (1) the tower pattern and the sync point; (2) a straggler, sync
// vs async; (3) all-reduce vs the CPU holder; (4) averaging every K; (5) batch size and the
// learning rate with more towers; (6) data, model, pipeline; (7) batch norm across towers.
// `cores`: how many the runs may use.
std::vector<Lesson> lessons(int cores);

// What the lessons' own windows (SyncAsyncLesson, ParallelismLesson, ComparisonLesson) share:
// their left column, the lesson's text above its Start and Stop buttons (Stop disabled until a run
// starts) and a selectable, wrapping line for results under them.
struct LessonColumn {
    QVBoxLayout* layout = nullptr;
    QPushButton *start = nullptr, *stop = nullptr;
    QLabel* result = nullptr;  // objectName `resultName`; the caller places it (or adds it to layout)
};
LessonColumn makeLessonColumn(const Lesson& lesson, const QString& startText, const QString& result,
                              const QString& resultName);

// Most of the screen the window opens on, never more (a lesson's window, the model view).
void fitLessonWindow(QWidget& window, QSize preferred);

// A lesson's own window: trains its runs between start() and stop(); closing it abandons them (the
// user closed the window, no result is waited for); its first showing fits it to its screen.
class LessonWindow : public QWidget {
    Q_OBJECT
public:
    LessonWindow(QSize preferred, QWidget* parent);
    virtual bool running() const = 0;

public slots:
    virtual void start() = 0;
    virtual void stop() = 0;

protected:
    virtual void abortRuns() = 0;
    void closeEvent(QCloseEvent* e) final;
    void showEvent(QShowEvent* e) final;

private:
    QSize preferred_;
    bool sized_ = false;
};

// The Lesson dock's content: the lesson's title and text, and a button to set it up again.
class LessonPanel : public QWidget {
    Q_OBJECT
public:
    explicit LessonPanel(QWidget* parent = nullptr);
    void show(const Lesson& lesson);
    QString title() const;
    QTextBrowser* text() const { return text_; }

signals:
    void setUpAgain();  // the form back to the lesson's settings

private:
    QLabel* title_;
    QTextBrowser* text_;
    QPushButton* again_;
};
