#include "nn/model_spec.hpp"

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <climits>
#include <map>
#include <vector>
#include <sstream>
#include <type_traits>

#include "util/error.hpp"
#include "util/json_file.hpp"
#include "util/nearest_name.hpp"

#ifndef TB_MODELS_DIR
#define TB_MODELS_DIR ""
#endif
#ifndef TB_INSTALLED_MODELS_DIR
#define TB_INSTALLED_MODELS_DIR ""
#endif

namespace tb {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Reads `key` of `obj` as T, or `fallback` when absent; a wrong type names the field.
template <class T>
T field(const json& obj, const char* key, T fallback, const std::string& where) {
    auto it = obj.find(key);
    if (it == obj.end()) return fallback;
    // nlohmann converts 2.5 -> 2 and true -> 1 on get<int>(); a model file must say what it means.
    bool ok = true;
    auto isInt = [](const json& v) {
        return v.is_number_integer() && v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX &&
               !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT32_MAX));
    };
    if constexpr (std::is_same_v<T, int>) ok = isInt(*it);
    else if constexpr (std::is_same_v<T, float>) ok = it->is_number();
    else if constexpr (std::is_same_v<T, std::string>) ok = it->is_string();
    else if constexpr (std::is_same_v<T, std::vector<int>>) {
        ok = it->is_array();
        for (const auto& e : *it) ok = ok && isInt(e);
    }
    if (!ok) throw Error(where + ": field '" + key + "' has the wrong type (" + it->type_name() + ", expected " +
                         (std::is_same_v<T, int> ? "an integer" : std::is_same_v<T, float> ? "a number"
                          : std::is_same_v<T, std::string> ? "a string" : "an array of integers") + ")");
    try {
        return it->get<T>();
    } catch (const json::exception&) {
        throw Error(where + ": field '" + key + "' has the wrong type (" + it->type_name() + ")");
    }
}

// A field this object may not have is a typo or a setting of another layer type: refused, with
// the nearest allowed name, rather than silently ignored.
void onlyKnownFields(const json& obj, const std::vector<std::string>& allowed, const std::string& where) {
    for (const auto& [key, value] : obj.items())
        if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
            std::string list;
            for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
            throw Error(where + ": unknown field '" + key + "'" + didYouMean(key, allowed) + "; it may have " + list);
        }
}

int positiveInt(const json& obj, const char* key, int fallback, const std::string& where) {
    int v = field<int>(obj, key, fallback, where);
    if (v < 1 || v > 1 << 20) throw Error(where + ": field '" + key + "' must be a positive integer, got " + std::to_string(v));
    return v;
}

InitSpec parseInit(const json& obj, const char* key, InitSpec fallback, const std::string& where) {
    auto it = obj.find(key);
    if (it == obj.end()) return fallback;
    InitSpec s = fallback;
    if (it->is_number()) {  // "bias": 0.1 is short for a constant initialiser
        s.kind = InitSpec::Kind::Constant;
        s.value = it->get<float>();
        return s;
    }
    if (!it->is_object()) throw Error(where + ": field '" + key + "' must be a number or an initialiser object");
    const std::string w = where + " " + key;
    onlyKnownFields(*it, {"type", "stddev", "value"}, w);
    s.kind = parseInitKind(field<std::string>(*it, "type", "glorot", w), w);
    s.stddev = field<float>(*it, "stddev", s.stddev, w);
    s.value = field<float>(*it, "value", s.value, w);
    if (s.kind == InitSpec::Kind::TruncatedNormal && !(s.stddev > 0))
        throw Error(w + ": stddev must be positive");
    return s;
}

const std::vector<std::pair<LayerType, std::string>>& layerTypeNames() {
    static const std::vector<std::pair<LayerType, std::string>> names = {
        {LayerType::Conv2d, "conv2d"},       {LayerType::MaxPool, "maxpool"},
        {LayerType::AvgPool, "avgpool"},     {LayerType::GlobalAvgPool, "global_avgpool"},
        {LayerType::Relu, "relu"},           {LayerType::Lrn, "lrn"},
        {LayerType::Dense, "dense"},         {LayerType::Flatten, "flatten"},
        {LayerType::Dropout, "dropout"},     {LayerType::BatchNorm, "batch_norm"},
        {LayerType::Add, "add"},             {LayerType::Concat, "concat"}};
    return names;
}

// A layer and the names of the layers it reads (resolved once every layer is known).
struct ParsedLayer {
    LayerSpec spec;
    std::vector<std::string> inputs;  // empty: the layer before it in the file
};

ParsedLayer parseLayer(const json& j, size_t index, const std::string& source) {
    std::string where = source + ": layer " + std::to_string(index);
    if (!j.is_object()) throw Error(where + " is not a JSON object");
    const std::string type = field<std::string>(j, "type", "", where);
    LayerSpec l;
    std::string expected;
    bool known = false;
    for (const auto& [t, name] : layerTypeNames()) {
        if (name == type) l.type = t, known = true;
        expected += (expected.empty() ? "" : ", ") + name;
    }
    if (!known) throw Error(where + ": unknown layer type '" + type + "' (expected " + expected + ")");
    l.name = field<std::string>(j, "name", type + std::to_string(index), where);
    where = source + ": layer '" + l.name + "'";
    static const std::map<LayerType, std::vector<std::string>> kFields = {
        {LayerType::Conv2d,
         {"type", "name", "inputs", "filters", "kernel", "stride", "padding", "init", "bias", "weight_decay"}},
        {LayerType::MaxPool, {"type", "name", "inputs", "size", "stride", "padding"}},
        {LayerType::AvgPool, {"type", "name", "inputs", "size", "stride", "padding"}},
        {LayerType::GlobalAvgPool, {"type", "name", "inputs"}},
        {LayerType::Dense, {"type", "name", "inputs", "units", "init", "bias", "weight_decay"}},
        {LayerType::Lrn, {"type", "name", "inputs", "depth_radius", "bias", "alpha", "beta"}},
        {LayerType::Dropout, {"type", "name", "inputs", "keep"}},
        {LayerType::Relu, {"type", "name", "inputs"}},
        {LayerType::Flatten, {"type", "name", "inputs"}},
        {LayerType::BatchNorm, {"type", "name", "inputs", "momentum", "epsilon", "weight_decay"}},
        {LayerType::Add, {"type", "name", "inputs"}},
        {LayerType::Concat, {"type", "name", "inputs"}},
    };
    onlyKnownFields(j, kFields.at(l.type), where);
    ParsedLayer parsed;
    if (auto in = j.find("inputs"); in != j.end()) {
        if (!in->is_array() || in->empty())
            throw Error(where + ": 'inputs' must be a non-empty array of layer names");
        for (const json& name : *in) {
            if (!name.is_string() || name.get<std::string>().empty())
                throw Error(where + ": 'inputs' must be a non-empty array of layer names");
            parsed.inputs.push_back(name.get<std::string>());
        }
    }
    const bool joins = l.type == LayerType::Add || l.type == LayerType::Concat;
    if (joins && parsed.inputs.size() < 2)
        throw Error(where + ": " + type + " joins two or more layers; name them in 'inputs'");
    if (!joins && parsed.inputs.size() > 1)
        throw Error(where + ": a " + type + " layer reads one input, not " + std::to_string(parsed.inputs.size()) +
                    " (add or concat join several)");
    const std::string padding = field<std::string>(j, "padding", "same", where);
    if (padding != "same" && padding != "valid")
        throw Error(where + ": padding must be \"same\" or \"valid\", got \"" + padding + "\"");
    l.samePadding = padding == "same";
    switch (l.type) {
    case LayerType::Conv2d:
        l.filters = positiveInt(j, "filters", 0, where);
        l.kernel = positiveInt(j, "kernel", 0, where);
        l.stride = positiveInt(j, "stride", 1, where);
        break;
    case LayerType::MaxPool:
    case LayerType::AvgPool:
        l.kernel = positiveInt(j, "size", 2, where);
        l.stride = positiveInt(j, "stride", l.kernel, where);
        break;
    case LayerType::Dense:
        l.units = positiveInt(j, "units", 0, where);
        break;
    case LayerType::Lrn:
        l.depthRadius = field<int>(j, "depth_radius", 5, where);
        l.lrnBias = field<float>(j, "bias", 1.f, where);
        l.alpha = field<float>(j, "alpha", 1.f, where);
        l.beta = field<float>(j, "beta", 0.5f, where);
        if (l.depthRadius < 0 || l.depthRadius > 64) throw Error(where + ": depth_radius must be in 0..64");
        // x / (bias + alpha * sum x^2)^beta: a base that can reach zero or below gives inf or NaN.
        if (!(std::isfinite(l.lrnBias) && l.lrnBias > 0)) throw Error(where + ": bias must be a positive number");
        if (!(std::isfinite(l.alpha) && l.alpha >= 0)) throw Error(where + ": alpha must not be negative");
        if (!(std::isfinite(l.beta) && l.beta >= 0)) throw Error(where + ": beta must not be negative");
        break;
    case LayerType::Dropout:
        l.keep = field<float>(j, "keep", 0.5f, where);
        if (!(l.keep > 0.f && l.keep <= 1.f)) throw Error(where + ": keep must be in (0, 1]");
        break;
    case LayerType::Relu:
    case LayerType::Flatten:
    case LayerType::GlobalAvgPool:
    case LayerType::BatchNorm:
    case LayerType::Add:
    case LayerType::Concat:
        break;
    }
    if (l.type == LayerType::Conv2d || l.type == LayerType::Dense) {
        l.init = parseInit(j, "init", l.init, where);
        if (auto b = j.find("bias"); b != j.end() && b->is_boolean()) {
            if (l.type == LayerType::Dense && !b->get<bool>())
                throw Error(where + ": a dense layer keeps its bias (\"bias\": false is for conv2d)");
            l.bias = b->get<bool>();
        } else {
            l.biasInit = parseInit(j, "bias", l.biasInit, where);
        }
    }
    if (l.type == LayerType::Conv2d || l.type == LayerType::Dense || l.type == LayerType::BatchNorm) {
        l.weightDecay = field<float>(j, "weight_decay", 0.f, where);
        if (!(l.weightDecay >= 0 && std::isfinite(l.weightDecay)))
            throw Error(where + ": weight_decay must not be negative (a finite number)");
    }
    if (l.type == LayerType::BatchNorm) {
        l.momentum = field<float>(j, "momentum", l.momentum, where);
        l.epsilon = field<float>(j, "epsilon", l.epsilon, where);
        if (!(l.momentum >= 0.f && l.momentum < 1.f))
            throw Error(where + ": momentum must be in [0, 1) (TensorFlow's: moving = momentum moving + (1 - momentum) "
                                "batch; PyTorch's momentum 0.1 is 0.9)");
        if (!(l.epsilon > 0.f && l.epsilon <= 1.f)) throw Error(where + ": epsilon must be in (0, 1]");
    }
    parsed.spec = std::move(l);
    return parsed;
}

// Resolves each layer's inputs to indices and puts the layers in a topological order (the file's
// order where it is one: Kahn's algorithm taking the earliest ready layer first). Refused, one
// sentence each: a duplicate name, an input no layer has, a cycle, a layer no other layer reads
// (but the last, which gives the logits).
std::vector<LayerSpec> orderGraph(std::vector<ParsedLayer> parsed, const std::string& source) {
    const size_t n = parsed.size();
    std::map<std::string, int> index;
    for (size_t i = 0; i < n; ++i) {
        const std::string& name = parsed[i].spec.name;
        if (name == "input")
            throw Error(source + ": layer " + std::to_string(i) + " may not be named 'input' (the name of the model's input)");
        if (!index.emplace(name, int(i)).second) throw Error(source + ": two layers are named '" + name + "'");
    }
    std::vector<std::vector<int>> readers(n);
    std::vector<int> waiting(n, 0), readBy(n, 0);
    for (size_t i = 0; i < n; ++i) {
        LayerSpec& l = parsed[i].spec;
        if (parsed[i].inputs.empty()) parsed[i].inputs.push_back(i == 0 ? "input" : parsed[i - 1].spec.name);
        for (const std::string& in : parsed[i].inputs) {
            if (in == "input") {
                l.inputs.push_back(-1);
                continue;
            }
            auto it = index.find(in);
            if (it == index.end()) {
                std::vector<std::string> names{"input"};
                for (const auto& [k, v] : index) names.push_back(k);
                throw Error(source + ": layer '" + l.name + "' reads '" + in + "', which no layer is" +
                            didYouMean(in, names));
            }
            l.inputs.push_back(it->second);
            readers[size_t(it->second)].push_back(int(i));
            ++waiting[i];
            ++readBy[size_t(it->second)];
        }
    }
    // Kahn's algorithm, the earliest ready layer first.
    std::vector<int> order, newIndex(n, -1);
    std::vector<bool> done(n, false);
    while (order.size() < n) {
        int next = -1;
        for (size_t i = 0; i < n && next < 0; ++i)
            if (!done[i] && waiting[i] == 0) next = int(i);
        if (next < 0) {
            // Every layer left waits for another left: follow inputs among them until one repeats.
            int at = 0;
            while (done[size_t(at)]) ++at;
            std::vector<int> path;
            std::vector<int> seen(n, -1);
            while (seen[size_t(at)] < 0) {
                seen[size_t(at)] = int(path.size());
                path.push_back(at);
                for (int in : parsed[size_t(at)].spec.inputs)
                    if (in >= 0 && !done[size_t(in)]) {
                        at = in;
                        break;
                    }
            }
            std::string cycle;
            for (size_t k = size_t(seen[size_t(at)]); k < path.size(); ++k)
                cycle = "'" + parsed[size_t(path[k])].spec.name + "'" + (cycle.empty() ? "" : " -> " + cycle);
            throw Error(source + ": the layers' inputs form a cycle: '" + parsed[size_t(at)].spec.name + "' -> " +
                        cycle);
        }
        done[size_t(next)] = true;
        newIndex[size_t(next)] = int(order.size());
        order.push_back(next);
        for (int r : readers[size_t(next)]) --waiting[size_t(r)];
    }
    // The logits come from the last layer; any other layer that nothing reads is a mistake.
    for (size_t k = 0; k + 1 < n; ++k)
        if (readBy[size_t(order[k])] == 0)
            throw Error(source + ": layer '" + parsed[size_t(order[k])].spec.name +
                        "' is read by no other layer (only the last layer, '" + parsed[size_t(order.back())].spec.name +
                        "', which gives the logits, may be unread)");
    std::vector<LayerSpec> out;
    for (int i : order) {
        LayerSpec l = std::move(parsed[size_t(i)].spec);
        for (int& in : l.inputs)
            if (in >= 0) in = newIndex[size_t(in)];
        out.push_back(std::move(l));
    }
    return out;
}

}  // namespace

ModelSpec parseModelSpec(const std::string& text, const std::string& source) {
    const json j = parseJsonText(text, source);
    if (!j.is_object()) throw Error(source + ": a model file must hold one JSON object");
    onlyKnownFields(j, {"name", "description", "input", "input_normalisation", "layers"}, source);
    ModelSpec m;
    m.source = source;
    m.json = text;
    m.name = field<std::string>(j, "name", fs::path(source).stem().string(), source);
    m.description = field<std::string>(j, "description", "", source);
    auto in = field<std::vector<int>>(j, "input", {}, source);
    if (in.size() != 3 || in[0] < 1 || in[1] < 1 || in[2] < 1 || in[0] > 4096 || in[1] > 4096 || in[2] > 4096)
        throw Error(source + ": 'input' must be [channels, height, width] of positive sizes");
    m.inC = in[0], m.inH = in[1], m.inW = in[2];
    if (auto norm = j.find("input_normalisation"); norm != j.end()) {
        const std::string where = source + ": input_normalisation";
        if (!norm->is_object()) throw Error(where + " must be an object {\"multiply\": m, \"add\": a}");
        onlyKnownFields(*norm, {"multiply", "add"}, where);
        m.pixels.multiply = field<float>(*norm, "multiply", m.pixels.multiply, where);
        m.pixels.add = field<float>(*norm, "add", m.pixels.add, where);
        if (!std::isfinite(m.pixels.multiply) || m.pixels.multiply == 0.f || std::abs(m.pixels.multiply) > 1e3f)
            throw Error(where + ": multiply must be a non-zero number of at most 1000 in size");
        if (!std::isfinite(m.pixels.add) || std::abs(m.pixels.add) > 1e3f)
            throw Error(where + ": add must be a number of at most 1000 in size");
    }
    auto layers = j.find("layers");
    if (layers == j.end() || !layers->is_array() || layers->empty())
        throw Error(source + ": 'layers' must be a non-empty array");
    std::vector<ParsedLayer> parsed;
    for (size_t i = 0; i < layers->size(); ++i) parsed.push_back(parseLayer((*layers)[i], i, source));
    m.layers = orderGraph(std::move(parsed), source);
    return m;
}

std::string layerTypeName(LayerType t) {
    for (const auto& [type, name] : layerTypeNames())
        if (type == t) return name;
    return "?";
}

ModelSpec loadModelSpec(const std::string& path) {
    return parseModelSpec(readTextFile(path, size_t(4) << 20, "model"), path);
}

std::vector<std::string> modelSearchPath() {
    std::vector<std::string> dirs;
    if (const char* env = std::getenv("TOWERBENCH_MODELS_DIR")) {
        std::stringstream ss(env);
        for (std::string d; std::getline(ss, d, ':');)
            if (!d.empty()) dirs.push_back(d);
    }
    if (const char* home = std::getenv("HOME")) dirs.push_back(std::string(home) + "/.local/share/towerbench/models");
    if (*TB_INSTALLED_MODELS_DIR) dirs.push_back(TB_INSTALLED_MODELS_DIR);
    if (*TB_MODELS_DIR) dirs.push_back(TB_MODELS_DIR);
    return dirs;
}

std::vector<std::string> modelNames() {
    std::vector<std::string> names;
    for (const auto& dir : modelSearchPath()) {
        std::error_code ec;
        for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
            if (it->path().extension() == ".json") names.push_back(it->path().stem().string());
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
}

ModelSpec findModel(const std::string& nameOrPath) {
    if (nameOrPath.ends_with(".json") || nameOrPath.find('/') != std::string::npos) return loadModelSpec(nameOrPath);
    std::string looked;
    for (const auto& dir : modelSearchPath()) {
        fs::path p = fs::path(dir) / (nameOrPath + ".json");
        std::error_code ec;  // a name too long for a file name is no model either
        if (fs::exists(p, ec)) return loadModelSpec(p.string());
        looked += (looked.empty() ? "" : ", ") + dir;
    }
    const std::string meant = didYouMean(nameOrPath, modelNames());  // "mnsit_cnn": "mnist_cnn"
    throw Error("--model: no model named '" + nameOrPath + "'" + meant + (meant.empty() ? " (" : "; ") + "looked for " +
                nameOrPath + ".json in " + looked + (meant.empty() ? ")" : ""));
}

}  // namespace tb
