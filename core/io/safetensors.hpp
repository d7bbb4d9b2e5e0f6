// safetensors files (huggingface/safetensors, the format Python's `safetensors` package reads as
// is): an 8-byte little-endian header length N, N bytes of JSON
//   {"NAME": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [BEGIN, END]}, ...,
//    "__metadata__": {"KEY": "VALUE", ...}}
// (padded with spaces to a multiple of 8 bytes), then the tensors' bytes, little-endian and
// row-major, BEGIN/END counted from the first byte after the header.
//
// The reader trusts nothing in a file: the header length is checked against the file's size and
// a 100 MB cap before anything is allocated, every tensor's offsets against the data, its byte
// count against dtype x shape (overflow-checked), and the tensors must tile the data exactly (as
// the reference implementation requires). Any fault is one tb::Error naming the file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tb::safetensors {

enum class Dtype { F32, F64, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, Bool };
const char* toString(Dtype d);
size_t sizeOf(Dtype d);

// A tensor to write: `data` holds dtype x prod(shape) bytes in the caller's memory.
struct TensorRef {
    std::string name;
    Dtype dtype = Dtype::F32;
    std::vector<int64_t> shape;
    const void* data = nullptr;
};

// The header (JSON, padded) of a file holding `tensors` in that order, and the bytes after it.
std::string header(const std::vector<TensorRef>& tensors, const std::map<std::string, std::string>& metadata);
size_t dataBytes(const std::vector<TensorRef>& tensors);

struct TensorInfo {
    Dtype dtype = Dtype::F32;
    std::vector<int64_t> shape;
    size_t begin = 0, bytes = 0;  // in the data section
    int64_t numel() const;
};

class File {
public:
    static constexpr size_t kMaxHeaderBytes = 100'000'000;

    static File read(const std::string& path);                            // the whole file, checked
    static File parse(std::vector<uint8_t> bytes, const std::string& origin);  // the same from memory
    // The header alone (names, shapes, offsets, metadata), checked against the file's size as
    // read() checks it, for what needs only the metadata of a file that may hold gigabytes: its
    // tensors' bytes are not read, and data() refuses them.
    static File readHeader(const std::string& path);

    const std::string& origin() const { return origin_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    std::string meta(const std::string& key) const;  // throws when missing
    bool has(const std::string& name) const { return tensors_.count(name) > 0; }
    const TensorInfo& info(const std::string& name) const;  // throws when missing
    std::vector<std::string> names() const;
    const uint8_t* data(const std::string& name) const;
    // An F32 tensor of exactly `count` elements (any shape), copied to `out`; throws otherwise.
    void readFloats(const std::string& name, float* out, size_t count) const;
    // An I64 tensor's values.
    std::vector<int64_t> int64s(const std::string& name) const;

private:
    // The header length in a file's first 8 bytes, checked against the file's size and the cap.
    static uint64_t headerLength(const uint8_t* first8, uint64_t fileBytes, const std::string& origin);
    // The checks of parse() on a header's JSON text (of a length headerLength checked); the
    // result holds no bytes and is marked header-only until parse() gives it them.
    static File parseHeader(const std::string& text, uint64_t fileBytes, const std::string& origin);

    std::string origin_;
    std::vector<uint8_t> bytes_;
    bool headerOnly_ = true;  // bytes_ is empty (readHeader); parse() gives it the file
    size_t dataStart_ = 0;
    std::map<std::string, TensorInfo> tensors_;
    std::map<std::string, std::string> metadata_;
};

}  // namespace tb::safetensors
