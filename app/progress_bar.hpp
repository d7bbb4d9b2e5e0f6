// ProgressBar: the terminal view of a headless run. On a terminal it redraws one line
// (step, loss, accuracy, examples/sec, ETA) at most 10 times a second; elsewhere it prints a
// plain line every 10% so logs stay readable. Evaluations get a line of their own.
#pragma once
#include <chrono>
#include <cstdio>
#include <string>

#include "engine/observer.hpp"

class ProgressBar final : public tb::TrainingObserver {
public:
    // `runFolder`: where the run is kept, said once training starts.
    explicit ProgressBar(std::FILE* out, std::string runFolder = {});
    void onStateChanged(tb::RunState, const std::string& detail) override;
    void onStepEnd(const tb::StepMetrics&) override;
    void onEval(const tb::EvalResult&) override;

private:
    void endLine();
    std::FILE* out_;
    std::string runFolder_;
    bool tty_;
    bool open_ = false;   // a progress line is drawn and not yet ended
    int64_t lastDecile_ = -1;
    std::chrono::steady_clock::time_point lastDraw_{};
    double smoothedRate_ = 0;
};
