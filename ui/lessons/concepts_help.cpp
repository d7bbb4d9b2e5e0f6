#include "lessons/concepts_help.hpp"

#include <QDialogButtonBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QSplitter>
#include <QStackedWidget>
#include <QVBoxLayout>
#include <algorithm>

#include "backend/backend.hpp"
#include "devices/device_catalog.hpp"
#include "devices/devices_panel.hpp"
#include "nn/model_spec.hpp"
#include "nn/network.hpp"
#include "placement/placement_diagram.hpp"

namespace {

// The variables of mnist_cnn, the README's model, so the pictures' megabytes are a real model's
// (a batch-1 replica on the CPU is cheap).
QVector<int64_t> mnistCnnSizes() {
    static const QVector<int64_t> sizes = [] {
        auto be = tb::makeCpuBackend(1);
        tb::Network net(tb::findModel("mnist_cnn"), *be, 1);
        QVector<int64_t> v;
        for (const auto& info : net.paramInfos()) v << info.shape.numel();
        return v;
    }();
    return sizes;
}

tb::DeploymentPlan plan(const std::string& towers, const std::string& variables, int batchPerTower = 64) {
    tb::DeploymentPlan p;
    p.towers = tb::DeploymentPlan::parseTowers(towers, 8, 8, "towers");
    tb::DeploymentPlan::parseVariables(variables, p, "variables");
    if (p.variables == tb::VariablePlacement::Replicated) p.reduce = tb::ReduceMode::AllReduce;
    p.batchPerTower = batchPerTower;
    return p;
}

// One synchronous step of `towers` towers: compute grows with the index, tower `straggler` (if
// any) is held 60 ms more, and the others wait for the slowest at the synchronisation point.
tb::StepMetrics syncStep(int towers, int64_t step, int straggler = -1, bool averaged = false) {
    tb::StepMetrics m;
    m.step = step;
    m.totalSteps = 100;
    m.averaged = averaged;
    double slowest = 0;
    std::vector<tb::TowerPhases> phases(static_cast<size_t>(towers));
    for (int i = 0; i < towers; ++i) {
        auto& p = phases[size_t(i)];
        p.dataWait = 0.002;
        p.forward = 0.012 + 0.001 * i;
        p.backward = 0.024 + 0.002 * i;
        p.straggle = i == straggler ? 0.06 : 0;
        slowest = std::max(slowest, p.dataWait + p.forward + p.backward + p.straggle);
    }
    for (int i = 0; i < towers; ++i) {
        tb::TowerMetrics t;
        t.phases = phases[size_t(i)];
        t.phases.wait = slowest - (t.phases.dataWait + t.phases.forward + t.phases.backward + t.phases.straggle);
        t.phases.reduce = 0.006;
        t.phases.apply = 0.004;
        const double total = slowest + t.phases.reduce + t.phases.apply;
        t.busyFraction = (total - t.phases.dataWait - t.phases.wait) / total;  // Trainer's busy: all but waiting
        m.stepSeconds = total;
        m.towers.push_back(t);
    }
    m.examplesPerSec = 64.0 * towers / m.stepSeconds;
    m.elapsedSeconds = m.stepSeconds * double(step);
    return m;
}

// Asynchronous pushes of 3 towers over 0.4 s of the run's clock, tower 2 three times slower:
// each push reports its pusher's phases and how stale its variables were.
std::vector<tb::StepMetrics> asyncPushes() {
    struct Lane { double clock = 0; double slowdown = 1; int64_t pulledAt = 0; };
    std::vector<Lane> lanes = {{0, 1, 0}, {0.004, 1, 0}, {0.008, 3, 0}};
    std::vector<tb::StepMetrics> out;
    int64_t update = 0;
    while (true) {
        size_t next = 0;
        for (size_t i = 1; i < lanes.size(); ++i) {
            const double end = lanes[i].clock + 0.04 * lanes[i].slowdown;
            if (end < lanes[next].clock + 0.04 * lanes[next].slowdown) next = i;
        }
        Lane& l = lanes[next];
        const double compute = 0.03 * l.slowdown;
        tb::TowerPhases p;
        p.dataWait = 0.002;
        p.reduce = 0.003;  // pull
        p.forward = compute / 3;
        p.backward = compute * 2 / 3;
        p.apply = 0.005;   // push and update
        const double length = p.dataWait + p.reduce + p.forward + p.backward + p.apply;
        if (l.clock + length > 0.4) break;
        l.clock += length;
        tb::StepMetrics m;
        m.step = ++update;
        m.totalSteps = 100;
        m.pusher = int(next);
        m.staleness = update - 1 - l.pulledAt;
        m.elapsedSeconds = l.clock;
        m.stepSeconds = length;
        m.towers.resize(lanes.size());
        m.towers[next].phases = p;
        m.towers[next].busyFraction = (length - p.dataWait) / length;
        l.pulledAt = update;
        out.push_back(m);
    }
    return out;
}

QWidget* diagramOf(const tb::DeploymentPlan& p, const tb::StepMetrics* step = nullptr) {
    auto* d = new PlacementDiagram;
    const PlacementModel model = PlacementModel::fromPlan(p, mnistCnnSizes());
    d->setModel(model);
    if (step) {
        tb::StepMetrics m = *step;
        m.bytesMoved = model.bytesPerStep();  // what the engine's communicator would count
        d->showStep(m);
    }
    return d;
}

QWidget* timelineOf(const std::vector<tb::StepMetrics>& steps, int towers) {
    auto* t = new TimelineView;
    t->reset(towers);
    for (const auto& m : steps) t->addStep(m);
    return t;
}

// `count` synchronous steps of `towers` towers, tower `straggler` (if any) held back in each.
std::vector<tb::StepMetrics> syncSteps(int towers, int straggler = -1, int count = 6) {
    std::vector<tb::StepMetrics> steps;
    for (int s = 1; s <= count; ++s) steps.push_back(syncStep(towers, s, straggler));
    return steps;
}

}  // namespace

QVector<Concept> concepts() {
    QVector<Concept> c;
    c.push_back({QObject::tr("Tower"),
                 QObject::tr("<p>A <b>tower</b> is one replica of the model on one device (a GPU, or a CPU core "
                             "set). Every step, each tower takes its own slice of the batch, runs the model forward "
                             "and backward on it and produces gradients. More towers: more examples per step, in "
                             "the same time if nothing else slows them.</p><p>Each box below is a tower; the "
                             "coloured bar at its foot is its last step, phase by phase.</p>"),
                 [] {
                     const auto step = syncStep(2, 7);
                     return diagramOf(plan("cpu:0,cpu:1", "cpu"), &step);
                 }});
    c.push_back({QObject::tr("Global batch and its split"),
                 QObject::tr("<p>The <b>global batch</b> is what one step trains on: the towers' slices together. "
                             "The form shows both, e.g. <i>128 = 4 towers × 32</i>. Adding towers with the same "
                             "per-tower batch grows the global batch, which changes the training itself (fewer "
                             "steps per epoch, a learning rate that may need to grow); keeping the global batch "
                             "shrinks each slice, which leaves each device less work per step.</p>"),
                 [] { return diagramOf(plan("cpu:0,cpu:1,cpu:2,cpu:3", "cpu", 32)); }});
    c.push_back({QObject::tr("Variables' holder (parameter server)"),
                 QObject::tr("<p>The model's variables live in one place, the <b>holder</b> (TensorFlow's "
                             "parameter server): on the CPU, as in <code>cifar10_multi_gpu_train.py</code>, or on "
                             "one GPU. Each step the towers read the parameters from it and send their gradients "
                             "back: the arrows, labelled with the bytes each carries. A tower on the holder's own "
                             "device reads them in place and moves nothing.</p>"),
                 [] { return diagramOf(plan("gpu:0,gpu:1", "gpu:0")); }});
    c.push_back({QObject::tr("Phases of a step"),
                 QObject::tr("<p>The timeline splits each tower's step into phases: <b>data</b> (waiting for the "
                             "input pipeline), <b>forward</b> and <b>backward</b> (compute), <b>straggle</b> (an "
                             "injected slowdown), <b>wait</b> (idle at the synchronisation point, or for a free core on a busy host), <b>reduce</b> "
                             "(gradients meeting) and <b>apply</b> (the optimiser's update). Hover a bar for each "
                             "phase in milliseconds.</p>"),
                 [] { return timelineOf(syncSteps(3, -1, 1), 3); }});  // one step, its phases wide
    c.push_back({QObject::tr("Synchronisation point"),
                 QObject::tr("<p>In a synchronous step the towers' gradients meet at one <b>synchronisation "
                             "point</b>, where they are averaged and applied once; only then does the next step "
                             "start. Every step therefore lasts as long as its slowest tower: the others wait "
                             "there (amber in the timeline).</p>"),
                 [] { return timelineOf(syncSteps(3), 3); }});
    c.push_back({QObject::tr("Straggler"),
                 QObject::tr("<p>A <b>straggler</b> is a tower slower than the rest (a busier or older GPU, a "
                             "noisy neighbour). In synchronous training everyone waits for it: its extra time "
                             "(hatched orange, <i>straggle</i>) becomes everybody's wait. The devices panel's busy "
                             "bars show the cost: the straggler near 100%, the others far lower. Try "
                             "<i>Straggler</i> in the form's advanced settings.</p>"),
                 [] { return timelineOf(syncSteps(3, 2), 3); }});
    c.push_back({QObject::tr("Busy fraction and examples/sec"),
                 QObject::tr("<p>A tower's <b>busy fraction</b> is the share of the run it spends working "
                             "(computing, exchanging gradients, updating; a straggler's slowdown counts as work) "
                             "rather than waiting for input or for the others at the synchronisation point. The "
                             "bars show it over the whole run and over the last 2 s. <b>Examples/sec</b> is the global batch over the step's wall time. A "
                             "multi-GPU run that is not faster shows here: busy fractions far below 100% say "
                             "where the time went.</p>"),
                 [] {
                     DeviceCatalog cpuOnly;
                     cpuOnly.whyNoGpu = QObject::tr("this example runs three CPU towers.");
                     auto* panel = new DevicesPanel(cpuOnly);
                     panel->reset({QStringLiteral("cpu:0"), QStringLiteral("cpu:1"), QStringLiteral("cpu:2")});
                     panel->addSteps(syncSteps(3, 2));
                     return static_cast<QWidget*>(panel);
                 }});
    c.push_back({QObject::tr("Replicated variables and all-reduce"),
                 QObject::tr("<p>With <b>replicated variables</b> every tower keeps its own copy of the variables "
                             "and there is no holder. The gradients are summed among the towers by an "
                             "<b>all-reduce</b> (NCCL's ring on GPUs): each device sends and receives "
                             "2(D−1)/D of the gradients' bytes, D being the devices, and every replica applies the "
                             "same update, so the copies stay identical.</p>"),
                 [] { return diagramOf(plan("gpu:0,gpu:1,gpu:2,gpu:3", "replicated")); }});
    c.push_back({QObject::tr("Averaging every K steps"),
                 QObject::tr("<p>With <b>averaging every K steps</b> (local SGD) the replicas train on their own "
                             "gradients for K steps and only then meet: their parameters are all-reduced to their "
                             "mean. Communication falls K-fold; between averages the replicas drift apart. The "
                             "timeline marks each averaging step, the loss chart rings it.</p>"),
                 [] {
                     std::vector<tb::StepMetrics> steps;
                     for (int s = 1; s <= 8; ++s) {
                         auto m = syncStep(2, s, -1, s % 4 == 0);
                         for (auto& t : m.towers) {  // local steps: nobody waits, nothing is reduced
                             t.phases.wait = 0;
                             t.phases.reduce = m.averaged ? 0.006 : 0;
                         }
                         steps.push_back(m);
                     }
                     return timelineOf(steps, 2);
                 }});
    c.push_back({QObject::tr("Synchronous and asynchronous updates"),
                 QObject::tr("<p><b>Synchronous</b>: one update per step from every tower's gradients together. "
                             "<b>Asynchronous</b> (parameter-server style): each tower pulls the variables, computes, "
                             "and pushes its gradients when it is done, without waiting for the others. Nobody "
                             "waits, so a straggler slows only itself; but updates are computed on older "
                             "variables, and their order depends on timing, so an asynchronous run is not "
                             "reproducible. The timeline then draws each tower's lane on the run's clock.</p>"),
                 [] { return timelineOf(asyncPushes(), 3); }});
    c.push_back({QObject::tr("Staleness"),
                 QObject::tr("<p>An asynchronous push's <b>staleness</b> is the number of updates other towers "
                             "applied between its pull of the variables and its push: its gradients were computed "
                             "for variables that many updates old. The diagram's header names the last pusher and "
                             "its staleness; the charts plot it per push. A slow tower pushes the stalest "
                             "gradients.</p>"),
                 [] {
                     auto p = plan("cpu:0,cpu:1,cpu:2", "cpu");
                     p.update = tb::UpdateMode::Async;
                     const auto pushes = asyncPushes();
                     const auto stale = *std::max_element(pushes.begin(), pushes.end(), [](auto& a, auto& b) {
                         return a.staleness < b.staleness;
                     });
                     return diagramOf(p, &stale);
                 }});
    c.push_back({QObject::tr("Parameter-server shards"),
                 QObject::tr("<p>With asynchronous updates the variables can be split over <b>shards</b>, several "
                             "holders each with its own lock, dealt round-robin (variable v to shard v mod S). "
                             "Towers pushing at the same moment then update different shards side by side "
                             "instead of queueing for one. Every tower still talks to every shard, drawn as one "
                             "bus; each shard shows the variables and bytes it holds.</p>"),
                 [] {
                     auto p = plan("cpu:0,cpu:1,cpu:2,cpu:3", "cpu");
                     p.update = tb::UpdateMode::Async;
                     p.psShards = 2;
                     return diagramOf(p);
                 }});
    return c;
}

ConceptsDialog::ConceptsDialog(QWidget* parent) : QDialog(parent) {
    setWindowTitle(tr("Concepts"));
    list_ = new QListWidget;
    pages_ = new QStackedWidget;
    for (const Concept& c : concepts()) {
        list_->addItem(c.title);
        auto* page = new QWidget;
        auto* layout = new QVBoxLayout(page);
        auto* title = new QLabel(QStringLiteral("<h3>%1</h3>").arg(c.title.toHtmlEscaped()));
        auto* text = new QLabel(c.text);
        text->setWordWrap(true);
        text->setTextFormat(Qt::RichText);
        QWidget* picture = c.picture();
        picture->setMinimumHeight(220);
        layout->addWidget(title);
        layout->addWidget(text);
        layout->addWidget(picture, 1);
        pictures_ << picture;
        pages_->addWidget(page);
    }
    list_->setMaximumWidth(list_->sizeHintForColumn(0) + 2 * list_->frameWidth() + 8);
    connect(list_, &QListWidget::currentRowChanged, pages_, &QStackedWidget::setCurrentIndex);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    auto* body = new QHBoxLayout;
    body->addWidget(list_);
    body->addWidget(pages_, 1);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(body, 1);
    layout->addWidget(buttons);
    list_->setCurrentRow(0);
    resize(820, 560);
}

void ConceptsDialog::showConcept(int index) { list_->setCurrentRow(index); }
int ConceptsDialog::conceptCount() const { return int(pictures_.size()); }
QWidget* ConceptsDialog::pictureOf(int index) const {
    return index >= 0 && index < pictures_.size() ? pictures_[index] : nullptr;
}
