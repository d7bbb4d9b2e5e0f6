// CIFAR-10 binary batches read as `--data cifar10:DIR` reads them. Input: test_batch.bin, then
// data_batch_1.bin .. data_batch_5.bin, cut by fuzz::kCut (missing ones are left out).
#include "data/dataset.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string& dir = fuzz::scratch();
    const auto parts = fuzz::split(data, size, 6);
    for (size_t i = 0; i < parts.size(); ++i)
        fuzz::writeFile(dir + (i == 0 ? std::string("/test_batch.bin") : "/data_batch_" + std::to_string(i) + ".bin"),
                        parts[i]);
    TB_FUZZ_REFUSALS_ARE_FINE(tb::loadData("cifar10:" + dir, 2, 1));
    return 0;
}
