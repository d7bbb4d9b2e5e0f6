#include "optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "util/error.hpp"

namespace tb {

float LrSchedule::at(int64_t step) const {
    double lr = initial;
    if (kind == Kind::Exponential) {
        double e = double(step) / double(decaySteps);
        if (staircase) e = std::floor(e);
        lr *= std::pow(double(decayRate), e);
    } else if (kind == Kind::Cosine) {
        const double done = double(std::min(step, decaySteps)) / double(decaySteps);
        lr *= 0.5 * (1.0 + std::cos(std::numbers::pi * done));
    }
    if (step < warmupSteps) lr *= double(step + 1) / double(warmupSteps);
    return float(lr);
}

UpdateRule parseUpdateRule(const std::string& name, const std::string& where) {
    if (name == "sgd") return UpdateRule::Sgd;
    if (name == "momentum") return UpdateRule::Momentum;
    if (name == "nesterov") return UpdateRule::Nesterov;
    if (name == "adam") return UpdateRule::Adam;
    throw Error(where + ": unknown optimizer '" + name + "' (expected sgd, momentum, nesterov or adam)");
}

std::string toString(UpdateRule rule) {
    switch (rule) {
    case UpdateRule::Sgd: return "sgd";
    case UpdateRule::Momentum: return "momentum";
    case UpdateRule::Nesterov: return "nesterov";
    case UpdateRule::Adam: return "adam";
    }
    return "?";
}

Optimizer::Optimizer(Backend& backend, UpdateRule rule, UpdateParams hyper, LrSchedule schedule, size_t count,
                     Stream init)
    : backend_(backend), rule_(rule), hyper_(hyper), schedule_(schedule), count_(count) {
    if (rule != UpdateRule::Sgd) {
        m_ = backend.empty(Shape{int64_t(count)});
        backend.fill(init, m_.data(), 0.f, count);
    }
    if (rule == UpdateRule::Adam) {
        v_ = backend.empty(Shape{int64_t(count)});
        backend.fill(init, v_.data(), 0.f, count);
    }
}

std::vector<std::string> Optimizer::slotNames(UpdateRule rule) {
    if (rule == UpdateRule::Sgd) return {};
    if (rule == UpdateRule::Adam) return {"m", "v"};
    return {"m"};
}

std::vector<std::pair<std::string, Tensor*>> Optimizer::slotBuffers() {
    std::vector<std::pair<std::string, Tensor*>> out;
    if (!m_.empty()) out.emplace_back("m", &m_);
    if (!v_.empty()) out.emplace_back("v", &v_);
    return out;
}

UpdateParams Optimizer::paramsAt(int64_t step) const {
    UpdateParams h = hyper_;
    h.lr = schedule_.at(step);
    h.step = step + 1;
    return h;
}

float Optimizer::applyRange(Stream s, float* params, const float* grads, size_t offset, size_t count, int64_t step,
                            uint16_t* rounded) {
    if (offset + count > count_) throw Error("optimizer range past the end of the parameters");
    const UpdateParams h = paramsAt(step);
    backend_.applyUpdate(s, rule_, h, params + offset, grads + offset, m_.empty() ? nullptr : m_.data() + offset,
                         v_.empty() ? nullptr : v_.data() + offset, rounded ? rounded + offset : nullptr, count);
    return h.lr;
}

WeightEma::WeightEma(Backend& backend, float decay, ParamSlice kept, ParamSlice trained, const float* params, Stream init)
    : backend_(backend),
      decay_(decay),
      kept_(kept),
      trained_(trained),
      shadow_(backend.empty(Shape{int64_t(kept.count)})),
      current_(trained.count == kept.count) {
    if (trained.first < kept.first || trained.first + trained.count > kept.first + kept.count)
        throw Error("internal error: a moving average that keeps floats " + std::to_string(kept.first) + ".." +
                    std::to_string(kept.first + kept.count) + " trains " + std::to_string(trained.first) + ".." +
                    std::to_string(trained.first + trained.count));
    if (trained.count < kept.count) backend.fill(init, shadow_.data(), 0.f, kept.count);
    backend.copy(init, shadow_.data() + (trained.first - kept.first), params, trained.count * sizeof(float));
}

void WeightEma::update(Stream s, const float* params, int64_t step) {
    const float d = std::min(decay_, float(1 + step) / float(10 + step));
    backend_.emaUpdate(s, shadow_.data() + (trained_.first - kept_.first), params, d, trained_.count);
    current_ = trained_.count == kept_.count;
}

const float* WeightEma::average() const {
    if (!current_)
        throw Error("internal error: the moving average read before the other stages' slices were gathered since "
                    "the last step");
    return shadow_.data();
}

}  // namespace tb
