// Streamed TFRecord input (--data tfrecord:DIR --stream true): the open pass over the shards, then
// a RecordStream of them (interleave, a process's share, the shuffle buffer, a resume's replay,
// decoding on loader threads). The input's first byte picks the stream's options; the rest is
// up to three shards separated by kCut.
#include "fuzz_support.hpp"
#include "data/record_stream.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const uint8_t pick = data[0];
    const std::string dir = fuzz::scratch();
    std::vector<std::string> files;
    for (std::string_view part : fuzz::split(data + 1, size - 1, 3)) {
        files.push_back(dir + "/train-" + std::to_string(files.size()) + ".tfrecords");
        fuzz::writeFile(files.back(), part);
    }
    TB_FUZZ_REFUSALS_ARE_FINE({
        tb::StreamedSet set = tb::openStreamedSet(files, {}, "fuzz", {}, 1 + (pick & 1));
        if (pick & 2) (void)set.takeTail(std::min<uint64_t>(set.size() / 2, 3), "validation");
        tb::PipelineOptions o;
        o.batchSize = 1 + (pick >> 2 & 3);
        o.shuffleBuffer = (pick & 16) ? 2 : 0;
        o.sliceCount = 1 + (pick >> 5 & 1);
        o.sliceIndex = o.sliceCount - 1;
        o.skipSamples = (pick & 64) ? 5 : 0;
        o.augment = (pick & 128) != 0;
        o.pad = o.augment ? 1 : 0;
        o.cropH = o.cropW = 0;
        o.prefetch = pick & 1;
        o.loaderThreads = 1 + (pick >> 1 & 1);
        tb::RecordStream stream(set, o);
        tb::Batch b;
        for (int i = 0; i < 4; ++i) stream.next(b);
    });
    return 0;
}
