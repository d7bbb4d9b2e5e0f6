#include "parallel/stage_plan.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "nn/network.hpp"
#include "util/error.hpp"
#include "util/nearest_name.hpp"

namespace tb {

namespace {

constexpr const char* kForms = " (give N, DEV,DEV,..., DEV*K, or DEV=FROM..TO,... with layer names or indices)";

std::string trim(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out(1);
    for (char c : s) {
        if (c == sep) out.emplace_back();
        else out.back().push_back(c);
    }
    return out;
}

// A whole number of at most 6 digits; -1 for anything else.
int smallNumber(const std::string& s) {
    if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return -1;
    int v = 0;
    std::from_chars(s.data(), s.data() + s.size(), v);
    return v;
}

std::string quoted(const std::vector<std::string>& names, int i) {
    return "'" + names[size_t(i)] + "' (layer " + std::to_string(i) + ")";
}

// A layer by name or 0-based index.
int layerIndex(const std::string& ref, const std::vector<std::string>& names) {
    if (ref.empty()) throw Error("--stages: a stage's layer range is missing a layer" + std::string(kForms));
    if (const int i = smallNumber(ref); i >= 0) {
        if (i >= int(names.size()))
            throw Error("--stages: layer index " + ref + " is past the model's last layer, " +
                        quoted(names, int(names.size()) - 1));
        return i;
    }
    int found = -1;
    for (int i = 0; i < int(names.size()); ++i)
        if (names[size_t(i)] == ref) {
            if (found >= 0)
                throw Error("--stages: '" + ref + "' names layers " + std::to_string(found) + " and " + std::to_string(i) +
                            "; give its index");
            found = i;
        }
    if (found >= 0) return found;
    if (ref.find_first_of(".[]:/") != std::string::npos)
        throw Error("--stages: '" + ref + "' names part of a layer; stages split the model between whole layers");
    throw Error("--stages: the model has no layer '" + ref + "'" + didYouMean(ref, names));
}

Device deviceOf(const std::string& text) {
    try {
        return Device::parse(text);
    } catch (const Error& e) {
        throw Error(std::string("--stages: ") + e.what());
    }
}

// "gpu:0*2" -> (gpu:0, 2); "cpu:1" -> (cpu:1, 0): no share count written.
std::pair<Device, int> sharedDevice(const std::string& item) {
    const size_t star = item.find('*');
    if (star == std::string::npos) return {deviceOf(item), 0};
    const int k = smallNumber(trim(item.substr(star + 1)));
    if (k < 1 || k > 64)
        throw Error("--stages: '" + item + "': the count after '*' must be a whole number from 1 to 64");
    return {deviceOf(trim(item.substr(0, star))), k};
}

void checkCount(int stages, int layers) {
    if (stages < 2) throw Error("--stages: one stage is the whole model on one device; give at least 2");
    if (stages > layers)
        throw Error("--stages: " + std::to_string(stages) + " stages need at least " + std::to_string(stages) +
                    " layers; the model has " + std::to_string(layers));
}

// Every device given to several stages must be written DEV*K on each, K the stages it holds.
void checkSharing(const std::vector<Stage>& stages, const std::vector<int>& written) {
    for (size_t i = 0; i < stages.size(); ++i) {
        std::vector<size_t> same;
        for (size_t j = 0; j < stages.size(); ++j)
            if (stages[j].device == stages[i].device) same.push_back(j);
        const std::string d = stages[i].device.str();
        if (same.size() > 1 && written[i] == 0)
            throw Error("--stages: " + d + " is given to stages " + std::to_string(same[0] + 1) + " and " +
                        std::to_string(same[1] + 1) + "; stages share a device only as " + d + "*" +
                        std::to_string(same.size()));
        if (written[i] > 0 && size_t(written[i]) != same.size())
            throw Error("--stages: " + d + "*" + std::to_string(written[i]) + " is given to " +
                        std::to_string(same.size()) + (same.size() == 1 ? " stage" : " stages"));
    }
}

}  // namespace

std::vector<Device> StagePlan::devices() const {
    std::vector<Device> out;
    for (const Stage& s : stages) out.push_back(s.device);
    return out;
}

int StagePlan::sharing(int i) const {
    return int(std::count_if(stages.begin(), stages.end(),
                             [&](const Stage& s) { return s.device == stages[size_t(i)].device; }));
}

std::string StagePlan::describe(const std::vector<std::string>& layerNames) const {
    std::string out;
    for (int i = 0; i < count(); ++i) {
        const Stage& s = stages[size_t(i)];
        const int k = sharing(i);
        std::string device = s.device.str();
        if (k > 1) device.append(1, '*').append(std::to_string(k));
        if (s.first < 0) {  // not split yet: each device once
            bool seen = false;
            for (int j = 0; j < i; ++j) seen |= stages[size_t(j)].device == s.device;
            if (!seen) out += (out.empty() ? "" : ",") + device;
            continue;
        }
        auto name = [&](int l) {
            return l >= 0 && l < int(layerNames.size()) ? layerNames[size_t(l)] : std::to_string(l);
        };
        out += (out.empty() ? "" : ",") + device + "=" + name(s.first) +
               (s.last != s.first ? ".." + name(s.last) : std::string());
    }
    return out;
}

StagePlan parseStagePlan(const std::string& text, const std::vector<std::string>& layerNames) {
    const std::string t = trim(text);
    const int n = int(layerNames.size());
    if (t.empty()) throw Error("--stages: it is empty" + std::string(kForms));
    if (n == 0) throw Error("--stages: the model has no layers to split");
    StagePlan plan;
    if (const int count = smallNumber(t); count >= 0) {  // N: balanced over cpu:0 .. cpu:N-1
        checkCount(count, n);
        plan.balanced = true;
        for (int i = 0; i < count; ++i) plan.stages.push_back({Device{DeviceType::Cpu, i}, -1, -1});
        return plan;
    }
    std::vector<std::string> items = split(t, ',');
    for (std::string& item : items) {
        item = trim(item);
        if (item.empty()) throw Error("--stages: '" + t + "' has an empty entry between commas");
    }
    const auto hasLayers = [](const std::string& item) { return item.find('=') != std::string::npos; };
    const bool explicitSplit = hasLayers(items.front());
    if (std::any_of(items.begin(), items.end(), [&](const std::string& i) { return hasLayers(i) != explicitSplit; }))
        throw Error("--stages: give every stage its layers (DEV=FROM..TO) or none of them");
    std::vector<int> written;  // each stage's share count as written (0: none)
    if (!explicitSplit) {
        plan.balanced = true;
        for (const std::string& item : items) {
            const auto [device, k] = sharedDevice(item);
            for (int j = 0; j < std::max(1, k); ++j) {
                plan.stages.push_back({device, -1, -1});
                written.push_back(k);
            }
            if (plan.count() > n) break;  // checkCount names it; no huge list from "cpu:0*64,..."
        }
        checkCount(plan.count(), n);
        checkSharing(plan.stages, written);
        return plan;
    }
    int next = 0;  // the first layer no stage holds yet
    for (const std::string& item : items) {
        const size_t eq = item.find('=');
        const auto [device, k] = sharedDevice(trim(item.substr(0, eq)));
        const std::string range = trim(item.substr(eq + 1));
        const size_t dots = range.find("..");
        if (dots != std::string::npos && range.find("..", dots + 2) != std::string::npos)
            throw Error("--stages: '" + item + "': a stage's layers are FROM..TO, one range");
        const int first = layerIndex(trim(range.substr(0, dots)), layerNames);
        const int last = dots == std::string::npos ? first : layerIndex(trim(range.substr(dots + 2)), layerNames);
        const int number = plan.count() + 1;
        if (first > last)
            throw Error("--stages: stage " + std::to_string(number) + " (" + item + ") is empty: " +
                        quoted(layerNames, first) + " comes after " + quoted(layerNames, last));
        if (first > next)
            throw Error("--stages: " + (first - 1 == next ? "layer " + quoted(layerNames, next)
                                                           : "layers " + quoted(layerNames, next) + " to " +
                                                                 quoted(layerNames, first - 1)) +
                        (first - 1 == next ? " is" : " are") + " in no stage (before stage " + std::to_string(number) + ")");
        if (first < next)
            throw Error("--stages: layer " + quoted(layerNames, first) + " is in stage " + std::to_string(number - 1) +
                        " and stage " + std::to_string(number));
        plan.stages.push_back({device, first, last});
        written.push_back(k);
        next = last + 1;
    }
    if (next < n)
        throw Error("--stages: " + (next == n - 1 ? "layer " + quoted(layerNames, next) + " is"
                                                   : "layers " + quoted(layerNames, next) + " to " +
                                                         quoted(layerNames, n - 1) + " are") +
                    " in no stage (after the last)");
    checkCount(plan.count(), n);
    checkSharing(plan.stages, written);
    return plan;
}

std::vector<std::pair<int, int>> balanceStages(const std::vector<double>& cost, int count) {
    return balanceStages(cost, count, [](int, int, int) { return true; });
}

std::vector<std::pair<int, int>> balanceStages(const std::vector<double>& cost, int count, const StageFits& fits) {
    const int n = int(cost.size());
    if (count < 1 || count > n)
        throw Error("stages: " + std::to_string(count) + " stages need at least as many layers; the model has " +
                    std::to_string(n));
    for (double c : cost)
        if (!std::isfinite(c) || c < 0) throw Error("stages: a layer's measured cost is negative or not a number");
    std::vector<double> prefix(size_t(n) + 1, 0);
    for (int i = 0; i < n; ++i) prefix[size_t(i) + 1] = prefix[size_t(i)] + cost[size_t(i)];
    const double inf = std::numeric_limits<double>::infinity();
    // worst[k][i]: the slowest stage's cost when the first i layers make k stages; cut[k][i]: where
    // the k-th stage starts in that split.
    std::vector<std::vector<double>> worst(size_t(count) + 1, std::vector<double>(size_t(n) + 1, inf));
    std::vector<std::vector<int>> cut(size_t(count) + 1, std::vector<int>(size_t(n) + 1, 0));
    worst[0][0] = 0;
    for (int k = 1; k <= count; ++k)
        for (int i = k; i <= n; ++i)
            for (int j = k - 1; j < i; ++j) {
                if (worst[size_t(k) - 1][size_t(j)] == inf || !fits(k - 1, j, i - 1)) continue;
                const double w = std::max(worst[size_t(k) - 1][size_t(j)], prefix[size_t(i)] - prefix[size_t(j)]);
                if (w <= worst[size_t(k)][size_t(i)]) worst[size_t(k)][size_t(i)] = w, cut[size_t(k)][size_t(i)] = j;
            }
    if (worst[size_t(count)][size_t(n)] == inf) return {};
    std::vector<std::pair<int, int>> ranges(static_cast<size_t>(count));
    for (int k = count, i = n; k >= 1; --k) {
        const int j = cut[size_t(k)][size_t(i)];
        ranges[size_t(k) - 1] = {j, i - 1};
        i = j;
    }
    return ranges;
}

StageFits atCuts(const ModelSpec& spec, StageFits fits) {
    std::vector<bool> cut;
    for (int l = 0; l < int(spec.layers.size()); ++l) cut.push_back(cutProblem(spec, l).empty());
    return [cut = std::move(cut), fits = std::move(fits)](int stage, int first, int last) {
        return cut[size_t(first)] && (!fits || fits(stage, first, last));
    };
}

std::string stageCutProblem(const ModelSpec& spec, const StagePlan& stages) {
    for (const Stage& s : stages.stages)
        if (s.first > 0)
            if (std::string why = cutProblem(spec, s.first); !why.empty()) return "--stages: " + why;
    return "";
}

}  // namespace tb
