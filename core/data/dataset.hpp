// Dataset: labelled samples held in host memory, and the readers that fill one
// (MNIST-format IDX, CIFAR-10 binary batches, synthetic teaching sets).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "util/cancel.hpp"

namespace tb {

struct Dataset {
    std::string name;
    int channels = 0, height = 0, width = 0;  // shape of one sample (c, h, w)
    int numClasses = 0;
    std::vector<uint8_t> pixels;   // (n, c, h, w) 8-bit images; empty for float data
    std::vector<float> features;   // (n, c, h, w) float samples (synthetic sets); empty for images
    std::vector<int32_t> labels;   // (n), each in [0, numClasses)
    std::vector<std::string> classNames;  // (numClasses) where the set is known (Fashion-MNIST,
                                          // CIFAR-10); empty: the classes are their numbers

    size_t size() const { return labels.size(); }
    size_t sampleSize() const { return size_t(channels) * size_t(height) * size_t(width); }
    bool isImage() const { return !pixels.empty(); }
};

// An image sample's (channels, height, width): what image folders and encoded TFRecord images
// are fitted to (the model's input), or what a set gives (dataInputShape).
struct ImageShape {
    int channels = 0, height = 0, width = 0;  // fitting: 0 takes the first image's
};

// Reads an IDX image file (magic 0x00000803, u8, n x rows x cols) and its label file
// (magic 0x00000801, u8, n); either may be gzip-compressed (.gz). Throws tb::Error naming the file.
// Readers ask `cancelled` between chunks (1 MiB, or a CIFAR-10 file) and throw Cancelled.
Dataset readIdx(const std::string& imagesPath, const std::string& labelsPath, const std::string& name,
                const CancelCheck& cancelled = {});

// Finds {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] in dir and reads the train or test pair.
Dataset readIdxDir(const std::string& dir, bool train, const CancelCheck& cancelled = {});

// The training images' shape (1, rows, cols) as dir's IDX header gives it (nothing more is read);
// throws tb::Error as readIdxDir would for a header it cannot read.
ImageShape idxDirImageShape(const std::string& dir);

// Reads CIFAR-10 binary batches from dir: data_batch_1..5.bin (train) or test_batch.bin (test).
// Each record is 1 label byte then 3072 bytes: 1024 R, 1024 G, 1024 B (so already (3, 32, 32)).
Dataset readCifar10(const std::string& dir, bool train, const CancelCheck& cancelled = {});

// Synthetic teaching sets of 2-D points, shape (2, 1, 1): Gaussian blobs, interleaved spirals.
Dataset makeBlobs(size_t n, int classes, uint64_t seed);
Dataset makeSpirals(size_t n, int classes, uint64_t seed);

// Moves the last `count` samples of `from` into a new dataset (a validation split).
Dataset splitTail(Dataset& from, size_t count, const std::string& name);

struct StreamedSet;  // data/record_stream.hpp

// What --data names: fashion-mnist | idx:DIR | cifar10:DIR | tfrecord:DIR | folder:DIR |
// synthetic:blobs | synthetic:spirals.
struct DataSplits {
    // A streamed training split (tfrecord:DIR, --stream) leaves `train` without samples: its
    // shape and classes only, the samples in `stream`.
    Dataset train, validation, test;
    std::shared_ptr<StreamedSet> stream;
    bool cifarAugment = false;  // CIFAR-10: random 24x24 crops etc. for training, central crops for eval
    std::vector<std::string> skipped;  // folder:DIR with skipBadImages: "path: why" of each image left out
    size_t ignoredFiles = 0;           // folder:DIR: files in class folders that are not images
};
struct DataOptions {
    std::string tfrecordFeatures;  // where the Examples of tfrecord:DIR keep image and label (--tfrecord-features)
    int channels = 0, height = 0, width = 0;  // folder:DIR: the model's input shape (0: the first image's)
    bool skipBadImages = false;    // folder:DIR: leave unreadable images out (counted) instead of stopping
    int threads = 0;               // folder:DIR, tfrecord:DIR: decoding threads (0: every core)
    // tfrecord:DIR: stream the training shards ("true"), read them into memory ("false"), or
    // "auto": stream where they hold more than a quarter of this machine's memory.
    std::string stream = "auto";
};
DataSplits loadData(const std::string& spec, size_t validationSize, uint64_t seed, const CancelCheck& cancelled = {},
                    const DataOptions& options = {});

// The training split's samples, held or streamed.
uint64_t trainingSize(const DataSplits& s);
// The last `count` training samples (in file order) become s.validation, held or streamed.
void splitValidation(DataSplits& s, size_t count, const std::string& name);

// A streamed training split's first `count` records (in file order) read into s.train, to look
// at (the window's augmented samples); a held split stays as it is.
void holdTrainingHead(DataSplits& s, size_t count);

// Whether `path` names a regular file (one that cannot be examined counts as absent): how the
// readers find which of a dataset's file names a folder holds.
bool fileExists(const std::string& path);

// The shape (channels, height, width) in which --data `spec`'s samples reach the model where the
// data decide it, known before loading: fashion-mnist's and idx:DIR's from the training images'
// IDX header (nothing more is read), cifar10:DIR's 24x24 crops (nothing is read: a folder without
// its batches is loadData's to refuse), the synthetic sets' (2, 1, 1) points. nullopt where the
// model's input decides it (folder:DIR and tfrecord:DIR fit their images to it) and for specs
// loadData refuses. Throws tb::Error as loadData would for Fashion-MNIST not installed or an IDX
// folder or header it cannot read.
std::optional<ImageShape> dataInputShape(const std::string& spec);

// The folder --data reads (idx:DIR, cifar10:DIR, tfrecord:DIR, fashion-mnist's); empty for
// synthetic sets and specs loadData refuses.
std::string dataFolderOf(const std::string& spec);

// CIFAR-10's samples reach the model as 24x24 crops of their 32x32 (random windows in training,
// the centres in evaluation), as in TensorFlow's cifar10 tutorial.
inline constexpr int kCifarCrop = 24;

// Where Debian's dataset-fashion-mnist package puts the IDX files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

}  // namespace tb
