// OnnxGraph: builds one ONNX inference graph (nodes in topological order, float initializers,
// one input and one output of float tensors) and writes it as a ModelProto, ONNX's file format
// (onnx/onnx.proto: the subset of ONNX's own schema the graphs use). The protobuf types stay in
// the .cpp, so its users include no generated header.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tb {

struct OnnxAttribute {
    std::string name;
    std::variant<int64_t, float, std::vector<int64_t>, std::string> value;
};

class OnnxGraph {
public:
    explicit OnnxGraph(std::string name);
    ~OnnxGraph();
    OnnxGraph(const OnnxGraph&) = delete;
    OnnxGraph& operator=(const OnnxGraph&) = delete;

    // A float initializer of `dims` (values row-major, as many as the dims' product); returns its name.
    std::string floats(const std::string& name, const std::vector<int64_t>& dims, const float* values);
    std::string scalar(const std::string& name, float value) { return floats(name, {}, &value); }
    // An int64 initializer of one dimension (Slice's starts, Transpose-free shape inputs, ...).
    std::string ints(const std::string& name, const std::vector<int64_t>& values);
    // A node `op` reading `inputs` and writing one output named `output`; returns `output`.
    std::string node(const std::string& op, const std::vector<std::string>& inputs, const std::string& output,
                     const std::vector<OnnxAttribute>& attributes = {});
    // The graph's float input and output; a dimension of -1 is the symbolic "batch".
    void input(const std::string& name, const std::vector<int64_t>& dims);
    void output(const std::string& name, const std::vector<int64_t>& dims);
    // The ModelProto's bytes: IR version 8, the default domain at `opset`, metadata properties.
    std::string serialize(int64_t opset, const std::string& producerVersion,
                          const std::vector<std::pair<std::string, std::string>>& metadata) const;
    size_t nodeCount() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tb
