// TFRecord files, the framing TensorFlow writes records in (tf.io.TFRecordWriter; TensorBoard's
// event files are TFRecord files too). Each record:
//   uint64 length          little-endian
//   uint32 masked CRC-32C  of the 8 length bytes
//   byte   data[length]
//   uint32 masked CRC-32C  of the data
// masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (tensorflow/core/lib/hash/crc32c.h).
// The reader checks both CRCs and every length against what is left of the file before it
// allocates anything; a fault is one tb::Error naming the file and the record's index.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace tb {

// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected), as TFRecord uses it. Debian ships no
// CRC-32C library (zlib's crc32 is another polynomial), hence the table here.
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);
inline uint32_t maskedCrc32c(const void* data, size_t bytes) {
    const uint32_t c = crc32c(data, bytes);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

class TFRecordWriter {
public:
    // append: continue an existing file (a resumed run's events).
    explicit TFRecordWriter(const std::string& path, bool append = false);
    ~TFRecordWriter();
    TFRecordWriter(const TFRecordWriter&) = delete;
    TFRecordWriter& operator=(const TFRecordWriter&) = delete;
    void write(const std::string& record);
    void flush();
    const std::string& path() const { return path_; }

private:
    std::string path_;
    std::FILE* file_ = nullptr;
};

class TFRecordReader {
public:
    explicit TFRecordReader(const std::string& path);
    ~TFRecordReader();
    TFRecordReader(const TFRecordReader&) = delete;
    TFRecordReader& operator=(const TFRecordReader&) = delete;
    // The next record; false at a clean end of file. Throws on a torn or corrupt record.
    bool next(std::string& record);
    // Steps over the next record, its length's CRC checked but not its data's; false at the end.
    bool skip();
    // Goes to the record that starts at byte `offset`, which is record `index` of the file.
    void seek(uint64_t offset, int64_t index);
    int64_t index() const { return index_; }   // records read so far
    uint64_t offset() const { return offset_; }  // where the next record starts
    uint64_t size() const { return size_; }

private:
    uint64_t readHeader();  // the next record's length, checked against the file
    std::string where() const;

    std::string path_;
    std::FILE* file_ = nullptr;
    uint64_t size_ = 0, offset_ = 0;
    int64_t index_ = 0;
};

}  // namespace tb
