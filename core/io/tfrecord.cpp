#include "io/tfrecord.hpp"

#include <array>
#include <cerrno>
#include <cstring>

#include "util/error.hpp"

namespace tb {

namespace {

std::array<uint32_t, 256> makeTable() {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // 0x1EDC6F41 reflected
        t[i] = c;
    }
    return t;
}

void putLe(char* p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) p[i] = char((v >> (8 * i)) & 0xff);
}

uint64_t getLe(const unsigned char* p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

uint32_t crc32cTable(const unsigned char* p, size_t bytes, uint32_t crc) {
    static const std::array<uint32_t, 256> table = makeTable();
    for (size_t i = 0; i < bytes; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
// SSE4.2's crc32 instruction computes CRC-32C itself, eight bytes at a time: a streamed epoch's
// gigabytes are checked at memory speed rather than the table's byte a cycle.
__attribute__((target("sse4.2"))) uint32_t crc32cHardware(const unsigned char* p, size_t bytes, uint32_t crc) {
    uint64_t c = crc;
    for (; bytes >= 8; bytes -= 8, p += 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
    }
    uint32_t c32 = uint32_t(c);
    for (; bytes > 0; --bytes, ++p) c32 = __builtin_ia32_crc32qi(c32, *p);
    return c32;
}
#endif

}  // namespace

uint32_t crc32c(const void* data, size_t bytes, uint32_t crc) {
    const auto* p = static_cast<const unsigned char*>(data);
#if defined(__x86_64__) && defined(__GNUC__)
    static const bool hardware = __builtin_cpu_supports("sse4.2");
    if (hardware) return ~crc32cHardware(p, bytes, ~crc);
#endif
    return ~crc32cTable(p, bytes, ~crc);
}

TFRecordWriter::TFRecordWriter(const std::string& path, bool append) : path_(path) {
    file_ = std::fopen(path.c_str(), append ? "ab" : "wb");
    if (!file_) throw Error(path + ": cannot create (" + std::strerror(errno) + ")");
}

TFRecordWriter::~TFRecordWriter() {
    if (file_) std::fclose(file_);
}

void TFRecordWriter::write(const std::string& record) {
    char head[12];
    putLe(head, record.size(), 8);
    putLe(head + 8, maskedCrc32c(head, 8), 4);
    char tail[4];
    putLe(tail, maskedCrc32c(record.data(), record.size()), 4);
    if (std::fwrite(head, 1, 12, file_) != 12 || std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
        std::fwrite(tail, 1, 4, file_) != 4)
        throw Error(path_ + ": write failed (" + std::strerror(errno) + ")");
}

void TFRecordWriter::flush() {
    if (std::fflush(file_) != 0) throw Error(path_ + ": write failed (" + std::strerror(errno) + ")");
}

TFRecordReader::TFRecordReader(const std::string& path) : path_(path) {
    file_ = std::fopen(path.c_str(), "rb");
    if (!file_) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
    std::setvbuf(file_, nullptr, _IOFBF, size_t(1) << 20);  // streamed shards: few, large reads
    if (std::fseek(file_, 0, SEEK_END) != 0) throw Error(path + ": cannot read its size");
    const long size = std::ftell(file_);
    if (size < 0) throw Error(path + ": cannot read its size");
    size_ = uint64_t(size);
    std::rewind(file_);
}

TFRecordReader::~TFRecordReader() {
    if (file_) std::fclose(file_);
}

std::string TFRecordReader::where() const { return path_ + ": record " + std::to_string(index_); }

uint64_t TFRecordReader::readHeader() {
    unsigned char head[12];
    if (size_ - offset_ < 12 || std::fread(head, 1, 12, file_) != 12)
        throw Error(where() + " is cut short (" + std::to_string(size_ - offset_) + " bytes left of its 12-byte header)");
    if (getLe(head + 8, 4) != maskedCrc32c(head, 8)) throw Error(where() + ": its length's CRC does not match (corrupt file)");
    const uint64_t length = getLe(head, 8);
    if (length > size_ - offset_ - 12 || size_ - offset_ - 12 - length < 4)
        throw Error(where() + " claims " + std::to_string(length) + " bytes, more than the " +
                    std::to_string(size_ - offset_ - 12) + " left in the file");
    return length;
}

bool TFRecordReader::next(std::string& record) {
    if (offset_ == size_) return false;
    const uint64_t length = readHeader();
    record.resize(size_t(length));
    unsigned char tail[4];
    if ((length > 0 && std::fread(record.data(), 1, size_t(length), file_) != length) || std::fread(tail, 1, 4, file_) != 4)
        throw Error(where() + ": read failed (" + (std::ferror(file_) ? std::strerror(errno) : "the file ended early") + ")");
    if (getLe(tail, 4) != maskedCrc32c(record.data(), record.size()))
        throw Error(where() + ": its data's CRC does not match (corrupt file)");
    offset_ += 16 + length;
    ++index_;
    return true;
}

bool TFRecordReader::skip() {
    if (offset_ == size_) return false;
    const uint64_t length = readHeader();
    // (Within the stdio buffer a forward seek moves a pointer; past it, one read of the next block.)
    if (std::fseek(file_, long(length + 4), SEEK_CUR) != 0) throw Error(where() + ": cannot seek past it (" + std::strerror(errno) + ")");
    offset_ += 16 + length;
    ++index_;
    return true;
}

void TFRecordReader::seek(uint64_t offset, int64_t index) {
    if (offset > size_ || std::fseek(file_, long(offset), SEEK_SET) != 0)
        throw Error(path_ + ": cannot seek to record " + std::to_string(index) + " at byte " + std::to_string(offset));
    offset_ = offset;
    index_ = index;
}

}  // namespace tb
