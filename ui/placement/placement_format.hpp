// Bytes as the placement diagram writes them: decimal units, as the holder's "N MB" and the bytes
// table in docs/user-guide.md.
#pragma once
#include <QString>

inline QString formatBytes(double bytes) {
    if (bytes >= 1e9) return QStringLiteral("%1 GB").arg(bytes / 1e9, 0, 'f', 1);
    if (bytes >= 1e6) return QStringLiteral("%1 MB").arg(bytes / 1e6, 0, 'f', 1);
    if (bytes >= 1e3) return QStringLiteral("%1 kB").arg(bytes / 1e3, 0, 'f', 1);
    return QStringLiteral("%1 B").arg(qRound64(bytes));
}
