// The input pipeline's own rate for image files, per thread: PNG and JPEG files decoded and
// fitted to the model's input (data/image_codec.hpp, what --data folder:DIR and encoded TFRecord
// Examples cost), against raw pixels through InputPipeline (IDX, CIFAR binary, raw TFRecords).
// The files are made from the shipped Fashion-MNIST slice (28x28 gray) and, for a larger image,
// the same pixels scaled to 3x96x96 colour; each file's bytes are read into memory first, so the
// rate is the decoder's, not the disk's.
//     tb_bench_image_decode [--repeat N]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_machine.hpp"
#include "data/dataset.hpp"
#include "data/image_codec.hpp"
#include "data/pipeline.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Images of the set as (h, w, c) tb::Image, optionally resized to side x side colour.
std::vector<tb::Image> images(const tb::Dataset& d, int side, int channels) {
    std::vector<tb::Image> out;
    for (size_t i = 0; i < d.size(); ++i) {
        tb::Image im{d.height, d.width, 1, std::vector<uint8_t>(d.pixels.begin() + std::ptrdiff_t(i * d.sampleSize()),
                                                                 d.pixels.begin() + std::ptrdiff_t((i + 1) * d.sampleSize()))};
        if (side != d.height || channels != 1) {
            tb::Image big{side, side, channels, std::vector<uint8_t>(size_t(side) * side * channels)};
            std::vector<uint8_t> planar(size_t(side) * side * channels);
            tb::imageToSample(im, channels, side, side, planar.data());
            for (int p = 0; p < side * side; ++p)
                for (int ch = 0; ch < channels; ++ch)
                    big.pixels[size_t(p) * channels + ch] = uint8_t(planar[size_t(ch) * side * side + p] * (ch + 1) / channels);
            im = std::move(big);
        }
        out.push_back(std::move(im));
    }
    return out;
}

void rateOf(const char* what, const std::vector<std::string>& files, int c, int h, int w, int repeat) {
    std::vector<uint8_t> sample(size_t(c) * h * w);
    size_t bytes = 0;
    for (const std::string& f : files) bytes += f.size();
    const auto t0 = Clock::now();
    for (int r = 0; r < repeat; ++r)
        for (const std::string& f : files) {
            const tb::Image im = tb::decodeImage(reinterpret_cast<const uint8_t*>(f.data()), f.size(), what);
            tb::imageToSample(im, c, h, w, sample.data());
        }
    const double s = seconds(t0), n = double(files.size()) * repeat;
    std::printf("| %s | %zu | %.0f | %.1f |\n", what, bytes / files.size(), n / s, 1e6 * s / n);
}

}  // namespace

int main(int argc, char** argv) {
    int repeat = 3;
    for (int i = 1; i + 1 < argc; ++i)
        if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::max(1, std::atoi(argv[i + 1]));
    std::printf("%s\n", tbbench::machineLine(1).c_str());
    const tb::DataSplits slice = tb::loadData("idx:" TB_SOURCE_DIR "/samples/fashion-mnist-slice", 0, 1);
    std::printf("one thread; %zu images of the shipped Fashion-MNIST slice, each file in memory, %d passes\n\n",
                slice.train.size(), repeat);
    std::printf("| input (to the model's input) | bytes per file | images/s | us per image |\n|---|---:|---:|---:|\n");
    for (const auto& [side, channels] : {std::pair{28, 1}, std::pair{96, 3}}) {
        const std::vector<tb::Image> ims = images(slice.train, side, channels);
        std::vector<std::string> png, jpeg;
        for (const tb::Image& im : ims) {
            png.push_back(tb::encodePng(im));
            jpeg.push_back(tb::encodeJpeg(im, 90));
        }
        const std::string size = std::to_string(channels) + "x" + std::to_string(side) + "x" + std::to_string(side);
        rateOf(("PNG " + size).c_str(), png, channels, side, side, repeat);
        rateOf(("JPEG q90 " + size).c_str(), jpeg, channels, side, side, repeat);
        // Raw pixels: InputPipeline's own per-sample work (scale to float, channels last), no decoding.
        tb::Dataset raw;
        raw.name = "raw";
        raw.channels = channels, raw.height = raw.width = side, raw.numClasses = 10;
        for (const tb::Image& im : ims) {
            std::vector<uint8_t> planar(size_t(channels) * side * side);
            tb::imageToSample(im, channels, side, side, planar.data());
            raw.pixels.insert(raw.pixels.end(), planar.begin(), planar.end());
            raw.labels.push_back(0);
        }
        tb::PipelineOptions o;
        o.batchSize = 128;
        o.prefetch = 0;
        o.channelsLast = true;
        tb::InputPipeline pipe(raw, o);
        tb::Batch b;
        const int batches = int(raw.size()) * repeat / 128;
        const auto t0 = Clock::now();
        for (int i = 0; i < batches; ++i) pipe.next(b);
        const double s = seconds(t0), n = double(batches) * 128;
        std::printf("| raw pixels %s (InputPipeline) | %zu | %.0f | %.1f |\n", size.c_str(), raw.sampleSize(), n / s, 1e6 * s / n);
    }
    return 0;
}
