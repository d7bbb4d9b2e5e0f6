#include "experiment/form_widgets.hpp"

#include <QAbstractScrollArea>
#include <QCoreApplication>
#include <QFormLayout>
#include <QScrollBar>
#include <QToolButton>
#include <QVBoxLayout>
#include <QWheelEvent>

void WheelGuard::guard(QWidget* field) {
    static WheelGuard* shared = new WheelGuard(QCoreApplication::instance());
    field->setFocusPolicy(Qt::StrongFocus);
    field->installEventFilter(shared);
}

bool WheelGuard::eventFilter(QObject* watched, QEvent* event) {
    auto* field = qobject_cast<QWidget*>(watched);
    if (event->type() != QEvent::Wheel || !field || field->hasFocus()) return false;
    // Handing the event to the enclosing scroll area's scroll bar scrolls the form as if the
    // pointer were over empty space.
    for (QWidget* w = field->parentWidget(); w; w = w->parentWidget())
        if (auto* area = qobject_cast<QAbstractScrollArea*>(w)) {
            QCoreApplication::sendEvent(area->verticalScrollBar(), event);
            break;
        }
    return true;  // never the field's
}

FoldSection::FoldSection(const QString& title, QWidget* parent) : QWidget(parent) {
    toggle_ = new QToolButton;
    toggle_->setText(title);
    toggle_->setCheckable(true);
    toggle_->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
    toggle_->setAutoRaise(true);
    toggle_->setArrowType(Qt::RightArrow);
    body_ = new QWidget;
    form_ = new QFormLayout(body_);
    form_->setContentsMargins(0, 0, 0, 0);
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(0, 0, 0, 0);
    v->addWidget(toggle_);
    v->addWidget(body_);
    body_->setVisible(false);
    connect(toggle_, &QToolButton::toggled, this, &FoldSection::setOpen);
}

bool FoldSection::isOpen() const { return toggle_->isChecked(); }

void FoldSection::setOpen(bool open) {
    toggle_->setChecked(open);
    toggle_->setArrowType(open ? Qt::DownArrow : Qt::RightArrow);
    body_->setVisible(open);
}
