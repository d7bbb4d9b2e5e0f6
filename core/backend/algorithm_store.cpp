#include "backend/algorithm_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "util/atomic_file.hpp"
#include "util/error.hpp"
#include "util/json_file.hpp"

namespace tb {

namespace {

constexpr const char* kFormat = "towerbench cuDNN algorithm choices";
constexpr int kVersion = 1;
constexpr const char* kDirections[3] = {"forward", "backward_data", "backward_filter"};
constexpr size_t kProblemsNamed = 3;  // bad entries named one by one; the rest are counted

StoredAlgorithm& direction(StoredConvChoice& c, int i) {
    return i == 0 ? c.forward : i == 1 ? c.backwardData : c.backwardFilter;
}
const StoredAlgorithm& direction(const StoredConvChoice& c, int i) {
    return direction(const_cast<StoredConvChoice&>(c), i);
}

// An integer field of `o` within [0, max], or why not ("field "forward.algorithm" is ...").
std::string readNumber(const nlohmann::json& o, const std::string& where, const char* field, uint64_t max,
                       uint64_t& out) {
    const std::string name = where + "." + field;
    const auto it = o.find(field);
    if (it == o.end()) return "field \"" + name + "\" is missing";
    if (!it->is_number_unsigned())
        return "field \"" + name + "\" is " + shortJson(*it) + ", not a whole number from 0 to " + std::to_string(max);
    out = it->get<uint64_t>();
    if (out > max) return "field \"" + name + "\" is " + std::to_string(out) + ", more than " + std::to_string(max);
    return {};
}

// A direction's "graph" field (`g`, named `where`) into `a`, or why it is refused.
std::string readGraph(const nlohmann::json& g, const std::string& where, StoredAlgorithm& a) {
    const std::string name = "field \"" + where + "\"";
    if (g == "not faster" || g == "none") {
        a.graphState = g == "none" ? 3 : 1;
        return {};
    }
    if (!g.is_object()) return name + " is " + shortJson(g) + ", not an engine, \"not faster\" or \"none\"";
    uint64_t engine = 0, workspace = 0;
    for (std::string why : {readNumber(g, where, "engine", kMaxGraphEngine, engine),
                            readNumber(g, where, "workspace_bytes", kMaxWorkspaceBytes, workspace)})
        if (!why.empty()) return why;
    const auto knobs = g.find("knobs");
    if (knobs == g.end()) return "field \"" + where + ".knobs\" is missing";
    if (!knobs->is_array() || knobs->size() > kMaxGraphKnobs)
        return "field \"" + where + ".knobs\" is " + shortJson(*knobs) + ", not a list of at most " +
               std::to_string(kMaxGraphKnobs) + " [type, value] pairs";
    for (const nlohmann::json& k : *knobs) {
        if (!k.is_array() || k.size() != 2 || !k[0].is_number_unsigned() || k[0].get<uint64_t>() > kMaxKnobType ||
            !k[1].is_number_integer() || (k[1].is_number_unsigned() && k[1].get<uint64_t>() > uint64_t(INT64_MAX)))
            return "field \"" + where + ".knobs\" holds " + shortJson(k) + ", not a [type, value] pair of whole numbers";
        a.graphKnobs.push_back({k[0].get<int64_t>(), k[1].get<int64_t>()});
    }
    a.graphState = 2;
    a.graphEngine = int64_t(engine);
    a.graphWorkspaceBytes = workspace;
    return {};
}

// One entry's value, or why it is refused.
std::string readEntry(const nlohmann::json& v, StoredConvChoice& c) {
    if (!v.is_object()) return "is " + shortJson(v) + ", not an object";
    if (const auto f = v.find("failure"); f != v.end()) {
        if (!f->is_string() || f->get_ref<const std::string&>().empty())
            return "field \"failure\" is " + shortJson(*f) + ", not a sentence";
        if (f->get_ref<const std::string&>().size() > kMaxChoiceFailureChars)
            return "field \"failure\" is longer than " + std::to_string(kMaxChoiceFailureChars) + " characters";
        c.failure = f->get<std::string>();
        return {};
    }
    for (int i = 0; i < 3; ++i) {
        const auto d = v.find(kDirections[i]);
        if (d == v.end()) return std::string("field \"") + kDirections[i] + "\" is missing";
        if (!d->is_object()) return std::string("field \"") + kDirections[i] + "\" is " + shortJson(*d) + ", not an object";
        uint64_t algorithm = 0, math = 0, workspace = 0;
        for (std::string why : {readNumber(*d, kDirections[i], "algorithm", kMaxAlgorithmNumber, algorithm),
                                readNumber(*d, kDirections[i], "math", kMaxMathNumber, math),
                                readNumber(*d, kDirections[i], "workspace_bytes", kMaxWorkspaceBytes, workspace)})
            if (!why.empty()) return why;
        int layout = 0;
        if (const auto l = d->find("layout"); l != d->end()) {
            if (*l != "nhwc" && *l != "nchw")
                return std::string("field \"") + kDirections[i] + ".layout\" is " + shortJson(*l) + ", not \"nhwc\" or \"nchw\"";
            layout = *l == "nchw" ? 1 : 0;
        }
        StoredAlgorithm& a = direction(c, i);
        a.algorithm = int(algorithm), a.math = int(math), a.layout = layout, a.workspaceBytes = workspace;
        if (const auto g = d->find("graph"); g != d->end())
            if (std::string why = readGraph(*g, std::string(kDirections[i]) + ".graph", a); !why.empty()) return why;
    }
    return {};
}

}  // namespace

StoredChoices parseChoices(const std::string& text, const std::string& origin, std::vector<std::string>& problems) {
    StoredChoices out;
    const nlohmann::json doc = parseJsonOrDiscard(text);
    const auto notOurs = [&](const std::string& why) {
        problems.push_back(origin + ": not a cuDNN algorithm choices file (" + why +
                           "); its shapes are searched afresh and the file replaced");
        return StoredChoices{};
    };
    if (doc.is_discarded()) return notOurs("malformed JSON");
    if (!doc.is_object()) return notOurs("not a JSON object");
    if (doc.value("format", nlohmann::json()) != kFormat) return notOurs("its \"format\" is not \"" + std::string(kFormat) + "\"");
    if (doc.value("version", nlohmann::json()) != kVersion)
        return notOurs("version " + shortJson(doc.value("version", nlohmann::json())) + ", where this program reads " +
                       std::to_string(kVersion));
    const auto choices = doc.find("choices");
    if (choices == doc.end() || !choices->is_object()) return notOurs("no \"choices\" object");
    size_t refused = 0;
    for (const auto& [key, value] : choices->items()) {
        StoredConvChoice c;
        std::string why = key.empty() || key.size() > kMaxChoiceKeyChars
                              ? "has a key of " + std::to_string(key.size()) + " characters (1 to " +
                                    std::to_string(kMaxChoiceKeyChars) + ")"
                              : readEntry(value, c);
        if (why.empty()) {
            out.emplace(key, std::move(c));
        } else if (++refused <= kProblemsNamed) {
            problems.push_back(origin + ": the entry \"" + key.substr(0, 120) + "\" " +
                               (why.rfind("has ", 0) == 0 || why.rfind("is ", 0) == 0 ? why : "has " + why) +
                               "; that shape is searched afresh");
        }
    }
    if (refused > kProblemsNamed)
        problems.push_back(origin + ": " + std::to_string(refused - kProblemsNamed) + " more entries refused alike");
    return out;
}

std::string choicesText(const StoredChoices& choices) {
    nlohmann::json entries = nlohmann::json::object();
    for (const auto& [key, c] : choices) {
        nlohmann::json e = nlohmann::json::object();
        if (!c.failure.empty()) {
            e["failure"] = c.failure;
        } else {
            for (int i = 0; i < 3; ++i) {
                const StoredAlgorithm& a = direction(c, i);
                nlohmann::json& d = e[kDirections[i]];
                d = {{"algorithm", a.algorithm},
                     {"math", a.math},
                     {"layout", a.layout == 1 ? "nchw" : "nhwc"},
                     {"workspace_bytes", a.workspaceBytes}};
                if (a.graphState == 1) d["graph"] = "not faster";
                if (a.graphState == 3) d["graph"] = "none";
                if (a.graphState == 2)
                    d["graph"] = {{"engine", a.graphEngine}, {"knobs", a.graphKnobs}, {"workspace_bytes", a.graphWorkspaceBytes}};
            }
        }
        entries[key] = std::move(e);
    }
    const nlohmann::json doc = {{"format", kFormat}, {"version", kVersion}, {"choices", std::move(entries)}};
    return doc.dump(1) + "\n";
}

AlgorithmStore::AlgorithmStore(std::string path) : path_(std::move(path)) {}

void AlgorithmStore::say(const std::string& sentence) {
    if (std::find(said_.begin(), said_.end(), sentence) != said_.end()) return;
    said_.push_back(sentence);
    std::fprintf(stderr, "towerbench: %s\n", sentence.c_str());
}

void AlgorithmStore::readFile() {
    std::error_code ec;
    if (!std::filesystem::exists(path_, ec)) return;  // nothing searched yet
    std::vector<std::string> problems;
    try {
        StoredChoices read = parseChoices(readTextFile(path_, kMaxChoicesFileBytes, "cuDNN algorithm choices"), path_, problems);
        choices_.merge(read);  // this process's own choices stand where both have a key
    } catch (const Error& e) {
        problems.push_back(std::string(e.what()) + "; the shapes are searched afresh");
    }
    for (const std::string& p : problems) say(p);
}

std::optional<StoredConvChoice> AlgorithmStore::find(const std::string& key) {
    std::lock_guard lock(mutex_);
    auto it = choices_.find(key);
    if (it == choices_.end()) {
        readFile();
        it = choices_.find(key);
    }
    if (it == choices_.end()) return std::nullopt;
    return it->second;
}

void AlgorithmStore::remember(const std::string& key, const StoredConvChoice& choice) {
    std::lock_guard lock(mutex_);
    choices_.insert_or_assign(key, choice);
    int fd = -1;
    try {
        const std::filesystem::path folder = std::filesystem::path(path_).parent_path();
        std::error_code ec;
        if (!folder.empty()) std::filesystem::create_directories(folder, ec);
        // Processes sharing the file take turns: read what the others added, add ours, replace.
        const std::string lockPath = path_ + ".lock";
        fd = ::open(lockPath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0 || ::flock(fd, LOCK_EX) != 0) throw Error("cannot lock " + lockPath + ": " + std::strerror(errno));
        readFile();
        writeFileAtomically(path_, choicesText(choices_));
    } catch (const Error& e) {
        say("cannot keep the cuDNN algorithm choices in " + path_ + " (" + e.what() +
            "); this process keeps them until it ends");
    }
    if (fd >= 0) ::close(fd);  // (the flock goes with the descriptor)
}

std::string algorithmStorePath() {
    if (const char* set = std::getenv("TOWERBENCH_ALGORITHM_CACHE"); set && *set)
        return std::string(set) == "off" ? std::string() : std::string(set);
    if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache)
        return std::string(cache) + "/towerbench/cudnn-algorithms.json";
    if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/towerbench/cudnn-algorithms.json";
    return {};
}

AlgorithmStore* processAlgorithmStore() {
    static AlgorithmStore* const store = [] {
        const std::string path = algorithmStorePath();
        return path.empty() ? nullptr : new AlgorithmStore(path);  // never destroyed: plans may ask until exit
    }();
    return store;
}

}  // namespace tb
