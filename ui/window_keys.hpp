#pragma once
// A window of its own (the scaling lab, a lesson, the model view, the augmented samples) closes as
// a desktop's windows do, on Ctrl+W (QKeySequence::Close); one that only shows what the form
// holds, where nothing runs, also on Escape, as a dialog does. (Escape does not close a window
// whose sweep or runs closing would stop: a stray key must not end an experiment.)
#include <QKeySequence>
#include <QShortcut>
#include <QWidget>

namespace tb::ui {

enum class EscapeCloses { No, Yes };

inline void closeOnKeys(QWidget* window, EscapeCloses escape) {
    for (const QKeySequence& key : QKeySequence::keyBindings(QKeySequence::Close))
        new QShortcut(key, window, window, &QWidget::close);
    if (escape == EscapeCloses::Yes) new QShortcut(QKeySequence(Qt::Key_Escape), window, window, &QWidget::close);
}

}  // namespace tb::ui
