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
    void startEpoch(uint64_t epoch);              // epoch's sample order, from its own seed
    bool nextIndex(size_t& index);                // next sample of this pass; false once it is over
    void writeSample(size_t index, float* dst);   // sample number taken_, one (outC, outH, outW), transformed
    // Steps over `samples` of the stream without their pixels: whole epochs at once (each's order
    // depends on its number alone), then the draws so far of the epoch it lands in: O(1) for a
    // permutation, O(samples into the epoch) for a shuffle buffer. So a resume costs at most one
    // epoch's draws, not the run's.
    void skip(uint64_t samples);

    const Dataset& data_;
    PipelineOptions opt_;
    // Epoch e's order draws from a stream seeded by (seed, e); sample number s's augmentation
    // from SplitMix64 seeded by (seed, s), s counting every sample of the stream from the run's
    // start (other processes' slices too). Both are used only by whichever thread makes batches
    // (the producer, or the caller when prefetch is 0), so a seed fixes the output whatever the
    // prefetch depth.
    std::mt19937_64 orderRng_;
    uint64_t epoch_ = 0;
    uint64_t taken_ = 0;              // samples of the stream drawn or skipped so far
    std::vector<float> transpose_;  // scratch of one sample for channelsLast (producer thread only)
    bool useBuffer_ = false;          // shuffle buffer smaller than the dataset
    std::vector<size_t> order_;       // (n) permutation of this pass (full-shuffle / no-shuffle mode)
    size_t orderPos_ = 0;
    std::vector<size_t> buffer_;      // (<= shuffleBuffer) sample indices waiting in the shuffle buffer
    size_t nextSource_ = 0;           // next sample index to enter the buffer
    bool passDone_ = false;
};

}  // namespace tb
