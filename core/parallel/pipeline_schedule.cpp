#include "parallel/pipeline_schedule.hpp"

#include <algorithm>

#include "util/error.hpp"

namespace tb {

namespace {

std::vector<PipelineOp> allForwardsThenBackwards(int micro) {
    std::vector<PipelineOp> ops;
    for (int m = 0; m < micro; ++m) ops.push_back({true, m});
    for (int m = 0; m < micro; ++m) ops.push_back({false, m});
    return ops;
}

class NaiveSchedule final : public PipelineSchedule {
public:
    std::string name() const override { return "naive"; }
    std::vector<PipelineOp> ops(int, int, int micro) const override { return allForwardsThenBackwards(micro); }
    void checkMicroBatches(int micro) const override {
        if (micro != 1)
            throw Error("--micro-batches " + std::to_string(micro) +
                        ": the naive pipeline runs the whole batch at once; give --pipeline gpipe or 1f1b to split it");
    }
};

class GPipeSchedule final : public PipelineSchedule {
public:
    std::string name() const override { return "gpipe"; }
    std::vector<PipelineOp> ops(int, int, int micro) const override { return allForwardsThenBackwards(micro); }
};

class OneForwardOneBackwardSchedule final : public PipelineSchedule {
public:
    std::string name() const override { return "1f1b"; }
    std::vector<PipelineOp> ops(int stage, int stages, int micro) const override {
        // Warm-up: the forwards that fill the stages after this one; steady state: a forward,
        // then the oldest micro-batch's backward; cool-down: the backwards left.
        const int ahead = std::min(stages - stage - 1, micro);
        std::vector<PipelineOp> ops;
        for (int m = 0; m < ahead; ++m) ops.push_back({true, m});
        for (int m = ahead; m < micro; ++m) {
            ops.push_back({true, m});
            ops.push_back({false, m - ahead});
        }
        for (int m = micro - ahead; m < micro; ++m) ops.push_back({false, m});
        return ops;
    }
};

}  // namespace

void PipelineSchedule::checkMicroBatches(int micro) const {
    if (micro < 1) throw Error("--micro-batches must be at least 1, got " + std::to_string(micro));
}

std::unique_ptr<PipelineSchedule> makePipelineSchedule(const std::string& name) {
    if (name == "naive") return std::make_unique<NaiveSchedule>();
    if (name == "gpipe") return std::make_unique<GPipeSchedule>();
    if (name == "1f1b") return std::make_unique<OneForwardOneBackwardSchedule>();
    throw Error("--pipeline: '" + name + "' is no schedule; give naive, gpipe or 1f1b");
}

int activationsHeld(const std::vector<PipelineOp>& ops) {
    int held = 0, most = 0;
    for (const PipelineOp& op : ops) most = std::max(most, held += op.forward ? 1 : -1);
    return most;
}

double idealBubble(int stages, int micro) { return double(stages - 1) / double(micro + stages - 1); }

}  // namespace tb
