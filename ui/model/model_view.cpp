#include "model/model_view.hpp"

#include <QHeaderView>
#include <QHBoxLayout>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QScrollArea>
#include <QScrollBar>
#include <QSplitter>
#include <QVBoxLayout>
#include <algorithm>

#include "view_format.hpp"

using tb::ui::breakable;
using tb::ui::formatCount;
using tb::ui::formatMs;
using tb::ui::groupedLocale;
using tb::ui::wrappedToolTip;

namespace {

constexpr int kRow = 22, kBoxWidth = 190, kMargin = 8, kLane = 9, kBar = 46;

QColor colourOf(tb::LayerType t) {
    switch (t) {
    case tb::LayerType::Conv2d: return QColor("#4e79a7");
    case tb::LayerType::Dense: return QColor("#59a14f");
    case tb::LayerType::BatchNorm: return QColor("#b07aa1");
    case tb::LayerType::Relu: return QColor("#bab0ac");
    case tb::LayerType::Add:
    case tb::LayerType::Concat: return QColor("#f28e2b");
    case tb::LayerType::MaxPool:
    case tb::LayerType::AvgPool:
    case tb::LayerType::GlobalAvgPool: return QColor("#76b7b2");
    case tb::LayerType::Lrn:
    case tb::LayerType::Dropout:
    case tb::LayerType::Flatten: return QColor("#9c755f");
    }
    return Qt::gray;
}

QString shapeText(const tb::Dims& d) {
    return d.h == 1 && d.w == 1 ? QString::number(d.c) : QStringLiteral("%1 x %2 x %3").arg(d.c).arg(d.h).arg(d.w);
}

const QColor kStageBands[] = {QColor(230, 240, 250), QColor(250, 238, 225), QColor(232, 245, 232), QColor(245, 232, 245)};

}  // namespace

LayerGraph::LayerGraph(QWidget* parent) : QWidget(parent) {
    setObjectName("layerGraph");
    setMouseTracking(false);
}

void LayerGraph::setLayers(std::vector<tb::LayerSummary> layers, std::vector<int> stageOf) {
    layers_ = std::move(layers);
    stageOf_ = std::move(stageOf);
    shares_.clear();
    selected_ = -1;
    // Arcs (inputs other than the layer just above) get lanes beside the column, the shorter
    // spans nearer, so that nested shortcuts do not cross.
    arcLane_.assign(layers_.size(), -1);
    std::vector<std::pair<int, int>> spans;  // (length, target)
    for (size_t l = 0; l < layers_.size(); ++l)
        for (int k : layers_[l].inputs)
            if (k != int(l) - 1) spans.push_back({int(l) - k, int(l)});
    std::sort(spans.begin(), spans.end());
    std::vector<std::vector<std::pair<int, int>>> busy;  // per lane, the spans drawn in it
    lanes_ = 0;
    for (const auto& [length, target] : spans) {
        const int from = target - length;
        int lane = 0;
        for (; lane < int(busy.size()); ++lane) {
            bool clash = false;
            for (const auto& [a, b] : busy[size_t(lane)]) clash = clash || !(target <= a || from >= b);
            if (!clash) break;
        }
        if (lane == int(busy.size())) busy.emplace_back();
        busy[size_t(lane)].push_back({from, target});
        arcLane_[size_t(target)] = std::max(arcLane_[size_t(target)], lane);
        lanes_ = std::max(lanes_, lane + 1);
    }
    updateGeometry();
    update();
}

void LayerGraph::setSelected(int layer) {
    selected_ = layer;
    update();
}

void LayerGraph::setShares(std::vector<double> shares) {
    shares_ = std::move(shares);
    update();
}

QSize LayerGraph::sizeHint() const {
    return {kMargin * 2 + kBoxWidth + kBar + kLane * (lanes_ + 1), kMargin * 2 + kRow * std::max<int>(1, int(layers_.size()))};
}

QRect LayerGraph::boxOf(int layer) const { return {kMargin + kBar, kMargin + layer * kRow + 2, kBoxWidth, kRow - 5}; }

int LayerGraph::rowAt(int y) const {
    const int row = (y - kMargin) / kRow;
    return y >= kMargin && row < int(layers_.size()) ? row : -1;
}

void LayerGraph::mousePressEvent(QMouseEvent* e) {
    const int row = rowAt(int(e->position().y()));
    if (row >= 0) emit layerClicked(row);
}

void LayerGraph::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing);
    p.fillRect(rect(), palette().base());
    // Stage bands behind the boxes.
    for (size_t l = 0; l < layers_.size() && !stageOf_.empty(); ++l) {
        const int s = stageOf_[l];
        if (s < 0) continue;
        p.fillRect(QRect(0, kMargin + int(l) * kRow, width(), kRow), kStageBands[s % 4]);
        if (l == 0 || stageOf_[l - 1] != s) {
            p.setPen(QColor(90, 90, 90));
            p.drawText(QRect(2, kMargin + int(l) * kRow, kBar - 4, kRow), Qt::AlignLeft | Qt::AlignVCenter,
                       tr("stage %1").arg(s + 1));
        }
    }
    const QFontMetrics fm(font());
    const int right = kMargin + kBar + kBoxWidth;
    // Edges: the layer just above by a short line, any other input by an arc beside the column.
    for (size_t l = 0; l < layers_.size(); ++l) {
        const QRect to = boxOf(int(l));
        for (int k : layers_[l].inputs) {
            if (k == int(l) - 1) {
                p.setPen(QPen(QColor(120, 120, 120), 1));
                p.drawLine(to.center().x(), to.top() - 3, to.center().x(), to.top());
                continue;
            }
            const int fromY = k < 0 ? kMargin : boxOf(k).center().y();
            const int x = right + kLane * (arcLane_[l] + 1);
            QPainterPath path;
            path.moveTo(right, fromY);
            path.cubicTo(x, fromY, x, fromY, x, fromY + kRow / 2);
            path.lineTo(x, to.center().y() - kRow / 2);
            path.cubicTo(x, to.center().y(), x, to.center().y(), right, to.center().y());
            p.setPen(QPen(QColor("#f28e2b"), 1.4));
            p.setBrush(Qt::NoBrush);
            p.drawPath(path);
        }
    }
    for (size_t l = 0; l < layers_.size(); ++l) {
        const tb::LayerSummary& s = layers_[l];
        const QRect box = boxOf(int(l));
        const QColor c = colourOf(s.type);
        p.setPen(int(l) == selected_ ? QPen(Qt::black, 2) : QPen(c.darker(130), 1));
        p.setBrush(s.fused ? c.lighter(140) : c.lighter(115));
        p.drawRoundedRect(box, 4, 4);
        p.setPen(s.fused ? QColor(60, 60, 60) : QColor(Qt::white));  // dark on the light box of a fused ReLU
        const QString text = QString::fromStdString(s.name) + QStringLiteral("  ") +
                             QString::fromStdString(tb::layerTypeName(s.type)) + (s.fused ? tr(" (fused)") : QString());
        p.drawText(box.adjusted(6, 0, -4, 0), Qt::AlignLeft | Qt::AlignVCenter,
                   fm.elidedText(text, Qt::ElideRight, box.width() - 10));
        if (l < shares_.size() && shares_[l] > 0) {  // the layer's share of the step, beside it
            const int w = std::max(1, int(std::round((kBar - 8) * std::min(1.0, shares_[l] / 0.25))));
            p.fillRect(QRect(box.left() - 4 - w, box.top() + 3, w, box.height() - 6), QColor("#e15759"));
        }
    }
}

ModelView::ModelView(QWidget* parent) : QWidget(parent) {
    setObjectName("modelView");
    header_ = new QLabel;
    header_->setWordWrap(true);
    header_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    timing_ = new QLabel;
    timing_->setWordWrap(true);
    timing_->setObjectName("modelTiming");
    graph_ = new LayerGraph;
    auto* scroll = new QScrollArea;
    scroll->setWidget(graph_);
    scroll->setWidgetResizable(false);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    graphArea_ = scroll;
    table_ = new QTableWidget(0, 9);
    table_->setObjectName("layerTable");
    table_->setHorizontalHeaderLabels({tr("Layer"), tr("Type"), tr("Inputs"), tr("Output"), tr("Parameters"),
                                       tr("MFLOPs"), tr("Forward"), tr("Backward"), tr("Share")});
    table_->verticalHeader()->setVisible(false);
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table_->setSelectionBehavior(QAbstractItemView::SelectRows);
    table_->setSelectionMode(QAbstractItemView::SingleSelection);
    table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    table_->setToolTip(wrappedToolTip(
        tr("MFLOPs: the forward pass per example, of convolutions and dense layers (a multiply-add counts 2). "
           "Forward, Backward and Share: tower 0's step in the running (or last) run, measured layer by layer "
           "on the steps it profiles; a fused ReLU costs nothing of its own.")));
    auto* split = new QSplitter(Qt::Horizontal);
    split->addWidget(scroll);
    split->addWidget(table_);
    split->setStretchFactor(1, 1);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(header_);
    layout->addWidget(timing_);
    layout->addWidget(split, 1);
    connect(graph_, &LayerGraph::layerClicked, this, &ModelView::select);
    connect(table_, &QTableWidget::currentCellChanged, this, [this](int row) {
        graph_->setSelected(row);
        if (row >= 0) {
            auto* area = qobject_cast<QScrollArea*>(graph_->parentWidget()->parentWidget());
            if (area) area->ensureVisible(graph_->boxOf(row).center().x(), graph_->boxOf(row).center().y(), 10, 40);
        }
    });
}

void ModelView::select(int layer) { table_->setCurrentCell(layer, 0); }

void ModelView::showProblem(const QString& message) {
    layers_.clear();
    model_.clear();
    graph_->setLayers({}, {});
    table_->setRowCount(0);
    header_->setText(breakable(message));
    timing_->clear();
}

void ModelView::setModel(const tb::ModelSpec& spec, const std::vector<std::pair<int, int>>& stages) {
    std::vector<tb::LayerSummary> layers;
    tb::ModelShape shape;
    try {
        layers = tb::summarizeLayers(spec);
        shape = tb::shapeOf(spec);
    } catch (const std::exception& e) {
        showProblem(QString::fromUtf8(e.what()));
        return;
    }
    const QString name = QString::fromStdString(spec.name);
    const bool sameModel = name == model_ && layers.size() == layers_.size();
    layers_ = layers;
    model_ = name;
    std::vector<int> stageOf(layers.size(), -1);
    for (size_t s = 0; s < stages.size(); ++s)
        for (int l = stages[s].first; l <= stages[s].second && l >= 0 && l < int(layers.size()); ++l) stageOf[size_t(l)] = int(s);
    if (stages.empty()) stageOf.clear();
    int64_t flops = 0, joins = 0, fused = 0;
    for (const tb::LayerSummary& l : layers) {
        flops += l.forwardFlops;
        joins += l.inputs.size() > 1;
        fused += l.fused;
    }
    header_->setText(breakable(
        tr("<b>%1</b>: input %2, %3 layers%4, %5 parameters, %6 MFLOPs forward per example%7.<br>%8")
            .arg(name.toHtmlEscaped(), shapeText(shape.input))
            .arg(layers.size())
            .arg(joins ? tr(" (a graph: %1 joins)").arg(joins) : QString())
            .arg(formatCount(double(shape.params)), formatCount(double(flops) / 1e6, 1))
            .arg(fused ? tr("; %1 ReLUs fused into a neighbour (the batch norm, add or dense layer before, the max pooling or LRN after)").arg(fused) : QString())
            .arg(QString::fromStdString(spec.description).toHtmlEscaped())));
    graph_->setLayers(layers, stageOf);
    graph_->resize(graph_->sizeHint());
    // The whole column in view, its shortcut arcs included (a vertical scroll bar beside it).
    graphArea_->setMinimumWidth(graph_->sizeHint().width() + graphArea_->verticalScrollBar()->sizeHint().width() + 4);
    if (!sameModel)  // and how to get there: a finished run's times come back by following it
        timing_->setText(tr("Where each layer's time goes shows once a run of this model on towers has profiled a "
                            "step (a pipeline's stages are timed as wholes, in the timeline): start one, or select "
                            "one of its runs in the Runs tab and press Follow."));
    table_->setRowCount(int(layers.size()));
    for (size_t l = 0; l < layers.size(); ++l) {
        const tb::LayerSummary& s = layers[l];
        QStringList inputs;
        for (int k : s.inputs) inputs << (k < 0 ? tr("input") : QString::fromStdString(layers[size_t(k)].name));
        const QString cells[] = {QString::fromStdString(s.name),
                                 QString::fromStdString(tb::layerTypeName(s.type)) + (s.fused ? tr(" (fused)") : QString()),
                                 inputs.join(QStringLiteral(", ")),
                                 shapeText(s.output),
                                 s.params ? formatCount(double(s.params)) : QString(),
                                 s.forwardFlops ? formatCount(double(s.forwardFlops) / 1e6, 2) : QString()};
        for (int c = 0; c < 6; ++c) {
            auto* item = new QTableWidgetItem(cells[c]);
            if (c >= 4) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
            table_->setItem(int(l), c, item);
        }
        if (!sameModel)
            for (int c = 6; c < 9; ++c) table_->setItem(int(l), c, new QTableWidgetItem);
    }
}

bool ModelView::showLayerTimes(const tb::LayerTimes& t, int64_t step, const QString& run) {
    if (t.forward.size() != layers_.size() || t.backward.size() != layers_.size()) return false;  // another model's
    // A fused ReLU or a flatten does nothing of its own: its times are the events' own cost, which
    // is neither shown nor counted in the step the shares divide (they add up to 100%; under
    // AddressSanitizer those costs were 1.8% of a vgg_bn step).
    auto idle = [&](size_t l) { return layers_[l].fused || layers_[l].type == tb::LayerType::Flatten; };
    double forward = 0, backward = 0;
    for (size_t l = 0; l < layers_.size(); ++l)
        if (!idle(l)) forward += t.forward[l], backward += t.backward[l];
    const double total = forward + backward;
    std::vector<double> shares(layers_.size(), 0.0);
    for (size_t l = 0; l < layers_.size(); ++l) {
        const double both = idle(l) ? 0.0 : t.forward[l] + t.backward[l];
        shares[l] = total > 0 ? both / total : 0;
        const QString cells[] = {t.forward[l] > 0 && !idle(l) ? formatMs(t.forward[l]) : QString(),
                                 t.backward[l] > 0 && !idle(l) ? formatMs(t.backward[l]) : QString(),
                                 both > 0 ? groupedLocale().toString(100 * shares[l], 'f', 1) + QStringLiteral("%") : QString()};
        for (int c = 0; c < 3; ++c) {
            auto* item = new QTableWidgetItem(cells[c]);
            item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
            table_->setItem(int(l), 6 + c, item);
        }
    }
    graph_->setShares(shares);
    const QString which = run.isEmpty() ? tr("Tower 0's step %1").arg(step)
                                        : tr("Tower 0's step %1 in run %2").arg(step).arg(run);
    timing_->setText(tr("%1, layer by layer: forward %2, backward %3 (the red bars: each layer's share).")
                         .arg(which, formatMs(forward), formatMs(backward)));
    return true;
}

void ModelView::clearTimes() {
    graph_->setShares({});
    for (int r = 0; r < table_->rowCount(); ++r)
        for (int c = 6; c < 9; ++c) table_->setItem(r, c, new QTableWidgetItem);
}

