// MetricsFile: an observer that writes one JSON object per line (JSON Lines) for every step,
// evaluation and state change. Schema, one "type" per line:
//   {"type":"state","state":"running","detail":"cpu (oneDNN 2.6.3, 2 threads)","time":...}
//   {"type":"step","step":12,"total_steps":469,"epoch":0.0256,"loss":0.71,"accuracy":0.76,"lr":0.01,
//    "examples_per_sec":612.3,"step_ms":209.1,"data_wait_ms":0.02,"compute_ms":209.0,"elapsed_s":2.5,
//    "bytes_moved":26197072,"towers":[{"busy":0.97,"loss":0.70,"accuracy":0.77,"data_wait_ms":0.01,
//    "forward_ms":60.2,"backward_ms":130.4,"reduce_ms":1.9,"wait_ms":3.1,"apply_ms":2.2,"straggle_ms":0}, ...]}
//   async steps add "pusher" (the tower whose update it was) and "staleness" (updates since its pull).
//   {"type":"eval","step":469,"split":"test","loss":0.31,"accuracy":0.89,"examples":10000,"ema":false}
#pragma once
#include <cstdio>
#include <string>

#include "engine/observer.hpp"

namespace tb {

class MetricsFile final : public TrainingObserver {
public:
    explicit MetricsFile(const std::string& path);  // throws tb::Error if it cannot be created
    ~MetricsFile() override;
    void onStateChanged(RunState, const std::string& detail) override;
    void onStepEnd(const StepMetrics&) override;
    void onEval(const EvalResult&) override;

private:
    void write(const std::string& line);
    std::string path_;
    std::FILE* file_ = nullptr;
};

}  // namespace tb
