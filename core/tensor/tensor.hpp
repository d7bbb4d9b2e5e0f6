// Shape, Device and Tensor: float32 n-d arrays that live on one device.
// A Tensor either owns its memory (allocated by a Backend) or is a view into memory owned
// elsewhere, e.g. one layer's weights inside a model's flat parameter buffer.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace tb {

enum class DeviceType { Cpu, Cuda };

struct Device {
    DeviceType type = DeviceType::Cpu;
    int index = 0;
    std::string str() const;            // "cpu:0", "gpu:1"
    static Device parse(const std::string& text);  // throws tb::Error on anything else
    // Written out: this header is also compiled as C++17 (the CUDA module's sources).
    bool operator==(const Device& o) const { return type == o.type && index == o.index; }
    bool operator!=(const Device& o) const { return !(*this == o); }
};

inline bool anyGpu(const std::vector<Device>& devices) {
    for (const Device& d : devices)
        if (d.type == DeviceType::Cuda) return true;
    return false;
}

class Shape {
public:
    Shape() = default;
    Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
    explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

    int rank() const { return int(dims_.size()); }
    int64_t operator[](int i) const { return dims_[size_t(i)]; }
    int64_t numel() const;
    const std::vector<int64_t>& dims() const { return dims_; }
    std::string str() const;            // "(128, 1, 28, 28)"
    bool operator==(const Shape& o) const { return dims_ == o.dims_; }

private:
    std::vector<int64_t> dims_;
};

class Tensor {
public:
    Tensor() = default;
    // A view: `data` stays owned by someone else and must outlive the tensor.
    Tensor(float* data, Shape shape, Device device) : data_(data), shape_(std::move(shape)), device_(device) {}
    // An owner: `release` frees `data` when the last copy of the tensor goes.
    Tensor(float* data, Shape shape, Device device, std::function<void(float*)> release);

    float* data() const { return data_; }
    const Shape& shape() const { return shape_; }
    Device device() const { return device_; }
    int64_t numel() const { return shape_.numel(); }
    size_t bytes() const { return size_t(numel()) * sizeof(float); }
    bool empty() const { return data_ == nullptr; }
    // Same memory, another shape of the same element count (Flatten).
    Tensor reshaped(Shape shape) const;

private:
    std::shared_ptr<float> owner_;
    float* data_ = nullptr;
    Shape shape_;
    Device device_;
};

}  // namespace tb
