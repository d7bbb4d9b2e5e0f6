#include "data/tfrecord_dataset.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <sstream>

#include "data/image_codec.hpp"
#include "io/tfrecord.hpp"
#include "tensorflow/example.hpp"
#include "util/error.hpp"
#include "util/system_text.hpp"

namespace fs = std::filesystem;

namespace tb {

namespace {

constexpr int64_t kMaxSide = 4096;       // height, width
constexpr int64_t kMaxDepth = 64;
constexpr int64_t kMaxClasses = 65536;

}  // namespace

TFRecordFeatures TFRecordFeatures::parse(const std::string& text, const std::string& origin) {
    TFRecordFeatures f;
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');) {
        if (item.empty()) continue;
        const size_t eq = item.find('=');
        const std::string role = item.substr(0, eq), key = eq == std::string::npos ? "" : item.substr(eq + 1);
        if (key.empty()) throw Error(origin + ": '" + item + "' is not ROLE=FEATURE (e.g. image=image_raw)");
        if (role == "image") f.image = key;
        else if (role == "label") f.label = key;
        else if (role == "height") f.height = key;
        else if (role == "width") f.width = key;
        else if (role == "depth") f.depth = key;
        else throw Error(origin + ": unknown role '" + role + "' (expected image, label, height, width or depth)");
    }
    return f;
}

std::vector<std::string> tfrecordFiles(const std::string& dir, const std::string& split) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) throw Error("--data tfrecord:" + dir + ": not a folder");
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string n = e.path().filename().string();
        if (e.is_regular_file(ec) && n.rfind(split, 0) == 0 && n.find(".tfrecord") != std::string::npos)
            files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    if (files.empty())
        throw Error("--data tfrecord:" + dir + ": no " + split + "*.tfrecord* files (convert an IDX set with "
                    "towerbench-run convert idx:DIR tfrecord:" + dir + ")");
    return files;
}

int32_t decodeExample(const std::string& record, const TFRecordFeatures& features, const std::string& path,
                      uint64_t index, Example& e, const ImageShape& fit, ImageShape& shape,
                      std::vector<uint8_t>& pixels) {
    const auto where = [&] { return path + ": record " + std::to_string(index); };
    if (!e.parse(record)) throw Error(where() + " is not a tf.train.Example");
    const std::string* image = e.oneBytes(features.image);
    const std::optional<int64_t> label = e.oneInt64(features.label);
    if (!image) throw Error(where() + " has no bytes feature '" + features.image + "' (--tfrecord-features image=KEY)");
    if (!label) throw Error(where() + " has no int64 feature '" + features.label + "' (--tfrecord-features label=KEY)");
    const std::string& bytes = *image;
    const int64_t y = *label;
    if (y < 0 || y >= kMaxClasses) throw Error(where() + ": label " + std::to_string(y) + " is not a class index");
    // Raw pixels where height x width x depth features give the bytes' count exactly (what
    // convert writes); else PNG or JPEG bytes by their signature.
    auto given = [&](const std::string& key, int64_t fallback) {
        const std::optional<int64_t> v = e.has(key) ? e.oneInt64(key) : std::optional<int64_t>();
        return v ? *v : fallback;
    };
    const bool raw = e.has(features.height) && e.has(features.width) &&
                     given(features.height, 0) * given(features.width, 0) * given(features.depth, 1) == int64_t(bytes.size());
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    if (!raw && sniffImageFormat(data, bytes.size()) != ImageFormat::Unknown) {
        // An encoded image (PNG or JPEG file bytes, as many tf.train.Examples hold): decoded and
        // fitted by data/image_codec.hpp's rules to `shape`, or to this record's own.
#ifdef TB_HAVE_IMAGES
        const Image im = decodeImage(data, bytes.size(), where());
        if (shape.channels == 0) {  // the first record: the model's input where given, else this image's
            shape.channels = fit.channels > 0 ? fit.channels : im.channels;
            shape.height = fit.height > 0 ? fit.height : im.height;
            shape.width = fit.width > 0 ? fit.width : im.width;
        }
        pixels.resize(size_t(shape.channels) * size_t(shape.height) * size_t(shape.width));
        imageToSample(im, shape.channels, shape.height, shape.width, pixels.data());
        return int32_t(y);
#else
        throw Error(where() + ": holds a PNG or JPEG image, and this build of Towerbench has no libpng and "
                    "libjpeg to decode it (install libpng-dev and libjpeg62-turbo-dev, and build again)");
#endif
    }
    auto dim = [&](const std::string& key, int64_t fallback) -> int64_t {
        if (!e.has(key)) return fallback;
        const std::optional<int64_t> v = e.oneInt64(key);
        if (!v) throw Error(where() + ": feature '" + key + "' is not one int64");
        return *v;
    };
    int64_t side = 0;
    while ((side + 1) * (side + 1) <= int64_t(bytes.size())) ++side;
    const int64_t h = dim(features.height, side), w = dim(features.width, side), c = dim(features.depth, 1);
    if (h < 1 || w < 1 || c < 1 || h > kMaxSide || w > kMaxSide || c > kMaxDepth)
        throw Error(where() + ": image " + std::to_string(h) + "x" + std::to_string(w) + "x" + std::to_string(c) +
                    " is not a plausible size");
    if (int64_t(bytes.size()) != h * w * c)
        throw Error(where() + ": " + features.image + " holds " + std::to_string(bytes.size()) + " bytes, not " +
                    std::to_string(h) + "x" + std::to_string(w) + "x" + std::to_string(c));
    if (shape.channels == 0) {
        shape = {int(c), int(h), int(w)};
    } else if (h != shape.height || w != shape.width || c != shape.channels) {
        throw Error(where() + ": image " + std::to_string(h) + "x" + std::to_string(w) + "x" + std::to_string(c) +
                    " differs from the first record's " + std::to_string(shape.height) + "x" +
                    std::to_string(shape.width) + "x" + std::to_string(shape.channels));
    }
    // Channels last in the record, (c, h, w) in a sample.
    const size_t plane = size_t(h * w);
    pixels.resize(bytes.size());
    if (c == 1)
        std::memcpy(pixels.data(), data, bytes.size());
    else
        for (size_t p = 0; p < plane; ++p)
            for (int64_t ch = 0; ch < c; ++ch) pixels[size_t(ch) * plane + p] = data[p * size_t(c) + size_t(ch)];
    return int32_t(y);
}

void checkFitsInMemory(const std::vector<std::string>& files, const std::string& name) {
    // A set held in memory: one of files larger than half the machine's memory is refused before
    // reading (its records' pixels take about as many bytes as the files).
    double bytes = 0;
    for (const std::string& f : files) {
        std::error_code ec;
        bytes += double(fs::file_size(f, ec));
    }
    if (const double memory = physicalMemoryBytes(); memory > 0 && bytes > memory / 2)
        throw Error("--data: the " + std::to_string(files.size()) + " files of '" + name + "' hold " +
                    std::to_string(int64_t(bytes / (1 << 20))) + " MiB, more than half this machine's memory (" +
                    std::to_string(int64_t(memory / (1 << 20))) + " MiB), to be read into memory: stream them "
                    "(--stream auto or true)");
}

Dataset readTFRecordExamples(const std::vector<std::string>& files, const TFRecordFeatures& features,
                             const std::string& name, const CancelCheck& cancelled, ImageShape fit) {
    checkFitsInMemory(files, name);
    ImageShape shape;
    Dataset d;
    d.name = name;
    int64_t maxLabel = -1;
    std::string record;
    std::vector<uint8_t> pixels;
    Example e;
    for (const std::string& path : files) {
        TFRecordReader in(path);
        while (in.next(record)) {
            if (cancelled && in.index() % 1024 == 0) throwIfCancelled(cancelled);
            const int32_t y = decodeExample(record, features, path, uint64_t(in.index() - 1), e, fit, shape, pixels);
            d.pixels.insert(d.pixels.end(), pixels.begin(), pixels.end());
            d.labels.push_back(y);
            maxLabel = std::max<int64_t>(maxLabel, y);
        }
    }
    if (d.labels.empty()) throw Error(files.front() + ": holds no records");
    d.channels = shape.channels, d.height = shape.height, d.width = shape.width;
    d.numClasses = int(maxLabel + 1);
    return d;
}

namespace {

// One image of d as an Example (image_raw channels last), shifted by (dy, dx) and mirrored.
std::string exampleOf(const Dataset& d, size_t i, int dy, int dx, bool flip, std::string& pixels) {
    const int h = d.height, w = d.width, c = d.channels;
    const size_t plane = size_t(h) * size_t(w);
    pixels.assign(plane * size_t(c), '\0');
    const uint8_t* src = d.pixels.data() + i * d.sampleSize();
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
            const int sy = y + dy, sx = (flip ? w - 1 - x : x) + dx;
            if (sy < 0 || sy >= h || sx < 0 || sx >= w) continue;
            for (int ch = 0; ch < c; ++ch)
                pixels[(size_t(y) * w + size_t(x)) * size_t(c) + size_t(ch)] = char(src[size_t(ch) * plane + size_t(sy) * w + size_t(sx)]);
        }
    Example e;
    e.setInt64("height", h);
    e.setInt64("width", w);
    e.setInt64("depth", c);
    e.setInt64("label", d.labels[i]);
    e.setBytes("image_raw", pixels);
    return e.serialize();
}

}  // namespace

void writeTFRecordExamples(const Dataset& d, const std::string& path) {
    if (!d.isImage()) throw Error("convert: " + d.name + " is not an image set (only images go to TFRecord files)");
    TFRecordWriter out(path);
    std::string pixels;
    for (size_t i = 0; i < d.size(); ++i) out.write(exampleOf(d, i, 0, 0, false, pixels));
    out.flush();
}

std::vector<std::string> writeTFRecordShards(const Dataset& d, const std::string& dir, const std::string& split,
                                             int shards, int repeat, uint64_t seed) {
    if (!d.isImage()) throw Error("convert: " + d.name + " is not an image set (only images go to TFRecord files)");
    if (shards < 1 || repeat < 1) throw Error("convert: --shards and --repeat must be at least 1");
    std::vector<std::string> files;
    std::vector<std::unique_ptr<TFRecordWriter>> out;
    char name[64];
    for (int s = 0; s < shards; ++s) {
        if (shards == 1) std::snprintf(name, sizeof name, "%s.tfrecords", split.c_str());
        else std::snprintf(name, sizeof name, "%s-%05d-of-%05d.tfrecords", split.c_str(), s, shards);
        files.push_back(dir + "/" + name);
        out.push_back(std::make_unique<TFRecordWriter>(files.back()));
    }
    std::mt19937_64 rng(seed);
    std::string pixels;
    uint64_t k = 0;
    for (int r = 0; r < repeat; ++r)
        for (size_t i = 0; i < d.size(); ++i, ++k) {
            int dy = 0, dx = 0;
            bool flip = false;
            if (r > 0) {  // three draws per later record, in this order
                dy = int(rng() % 5) - 2;
                dx = int(rng() % 5) - 2;
                flip = (rng() >> 63) != 0;
            }
            out[size_t(k % uint64_t(shards))]->write(exampleOf(d, i, dy, dx, flip, pixels));
        }
    for (auto& o : out) o->flush();
    return files;
}

}  // namespace tb
