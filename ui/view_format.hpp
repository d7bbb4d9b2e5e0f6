// How the window's views write numbers and long tooltips: thousands separators from the user's
// locale (also where that is the C locale, which leaves them out by default), milliseconds with
// the precision a timing deserves, and tooltips as rich text, which Qt wraps to a readable width
// (a plain-text tooltip is one line as wide as its text).
#pragma once
#include <QLocale>
#include <QRegularExpression>
#include <QString>
#include <cmath>
#include <functional>

namespace tb::ui {

// An engine message put in the experiment form's words ("--data" as "Data"): views that show
// what the engine says of the form's settings are given the form's (ExperimentPanel::inFormWords).
using Explainer = std::function<QString(const QString&)>;
// `message` in its words, or as it is where no explainer was set.
inline QString explained(const Explainer& explain, const QString& message) { return explain ? explain(message) : message; }

inline QLocale groupedLocale() {
    QLocale l;
    l.setNumberOptions(l.numberOptions() & ~QLocale::OmitGroupSeparator);
    return l;
}

// 963834.2 -> "963,834" (in an English locale).
inline QString formatCount(double v, int decimals = 0) { return groupedLocale().toString(v, 'f', decimals); }

// Seconds as milliseconds: two decimals under 10 ms, one under 100 ms, none above.
inline QString formatMs(double seconds) {
    const double ms = seconds * 1e3;
    const double a = std::abs(ms);
    return groupedLocale().toString(ms, 'f', a < 10 ? 2 : a < 100 ? 1 : 0) + QStringLiteral(" ms");
}

// Plain text (paragraphs split by blank lines kept) as a tooltip Qt wraps.
// A pipeline stage's lane, named as the busy bars show it: "stage 1 · cpu:0"; with replicas of the
// pipeline (hybrid), "stage 1 · cpu:2 · replica 2".
inline QString stageLane(int index, const QString& device, int replica = -1) {
    return QStringLiteral("stage %1 \u00b7 %2").arg(index + 1).arg(device) +
           (replica >= 0 ? QStringLiteral(" \u00b7 replica %1").arg(replica + 1) : QString());
}

// Whether a run's lanes are pipeline stages (named by stageLane), not towers.
inline bool isStageLane(const QString& lane) { return lane.startsWith(QStringLiteral("stage ")); }

inline QString wrappedToolTip(const QString& plain) {
    return QStringLiteral("<p style='white-space:pre-wrap'>") + plain.toHtmlEscaped() + QStringLiteral("</p>");
}

// A label's text (plain or rich) whose long words may break: a word-wrapped label is at least as
// wide as its longest word, so a long path in a message widened its dock, and the window, past
// the screen. Words of 25 characters or more (outside tags) get a zero-width space after each
// '/', '_', '.' and '-'.
inline QString breakable(const QString& text) {
    static const QRegularExpression longWord(QStringLiteral("[^\\s<>]{25,}"));
    QString out;
    qsizetype from = 0;
    for (auto it = longWord.globalMatch(text); it.hasNext();) {
        const QRegularExpressionMatch m = it.next();
        out += text.mid(from, m.capturedStart() - from);
        for (const QChar c : m.capturedView()) {
            out += c;
            if (c == QLatin1Char('/') || c == QLatin1Char('_') || c == QLatin1Char('.') || c == QLatin1Char('-'))
                out += QChar(0x200B);
        }
        from = m.capturedEnd();
    }
    return out + text.mid(from);
}

}  // namespace tb::ui
