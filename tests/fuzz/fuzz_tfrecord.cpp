// TFRecord files of tf.train.Example records (--data tfrecord:DIR): the framing (lengths and
// masked CRC-32C, as event files use it too) and every Example's features.
#include "fuzz_support.hpp"
#include "data/tfrecord_dataset.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = fuzz::scratch() + "/train.tfrecords";
    fuzz::writeFile(path, {reinterpret_cast<const char*>(data), size});
    TB_FUZZ_REFUSALS_ARE_FINE(
        (void)tb::readTFRecordExamples({path}, tb::TFRecordFeatures::parse("", "--tfrecord-features"), "fuzz"));
    return 0;
}
