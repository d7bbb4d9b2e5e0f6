#include "lab/augment_view.hpp"

#include <QHBoxLayout>
#include <QImage>
#include <QPainter>
#include <QPixmap>
#include <QScrollArea>
#include <QVBoxLayout>
#include <algorithm>

#include "data/pipeline.hpp"
#include "engine/run_setup.hpp"
#include "nn/model_spec.hpp"

namespace {

// One (h, w, c) float sample as an 8-bit image: back through the input scaling where the values
// are pixels (x = p * multiply + add), stretched to its own range where they were standardised.
QImage toImage(const float* x, int c, int h, int w, bool standardised, float multiply, float add) {
    QImage q(w, h, c == 1 ? QImage::Format_Grayscale8 : QImage::Format_RGB888);
    const size_t n = size_t(c) * h * w;
    float lo = 0, hi = 255;
    if (standardised) {
        lo = *std::min_element(x, x + n);
        hi = std::max(*std::max_element(x, x + n), lo + 1e-6f);
    }
    for (int y = 0; y < h; ++y) {
        uchar* row = q.scanLine(y);
        for (int i = 0; i < w * c; ++i) {
            float v = x[size_t(y) * w * c + size_t(i)];
            v = standardised ? (v - lo) / (hi - lo) * 255.0f : (v - add) / multiply;
            row[i] = uchar(std::clamp(std::lround(v), 0L, 255L));
        }
    }
    return q;
}

}  // namespace

AugmentView::AugmentView(QWidget* parent) : QWidget(parent) {
    setObjectName("augmentView");
    status_ = new QLabel;
    status_->setObjectName("augmentStatus");
    status_->setWordWrap(true);
    again_ = new QPushButton(tr("Draw again"));
    grid_ = new QLabel;
    grid_->setObjectName("augmentGrid");
    grid_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    auto* scroll = new QScrollArea;
    scroll->setWidget(grid_);
    scroll->setWidgetResizable(true);
    auto* top = new QHBoxLayout;
    top->addWidget(status_, 1);
    top->addWidget(again_);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(top);
    layout->addWidget(scroll, 1);
    connect(again_, &QPushButton::clicked, this, &AugmentView::drawAgain);
}

void AugmentView::setConfig(const tb::RunConfig& c) {
    config_ = c;
    round_ = 0;
    const std::string key = c.data + "\n" + c.model + "\n" + c.tfrecordFeatures;
    if (key == loadedKey_ && data_) {
        draw();
        return;
    }
    if (loader_.running()) return;  // the set being read; the newest config draws when it is in
    status_->setText(tr("Reading %1…").arg(QString::fromStdString(c.data)));
    auto result = std::make_shared<std::shared_ptr<tb::DataSplits>>();
    auto spec = std::make_shared<tb::ModelSpec>();
    auto error = std::make_shared<QString>();
    const tb::RunConfig cfg = c;
    loader_.start([result, spec, error, cfg] {
        try {
            *spec = tb::findModel(cfg.model);
            *result = std::make_shared<tb::DataSplits>(tb::loadData(cfg.data, 0, cfg.seed, {}, tb::dataOptions(cfg, *spec)));
            tb::holdTrainingHead(**result, kSamples);  // a streamed set's first records, to look at
        } catch (const std::exception& e) {
            *error = QString::fromUtf8(e.what());
        }
    }, [this, result, spec, error, key] {
        if (!error->isEmpty()) {
            status_->setText(tr("Cannot show samples: %1").arg(tb::ui::explained(explain_, *error)));
            grid_->clear();
            drawn_ = 0;
            emit drawnChanged();
            return;
        }
        data_ = *result;
        loadedKey_ = key;
        channels_ = spec->inC, height_ = spec->inH, width_ = spec->inW;
        multiply_ = spec->pixels.multiply, add_ = spec->pixels.add;
        draw();
    });
}

void AugmentView::drawAgain() {
    ++round_;
    draw();
}

void AugmentView::draw() {
    if (!data_) return;
    const tb::Dataset& d = data_->train;
    QString problem;
    if (!d.isImage()) problem = tr("%1 holds no images (its samples are points), so there is nothing to augment.")
                                    .arg(QString::fromStdString(config_.data));
    tb::Batch b;
    bool standardised = false;
    try {
        if (problem.isEmpty()) {
            tb::PipelineOptions o = tb::pipelineFor(config_, data_->cifarAugment, true, kSamples, 0);
            o.shuffle = false;  // the first images of the set, the same in every round, drawn anew
            o.pixelMultiply = multiply_, o.pixelAdd = add_;
            o.channelsLast = true;
            o.skipSamples = uint64_t(round_) * uint64_t(d.size());  // each round a new epoch of draws
            standardised = o.standardize;
            tb::InputPipeline pipe(d, o);
            pipe.next(b);
        }
    } catch (const std::exception& e) {
        problem = QString::fromUtf8(e.what());
    }
    if (!problem.isEmpty()) {
        status_->setText(problem);
        grid_->clear();
        drawn_ = 0;
        emit drawnChanged();
        return;
    }
    // Originals and samples side by side, 4 pairs a row, each image scaled up to ~84 px, a pair
    // framed and apart from the next.
    // The original may be larger than the sample (CIFAR-10's 32x32 images, 24x24 windows).
    const int largest = std::max({b.h, b.w, d.height, d.width});
    const int scale = std::max(1, 84 / largest), side = largest * scale;
    const int pairW = 2 * side + 12, pairH = side + 8, gap = 16, rows = (b.n + 3) / 4;
    QPixmap canvas(4 * (pairW + gap), rows * (pairH + gap));
    canvas.fill(palette().color(QPalette::Window));
    QPainter p(&canvas);
    p.setRenderHint(QPainter::SmoothPixmapTransform, false);
    p.setPen(palette().color(QPalette::Mid));
    const size_t per = size_t(b.c) * b.h * b.w;
    for (int i = 0; i < b.n; ++i) {
        const int x0 = (i % 4) * (pairW + gap), y0 = (i / 4) * (pairH + gap);
        const size_t plane = size_t(d.height) * d.width;
        QImage orig(d.width, d.height, d.channels == 1 ? QImage::Format_Grayscale8 : QImage::Format_RGB888);
        for (int y = 0; y < d.height; ++y)
            for (int x = 0; x < d.width; ++x)
                for (int ch = 0; ch < d.channels; ++ch)
                    orig.scanLine(y)[x * d.channels + ch] = d.pixels[size_t(i) * d.sampleSize() + size_t(ch) * plane + size_t(y) * d.width + x];
        const QImage sample = toImage(b.x.data() + size_t(i) * per, b.c, b.h, b.w, standardised, multiply_, add_);
        p.drawRect(x0, y0, pairW - 1, pairH - 1);
        p.drawImage(QRect(x0 + 4, y0 + 4, d.width * scale, d.height * scale), orig);
        p.drawImage(QRect(x0 + 8 + side, y0 + 4, b.w * scale, b.h * scale), sample);
    }
    p.end();
    grid_->setPixmap(canvas);
    drawn_ = b.n;
    const tb::AugmentSettings a = tb::AugmentSettings::parse(config_.augment, "--augment");
    const bool augmenting = (a.automatic && data_->cifarAugment) || a.enabled;
    status_->setText(tr("%1 training samples of %2 as the towers receive them, each right of its original "
                        "(draw %3); augmentation: %4; normalisation: %5.")
                         .arg(b.n)
                         .arg(QString::fromStdString(config_.data))
                         .arg(round_ + 1)
                         .arg(augmenting ? QString::fromStdString(a.automatic ? "CIFAR-10's distorted_inputs" : config_.augment)
                                         : tr("none"))
                         .arg(standardised ? tr("per-image standardisation (shown stretched)") : tr("none")));
    emit drawnChanged();
}
