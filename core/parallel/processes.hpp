// What the run's processes (mpirun) agree on before training: the same plan, whose towers' chunks
// the reductions pair up.
#pragma once
#include <string>

#include "comm/process_group.hpp"
#include "parallel/deployment_plan.hpp"

namespace tb {

// Every process must have made the same plan (a plan of --towers auto follows the machine's
// cores); a collective whose text, sent by the chief, starts with the tower count, which
// parameter-server processes read (towersOfPlan).
void checkSamePlan(ProcessGroup& processes, const DeploymentPlan& plan, int chief);
// The tower count at the start of checkSamePlan's text.
int towersOfPlan(const std::string& text);

}  // namespace tb
