// --data folder:DIR: a folder of PNG and JPEG images, one subfolder per class (torchvision's
// ImageFolder layout). The rules, stated once:
//   classes   the subfolders' names, sorted by their bytes; label k is the k-th. With DIR/train
//             and DIR/test both present, the classes are train's and test's subfolders must be
//             among them; otherwise DIR's subfolders are the classes and every file whose name's
//             FNV-1a hash (of "class/file") is 0 modulo 10 is a test image (about a tenth of each
//             class, the same files whatever is added beside them).
//   images    files ending .png, .jpg or .jpeg (any case); other files and hidden entries
//             (".name") are ignored and counted. Images are ordered by file name, then class, so
//             a folder written from an indexed set (convert SPEC folder:DIR) keeps its order.
//   pixels    decoded and fitted to (channels, height, width) by data/image_codec.hpp's rules;
//             the shape is the model's when training, else the first image's.
//   faults    an unreadable, corrupt or truncated image ends the load with one sentence naming
//             the file, unless skipBadImages: then it is left out, counted and named in `skipped`.
// The whole set is decoded into memory, on `threads` threads; a set whose pixels would take
// more than half the machine's memory is refused before decoding (convert it to TFRecord shards).
#pragma once
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "util/cancel.hpp"

namespace tb {

struct ImageFolderSet {
    Dataset train, test;
    std::vector<std::string> skipped;  // "path: why", in the images' order (skipBadImages)
    size_t ignoredFiles = 0;           // not .png/.jpg/.jpeg
    bool splitByHash = false;          // no train/ and test/ folders: the stated hash split
};

ImageFolderSet readImageFolder(const std::string& dir, ImageShape shape, bool skipBadImages, int threads,
                               const CancelCheck& cancelled = {});

// Writes a set as DIR/train/<class>/<index>.png (or .jpg at `jpegQuality`, 0: PNG) and DIR/test/...,
// the class folders named "<k>-<class name>" (k zero-padded, so that sorting keeps label order;
// "/" in a name becomes "_") and the files by their index in the set (zero-padded, so that the
// reader's order is the set's).
void writeImageFolder(const Dataset& train, const Dataset& test, const std::string& dir, int jpegQuality);

}  // namespace tb
