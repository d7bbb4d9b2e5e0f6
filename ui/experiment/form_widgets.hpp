// Small pieces the experiment form is built from, each for one behaviour a user expects of a
// long form in a scroll area: number fields that keep what is typed, fields that ignore the mouse
// wheel unless focused (the wheel scrolls the form instead of changing the value under the
// pointer), and a folded section for the advanced settings.
#pragma once
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QObject>
#include <QWidget>
#include <optional>

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

// A number field that takes what people type, decimals or exponents (1e-4, 0.0001, 3e-3), of any
// size, and never rounds or clamps it on the way in: the form says, in the field's words, what a
// run cannot take. Shown as the shortest text of the same number; a special value (0: "off") as
// its word.
class NumberBox : public QDoubleSpinBox {
    Q_OBJECT
public:
    explicit NumberBox(QWidget* parent = nullptr);
    void setSpecial(double value, const QString& word);

protected:
    QValidator::State validate(QString& text, int& pos) const override;
    double valueFromText(const QString& text) const override;
    QString textFromValue(double value) const override;
    void fixup(QString& text) const override;

private:
    std::optional<double> parse(const QString& text) const;
    std::optional<double> special_;
    QString word_;
};

// A combo box whose items can be long (a model's file path under a run's folder): at most `chars`
// average characters wide, so the form and the window never grow past the screen for it; where
// the current text is wider than the box it is drawn elided in the middle (the file name and the
// path's start stay) and the tooltip says it whole after the field's own words.
class ElidingCombo : public QComboBox {
    Q_OBJECT
public:
    explicit ElidingCombo(int chars, QWidget* parent = nullptr);
    void setFieldToolTip(const QString& tip);  // the field's words (rich text)
    bool elided() const;                       // the current text does not fit the box

protected:
    void paintEvent(QPaintEvent* e) override;
    void resizeEvent(QResizeEvent* e) override;

private:
    void updateToolTip();
    QRect textRect() const;
    QString fieldTip_;
};
