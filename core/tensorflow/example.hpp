// Example: one tf.train.Example record (a map of named features, each a list of bytes, int64 or
// float values), read and written without protobuf's headers outside this layer.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace tb {

class Example {
public:
    Example();
    ~Example();
    Example(const Example&) = delete;
    Example& operator=(const Example&) = delete;

    // Replaces the record with `bytes`; false where they are not a tf.train.Example.
    bool parse(const std::string& bytes);
    bool has(const std::string& key) const;
    // The feature's value where it holds exactly one value of that type; null / nullopt otherwise.
    const std::string* oneBytes(const std::string& key) const;
    std::optional<int64_t> oneInt64(const std::string& key) const;

    void clear();
    void setBytes(const std::string& key, const std::string& value);
    void setInt64(const std::string& key, int64_t value);
    std::string serialize() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tb
