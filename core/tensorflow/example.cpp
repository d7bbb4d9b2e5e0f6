#include "tensorflow/example.hpp"

#include "tensorflow/tensorflow.pb.h"

namespace tb {

struct Example::Impl {
    tensorflow::Example e;
    const tensorflow::Feature* find(const std::string& key) const {
        const auto& map = e.features().feature();
        const auto it = map.find(key);
        return it == map.end() ? nullptr : &it->second;
    }
};

Example::Example() : impl_(std::make_unique<Impl>()) {}
Example::~Example() = default;

bool Example::parse(const std::string& bytes) { return impl_->e.ParseFromString(bytes); }

bool Example::has(const std::string& key) const { return impl_->find(key) != nullptr; }

const std::string* Example::oneBytes(const std::string& key) const {
    const tensorflow::Feature* f = impl_->find(key);
    if (!f || !f->has_bytes_list() || f->bytes_list().value_size() != 1) return nullptr;
    return &f->bytes_list().value(0);
}

std::optional<int64_t> Example::oneInt64(const std::string& key) const {
    const tensorflow::Feature* f = impl_->find(key);
    if (!f || !f->has_int64_list() || f->int64_list().value_size() != 1) return std::nullopt;
    return f->int64_list().value(0);
}

void Example::clear() { impl_->e.Clear(); }

void Example::setBytes(const std::string& key, const std::string& value) {
    auto& list = *(*impl_->e.mutable_features()->mutable_feature())[key].mutable_bytes_list();
    list.clear_value();
    list.add_value(value);
}

void Example::setInt64(const std::string& key, int64_t value) {
    auto& list = *(*impl_->e.mutable_features()->mutable_feature())[key].mutable_int64_list();
    list.clear_value();
    list.add_value(value);
}

std::string Example::serialize() const { return impl_->e.SerializeAsString(); }

}  // namespace tb
