#include "engine/checkpoint.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "util/atomic_file.hpp"
#include "io/tfrecord.hpp"
#include "util/error.hpp"
#include "util/json_file.hpp"
#include "util/system_text.hpp"

namespace tb {

namespace {

// (A pipeline stage of parameter-free layers has empty optimiser slots: nothing to copy, and
// memcpy takes no null pointer.)
MappedVector<float> toHost(Backend& backend, Stream stream, const float* data, size_t count) {
    MappedVector<float> out(count);
    if (count == 0) return out;
    backend.copyToHost(stream, out.data(), data, count * sizeof(float));
    backend.synchronize(stream);
    return out;
}

void fromHost(Backend& backend, Stream stream, float* data, const float* host, size_t count) {
    if (count == 0) return;
    backend.copyFromHost(stream, data, host, count * sizeof(float));
    backend.synchronize(stream);
}

std::string shapeText(const std::vector<int64_t>& dims) {
    std::string s = "(";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + ")";
}

// A tensor's bytes' CRC-32C as the metadata keeps it ("crc32c:89abcdef").
std::string checksumText(const void* data, size_t bytes) {
    char text[24];
    std::snprintf(text, sizeof text, "crc32c:%08x", crc32c(data, bytes));
    return text;
}

// An accuracy as metadata text that reads back to the same double; "" for none (-1).
std::string exact(double v) {
    if (v < 0) return {};
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}


}  // namespace

const std::vector<std::string>& resumeMayChange() {
    // model: compared by its spec instead (a resumed run reads its folder's copy of the model);
    // init_from: the checkpoint's weights replace the initial ones anyway.
    static const std::vector<std::string> keys = {"steps", "epochs", "eval_every", "checkpoint_every",
                                                  "checkpoint_minutes", "keep_checkpoints", "metrics",
                                                  "quiet", "prefetch", "model", "init_from"};
    return keys;
}

TrainingSnapshot takeSnapshot(TrainingEngine& towers, size_t count, WeightEma* ema, Stream emaStream) {
    TrainingSnapshot snap;
    const VariablesView v = towers.variables();
    snap.variables = toHost(*v.backend, v.stream, v.params, count);
    if (ema) {
        if (ema->kept().count != count)
            throw Error("internal error: a checkpoint taken where only part of the moving average is kept");
        snap.ema = toHost(*v.backend, emaStream, ema->average(), count);
    }
    snap.statistics = towers.statistics();
    snap.state = stateOnHost(towers);
    return snap;
}

std::vector<TrainingSnapshot::Buffer> stateOnHost(TrainingEngine& towers, bool perProcessOnly) {
    std::vector<TrainingSnapshot::Buffer> out;
    for (const StateBuffer& b : towers.state())
        if (b.perProcess || !perProcessOnly) out.push_back({b.name, toHost(*b.backend, b.stream, b.data, b.count)});
    return out;
}

void writeCheckpoint(const std::string& path, const CheckpointMeta& meta, const TrainingSnapshot& snap,
                     const VariableLayout& layout) {
    const auto& infos = layout.infos;
    const auto& offsets = layout.offsets;
    std::vector<safetensors::TensorRef> tensors;
    auto perVariable = [&](const std::string& prefix, const MappedVector<float>& flat) {
        for (size_t i = 0; i < infos.size(); ++i)
            tensors.push_back({prefix + infos[i].name, safetensors::Dtype::F32, infos[i].shape.dims(),
                               flat.data() + offsets[i]});
    };
    perVariable("params/", snap.variables);
    if (!snap.ema.empty()) perVariable("ema/", snap.ema);
    if (!snap.statistics.empty())
        for (size_t i = 0; i < layout.statInfos.size(); ++i)
            tensors.push_back({"statistics/" + layout.statInfos[i].name, safetensors::Dtype::F32,
                               layout.statInfos[i].shape.dims(), snap.statistics.data() + layout.statOffsets[i]});
    for (const auto& b : snap.state)
        tensors.push_back({"state/" + b.name, safetensors::Dtype::F32, {int64_t(b.values.size())}, b.values.data()});
    std::map<std::string, std::string> metadata = {
        {"format", kCheckpointFormat},
        {"version", std::to_string(meta.version)},
        {"step", std::to_string(meta.step)},
        {"samples", std::to_string(meta.samples)},
        {"model", meta.model},
        {"model_spec", meta.modelSpec},
        {"config", meta.config.dump()},
        {"plan", meta.plan.dump()},
        {"validation_accuracy", exact(meta.validationAccuracy)},
        {"best_validation_accuracy", exact(meta.bestValidationAccuracy)},
        {"created", meta.created.empty() ? utcText() : meta.created},
        {"class_names", nlohmann::json(meta.classNames).dump()},
        {"processes", std::to_string(meta.processes)},
    };
    if (!meta.channels.empty()) {
        metadata["input_mean"] = nlohmann::json(meta.channels.mean).dump();
        metadata["input_std"] = nlohmann::json(meta.channels.stddev).dump();
    }
    // Each tensor's CRC-32C, so that a bit flipped on the disk (or in a copy) is found at load,
    // named, rather than trained on.
    nlohmann::json sums = nlohmann::json::object();
    for (const auto& t : tensors) sums[t.name] = checksumText(t.data, safetensors::dataBytes({t}));
    metadata["checksums"] = sums.dump();
    const std::string head = safetensors::header(tensors, metadata);
    AtomicFile file(path);
    file.write(head.data(), head.size());
    for (const auto& t : tensors) {
        size_t n = 1;
        for (int64_t d : t.shape) n *= size_t(d);
        file.write(t.data, n * sizeof(float));
    }
    file.commit();
}

Checkpoint Checkpoint::open(const std::string& path, bool verify) {
    Checkpoint c;
    c.file_ = safetensors::File::read(path);
    if (verify) c.verifyChecksums();
    c.readMetadata();
    return c;
}

CheckpointMeta Checkpoint::readMeta(const std::string& path) {
    Checkpoint c;
    c.file_ = safetensors::File::readHeader(path);
    c.readMetadata();
    return std::move(c.meta_);
}

void Checkpoint::readMetadata() {
    const std::string& path = file_.origin();
    const auto& md = file_.metadata();
    CheckpointMeta& m = meta_;
    auto get = [&](const char* key) { return file_.meta(key); };
    if (!md.count("format") || md.at("format") != kCheckpointFormat)
        throw Error(path + ": not a Towerbench checkpoint (its metadata has no format \"" + kCheckpointFormat + "\")");
    auto number = [&](const char* key) -> int64_t {
        const std::string text = get(key);
        try {
            size_t used = 0;
            const long long v = std::stoll(text, &used);
            if (used == text.size() && v >= 0) return v;
        } catch (const std::exception&) {
        }
        throw Error(path + ": metadata " + key + " is '" + text + "', not a count");
    };
    m.version = int(number("version"));
    if (m.version > kCheckpointVersion)
        throw Error(path + ": checkpoint format " + std::to_string(m.version) +
                    " is newer than this Towerbench reads (" + std::to_string(kCheckpointVersion) + "); update Towerbench");
    m.step = number("step");
    m.samples = uint64_t(number("samples"));
    m.processes = md.count("processes") ? int(std::min<int64_t>(number("processes"), 1 << 20)) : 0;
    m.model = get("model");
    m.modelSpec = get("model_spec");
    if (const nlohmann::json spec = parseJsonOrDiscard(m.modelSpec); !spec.is_object())
        throw Error(path + ": metadata model_spec is not a JSON object (a model file's text)");
    m.config = parseJsonOrDiscard(get("config"));
    m.plan = parseJsonOrDiscard(get("plan"));
    if (m.config.is_discarded() || !m.config.is_object())
        throw Error(path + ": metadata config is not a JSON object");
    if (m.plan.is_discarded()) throw Error(path + ": metadata plan is not JSON");
    auto accuracy = [&](const char* key) {
        const std::string v = md.count(key) ? md.at(key) : "";
        if (v.empty()) return -1.0;  // no evaluation yet
        char* end = nullptr;
        const double a = std::strtod(v.c_str(), &end);
        if (end != v.c_str() + v.size() || !(a >= 0 && a <= 1))
            throw Error(path + ": metadata " + key + " is '" + v + "', not an accuracy between 0 and 1");
        return a;
    };
    m.validationAccuracy = accuracy("validation_accuracy");
    m.bestValidationAccuracy = std::max(accuracy("best_validation_accuracy"), m.validationAccuracy);
    m.created = md.count("created") ? md.at("created") : "";
    if (md.count("class_names")) {
        const nlohmann::json names = parseJsonOrDiscard(md.at("class_names"));
        if (!names.is_array() || !std::all_of(names.begin(), names.end(), [](const nlohmann::json& n) { return n.is_string(); }))
            throw Error(path + ": metadata class_names is not a JSON array of names");
        m.classNames = names.get<std::vector<std::string>>();
    }
    if (md.count("input_mean") || md.count("input_std")) {
        auto floats = [&](const char* key) {
            const nlohmann::json v = parseJsonOrDiscard(md.count(key) ? md.at(key) : "");
            if (!v.is_array() || v.empty() || v.size() > 4096 ||
                !std::all_of(v.begin(), v.end(), [](const nlohmann::json& x) { return x.is_number(); }))
                throw Error(path + ": metadata " + key + " is not a JSON array of numbers, one per channel");
            return v.get<std::vector<float>>();
        };
        m.channels.mean = floats("input_mean");
        m.channels.stddev = floats("input_std");
        if (m.channels.mean.size() != m.channels.stddev.size() ||
            !std::all_of(m.channels.stddev.begin(), m.channels.stddev.end(), [](float x) { return x > 0; }))
            throw Error(path + ": metadata input_mean and input_std differ in length or hold a deviation that is not positive");
    }
}

void Checkpoint::verifyChecksums() {
    const auto& md = file_.metadata();
    const auto found = md.find("checksums");
    if (found == md.end()) {
        note_ = path() + " was written before checkpoints carried checksums: its tensors load unverified";
        return;
    }
    const nlohmann::json sums = nlohmann::json::parse(found->second, nullptr, false);
    if (!sums.is_object()) throw Error(path() + ": metadata checksums is not a JSON object of tensor names");
    for (const std::string& name : file_.names()) {
        const auto it = sums.find(name);
        if (it == sums.end() || !it->is_string())
            throw Error(path() + ": tensor " + name + " has no checksum in the metadata (the file was changed after it was written)");
        if (checksumText(file_.data(name), file_.info(name).bytes) != it->get<std::string>())
            throw Error(path() + ": tensor " + name + " does not match its checksum: the file was damaged after it was "
                        "written (a flipped bit, a bad copy); use an earlier checkpoint");
    }
    if (sums.size() != file_.names().size())
        throw Error(path() + ": the metadata's checksums name " + std::to_string(sums.size()) + " tensors, the file holds " +
                    std::to_string(file_.names().size()));
}

std::vector<float> Checkpoint::loadWeights(const Network& layout) const {
    const auto& infos = layout.paramInfos();
    const auto& offsets = layout.paramOffsets();
    std::vector<float> out(size_t(layout.paramCount()));
    size_t variables = 0;
    for (const std::string& name : file_.names()) variables += name.rfind("params/", 0) == 0;
    if (variables != infos.size())
        throw Error(path() + ": holds " + std::to_string(variables) + " variables, the model has " +
                    std::to_string(infos.size()) + ": it was trained with another model (" + meta_.model + ")");
    for (size_t i = 0; i < infos.size(); ++i) {
        const std::string name = "params/" + infos[i].name;
        if (!file_.has(name))
            throw Error(path() + ": has no variable " + infos[i].name + ": it was trained with another model (" +
                        meta_.model + ")");
        const safetensors::TensorInfo& t = file_.info(name);
        if (t.dtype != safetensors::Dtype::F32)
            throw Error(path() + ": variable " + infos[i].name + " is " + safetensors::toString(t.dtype) +
                        ", not F32: another precision cannot be loaded");
        if (t.shape != infos[i].shape.dims())
            throw Error(path() + ": variable " + infos[i].name + " is " + shapeText(t.shape) + " there but " +
                        shapeText(infos[i].shape.dims()) + " in this model: the model changed");
        file_.readFloats(name, out.data() + offsets[i], size_t(infos[i].shape.numel()));
    }
    return out;
}

std::vector<float> Checkpoint::loadStatistics(const Network& layout) const {
    const auto& infos = layout.statisticInfos();
    std::vector<float> out(size_t(layout.statisticCount()));
    for (size_t i = 0; i < infos.size(); ++i) {
        const std::string name = "statistics/" + infos[i].name;
        if (!file_.has(name))
            throw Error(path() + ": has no statistics " + infos[i].name + " (batch norm's moving statistics)");
        const safetensors::TensorInfo& t = file_.info(name);
        if (t.dtype != safetensors::Dtype::F32 || t.shape != infos[i].shape.dims())
            throw Error(path() + ": statistics " + infos[i].name + " is " + safetensors::toString(t.dtype) + " " +
                        shapeText(t.shape) + " there but F32 " + shapeText(infos[i].shape.dims()) + " in this model");
        file_.readFloats(name, out.data() + layout.statisticOffsets()[i], size_t(infos[i].shape.numel()));
    }
    return out;
}

std::string Checkpoint::resumeProblem(const RunConfig& config, const std::string& modelSpec) const {
    const nlohmann::json now = config.toJson();
    const nlohmann::json defaults = RunConfig{}.toJson();
    const auto& free = resumeMayChange();
    for (auto it = now.begin(); it != now.end(); ++it) {
        if (std::find(free.begin(), free.end(), it.key()) != free.end()) continue;
        const auto then = meta_.config.find(it.key());
        // A setting an older Towerbench did not have trained as its default does.
        if (then == meta_.config.end() && defaults.contains(it.key()) && defaults[it.key()] == it.value()) continue;
        if (then == meta_.config.end())
            return "setting " + it.key() + " is new since the checkpoint (an older Towerbench wrote it)";
        if (*then != it.value())
            return "--" + it.key() + " is " + shortJson(it.value()) + " but the run was trained with " + shortJson(*then) +
                   "; a resumed run keeps its settings (start a new run with --init-from " + path() + " instead)";
    }
    const nlohmann::json a = parseJsonOrDiscard(modelSpec);
    const nlohmann::json b = parseJsonOrDiscard(meta_.modelSpec);
    if (a.is_discarded() || b.is_discarded() || a != b)
        return "the model " + meta_.model + " is not the one the checkpoint was trained with";
    return {};
}

void Checkpoint::restore(TrainingEngine& towers, const Network& layout, WeightEma* ema, Stream emaStream, int process) const {
    const std::vector<float> weights = loadWeights(layout);
    const size_t count = weights.size();
    towers.setVariables(weights.data());
    if (layout.statisticCount() > 0) towers.setStatistics(loadStatistics(layout));
    if (ema) {
        std::vector<float> shadow(count);
        const auto& infos = layout.paramInfos();
        const auto& offsets = layout.paramOffsets();
        for (size_t i = 0; i < infos.size(); ++i)
            file_.readFloats("ema/" + infos[i].name, shadow.data() + offsets[i], size_t(infos[i].shape.numel()));
        // (A stage's process of a model in parts keeps its stage's slice of it.)
        const VariablesView v = towers.variables();
        fromHost(*v.backend, emaStream, ema->toWrite(), shadow.data() + ema->kept().first, ema->kept().count);
    }
    // (An elastic resume's process that did not exist then takes the chief's: batch norm's
    // statistics, the one state that differs by process and resumes elastically.)
    // (A checkpoint that records no process count keeps every process's, as before.)
    const bool own = process >= 0 && (meta_.processes <= 0 || process < meta_.processes);
    std::vector<float> host;
    for (const StateBuffer& b : towers.state()) {
        // A run of one process kept no statistics of its own beside the model's, which
        // setStatistics restored above: an elastic resume into several starts each from those.
        if (b.perProcess && !own && meta_.processes <= 1 && !file_.has("state/" + b.name)) continue;
        host.resize(b.count);
        readState(own && b.perProcess ? peerStateName(process, b.name) : b.name, host.data(), b.count);
        fromHost(*b.backend, b.stream, b.data, host.data(), b.count);
    }
}

}  // namespace tb
