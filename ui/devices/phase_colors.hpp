// The phases of a tower's step as the window draws them: one colour and one name each, shared
// by the placement diagram and the timeline so a phase reads the same in both. Mid-saturation
// tones chosen to stay legible on light and dark palettes alike.
#pragma once
#include <QColor>

#include "engine/observer.hpp"

namespace tb::ui {

enum class Phase { Data, Forward, Backward, Straggle, Wait, Reduce, Apply, Other };
inline constexpr int kPhaseCount = 8;

// In the order a synchronous step runs them (TowerSet::syncStep: input, gradients, injected
// slowdown, the synchronisation point, the reduction, the update), so segments read in time;
// then the rest of the step, outside them.
inline constexpr Phase kPhaseOrder[kPhaseCount] = {Phase::Data,   Phase::Forward, Phase::Backward, Phase::Straggle,
                                                   Phase::Wait,   Phase::Reduce,  Phase::Apply,    Phase::Other};

// An asynchronous push in the order TowerSet::runAsync runs it: input, pull of the variables
// (measured as reduce), gradients, injected slowdown, push and update at the holder (measured as
// apply). Nobody waits for anybody, so there is no wait phase.
inline constexpr int kAsyncPhaseCount = 7;
inline constexpr Phase kAsyncPhaseOrder[kAsyncPhaseCount] = {Phase::Data,     Phase::Reduce, Phase::Forward, Phase::Backward,
                                                             Phase::Straggle, Phase::Apply,  Phase::Other};

// A pipeline stage's step in the order it runs it: its micro-batches' forwards and backwards,
// the idle gaps between them (the bubble, reported as wait), its update.
inline constexpr int kPipelinePhaseCount = 4;
inline constexpr Phase kPipelinePhaseOrder[kPipelinePhaseCount] = {Phase::Forward, Phase::Backward, Phase::Wait,
                                                                   Phase::Apply};

inline double phaseSeconds(const tb::TowerPhases& p, Phase phase) {
    switch (phase) {
    case Phase::Data: return p.dataWait;
    case Phase::Forward: return p.forward;
    case Phase::Backward: return p.backward;
    case Phase::Straggle: return p.straggle;
    case Phase::Wait: return p.wait;
    case Phase::Reduce: return p.reduce;
    case Phase::Apply: return p.apply;
    case Phase::Other: return p.other;
    }
    return 0;
}

// Sum of the phases; negative or NaN entries (never expected) count as nothing so one bad
// report cannot break a drawing.
inline double phasesTotal(const tb::TowerPhases& p) {
    double total = 0;
    for (Phase phase : kPhaseOrder) {
        const double s = phaseSeconds(p, phase);
        if (s > 0) total += s;
    }
    return total;
}

inline QColor phaseColor(Phase phase) {
    switch (phase) {
    case Phase::Data: return QColor(150, 150, 150);     // grey: idle, waiting for input
    case Phase::Forward: return QColor(102, 187, 106);  // green: compute
    case Phase::Backward: return QColor(46, 125, 50);   // dark green: compute
    case Phase::Straggle: return QColor(255, 152, 0);   // orange: injected slowdown
    case Phase::Wait: return QColor(255, 193, 7);       // amber: idle at the synchronisation point
    case Phase::Reduce: return QColor(66, 133, 244);    // blue: communication
    case Phase::Apply: return QColor(156, 39, 176);     // purple: the optimiser's update
    case Phase::Other: return QColor(205, 205, 215);    // pale grey: the rest of the step
    }
    return QColor(128, 128, 128);
}

inline const char* phaseName(Phase phase) {
    switch (phase) {
    case Phase::Data: return "data";
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Straggle: return "straggle";
    case Phase::Wait: return "wait";
    case Phase::Reduce: return "reduce";
    case Phase::Apply: return "apply";
    case Phase::Other: return "other";
    }
    return "";
}

// What a phase is called in an asynchronous push, where reduce is the pull and apply the push.
inline const char* asyncPhaseName(Phase phase) {
    switch (phase) {
    case Phase::Reduce: return "pull";
    case Phase::Apply: return "push";
    default: return phaseName(phase);
    }
}

}  // namespace tb::ui
