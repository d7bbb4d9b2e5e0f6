// StepCounting: how this process's tower steps become the run's steps.
//   alone          the run is this process: each call's steps are the run's
//   in a vote      every process's step ends in one collective, the vote: the step's loss, accuracy
//                  and examples over every process's slice, every worker's towers' metrics, and
//                  whether any process asked to stop; only the vote ends the loop, so no process
//                  is left in a collective. Parameter servers vote too, counting nothing.
//   by the servers async workers of parameter-server processes meet no one but the servers: a stop
//                  goes with the next push, the servers' answers count the updates and end the
//                  worker, and its step lines show every worker's towers as server 0 relays them.
#pragma once
#include <cstdint>
#include <memory>

#include "engine/observer.hpp"
#include "engine/run_setup.hpp"
#include "parallel/run_control.hpp"
#include "parallel/training_engine.hpp"

namespace tb {

class StepCounting {
public:
    // `perStep`: the examples of one step of this process's towers.
    static std::unique_ptr<StepCounting> make(const ProcessRoles& roles, TrainingEngine& towers, RunControl& control,
                                              int perStep);
    virtual ~StepCounting() = default;
    // Whether the loop goes on to another call; alone, it waits here while the run is paused.
    virtual bool goOn() = 0;
    // Makes tower step r, reported as m, the run's next: sets `step`. False where it is not part of
    // the run (a push after the run's last update), which ends the call's reports.
    virtual bool count(const TowerStep& r, StepMetrics& m, bool lastOfCall, int64_t& step) = 0;
};

// A parameter server's part in each step's vote (workers x towers tower reports), from a group
// byte count of `counted`; true where the run stops.
bool serverVote(ProcessGroup& processes, int workers, int towers, int64_t& counted);

}  // namespace tb
