// Image sets as TFRecord files of tf.train.Example records, as TensorFlow's MNIST article
// (convert_to_records.py) writes them: features image_raw (bytes: height x width x depth uint8,
// row-major, channels last), label (int64), height, width, depth (int64). `--data tfrecord:DIR`
// reads DIR/train*.tfrecord* and DIR/test*.tfrecord*; `towerbench-run convert SPEC tfrecord:DIR`
// writes DIR/train.tfrecords and DIR/test.tfrecords. Other feature names: --tfrecord-features.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "tensorflow/example.hpp"

namespace tb {

// Which features hold what: "image=KEY,label=KEY,height=KEY,width=KEY,depth=KEY", any subset;
// without height/width/depth features a record's image is taken as square, one channel.
struct TFRecordFeatures {
    std::string image = "image_raw", label = "label", height = "height", width = "width", depth = "depth";
    static TFRecordFeatures parse(const std::string& text, const std::string& origin);
};

// The split's files in DIR, sorted ("train" -> train.tfrecords, train-00001-of-00004.tfrecord).
std::vector<std::string> tfrecordFiles(const std::string& dir, const std::string& split);
// Every Example of `files`, in order; one tb::Error naming the file and record on any fault. An
// image_raw of PNG or JPEG file bytes (no height and width features beside it) is decoded and
// fitted to `shape` (the model's input; 0: the first record's) by data/image_codec.hpp's rules.
// Decodes one record of `path` (its `index`-th) into its label and its image, as (c, h, w) bytes in
// `pixels`, of the set's `shape` (all 0 before its first record, which sets it): raw pixels must
// have that shape; PNG or JPEG bytes are fitted to it (the first record: to `fit`, any of whose
// sides that are 0 the image gives). `e`: the caller's, reused. One tb::Error naming the file and
// record on any fault.
int32_t decodeExample(const std::string& record, const TFRecordFeatures& features, const std::string& path,
                      uint64_t index, Example& e, const ImageShape& fit, ImageShape& shape,
                      std::vector<uint8_t>& pixels);
// Refuses, in one sentence, a set of `files` larger than half this machine's memory.
void checkFitsInMemory(const std::vector<std::string>& files, const std::string& name);
Dataset readTFRecordExamples(const std::vector<std::string>& files, const TFRecordFeatures& features,
                             const std::string& name, const CancelCheck& cancelled = {}, ImageShape shape = {});
void writeTFRecordExamples(const Dataset& d, const std::string& path);

// A set as `shards` TFRecord files DIR/<split>-00000-of-0000N.tfrecords (DIR/<split>.tfrecords
// for one), `repeat` times over: the first pass the set itself, each later one a shifted copy of
// every image (by -2..2 pixels each way, zeros filled in) mirrored half the time, drawn from
// `seed` (a larger set for streaming; convert --shards, --repeat). Record k (pass k / n, image
// k % n) goes to shard k % shards. Returns the files written.
std::vector<std::string> writeTFRecordShards(const Dataset& d, const std::string& dir, const std::string& split,
                                             int shards, int repeat, uint64_t seed);

}  // namespace tb
