// The streamed input pipeline's own rate (data/record_stream.hpp): TFRecord shards read, shuffled,
// decoded and transformed into training batches, per loader thread, for raw pixels (what convert
// writes) and for JPEG bytes in image_raw (as many tf.train.Examples hold them). The shards are
// made here from the shipped Fashion-MNIST slice, or --data DIR streams a set of your own (e.g.
// `towerbench-run convert fashion-mnist tfrecord:DIR --shards 16 --repeat 45`, 2.4 GB).
//     tb_bench_stream [--data DIR] [--batches N]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_machine.hpp"
#include "data/image_codec.hpp"
#include "data/record_stream.hpp"
#include "io/tfrecord.hpp"
#include "tensorflow/example.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// Shards of the slice's images as JPEG q90 Examples (image_raw, label), `repeat` times over.
std::vector<std::string> jpegShards(const tb::Dataset& d, const std::string& dir, int shards, int repeat) {
    std::vector<std::string> files;
    std::vector<std::unique_ptr<tb::TFRecordWriter>> out;
    for (int s = 0; s < shards; ++s) {
        files.push_back(dir + "/train-" + std::to_string(s) + ".tfrecords");
        out.push_back(std::make_unique<tb::TFRecordWriter>(files.back()));
    }
    tb::Example e;
    size_t k = 0;
    for (int r = 0; r < repeat; ++r)
        for (size_t i = 0; i < d.size(); ++i, ++k) {
            const tb::Image im{d.height, d.width, d.channels,
                               std::vector<uint8_t>(d.pixels.begin() + std::ptrdiff_t(i * d.sampleSize()),
                                                    d.pixels.begin() + std::ptrdiff_t((i + 1) * d.sampleSize()))};
            e.clear();
            e.setBytes("image_raw", tb::encodeJpeg(im, 90));
            e.setInt64("label", d.labels[i]);
            out[k % size_t(shards)]->write(e.serialize());
        }
    for (auto& o : out) o->flush();
    return files;
}

void rateOf(const char* what, const std::vector<std::string>& files, int batches) {
    const tb::StreamedSet set = tb::openStreamedSet(files, {}, what, {}, 0);
    for (int threads : {1, 2}) {
        tb::PipelineOptions o;
        o.batchSize = 128;
        o.prefetch = 0;  // made on this thread and its team: the pipeline's own rate
        o.channelsLast = true;
        o.loaderThreads = threads;
        tb::RecordStream stream(set, o);
        tb::Batch b;
        stream.next(b);  // the shuffle buffer's first fill is a reading of 10,000 records, not steady
        const auto t0 = Clock::now();
        for (int i = 0; i < batches; ++i) stream.next(b);
        const double s = std::chrono::duration<double>(Clock::now() - t0).count(), n = double(batches) * 128;
        std::printf("| %s | %zu | %.2f GB | %d | %.0f | %.0f |\n", what, files.size(), double(set.bytes()) / 1e9, threads,
                    n / s, n / s / threads);
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::string data;
    int batches = 2000;
    for (int i = 1; i + 1 < argc; ++i) {
        if (std::strcmp(argv[i], "--data") == 0) data = argv[i + 1];
        if (std::strcmp(argv[i], "--batches") == 0) batches = std::max(1, std::atoi(argv[i + 1]));
    }
    std::printf("%s\n", tbbench::machineLine(2).c_str());
    std::printf("batches of 128 through RecordStream (shuffle buffer 10,000, channels last), %d batches each\n\n", batches);
    std::printf("| shards | files | size | loader threads | images/s | per thread |\n|---|---:|---:|---:|---:|---:|\n");
    if (!data.empty()) {
        rateOf(("raw, " + data).c_str(), tb::tfrecordFiles(data, "train"), batches);
        return 0;
    }
    const tb::DataSplits slice = tb::loadData("idx:" TB_SOURCE_DIR "/samples/fashion-mnist-slice", 0, 1);
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "tb-bench-stream";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir / "raw");
    std::filesystem::create_directories(dir / "jpeg");
    const int repeat = std::max(1, batches * 128 / int(slice.train.size()) + 1);
    rateOf("raw 1x28x28", tb::writeTFRecordShards(slice.train, (dir / "raw").string(), "train", 16, repeat, 1), batches);
    rateOf("JPEG q90 1x28x28", jpegShards(slice.train, (dir / "jpeg").string(), 16, repeat), batches);
    std::filesystem::remove_all(dir);
    return 0;
}
