// tst_tower_transfers: towers that share no memory with the variables' holder (every pull of the
// variables and push of the gradients an explicit copy, as GPU towers do) train exactly as towers
// that read the holder in place. Runs on CPU towers, so the copy path is tested without a GPU.
#include <cmath>
#include <cstdio>

#include "engine/selftest.hpp"
#include "plain_check.hpp"

namespace {

void compare(const char* what, tb::DeploymentPlan plan) {
    tb::DeploymentPlan copies = plan;
    copies.transfers = tb::Transfers::Copies;
    const tb::LossComparison c = tb::compareTowerLosses(plan, copies, 8);
    const double params = c.paramsRelative;
    std::printf("%s: losses %.5f -> %.5f, worst relative difference %g, parameters %g\n", what, c.reference.front(),
                c.reference.back(), c.worstRelative, params);
    CHECK(c.worstRelative <= 1e-6, "%s: losses differ by %g", what, c.worstRelative);
    CHECK(params <= 1e-6, "%s: parameters differ by %g", what, params);
    CHECK(c.reference.back() < c.reference.front(), "%s: the loss did not fall", what);
}

}  // namespace

int main() {
    tb::DeploymentPlan p;
    p.towers = {tb::Device{tb::DeviceType::Cpu, 0}, tb::Device{tb::DeviceType::Cpu, 1}};
    p.batchPerTower = 8;
    compare("2 towers, variables on the cpu", p);
    p.variables = tb::VariablePlacement::Tower;
    p.variablesTower = 1;
    compare("2 towers, variables on cpu:1", p);
    tb::DeploymentPlan one;
    one.towers = {tb::Device{}};
    one.batchPerTower = 16;
    compare("1 tower", one);
    return tbcheck::exitStatus();
}
