// How the window's views write numbers and long tooltips: thousands separators from the user's
// locale (also where that is the C locale, which leaves them out by default), milliseconds with
// the precision a timing deserves, and tooltips as rich text, which Qt wraps to a readable width
// (a plain-text tooltip is one line as wide as its text).
#pragma once
#include <QLocale>
#include <QString>
#include <cmath>

namespace tb::ui {

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
inline QString wrappedToolTip(const QString& plain) {
    return QStringLiteral("<p style='white-space:pre-wrap'>") + plain.toHtmlEscaped() + QStringLiteral("</p>");
}

}  // namespace tb::ui
