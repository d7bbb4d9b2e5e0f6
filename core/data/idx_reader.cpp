// IDX reader (the MNIST / Fashion-MNIST file format), plain or gzip-compressed.
// Every header field is checked before anything is allocated, and no allocation is ever sized
// from a header count alone: a plain file is checked against its size on disk, and a gzip stream
// is read in chunks so a lying header meets "truncated" after at most one chunk.
// Bytes after the data the header declares are an error (a sign of a mismatched or corrupt file).
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "data/dataset.hpp"
#include "util/error.hpp"

namespace tb {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // u8 data, 3 dims (n, rows, cols)
constexpr uint32_t kLabelsMagic = 0x00000801;  // u8 data, 1 dim (n)
constexpr uint64_t kMaxCount = 100'000'000;    // far above any real IDX set; stops absurd headers
constexpr int kMaxSide = 4096;
constexpr size_t kChunk = size_t(1) << 20;     // gzip streams are inflated 1 MiB at a time
// Deflate cannot expand data by more than about 1032:1, so a .gz file of S bytes holds at most
// ~1032*S bytes; it bounds what we reserve up front (growth beyond it happens as data arrives).
constexpr uint64_t kMaxDeflateRatio = 1032;
constexpr uint64_t kMaxReserve = uint64_t(256) << 20;

std::string hex32(uint32_t v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%08x", v);
    return buf;
}

// One open IDX file, plain or gzip. A gzip stream is inflated by hand rather than through
// gzread, which takes a stream cut before its trailer (CRC-32 and length) for a whole one and
// skips whatever follows the last member: here the stream must end in its checked trailer, and
// after it only another gzip member may follow.
class IdxFile {
public:
    IdxFile(const std::string& path, const CancelCheck& cancelled) : path_(path), cancelled_(cancelled) {
        std::error_code ec;
        if (!std::filesystem::is_regular_file(path, ec))
            throw Error(path + ": file not found");
        diskSize_ = std::filesystem::file_size(path, ec);
        if (ec) throw Error(path + ": cannot read the file size (" + ec.message() + ")");
        file_.reset(std::fopen(path.c_str(), "rb"));
        if (!file_) throw Error(path + ": cannot open the file");
        in_.resize(kInput);
        fill();
        plain_ = !startsMember();
        if (!plain_ && inflateInit2(&z_, 15 + 16) != Z_OK)  // 16: gzip wrapper only
            throw Error(path + ": cannot start gzip decompression");
        inflating_ = !plain_;
    }
    ~IdxFile() {
        if (!plain_) inflateEnd(&z_);
    }
    IdxFile(const IdxFile&) = delete;
    IdxFile& operator=(const IdxFile&) = delete;

    const std::string& path() const { return path_; }
    bool plain() const { return plain_; }
    uint64_t diskSize() const { return diskSize_; }

    // Reads up to n bytes; returns how many arrived before the end of the data (a gzip stream
    // cut short ends early too, so callers report "truncated"); corrupt gzip data throws.
    size_t read(void* dst, size_t n) {
        auto* p = static_cast<unsigned char*>(dst);
        size_t got = 0;
        while (got < n) {
            throwIfCancelled(cancelled_);
            const size_t ask = std::min(n - got, kChunk);
            const size_t r = plain_ ? readPlain(p + got, ask) : inflateSome(p + got, ask);
            if (r == 0) break;
            got += r;
        }
        return got;
    }

    uint32_t readU32(const char* what) {
        unsigned char b[4];
        if (read(b, 4) != 4)
            throw Error(path_ + ": truncated: the file ends inside the IDX header (" + what + ")");
        return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
    }

    // Reads exactly `bytes` bytes of data into out, growing it as data arrives. `describe` is the
    // header's claim ("60000 images of 28x28") and `kind` ("image", "label") names the data, for
    // the truncation message.
    void readData(std::vector<uint8_t>& out, uint64_t bytes, uint64_t headerBytes, const std::string& describe,
                  const char* kind) {
        if (plain_) {
            uint64_t have = diskSize_ > headerBytes ? diskSize_ - headerBytes : 0;
            if (have < bytes)
                throw Error(path_ + ": truncated: header says " + describe + " but the file ends after " +
                            std::to_string(have) + " bytes of " + kind + " data");
            out.resize(size_t(bytes));
            size_t got = read(out.data(), out.size());
            if (got != out.size())
                throw Error(path_ + ": truncated: header says " + describe + " but reading stopped after " +
                            std::to_string(got) + " bytes of " + kind + " data");
            return;
        }
        out.clear();
        out.reserve(size_t(std::min({bytes, diskSize_ * kMaxDeflateRatio, kMaxReserve})));
        uint64_t have = 0;
        while (have < bytes) {
            size_t ask = size_t(std::min<uint64_t>(bytes - have, kChunk));
            out.resize(size_t(have) + ask);
            size_t got = read(out.data() + have, ask);
            have += got;
            if (got < ask)
                throw Error(path_ + ": truncated: header says " + describe + " but the file ends after " +
                            std::to_string(have) + " bytes of " + kind + " data");
        }
    }

    // Rejects bytes beyond the declared data (they mean the header and the data disagree), and a
    // gzip stream that does not end in its trailer or is followed by anything but gzip members.
    void expectEnd(const std::string& describe) {
        unsigned char extra[1];
        if (read(extra, 1) != 0)
            throw Error(path_ + ": unexpected bytes after the " + describe + " that the header declares");
        if (plain_) return;
        if (cutShort_)
            throw Error(path_ + ": truncated: the gzip stream ends before its trailer (CRC-32 and length)");
        if (trailing_ > 0)
            throw Error(path_ + ": " + std::to_string(trailing_) + " bytes of other data after the gzip stream");
    }

private:
    static constexpr size_t kInput = 256 * 1024;  // compressed bytes read at a time

    // Tops up the input buffer (its unread part moved to the front); false at the end of the file.
    bool fill() {
        if (z_.avail_in > 0 && z_.next_in != in_.data()) std::memmove(in_.data(), z_.next_in, z_.avail_in);
        const size_t r = std::fread(in_.data() + z_.avail_in, 1, in_.size() - z_.avail_in, file_.get());
        if (r == 0 && std::ferror(file_.get())) throw Error(path_ + ": read error");
        z_.next_in = in_.data();
        z_.avail_in += uInt(r);
        return r > 0;
    }
    bool startsMember() const { return z_.avail_in >= 2 && z_.next_in[0] == 0x1f && z_.next_in[1] == 0x8b; }

    size_t readPlain(unsigned char* dst, size_t n) {
        size_t got = std::min<size_t>(n, z_.avail_in);  // what fill() read first
        std::memcpy(dst, z_.next_in, got);
        z_.next_in += got;
        z_.avail_in -= uInt(got);
        if (got < n) got += std::fread(dst + got, 1, n - got, file_.get());
        if (got < n && std::ferror(file_.get())) throw Error(path_ + ": read error");
        return got;
    }

    // Inflates up to n bytes; 0 at the end of the last member or where the stream is cut short.
    size_t inflateSome(unsigned char* dst, size_t n) {
        z_.next_out = dst;
        z_.avail_out = uInt(n);
        while (z_.avail_out > 0 && inflating_) {
            if (z_.avail_in == 0 && !fill()) {
                cutShort_ = true;  // the file ended inside a member
                inflating_ = false;
                break;
            }
            const int r = inflate(&z_, Z_NO_FLUSH);
            if (r == Z_STREAM_END) {
                // Its CRC-32 and length matched. Another member may follow; anything else may not.
                if (z_.avail_in < 2) fill();
                if (startsMember()) {
                    inflateReset(&z_);
                    continue;
                }
                inflating_ = false;
                trailing_ = z_.avail_in;
                z_.avail_in = 0;
                while (fill()) {
                    trailing_ += z_.avail_in;
                    z_.avail_in = 0;
                }
                break;
            }
            // Z_BUF_ERROR: no progress; fine when the input ran dry (filled above), not otherwise.
            if (r != Z_OK && (r != Z_BUF_ERROR || z_.avail_in > 0))
                throw Error(path_ + ": corrupt gzip data (" + std::string(z_.msg ? z_.msg : "zlib error " + std::to_string(r)) +
                            ")");
        }
        return n - z_.avail_out;
    }

    std::string path_;
    CancelCheck cancelled_;
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_{nullptr, &std::fclose};
    std::vector<unsigned char> in_;  // (kInput) compressed input; z_.next_in / avail_in: its unread part
    z_stream z_{};
    bool plain_ = false;
    bool inflating_ = false;  // gzip: inside a member
    bool cutShort_ = false;   // gzip: the file ended inside a member
    uint64_t trailing_ = 0;   // gzip: bytes after the last member that are no member
    uint64_t diskSize_ = 0;
};

// Reads and checks a header's magic number and dimension count.
void checkMagic(IdxFile& f, uint32_t expected, const char* kind) {
    uint32_t magic = f.readU32("magic number");
    if (magic != expected)
        throw Error(f.path() + ": wrong magic number " + hex32(magic) + " (expected " + hex32(expected) +
                    " for IDX " + kind + ")");
}

uint32_t readCount(IdxFile& f, const char* kind) {
    uint32_t n = f.readU32("count");
    if (n == 0) throw Error(f.path() + ": the header declares 0 " + kind);
    if (n > kMaxCount)
        throw Error(f.path() + ": the header declares " + std::to_string(n) + " " + kind + ", more than the limit of " +
                    std::to_string(kMaxCount));
    return n;
}

// An images file's header after its magic number: the count and the (checked) image size.
struct ImagesHeader {
    uint32_t count, rows, cols;
};
ImagesHeader readImagesHeader(IdxFile& f) {
    checkMagic(f, kImagesMagic, "images");
    const uint32_t n = readCount(f, "images");
    const uint32_t rows = f.readU32("rows");
    const uint32_t cols = f.readU32("cols");
    if (rows < 1 || rows > uint32_t(kMaxSide) || cols < 1 || cols > uint32_t(kMaxSide))
        throw Error(f.path() + ": image size " + std::to_string(rows) + "x" + std::to_string(cols) +
                    " is outside 1..4096 rows and columns");
    return {n, rows, cols};
}

// DIR/STEM, or DIR/STEM.gz where only that exists.
std::string idxFileIn(const std::string& dir, const std::string& stem) {
    const std::string base = dir + "/" + stem;
    if (fileExists(base)) return base;
    if (fileExists(base + ".gz")) return base + ".gz";
    throw Error(dir + ": no " + stem + "[.gz] found");
}

void checkDirectory(const std::string& dir) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) throw Error(dir + ": no such directory");
}

}  // namespace

Dataset readIdx(const std::string& imagesPath, const std::string& labelsPath, const std::string& name,
                const CancelCheck& cancelled) {
    // Both headers are read and cross-checked before either data block is allocated.
    IdxFile images(imagesPath, cancelled);
    const auto [n, rows, cols] = readImagesHeader(images);

    IdxFile labels(labelsPath, cancelled);
    checkMagic(labels, kLabelsMagic, "labels");
    uint32_t nLabels = readCount(labels, "labels");
    if (nLabels != n)
        throw Error(imagesPath + " has " + std::to_string(n) + " images but " + labelsPath + " has " +
                    std::to_string(nLabels) + " labels");

    Dataset d;
    d.name = name;
    d.channels = 1;
    d.height = int(rows);
    d.width = int(cols);

    const std::string imgWhat = std::to_string(n) + " images of " + std::to_string(rows) + "x" + std::to_string(cols);
    const std::string lblWhat = std::to_string(n) + " labels";
    // Labels first: they are small, so a truncated label file fails before inflating the images.
    std::vector<uint8_t> raw;
    labels.readData(raw, n, 8, lblWhat, "label");
    labels.expectEnd(lblWhat);
    images.readData(d.pixels, uint64_t(n) * rows * cols, 16, imgWhat, "image");
    images.expectEnd(imgWhat);

    // Labels are u8, so numClasses = max + 1 is at most 256; sets with more than 10 classes
    // (EMNIST letters, say) are allowed.
    d.labels.assign(raw.begin(), raw.end());
    d.numClasses = int(*std::max_element(raw.begin(), raw.end())) + 1;
    return d;
}

Dataset readIdxDir(const std::string& dir, bool train, const CancelCheck& cancelled) {
    checkDirectory(dir);
    const std::string prefix = train ? "train" : "t10k";
    const std::string imagesPath = idxFileIn(dir, prefix + "-images-idx3-ubyte");
    const std::string labelsPath = idxFileIn(dir, prefix + "-labels-idx1-ubyte");
    std::string base = std::filesystem::path(dir).lexically_normal().filename().string();
    if (base.empty()) base = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
    return readIdx(imagesPath, labelsPath, base + (train ? " train" : " test"), cancelled);
}

ImageShape idxDirImageShape(const std::string& dir) {
    checkDirectory(dir);
    IdxFile images(idxFileIn(dir, "train-images-idx3-ubyte"), {});
    const ImagesHeader h = readImagesHeader(images);
    return {1, int(h.rows), int(h.cols)};
}

}  // namespace tb
