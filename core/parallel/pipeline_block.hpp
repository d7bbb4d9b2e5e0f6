// One block of a pipeline stage's timeline: a micro-batch's forward or backward, in seconds from
// the step's start (StagePipeline records them; step reports and the window carry them).
#pragma once

namespace tb {

struct PipelineBlock {
    int micro = 0;
    bool forward = true;
    double start = 0, end = 0;
};

}  // namespace tb
