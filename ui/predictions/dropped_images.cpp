#include "predictions/dropped_images.hpp"

#include <QDir>
#include <QFileInfo>
#include <QImage>
#include <QPixmap>
#include <QUrl>
#include <QVBoxLayout>
#include <algorithm>
#include <memory>

#ifdef TB_HAVE_IMAGES
#include "data/image_codec.hpp"
#endif
#include "engine/inference.hpp"
#include "util/error.hpp"

namespace {

constexpr int kThumb = 64;

QImage thumbnail(const std::string& path) {
#ifndef TB_HAVE_IMAGES
    return QImage(QString::fromStdString(path)).scaled(kThumb, kThumb, Qt::KeepAspectRatio);  // classify refuses first
#else
    const tb::Image im = tb::readImageFile(path);
    QImage q(im.width, im.height, im.channels == 1 ? QImage::Format_Grayscale8 : QImage::Format_RGB888);
    for (int y = 0; y < im.height; ++y)
        std::copy_n(im.pixels.data() + size_t(y) * im.width * im.channels, size_t(im.width) * im.channels, q.scanLine(y));
    return q.scaled(kThumb, kThumb, Qt::KeepAspectRatio, im.width < kThumb ? Qt::FastTransformation : Qt::SmoothTransformation);
#endif
}

}  // namespace

DroppedImages::DroppedImages(QWidget* parent) : QWidget(parent) {
    setObjectName("droppedImages");
    status_ = new QLabel;
    status_->setObjectName("droppedStatus");
    status_->setWordWrap(true);
    list_ = new QListWidget;
    list_->setObjectName("droppedList");
    list_->setViewMode(QListView::IconMode);
    list_->setIconSize(QSize(kThumb, kThumb));
    list_->setResizeMode(QListView::Adjust);
    list_->setMovement(QListView::Static);
    list_->setWordWrap(true);
    list_->setGridSize(QSize(kThumb + 56, kThumb + 40));
    list_->setSpacing(0);
    list_->setFixedHeight(kThumb + 40 + 2 * list_->frameWidth());  // one row whole; more rows scroll
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(status_);
    layout->addWidget(list_);
    list_->hide();
    status_->setText(tr("Drop PNG or JPEG files here to classify them with the run's model."));
}

QStringList DroppedImages::imageFiles(const QList<QUrl>& urls) {
    QStringList files;
    for (const QUrl& u : urls) {
        if (!u.isLocalFile()) continue;
        const QString suffix = QFileInfo(u.toLocalFile()).suffix().toLower();
        if (suffix == "png" || suffix == "jpg" || suffix == "jpeg") files << u.toLocalFile();
    }
    return files;
}

void DroppedImages::classify(const QStringList& files) {
    if (files.isEmpty() || worker_.running()) return;
    show();
    if (folder_.isEmpty()) {
        status_->setText(tr("No run to classify with: train a model or open a run folder first."));
        emit classified();
        return;
    }
    status_->setText(tr("Classifying %n image(s) with %1…", "", int(files.size())).arg(QDir(folder_).dirName()));
    struct Outcome {
        tb::Classifications result;
        std::vector<QImage> thumbs;
        QString error;
    };
    auto outcome = std::make_shared<Outcome>();
    std::vector<std::string> paths;
    for (const QString& f : files) paths.push_back(f.toStdString());
    const std::string folder = folder_.toStdString();
    worker_.start([outcome, paths, folder] {
        try {
            outcome->result = tb::classifyImages(tb::checkpointOf(folder), paths, 0);
            for (const std::string& p : paths) outcome->thumbs.push_back(thumbnail(p));
        } catch (const std::exception& e) {
            outcome->error = QString::fromUtf8(e.what());
        }
    }, [this, outcome] {
        if (!outcome->error.isEmpty()) {
            status_->setText(tr("Could not classify: %1").arg(outcome->error));
            emit classified();
            return;
        }
        const auto& names = outcome->result.classNames;
        auto name = [&](int k) { return k < int(names.size()) ? QString::fromStdString(names[size_t(k)]) : QString::number(k); };
        list_->clear();
        for (size_t i = 0; i < outcome->result.images.size(); ++i) {
            const tb::ImageClassification& c = outcome->result.images[i];
            const std::vector<int> order = c.ranked();
            auto* item = new QListWidgetItem(QIcon(QPixmap::fromImage(outcome->thumbs[i])),
                                             QStringLiteral("%1 %2%").arg(name(order[0])).arg(100.0 * c.probabilities[size_t(order[0])], 0, 'f', 1));
            QStringList tip{QFileInfo(QString::fromStdString(c.image)).fileName()};
            for (size_t k = 0; k < std::min<size_t>(3, order.size()); ++k)
                tip << QStringLiteral("%1: %2%").arg(name(order[k])).arg(100.0 * c.probabilities[size_t(order[k])], 0, 'f', 2);
            item->setToolTip(tip.join('\n'));
            list_->addItem(item);
        }
        list_->show();
        status_->setText(tr("%n dropped image(s), classified by %1's newest checkpoint:", "", list_->count())
                             .arg(QDir(folder_).dirName()));
        emit classified();
    });
}
