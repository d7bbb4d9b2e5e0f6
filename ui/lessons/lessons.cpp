#include "lessons/lessons.hpp"

#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QScreen>
#include <QCloseEvent>
#include <QTextBrowser>
#include <QVBoxLayout>
#include <algorithm>

#include "window_keys.hpp"

namespace {

// Every lesson trains the same small network on the same data, so what changes between
// lessons is only what the lesson is about.
// `towers` CPU towers of `perTower` examples each, variables where `variables` says.
tb::RunConfig base(int cores, int towers, int perTower, const char* variables = "cpu") {
    tb::RunConfig c;
    c.model = "mlp";
    c.data = "fashion-mnist";
    c.optimizer = "momentum";
    c.lr = 0.05;
    c.validation = 2000;
    c.threads = cores;
    c.epochs = 1;
    c.seed = 1;
    c.evalEvery = 100;
    c.towers = "cpu:0";
    for (int i = 1; i < towers; ++i) c.towers += ",cpu:" + std::to_string(i);
    c.batchPerTower = perTower;
    c.batch = towers * perTower;
    c.variables = variables;
    c.reduce = c.variables == "replicated" ? "allreduce" : "mean";
    return c;
}

// The batch-norm lessons' runs: vgg_bn (a small VGG with batch norm) for one epoch, `towers` CPU
// towers of `perTower` examples each, the learning rate falling along a half cosine to 0 over the
// epoch (so that the accuracy at the end is the run's, not one noisy step's). Every run evaluates
// about 4.5 times an epoch whatever its batch (every 400 steps of 32 examples), as
// tests/benchmarks/bench_large_batch.py does.
tb::RunConfig batchNormRun(int cores, int towers, int perTower) {
    tb::RunConfig c = base(cores, towers, perTower);
    c.model = "vgg_bn";
    c.lr = 0.025;
    c.evalEvery = std::max(50, 400 * 32 / (towers * perTower));
    c.validation = 2000;
    c.lrDecay = "cosine";
    c.lrDecaySteps = (60000 - c.validation + c.batch - 1) / c.batch;
    return c;
}

QString percent(double a) { return a >= 0 ? QString::number(100 * a, 'f', 1) + QStringLiteral("%") : QStringLiteral("?"); }

}  // namespace

std::vector<Lesson> lessons(int cores) {
    std::vector<Lesson> out;
    {
        const tb::RunConfig c = base(cores, 2, 64);
        out.push_back({QObject::tr("1. The tower pattern and the sync point"),
                       QObject::tr(
                           "<p>Two towers hold one replica of the model each and take half of every batch of 128. "
                           "The <b>variables live on the CPU</b> (the placement diagram draws them apart from the "
                           "towers): at every step each tower reads them, computes the gradients of its 64 "
                           "examples, and sends them up. The gradients <b>meet at one synchronisation point</b>, "
                           "where they are averaged and applied once; then the next step starts.</p>"
                           "<p><b>Watch</b> the timeline: each tower's bar is forward and backward (green), then "
                           "<i>wait</i> (amber) for the other tower, then <i>reduce</i> (blue) and <i>apply</i> "
                           "(purple). The faster tower always waits: a synchronous step is as slow as its slowest "
                           "tower. The bytes counter shows what crossed to the holder: 2 x 4 bytes per parameter "
                           "per tower per step.</p>"
                           "<p><b>Try</b> the toolbar's Pace at '2 steps/s' to see single steps, and 4 towers to "
                           "see the wait grow.</p>"),
                       c});
    }
    {
        tb::RunConfig c = base(std::max(1, cores / 2), 4, 32);  // the two runs share the cores
        c.slow = "3=4";
        c.optimizer = "sgd";  // classic asynchronous SGD: momentum and staleness compound (see the text)
        c.evalEvery = 40;
        out.push_back({QObject::tr("2. A straggler: sync waits, async does not"),
                       QObject::tr(
                           "<p>Four towers, and tower 3 is <b>four times slower</b> (an injected straggler). Both "
                           "runs start together from the same seed and see the same examples.</p>"
                           "<p><b>Synchronous</b>: every step waits for tower 3, so three towers idle most of the "
                           "time. <b>Asynchronous</b> (a parameter server): each tower pulls the variables, "
                           "computes, and pushes its gradients alone; nobody waits. But a push may be computed on "
                           "variables that other towers have changed since: its <b>staleness</b> is how many "
                           "updates were applied in between. The slow tower's pushes are the stalest.</p>"
                           "<p><b>Watch</b> accuracy against time (async gets further sooner) and against steps "
                           "(a synchronous step averages four towers' gradients, an asynchronous update one "
                           "tower's, possibly stale), and the staleness histogram.</p>"
                           "<p>Both runs use plain SGD, as classic asynchronous SGD does. Staleness acts like "
                           "extra momentum (Mitliagkas et al., 2016): with momentum 0.9 on top, the same "
                           "asynchronous run fell to chance (10% test accuracy) on a 2-core AMD EPYC while the "
                           "synchronous one reached 84%.</p>"),
                       c, true});
    }
    {
        const tb::RunConfig c = base(cores, 2, 64, "replicated");
        out.push_back({QObject::tr("3. All-reduce vs the CPU holder"),
                       QObject::tr(
                           "<p>The same two towers, but <b>every tower keeps its own copy of the variables</b> "
                           "(replicated) and the gradients are <b>all-reduced</b>: each tower ends the step with "
                           "the mean of all gradients and applies the same update to its own copy. There is no "
                           "holder: in a ring, each device sends and receives 2(N - 1)/N of the gradients, "
                           "whatever the number of towers, where the CPU holder receives N copies and sends N "
                           "back.</p>"
                           "<p><b>Watch</b> the bytes counter against lesson 1's, and the reduce and apply phases "
                           "in the timeline: on one machine's memory the holder's reduction is cheap; between GPUs "
                           "on PCIe it is the bottleneck. <b>Try</b> Lab > Scaling lab with 'CPU holder' and "
                           "'all-reduce' checked, then the what-if side with h100 GPUs over pcie4: the predictor "
                           "says how much all-reduce would save there.</p>"),
                       c});
    }
    {
        tb::RunConfig c = base(cores, 2, 64, "replicated");
        c.averageEvery = 8;
        out.push_back({QObject::tr("4. Averaging every K steps"),
                       QObject::tr(
                           "<p>Replicated towers that <b>do not meet at every step</b>: each takes K = 8 local "
                           "steps on its own examples, then the replicas' parameters are averaged (local SGD). "
                           "Communication is divided by K, and a straggler only holds the others at the "
                           "averages.</p>"
                           "<p>The price: between averages the replicas drift apart, so eight local steps are "
                           "worth less than eight synchronous ones. <b>Watch</b> the loss curve's marks at each "
                           "average and the bytes counter. <b>Try</b> K = 1 (the same as synchronous for SGD and "
                           "momentum), 8 and 64, and compare them in the Runs tab: communication saved against "
                           "accuracy at the end of the epoch.</p>"),
                       c});
    }
    {
        // 1, 2, 4 and 8 towers of 32 examples on vgg_bn: the learning rate as given for a batch of
        // 32, scaled linearly with the global batch, and scaled with a gradual warm-up.
        Lesson l{QObject::tr("5. Batch size and the learning rate with more towers"),
                 QObject::tr(
                     "<p>More towers with the same batch per tower make a larger global batch: 8 towers of 32 take "
                     "256 examples per step, and an epoch has an eighth of one tower's steps. Each step's "
                     "gradient is an average over more examples, less noisy but no larger, so with the same "
                     "learning rate the model learns less per epoch.</p>"
                     "<p>The <b>linear scaling rule</b> (Goyal et al., 2017): multiply the learning rate by the "
                     "factor the batch grew (<code>--lr-scaling linear --lr-reference-batch 32</code>: 0.025 x "
                     "256 / 32 = 0.2 for 8 towers), with a <b>gradual warm-up</b> (<code>--warmup-steps</code>) "
                     "so that the large rate does not blow the first steps up. The model is <i>vgg_bn</i>, a "
                     "small VGG with batch norm, each tower normalising by its own 32 examples.</p>"
                     "<p><b>Run</b> the twelve (one epoch each, one after another, the rate falling along a "
                     "half cosine to 0 over the epoch): 1, 2, 4 and 8 towers with the rate as given, scaled, and "
                     "scaled with a warm-up over the epoch's first quarter. <b>Watch</b> the unscaled runs' "
                     "accuracy fall as the towers multiply and the scaled ones hold it (on a 2-core EPYC, means "
                     "of 3 seeds: 89.1%, 87.8%, 85.0%, 79.7% as given; 89.1%, 88.9%, 88.4%, 87.4% scaled). At "
                     "factors this small the warm-up costs a little (a quarter of one epoch at a lower rate); "
                     "Goyal et al. needed it from batches of thousands. The table's test accuracy is each run's, "
                     "measured at its end.</p>"),
                 batchNormRun(cores, 4, 32)};
        for (int towers : {1, 2, 4, 8})
            for (int way = 0; way < 3; ++way) {
                tb::RunConfig c = batchNormRun(cores, towers, 32);
                if (way > 0) {
                    c.lrScaling = "linear";
                    c.lrReferenceBatch = 32;
                }
                if (way == 2) c.warmupSteps = 58000 / (32 * towers) / 4;  // a quarter of the epoch's steps
                const QString how = way == 0 ? QObject::tr("lr 0.025") : way == 1 ? QObject::tr("scaled")
                                                                                 : QObject::tr("scaled + warm-up");
                l.compare.push_back({QObject::tr("%1 x 32, %2").arg(towers).arg(how), c});
            }
        l.conclude = [](const std::vector<LessonRun>& runs, const std::vector<LessonResult>& r) {
            if (r.size() != 12 || r[9].testAccuracy < 0 || r[11].testAccuracy < 0)
                return QObject::tr("Run all twelve to compare them.");
            (void)runs;
            return QObject::tr("<b>Measured:</b> with the rate as given, test accuracy went from %1 on one tower to %2 "
                               "on 8 (a batch 8 times larger, an eighth of the steps); scaled linearly, 8 towers "
                               "reached %3, and with warm-up %4. One tower's three runs are the same run "
                               "(%5, %6, %7): nothing to scale.")
                .arg(percent(r[0].testAccuracy), percent(r[9].testAccuracy), percent(r[10].testAccuracy),
                     percent(r[11].testAccuracy), percent(r[0].testAccuracy), percent(r[1].testAccuracy),
                     percent(r[2].testAccuracy));
        };
        out.push_back(std::move(l));
    }
    {
        // The balanced model, two stages, a 1f1b pipeline; the lesson's window also runs it on one
        // device and as naive stages.
        tb::RunConfig c = base(std::max(2, cores), 1, 128);
        c.model = "deep_mlp";
        c.batchPerTower = 0;
        c.steps = 120;
        c.validation = 0;
        c.evalEvery = 0;
        c.stages = std::to_string(2);  // (a literal "2" here trips GCC 12's -Wrestrict false positive)
        c.pipeline = "1f1b";
        c.microBatches = 4;
        out.push_back({QObject::tr("6. Data, model, pipeline"),
                       QObject::tr(
                           "<p>The lecture's other half. <b>Data parallelism</b> (lessons 1-5) copies the whole "
                           "model onto every device. <b>Model parallelism</b> splits the model: here deep_mlp's "
                           "eight dense layers, sized so that two halves cost the same, go to two <b>stages</b>, each "
                           "on its own device (a CPU thread), "
                           "the activations flowing forward from stage 1 to stage 2 and their gradients back.</p>"
                           "<p>The same model and batch train three ways, <b>one after another</b> so that they "
                           "never share the cores: one device with every core; two stages <b>naively</b> (the whole "
                           "batch through stage 1, then stage 2, then back: each stage idles half of every step, "
                           "(S-1)/S); and the two stages as a <b>1f1b pipeline</b> of four micro-batches (while "
                           "stage 2 works on one micro-batch, stage 1 works on the next: the idle share, the "
                           "<i>bubble</i>, falls to (S-1)/(M+S-1) = 20% for equal stages, and each stage holds at "
                           "most S-s micro-batches' activations).</p>"
                           "<p><b>Watch</b> each timeline: a lane per stage, its blocks the micro-batches' "
                           "forwards (light) and backwards (dark), the hatched gaps the bubble. All three compute "
                           "the same gradient: their losses agree step for step.</p>"),
                       c, false, true});
    }
    {
        // Small per-tower batches: 8 towers of 4 examples, their batch norms each normalising by 4
        // examples, or synchronised over the 32; one tower of 32 beside them.
        Lesson l{QObject::tr("7. Batch norm across towers"),
                 QObject::tr(
                     "<p>Batch normalisation normalises each channel by the mean and variance of the batch it "
                     "sees. With towers, <b>each tower sees only its own slice</b>: TensorFlow's towers (and "
                     "Towerbench by default) normalise by the tower's own examples, and keep tower 0's moving "
                     "statistics for evaluation. With 8 towers of 4 examples, each batch norm estimates its "
                     "statistics from 4 examples: noisy, and different from what evaluation will use.</p>"
                     "<p><b>Synchronised batch norm</b> (<code>--sync-bn</code>, PyTorch's SyncBatchNorm) sums "
                     "every tower's sums before normalising, forward and backward: 8 towers of 4 then compute "
                     "exactly what one tower of 32 does (tst_parallel checks it to 1e-7), at the price of a "
                     "small all-reduce at every batch norm, twice a step (the bytes counter shows it).</p>"
                     "<p><b>Run</b> the three, one epoch of vgg_bn each: one tower of 32, 8 towers of 4 with "
                     "their own statistics, and 8 towers of 4 synchronised. <b>Watch</b> the validation "
                     "accuracy and the test accuracy in the table.</p>"),
                 batchNormRun(cores, 8, 4)};
        tb::RunConfig one = batchNormRun(cores, 1, 32), own = batchNormRun(cores, 8, 4), synced = own;
        synced.syncBn = true;
        l.compare = {{QObject::tr("1 tower x 32"), one},
                     {QObject::tr("8 towers x 4, each its own statistics"), own},
                     {QObject::tr("8 towers x 4, --sync-bn"), synced}};
        l.conclude = [](const std::vector<LessonRun>&, const std::vector<LessonResult>& r) {
            if (r.size() != 3 || r[0].testAccuracy < 0 || r[1].testAccuracy < 0 || r[2].testAccuracy < 0)
                return QObject::tr("Run all three to compare them.");
            return QObject::tr("<b>Measured:</b> one tower of 32 reached %1 test accuracy; 8 towers of 4 normalising "
                               "each by its own 4 examples %2; synchronised, %3 (the same arithmetic as one tower, "
                               "its gap to one tower's run only the order of the sums).")
                .arg(percent(r[0].testAccuracy), percent(r[1].testAccuracy), percent(r[2].testAccuracy));
        };
        out.push_back(std::move(l));
    }
    return out;
}

LessonColumn makeLessonColumn(const Lesson& lesson, const QString& startText, const QString& result,
                              const QString& resultName) {
    LessonColumn c;
    auto* text = new QTextBrowser;
    text->setHtml(lesson.text);
    c.start = new QPushButton(startText);
    c.start->setObjectName("lessonStart");
    c.stop = new QPushButton(QObject::tr("Stop"));
    c.stop->setEnabled(false);
    c.result = new QLabel(result);
    c.result->setObjectName(resultName);
    c.result->setWordWrap(true);
    c.result->setTextInteractionFlags(Qt::TextSelectableByMouse);
    c.layout = new QVBoxLayout;
    c.layout->addWidget(text, 1);
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(c.start);
    buttons->addWidget(c.stop);
    c.layout->addLayout(buttons);
    return c;
}

void fitLessonWindow(QWidget& window, QSize preferred) {
    const QRect avail = window.screen()->availableGeometry();
    window.resize(std::min(preferred.width(), avail.width() - 40), std::min(preferred.height(), avail.height() - 60));
    window.move(avail.center() - window.rect().center());
}

LessonWindow::LessonWindow(QSize preferred, QWidget* parent) : QWidget(parent, Qt::Window), preferred_(preferred) {
    tb::ui::closeOnKeys(this, tb::ui::EscapeCloses::No);  // closing stops its runs
}

void LessonWindow::closeEvent(QCloseEvent* e) {
    abortRuns();
    e->accept();
}

void LessonWindow::showEvent(QShowEvent* e) {
    if (!sized_) {
        sized_ = true;
        fitLessonWindow(*this, preferred_);
    }
    QWidget::showEvent(e);
}

LessonPanel::LessonPanel(QWidget* parent) : QWidget(parent) {
    setObjectName("lessonPanel");
    title_ = new QLabel;
    title_->setWordWrap(true);
    QFont bold = title_->font();
    bold.setBold(true);
    title_->setFont(bold);
    text_ = new QTextBrowser;
    text_->setOpenExternalLinks(false);
    again_ = new QPushButton(tr("Set up this lesson's experiment again"));
    auto* v = new QVBoxLayout(this);
    v->addWidget(title_);
    v->addWidget(text_, 1);
    v->addWidget(again_);
    connect(again_, &QPushButton::clicked, this, &LessonPanel::setUpAgain);
}

void LessonPanel::show(const Lesson& lesson) {
    title_->setText(lesson.title);
    text_->setHtml(lesson.text + tr("<p><i>The form holds this lesson's settings: press Start.</i></p>"));
}

QString LessonPanel::title() const { return title_->text(); }
