// A run's predictions.json as the window reads it for a followed run (RunFolder::readPredictions)
// over a small test set of five 1x2x2 images of three classes (labels 0 1 2 0 1). Input: the file.
#include "engine/run_folder.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const tb::Dataset test = [] {
        tb::Dataset d;
        d.name = "fuzz test";
        d.channels = 1;
        d.height = d.width = 2;
        d.numClasses = 3;
        d.labels = {0, 1, 2, 0, 1};
        d.pixels.assign(d.labels.size() * d.sampleSize(), 7);
        return d;
    }();
    const std::string run = fuzz::scratch() + "/run-1";
    std::filesystem::create_directories(run);
    fuzz::writeFile(run + "/predictions.json", std::string_view(reinterpret_cast<const char*>(data), size));
    TB_FUZZ_REFUSALS_ARE_FINE((void)tb::RunFolder::readPredictions(run, 7, test));
    return 0;
}
