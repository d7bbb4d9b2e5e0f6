#include "progress_bar.hpp"

#include <utility>

#include <unistd.h>

#include <string>

ProgressBar::ProgressBar(std::FILE* out, std::string runFolder)
    : out_(out), runFolder_(std::move(runFolder)), tty_(isatty(fileno(out)) != 0) {}

void ProgressBar::endLine() {
    if (open_) std::fputc('\n', out_);
    open_ = false;
}

void ProgressBar::onStateChanged(tb::RunState s, const std::string& detail) {
    // Loading is silent, and a failure is printed once by the program itself: if the input is
    // bad, the error is the only line the user sees.
    if (s == tb::RunState::Loading || s == tb::RunState::Failed) return;
    endLine();
    std::fprintf(out_, "%s%s%s\n", tb::toString(s), detail.empty() ? "" : ": ", detail.c_str());
    if (s == tb::RunState::Running && !runFolder_.empty()) std::fprintf(out_, "run folder: %s\n", runFolder_.c_str());
    std::fflush(out_);
}

void ProgressBar::onStepEnd(const tb::StepMetrics& m) {
    // An exponential average keeps the rate and ETA steady while single steps jitter.
    smoothedRate_ = smoothedRate_ == 0 ? m.examplesPerSec : 0.9 * smoothedRate_ + 0.1 * m.examplesPerSec;
    const double batch = m.examplesPerSec * m.stepSeconds;
    const double perStep = smoothedRate_ > 0 ? batch / smoothedRate_ : 0;
    const double eta = double(m.totalSteps - m.step) * perStep;
    const double frac = m.totalSteps ? double(m.step) / double(m.totalSteps) : 0;
    const auto now = std::chrono::steady_clock::now();
    if (tty_) {
        if (m.step != m.totalSteps && now - lastDraw_ < std::chrono::milliseconds(100)) return;
        lastDraw_ = now;
        constexpr int kWidth = 30;
        std::string bar(size_t(frac * kWidth), '#');
        bar.resize(kWidth, '.');
        std::fprintf(out_, "\r[%s] %lld/%lld  loss %.4f  acc %5.1f%%  %7.1f ex/s  ETA %4.0fs ", bar.c_str(),
                     (long long)m.step, (long long)m.totalSteps, m.loss, 100 * m.accuracy, smoothedRate_, eta);
        open_ = true;
    } else {
        const int64_t decile = int64_t(frac * 10);
        if (decile == lastDecile_) return;
        lastDecile_ = decile;
        std::fprintf(out_, "step %lld/%lld  loss %.4f  acc %5.1f%%  %7.1f ex/s  ETA %.0fs\n", (long long)m.step,
                     (long long)m.totalSteps, m.loss, 100 * m.accuracy, smoothedRate_, eta);
    }
    std::fflush(out_);
}

void ProgressBar::onEval(const tb::EvalResult& r) {
    endLine();
    std::fprintf(out_, "eval %s at step %lld: loss %.4f  accuracy %.2f%% (%lld examples%s)\n", r.split.c_str(),
                 (long long)r.step, r.loss, 100 * r.accuracy, (long long)r.examples,
                 r.averagedWeights ? ", averaged weights" : "");
    std::fflush(out_);
}
