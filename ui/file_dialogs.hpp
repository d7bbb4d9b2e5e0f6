// The window's file choosers. Qt uses the desktop's own dialog where it has one; elsewhere (a bare
// X session, a desktop without a file-dialog portal) its own opened at its default size, with the
// Size, Type and Date Modified columns cut ("229...tes", "JSO...ent", "7 Dec ...:11:14"). Here that
// dialog opens wide enough for them, and fits its columns to what they show whenever it has read
// a folder.
#pragma once
#include <QString>

class QFileDialog;
class QWidget;

namespace tb::ui {

enum class FileChoice { Open, Save, Folder };

// The file or folder chosen, or empty where the user cancelled. `filter`: "Run configs (*.json)",
// several separated by ";;".
QString chooseFile(QWidget* parent, FileChoice kind, const QString& caption, const QString& start,
                   const QString& filter = {});

// Qt's own dialog `d` (nothing for the desktop's): wide enough for its columns when shown, and
// its columns fitted to their contents once each folder is read.
void fitFileDialog(QFileDialog* d);

}  // namespace tb::ui
