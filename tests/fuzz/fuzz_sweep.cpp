// A scaling sweep's folder as `towerbench-run predict` reads it (sweep.json), then the step-time
// model calibrated from each of its points predicting a few scenarios, on this machine's CPU
// towers and on GPU towers over links: whatever the file holds, a refusal or finite numbers.
#include <cmath>
#include <cstdlib>

#include "engine/scaling_sweep.hpp"
#include "engine/step_time_model.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string folder = fuzz::scratch() + "/sweep";
    std::filesystem::create_directories(folder);
    fuzz::writeFile(folder + "/sweep.json", std::string_view(reinterpret_cast<const char*>(data), size));
    TB_FUZZ_REFUSALS_ARE_FINE({
        const tb::SweepFile f = tb::ScalingSweep::readResults(folder);
        for (const tb::SweepResult& r : f.points) {
            const tb::Calibration cal = tb::Calibration::fromSweepPoint(r, f.params, f.host, f.cores);
            tb::Scenario s;
            s.towers = 4;
            s.cores = 2;
            for (const char* strategy : {"mean", "allreduce", "async", "average:4"}) {
                s.strategy = strategy;
                s.device.reset();
                TB_FUZZ_REFUSALS_ARE_FINE({
                    const tb::Prediction p = tb::predict(cal, tb::Assumptions{}, s);
                    if (std::isnan(p.examplesPerSec)) std::abort();  // a number the window would draw
                });
                s.device = tb::parseProcessor("h100", "--device");
                s.link = tb::parseLink("pcie4", "--link");
                TB_FUZZ_REFUSALS_ARE_FINE((void)tb::predict(cal, tb::Assumptions{}, s));
            }
        }
    });
    return 0;
}
