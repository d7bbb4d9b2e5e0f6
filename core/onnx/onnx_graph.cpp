#include "onnx/onnx_graph.hpp"

#include "onnx/onnx.pb.h"

namespace tb {

struct OnnxGraph::Impl {
    onnx::GraphProto graph;
};

namespace {

void setShape(onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) {
        auto* dim = t->mutable_shape()->add_dim();
        if (d < 0) dim->set_dim_param("batch");
        else dim->set_dim_value(d);
    }
}

}  // namespace

OnnxGraph::OnnxGraph(std::string name) : impl_(std::make_unique<Impl>()) { impl_->graph.set_name(std::move(name)); }
OnnxGraph::~OnnxGraph() = default;

std::string OnnxGraph::floats(const std::string& name, const std::vector<int64_t>& dims, const float* values) {
    onnx::TensorProto* t = impl_->graph.add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    size_t n = 1;
    for (int64_t d : dims) {
        t->add_dims(d);
        n *= size_t(d);
    }
    // raw_data is little-endian IEEE floats, as this machine stores them.
    t->set_raw_data(reinterpret_cast<const char*>(values), n * sizeof(float));
    return name;
}

std::string OnnxGraph::ints(const std::string& name, const std::vector<int64_t>& values) {
    onnx::TensorProto* t = impl_->graph.add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(int64_t(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
    return name;
}

std::string OnnxGraph::node(const std::string& op, const std::vector<std::string>& inputs, const std::string& output,
                            const std::vector<OnnxAttribute>& attributes) {
    onnx::NodeProto* n = impl_->graph.add_node();
    n->set_op_type(op);
    n->set_name(output);
    for (const std::string& i : inputs) n->add_input(i);
    n->add_output(output);
    for (const OnnxAttribute& a : attributes) {
        onnx::AttributeProto* p = n->add_attribute();
        p->set_name(a.name);
        if (const auto* i = std::get_if<int64_t>(&a.value)) {
            p->set_type(onnx::AttributeProto::INT);
            p->set_i(*i);
        } else if (const auto* f = std::get_if<float>(&a.value)) {
            p->set_type(onnx::AttributeProto::FLOAT);
            p->set_f(*f);
        } else if (const auto* v = std::get_if<std::vector<int64_t>>(&a.value)) {
            p->set_type(onnx::AttributeProto::INTS);
            for (int64_t x : *v) p->add_ints(x);
        } else {
            p->set_type(onnx::AttributeProto::STRING);
            p->set_s(std::get<std::string>(a.value));
        }
    }
    return output;
}

void OnnxGraph::input(const std::string& name, const std::vector<int64_t>& dims) {
    setShape(impl_->graph.add_input(), name, dims);
}
void OnnxGraph::output(const std::string& name, const std::vector<int64_t>& dims) {
    setShape(impl_->graph.add_output(), name, dims);
}

size_t OnnxGraph::nodeCount() const { return size_t(impl_->graph.node_size()); }

std::string OnnxGraph::serialize(int64_t opset, const std::string& producerVersion,
                                 const std::vector<std::pair<std::string, std::string>>& metadata) const {
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.set_producer_name("towerbench");
    m.set_producer_version(producerVersion);
    auto* op = m.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    *m.mutable_graph() = impl_->graph;
    for (const auto& [k, v] : metadata) {
        auto* e = m.add_metadata_props();
        e->set_key(k);
        e->set_value(v);
    }
    return m.SerializeAsString();
}

}  // namespace tb
