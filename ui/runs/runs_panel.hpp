// RunsPanel: the history of runs, as the runs index (io/run_index.hpp) lists their folders:
// date, model, data, plan, state, steps, validation and test accuracy, examples/sec; a filter
// box; sorted by any column. Select several and Compare overlays their curves beside a table of
// their settings with the differences marked (CompareDialog); Open settings puts a run's settings
// into the experiment form; Delete removes folders after asking. A scaling sweep's folder is
// shown in the scaling lab (Show sweep).
#pragma once
#include <QDialog>
#include <QStringList>
#include <QWidget>
#include <functional>
#include <string>
#include <vector>

#include "background_task.hpp"
#include "io/run_config.hpp"
#include "io/run_index.hpp"
#include "view_format.hpp"

class QLineEdit;
class QPushButton;
class QTableWidget;
class QCustomPlot;
class QColor;

// The settings' names as the experiment form labels them ("Staircase" for lr_staircase); empty
// where the form has none (the key is shown).
using SettingNames = std::function<QString(const QString& key)>;

class RunsPanel : public QWidget {
    Q_OBJECT
public:
    // The columns, what a user scans for first (when, which model, how it ended, how good)
    // leftmost, so the dock at 1366x768 (360 px) shows those four without scrolling.
    enum Column { Date, Model, State, Test, Validation, Data, Plan, Steps, Speed, ColumnCount };
    explicit RunsPanel(QString root, QWidget* parent = nullptr);
    void setSettingNames(SettingNames names) { names_ = std::move(names); }
    // Why a run failed, as its State's tooltip says it: in the form's words ("Data", not "--data").
    void setExplainer(tb::ui::Explainer explain);
    const std::vector<tb::RunRecord>& runs() const { return runs_; }  // as shown, in order
    const std::vector<tb::RunRecord>& allRuns() const { return all_; }  // unfiltered, newest first
    int indexReads() const { return indexReads_; }  // times the runs index was read (refreshes)
    int checkpointReads() const { return checkpointReads_; }  // times Resume looked for a checkpoint
    QTableWidget* table() const { return table_; }
    QPushButton* compareButton() const { return compare_; }
    QPushButton* deleteButton() const { return delete_; }
    QPushButton* resumeButton() const { return resume_; }
    QStringList selectedFolders() const;
    // Why `folder` cannot be resumed for want of a checkpoint (one sentence); empty where it has one.
    static QString noCheckpoint(const QString& folder);
    void select(const QStringList& folders);
    // Deleting asks first; tests answer for the user.
    void setDeleteConfirmation(std::function<bool(const QStringList&)> ask) { confirmDelete_ = std::move(ask); }

public slots:
    // Reads the runs index (walking the runs folder for changes) and shows it, now. The list also
    // follows the folders by itself while shown, read on a thread of its own every 2 s.
    void refresh();
    void compareSelected();
    void deleteSelected();

signals:
    void openSettings(const tb::RunConfig& config, int processes);  // a run's settings and processes, for the form
    void resumeRequested(const QString& folder);     // continue it from its newest checkpoint
    void followRequested(const QString& folder);     // show it live as another process writes it
    void sweepRequested(const QString& folder);      // a scaling sweep's folder, for the scaling lab

private:
    friend class CompareDialog;
    static bool isSweep(const QString& folder);
    // Why the selection cannot be deleted or resumed: a run among it that a process trains now.
    QString liveRun(const QStringList& folders) const;
    void updateButtons();
    // noCheckpoint(folder), looked for again only when the folder's checkpoints changed: the
    // buttons are updated on every 2 s refresh, and a look reads a checkpoint's header.
    QString resumeProblem(const QString& folder);
    void showRuns(std::vector<tb::RunRecord> all);  // every run, of which the filter's are listed
    void showFiltered();
    void refreshInBackground();
    QString root_;
    QLineEdit* filter_;
    QTableWidget* table_;
    QPushButton *compare_, *open_, *resume_, *follow_, *delete_;
    std::vector<tb::RunRecord> all_;   // every run the index listed last
    std::vector<tb::RunRecord> runs_;  // those the filter shows
    bool shown_ = false;  // runs_ is in the table
    int indexReads_ = 0;
    int checkpointReads_ = 0;
    std::string resumeKey_;   // the folder and its checkpoints' write time of the last look
    QString resumeProblem_;   // what it found
    BackgroundTask reading_{this};     // the background refresh in flight
    QString compareHelp_, resumeHelp_, deleteHelp_;
    std::function<bool(const QStringList&)> confirmDelete_;
    SettingNames names_;
    tb::ui::Explainer explain_;
};

// Runs side by side: their training loss and test accuracy over the steps (from each folder's
// metrics.jsonl), and their settings with every row where they differ marked. Scaling sweeps
// side by side: examples/sec and scaling efficiency against towers, a line per strategy.
class CompareDialog : public QDialog {
    Q_OBJECT
public:
    explicit CompareDialog(const QStringList& folders, QWidget* parent = nullptr, const SettingNames& names = {});
    QCustomPlot* lossPlot() const { return loss_; }          // sweeps: examples/sec by towers
    QCustomPlot* accuracyPlot() const { return accuracy_; }  // sweeps: scaling efficiency
    QTableWidget* settings() const { return settings_; }
    QStringList differingKeys() const;  // the settings rows marked as differing, by their keys
    // What tells runs apart in their folder names (the parts all share dropped: "210313" of
    // "20261127-210313-mlp-fashion"); the whole name where nothing is shared.
    static QStringList distinctNames(const QStringList& names);

private:
    void addSweep(const QString& folder, const QString& name, const QColor& colour);
    QCustomPlot* loss_;
    QCustomPlot* accuracy_;
    QTableWidget* settings_;
};
