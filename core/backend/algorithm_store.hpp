// The cuDNN algorithm choices a GPU backend searched for, kept on disk so that the next run of the
// same convolution shape on the same kind of GPU and cuDNN takes the same algorithms without
// searching again: its start is quicker, its speed does not depend on how a noisy search fell that
// day, and two runs of a deterministic configuration give the same losses bit for bit (two
// deterministic algorithms still sum in different orders). The CUDA module asks through
// cuda_module.h's TbAlgorithmStore; the file and its format are the program's.
//
// The file (JSON, written whole or not at all, merged under a lock so that processes sharing it
// keep each other's entries):
//   {"format": "towerbench cuDNN algorithm choices", "version": 1,
//    "choices": {KEY: {"forward": {"algorithm": 1, "math": 3, "layout": "nchw", "workspace_bytes": 0,
//                                  "graph": {"engine": 12, "knobs": [[1, 3], [5, 0]], "workspace_bytes": 0}},
//                      "backward_data": {..., "graph": "not faster"}, "backward_filter": {..., "graph": "none"}},
//                KEY: {"failure": "cuDNN has no tensor-core algorithm for ..."}}}
// KEY names the GPU, cuDNN's version, the shape and the rule (precision, math, determinism); the
// module makes it. "graph" (absent where not tried) is the engine of cuDNN's graph API that runs the
// direction instead, "not faster" where the legacy algorithm won, or "none" where no engine could
// run it (none listed that obeys the rule, builds and can be recorded; tried again with another
// cuDNN, whose version the key names, or once the entry is deleted). A damaged file or entry is said once on stderr and searched afresh.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tb {

// One direction of a convolution: cuDNN's algorithm number, its math (cudnnMathType_t), the
// activations' layout (0 NHWC, 1 NCHW; "layout" in the file, "nhwc" where absent) and the workspace
// it asked for; and whether an engine of cuDNN's graph API runs it instead (cuda_module.h's
// TbGraphEngine): graphState 0 not tried, 1 tried and not faster, 2 that engine, its knob choices
// (type, value) and its plan's workspace, 3 no engine could run it.
struct StoredAlgorithm {
    int algorithm = 0, math = 0, layout = 0;
    uint64_t workspaceBytes = 0;
    int graphState = 0;
    int64_t graphEngine = 0;
    std::vector<std::array<int64_t, 2>> graphKnobs;
    uint64_t graphWorkspaceBytes = 0;
    bool operator==(const StoredAlgorithm&) const = default;
};
// A shape's choices, or why it has none in that precision (a bf16 shape cuDNN cannot run).
struct StoredConvChoice {
    StoredAlgorithm forward, backwardData, backwardFilter;
    std::string failure;
    bool operator==(const StoredConvChoice&) const = default;
};
using StoredChoices = std::map<std::string, StoredConvChoice>;

// Limits on what a choices file may hold: nothing our module writes comes near them.
inline constexpr size_t kMaxChoicesFileBytes = size_t(16) << 20;
inline constexpr size_t kMaxChoiceKeyChars = 512, kMaxChoiceFailureChars = 1000;
inline constexpr int kMaxAlgorithmNumber = 63, kMaxMathNumber = 3;
inline constexpr uint64_t kMaxWorkspaceBytes = uint64_t(1) << 40;
inline constexpr uint64_t kMaxGraphEngine = 1 << 20, kMaxKnobType = 1 << 20;
inline constexpr size_t kMaxGraphKnobs = 16;  // cuda_module.h's TB_MAX_GRAPH_KNOBS

// The entries of a choices file's text. `origin` names it in `problems`, one sentence each for
// what was left out (the whole text where it is not such a file; else each bad entry, naming its
// key and field). Never throws on any input.
StoredChoices parseChoices(const std::string& text, const std::string& origin, std::vector<std::string>& problems);
std::string choicesText(const StoredChoices& choices);

class AlgorithmStore {
public:
    explicit AlgorithmStore(std::string path);
    // The choices for `key`: this process's, else the file's as it is now (another process may
    // have searched since).
    std::optional<StoredConvChoice> find(const std::string& key);
    // Keeps `choice` for `key` here and in the file (read again, merged and replaced under a lock).
    // A file that cannot be written is said once; the choice is still kept for this process.
    void remember(const std::string& key, const StoredConvChoice& choice);
    const std::string& path() const { return path_; }

private:
    void readFile();  // merges the file's entries under mutex_; says its problems once
    void say(const std::string& sentence);

    std::string path_;
    std::mutex mutex_;
    StoredChoices choices_;
    std::vector<std::string> said_;
};

// This process's store: TOWERBENCH_ALGORITHM_CACHE (a file, or "off"), else
// $XDG_CACHE_HOME/towerbench/cudnn-algorithms.json, else ~/.cache/towerbench/...; null when off or
// when there is no home to keep it in. Made on first use, never destroyed.
AlgorithmStore* processAlgorithmStore();
// Where processAlgorithmStore() keeps its file ("" when off), for messages and `selftest`.
std::string algorithmStorePath();

}  // namespace tb
