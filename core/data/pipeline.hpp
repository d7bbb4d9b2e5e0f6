// InputPipeline: a Dataset held in memory as a stream of float batches (n, c, h, w), in a full
// permutation or a shuffle buffer each epoch, transformed by data/sample_transform.hpp, made
// ahead by BatchSource's loader thread.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "data/batch_source.hpp"
#include "data/dataset.hpp"

namespace tb {

// The mean and standard deviation of each channel over a set's pixels scaled by x * multiply + add
// (what --normalise mean-std subtracts and divides by), accumulated in double.
struct ChannelStatistics {
    std::vector<float> mean, stddev;  // (channels)
    bool empty() const { return mean.empty(); }
};
ChannelStatistics channelStatistics(const Dataset& d, float multiply, float add);
// The statistics of per-channel sums over `count` values of each channel: sum[c] and sq[c] of
// x and x^2 (a constant channel's stddev is 1e-6, so nothing divides by zero).
ChannelStatistics statisticsOf(const std::vector<double>& sum, const std::vector<double>& sq, double count);

class InputPipeline final : public BatchSource {
public:
    // `data` is not copied: it must outlive the pipeline. Throws tb::Error on bad options.
    InputPipeline(const Dataset& data, PipelineOptions options);
    ~InputPipeline() override;

private:
    bool makeBatch(Batch& b) override;            // false once a non-repeating pass is over
    void startEpoch();                            // a new sample order for the next pass
    bool nextIndex(size_t& index);                // next sample of this pass; false once it is over
    void writeSample(size_t index, float* dst);   // one (outC, outH, outW) sample, transformed
    void skip(uint64_t samples);                  // advance order and augmentation draws, no pixels

    const Dataset& data_;
    PipelineOptions opt_;
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
};

}  // namespace tb
