// InputPipeline: sample order (full permutation or a tf.data-style shuffle buffer), per-sample
// transforms (crop, flip, brightness, contrast, standardisation as in TF's
// cifar10_input.distorted_inputs) and one producer thread that keeps `prefetch` batches ready.
#include "data/pipeline.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "util/cpu_clones.hpp"
#include "util/error.hpp"
#include "util/float_mode.hpp"

namespace tb {
namespace {

// Uniform integer in [0, k); the modulo bias of a 64-bit draw is negligible for our k.
size_t uniformIndex(std::mt19937_64& rng, size_t k) { return size_t(rng() % k); }

// Uniform float in [lo, hi) from the top 24 bits, so every standard library gives the same value.
float uniformFloat(std::mt19937_64& rng, float lo, float hi) {
    return lo + (hi - lo) * float(rng() >> 40) * 0x1.0p-24f;
}

// d[i] = s[i] * scale over n elements: the pipeline's hot loop, compiled per instruction set (the
// baseline's SSE2 widens bytes to floats four at a time).
TB_CPU_CLONES void scaleCopy(const uint8_t* __restrict s, float* __restrict d, size_t n, float scale) {
    for (size_t i = 0; i < n; ++i) d[i] = float(s[i]) * scale;
}
TB_CPU_CLONES void scaleCopy(const float* __restrict s, float* __restrict d, size_t n, float scale) {
    for (size_t i = 0; i < n; ++i) d[i] = s[i] * scale;
}

// Copies the (c, oh, ow) window at (y0, x0) of a (c, h, w) sample into dst as float * scale,
// mirrored left-right when flip is set. Without a crop across the width the window's rows are
// contiguous in both: one scaleCopy per channel, not per short row (vector loops, not tails).
template <typename T>
void cropCopy(const T* src, int c, int h, int w, int y0, int x0, bool flip, float scale, float* dst, int oh,
              int ow) {
    for (int ch = 0; ch < c; ++ch) {
        const T* plane = src + (size_t(ch) * h + size_t(y0)) * w + x0;
        float* out = dst + size_t(ch) * oh * ow;
        if (!flip && ow == w) {
            scaleCopy(plane, out, size_t(oh) * size_t(ow), scale);
            continue;
        }
        for (int y = 0; y < oh; ++y) {
            const T* s = plane + size_t(y) * w;
            float* d = out + size_t(y) * ow;
            if (flip)
                for (int x = 0; x < ow; ++x) d[x] = float(s[ow - 1 - x]) * scale;
            else
                scaleCopy(s, d, size_t(ow), scale);
        }
    }
}

}  // namespace

ChannelStatistics channelStatistics(const Dataset& d, float multiply, float add) {
    if (!d.isImage() || d.size() == 0) throw Error("--normalise mean-std: '" + d.name + "' holds no images to take statistics of");
    ChannelStatistics s;
    const size_t plane = size_t(d.height) * size_t(d.width);
    for (int ch = 0; ch < d.channels; ++ch) {
        double sum = 0, sq = 0;
        for (size_t i = 0; i < d.size(); ++i) {
            const uint8_t* p = d.pixels.data() + i * d.sampleSize() + size_t(ch) * plane;
            for (size_t k = 0; k < plane; ++k) {
                const double v = double(float(p[k]) * multiply + add);
                sum += v;
                sq += v * v;
            }
        }
        const double n = double(d.size() * plane), mean = sum / n;
        const double sd = std::sqrt(std::max(0.0, sq / n - mean * mean));
        s.mean.push_back(float(mean));
        s.stddev.push_back(float(std::max(sd, 1e-6)));  // a constant channel: no division by zero
    }
    return s;
}

InputPipeline::InputPipeline(const Dataset& data, PipelineOptions options)
    : data_(data), opt_(options), orderRng_(options.seed), augmentRng_(options.seed ^ 0xA5A5A5A55A5A5A5Aull) {
    const std::string who = "input pipeline for '" + data.name + "'";
    if (data.size() == 0) throw Error(who + ": the dataset is empty");
    const size_t expect = data.size() * data.sampleSize();
    if (data.isImage() ? data.pixels.size() != expect : data.features.size() != expect)
        throw Error(who + ": the dataset holds " + std::to_string(data.size()) + " labels but " +
                    std::to_string(data.isImage() ? data.pixels.size() : data.features.size()) +
                    " values, not one sample of " + std::to_string(data.sampleSize()) + " per label");
    if (opt_.batchSize < 1) throw Error(who + ": batch size " + std::to_string(opt_.batchSize) + " is not positive");
    if (opt_.prefetch < 0) throw Error(who + ": prefetch " + std::to_string(opt_.prefetch) + " is negative");
    if (opt_.sliceCount < 1 || opt_.sliceIndex < 0 || opt_.sliceIndex >= opt_.sliceCount ||
        (opt_.sliceCount > 1 && !opt_.repeat))
        throw Error(who + ": slice " + std::to_string(opt_.sliceIndex) + " of " + std::to_string(opt_.sliceCount) +
                    " (a repeating pipeline's slice from 0 to the count)");
    if (!opt_.channelMean.empty() &&
        (opt_.channelMean.size() != size_t(data.channels) || opt_.channelStd.size() != size_t(data.channels)))
        throw Error(who + ": channel statistics of " + std::to_string(opt_.channelMean.size()) + " channels for samples of " +
                    std::to_string(data.channels));
    if (opt_.augment && opt_.pad > 0 && !data.isImage())
        throw Error(who + ": --augment crop pads images, and these samples are features (not pixels)");
    if (opt_.pad < 0 || opt_.pad > 1024 || opt_.brightness < 0 || !(opt_.contrastLow <= opt_.contrastHigh))
        throw Error(who + ": augmentation pad " + std::to_string(opt_.pad) + ", brightness " + std::to_string(opt_.brightness) +
                    ", contrast " + std::to_string(opt_.contrastLow) + "-" + std::to_string(opt_.contrastHigh) +
                    " (a pad of 0-1024 pixels, a brightness >= 0, a contrast range low <= high)");
    if (opt_.cropH < 0 || opt_.cropW < 0 || opt_.cropH > data.height || opt_.cropW > data.width)
        throw Error(who + ": crop " + std::to_string(opt_.cropH) + "x" + std::to_string(opt_.cropW) +
                    " does not fit its " + std::to_string(data.height) + "x" + std::to_string(data.width) + " samples");
    outC_ = data.channels;
    outH_ = opt_.cropH > 0 ? opt_.cropH : data.height;
    outW_ = opt_.cropW > 0 ? opt_.cropW : data.width;
    useBuffer_ = opt_.shuffle && opt_.shuffleBuffer > 0 && opt_.shuffleBuffer < data.size();
    startEpoch();
    if (opt_.skipSamples > 0) {
        if (!opt_.repeat) throw Error(who + ": only a repeating (training) pipeline can skip samples");
        skip(opt_.skipSamples);
    }
    if (opt_.prefetch > 0) producer_ = std::thread([this] { produce(); });
}

void InputPipeline::skip(uint64_t samples) {
    // makeBatch's draws without the pixels: the order's, and writeSample's five augmentation draws.
    for (uint64_t i = 0; i < samples; ++i) {
        size_t index;
        while (!nextIndex(index)) startEpoch();
        if (opt_.augment) augmentRng_.discard(5);
    }
}

InputPipeline::~InputPipeline() {
    {
        std::lock_guard<std::mutex> lk(mutex_);
        stop_ = true;
    }
    spaceCv_.notify_all();
    readyCv_.notify_all();
    if (producer_.joinable()) producer_.join();
}

int InputPipeline::outChannels() const { return outC_; }
int InputPipeline::outHeight() const { return outH_; }
int InputPipeline::outWidth() const { return outW_; }

void InputPipeline::startEpoch() {
    const size_t n = data_.size();
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
            startEpoch();  // repeating batches straddle epochs, so every batch is full
            continue;
        }
        writeSample(index, b.x.data() + n * per);
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
    const int c = data_.channels, h = data_.height, w = data_.width;
    const int oh = outH_, ow = outW_;
    int y0 = (h - oh) / 2, x0 = (w - ow) / 2;  // central crop (tf.image.resize_image_with_crop_or_pad)
    bool flip = false;
    float delta = 0.0f, factor = 1.0f;
    const int pad = opt_.augment ? opt_.pad : 0;
    if (opt_.augment) {
        // Draw order is fixed (crop y, crop x, flip, brightness, contrast) so a seed fixes the result.
        y0 = int(uniformIndex(augmentRng_, size_t(h + 2 * pad - oh) + 1)) - pad;
        x0 = int(uniformIndex(augmentRng_, size_t(w + 2 * pad - ow) + 1)) - pad;
        flip = (augmentRng_() >> 63) != 0 && opt_.flip;
        delta = uniformFloat(augmentRng_, -opt_.brightness, opt_.brightness);
        factor = uniformFloat(augmentRng_, opt_.contrastLow, opt_.contrastHigh);
    }
    const size_t plane = size_t(oh) * ow;
    if (data_.isImage() && (y0 < 0 || x0 < 0 || y0 + oh > h || x0 + ow > w)) {
        // The window reaches into the zero padding: pixel by pixel (padding is pixel value 0).
        const uint8_t* src = data_.pixels.data() + index * data_.sampleSize();
        for (int ch = 0; ch < c; ++ch)
            for (int y = 0; y < oh; ++y)
                for (int x = 0; x < ow; ++x) {
                    const int sy = y0 + y, sx = x0 + (flip ? ow - 1 - x : x);
                    const bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
                    dst[(size_t(ch) * oh + y) * ow + x] =
                        inside ? float(src[(size_t(ch) * h + sy) * w + sx]) * opt_.pixelMultiply : 0.0f;
                }
        if (opt_.pixelAdd != 0.0f)
            for (size_t i = 0; i < plane * size_t(c); ++i) dst[i] += opt_.pixelAdd;
    } else if (data_.isImage()) {
        cropCopy(data_.pixels.data() + index * data_.sampleSize(), c, h, w, y0, x0, flip, opt_.pixelMultiply, dst, oh, ow);
        if (opt_.pixelAdd != 0.0f)
            for (size_t i = 0; i < plane * size_t(c); ++i) dst[i] += opt_.pixelAdd;
    } else {
        cropCopy(data_.features.data() + index * data_.sampleSize(), c, h, w, y0, x0, flip, 1.0f, dst, oh, ow);
    }

    if (opt_.augment) {
        // Brightness then contrast about the per-channel mean m:
        // ((x + d) - (m + d)) * f + (m + d)  =  x * f + (m * (1 - f) + d), one pass per channel.
        for (int ch = 0; ch < c; ++ch) {
            float* p = dst + ch * plane;
            double sum = 0.0;  // double: large images would lose precision in a float sum
            for (size_t i = 0; i < plane; ++i) sum += p[i];
            const float mean = float(sum / double(plane));
            const float shift = mean * (1.0f - factor) + delta;
            for (size_t i = 0; i < plane; ++i) p[i] = p[i] * factor + shift;
        }
    }
    if (opt_.standardize) {
        // tf.image.per_image_standardization: (x - mean) / max(stddev, 1 / sqrt(N)) over the image.
        const size_t count = plane * c;
        double sum = 0.0;
        for (size_t i = 0; i < count; ++i) sum += dst[i];
        const float mean = float(sum / double(count));
        double sq = 0.0;  // two passes: stable for images far from zero mean
        for (size_t i = 0; i < count; ++i) sq += double(dst[i] - mean) * double(dst[i] - mean);
        const float stddev = float(std::sqrt(sq / double(count)));
        const float inv = 1.0f / std::max(stddev, 1.0f / std::sqrt(float(count)));
        for (size_t i = 0; i < count; ++i) dst[i] = (dst[i] - mean) * inv;
    }
    if (!opt_.channelMean.empty()) {
        for (int ch = 0; ch < c; ++ch) {
            float* p = dst + ch * plane;
            const float mean = opt_.channelMean[size_t(ch)], inv = 1.0f / opt_.channelStd[size_t(ch)];
            for (size_t i = 0; i < plane; ++i) p[i] = (p[i] - mean) * inv;
        }
    }
    if (opt_.channelsLast && c > 1) {
        // (c, h, w) -> (h, w, c): the engine's activation layout, as TensorFlow's NHWC.
        const size_t count = plane * c;
        transpose_.assign(dst, dst + count);
        for (size_t i = 0; i < plane; ++i)
            for (int ch = 0; ch < c; ++ch) dst[i * c + ch] = transpose_[ch * plane + i];
    }
}

void InputPipeline::produce() {
    flushDenormals();  // augmentation and standardisation are float arithmetic (util/float_mode.hpp)
    for (;;) {
        Batch b;
        {
            // Wait for room first, so at most `prefetch` batches are ever made ahead.
            std::unique_lock<std::mutex> lk(mutex_);
            spaceCv_.wait(lk, [this] { return stop_ || ready_.size() < size_t(opt_.prefetch); });
            if (stop_) return;
            if (!spare_.empty()) {
                b = std::move(spare_.back());
                spare_.pop_back();
            }
        }
        bool ok = false;
        try {
            ok = makeBatch(b);
        } catch (...) {
            std::lock_guard<std::mutex> lk(mutex_);
            error_ = std::current_exception();
            finished_ = true;
            readyCv_.notify_all();
            return;
        }
        {
            std::lock_guard<std::mutex> lk(mutex_);
            if (ok)
                ready_.push_back(std::move(b));
            else
                finished_ = true;
        }
        readyCv_.notify_one();
        if (!ok) return;
    }
}

bool InputPipeline::next(Batch& out) {
    if (opt_.prefetch == 0) return makeBatch(out);
    std::unique_lock<std::mutex> lk(mutex_);
    readyCv_.wait(lk, [this] { return !ready_.empty() || finished_; });
    if (ready_.empty()) {
        if (error_) std::rethrow_exception(error_);
        return false;
    }
    std::swap(out, ready_.front());
    spare_.push_back(std::move(ready_.front()));  // the caller's old buffers, reused by the producer
    ready_.pop_front();
    if (spare_.size() > size_t(opt_.prefetch) + 1) spare_.pop_back();  // callers passing fresh batches
    lk.unlock();
    spaceCv_.notify_one();
    return true;
}

}  // namespace tb
