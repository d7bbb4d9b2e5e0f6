// --stages as a user types it, read against mnist_cnn's layers: whatever the text, a refusal
// (tb::Error) or a plan whose stages cover every layer once, in order, and whose description
// reads back as the same plan; a balanced plan's split by the balancer, checked the same way.
#include <cstdlib>

#include "fuzz_support.hpp"
#include "parallel/stage_plan.hpp"

namespace {

const std::vector<std::string> kLayers = {"conv1", "relu1",    "pool1", "conv2", "relu4",
                                          "pool2", "flatten6", "fc1",   "relu8", "logits"};

void checkCover(const std::vector<std::pair<int, int>>& ranges) {
    int next = 0;
    for (const auto& [first, last] : ranges) {
        if (first != next || last < first) std::abort();
        next = last + 1;
    }
    if (next != int(kLayers.size())) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    TB_FUZZ_REFUSALS_ARE_FINE({
        const tb::StagePlan plan = tb::parseStagePlan(text, kLayers);
        if (plan.count() < 2 || plan.count() > int(kLayers.size())) std::abort();
        std::vector<std::pair<int, int>> ranges;
        if (plan.balanced) {
            ranges = tb::balanceStages(std::vector<double>(kLayers.size(), 1.0), plan.count());
        } else {
            for (const tb::Stage& s : plan.stages) ranges.emplace_back(s.first, s.last);
            if (tb::parseStagePlan(plan.describe(kLayers), kLayers).describe(kLayers) != plan.describe(kLayers))
                std::abort();
        }
        checkCover(ranges);
    });
    return 0;
}
