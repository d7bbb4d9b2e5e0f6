// Image files as 8-bit pixels: PNG through libpng, JPEG through libjpeg-turbo (its libjpeg API),
// and the rules that turn any decoded image into one sample of a model's input shape.
//
// Decoding (decodeImage), stated once for every reader of image files (folders, TFRecord
// Examples whose image_raw holds a file):
//   PNG   any bit depth and colour type; palettes and tRNS expanded; 16-bit samples scaled to 8
//         (png_set_scale_16); the alpha channel dropped (as torchvision's default loader, PIL's
//         convert("RGB"), does); gamma left as stored. An eXIf chunk's orientation is applied.
//   JPEG  baseline and progressive; grayscale stays one channel, YCbCr becomes RGB (libjpeg's
//         conversion), CMYK and YCCK become RGB by R = C*K/255 ... on Adobe's inverted values
//         (what Photoshop writes); the EXIF orientation (APP1, tag 0x0112) is applied.
//   Either: at most kMaxImageSide pixels a side and kMaxImagePixels in all, checked from the
//   header before any pixel buffer is allocated.
// To a sample (imageToSample): gray -> RGB replicates the gray; RGB -> gray is the luminance
// (299 R + 587 G + 114 B + 500) / 1000 (ITU-R BT.601, as PIL's "L"); an image of another size is
// scaled so that it covers the target (the shorter side relative to the target meets it), with
// Pillow's BILINEAR rule (a triangle filter widened by the scale when shrinking, so shrinking
// averages), then centre-cropped. An image of the target's size is copied exactly.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tb {

inline constexpr int kMaxImageSide = 16384;
inline constexpr int64_t kMaxImagePixels = int64_t(64) << 20;  // 64 megapixels (256 MiB as RGBA)

struct Image {
    int height = 0, width = 0, channels = 0;  // channels: 1 (gray) or 3 (RGB)
    std::vector<uint8_t> pixels;              // (height, width, channels), rows top to bottom
};

enum class ImageFormat { Png, Jpeg, Unknown };
// By the file's first bytes (PNG's 8-byte signature, JPEG's SOI marker FF D8 FF); needs neither
// library (builds without them still recognise what they cannot decode).
inline ImageFormat sniffImageFormat(const uint8_t* d, size_t size) {
    if (size >= 8 && d[0] == 0x89 && d[1] == 'P' && d[2] == 'N' && d[3] == 'G' && d[4] == '\r' && d[5] == '\n' &&
        d[6] == 0x1A && d[7] == '\n')
        return ImageFormat::Png;
    if (size >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return ImageFormat::Jpeg;
    return ImageFormat::Unknown;
}

// Decodes a PNG or JPEG file's bytes. Throws tb::Error "<origin>: <what is wrong>" for anything
// else: another format, a truncated or corrupt file, a size over the limits.
Image decodeImage(const uint8_t* data, size_t size, const std::string& origin);

// Reads and decodes an image file (at most 256 MiB); errors name the file.
Image readImageFile(const std::string& path);

// Writes `image` (channels 1 or 3) as the bytes of a PNG file, or of a baseline JPEG file of the
// given quality (1-100, 4:2:0 chroma for colour). Throws tb::Error on a malformed image.
std::string encodePng(const Image& image);
std::string encodeJpeg(const Image& image, int quality);

// One (channels, height, width) sample of 8-bit planes from `image` by the rules above.
void imageToSample(const Image& image, int channels, int height, int width, uint8_t* dst);

// The EXIF orientation (1-8) in a TIFF-structured EXIF block (what follows "Exif\0\0" in a JPEG's
// APP1 segment, or a PNG's eXIf chunk); 1 where there is none or the block is malformed.
int exifOrientation(const uint8_t* tiff, size_t size);
// The image as displayed under EXIF orientation 1-8 (2 mirrored, 3 turned 180 degrees, 6 turned
// 90 degrees clockwise, ...).
Image orient(const Image& image, int orientation);

}  // namespace tb
