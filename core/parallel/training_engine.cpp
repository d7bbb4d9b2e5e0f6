#include "parallel/training_engine.hpp"

#include "util/error.hpp"

namespace tb {

void TrainingEngine::runAsync(int64_t, int64_t, const std::function<void(Batch&)>&, RunControl&,
                              const std::function<void(const TowerStep&)>&) {
    throw Error("this engine's lanes train in steps, not free-running");
}

}  // namespace tb
