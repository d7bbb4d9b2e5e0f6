// Image files (--data folder:DIR; PNG through libpng, JPEG through libjpeg-turbo, EXIF orientation
// parsed by hand): decoded, then fitted to two model inputs (the same size or not, gray and RGB),
// as the folder reader does.
#include <vector>

#include "fuzz_support.hpp"
#include "data/image_codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    TB_FUZZ_REFUSALS_ARE_FINE({
        const tb::Image im = tb::decodeImage(data, size, "fuzz");
        std::vector<uint8_t> sample(3 * 28 * 28);
        tb::imageToSample(im, 1, 28, 28, sample.data());
        tb::imageToSample(im, 3, 7, 9, sample.data());
    });
    return 0;
}
