// loadData: a --data spec as train / validation / test sets, checked against each other; and the
// validation split.
#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>

#include "data/dataset.hpp"
#ifdef TB_HAVE_IMAGES
#include "data/image_folder.hpp"
#endif
#ifdef TB_HAVE_PROTOBUF
#include "data/record_stream.hpp"
#include "data/tfrecord_dataset.hpp"
#endif
#include "util/error.hpp"
#include "util/system_text.hpp"

namespace tb {
namespace {

// Seeds for the test set differ from the training seeds, so the two sets are independent draws.
constexpr uint64_t kTestSeedOffset = 0x9E3779B97F4A7C15ull;
constexpr size_t kSyntheticTrain = 8000, kSyntheticTest = 2000;

// The class names of the sets whose labels are known by their name stem; none for the others.
std::vector<std::string> knownClassNames(const std::string& base, int classes) {
    std::vector<std::string> names;
    if (base.find("fashion") != std::string::npos)
        names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
    else if (base == "cifar10")
        names = {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
    if (int(names.size()) != classes) names.clear();  // a set that only borrowed the name
    return names;
}

#ifdef TB_HAVE_PROTOBUF
// --stream: auto streams a training split whose files hold more than a quarter of the memory.
bool streams(const std::string& stream, const std::vector<std::string>& files) {
    if (stream != "auto") return stream == "true";
    double bytes = 0;
    for (const std::string& f : files) {
        std::error_code ec;
        bytes += double(std::filesystem::file_size(f, ec));
    }
    const double memory = physicalMemoryBytes();
    return memory > 0 && bytes > memory / 4;
}
#endif

}  // namespace

Dataset splitTail(Dataset& from, size_t count, const std::string& name) {
    if (count > from.size())
        throw Error("validation split: " + std::to_string(count) + " samples requested but '" + from.name +
                    "' has only " + std::to_string(from.size()));
    Dataset out;
    out.name = name;
    out.channels = from.channels;
    out.height = from.height;
    out.width = from.width;
    out.numClasses = from.numClasses;
    out.classNames = from.classNames;
    const size_t keep = from.size() - count;
    const size_t ss = from.sampleSize();
    auto moveTail = [&](auto& src, auto& dst, size_t per) {
        if (src.empty()) return;
        dst.assign(src.begin() + std::ptrdiff_t(keep * per), src.end());
        src.resize(keep * per);
    };
    moveTail(from.pixels, out.pixels, ss);
    moveTail(from.features, out.features, ss);
    moveTail(from.labels, out.labels, 1);
    return out;
}

uint64_t trainingSize(const DataSplits& s) {
#ifdef TB_HAVE_PROTOBUF
    if (s.stream) return s.stream->size();
#endif
    return s.train.size();
}

void splitValidation(DataSplits& s, size_t count, const std::string& name) {
#ifdef TB_HAVE_PROTOBUF
    if (s.stream) {
        s.validation = s.stream->takeTail(count, name);
        s.validation.classNames = s.train.classNames;
        return;
    }
#endif
    s.validation = splitTail(s.train, count, name);
}

void holdTrainingHead(DataSplits& s, size_t count) {
#ifdef TB_HAVE_PROTOBUF
    if (s.stream) {
        std::vector<std::string> names = std::move(s.train.classNames);
        s.train = s.stream->head(count);
        s.train.classNames = std::move(names);
    }
#endif
}

bool fileExists(const std::string& path) {
    std::error_code ec;
    return std::filesystem::is_regular_file(path, ec);
}

std::string dataFolderOf(const std::string& spec) {
    if (spec == "fashion-mnist") return kFashionMnistDir;
    for (const char* prefix : {"idx:", "cifar10:", "tfrecord:", "folder:"})
        if (spec.starts_with(prefix)) return spec.substr(std::string(prefix).size());
    return {};
}

namespace {

void checkFashionMnistInstalled() {
    std::error_code ec;
    if (!std::filesystem::is_directory(kFashionMnistDir, ec))
        throw Error(std::string("--data fashion-mnist: ") + kFashionMnistDir +
                    " not found (install Debian's dataset-fashion-mnist package, or use idx:DIR)");
}

}  // namespace

std::optional<ImageShape> dataInputShape(const std::string& spec) {
    if (spec == "fashion-mnist") {
        checkFashionMnistInstalled();
        return idxDirImageShape(kFashionMnistDir);
    }
    if (spec.starts_with("idx:") && spec.size() > 4) return idxDirImageShape(spec.substr(4));
    if (spec.starts_with("cifar10:")) return ImageShape{3, kCifarCrop, kCifarCrop};
    if (spec == "synthetic:blobs" || spec == "synthetic:spirals") return ImageShape{2, 1, 1};
    return std::nullopt;
}

DataSplits loadData(const std::string& spec, size_t validationSize, uint64_t seed, const CancelCheck& cancelled,
                    const DataOptions& options) {
    DataSplits s;
    std::string base;  // name stem: "fashion-mnist", "cifar10", ...
    auto dirAfter = [&](size_t prefixLen) {
        std::string dir = spec.substr(prefixLen);
        if (dir.empty()) throw Error("--data: '" + spec + "' names no directory after the colon");
        return dir;
    };
    if (spec == "fashion-mnist") {
        checkFashionMnistInstalled();
        base = "fashion-mnist";
        s.train = readIdxDir(kFashionMnistDir, true, cancelled);
        s.test = readIdxDir(kFashionMnistDir, false, cancelled);
    } else if (spec.starts_with("idx:")) {
        std::string dir = dirAfter(4);
        s.train = readIdxDir(dir, true, cancelled);
        s.test = readIdxDir(dir, false, cancelled);
        base = s.train.name.substr(0, s.train.name.rfind(' '));
    } else if (spec.starts_with("cifar10:")) {
        std::string dir = dirAfter(8);
        base = "cifar10";
        s.train = readCifar10(dir, true, cancelled);
        s.test = readCifar10(dir, false, cancelled);
        s.cifarAugment = true;
    } else if (spec.starts_with("tfrecord:")) {
#ifdef TB_HAVE_PROTOBUF
        const std::string dir = dirAfter(9);
        const TFRecordFeatures f = TFRecordFeatures::parse(options.tfrecordFeatures, "--tfrecord-features");
        base = std::filesystem::path(dir).filename().string();
        const ImageShape shape{options.channels, options.height, options.width};
        const std::vector<std::string> train = tfrecordFiles(dir, "train");
        if (streams(options.stream, train)) {
            s.stream = std::make_shared<StreamedSet>(openStreamedSet(train, f, base + " train", shape, options.threads, cancelled));
            s.train.channels = s.stream->channels, s.train.height = s.stream->height, s.train.width = s.stream->width;
            s.train.numClasses = s.stream->numClasses;
        } else {
            s.train = readTFRecordExamples(train, f, base + " train", cancelled, shape);
        }
        s.test = readTFRecordExamples(tfrecordFiles(dir, "test"), f, base + " test", cancelled,
                                      {s.train.channels, s.train.height, s.train.width});
#else
        throw Error("--data " + spec + ": this build of Towerbench has no protobuf, which TFRecord input needs "
                    "(install libprotobuf-dev and protobuf-compiler, and build again)");
#endif
    } else if (spec.starts_with("folder:")) {
#ifdef TB_HAVE_IMAGES
        const std::string dir = dirAfter(7);
        ImageFolderSet f = readImageFolder(dir, {options.channels, options.height, options.width}, options.skipBadImages,
                                           options.threads, cancelled);
        base = std::filesystem::path(dir).lexically_normal().filename().string();
        if (base.empty()) base = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
        s.train = std::move(f.train);
        s.test = std::move(f.test);
        s.skipped = std::move(f.skipped);
        s.ignoredFiles = f.ignoredFiles;
#else
        throw Error("--data " + spec + ": this build of Towerbench has no libpng and libjpeg, which image folders need "
                    "(install libpng-dev and libjpeg62-turbo-dev, and build again)");
#endif
    } else if (spec == "synthetic:blobs") {
        base = "blobs";
        s.train = makeBlobs(kSyntheticTrain, 4, seed);
        s.test = makeBlobs(kSyntheticTest, 4, seed + kTestSeedOffset);
    } else if (spec == "synthetic:spirals") {
        base = "spirals";
        s.train = makeSpirals(kSyntheticTrain, 3, seed);
        s.test = makeSpirals(kSyntheticTest, 3, seed + kTestSeedOffset);
    } else {
        throw Error("--data: unknown data spec '" + spec +
                    "' (expected fashion-mnist, idx:DIR, cifar10:DIR, tfrecord:DIR, folder:DIR, synthetic:blobs or synthetic:spirals)");
    }
    // The network is built for the training samples' shape; a test set of another shape would be
    // read past its end (larger) or scored as garbage (smaller).
    if (s.test.channels != s.train.channels || s.test.height != s.train.height || s.test.width != s.train.width)
        throw Error("--data " + spec + ": the test samples are " + std::to_string(s.test.channels) + "x" +
                    std::to_string(s.test.height) + "x" + std::to_string(s.test.width) + " but the training samples " +
                    std::to_string(s.train.channels) + "x" + std::to_string(s.train.height) + "x" +
                    std::to_string(s.train.width) + " (channels x height x width); both must match");
    if (s.test.numClasses != s.train.numClasses) {
        // A test set lacking the top class must still be scored against the training classes.
        int k = std::max(s.train.numClasses, s.test.numClasses);
        s.train.numClasses = s.test.numClasses = k;
    }
#ifdef TB_HAVE_PROTOBUF
    if (s.stream) s.stream->numClasses = s.train.numClasses;
#endif
    s.train.name = base + " train";
    s.test.name = base + " test";
    if (s.train.classNames.empty())  // a folder's are its class folders' names
        s.train.classNames = s.test.classNames = knownClassNames(base, s.train.numClasses);
    if (validationSize > 0 && validationSize >= trainingSize(s))
        throw Error("--data " + spec + ": a validation set of " + std::to_string(validationSize) +
                    " samples needs a training set larger than its " + std::to_string(trainingSize(s)) +
                    " samples");
    // Always split (0 samples gives an empty set that still carries the sample shape).
    splitValidation(s, validationSize, base + " validation");
    return s;
}

}  // namespace tb
