// BatchSource: a stream of float batches (n, c, h, w) for the towers, and the background thread
// that keeps `prefetch` of them made ahead so loading overlaps compute (the role of TF's input
// queues in the seeds). Two sources make the batches: InputPipeline from a set held in memory
// (data/pipeline.hpp) and RecordStream from TFRecord shards read as they go (data/record_stream.hpp).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tb {

struct Batch {
    int n = 0, c = 0, h = 0, w = 0;
    std::vector<float> x;        // (n, c, h, w), or (n, h, w, c) with channelsLast
    std::vector<int32_t> y;      // (n)
};

struct PipelineOptions {
    int batchSize = 128;
    bool shuffle = true;
    // In memory: 0 the whole dataset (a full permutation each epoch), else a tf.data shuffle
    // buffer of this many samples. Streamed: the buffer's records, 0 for kDefaultStreamBuffer.
    size_t shuffleBuffer = 0;
    bool repeat = true;          // true: endless epochs (training); false: one pass (evaluation)
    // Augmentation (training): each sample draws five values in a fixed order (crop y, crop x,
    // flip, brightness, contrast) whichever parts are on, so a seed fixes the output. The parts:
    // a random window of the sample padded by `pad` zero pixels a side (cropH x cropW, or the
    // sample's size), a left-right flip half the time, brightness + U(-brightness, brightness),
    // contrast about the channel mean by U(contrastLow, contrastHigh). CIFAR-10's defaults are
    // the tutorial's distorted_inputs: a 24x24 window, flip, 63/255, 0.2-1.8 (data/augment_options.hpp).
    bool augment = false;
    int pad = 0;
    bool flip = true;
    float brightness = 63.0f / 255.0f, contrastLow = 0.2f, contrastHigh = 1.8f;
    int cropH = 0, cropW = 0;    // 0: no crop; else random (augment) or central crop to this size
    bool standardize = false;    // per-image standardisation (tf.image.per_image_standardization)
    // --normalise mean-std: each channel (x - mean[c]) / stddev[c] after the scaling, the training
    // split's statistics (channelStatistics); empty: none.
    std::vector<float> channelMean, channelStd;
    // Image pixels (bytes) become pixel x multiply + add before augmentation and standardisation
    // (the model's input normalisation, nn/model_spec.hpp); features are read as they are.
    float pixelMultiply = 1.0f / 255.0f, pixelAdd = 0.0f;
    bool channelsLast = false;   // emit (h, w, c) samples instead of (c, h, w)
    int prefetch = 2;            // batches made ahead by the background thread; 0: made on the caller's thread
    uint64_t seed = 1;
    // Resume: start as if `skipSamples` samples had been taken already (the same order and
    // augmentation draws from here on as an uninterrupted run; repeating pipelines only).
    uint64_t skipSamples = 0;
    // Processes (mpirun). In memory: the global batch is sliceCount x batchSize samples of one
    // order from the shared seed, and this pipeline gives slice sliceIndex of each (the others'
    // samples are skipped with their augmentation draws, so N processes see what one process of
    // N x the batch would). Streamed: this process reads every sliceCount-th record of the
    // interleaved shards, from record sliceIndex on, into a shuffle buffer of its own. skipSamples
    // counts global samples. Repeating pipelines only.
    int sliceIndex = 0, sliceCount = 1;
    // Streamed: the threads that decode each batch (0: this thread alone; data/record_stream.hpp).
    int loaderThreads = 0;
};

// Refuses options that cannot make batches of (c, h, w) samples (bytes where `images`, else
// floats), in one tb::Error beginning with `who`.
void checkPipelineOptions(const PipelineOptions& o, const std::string& who, int c, int h, int w, bool images);

class BatchSource {
public:
    virtual ~BatchSource();
    BatchSource(const BatchSource&) = delete;
    BatchSource& operator=(const BatchSource&) = delete;

    // Fills `out` with the next batch; returns false once a non-repeating pass is over. The last
    // batch of a pass may be smaller than batchSize. Rethrows the loader's error, if it had one.
    bool next(Batch& out);

    int outChannels() const { return outC_; }
    int outHeight() const { return outH_; }
    int outWidth() const { return outW_; }

protected:
    BatchSource() = default;
    // The next batch, on whichever thread makes them (the loader thread, or the caller's with no
    // prefetch); false once a non-repeating pass is over.
    virtual bool makeBatch(Batch& b) = 0;
    // The last steps of a derived constructor and the first of its destructor: the loader thread
    // calls makeBatch, so it may run only while the derived object is whole.
    void startPrefetch(int prefetch);
    void stopPrefetch();
    int outC_ = 0, outH_ = 0, outW_ = 0;

private:
    void produce();  // body of the loader thread

    // Prefetch: one producer thread, a bounded queue of ready batches, spent batches recycled.
    int prefetch_ = 0;
    std::thread producer_;
    std::mutex mutex_;
    std::condition_variable readyCv_;  // a batch is ready, or the producer has finished
    std::condition_variable spaceCv_;  // the queue has room, or the pipeline is stopping
    std::deque<Batch> ready_;
    std::vector<Batch> spare_;
    bool stop_ = false, finished_ = false;
    std::exception_ptr error_;
};

}  // namespace tb
