// Small pieces the experiment form is built from, each for one behaviour a user expects of a
// long form in a scroll area: fields that ignore the mouse wheel unless focused (the wheel
// scrolls the form instead of changing the value under the pointer), and a folded section for
// the advanced settings.
#pragma once
#include <QObject>
#include <QWidget>

class QFormLayout;
class QToolButton;

// Installed on spin boxes and combo boxes: a wheel event on a field without focus goes to the
// scroll area around it, so scrolling the form never changes a value unnoticed.
class WheelGuard : public QObject {
    Q_OBJECT
public:
    using QObject::QObject;
    // Guards `field` (and gives it click focus, so a click then the wheel still works).
    static void guard(QWidget* field);

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;
};

// A titled section whose body folds away behind a disclosure button ("▸ Advanced").
class FoldSection : public QWidget {
    Q_OBJECT
public:
    explicit FoldSection(const QString& title, QWidget* parent = nullptr);
    QFormLayout* form() const { return form_; }
    bool isOpen() const;
    void setOpen(bool open);
    QToolButton* toggle() const { return toggle_; }

private:
    QToolButton* toggle_;
    QWidget* body_;
    QFormLayout* form_;
};
