#include "predictions/predictions_panel.hpp"

#include <QDragEnterEvent>
#include <QDropEvent>
#include <QEvent>
#include <QMimeData>
#include <QHelpEvent>
#include <QPaintEvent>
#include <QPainter>
#include <QScrollBar>
#include <QSplitter>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>

namespace {
constexpr int kPad = 4;          // around each tile
constexpr int kMinTextWidth = 84;  // a tile is at least this wide, for its captions
constexpr int kImageTarget = 64;   // images are scaled by whole steps towards this many pixels
}  // namespace

PredictionGrid::PredictionGrid(QWidget* parent) : QWidget(parent) { setObjectName("predictionGrid"); }

void PredictionGrid::setPredictions(std::shared_ptr<const tb::Predictions> p, std::vector<int> order) {
    p_ = std::move(p);
    order_ = std::move(order);
    resize(width(), heightForWidth(width()));
    update();
}

int PredictionGrid::scale() const {
    if (!p_) return 1;
    return std::max(1, kImageTarget / std::max(1, std::max(p_->height, p_->width)));
}

QSize PredictionGrid::tileSize() const {
    if (!p_) return {kMinTextWidth + 2 * kPad, 40};
    const QFontMetrics fm(font());
    const int s = scale();
    // As wide as the widest caption ("T-shirt/top 100%" was elided to "T-shi…p 99%" in 84 px).
    int text = kMinTextWidth;
    for (int k = 0; k < int(p_->classNames.size()); ++k)
        text = std::max(text, fm.horizontalAdvance(className(k) + QStringLiteral(" 100%")) + 2);
    return {std::max(p_->width * s, text) + 2 * kPad, p_->height * s + 2 * fm.height() + 3 * kPad};
}

int PredictionGrid::columns() const { return std::max(1, width() / tileSize().width()); }

QString PredictionGrid::placeholder() const {
    return p_ ? tr("No example in this cell.") : tr("After an evaluation of an image set, its examples appear here.");
}

QRect PredictionGrid::placeholderRect(int width) const { return QRect(8, 8, std::max(1, width - 16), 10000); }

int PredictionGrid::heightForWidth(int w) const {
    if (!p_ || order_.empty())  // the placeholder, wrapped at this width, whole (its last line was cut)
        return fontMetrics().boundingRect(placeholderRect(w), Qt::AlignTop | Qt::AlignHCenter | Qt::TextWordWrap,
                                          placeholder()).height() + 16;
    const QSize t = tileSize();
    const int cols = std::max(1, w / t.width());
    const int rows = (int(order_.size()) + cols - 1) / cols;
    return std::max(1, rows) * t.height();
}

QSize PredictionGrid::sizeHint() const { return {4 * tileSize().width(), heightForWidth(4 * tileSize().width())}; }

void PredictionGrid::resizeEvent(QResizeEvent*) { update(); }

int PredictionGrid::exampleAt(const QPoint& pt) const {
    const QSize t = tileSize();
    const int col = pt.x() / t.width(), row = pt.y() / t.height();
    if (pt.x() < 0 || pt.y() < 0 || col >= columns()) return -1;
    const size_t i = size_t(row) * size_t(columns()) + size_t(col);
    return i < order_.size() ? order_[i] : -1;
}

QString PredictionGrid::className(int k) const {
    if (p_ && k >= 0 && k < int(p_->classNames.size())) return QString::fromStdString(p_->classNames[size_t(k)]);
    return QString::number(k);
}

// One example of (n, c, h, w) bytes as an image: grey for one channel, RGB from three planes.
QImage PredictionGrid::image(int example) const {
    const int c = p_->channels, h = p_->height, w = p_->width;
    const uint8_t* src = p_->images->data() + size_t(example) * size_t(c) * size_t(h) * size_t(w);
    const size_t plane = size_t(h) * size_t(w);
    if (c == 3) {
        QImage img(w, h, QImage::Format_RGB888);
        for (int y = 0; y < h; ++y) {
            uchar* line = img.scanLine(y);
            for (int x = 0; x < w; ++x)
                for (int k = 0; k < 3; ++k) line[3 * x + k] = src[size_t(k) * plane + size_t(y) * size_t(w) + size_t(x)];
        }
        return img;
    }
    QImage img(w, h, QImage::Format_Grayscale8);
    for (int y = 0; y < h; ++y) std::copy_n(src + size_t(y) * size_t(w), w, img.scanLine(y));  // channel 0
    return img;
}

void PredictionGrid::paintEvent(QPaintEvent* e) {
    QPainter g(this);
    g.fillRect(e->rect(), palette().base());
    if (!p_ || order_.empty()) {
        g.setPen(palette().color(QPalette::PlaceholderText));
        g.drawText(placeholderRect(width()), Qt::AlignTop | Qt::AlignHCenter | Qt::TextWordWrap, placeholder());
        return;
    }
    const QSize t = tileSize();
    const int cols = columns(), s = scale();
    const QFontMetrics fm(font());
    // Only the rows in the exposed rectangle.
    const int firstRow = std::max(0, e->rect().top() / t.height());
    const int lastRow = e->rect().bottom() / t.height();
    for (int row = firstRow; row <= lastRow; ++row) {
        for (int col = 0; col < cols; ++col) {
            const size_t i = size_t(row) * size_t(cols) + size_t(col);
            if (i >= order_.size()) return;
            const int ex = order_[i];
            const int truth = p_->labels[size_t(ex)], said = p_->predicted[size_t(ex)];
            const bool right = truth == said;
            const QRect tile(col * t.width(), row * t.height(), t.width(), t.height());
            const QRect pic(tile.left() + (t.width() - p_->width * s) / 2, tile.top() + kPad, p_->width * s,
                            p_->height * s);
            g.drawImage(pic, image(ex));
            g.setPen(QPen(right ? QColor(46, 139, 87) : QColor(200, 40, 40), 2));
            g.drawRect(pic.adjusted(-1, -1, 0, 0));
            const QRect line1(tile.left() + kPad, pic.bottom() + kPad, t.width() - 2 * kPad, fm.height());
            const QString said1 = QString("%1 %2%").arg(className(said)).arg(int(100 * p_->confidence[size_t(ex)] + 0.5));
            g.setPen(right ? palette().color(QPalette::Text) : QColor(190, 30, 30));
            g.drawText(line1, Qt::AlignHCenter, fm.elidedText(said1, Qt::ElideMiddle, line1.width()));
            if (!right) {
                g.setPen(palette().color(QPalette::PlaceholderText));
                const QString was = tr("is %1").arg(className(truth));
                g.drawText(line1.translated(0, fm.height()), Qt::AlignHCenter,
                           fm.elidedText(was, Qt::ElideMiddle, line1.width()));
            }
        }
    }
}

bool PredictionGrid::event(QEvent* e) {
    if (e->type() == QEvent::ToolTip && p_) {
        auto* h = static_cast<QHelpEvent*>(e);
        const int ex = exampleAt(h->pos());
        if (ex >= 0) {
            const int truth = p_->labels[size_t(ex)], said = p_->predicted[size_t(ex)];
            QToolTip::showText(h->globalPos(),
                               tr("Example %1: the model says %2 (%3%), it is %4")
                                   .arg(ex)
                                   .arg(className(said))
                                   .arg(100.0 * p_->confidence[size_t(ex)], 0, 'f', 1)
                                   .arg(className(truth)),
                               this);
        } else {
            QToolTip::hideText();
        }
        return true;
    }
    return QWidget::event(e);
}

PredictionsPanel::PredictionsPanel(QWidget* parent) : QWidget(parent) {
    header_ = new QLabel(tr("No evaluation yet."));
    header_->setObjectName("predictionsHeader");
    header_->setWordWrap(true);
    matrix_ = new ConfusionView;
    filter_ = new QLabel;
    filter_->setObjectName("predictionsFilter");
    filter_->setWordWrap(true);
    grid_ = new PredictionGrid;
    scroll_ = new QScrollArea;
    scroll_->setWidget(grid_);
    scroll_->setWidgetResizable(false);  // the grid's height follows the viewport's width (below)
    scroll_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    scroll_->viewport()->installEventFilter(this);
    auto* below = new QWidget;
    auto* belowLayout = new QVBoxLayout(below);
    belowLayout->setContentsMargins(0, 0, 0, 0);
    belowLayout->addWidget(filter_);
    belowLayout->addWidget(scroll_, 1);
    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(matrix_);
    split->addWidget(below);
    split->setStretchFactor(0, 0);  // the matrix at its size; the grid takes the rest
    split->setStretchFactor(1, 1);
    dropped_ = new DroppedImages;
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(header_);
    layout->addWidget(dropped_);
    layout->addWidget(split, 1);
    setAcceptDrops(true);
    connect(matrix_, &ConfusionView::selectionChanged, this, [this] { refill(); });
    refill();
}

void PredictionsPanel::dragEnterEvent(QDragEnterEvent* e) {
    if (e->mimeData()->hasUrls() && !DroppedImages::imageFiles(e->mimeData()->urls()).isEmpty()) e->acceptProposedAction();
}

void PredictionsPanel::dropEvent(QDropEvent* e) {
    const QStringList files = DroppedImages::imageFiles(e->mimeData()->urls());
    if (files.isEmpty()) return;
    e->acceptProposedAction();
    dropped_->classify(files);
}

bool PredictionsPanel::eventFilter(QObject* watched, QEvent* e) {
    if (watched == scroll_->viewport() && e->type() == QEvent::Resize) {
        const int w = scroll_->viewport()->width();
        grid_->setFixedSize(w, grid_->heightForWidth(w));
    }
    return QWidget::eventFilter(watched, e);
}

std::vector<int> PredictionsPanel::order(const tb::Predictions& p, int trueClass, int predicted) {
    std::vector<int> wrong, right;
    for (size_t i = 0; i < p.labels.size() && i < p.predicted.size(); ++i) {
        if (trueClass >= 0 && (p.labels[i] != trueClass || p.predicted[i] != predicted)) continue;
        (p.labels[i] == p.predicted[i] ? right : wrong).push_back(int(i));
    }
    const auto& conf = p.confidence;
    std::stable_sort(wrong.begin(), wrong.end(), [&](int a, int b) { return conf[size_t(a)] > conf[size_t(b)]; });
    std::stable_sort(right.begin(), right.end(), [&](int a, int b) { return conf[size_t(a)] < conf[size_t(b)]; });
    wrong.insert(wrong.end(), right.begin(), right.end());
    return wrong;
}

void PredictionsPanel::showEval(const tb::EvalResult& r) {
    QStringList names;
    if (r.predictions)
        for (const std::string& n : r.predictions->classNames) names << QString::fromStdString(n);
    matrix_->setMatrix(r.confusion, r.classes, names);
    int64_t right = 0;
    for (int k = 0; k < matrix_->classes(); ++k) right += matrix_->count(k, k);
    header_->setText(tr("%1 set at step %2%3: %4 of %5 right (%6%)")
                         .arg(QString::fromStdString(r.split))
                         .arg(r.step)
                         .arg(r.averagedWeights ? tr(", weights' moving average") : QString())
                         .arg(right)
                         .arg(r.examples)
                         .arg(r.examples ? 100.0 * double(right) / double(r.examples) : 0.0, 0, 'f', 1));
    if (r.predictions) p_ = wellFormed(*r.predictions, r.classes) ? r.predictions : nullptr;
    refill();
}

// Sizes that agree and classes in range: the grid reads images and names by these numbers.
bool PredictionsPanel::wellFormed(const tb::Predictions& p, int classes) {
    const size_t n = p.labels.size();
    if (p.predicted.size() != n || p.confidence.size() != n || !p.images || p.channels <= 0 || p.height <= 0 ||
        p.width <= 0 || p.images->size() / (size_t(p.channels) * size_t(p.height) * size_t(p.width)) < n)
        return false;
    for (size_t i = 0; i < n; ++i)
        if (p.labels[i] < 0 || p.labels[i] >= classes || p.predicted[i] < 0 || p.predicted[i] >= classes) return false;
    return true;
}

void PredictionsPanel::clear() {
    p_.reset();
    matrix_->clear();
    header_->setText(tr("No evaluation yet."));
    refill();
}

void PredictionsPanel::showProblem(const QString& message) {
    p_.reset();
    refill();
    filter_->setText(message);
}

void PredictionsPanel::refill() {
    const int t = matrix_->selectedTrue(), pr = matrix_->selectedPredicted();
    if (!p_) {
        grid_->setPredictions(nullptr, {});
        filter_->setText(tr("Image sets (Fashion-MNIST, CIFAR-10, ...) show their examples here."));
    } else {
        std::vector<int> order = PredictionsPanel::order(*p_, t, pr);
        const size_t n = order.size();
        grid_->setPredictions(p_, std::move(order));
        auto name = [&](int k) {
            return k < int(p_->classNames.size()) ? QString::fromStdString(p_->classNames[size_t(k)]) : QString::number(k);
        };
        if (t >= 0)
            filter_->setText(t == pr ? tr("%1 %2 the model got right, least sure first. Click the cell again for all.")
                                           .arg(n)
                                           .arg(name(t))
                                     : tr("%1 %2 the model called %3, most confident first. Click the cell again "
                                          "for all.")
                                           .arg(n)
                                           .arg(name(t), name(pr)));
        else
            filter_->setText(tr("All %1 examples: the mistakes first, most confident first. Click a cell of the "
                                "matrix for one kind of mistake.")
                                 .arg(n));
    }
    const int w = scroll_->viewport()->width();
    grid_->setFixedSize(w, grid_->heightForWidth(w));
    scroll_->verticalScrollBar()->setValue(0);
}
