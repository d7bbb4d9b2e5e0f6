#include "parallel/processes.hpp"

#include <charconv>

#include "util/error.hpp"

namespace tb {

void checkSamePlan(ProcessGroup& processes, const DeploymentPlan& plan, int chief) {
    std::string kinds;  // "cpu", "gpu": the towers' collectives differ by kind
    for (const Device& d : plan.towers)
        kinds += std::string(kinds.empty() ? "" : ",") + (d.type == DeviceType::Cuda ? "gpu" : "cpu");
    const std::string mine = std::to_string(plan.towerCount()) + " towers of " + std::to_string(plan.batchPerTower) +
                             " (" + kinds + ")";
    const std::string leader = processes.broadcast(mine, chief);
    if (mine != leader)
        throw Error("--towers: " + mine + " examples here but " + leader + " on process " + std::to_string(chief) +
                    " (every process must run as many towers; give --towers as a list rather than auto)");
}

int towersOfPlan(const std::string& text) {
    int n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || n < 1) throw Error("processes: the chief sent no tower count (\"" + text + "\")");
    return n;
}

}  // namespace tb
