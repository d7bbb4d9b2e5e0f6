// FrameGate: draws what an engine reported at most ~30 times a second. An engine's stepsReady
// calls request(): the first request after a frame starts a single-shot timer (firing at once
// where the last frame is older than kFrameMs), so a fast engine wakes the GUI thread ~30 times
// a second, however many steps it makes, and the drawing takes whatever piled up. (Drawing at
// each wake, mlp's 800 steps a second kept the GUI thread at 42% of a core on a 2-core machine
// and the training team at half its headless speed.) flush() draws now: at a run's end, before
// the state line moves on.
#pragma once
#include <QElapsedTimer>
#include <QObject>
#include <QTimer>
#include <functional>

class FrameGate : public QObject {
    Q_OBJECT
public:
    static constexpr int kFrameMs = 33;
    FrameGate(std::function<void()> draw, QObject* parent);
    void request();
    void flush();

private:
    std::function<void()> draw_;
    QTimer timer_;
    QElapsedTimer last_;
};
