#include "io/safetensors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "util/error.hpp"
#include "util/json_file.hpp"

namespace tb::safetensors {

namespace {

struct DtypeName {
    Dtype dtype;
    const char* name;
    size_t size;
};
constexpr DtypeName kDtypes[] = {{Dtype::F32, "F32", 4}, {Dtype::F64, "F64", 8},  {Dtype::F16, "F16", 2},
                                 {Dtype::BF16, "BF16", 2}, {Dtype::I64, "I64", 8}, {Dtype::I32, "I32", 4},
                                 {Dtype::I16, "I16", 2}, {Dtype::I8, "I8", 1},    {Dtype::U64, "U64", 8},
                                 {Dtype::U32, "U32", 4}, {Dtype::U16, "U16", 2},  {Dtype::U8, "U8", 1},
                                 {Dtype::Bool, "BOOL", 1}};

bool parseDtype(const std::string& s, Dtype& out) {
    for (const auto& d : kDtypes)
        if (s == d.name) {
            out = d.dtype;
            return true;
        }
    return false;
}

// prod(shape) * size without overflow; false where it would not fit in 63 bits.
bool byteCount(const std::vector<int64_t>& shape, size_t size, size_t& out) {
    unsigned __int128 n = size;
    for (int64_t d : shape) {
        if (d < 0) return false;
        n *= uint64_t(d);
        if (n > (unsigned __int128)INT64_MAX) return false;
    }
    out = size_t(n);
    return true;
}

}  // namespace

const char* toString(Dtype d) {
    for (const auto& x : kDtypes)
        if (x.dtype == d) return x.name;
    return "?";
}

size_t sizeOf(Dtype d) {
    for (const auto& x : kDtypes)
        if (x.dtype == d) return x.size;
    return 0;
}

int64_t TensorInfo::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

size_t dataBytes(const std::vector<TensorRef>& tensors) {
    size_t total = 0;
    for (const TensorRef& t : tensors) {
        size_t b = 0;
        if (!byteCount(t.shape, sizeOf(t.dtype), b)) throw Error("safetensors: tensor " + t.name + " is too large");
        total += b;
    }
    return total;
}

std::string header(const std::vector<TensorRef>& tensors, const std::map<std::string, std::string>& metadata) {
    // nlohmann's ordered_json keeps the tensors in data order, which readers may rely on to map
    // the file in one pass.
    nlohmann::ordered_json h;
    if (!metadata.empty()) h["__metadata__"] = metadata;
    size_t at = 0;
    for (const TensorRef& t : tensors) {
        size_t b = 0;
        if (!byteCount(t.shape, sizeOf(t.dtype), b)) throw Error("safetensors: tensor " + t.name + " is too large");
        if (t.name == "__metadata__" || h.contains(t.name)) throw Error("safetensors: tensor name " + t.name + " is used twice");
        h[t.name] = {{"dtype", toString(t.dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + b}}};
        at += b;
    }
    std::string json = h.dump();
    json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
    std::string out(8, '\0');
    const uint64_t n = json.size();
    for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
    return out + json;
}

File File::read(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
    const std::streamoff size = in.tellg();
    if (size < 0) throw Error(path + ": cannot read its size");
    std::vector<uint8_t> bytes(static_cast<size_t>(size));  // the file's own size, not a header's claim
    in.seekg(0);
    if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size))
        throw Error(path + ": read failed after " + std::to_string(in.gcount()) + " of " + std::to_string(size) + " bytes");
    return parse(std::move(bytes), path);
}

uint64_t File::headerLength(const uint8_t* first8, uint64_t fileBytes, const std::string& origin) {
    if (fileBytes < 8)
        throw Error(origin + ": not a safetensors file (" + std::to_string(fileBytes) + " bytes, shorter than its header length)");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | first8[i];
    if (n > kMaxHeaderBytes || n > fileBytes - 8)  // checked before the header is allocated
        throw Error(origin + ": header length " + std::to_string(n) + " exceeds the file's " +
                    std::to_string(fileBytes - 8) + " remaining bytes (truncated or not safetensors)");
    return n;
}

File File::readHeader(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
    const std::streamoff size = in.tellg();
    if (size < 0) throw Error(path + ": cannot read its size");
    uint8_t first8[8] = {};
    in.seekg(0);
    if (size >= 8 && !in.read(reinterpret_cast<char*>(first8), 8)) throw Error(path + ": cannot read its header length");
    const uint64_t n = headerLength(first8, uint64_t(size), path);
    std::string text(size_t(n), '\0');
    if (!in.read(text.data(), std::streamsize(n)))
        throw Error(path + ": read failed after " + std::to_string(in.gcount()) + " of the header's " + std::to_string(n) + " bytes");
    return parseHeader(text, uint64_t(size), path);
}

File File::parse(std::vector<uint8_t> bytes, const std::string& origin) {
    const uint64_t n = headerLength(bytes.data(), bytes.size(), origin);
    File f = parseHeader(std::string(reinterpret_cast<const char*>(bytes.data()) + 8, size_t(n)), bytes.size(), origin);
    f.bytes_ = std::move(bytes);
    f.headerOnly_ = false;
    return f;
}

File File::parseHeader(const std::string& text, uint64_t fileBytes, const std::string& origin) {
    File f;
    f.origin_ = origin;
    f.headerOnly_ = true;
    if (text.empty() || text[0] != '{') throw Error(origin + ": the header is not a JSON object");
    nlohmann::json h = parseJsonOrDiscard(text);
    if (h.is_discarded() || !h.is_object()) throw Error(origin + ": the header is not valid JSON");
    f.dataStart_ = 8 + text.size();
    const size_t dataSize = size_t(fileBytes - f.dataStart_);

    std::vector<std::pair<size_t, size_t>> spans;  // (begin, end) of every tensor
    for (auto it = h.begin(); it != h.end(); ++it) {
        const std::string& name = it.key();
        const nlohmann::json& v = it.value();
        if (name == "__metadata__") {
            if (!v.is_object()) throw Error(origin + ": __metadata__ is not an object of strings");
            for (auto m = v.begin(); m != v.end(); ++m) {
                if (!m.value().is_string()) throw Error(origin + ": metadata " + m.key() + " is not a string");
                f.metadata_[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        const std::string where = origin + ": tensor " + name;
        if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
            throw Error(where + " lacks dtype, shape or data_offsets");
        TensorInfo t;
        if (!v["dtype"].is_string() || !parseDtype(v["dtype"].get<std::string>(), t.dtype))
            throw Error(where + " has an unknown dtype " + shortJson(v["dtype"]));
        const nlohmann::json& shape = v["shape"];
        if (!shape.is_array() || shape.size() > 16) throw Error(where + ": shape is not an array of at most 16 sizes");
        for (const auto& d : shape) {
            if (!d.is_number_unsigned()) throw Error(where + ": shape holds " + shortJson(d) + ", not a size");
            const uint64_t dim = d.get<uint64_t>();
            if (dim > uint64_t(INT64_MAX)) throw Error(where + ": shape holds " + shortJson(d) + ", not a size");
            t.shape.push_back(int64_t(dim));
        }
        const nlohmann::json& off = v["data_offsets"];
        if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
            throw Error(where + ": data_offsets is not [begin, end]");
        const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
        if (begin > end || end > dataSize)
            throw Error(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                        "] lie outside the file's " + std::to_string(dataSize) + " data bytes");
        size_t expected = 0;
        if (!byteCount(t.shape, sizeOf(t.dtype), expected) || expected != end - begin)
            throw Error(where + ": its dtype and shape need " + (expected ? std::to_string(expected) : std::string("too many")) +
                        " bytes, its offsets give " + std::to_string(end - begin));
        t.begin = size_t(begin);
        t.bytes = size_t(end - begin);
        spans.emplace_back(t.begin, t.begin + t.bytes);
        f.tensors_.emplace(name, std::move(t));
    }
    // The tensors tile the data: no overlap, no gap, nothing after the last.
    std::sort(spans.begin(), spans.end());
    size_t at = 0;
    for (const auto& [b, e] : spans) {
        if (b != at) throw Error(origin + ": tensors overlap or leave a gap at data byte " + std::to_string(std::min(b, at)));
        at = e;
    }
    if (at != dataSize) throw Error(origin + ": " + std::to_string(dataSize - at) + " data bytes belong to no tensor");
    return f;
}

const uint8_t* File::data(const std::string& name) const {
    const size_t begin = info(name).begin;
    if (headerOnly_) throw Error(origin_ + ": tensor " + name + " was not read (the file was opened for its header only)");
    return bytes_.data() + dataStart_ + begin;
}

std::string File::meta(const std::string& key) const {
    auto it = metadata_.find(key);
    if (it == metadata_.end()) throw Error(origin_ + ": metadata " + key + " is missing");
    return it->second;
}

const TensorInfo& File::info(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw Error(origin_ + ": tensor " + name + " is missing");
    return it->second;
}

std::vector<std::string> File::names() const {
    std::vector<std::string> out;
    for (const auto& [name, t] : tensors_) out.push_back(name);
    return out;
}

void File::readFloats(const std::string& name, float* out, size_t count) const {
    const TensorInfo& t = info(name);
    if (t.dtype != Dtype::F32)
        throw Error(origin_ + ": tensor " + name + " is " + toString(t.dtype) + ", not F32 (another precision cannot be resumed)");
    if (size_t(t.numel()) != count)
        throw Error(origin_ + ": tensor " + name + " has " + std::to_string(t.numel()) + " elements, " +
                    std::to_string(count) + " expected");
    std::memcpy(out, data(name), t.bytes);  // little-endian on every machine Towerbench runs on
}

std::vector<int64_t> File::int64s(const std::string& name) const {
    const TensorInfo& t = info(name);
    if (t.dtype != Dtype::I64) throw Error(origin_ + ": tensor " + name + " is " + toString(t.dtype) + ", not I64");
    std::vector<int64_t> out(size_t(t.numel()));
    std::memcpy(out.data(), data(name), t.bytes);
    return out;
}

}  // namespace tb::safetensors
