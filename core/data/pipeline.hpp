// InputPipeline: turns a Dataset into a stream of float batches (n, c, h, w) with a shuffle
// buffer, optional CIFAR-10 augmentation and a background thread that prefetches batches so
// loading overlaps compute (the role of TF's input queues in the seeds).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "data/dataset.hpp"

namespace tb {

struct Batch {
    int n = 0, c = 0, h = 0, w = 0;
    std::vector<float> x;        // (n, c, h, w), or (n, h, w, c) with channelsLast
    std::vector<int32_t> y;      // (n)
};

struct PipelineOptions {
    int batchSize = 128;
    bool shuffle = true;
    size_t shuffleBuffer = 0;    // 0: the whole dataset (a full permutation each epoch)
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
    // Processes (mpirun): the global batch is sliceCount x batchSize samples of one order from
    // the shared seed, and this pipeline gives slice sliceIndex of each (the others' samples are
    // skipped with their augmentation draws, so N processes see what one process of N x the
    // batch would). skipSamples counts global samples. Repeating pipelines only.
    int sliceIndex = 0, sliceCount = 1;
};

// The mean and standard deviation of each channel over a set's pixels scaled by x * multiply + add
// (what --normalise mean-std subtracts and divides by), accumulated in double.
struct ChannelStatistics {
    std::vector<float> mean, stddev;  // (channels)
    bool empty() const { return mean.empty(); }
};
ChannelStatistics channelStatistics(const Dataset& d, float multiply, float add);

class InputPipeline {
public:
    // `data` is not copied: it must outlive the pipeline. Throws tb::Error on bad options.
    InputPipeline(const Dataset& data, PipelineOptions options);
    ~InputPipeline();
    InputPipeline(const InputPipeline&) = delete;
    InputPipeline& operator=(const InputPipeline&) = delete;

    // Fills `out` with the next batch; returns false once a non-repeating pass is over.
    // The last batch of a pass may be smaller than batchSize.
    bool next(Batch& out);

    int outChannels() const;
    int outHeight() const;
    int outWidth() const;

private:
    void startEpoch();                            // a new sample order for the next pass
    bool nextIndex(size_t& index);                // next sample of this pass; false once it is over
    bool makeBatch(Batch& b);                     // false once a non-repeating pass is over
    void writeSample(size_t index, float* dst);   // one (outC, outH, outW) sample, transformed
    void skip(uint64_t samples);                  // advance order and augmentation draws, no pixels
    void produce();                               // body of the prefetch thread

    const Dataset& data_;
    PipelineOptions opt_;
    int outC_ = 0, outH_ = 0, outW_ = 0;
    // Sample order and augmentation draw from separate streams, both used only by whichever
    // thread makes batches (the producer, or the caller when prefetch is 0), so a seed fixes
    // the output whatever the prefetch depth.
    std::mt19937_64 orderRng_, augmentRng_;
    std::vector<float> transpose_;  // scratch of one sample for channelsLast (producer thread only)
    bool useBuffer_ = false;          // shuffle buffer smaller than the dataset
    std::vector<size_t> order_;       // (n) permutation of this pass (full-shuffle / no-shuffle mode)
    size_t orderPos_ = 0;
    std::vector<size_t> buffer_;      // (<= shuffleBuffer) sample indices waiting in the shuffle buffer
    size_t nextSource_ = 0;           // next sample index to enter the buffer
    bool passDone_ = false;

    // Prefetch: one producer thread, a bounded queue of ready batches, spent batches recycled.
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
