// CIFAR-10 binary reader: data_batch_1..5.bin (train) or test_batch.bin (test), each a run of
// 3073-byte records (1 label byte, then 1024 R, 1024 G, 1024 B bytes, rows top to bottom).
// File sizes are checked before anything is allocated, so the allocation is bounded by the disk.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "data/dataset.hpp"
#include "util/error.hpp"

namespace tb {
namespace {

constexpr int kSide = 32;
constexpr size_t kImageBytes = 3 * kSide * kSide;  // 3072: (3, 32, 32)
constexpr size_t kRecordBytes = 1 + kImageBytes;   // 3073
constexpr int kClasses = 10;

}  // namespace

Dataset readCifar10(const std::string& dir, bool train, const CancelCheck& cancelled) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) throw Error(dir + ": no such directory");
    // Accept both the folder holding the .bin files and its parent from the official tarball.
    std::string root = dir;
    const char* first = train ? "data_batch_1.bin" : "test_batch.bin";
    if (!fileExists(root + "/" + first) && fileExists(root + "/cifar-10-batches-bin/" + first))
        root += "/cifar-10-batches-bin";

    std::vector<std::string> files;
    if (train)
        for (int i = 1; i <= 5; ++i) files.push_back(root + "/data_batch_" + std::to_string(i) + ".bin");
    else
        files.push_back(root + "/test_batch.bin");

    // Pass 1: every file exists and holds whole records; the total sizes the allocation.
    std::vector<size_t> records;
    size_t total = 0;
    for (const std::string& f : files) {
        if (!fileExists(f)) throw Error(f + ": CIFAR-10 batch file not found");
        uintmax_t bytes = std::filesystem::file_size(f, ec);
        if (ec) throw Error(f + ": cannot read the file size (" + ec.message() + ")");
        if (bytes == 0 || bytes % kRecordBytes != 0)
            throw Error(f + ": size " + std::to_string(bytes) +
                        " bytes is not a non-zero multiple of the 3073-byte CIFAR-10 record");
        records.push_back(size_t(bytes / kRecordBytes));
        total += records.back();
    }

    Dataset d;
    d.name = std::string("cifar10") + (train ? " train" : " test");
    d.channels = 3;
    d.height = kSide;
    d.width = kSide;
    d.numClasses = kClasses;
    d.pixels.resize(total * kImageBytes);
    d.labels.resize(total);

    // Pass 2: read each file whole and split its records into labels and (3, 32, 32) images.
    std::vector<unsigned char> buf;
    size_t at = 0;
    for (size_t fi = 0; fi < files.size(); ++fi) {
        throwIfCancelled(cancelled);
        const std::string& f = files[fi];
        buf.resize(records[fi] * kRecordBytes);
        std::ifstream in(f, std::ios::binary);
        if (!in || !in.read(reinterpret_cast<char*>(buf.data()), std::streamsize(buf.size())))
            throw Error(f + ": cannot read the file");
        for (size_t r = 0; r < records[fi]; ++r, ++at) {
            const unsigned char* rec = buf.data() + r * kRecordBytes;
            if (rec[0] >= kClasses)
                throw Error(f + ": record " + std::to_string(r) + " has label " + std::to_string(int(rec[0])) +
                            " (CIFAR-10 labels are 0..9)");
            d.labels[at] = rec[0];
            std::copy(rec + 1, rec + kRecordBytes, d.pixels.begin() + std::ptrdiff_t(at * kImageBytes));
        }
    }
    return d;
}

}  // namespace tb
