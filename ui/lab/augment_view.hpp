// AugmentView (Lab > Augmented samples): what the training input pipeline makes of the form's
// data, model and --augment/--normalise: a grid of 32 training samples as the towers receive them
// (engine/run_setup's pipelineFor, the same code the run uses), each beside its original. Data are
// loaded off the window's thread; "Draw again" takes the next 32 of the same seed's stream.
#pragma once
#include <QLabel>
#include <QPushButton>
#include <QWidget>
#include <memory>

#include "background_task.hpp"
#include "data/dataset.hpp"
#include "io/run_config.hpp"
#include "view_format.hpp"


class AugmentView : public QWidget {
    Q_OBJECT
public:
    static constexpr int kSamples = 32;
    explicit AugmentView(QWidget* parent = nullptr);
    void setConfig(const tb::RunConfig& c);  // loads its data if they changed, then draws
    // Says why it cannot show a set in the words of the form the config came from; unset, as the
    // engine says it.
    void setExplainer(tb::ui::Explainer explain) { explain_ = std::move(explain); }
    QLabel* grid() const { return grid_; }
    QString status() const { return status_->text(); }
    int drawn() const { return drawn_; }     // samples in the grid

signals:
    void drawnChanged();

public slots:
    void drawAgain();

private:
    void draw();

    tb::RunConfig config_;
    std::string loadedKey_;  // data + model of the loaded set
    std::shared_ptr<tb::DataSplits> data_;
    int channels_ = 0, height_ = 0, width_ = 0;  // the model's input
    float multiply_ = 1, add_ = 0;
    int round_ = 0;
    int drawn_ = 0;
    QLabel *status_, *grid_;
    QPushButton* again_;
    tb::ui::Explainer explain_;
    BackgroundTask loader_{this};
};
