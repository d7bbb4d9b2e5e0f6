// One sample as the towers take it: a window of the stored (c, h, w) sample (cropped, padded,
// mirrored), scaled to floats, its brightness and contrast shifted, standardised or normalised by
// channel, and laid out channels last where asked. The augmentation's random draws are taken
// apart from the transform, and both a set in memory and a streamed set draw each sample's from a
// counter-based stream of its own (SplitMix64 seeded by the sample's number), so skipping samples
// on resume costs nothing and the thread that decodes a sample does not matter.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "data/batch_source.hpp"

namespace tb {

// Uniform integer in [0, k); the modulo bias of a 64-bit draw is negligible for our k.
template <typename Rng>
size_t uniformIndex(Rng& rng, size_t k) {
    return size_t(rng() % k);
}
// Uniform float in [lo, hi) from the top 24 bits, so every standard library gives the same value.
template <typename Rng>
float uniformFloat(Rng& rng, float lo, float hi) {
    return lo + (hi - lo) * float(rng() >> 40) * 0x1.0p-24f;
}

// SplitMix64 (Steele, Lea, Flood 2014): a 64-bit stream from any seed, cheap to start, so each
// sample draws from its own seed = f(run seed, sample number, ...).
struct SplitMix64 {
    uint64_t state;
    uint64_t operator()() {
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
};

// One 64-bit seed from several numbers (run seed, epoch, process, sample, ...), each folded in by
// SplitMix64.
inline uint64_t seedOf(std::initializer_list<uint64_t> parts) {
    SplitMix64 g{0x243F6A8885A308D3ull};
    uint64_t h = 0;
    for (uint64_t v : parts) {
        g.state ^= v;
        h = g();
    }
    return h;
}

// Where the window of one sample starts and how it is changed.
struct SampleDraws {
    int y0 = 0, x0 = 0;  // the window's top left in the stored sample (negative: in the padding)
    bool flip = false;
    float delta = 0.0f, factor = 1.0f;  // brightness shift, contrast factor
};

// The central window (tf.image.resize_image_with_crop_or_pad), unchanged: evaluation's.
inline SampleDraws centralWindow(int h, int w, int oh, int ow) { return {(h - oh) / 2, (w - ow) / 2}; }

// Training's draws for a (h, w) sample cut to (oh, ow): five values in a fixed order (crop y,
// crop x, flip, brightness, contrast) whichever parts are on, so a seed fixes the result.
template <typename Rng>
SampleDraws drawAugmentation(Rng& rng, const PipelineOptions& o, int h, int w, int oh, int ow) {
    SampleDraws d;
    d.y0 = int(uniformIndex(rng, size_t(h + 2 * o.pad - oh) + 1)) - o.pad;
    d.x0 = int(uniformIndex(rng, size_t(w + 2 * o.pad - ow) + 1)) - o.pad;
    d.flip = (rng() >> 63) != 0 && o.flip;
    d.delta = uniformFloat(rng, -o.brightness, o.brightness);
    d.factor = uniformFloat(rng, o.contrastLow, o.contrastHigh);
    return d;
}

// Writes one sample of (c, h, w) bytes `pixels` (or floats `features`, exactly one of them
// non-null) to dst as (c, oh, ow) floats, or (oh, ow, c) with o.channelsLast: the window `d`
// (zeros where it reaches past the sample: padding is pixel value 0), pixels scaled by
// o.pixelMultiply + o.pixelAdd, then with o.augment the brightness and contrast of `d`, then
// o.standardize's and o.channelMean's normalisation. `scratch`: the caller's, for the layout change.
void transformSample(const uint8_t* pixels, const float* features, int c, int h, int w, const PipelineOptions& o,
                     int oh, int ow, const SampleDraws& d, float* dst, std::vector<float>& scratch);

}  // namespace tb
