// DroppedImages: image files dropped onto the Predictions panel, classified with a run's model
// (engine/inference.hpp's classifyImages, as `towerbench-run classify` does) off the window's
// thread: each image's thumbnail (as decoded, its EXIF orientation applied) with its most probable
// class and probability, the top three in its tooltip. Hidden until the first drop.
#pragma once
#include <QLabel>
#include <QListWidget>
#include <QStringList>
#include <QWidget>

#include "background_task.hpp"


class DroppedImages : public QWidget {
    Q_OBJECT
public:
    explicit DroppedImages(QWidget* parent = nullptr);
    // The run whose newest checkpoint classifies (a finished or followed run's folder); empty: none.
    void setRunFolder(const QString& folder) { folder_ = folder; }
    QString runFolder() const { return folder_; }
    QListWidget* list() const { return list_; }
    QString status() const { return status_->text(); }
    bool busy() const { return worker_.running(); }
    // Only the PNG and JPEG files of `urls` (what a drop may hold), as local paths.
    static QStringList imageFiles(const QList<QUrl>& urls);

public slots:
    void classify(const QStringList& files);

signals:
    void classified();  // the list shows the files' classes, or the status says why not

private:
    QString folder_;
    QLabel* status_;
    QListWidget* list_;
    BackgroundTask worker_{this};  // a classification holds no cancel point; it is short
};
