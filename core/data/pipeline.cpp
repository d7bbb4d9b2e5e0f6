// InputPipeline: sample order (full permutation or a tf.data-style shuffle buffer) over a set in
// memory, each sample transformed by data/sample_transform.hpp.
#include "data/pipeline.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "data/sample_transform.hpp"
#include "util/error.hpp"

namespace tb {

ChannelStatistics statisticsOf(const std::vector<double>& sum, const std::vector<double>& sq, double count) {
    ChannelStatistics s;
    for (size_t ch = 0; ch < sum.size(); ++ch) {
        const double mean = sum[ch] / count;
        const double sd = std::sqrt(std::max(0.0, sq[ch] / count - mean * mean));
        s.mean.push_back(float(mean));
        s.stddev.push_back(float(std::max(sd, 1e-6)));  // a constant channel: no division by zero
    }
    return s;
}

ChannelStatistics channelStatistics(const Dataset& d, float multiply, float add) {
    if (!d.isImage() || d.size() == 0) throw Error("--normalise mean-std: '" + d.name + "' holds no images to take statistics of");
    const size_t plane = size_t(d.height) * size_t(d.width);
    std::vector<double> sum(size_t(d.channels)), sq(size_t(d.channels));
    for (int ch = 0; ch < d.channels; ++ch)
        for (size_t i = 0; i < d.size(); ++i) {
            const uint8_t* p = d.pixels.data() + i * d.sampleSize() + size_t(ch) * plane;
            for (size_t k = 0; k < plane; ++k) {
                const double v = double(float(p[k]) * multiply + add);
                sum[size_t(ch)] += v;
                sq[size_t(ch)] += v * v;
            }
        }
    return statisticsOf(sum, sq, double(d.size() * plane));
}

InputPipeline::InputPipeline(const Dataset& data, PipelineOptions options)
    : data_(data), opt_(options) {
    const std::string who = "input pipeline for '" + data.name + "'";
    if (data.size() == 0) throw Error(who + ": the dataset is empty");
    const size_t expect = data.size() * data.sampleSize();
    if (data.isImage() ? data.pixels.size() != expect : data.features.size() != expect)
        throw Error(who + ": the dataset holds " + std::to_string(data.size()) + " labels but " +
                    std::to_string(data.isImage() ? data.pixels.size() : data.features.size()) +
                    " values, not one sample of " + std::to_string(data.sampleSize()) + " per label");
    checkPipelineOptions(opt_, who, data.channels, data.height, data.width, data.isImage());
    outC_ = data.channels;
    outH_ = opt_.cropH > 0 ? opt_.cropH : data.height;
    outW_ = opt_.cropW > 0 ? opt_.cropW : data.width;
    useBuffer_ = opt_.shuffle && opt_.shuffleBuffer > 0 && opt_.shuffleBuffer < data.size();
    startEpoch(0);
    if (opt_.skipSamples > 0) skip(opt_.skipSamples);
    startPrefetch(opt_.prefetch);
}

InputPipeline::~InputPipeline() { stopPrefetch(); }

void InputPipeline::skip(uint64_t samples) {
    const uint64_t n = data_.size(), target = taken_ + samples;
    // Every epoch is n samples long (a shuffle buffer drains at its end), so sample number s is
    // the (s % n)-th draw of epoch s / n.
    uint64_t into = taken_ - epoch_ * n;  // draws made in epoch_ (n at its very end)
    if (target / n != epoch_) {
        startEpoch(target / n);
        into = 0;
    }
    const uint64_t draws = target % n - std::min(into, target % n);
    if (!useBuffer_) {
        orderPos_ += size_t(draws);
    } else {
        size_t index;
        for (uint64_t i = 0; i < draws; ++i) nextIndex(index);
    }
    taken_ = target;
}

void InputPipeline::startEpoch(uint64_t epoch) {
    const size_t n = data_.size();
    epoch_ = epoch;
    orderRng_.seed(seedOf({opt_.seed, epoch}));
    if (useBuffer_) {
        // tf.data shuffle(B): the buffer starts with the first B samples in file order; each
        // draw takes a random slot and refills it with the next sample, then the buffer drains.
        buffer_.resize(opt_.shuffleBuffer);
        std::iota(buffer_.begin(), buffer_.end(), size_t(0));
        nextSource_ = buffer_.size();
        return;
    }
    order_.resize(n);
    std::iota(order_.begin(), order_.end(), size_t(0));
    if (opt_.shuffle)
        for (size_t i = n - 1; i > 0; --i) std::swap(order_[i], order_[uniformIndex(orderRng_, i + 1)]);  // Fisher-Yates
    orderPos_ = 0;
}

bool InputPipeline::nextIndex(size_t& index) {
    if (!useBuffer_) {
        if (orderPos_ == order_.size()) return false;
        index = order_[orderPos_++];
        return true;
    }
    if (buffer_.empty()) return false;
    size_t slot = uniformIndex(orderRng_, buffer_.size());
    index = buffer_[slot];
    if (nextSource_ < data_.size()) {
        buffer_[slot] = nextSource_++;
    } else {
        buffer_[slot] = buffer_.back();
        buffer_.pop_back();
    }
    return true;
}

bool InputPipeline::makeBatch(Batch& b) {
    if (passDone_) return false;
    const size_t per = size_t(outC_) * outH_ * outW_;
    const size_t cap = size_t(opt_.batchSize);
    b.c = outC_;
    b.h = outH_;
    b.w = outW_;
    b.x.resize(cap * per);
    b.y.resize(cap);
    size_t n = 0;
    if (opt_.sliceCount > 1) skip(uint64_t(opt_.sliceIndex) * cap);  // the processes before this one
    while (n < cap) {
        size_t index;
        if (!nextIndex(index)) {
            if (!opt_.repeat) {
                passDone_ = true;
                break;
            }
            startEpoch(epoch_ + 1);  // repeating batches straddle epochs, so every batch is full
            continue;
        }
        writeSample(index, b.x.data() + n * per);
        ++taken_;
        b.y[n] = data_.labels[index];
        ++n;
    }
    if (opt_.sliceCount > 1) skip(uint64_t(opt_.sliceCount - 1 - opt_.sliceIndex) * cap);  // and after it
    if (n == 0) return false;
    b.n = int(n);
    b.x.resize(n * per);
    b.y.resize(n);
    return true;
}

void InputPipeline::writeSample(size_t index, float* dst) {
    const int h = data_.height, w = data_.width;
    SplitMix64 rng{seedOf({opt_.seed ^ 0xA5A5A5A55A5A5A5Aull, taken_})};
    const SampleDraws d = opt_.augment ? drawAugmentation(rng, opt_, h, w, outH_, outW_)
                                       : centralWindow(h, w, outH_, outW_);
    const size_t at = index * data_.sampleSize();
    transformSample(data_.isImage() ? data_.pixels.data() + at : nullptr,
                    data_.isImage() ? nullptr : data_.features.data() + at, data_.channels, h, w, opt_, outH_, outW_, d,
                    dst, transpose_);
}

}  // namespace tb
