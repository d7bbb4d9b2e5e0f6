#include "runs/runs_panel.hpp"

#include "engine/run_folder.hpp"

#include "engine/scaling_sweep.hpp"

#include <QFileInfo>

#include <QDateTime>
#include <QDir>
#include <algorithm>
#include <filesystem>
#include <QFile>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QScreen>
#include <QScrollBar>
#include <QSet>
#include <QSplitter>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include "charts/chart_style.hpp"
#include "util/error.hpp"
#include "view_format.hpp"

namespace {


// A table cell that sorts by a number, not by its text.
class NumberItem : public QTableWidgetItem {
public:
    NumberItem(const QString& text, double value) : QTableWidgetItem(text) { setData(Qt::UserRole, value); }
    bool operator<(const QTableWidgetItem& o) const override {
        return data(Qt::UserRole).toDouble() < o.data(Qt::UserRole).toDouble();
    }
};

QString percent(double v) { return v < 0 ? QStringLiteral("–") : QLocale().toString(100 * v, 'f', 2) + QLatin1Char('%'); }

// A run's Date cell: when it was made (an ISO 8601 UTC stamp) in local time, as short as a list
// of runs needs: the time alone today, the day and time this year, the date before that. It sorts
// by the instant, and its tooltip gives the whole date and the run's folder (also kept as
// UserRole + 1). An unreadable stamp is shown as it is.
NumberItem* createdItem(const std::string& created, const QString& folder, const QDateTime& now) {
    const QString stamp = QString::fromStdString(created);
    const QDateTime t = QDateTime::fromString(stamp, Qt::ISODate).toLocalTime();
    NumberItem* item = nullptr;
    if (!t.isValid()) {
        item = new NumberItem(stamp, 0);
        item->setToolTip(folder);
    } else {
        const QString shown = t.date() == now.date() ? t.toString(QStringLiteral("hh:mm:ss"))
                              : t.date().year() == now.date().year()
                                  ? QLocale().toString(t, QStringLiteral("MMM d hh:mm"))
                                  : t.toString(QStringLiteral("yyyy-MM-dd"));
        item = new NumberItem(shown, double(t.toMSecsSinceEpoch()));
        item->setToolTip(t.toString(QStringLiteral("yyyy-MM-dd hh:mm:ss")) + QLatin1Char('\n') + folder);
    }
    item->setData(Qt::UserRole + 1, folder);
    return item;
}

}  // namespace

constexpr int kPollMs = 2000;  // the runs index re-read while the list is shown

RunsPanel::RunsPanel(QString root, QWidget* parent) : QWidget(parent), root_(std::move(root)) {
    filter_ = new QLineEdit;
    filter_->setPlaceholderText(tr("Filter"));
    filter_->setToolTip(tr("Shows the runs whose model, data, plan, state or name contain this text"));
    filter_->setClearButtonEnabled(true);
    auto* refreshButton = new QPushButton(tr("Refresh"));
    table_ = new QTableWidget(0, ColumnCount);
    table_->setHorizontalHeaderLabels({tr("Date"), tr("Model"), tr("State"), tr("Test"), tr("Validation"), tr("Data"),
                                       tr("Plan"), tr("Steps"), tr("Examples/s")});
    table_->setTextElideMode(Qt::ElideMiddle);  // a long model or data path keeps both ends; its tooltip is whole
    table_->setSelectionBehavior(QAbstractItemView::SelectRows);
    table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table_->setSortingEnabled(true);
    table_->verticalHeader()->hide();
    table_->horizontalHeader()->setStretchLastSection(true);
    compare_ = new QPushButton(tr("Compare"));
    compareHelp_ = tb::ui::wrappedToolTip(tr("Overlay the selected runs' curves and list their settings side by "
                                             "side, differences marked; scaling sweeps: their examples/sec and "
                                             "efficiency by towers."));
    open_ = new QPushButton(tr("Open settings"));
    open_->setToolTip(tr("Put the selected run's settings into the experiment form"));
    resume_ = new QPushButton(tr("Resume"));
    resumeHelp_ = tb::ui::wrappedToolTip(tr("Continue the selected run from its newest checkpoint, with its own "
                                            "settings: exactly where it stopped or crashed."));
    follow_ = new QPushButton(tr("Follow"));
    follow_->setToolTip(tb::ui::wrappedToolTip(tr("Show the selected run live in the charts while another process "
                                                  "(a towerbench-run, a server writing to a shared folder) trains it.")));
    delete_ = new QPushButton(tr("Delete…"));
    deleteHelp_ = tr("Remove the selected run folders with their checkpoints (asks first)");
    // The list follows the runs as they start, train and end, while it is shown.
    auto* poll = new QTimer(this);
    poll->setInterval(kPollMs);
    connect(poll, &QTimer::timeout, this, [this] {
        if (isVisible()) refreshInBackground();
    });
    poll->start();

    auto* top = new QHBoxLayout;
    top->addWidget(filter_, 1);
    top->addWidget(refreshButton);
    // Two rows, so the tab is no wider than the form it shares the dock with.
    auto* buttons = new QGridLayout;
    buttons->addWidget(compare_, 0, 0);
    buttons->addWidget(open_, 0, 1);
    buttons->addWidget(delete_, 0, 2);
    buttons->addWidget(resume_, 1, 0);
    buttons->addWidget(follow_, 1, 1);
    auto* v = new QVBoxLayout(this);
    v->addLayout(top);
    v->addWidget(table_, 1);
    v->addLayout(buttons);

    connect(refreshButton, &QPushButton::clicked, this, &RunsPanel::refresh);
    connect(filter_, &QLineEdit::textChanged, this, &RunsPanel::showFiltered);  // the runs read last, no index read
    connect(compare_, &QPushButton::clicked, this, &RunsPanel::compareSelected);
    connect(delete_, &QPushButton::clicked, this, &RunsPanel::deleteSelected);
    connect(open_, &QPushButton::clicked, this, [this] {
        const QStringList folders = selectedFolders();
        if (folders.size() != 1) return;
        try {
            tb::RunConfig c;
            c.loadFile((folders.front() + "/config.json").toStdString());
            // (The processes as the list read them from plan.json.)
            const auto r = std::find_if(runs_.begin(), runs_.end(),
                                        [&](const tb::RunRecord& x) { return x.path == folders.front().toStdString(); });
            emit openSettings(c, r != runs_.end() ? r->processes : 1);
        } catch (const tb::Error& e) {
            QMessageBox::warning(this, tr("Open settings"), QString::fromUtf8(e.what()));
        }
    });
    connect(follow_, &QPushButton::clicked, this, [this] {
        if (selectedFolders().size() != 1) return;
        const QString folder = selectedFolders().front();
        if (isSweep(folder)) emit sweepRequested(folder);
        else emit followRequested(folder);
    });
    connect(resume_, &QPushButton::clicked, this, [this] {
        if (selectedFolders().size() == 1) emit resumeRequested(selectedFolders().front());
    });
    connect(table_, &QTableWidget::itemSelectionChanged, this, &RunsPanel::updateButtons);
    confirmDelete_ = [this](const QStringList& folders) {
        const QString question =
            folders.size() == 1
                ? tr("Delete the run folder %1 with its checkpoints? This cannot be undone.")
                      .arg(QFileInfo(folders.front()).fileName())
                : tr("Delete these %1 run folders with their checkpoints? This cannot be undone.").arg(folders.size());
        QMessageBox box(QMessageBox::Warning, folders.size() == 1 ? tr("Delete a run") : tr("Delete runs"), question,
                        QMessageBox::Cancel, this);
        box.setDetailedText(folders.join(QLatin1Char('\n')));
        QPushButton* remove = box.addButton(tr("Delete"), QMessageBox::DestructiveRole);
        box.setDefaultButton(QMessageBox::Cancel);
        box.exec();
        return box.clickedButton() == remove;
    };
    refresh();
}

bool RunsPanel::isSweep(const QString& folder) { return QFileInfo::exists(folder + "/sweep.json"); }

QString RunsPanel::liveRun(const QStringList& folders) const {
    for (const QString& f : folders)
        if (const std::optional<tb::RunHolder> h = tb::RunFolder::trainer(f.toStdString()))
            return tr("%1 is being trained now by %2: stop it first")
                .arg(QFileInfo(f).fileName(), QString::fromStdString(h->describe()));
    return {};
}

QString RunsPanel::noCheckpoint(const QString& folder) {
    if (!tb::RunFolder::newestCheckpointIn(folder.toStdString()).empty()) return {};
    return tr("%1 has no checkpoint to continue from: it ended before its first, or none can be read. Open "
              "settings puts its settings into the form to start it again.")
        .arg(QFileInfo(folder).fileName());
}

QString RunsPanel::resumeProblem(const QString& folder) {
    std::error_code ec;  // (no checkpoints folder: no time, and nothing to resume)
    const auto changed = std::filesystem::last_write_time((folder + "/checkpoints").toStdString(), ec);
    const std::string key = folder.toStdString() + '\n' + std::to_string(ec ? 0 : changed.time_since_epoch().count());
    if (key != resumeKey_) {
        resumeKey_ = key;
        ++checkpointReads_;
        resumeProblem_ = noCheckpoint(folder);
    }
    return resumeProblem_;
}

void RunsPanel::setExplainer(tb::ui::Explainer explain) {
    explain_ = std::move(explain);
    shown_ = false;  // the tooltips shown so far are in flag words
    showFiltered();
}

void RunsPanel::updateButtons() {
    const QStringList folders = selectedFolders();
    const int n = int(folders.size());
    // A sweep's points (examples/sec by towers) and a run's curves (loss by step) share no chart.
    const auto sweeps = std::count_if(folders.begin(), folders.end(), [](const QString& f) { return isSweep(f); });
    const bool mixed = sweeps > 0 && sweeps < n;
    compare_->setEnabled(n >= 2 && !mixed);
    compare_->setToolTip(mixed ? tb::ui::wrappedToolTip(tr("Runs compare with runs, scaling sweeps with sweeps: the "
                                                          "selection holds both."))
                               : compareHelp_);
    open_->setEnabled(n == 1);
    // A scaling sweep's folder opens in the scaling lab; it has nothing to resume or follow.
    const bool sweep = n == 1 && isSweep(folders.front());
    // The run a process trains now is neither resumed beside it nor deleted under it.
    const QString live = liveRun(folders);
    // A run that ended before its first checkpoint (one that failed while setting up) has nothing to
    // continue from: Open settings starts it again.
    const QString unresumable = n == 1 && !sweep && live.isEmpty() ? resumeProblem(folders.front()) : QString();
    resume_->setEnabled(n == 1 && !sweep && live.isEmpty() && unresumable.isEmpty());
    resume_->setToolTip(!live.isEmpty() ? live : !unresumable.isEmpty() ? unresumable : resumeHelp_);
    follow_->setEnabled(n == 1);
    follow_->setText(sweep ? tr("Show sweep") : tr("Follow"));
    delete_->setEnabled(n >= 1 && live.isEmpty());
    delete_->setToolTip(live.isEmpty() ? deleteHelp_ : live);
}

void RunsPanel::refresh() {
    std::vector<tb::RunRecord> all;
    try {
        ++indexReads_;
        tb::RunIndex index(root_.toStdString());
        all = index.list();
    } catch (const std::exception& e) {  // an index that cannot be read shows no rows, says why
        table_->setToolTip(QString::fromUtf8(e.what()));
    }
    showRuns(std::move(all));
}

void RunsPanel::refreshInBackground() {
    if (reading_.running()) return;  // the next tick reads again
    auto read = std::make_shared<std::vector<tb::RunRecord>>();
    auto error = std::make_shared<QString>();
    ++indexReads_;
    reading_.start([root = root_.toStdString(), read, error] {
        try {
            tb::RunIndex index(root);
            *read = index.list();
        } catch (const std::exception& e) {
            *error = QString::fromUtf8(e.what());
        }
    }, [this, read, error] {
        if (!error->isEmpty()) table_->setToolTip(*error);
        showRuns(std::move(*read));
    });
}

void RunsPanel::showRuns(std::vector<tb::RunRecord> all) {
    all_ = std::move(all);
    showFiltered();
}

void RunsPanel::showFiltered() {
    const QStringList keep = selectedFolders();
    std::vector<tb::RunRecord> now;
    const std::string filter = filter_->text().trimmed().toStdString();
    for (const tb::RunRecord& r : all_)
        if (r.matches(filter)) now.push_back(r);
    if (shown_ && now == runs_) {  // nothing changed: the table (its scroll, its sort) stays as it is
        updateButtons();
        return;
    }
    runs_ = std::move(now);
    shown_ = true;
    // A run's checkpoints can change within one tick of the clock that stamps their folder (a
    // few ms): a changed row (a run that ended, a new step count) is looked at again in any case.
    resumeKey_.clear();
    const QDateTime today = QDateTime::currentDateTime();
    table_->setSortingEnabled(false);
    table_->setRowCount(int(runs_.size()));
    for (int i = 0; i < int(runs_.size()); ++i) {
        const tb::RunRecord& r = runs_[size_t(i)];
        table_->setItem(i, Date, createdItem(r.created, QString::fromStdString(r.path), today));
        for (auto [column, text] : {std::pair{Model, r.model}, {Data, r.data}, {Plan, r.plan}}) {
            auto* item = new QTableWidgetItem(QString::fromStdString(text));
            item->setToolTip(item->text());
            table_->setItem(i, column, item);
        }
        auto* state = new QTableWidgetItem(QString::fromStdString(r.state));
        if (!r.error.empty())  // why it failed
            state->setToolTip(tb::ui::wrappedToolTip(tb::ui::explained(explain_, QString::fromStdString(r.error))));
        table_->setItem(i, State, state);
        table_->setItem(i, Steps, new NumberItem(tb::ui::formatCount(double(r.steps)), double(r.steps)));
        table_->setItem(i, Validation, new NumberItem(percent(r.validationAccuracy), r.validationAccuracy));
        table_->setItem(i, Test, new NumberItem(percent(r.testAccuracy), r.testAccuracy));
        table_->setItem(i, Speed, new NumberItem(tb::ui::formatCount(r.examplesPerSec), r.examplesPerSec));
    }
    table_->setSortingEnabled(true);
    table_->resizeColumnsToContents();
    // Paths and plans get at most a dozen characters' room, elided in the middle; a model's name
    // (what tells runs apart) as much as the longest built-in one takes, resnet20_mnist.
    const int room = 12 * table_->fontMetrics().averageCharWidth() + 12;
    for (int c : {Data, Plan})
        if (table_->columnWidth(c) > room) table_->setColumnWidth(c, room);
    const int modelRoom = table_->fontMetrics().horizontalAdvance(QStringLiteral("resnet20_mnist")) + 12;
    if (table_->columnWidth(Model) > modelRoom) table_->setColumnWidth(Model, modelRoom);
    select(keep);
    updateButtons();
}

QStringList RunsPanel::selectedFolders() const {
    QStringList out;
    for (const QModelIndex& row : table_->selectionModel()->selectedRows(Date))
        out << row.data(Qt::UserRole + 1).toString();
    return out;
}

void RunsPanel::select(const QStringList& folders) {
    table_->clearSelection();
    for (int i = 0; i < table_->rowCount(); ++i)
        if (folders.contains(table_->item(i, Date)->data(Qt::UserRole + 1).toString()))
            table_->selectionModel()->select(table_->model()->index(i, 0),
                                             QItemSelectionModel::Select | QItemSelectionModel::Rows);
}

void RunsPanel::compareSelected() {
    const QStringList folders = selectedFolders();
    if (folders.size() < 2) return;
    auto* d = new CompareDialog(folders, this, names_);
    d->setAttribute(Qt::WA_DeleteOnClose);
    d->show();
}

void RunsPanel::deleteSelected() {
    const QStringList folders = selectedFolders();
    if (folders.isEmpty() || !liveRun(folders).isEmpty() || !confirmDelete_(folders)) return;
    if (const QString live = liveRun(folders); !live.isEmpty()) return;  // began while the question was open
    for (const QString& f : folders) {
        // Only what is a run folder (it has run.json) under the runs folder is removed.
        if (QFile::exists(f + "/run.json") && QDir(f).absolutePath().startsWith(QDir(root_).absolutePath() + '/'))
            QDir(f).removeRecursively();
    }
    refresh();
}

namespace {

struct Curves {
    QVector<double> steps, loss;
    QVector<double> evalSteps, accuracy;      // validation evaluations (test where there is none)
    QVector<double> testSteps, testAccuracy;
};

// Training loss per step and test/validation accuracy per evaluation, from metrics.jsonl.
Curves readCurves(const QString& folder) {
    Curves c;
    QFile f(folder + "/metrics.jsonl");
    if (!f.open(QIODevice::ReadOnly)) return c;
    while (!f.atEnd()) {
        const QJsonObject j = QJsonDocument::fromJson(f.readLine()).object();
        const QString type = j.value("type").toString();
        if (type == "step") {
            c.steps << j.value("step").toDouble();
            c.loss << j.value("loss").toDouble();
        } else if (type == "eval") {
            auto& steps = j.value("split").toString() == "test" ? c.testSteps : c.evalSteps;
            auto& acc = j.value("split").toString() == "test" ? c.testAccuracy : c.accuracy;
            steps << j.value("step").toDouble();
            acc << j.value("accuracy").toDouble();
        }
    }
    if (c.evalSteps.isEmpty()) {  // no validation split: its test evaluations
        c.evalSteps = c.testSteps;
        c.accuracy = c.testAccuracy;
    }
    return c;
}

// A setting as the table shows it: text as is, numbers and flags as JSON writes them.
QString cellText(const QJsonValue& v) {
    if (v.isString()) return v.toString();
    if (v.isUndefined()) return QStringLiteral("–");
    return QString::fromUtf8(QJsonDocument(QJsonArray{v}).toJson(QJsonDocument::Compact)).mid(1).chopped(1);
}

QJsonObject readConfig(const QString& folder) {
    QFile f(folder + "/config.json");
    return f.open(QIODevice::ReadOnly) ? QJsonDocument::fromJson(f.readAll()).object() : QJsonObject();
}

}  // namespace

QStringList CompareDialog::distinctNames(const QStringList& names) {
    std::vector<QStringList> parts;
    size_t shortest = SIZE_MAX;
    for (const QString& n : names) {
        parts.push_back(n.split('-'));
        shortest = std::min(shortest, size_t(parts.back().size()));
    }
    if (names.size() < 2) return names;
    // The leading and trailing parts every name shares, each name keeping at least one part.
    const auto shared = [&](auto partOf) {
        size_t k = 0;
        while (k + 1 < shortest &&
               std::all_of(parts.begin(), parts.end(), [&](const QStringList& p) { return partOf(p, k) == partOf(parts[0], k); }))
            ++k;
        return k;
    };
    const size_t front = shared([](const QStringList& p, size_t k) { return p[qsizetype(k)]; });
    const size_t back = std::min(shortest - 1 - front,
                                 shared([](const QStringList& p, size_t k) { return p[p.size() - 1 - qsizetype(k)]; }));
    QStringList out;
    for (const QStringList& p : parts) out << p.mid(qsizetype(front), p.size() - qsizetype(front + back)).join('-');
    if (QSet<QString>(out.begin(), out.end()).size() != out.size()) return names;
    return out;
}

namespace {
constexpr int kChartsWidth = 560;  // the comparison's charts at their narrowest readable
}  // namespace

CompareDialog::CompareDialog(const QStringList& folders, QWidget* parent, const SettingNames& names) : QDialog(parent) {
    setWindowTitle(tr("Compare %n runs", nullptr, int(folders.size())));
    loss_ = tb::ui::makeChart(this, QStringLiteral("compareLoss"), tr("Training loss"), tr("step"), tr("loss"));
    accuracy_ = tb::ui::makeChart(this, QStringLiteral("compareAccuracy"), tr("Validation accuracy (test where none)"),
                                  tr("step"), tr("accuracy"));
    QStringList keys;
    std::vector<QJsonObject> configs;
    // Scaling sweeps compare by what they measured: examples/sec and efficiency against towers.
    const bool sweeps = std::all_of(folders.begin(), folders.end(), [](const QString& f) { return RunsPanel::isSweep(f); });
    if (sweeps) {
        tb::ui::chartTitle(loss_)->setText(tr("Examples/sec by towers"));
        tb::ui::chartTitle(accuracy_)->setText(tr("Scaling efficiency"));
        for (QCustomPlot* p : {loss_, accuracy_}) p->xAxis->setLabel(tr("towers"));
        tb::ui::setYLabel(loss_, tr("examples/sec"));
        tb::ui::setYLabel(accuracy_, tr("efficiency (speedup / towers)"));
    }
    // Runs by what tells their folders apart (the columns' headers and the legends' entries).
    QStringList full;
    for (const QString& f : folders) full << QDir(f).dirName();
    const QStringList headers = distinctNames(full);
    for (int i = 0; i < folders.size(); ++i) {
        const QString& name = headers[i];
        const QColor colour = tb::ui::towerColour(i);
        configs.push_back(readConfig(folders[i]));
        for (const QString& k : configs.back().keys())
            if (!keys.contains(k)) keys << k;
        if (sweeps) {
            addSweep(folders[i], name, colour);
            continue;
        }
        const Curves c = readCurves(folders[i]);
        QCPGraph* g = loss_->addGraph();
        g->setName(name);
        g->setPen(QPen(colour, 1.5));
        g->setData(c.steps, c.loss, true);
        QCPGraph* a = accuracy_->addGraph();
        a->setName(name);
        a->setPen(QPen(colour, 1.5));
        a->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 5));
        a->setData(c.evalSteps, c.accuracy, true);
    }
    for (QCustomPlot* p : {loss_, accuracy_}) {
        p->legend->setVisible(true);
        p->rescaleAxes();
        for (QCPAxis* axis : {p->xAxis, p->yAxis}) {  // points on the edge stay whole
            const QCPRange r = axis->range();
            const double pad = r.size() > 0 ? r.size() * 0.04 : 0.5;
            axis->setRange(r.lower - pad, r.upper + pad);
        }
        tb::ui::applyChartTheme(p, palette());
        tb::ui::fitToSize(p);
        p->replot();
    }
    // The settings that differ first, each group in the order of the names shown.
    auto differ = [&](const QString& key) {
        QSet<QString> values;
        for (const QJsonObject& c : configs) values << cellText(c.value(key));
        return values.size() > 1;
    };
    auto shownName = [&](const QString& key) {
        const QString name = names ? names(key) : QString();
        return name.isEmpty() ? key : name;
    };
    std::sort(keys.begin(), keys.end(), [&](const QString& a, const QString& b) {
        const bool da = differ(a), db = differ(b);
        return da != db ? da : QString::localeAwareCompare(shownName(a), shownName(b)) < 0;
    });
    settings_ = new QTableWidget(int(keys.size()), int(folders.size()));
    for (int col = 0; col < headers.size(); ++col) {
        auto* h = new QTableWidgetItem(headers[col]);
        h->setToolTip(full[col]);
        settings_->setHorizontalHeaderItem(col, h);
    }
    // Rows by the form's names for the settings; the key (config.json's) in the tooltip.
    for (int r = 0; r < keys.size(); ++r) {
        auto* h = new QTableWidgetItem(shownName(keys[r]));
        h->setData(Qt::UserRole, keys[r]);
        h->setToolTip(tr("%1 in config.json").arg(keys[r]));
        settings_->setVerticalHeaderItem(r, h);
    }
    settings_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    QFont bold = font();
    bold.setBold(true);
    for (int r = 0; r < keys.size(); ++r) {
        QStringList values;
        for (const QJsonObject& c : configs) values << cellText(c.value(keys[r]));
        const bool differs = differ(keys[r]);
        for (int col = 0; col < values.size(); ++col) {
            auto* item = new QTableWidgetItem(values[col]);
            if (differs) {
                item->setBackground(QColor(255, 236, 179));  // the rows that differ, marked
                item->setFont(bold);
            }
            settings_->setItem(r, col, item);
        }
        if (differs) settings_->verticalHeaderItem(r)->setFont(bold);
    }
    // The runs share the width (a long data path is elided, its tooltip whole), so every run's
    // column is in view.
    settings_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
    settings_->setTextElideMode(Qt::ElideMiddle);
    for (int r = 0; r < settings_->rowCount(); ++r)
        for (int col = 0; col < settings_->columnCount(); ++col)
            if (QTableWidgetItem* item = settings_->item(r, col)) item->setToolTip(item->text());

    auto* charts = new QSplitter(Qt::Vertical);
    charts->addWidget(loss_);
    charts->addWidget(accuracy_);
    auto* body = new QSplitter(Qt::Horizontal);
    body->addWidget(charts);
    body->addWidget(settings_);
    auto* v = new QVBoxLayout(this);
    v->addWidget(body);
    // The table as wide as its runs' columns need, each at most 240 px (a longer value elided),
    // the charts the rest and at least kChartsWidth: in a fixed share, "045457-vgg_bn" was cut at
    // both ends of its header.
    settings_->horizontalHeader()->setTextElideMode(Qt::ElideMiddle);
    int table = settings_->verticalHeader()->sizeHint().width() + 2 * settings_->frameWidth() +
                settings_->verticalScrollBar()->sizeHint().width();
    for (int col = 0; col < settings_->columnCount(); ++col)
        table += std::min(240, std::max(static_cast<QAbstractItemView*>(settings_)->sizeHintForColumn(col),
                                        settings_->horizontalHeader()->sectionSizeHint(col)));
    const int chrome = v->contentsMargins().left() + v->contentsMargins().right() + body->handleWidth();
    const int screenWidth = screen() ? screen()->availableGeometry().width() : 1366;
    const int width = std::clamp(kChartsWidth + table + chrome, 1000, std::max(1000, screenWidth * 9 / 10));
    table = std::min(table, width - chrome - kChartsWidth);  // many runs share what the charts leave
    body->setSizes({width - chrome - table, table});
    body->setStretchFactor(0, 1);
    resize(width, 600);
}

void CompareDialog::addSweep(const QString& folder, const QString& name, const QColor& colour) {
    tb::SweepFile f;
    try {
        f = tb::ScalingSweep::readResults(folder.toStdString());
    } catch (const tb::Error& e) {
        QCPGraph* g = loss_->addGraph();  // named, so the legend says why this sweep has no points
        g->setName(tr("%1: %2").arg(name, QString::fromUtf8(e.what())));
        return;
    }
    // One line per strategy (the one-tower point starts each), a dash pattern per strategy.
    std::vector<std::string> strategies;
    for (const tb::SweepResult& r : f.points)
        if (r.point.towers > 1 && std::find(strategies.begin(), strategies.end(), r.point.strategy) == strategies.end())
            strategies.push_back(r.point.strategy);
    if (strategies.empty()) strategies.push_back("mean");
    const Qt::PenStyle styles[] = {Qt::SolidLine, Qt::DashLine, Qt::DotLine, Qt::DashDotLine, Qt::DashDotDotLine};
    for (size_t k = 0; k < strategies.size(); ++k) {
        QCPGraph* rate = loss_->addGraph();
        QCPGraph* efficiency = accuracy_->addGraph();
        for (QCPGraph* g : {rate, efficiency}) {
            g->setName(tr("%1: %2").arg(name, QString::fromStdString(strategies[k])));
            g->setPen(QPen(colour, 1.5, styles[k % std::size(styles)]));
            g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 5));
        }
        for (const tb::SweepResult& r : f.points)
            if (r.point.towers == 1 || r.point.strategy == strategies[k]) {
                rate->addData(r.point.towers, r.measured.examplesPerSec);
                efficiency->addData(r.point.towers, r.efficiency);
            }
    }
}

QStringList CompareDialog::differingKeys() const {
    QStringList out;
    for (int r = 0; r < settings_->rowCount(); ++r)
        if (settings_->verticalHeaderItem(r)->font().bold())
            out << settings_->verticalHeaderItem(r)->data(Qt::UserRole).toString();
    return out;
}
