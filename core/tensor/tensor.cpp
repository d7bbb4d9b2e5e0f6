#include "tensor/tensor.hpp"

#include <charconv>

#include "util/error.hpp"

namespace tb {

std::string Device::str() const {
    return (type == DeviceType::Cpu ? "cpu:" : "gpu:") + std::to_string(index);
}

Device Device::parse(const std::string& text) {
    auto colon = text.find(':');
    std::string kind = text.substr(0, colon);
    Device d;
    if (kind == "cpu") d.type = DeviceType::Cpu;
    else if (kind == "gpu" || kind == "cuda") d.type = DeviceType::Cuda;
    else throw Error("device '" + text + "': expected cpu:N or gpu:N");
    if (colon != std::string::npos) {
        const char* b = text.data() + colon + 1;
        const char* e = text.data() + text.size();
        auto [p, ec] = std::from_chars(b, e, d.index);
        if (ec != std::errc() || p != e || d.index < 0 || b == e)
            throw Error("device '" + text + "': the index after ':' must be a non-negative integer");
    }
    return d;
}

int64_t Shape::numel() const {
    int64_t n = 1;
    for (int64_t d : dims_) n *= d;
    return n;
}

std::string Shape::str() const {
    std::string s = "(";
    for (size_t i = 0; i < dims_.size(); ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
    return s + ")";
}

Tensor::Tensor(float* data, Shape shape, Device device, std::function<void(float*)> release)
    : owner_(data, std::move(release)), data_(data), shape_(std::move(shape)), device_(device) {}

Tensor Tensor::reshaped(Shape shape) const {
    if (shape.numel() != numel())
        throw Error("cannot reshape " + shape_.str() + " to " + shape.str());
    Tensor t = *this;
    t.shape_ = std::move(shape);
    return t;
}

}  // namespace tb
