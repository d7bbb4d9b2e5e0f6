#include "experiment/form_widgets.hpp"

#include <QAbstractScrollArea>
#include <QLineEdit>
#include <QLocale>
#include <QRegularExpression>
#include <QCoreApplication>
#include <QFormLayout>
#include <QScrollBar>
#include <QStyleOptionComboBox>
#include <QStylePainter>
#include <QToolButton>
#include <QVBoxLayout>
#include <QWheelEvent>
#include <cmath>

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

NumberBox::NumberBox(QWidget* parent) : QDoubleSpinBox(parent) {
    // The most decimals Qt keeps: a value is stored as given, not rounded to a few places.
    setDecimals(323);
    setRange(-1e15, 1e15);
}

void NumberBox::setSpecial(double value, const QString& word) {
    special_ = value;
    word_ = word;
    setValue(value);
    lineEdit()->setText(textFromValue(this->value()));
}

std::optional<double> NumberBox::parse(const QString& text) const {
    const QString t = text.trimmed();
    if (special_ && !word_.isEmpty() && t.compare(word_, Qt::CaseInsensitive) == 0) return *special_;
    bool ok = false;
    double v = QLocale::c().toDouble(t, &ok);  // 1e-4, 0.0001
    if (!ok) v = locale().toDouble(t, &ok);    // and the user's decimal separator
    if (!ok) return std::nullopt;
    return v;
}

QValidator::State NumberBox::validate(QString& text, int&) const {
    if (parse(text)) return QValidator::Acceptable;
    // What may still become a number (or the special word) as the user goes on typing.
    static const QRegularExpression partial(QStringLiteral(R"(^\s*[+-]?(\d*[.,]?\d*)([eE][+-]?\d*)?\s*$)"));
    if (partial.match(text).hasMatch()) return QValidator::Intermediate;
    if (special_ && word_.startsWith(text.trimmed(), Qt::CaseInsensitive)) return QValidator::Intermediate;
    return QValidator::Invalid;
}

double NumberBox::valueFromText(const QString& text) const { return parse(text).value_or(value()); }

// The shortest text that reads back as the same number: fixed (0.0001, 1500) for everyday sizes,
// an exponent beyond them (1e-07, 1e+15).
QString NumberBox::textFromValue(double value) const {
    if (special_ && value == *special_ && !word_.isEmpty()) return word_;
    const double size = std::abs(value);
    const bool everyday = value == 0 || (size >= 1e-6 && size < 1e9);
    return QLocale::c().toString(value, everyday ? 'f' : 'g', QLocale::FloatingPointShortest);
}

void NumberBox::fixup(QString&) const {}  // what is typed stays as typed

ElidingCombo::ElidingCombo(int chars, QWidget* parent) : QComboBox(parent) {
    setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    setMinimumContentsLength(chars);
    connect(this, &QComboBox::currentTextChanged, this, &ElidingCombo::updateToolTip);
}

void ElidingCombo::setFieldToolTip(const QString& tip) {
    fieldTip_ = tip;
    updateToolTip();
}

QRect ElidingCombo::textRect() const {
    QStyleOptionComboBox opt;
    initStyleOption(&opt);
    return style()->subControlRect(QStyle::CC_ComboBox, &opt, QStyle::SC_ComboBoxEditField, this);
}

bool ElidingCombo::elided() const { return fontMetrics().horizontalAdvance(currentText()) > textRect().width(); }

void ElidingCombo::updateToolTip() {
    setToolTip(elided() ? fieldTip_ + QStringLiteral("<p>") + currentText().toHtmlEscaped() + QStringLiteral("</p>")
                        : fieldTip_);
}

void ElidingCombo::resizeEvent(QResizeEvent* e) {
    QComboBox::resizeEvent(e);
    updateToolTip();
}

void ElidingCombo::paintEvent(QPaintEvent*) {
    QStylePainter p(this);
    QStyleOptionComboBox opt;
    initStyleOption(&opt);
    p.drawComplexControl(QStyle::CC_ComboBox, opt);
    opt.currentText = fontMetrics().elidedText(opt.currentText, Qt::ElideMiddle, textRect().width());
    p.drawControl(QStyle::CE_ComboBoxLabel, opt);
}
