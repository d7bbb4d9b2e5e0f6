#include "window/frame_gate.hpp"

#include <algorithm>

FrameGate::FrameGate(std::function<void()> draw, QObject* parent) : QObject(parent), draw_(std::move(draw)) {
    timer_.setSingleShot(true);
    last_.start();
    connect(&timer_, &QTimer::timeout, this, &FrameGate::flush);
}

void FrameGate::request() {
    if (!timer_.isActive()) timer_.start(int(std::max<qint64>(0, kFrameMs - last_.elapsed())));
}

void FrameGate::flush() {
    timer_.stop();
    last_.restart();
    draw_();
}
