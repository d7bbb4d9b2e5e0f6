// IDX files (MNIST format, plain or gzip) read as `--data idx:DIR` reads them, train and test
// checked against each other. Input: train images, train labels, test images, test labels, cut
// by fuzz::kCut.
#include "data/dataset.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const char* kNames[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                   "t10k-labels-idx1-ubyte"};
    const std::string& dir = fuzz::scratch();
    const auto parts = fuzz::split(data, size, 4);
    for (size_t i = 0; i < parts.size(); ++i) fuzz::writeFile(dir + "/" + kNames[i], parts[i]);
    TB_FUZZ_REFUSALS_ARE_FINE(tb::loadData("idx:" + dir, 2, 1));
    return 0;
}
