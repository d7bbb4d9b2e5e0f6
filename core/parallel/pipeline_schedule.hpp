// Pipeline schedules (issue 32): the order in which each stage of a model split into S stages
// runs the forwards and backwards of a step's M micro-batches. Every schedule computes the
// gradient of the whole batch (the micro-batches' gradients summed, one update per step); they
// differ in how long the stages idle (the bubble) and how many micro-batches' activations a
// stage holds at once:
//   naive   one batch (M = 1) flows through the stages in turn; each stage idles (S-1)/S of
//           the step (the lecture's model parallelism, the teaching baseline)
//   gpipe   all M forwards, then all M backwards (GPipe, Huang et al. 2019): bubble
//           (S-1)/(M+S-1), M micro-batches' activations held on every stage
//   1f1b    PipeDream-Flush (Narayanan et al. 2021): stage s runs S-s-1 forwards ahead, then
//           one forward and one backward in turn, then the backwards left: the same bubble as
//           gpipe with at most S-s micro-batches held on stage s
// Every schedule forwards and backwards the micro-batches in increasing order on every stage,
// which is what lets a stage keep micro-batch m in slot m % held (stage_pipeline.cpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace tb {

struct PipelineOp {
    bool forward = true;
    int micro = 0;
    bool operator==(const PipelineOp&) const = default;
};

class PipelineSchedule {
public:
    virtual ~PipelineSchedule() = default;
    virtual std::string name() const = 0;  // as --pipeline takes it
    // Stage `stage`'s work in one step of `micro` micro-batches over `stages` stages, in order.
    virtual std::vector<PipelineOp> ops(int stage, int stages, int micro) const = 0;
    // Throws tb::Error naming --micro-batches where this schedule cannot run `micro` of them.
    virtual void checkMicroBatches(int micro) const;
};

// "naive", "gpipe" or "1f1b"; throws tb::Error naming --pipeline and the choices.
std::unique_ptr<PipelineSchedule> makePipelineSchedule(const std::string& name);

// The most micro-batches whose activations a stage holds at once running `ops` (forwarded, not
// yet backwarded).
int activationsHeld(const std::vector<PipelineOp>& ops);

// The idle share of S stages of equal cost over the forwards and backwards of M micro-batches
// (gpipe and 1f1b alike; naive is M = 1): (S-1)/(M+S-1).
double idealBubble(int stages, int micro);

}  // namespace tb
