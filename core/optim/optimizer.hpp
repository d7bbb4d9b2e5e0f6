// Optimisers over a model's flat parameter buffer (SGD, momentum, Nesterov, Adam), learning-rate
// schedules (constant; exponential decay, optionally staircase, as the CIFAR-10 tutorial) and the
// exponential moving average of the weights used for evaluation (tf.train.ExponentialMovingAverage).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"

namespace tb {

struct LrSchedule {
    enum class Kind { Constant, Exponential, Cosine } kind = Kind::Constant;
    float initial = 0.01f;
    int64_t decaySteps = 1000;
    float decayRate = 0.1f;
    bool staircase = true;
    int64_t warmupSteps = 0;
    // At 0-based step: exponential, initial * decayRate ^ (step / decaySteps), the exponent
    // floored when staircase; cosine (Loshchilov and Hutter 2017, without restarts), initial x
    // (1 + cos(pi min(step, decaySteps) / decaySteps)) / 2, 0 from decaySteps on. Warm-up (Goyal
    // et al. 2017, gradual): the first warmupSteps steps take (step + 1) / warmupSteps of that.
    float at(int64_t step) const;
};

UpdateRule parseUpdateRule(const std::string& name, const std::string& where);
std::string toString(UpdateRule rule);

// Owns the optimiser slots (m, v) for `count` parameters on one backend; `init` is the stream
// that zeroes them.
class Optimizer {
public:
    Optimizer(Backend& backend, UpdateRule rule, UpdateParams hyper, LrSchedule schedule, size_t count, Stream init);
    Optimizer(const Optimizer&) = delete;
    Optimizer& operator=(const Optimizer&) = delete;

    // The update's hyper-parameters at 0-based global step `step`: the schedule's learning rate,
    // Adam's 1-based step count (what a recorded update is replayed with: Backend::launchGraph).
    UpdateParams paramsAt(int64_t step) const;
    // One update of params from grads at 0-based global step `step`; returns the lr used.
    float apply(Stream s, float* params, const float* grads, int64_t step) {
        return applyRange(s, params, grads, 0, count_, step);
    }
    // The same on elements [offset, offset + count) of params, grads and the slots: threads
    // or parameter-server shards update disjoint ranges of one buffer. rounded (the whole
    // buffer's count bf16 values, or nullptr): the updated range rounded to bf16 there too
    // (Backend::applyUpdate).
    float applyRange(Stream s, float* params, const float* grads, size_t offset, size_t count, int64_t step,
                     uint16_t* rounded = nullptr);
    UpdateRule rule() const { return rule_; }
    // The slots a checkpoint saves: ("m", momentum or Adam's first moment), ("v", Adam's second
    // moment), each (count) floats on backend(); none for plain SGD.
    std::vector<std::pair<std::string, Tensor*>> slotBuffers();
    // The names slotBuffers gives for a rule, in its order ("m", then Adam's "v").
    static std::vector<std::string> slotNames(UpdateRule rule);
    Backend& backend() { return backend_; }
    size_t slotBytes() const { return (m_.empty() ? 0 : m_.bytes()) + (v_.empty() ? 0 : v_.bytes()); }

private:
    Backend& backend_;
    UpdateRule rule_;
    UpdateParams hyper_;
    LrSchedule schedule_;
    size_t count_;
    Tensor m_;   // (count) momentum accumulator or Adam's first moment; empty for SGD
    Tensor v_;   // (count) Adam's second moment
};

// A run of consecutive floats of a model's variables (flat, in the model's order).
struct ParamSlice {
    size_t first = 0, count = 0;
};

// shadow = d * shadow + (1 - d) * params after every step, starting equal to params, with
// d = min(decay, (1 + t) / (10 + t)) at update t as tf.train.ExponentialMovingAverage with
// num_updates: early on the average follows the weights instead of remembering the initialisation.
class WeightEma {
public:
    // The average of `count` variables, every one trained here.
    WeightEma(Backend& backend, float decay, const float* params, size_t count, Stream init)
        : WeightEma(backend, decay, {0, count}, {0, count}, params, init) {}
    // The average of the model's floats `kept`, of which this process trains `trained` (within
    // kept), whose values `params` holds: a model whose stages are in processes of their own keeps
    // the whole model's average on the chief, which trains stage 0's slice, and a stage's alone
    // in the stage's process. update() averages the trained floats in; the rest start at zero and
    // are what was last gathered into it (toWrite: StagePipeline::gatherToChief).
    WeightEma(Backend& backend, float decay, ParamSlice kept, ParamSlice trained, const float* params, Stream init);
    WeightEma(const WeightEma&) = delete;
    WeightEma& operator=(const WeightEma&) = delete;
    void update(Stream s, const float* params, int64_t step);  // params: the trained floats
    // The kept floats (kept.count, on the backend) to read: evaluation, checkpoints. Where floats
    // kept here are trained elsewhere, only once they were written (toWrite) after the last
    // update: read before, an internal error (the caller gathers first) rather than an average
    // whose other stages are zeros or a step behind.
    const float* average() const;
    // The kept floats to write whole: the other stages' slices gathered (StagePipeline::
    // gatherToChief), or a checkpoint's restored; current again until the next update.
    float* toWrite() {
        current_ = true;
        return shadow_.data();
    }
    ParamSlice kept() const { return kept_; }
    float decay() const { return decay_; }

private:
    Backend& backend_;
    float decay_;
    ParamSlice kept_, trained_;
    Tensor shadow_;  // (kept.count)
    bool current_;   // every kept float as of the last update (always, where all are trained here)
};

}  // namespace tb
