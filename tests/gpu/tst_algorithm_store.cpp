// tst_algorithm_store: the cuDNN algorithm choices kept across runs (backend/algorithm_store.hpp),
// on the host alone (the module's side runs in the device check):
//   - what one store remembers, a later one (the next run) finds as it was, failures included
//   - two stores on one file (two processes) keep each other's entries: each reads the file again
//     under the lock before it replaces it, and a store finds what another wrote after it started
//   - a damaged file, or a damaged entry, is one sentence naming the file, the key and the field;
//     good entries beside a bad one stand; the next remember() rewrites the file whole
//   - a file too large is refused before it is read; a folder that cannot be written keeps the
//     choices for the process alone
//   - where the file is: TOWERBENCH_ALGORITHM_CACHE, "off", XDG_CACHE_HOME, HOME
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/algorithm_store.hpp"
#include "plain_check.hpp"

using tb::AlgorithmStore;
using tb::StoredConvChoice;

namespace fs = std::filesystem;

namespace {

std::string readAll(const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}
void writeAll(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

tb::StoredAlgorithm algorithm(int number, int math, int layout, uint64_t workspace) {
    tb::StoredAlgorithm a;
    a.algorithm = number, a.math = math, a.layout = layout, a.workspaceBytes = workspace;
    return a;
}
// Each direction with one of the graph API's states: an engine, not faster, not tried or none.
StoredConvChoice made(int seed) {
    StoredConvChoice c;
    c.forward = algorithm(seed % 8, 3, 1, uint64_t(seed) * 1024);  // NCHW
    c.forward.graphState = 2;
    c.forward.graphEngine = 40 + seed;
    c.forward.graphKnobs = {{1, 3}, {5, -1}, {19, int64_t(1) << 40}};
    c.forward.graphWorkspaceBytes = uint64_t(1) << 34;
    c.backwardData = algorithm(1, 3, 0, 0);
    c.backwardData.graphState = 1;
    c.backwardFilter = algorithm((seed + 1) % 6, 1, 0, uint64_t(1) << 33);  // above 4 GiB: 64-bit all the way
    if (seed % 2) c.backwardFilter.graphState = 3;  // none could run it
    return c;
}
StoredConvChoice failed() {
    StoredConvChoice c;
    c.failure = "CUDA backend: cuDNN has no deterministic tensor-core algorithm for the forward convolution";
    return c;
}

bool mentions(const std::vector<std::string>& problems, const std::string& a, const std::string& b = "") {
    for (const std::string& p : problems)
        if (p.find(a) != std::string::npos && p.find(b) != std::string::npos) return true;
    return false;
}

void roundTrip(const std::string& dir) {
    const std::string path = dir + "/sub/choices.json";  // the folder is made on the first remember()
    {
        AlgorithmStore first(path);
        CHECK(!first.find("k1"), "nothing kept before the first search");
        CHECK(!fs::exists(path), "a find() writes nothing");
        first.remember("k1", made(5));
        first.remember("k2 bf16", failed());
        first.remember("k1", made(6));  // searched again: the newer choice replaces the older
    }
    AlgorithmStore next(path);
    const auto k1 = next.find("k1"), k2 = next.find("k2 bf16");
    CHECK(k1 && *k1 == made(6), "the next run finds the last choice kept");
    CHECK(k2 && *k2 == failed(), "a failure is kept with its sentence");
    CHECK(!next.find("k3"), "an unknown key is not found");
    std::vector<std::string> problems;
    CHECK(tb::parseChoices(readAll(path), path, problems).size() == 2 && problems.empty(),
          "the file holds the two entries and nothing the reader refuses");
}

void twoProcesses(const std::string& dir) {
    const std::string path = dir + "/shared.json";
    AlgorithmStore a(path), b(path);
    CHECK(!b.find("from a"), "b starts before a has searched");
    a.remember("from a", made(1));
    CHECK(b.find("from a") && *b.find("from a") == made(1), "b finds what a kept after b started");
    AlgorithmStore c(path);
    CHECK(!c.find("from b"), "(c has read the file before b keeps its entry)");
    b.remember("from b", made(2));
    c.remember("from c", made(3));  // c's copy lacks "from b": it must read the file again first
    std::vector<std::string> problems;
    const tb::StoredChoices all = tb::parseChoices(readAll(path), path, problems);
    CHECK(all.size() == 3 && all.count("from a") && all.count("from b") && all.count("from c"),
          "no process's entries are lost (the file has %zu)", all.size());
}

void damagedFiles(const std::string& dir) {
    std::vector<std::string> p;
    CHECK(tb::parseChoices("{\"format\": ", "F", p).empty() && mentions(p, "F: not a cuDNN algorithm choices file", "malformed JSON"),
          "malformed JSON is refused whole, naming the file");
    p.clear();
    tb::parseChoices(R"({"format": "towerbench run config", "version": 1, "choices": {}})", "F", p);
    CHECK(mentions(p, "F: not a cuDNN algorithm choices file", "\"format\""), "another file's format is refused");
    p.clear();
    tb::parseChoices(R"({"format": "towerbench cuDNN algorithm choices", "version": 2, "choices": {}})", "F", p);
    CHECK(mentions(p, "version 2, where this program reads 1"), "a later version is refused, saying which");
    p.clear();
    tb::parseChoices(R"({"format": "towerbench cuDNN algorithm choices", "version": 1, "choices": []})", "F", p);
    CHECK(mentions(p, "no \"choices\" object"), "choices that are not an object are refused");

    const std::string good = R"("forward": {"algorithm": 1, "math": 3, "workspace_bytes": 0},
                               "backward_data": {"algorithm": 1, "math": 3, "workspace_bytes": 0})";
    const std::string text = std::string(R"({"format": "towerbench cuDNN algorithm choices", "version": 1, "choices": {)") +
        R"("good": {)" + good + R"(, "backward_filter": {"algorithm": 2, "math": 3, "workspace_bytes": 4096}},)" +
        R"("negative": {)" + good + R"(, "backward_filter": {"algorithm": -1, "math": 3, "workspace_bytes": 0}}}})";
    p.clear();
    const tb::StoredChoices read = tb::parseChoices(text, "F", p);
    CHECK(read.size() == 1 && read.count("good") && read.at("good").backwardFilter.workspaceBytes == 4096,
          "the good entry beside a bad one stands");
    CHECK(read.count("good") && read.at("good").forward.layout == 0, "an entry without a layout runs in NHWC");
    CHECK(mentions(p, "F: the entry \"negative\" has field \"backward_filter.algorithm\" is -1", "searched afresh"),
          "a bad entry names its key and field: %s", p.empty() ? "(nothing said)" : p[0].c_str());

    struct Bad {
        const char* entry;
        const char* said;
    };
    const Bad bad[] = {
        {R"({"forward": {"algorithm": 64, "math": 3, "workspace_bytes": 0}})", "\"forward.algorithm\" is 64, more than 63"},
        {R"({"forward": {"algorithm": "1", "math": 3, "workspace_bytes": 0}})", "\"forward.algorithm\" is \"1\", not a whole number"},
        {R"({"forward": {"algorithm": 1, "math": 4, "workspace_bytes": 0}})", "\"forward.math\" is 4, more than 3"},
        {R"({"forward": {"algorithm": 1, "math": 3}})", "\"forward.workspace_bytes\" is missing"},
        {R"({"forward": {"algorithm": 1, "math": 3, "workspace_bytes": 1.5}})", "\"forward.workspace_bytes\" is 1.5"},
        {R"({"forward": {"algorithm": 1, "math": 3, "workspace_bytes": 2000000000000}})", "more than 1099511627776"},
        {R"({"forward": 7})", "field \"forward\" is 7, not an object"},
        {R"({"forward": {"algorithm": 1, "math": 3, "layout": "nchv", "workspace_bytes": 0}})",
         "\"forward.layout\" is \"nchv\", not \"nhwc\" or \"nchw\""},
        {R"({"failure": ""})", "field \"failure\" is \"\", not a sentence"},
        {R"({"forward": {"algorithm": 1, "math": 3, "workspace_bytes": 0, "graph": "faster"}})",
         "field \"forward.graph\" is \"faster\", not an engine, \"not faster\" or \"none\""},
        {R"({"forward": {"algorithm": 1, "math": 3, "workspace_bytes": 0, "graph": {"knobs": [], "workspace_bytes": 0}}})",
         "\"forward.graph.engine\" is missing"},
        {R"({"forward": {"algorithm": 1, "math": 3, "workspace_bytes": 0, "graph": {"engine": 3, "workspace_bytes": 0}}})",
         "\"forward.graph.knobs\" is missing"},
        {R"({"forward": {"algorithm": 1, "math": 3, "workspace_bytes": 0, "graph": {"engine": 3, "knobs": [[1]], "workspace_bytes": 0}}})",
         "\"forward.graph.knobs\" holds [1], not a [type, value] pair"},
        {R"({"forward": {"algorithm": 1, "math": 3, "workspace_bytes": 0, "graph": {"engine": 3, "knobs": [[-1, 2]], "workspace_bytes": 0}}})",
         "\"forward.graph.knobs\" holds [-1,2]"},
        {R"({"forward": {"algorithm": 1, "math": 3, "workspace_bytes": 0, "graph": {"engine": 3, "knobs": [[1, 18446744073709551615]], "workspace_bytes": 0}}})",
         "\"forward.graph.knobs\" holds [1,18446744073709551615]"},
        {R"({"forward": {"algorithm": 1, "math": 3, "workspace_bytes": 0, "graph": {"engine": 3, "knobs": [[1,1],[1,1],[1,1],[1,1],[1,1],[1,1],[1,1],[1,1],[1,1],[1,1],[1,1],[1,1],[1,1],[1,1],[1,1],[1,1],[1,1]], "workspace_bytes": 0}}})",
         "not a list of at most 16 [type, value] pairs"},
        {R"({"forward": {"algorithm": 1, "math": 3, "workspace_bytes": 0, "graph": {"engine": 2000000, "knobs": [], "workspace_bytes": 0}}})",
         "\"forward.graph.engine\" is 2000000, more than 1048576"},
        {R"([1, 2])", "is [1,2], not an object"},
    };
    for (const Bad& b : bad) {
        p.clear();
        const std::string t = std::string(R"({"format": "towerbench cuDNN algorithm choices", "version": 1, "choices": {"k": )") +
                              b.entry + "}}";
        CHECK(tb::parseChoices(t, "F", p).empty() && mentions(p, "the entry \"k\"", b.said), "%s -> %s", b.entry,
              p.empty() ? "(nothing said)" : p[0].c_str());
    }
    p.clear();
    tb::parseChoices(std::string(R"({"format": "towerbench cuDNN algorithm choices", "version": 1, "choices": {")") +
                         std::string(tb::kMaxChoiceKeyChars + 1, 'k') + R"(": {"failure": "x"}, "f": {"failure": ")" +
                         std::string(tb::kMaxChoiceFailureChars + 1, 'x') + "\"}}}",
                     "F", p);
    CHECK(mentions(p, "a key of 513 characters (1 to 512)") && mentions(p, "longer than 1000 characters"),
          "a key or a failure too long is refused");
    std::string many = R"({"format": "towerbench cuDNN algorithm choices", "version": 1, "choices": {)";
    for (int i = 0; i < 10; ++i) many.append(i ? "," : "").append("\"k").append(std::to_string(i)).append("\": 0");
    p.clear();
    tb::parseChoices(many + "}}", "F", p);
    CHECK(p.size() == 4 && mentions(p, "F: 7 more entries refused alike"), "ten bad entries: three named, seven counted");

    // A store over a damaged file searches afresh, then rewrites the file whole.
    const std::string path = dir + "/damaged.json";
    writeAll(path, "{\"format\": \"towerbench cuDNN algorithm choices\", \"version\": 1, \"choi");
    AlgorithmStore store(path);
    CHECK(!store.find("k"), "a damaged file finds nothing");
    store.remember("k", made(4));
    p.clear();
    CHECK(tb::parseChoices(readAll(path), path, p).size() == 1 && p.empty(), "remember() leaves a whole file");

    // Too large: refused by its size, before anything is read (a sparse file: no disk used).
    const std::string huge = dir + "/huge.json";
    writeAll(huge, "{");
    fs::resize_file(huge, tb::kMaxChoicesFileBytes + 1);
    AlgorithmStore big(huge);
    CHECK(!big.find("k"), "a file over 16 MiB finds nothing");
}

void unwritable(const std::string& dir) {
    writeAll(dir + "/a-file", "x");
    AlgorithmStore store(dir + "/a-file/choices.json");  // its folder would have to be a file
    store.remember("k", made(7));
    CHECK(store.find("k") && *store.find("k") == made(7), "a choice that cannot be written is kept for the process");
}

void wherePath() {
    ::setenv("TOWERBENCH_ALGORITHM_CACHE", "/x/choices.json", 1);
    CHECK(tb::algorithmStorePath() == "/x/choices.json", "TOWERBENCH_ALGORITHM_CACHE names the file");
    ::setenv("TOWERBENCH_ALGORITHM_CACHE", "off", 1);
    CHECK(tb::algorithmStorePath().empty(), "\"off\" keeps nothing");
    ::unsetenv("TOWERBENCH_ALGORITHM_CACHE");
    ::setenv("XDG_CACHE_HOME", "/c", 1);
    CHECK(tb::algorithmStorePath() == "/c/towerbench/cudnn-algorithms.json", "else XDG_CACHE_HOME");
    ::unsetenv("XDG_CACHE_HOME");
    ::setenv("HOME", "/h", 1);
    CHECK(tb::algorithmStorePath() == "/h/.cache/towerbench/cudnn-algorithms.json", "else ~/.cache");
    ::unsetenv("HOME");
    CHECK(tb::algorithmStorePath().empty(), "no home: nothing kept");
}

}  // namespace

int main() {
    const std::string dir = (fs::temp_directory_path() / ("tst_algorithm_store-" + std::to_string(::getpid()))).string();
    fs::create_directories(dir);
    roundTrip(dir);
    twoProcesses(dir);
    damagedFiles(dir);
    unwritable(dir);
    wherePath();
    fs::remove_all(dir);
    return tbcheck::exitStatus();
}
