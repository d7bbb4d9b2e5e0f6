#include "file_dialogs.hpp"

#include <QEvent>
#include <QFileDialog>
#include <QFileSystemModel>
#include <QHeaderView>
#include <QScreen>
#include <QTreeView>

namespace tb::ui {

namespace {

// The detail view's Size, Type and Date columns as wide as their widest entry; Name takes the rest.
void fitColumns(QTreeView* view) {
    for (int c = 1; c < view->header()->count(); ++c) view->resizeColumnToContents(c);
}

// On the dialog's first show: Qt builds its own dialog's widgets only when no desktop dialog
// takes over, so they are looked for then.
class FitOnShow : public QObject {
public:
    using QObject::QObject;
    bool eventFilter(QObject* watched, QEvent* e) override {
        if (e->type() != QEvent::Show) return false;
        auto* d = static_cast<QFileDialog*>(watched);
        auto* view = d->findChild<QTreeView*>(QStringLiteral("treeView"));
        auto* model = d->findChild<QFileSystemModel*>();
        if (view && model) {
            connect(model, &QFileSystemModel::directoryLoaded, view, [view] { fitColumns(view); });
            fitColumns(view);
            // Qt's default (about 620 px) leaves Name and the fitted columns no room together.
            const QRect screen = d->screen()->availableGeometry();
            d->resize(std::min(900, screen.width() * 9 / 10), std::min(560, screen.height() * 9 / 10));
        }
        d->removeEventFilter(this);
        deleteLater();
        return false;
    }
};

}  // namespace

void fitFileDialog(QFileDialog* d) { d->installEventFilter(new FitOnShow(d)); }

QString chooseFile(QWidget* parent, FileChoice kind, const QString& caption, const QString& start,
                   const QString& filter) {
    QFileDialog d(parent, caption, start, filter);
    switch (kind) {
    case FileChoice::Open: d.setFileMode(QFileDialog::ExistingFile); break;
    case FileChoice::Save:
        d.setFileMode(QFileDialog::AnyFile);
        d.setAcceptMode(QFileDialog::AcceptSave);
        break;
    case FileChoice::Folder:
        d.setFileMode(QFileDialog::Directory);
        d.setOption(QFileDialog::ShowDirsOnly);
        break;
    }
    fitFileDialog(&d);
    if (d.exec() != QDialog::Accepted || d.selectedFiles().isEmpty()) return {};
    return d.selectedFiles().front();
}

}  // namespace tb::ui
