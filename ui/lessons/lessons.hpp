// Lessons: prepared experiments on data parallelism, each a short explanation beside a
// configured run that the user starts and watches (Lessons menu). A lesson puts its settings
// into the experiment form and its text into the Lesson dock; lesson 2 (a straggler, sync vs
// async) runs both updates side by side in a window of its own (SyncAsyncLesson).
#pragma once
#include <QString>
#include <QWidget>
#include <vector>

#include "io/run_config.hpp"

class QLabel;
class QPushButton;
class QTextBrowser;

struct Lesson {
    QString title;
    QString text;           // rich text: what to watch, and why it happens
    tb::RunConfig config;   // the experiment it sets up (lesson 2: the synchronous one)
    bool sideBySide = false;  // lesson 2: sync and async at once (SyncAsyncLesson)
};

// The five, in teaching order: (1) the tower pattern and the sync point; (2) a straggler, sync
// vs async; (3) all-reduce vs the CPU holder; (4) averaging every K; (5) batch size and the
// learning rate with more towers. `cores`: how many the runs may use.
std::vector<Lesson> lessons(int cores);

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
