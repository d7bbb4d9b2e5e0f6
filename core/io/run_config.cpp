#include "io/run_config.hpp"

#include <algorithm>
#include <sstream>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <map>
#include <nlohmann/json.hpp>

#include "util/error.hpp"
#include "util/json_file.hpp"
#include "util/nearest_name.hpp"

namespace tb {

using nlohmann::json;

namespace {

enum class Kind { Int, Real, Text, Flag };

struct Setting {
    Kind kind;
    std::function<void(RunConfig&, const json&)> assign;
    std::function<json(const RunConfig&)> read;
};

// Binds a setting to its member. Integers must fit the member's type (a seed is never negative):
// nothing wraps around silently.
template <class T>
Setting bind(Kind kind, T RunConfig::*member) {
    return {kind,
            [member](RunConfig& c, const json& v) {
                if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
                    const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max())
                                                             : v.get<int64_t>() >= int64_t(std::numeric_limits<T>::min()) &&
                                                                   v.get<int64_t>() <= int64_t(std::numeric_limits<T>::max());
                    if (!fits) throw std::out_of_range("");
                }
                c.*member = v.get<T>();
            },
            [member](const RunConfig& c) { return json(c.*member); }};
}

const std::map<std::string, Setting>& table() {
    static const std::map<std::string, Setting> t = {
        {"model", bind(Kind::Text, &RunConfig::model)},
        {"data", bind(Kind::Text, &RunConfig::data)},
        {"tfrecord_features", bind(Kind::Text, &RunConfig::tfrecordFeatures)},
        {"skip_bad_images", bind(Kind::Flag, &RunConfig::skipBadImages)},
        {"augment", bind(Kind::Text, &RunConfig::augment)},
        {"normalise", bind(Kind::Text, &RunConfig::normalise)},
        {"batch", bind(Kind::Int, &RunConfig::batch)},
        {"steps", bind(Kind::Int, &RunConfig::steps)},
        {"epochs", bind(Kind::Real, &RunConfig::epochs)},
        {"optimizer", bind(Kind::Text, &RunConfig::optimizer)},
        {"lr", bind(Kind::Real, &RunConfig::lr)},
        {"momentum", bind(Kind::Real, &RunConfig::momentum)},
        {"lr_decay_steps", bind(Kind::Int, &RunConfig::lrDecaySteps)},
        {"lr_decay_rate", bind(Kind::Real, &RunConfig::lrDecayRate)},
        {"lr_decay", bind(Kind::Text, &RunConfig::lrDecay)},
        {"warmup_steps", bind(Kind::Int, &RunConfig::warmupSteps)},
        {"lr_scaling", bind(Kind::Text, &RunConfig::lrScaling)},
        {"lr_reference_batch", bind(Kind::Int, &RunConfig::lrReferenceBatch)},
        {"accumulate", bind(Kind::Int, &RunConfig::accumulate)},
        {"sync_bn", bind(Kind::Flag, &RunConfig::syncBn)},
        {"report_lag", bind(Kind::Int, &RunConfig::reportLag)},
        {"lr_staircase", bind(Kind::Flag, &RunConfig::lrStaircase)},
        {"ema_decay", bind(Kind::Real, &RunConfig::emaDecay)},
        {"seed", bind(Kind::Int, &RunConfig::seed)},
        {"eval_every", bind(Kind::Int, &RunConfig::evalEvery)},
        {"validation", bind(Kind::Int, &RunConfig::validation)},
        {"shuffle_buffer", bind(Kind::Int, &RunConfig::shuffleBuffer)},
        {"stream", bind(Kind::Text, &RunConfig::stream)},
        {"loader_threads", bind(Kind::Int, &RunConfig::loaderThreads)},
        {"prefetch", bind(Kind::Int, &RunConfig::prefetch)},
        {"threads", bind(Kind::Int, &RunConfig::threads)},
        {"metrics", bind(Kind::Text, &RunConfig::metrics)},
        {"quiet", bind(Kind::Flag, &RunConfig::quiet)},
        {"towers", bind(Kind::Text, &RunConfig::towers)},
        {"variables", bind(Kind::Text, &RunConfig::variables)},
        {"reduce", bind(Kind::Text, &RunConfig::reduce)},
        {"update", bind(Kind::Text, &RunConfig::update)},
        {"average_every", bind(Kind::Int, &RunConfig::averageEvery)},
        {"ps_shards", bind(Kind::Int, &RunConfig::psShards)},
        {"ps_tasks", bind(Kind::Int, &RunConfig::psTasks)},
        {"batch_per_tower", bind(Kind::Int, &RunConfig::batchPerTower)},
        {"stages", bind(Kind::Text, &RunConfig::stages)},
        {"pipeline", bind(Kind::Text, &RunConfig::pipeline)},
        {"micro_batches", bind(Kind::Int, &RunConfig::microBatches)},
        {"stage_replicas", bind(Kind::Int, &RunConfig::stageReplicas)},
        {"stage_per_process", bind(Kind::Flag, &RunConfig::stagePerProcess)},
        {"slow", bind(Kind::Text, &RunConfig::slow)},
        {"tf32", bind(Kind::Flag, &RunConfig::tf32)},
        {"deterministic", bind(Kind::Flag, &RunConfig::deterministic)},
        {"precision", bind(Kind::Text, &RunConfig::precision)},
        {"transfers", bind(Kind::Text, &RunConfig::transfers)},
        {"comm_precision", bind(Kind::Text, &RunConfig::commPrecision)},
        {"checkpoint_every", bind(Kind::Int, &RunConfig::checkpointEvery)},
        {"checkpoint_minutes", bind(Kind::Real, &RunConfig::checkpointMinutes)},
        {"keep_checkpoints", bind(Kind::Int, &RunConfig::keepCheckpoints)},
        {"init_from", bind(Kind::Text, &RunConfig::initFrom)},
    };
    return t;
}

const char* kindName(Kind k) {
    switch (k) {
    case Kind::Int: return "an integer";
    case Kind::Real: return "a number";
    case Kind::Text: return "a string";
    case Kind::Flag: return "true or false";
    }
    return "?";
}

bool fits(Kind k, const json& v) {
    switch (k) {
    case Kind::Int: return v.is_number_integer();
    case Kind::Real: return v.is_number();
    case Kind::Text: return v.is_string();
    case Kind::Flag: return v.is_boolean();
    }
    return false;
}

}  // namespace

const std::vector<std::string>& RunConfig::keys() {
    static const std::vector<std::string> k = [] {
        std::vector<std::string> out;
        for (const auto& [name, s] : table()) out.push_back(name);
        return out;
    }();
    return k;
}

std::string RunConfig::keyToFlag(const std::string& key) {
    std::string f = "--" + key;
    std::replace(f.begin(), f.end(), '_', '-');
    return f;
}

std::string RunConfig::flagToKey(const std::string& flag) {
    std::string k = flag.starts_with("--") ? flag.substr(2) : flag;
    for (char& c : k)
        if (c == '-') c = '_';
    return k;
}

void RunConfig::set(const std::string& key, const json& value, const std::string& origin) {
    auto it = table().find(key);
    if (it == table().end()) {
        std::vector<std::string> keys;
        for (const auto& [name, s] : table()) keys.push_back(name);
        throw Error(origin + ": unknown setting '" + key + "'" + didYouMean(key, keys));
    }
    if (!fits(it->second.kind, value))
        throw Error(origin + ": '" + key + "' must be " + kindName(it->second.kind) + ", got " + shortJson(value));
    // 0 is "off", as toJson() writes it; a negative K is a mistake (and so is the flag asking
    // for 0: see setFromText).
    if (key == "average_every" && value.get<int64_t>() < 0)
        throw Error(origin + ": 'average_every' K must be at least 1 (0: off), got " + shortJson(value));
    if (key == "batch_per_tower" && (value.get<int64_t>() < 0 || value.get<int64_t>() > kMaxBatch))
        throw Error(origin + ": 'batch_per_tower' must be between 1 and " + std::to_string(kMaxBatch) +
                    " (0: from batch), got " + shortJson(value));
    try {
        it->second.assign(*this, value);
    } catch (const std::out_of_range&) {
        throw Error(origin + ": '" + key + "' is out of range: " + shortJson(value));
    }
    origins_[key] = origin;
}

std::string RunConfig::explain(const std::string& message) const {
    if (!message.starts_with("--")) return message;
    const size_t colon = message.find(':');
    if (colon == std::string::npos) return message;
    const std::string key = flagToKey(message.substr(0, colon));
    const auto it = origins_.find(key);
    if (it == origins_.end() || it->second.starts_with("--")) return message;  // set by its flag, or the default
    return it->second + ": '" + key + "'" + message.substr(colon);
}

void RunConfig::setFromText(const std::string& key, const std::string& text, const std::string& origin) {
    auto it = table().find(key);
    if (it == table().end()) throw Error(origin + ": unknown flag");
    json v;
    switch (it->second.kind) {
    case Kind::Text: v = text; break;
    case Kind::Flag:
        if (text != "true" && text != "false") throw Error(origin + ": expected true or false, got '" + text + "'");
        v = text == "true";
        break;
    case Kind::Int:
    case Kind::Real: {
        v = parseJsonOrDiscard(text);
        if (v.is_discarded()) v = nullptr;
        if (!fits(it->second.kind, v))
            throw Error(origin + ": expected " + std::string(kindName(it->second.kind)) + ", got '" + text + "'");
        // Averaging is off unless asked for; asking for it every 0 steps is a mistake.
        if (key == "average_every" && v.get<int64_t>() < 1) throw Error(origin + ": K must be at least 1, got " + text);
        // Unset, the global batch is split over the towers; asking for 0 per tower is a mistake.
        if (key == "batch_per_tower" && (v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxBatch))
            throw Error(origin + ": must be between 1 and " + std::to_string(kMaxBatch) + ", got " + text);
        break;
    }
    }
    set(key, v, origin);
}

void RunConfig::loadFile(const std::string& path) {
    const json j = parseJsonText(readTextFile(path, size_t(1) << 20, "run config"), path);
    if (!j.is_object()) throw Error(path + ": a run config file must hold one JSON object");
    for (const auto& [key, value] : j.items()) set(key, value, path);
    file = path;
}

AugmentSettings AugmentSettings::parse(const std::string& text, const std::string& origin) {
    AugmentSettings a;
    if (text == "auto") return a;
    a.automatic = false;
    if (text == "none") return a;
    a.enabled = true;
    auto number = [&](const std::string& item, const std::string& v, double lo, double hi) {
        try {
            size_t used = 0;
            const double x = std::stod(v, &used);
            if (used == v.size() && x >= lo && x <= hi) return x;
        } catch (const std::exception&) {
        }
        throw Error(origin + ": '" + item + "' needs a number from " + std::to_string(int(lo)) + " to " +
                    std::to_string(int(hi)) + ", not '" + v + "'");
    };
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');) {
        const size_t colon = item.find(':');
        const std::string part = item.substr(0, colon), rest = colon == std::string::npos ? "" : item.substr(colon + 1);
        if (part == "flip" && rest.empty()) {
            a.flip = true;
        } else if (part == "crop" && !rest.empty()) {
            a.pad = int(number(item, rest, 0, 1024));
            if (double(a.pad) != std::stod(rest)) throw Error(origin + ": '" + item + "' needs a whole number of pixels");
        } else if (part == "brightness" && !rest.empty()) {
            a.brightness = float(number(item, rest, 0, 255) / 255.0);
        } else if (part == "contrast" && rest.find(':') != std::string::npos) {
            const size_t c2 = rest.find(':');
            a.contrastLow = float(number(item, rest.substr(0, c2), 0, 100));
            a.contrastHigh = float(number(item, rest.substr(c2 + 1), 0, 100));
            if (a.contrastLow > a.contrastHigh) throw Error(origin + ": '" + item + "' gives a low factor above the high one");
        } else {
            throw Error(origin + ": '" + item + "' is not crop:PIXELS, flip, brightness:D or contrast:LOW:HIGH "
                        "(or give auto or none)");
        }
    }
    return a;
}

void RunConfig::validate() const {
    auto require = [](bool ok, const std::string& msg) {
        if (!ok) throw Error(msg);
    };
    require(batch >= 1 && batch <= kMaxBatch,
            "--batch: must be between 1 and " + std::to_string(kMaxBatch) + ", got " + std::to_string(batch));
    require(batchPerTower >= 0 && batchPerTower <= kMaxBatch,
            "--batch-per-tower: must be between 1 and " + std::to_string(kMaxBatch) + ", got " + std::to_string(batchPerTower));
    // What was given, as it reads back: "-1", "5000", "0.95".
    auto got = [](double v) {
        std::ostringstream o;
        o << v;
        return ", got " + o.str();
    };
    require(steps >= 0, "--steps: must not be negative" + got(double(steps)));
    require(steps > 0 || (epochs > 0 && epochs <= 1e6), "--epochs: must be above 0 and at most 1e6 (or give --steps)" + got(epochs));
    require(lr > 0 && lr < 1e3, "--lr: must be above 0 and below 1000" + got(lr));
    require(momentum >= 0 && momentum < 1, "--momentum: must be in [0, 1)" + got(momentum));
    require(lrDecaySteps >= 0, "--lr-decay-steps: must not be negative" + got(double(lrDecaySteps)));
    require(lrDecayRate > 0, "--lr-decay-rate: must be positive" + got(lrDecayRate));
    require(lrDecay == "exponential" || lrDecay == "cosine",
            "--lr-decay: '" + lrDecay + "' is no decay; give exponential or cosine");
    require(lrDecay != "cosine" || lrDecaySteps > 0,
            "--lr-decay cosine: give --lr-decay-steps N, the steps over which the learning rate falls to 0");
    require(warmupSteps >= 0, "--warmup-steps: must not be negative");
    require(lrScaling == "none" || lrScaling == "linear",
            "--lr-scaling: '" + lrScaling + "' is no scaling rule; give none or linear");
    require(lrReferenceBatch >= 1 && lrReferenceBatch <= kMaxBatch,
            "--lr-reference-batch: must be between 1 and " + std::to_string(kMaxBatch) + ", got " +
                std::to_string(lrReferenceBatch));
    require(accumulate >= 1 && accumulate <= 1024, "--accumulate: must be between 1 and 1024, got " + std::to_string(accumulate));
    require(int64_t(batch) * accumulate <= kMaxBatch,
            "--accumulate: " + std::to_string(accumulate) + " micro-steps of --batch " + std::to_string(batch) +
                " are an update of " + std::to_string(int64_t(batch) * accumulate) + " examples, more than the limit of " +
                std::to_string(kMaxBatch));
    require(accumulate == 1 || update != "async",
            "--accumulate: free-running towers (--update async) push every gradient they compute; leave one out");
    require(accumulate == 1 || psTasks == 0,
            "--accumulate with parameter-server processes (--ps-tasks) is not built yet; leave one out");
    require(accumulate == 1 || stages.empty(),
            "--accumulate: pipeline stages split the batch into --micro-batches already; use those");
    require(!syncBn || update != "async",
            "--sync-bn: free-running towers (--update async) take no step together to sum their statistics in");
    require(!syncBn || psTasks == 0, "--sync-bn with parameter-server processes (--ps-tasks) is not built yet");
    require(!syncBn || !stagePerProcess || stageReplicas > 1,
            "--sync-bn: with a stage per process and no replicas no two processes run the same layers, so no batch "
            "norm has replicas to sum its statistics with; give --stage-replicas 2 or more (hybrid), or leave out "
            "--stage-per-process or --sync-bn");
    require(emaDecay >= 0 && emaDecay < 1, "--ema-decay: must be in [0, 1)" + got(emaDecay));
    require(reportLag >= -1 && reportLag <= kMaxReportLag,
            "--report-lag: must be between 0 and " + std::to_string(kMaxReportLag) + " steps (or -1 for automatic), got " +
                std::to_string(reportLag));
    require(reportLag <= 0 || emaDecay == 0,
            "--report-lag: the moving average of the weights (--ema-decay) follows every step's variables as they are "
            "reported; leave one out");
    require(reportLag <= 0 || stages.empty(), "--report-lag with pipeline stages is not built yet");
    require(evalEvery >= 0, "--eval-every: must not be negative");
    require(validation >= -1, "--validation: must be a sample count (or -1 for automatic)");
    require(shuffleBuffer >= 0 && shuffleBuffer <= (int64_t(1) << 30), "--shuffle-buffer: must be between 0 and 2^30 records");
    require(stream == "auto" || stream == "true" || stream == "false", "--stream: '" + stream + "' is not auto, true or false");
    require(stream == "auto" || data.starts_with("tfrecord:"), "--stream: only tfrecord:DIR sets are streamed, and --data is " + data);
    require(loaderThreads >= 0 && loaderThreads <= 1024, "--loader-threads: must be between 0 (automatic) and 1024");
    (void)AugmentSettings::parse(augment, "--augment");
    require(normalise == "auto" || normalise == "none" || normalise == "standardize" || normalise == "mean-std",
            "--normalise: '" + normalise + "' is not auto, none, standardize or mean-std");
    require(prefetch >= -1 && prefetch <= 64, "--prefetch: must be between 0 and 64 (or -1 for automatic)");
    require(threads >= 0 && threads <= 1024, "--threads: must be between 0 (all cores) and 1024");
    require(precision == "fp32" || precision == "bf16", "--precision: '" + precision + "' is not fp32 or bf16");
    require(commPrecision == "fp32" || commPrecision == "bf16",
            "--comm-precision: '" + commPrecision + "' is not fp32 or bf16");
    require(transfers == "auto" || transfers == "copies" || transfers == "nccl",
            "--transfers: '" + transfers + "' is not auto, copies or nccl");
    require(psTasks >= 0 && psTasks <= 4096, "--ps-tasks: must be between 0 (no parameter-server processes) and 4096");
    require(checkpointEvery >= 0, "--checkpoint-every: must not be negative");
    require(checkpointMinutes >= 0 && checkpointMinutes <= 1e6, "--checkpoint-minutes: must be between 0 and 1e6");
    require(keepCheckpoints >= 1 && keepCheckpoints <= 1000, "--keep-checkpoints: must be between 1 and 1000");
    require(!model.empty(), "--model: must not be empty");
    require(!data.empty(), "--data: must not be empty");
    if (optimizer != "sgd" && optimizer != "momentum" && optimizer != "nesterov" && optimizer != "adam")
        throw Error("--optimizer: unknown optimizer '" + optimizer + "' (expected sgd, momentum, nesterov or adam)");
    validateStages();
}

// Model parallelism's settings against each other and against what is built with stages so far:
// pipelines of CPU stages, synchronous, in each process (StagePipeline refuses a GPU stage).
void RunConfig::validateStages() const {
    auto require = [](bool ok, const std::string& msg) {
        if (!ok) throw Error(msg);
    };
    require(pipeline.empty() || pipeline == "naive" || pipeline == "gpipe" || pipeline == "1f1b",
            "--pipeline: '" + pipeline + "' is no schedule; give naive, gpipe or 1f1b");
    require(microBatches >= 1 && microBatches <= kMaxBatch,
            "--micro-batches: must be between 1 and " + std::to_string(kMaxBatch) + ", got " + std::to_string(microBatches));
    require(stageReplicas >= 1 && stageReplicas <= 4096,
            "--stage-replicas: must be between 1 and 4096, got " + std::to_string(stageReplicas));
    if (stages.empty()) {
        require(pipeline.empty(), "--pipeline: a schedule needs stages to run through; give --stages (e.g. --stages 2)");
        require(microBatches == 1, "--micro-batches: micro-batches flow through stages; give --stages and --pipeline gpipe or 1f1b");
        require(stageReplicas == 1, "--stage-replicas: replicas of a pipeline need its stages; give --stages (e.g. --stages 2)");
        require(!stagePerProcess, "--stage-per-process: a stage per process needs stages; give --stages (e.g. --stages 2)");
        return;
    }
    require(microBatches == 1 || (pipeline != "" && pipeline != "naive"),
            "--micro-batches " + std::to_string(microBatches) +
                ": the naive pipeline runs the whole batch at once; give --pipeline gpipe or 1f1b to split it");
    require(batch % (microBatches * stageReplicas) == 0,
            stageReplicas > 1 ? "--stage-replicas " + std::to_string(stageReplicas) + " x --micro-batches " +
                                    std::to_string(microBatches) + " does not divide --batch " + std::to_string(batch)
                              : "--micro-batches " + std::to_string(microBatches) + " does not divide --batch " +
                                    std::to_string(batch));
    // What stages are not combined with yet, each named.
    const RunConfig defaults;
    if (stagePerProcess) {
        require(stages != "auto", "--stage-per-process: --stages auto splits over GPUs in one process; give the stage "
                                  "count (e.g. --stages 2, one process each)");
        require(transfers == defaults.transfers, "--transfers: stages in processes of their own always send their "
                                                 "activations over MPI; leave it out");
    }
    const std::pair<bool, const char*> unbuilt[] = {
        {towers != defaults.towers, "--towers (to replicate the stages, give --stage-replicas)"},
        {update != defaults.update, "--update async"},
        {averageEvery != 0, "--average-every"},
        {psTasks != 0, "--ps-tasks"},
        {psShards != 1, "--ps-shards"},
        {variables != defaults.variables, "--variables"},
        {reduce != defaults.reduce, "--reduce"},
        {batchPerTower != 0, "--batch-per-tower"},
        {!slow.empty(), "--slow"},
        {commPrecision != defaults.commPrecision, "--comm-precision"},
        {transfers == "nccl", "--transfers nccl (CPU stages hand over in shared memory, or by explicit copies: --transfers copies)"},
    };
    for (const auto& [given, flag] : unbuilt)
        require(!given, std::string("--stages: model parallelism with ") + flag +
                            " is not built yet; leave it out (pipelines of CPU stages, synchronous)");
}

void RunConfig::clearTowerStrategy() {
    const RunConfig defaults;
    towers = defaults.towers;
    variables = defaults.variables;
    reduce = defaults.reduce;
    update = defaults.update;
    commPrecision = defaults.commPrecision;
    averageEvery = defaults.averageEvery;
    psShards = defaults.psShards;
    psTasks = defaults.psTasks;
    slow = defaults.slow;
}

json RunConfig::toJson() const {
    json j;
    for (const auto& [name, s] : table()) j[name] = s.read(*this);
    return j;
}

json RunConfig::changes(const std::set<std::string>& alsoKeep) const {
    const RunConfig defaults;
    json j = json::object();
    for (const auto& [name, s] : table()) {
        json value = s.read(*this);
        if (!alsoKeep.count(name) && value == s.read(defaults)) continue;
        // A whole real is written as people write it ("epochs": 2, not 2.0).
        if (value.is_number_float() && std::abs(value.get<double>()) < 1e15 &&
            value.get<double>() == std::trunc(value.get<double>()))
            value = int64_t(value.get<double>());
        j[name] = std::move(value);
    }
    return j;
}

std::set<std::string> RunConfig::keysFrom(const std::string& origin) const {
    std::set<std::string> keys;
    for (const auto& [key, from] : origins_)
        if (from == origin) keys.insert(key);
    return keys;
}

}  // namespace tb
