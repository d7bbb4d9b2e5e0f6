// The per-sample transforms of TF's cifar10_input.distorted_inputs (crop, flip, brightness,
// contrast, standardisation) and mean/std normalisation, on one sample at a time.
#include "data/sample_transform.hpp"

#include <algorithm>
#include <cmath>

#include "util/cpu_clones.hpp"

namespace tb {
namespace {

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

void transformSample(const uint8_t* pixels, const float* features, int c, int h, int w, const PipelineOptions& o,
                     int oh, int ow, const SampleDraws& d, float* dst, std::vector<float>& scratch) {
    const int y0 = d.y0, x0 = d.x0;
    const bool flip = d.flip;
    const size_t plane = size_t(oh) * ow;
    if (pixels && (y0 < 0 || x0 < 0 || y0 + oh > h || x0 + ow > w)) {
        // The window reaches into the zero padding: pixel by pixel (padding is pixel value 0).
        for (int ch = 0; ch < c; ++ch)
            for (int y = 0; y < oh; ++y)
                for (int x = 0; x < ow; ++x) {
                    const int sy = y0 + y, sx = x0 + (flip ? ow - 1 - x : x);
                    const bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
                    dst[(size_t(ch) * oh + y) * ow + x] =
                        inside ? float(pixels[(size_t(ch) * h + sy) * w + sx]) * o.pixelMultiply : 0.0f;
                }
        if (o.pixelAdd != 0.0f)
            for (size_t i = 0; i < plane * size_t(c); ++i) dst[i] += o.pixelAdd;
    } else if (pixels) {
        cropCopy(pixels, c, h, w, y0, x0, flip, o.pixelMultiply, dst, oh, ow);
        if (o.pixelAdd != 0.0f)
            for (size_t i = 0; i < plane * size_t(c); ++i) dst[i] += o.pixelAdd;
    } else {
        cropCopy(features, c, h, w, y0, x0, flip, 1.0f, dst, oh, ow);
    }

    if (o.augment) {
        // Brightness then contrast about the per-channel mean m:
        // ((x + d) - (m + d)) * f + (m + d)  =  x * f + (m * (1 - f) + d), one pass per channel.
        for (int ch = 0; ch < c; ++ch) {
            float* p = dst + ch * plane;
            double sum = 0.0;  // double: large images would lose precision in a float sum
            for (size_t i = 0; i < plane; ++i) sum += p[i];
            const float mean = float(sum / double(plane));
            const float shift = mean * (1.0f - d.factor) + d.delta;
            for (size_t i = 0; i < plane; ++i) p[i] = p[i] * d.factor + shift;
        }
    }
    if (o.standardize) {
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
    if (!o.channelMean.empty()) {
        for (int ch = 0; ch < c; ++ch) {
            float* p = dst + ch * plane;
            const float mean = o.channelMean[size_t(ch)], inv = 1.0f / o.channelStd[size_t(ch)];
            for (size_t i = 0; i < plane; ++i) p[i] = (p[i] - mean) * inv;
        }
    }
    if (o.channelsLast && c > 1) {
        // (c, h, w) -> (h, w, c): the engine's activation layout, as TensorFlow's NHWC.
        const size_t count = plane * c;
        scratch.assign(dst, dst + count);
        for (size_t i = 0; i < plane; ++i)
            for (int ch = 0; ch < c; ++ch) dst[i * c + ch] = scratch[ch * plane + i];
    }
}

}  // namespace tb
