// libpng and libjpeg report errors by longjmp: each decoder keeps everything it allocates in a
// context object outside the function that calls setjmp, so a jump skips no C++ destructor and
// the caller frees the library's state whether decoding ended or failed.
#include "data/image_codec.hpp"

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <jpeglib.h>
#include <png.h>

#include "util/error.hpp"

namespace fs = std::filesystem;

namespace tb {
namespace {

std::string sizeText(int64_t w, int64_t h) { return std::to_string(w) + "x" + std::to_string(h); }

// ---- PNG -------------------------------------------------------------------------------------

struct PngRead {
    const uint8_t* data = nullptr;
    size_t size = 0, at = 0;
    png_structp png = nullptr;
    png_infop info = nullptr;
    std::string origin, error;
    Image image;
    std::vector<png_bytep> rows;
    int orientation = 1;
};

void pngError(png_structp png, png_const_charp message) {
    auto* r = static_cast<PngRead*>(png_get_error_ptr(png));
    r->error = message;
    png_longjmp(png, 1);
}
void pngWarning(png_structp, png_const_charp) {}  // benign (a bad CRC in an ancillary chunk, ...)

void pngReadBytes(png_structp png, png_bytep out, png_size_t n) {
    auto* r = static_cast<PngRead*>(png_get_io_ptr(png));
    if (n > r->size - r->at) png_error(png, "the file ends early (truncated)");
    std::memcpy(out, r->data + r->at, n);
    r->at += n;
}

// Every libpng call that can fail, after one setjmp; false with r.error set on a failure.
bool pngDecode(PngRead& r) {
    if (setjmp(png_jmpbuf(r.png))) return false;
    png_set_read_fn(r.png, &r, pngReadBytes);
    png_set_user_limits(r.png, kMaxImageSide, kMaxImageSide);
    png_read_info(r.png, r.info);
    const png_uint_32 w = png_get_image_width(r.png, r.info), h = png_get_image_height(r.png, r.info);
    if (int64_t(w) * int64_t(h) > kMaxImagePixels) png_error(r.png, "over the pixel limit");
    const int colour = png_get_color_type(r.png, r.info);
    png_set_scale_16(r.png);
    png_set_packing(r.png);
    if (colour == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(r.png);
    if (colour == PNG_COLOR_TYPE_GRAY) png_set_expand_gray_1_2_4_to_8(r.png);
    png_set_strip_alpha(r.png);  // tRNS and alpha channels alike: the colours as stored
    png_set_interlace_handling(r.png);
    png_read_update_info(r.png, r.info);
    const int channels = png_get_channels(r.png, r.info);
    if (channels != 1 && channels != 3) png_error(r.png, "an unexpected channel count after expansion");
    r.image.width = int(w);
    r.image.height = int(h);
    r.image.channels = channels;
    r.image.pixels.resize(size_t(w) * h * size_t(channels));
    r.rows.resize(h);
    for (png_uint_32 y = 0; y < h; ++y) r.rows[y] = r.image.pixels.data() + size_t(y) * w * size_t(channels);
    png_read_image(r.png, r.rows.data());
    png_read_end(r.png, nullptr);
#ifdef PNG_eXIf_SUPPORTED
    png_uint_32 exifSize = 0;
    png_bytep exif = nullptr;
    if (png_get_eXIf_1(r.png, r.info, &exifSize, &exif) && exif) r.orientation = exifOrientation(exif, exifSize);
#endif
    return true;
}

Image decodePng(const uint8_t* data, size_t size, const std::string& origin) {
    PngRead r;
    r.data = data;
    r.size = size;
    r.origin = origin;
    r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, pngError, pngWarning);
    if (!r.png) throw Error(origin + ": libpng could not start (out of memory)");
    r.info = png_create_info_struct(r.png);
    const bool ok = r.info && pngDecode(r);
    png_destroy_read_struct(&r.png, r.info ? &r.info : nullptr, nullptr);
    if (!ok) throw Error(origin + ": not a readable PNG image (" + (r.error.empty() ? "libpng failed" : r.error) + ")");
    return r.orientation == 1 ? std::move(r.image) : orient(r.image, r.orientation);
}

// ---- JPEG ------------------------------------------------------------------------------------

struct JpegRead {
    jpeg_decompress_struct cinfo{};
    struct Errors {
        jpeg_error_mgr mgr;
        std::jmp_buf jump;
        char message[JMSG_LENGTH_MAX] = {};
    } errors;
    bool created = false;
    std::string origin;
    Image image;
    int orientation = 1;
    std::vector<uint8_t> cmyk;  // one row of 4-channel output
};

void jpegError(j_common_ptr c) {
    auto* e = reinterpret_cast<JpegRead::Errors*>(c->err);
    (*c->err->format_message)(c, e->message);
    std::longjmp(e->jump, 1);
}
void jpegWarning(j_common_ptr c, int level) {
    // A corrupt-data warning (level -1: premature end of data, bad Huffman code) is an error
    // here: libjpeg would fill the rest of the image with grey and call it decoded.
    if (level < 0) jpegError(c);
}

bool jpegDecode(JpegRead& r, const uint8_t* data, size_t size) {
    if (setjmp(r.errors.jump)) return false;
    jpeg_create_decompress(&r.cinfo);
    r.created = true;
    jpeg_mem_src(&r.cinfo, data, static_cast<unsigned long>(size));
    jpeg_save_markers(&r.cinfo, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&r.cinfo, TRUE);
    const int64_t w = r.cinfo.image_width, h = r.cinfo.image_height;
    if (w < 1 || h < 1 || w > kMaxImageSide || h > kMaxImageSide || w * h > kMaxImagePixels) {
        std::snprintf(r.errors.message, sizeof r.errors.message, "its header gives %lldx%lld pixels, over the limit",
                      static_cast<long long>(w), static_cast<long long>(h));
        return false;
    }
    for (jpeg_saved_marker_ptr m = r.cinfo.marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && m->data_length > 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0)
            r.orientation = exifOrientation(m->data + 6, m->data_length - 6);
    const J_COLOR_SPACE in = r.cinfo.jpeg_color_space;
    const bool fourChannel = in == JCS_CMYK || in == JCS_YCCK;
    r.cinfo.out_color_space = in == JCS_GRAYSCALE ? JCS_GRAYSCALE : fourChannel ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(&r.cinfo);
    const int outChannels = r.cinfo.output_components;
    if (outChannels != (in == JCS_GRAYSCALE ? 1 : fourChannel ? 4 : 3)) return false;
    r.image.width = int(r.cinfo.output_width);
    r.image.height = int(r.cinfo.output_height);
    r.image.channels = in == JCS_GRAYSCALE ? 1 : 3;
    r.image.pixels.resize(size_t(r.image.width) * size_t(r.image.height) * size_t(r.image.channels));
    if (fourChannel) r.cmyk.resize(size_t(r.image.width) * 4);
    while (r.cinfo.output_scanline < r.cinfo.output_height) {
        uint8_t* row = r.image.pixels.data() + size_t(r.cinfo.output_scanline) * r.image.width * r.image.channels;
        JSAMPROW target = fourChannel ? r.cmyk.data() : row;
        if (jpeg_read_scanlines(&r.cinfo, &target, 1) != 1) return false;
        if (!fourChannel) continue;
        // Adobe stores CMYK inverted (255 = no ink), so R = C*K/255 on the stored values.
        for (int x = 0; x < r.image.width; ++x) {
            const unsigned k = r.cmyk[size_t(x) * 4 + 3];
            for (int ch = 0; ch < 3; ++ch) row[size_t(x) * 3 + ch] = uint8_t((r.cmyk[size_t(x) * 4 + ch] * k + 127) / 255);
        }
    }
    jpeg_finish_decompress(&r.cinfo);
    return true;
}

Image decodeJpeg(const uint8_t* data, size_t size, const std::string& origin) {
    JpegRead r;
    r.origin = origin;
    r.cinfo.err = jpeg_std_error(&r.errors.mgr);
    r.errors.mgr.error_exit = jpegError;
    r.errors.mgr.emit_message = jpegWarning;
    const bool ok = jpegDecode(r, data, size);
    if (r.created) jpeg_destroy_decompress(&r.cinfo);
    if (!ok)
        throw Error(origin + ": not a readable JPEG image (" +
                    (r.errors.message[0] ? std::string(r.errors.message) : std::string("libjpeg failed")) + ")");
    return r.orientation == 1 ? std::move(r.image) : orient(r.image, r.orientation);
}

// ---- Encoding --------------------------------------------------------------------------------

struct PngWrite {
    png_structp png = nullptr;
    png_infop info = nullptr;
    std::string out, error;
    std::vector<png_bytep> rows;
};

void pngWriteBytes(png_structp png, png_bytep data, png_size_t n) {
    static_cast<PngWrite*>(png_get_io_ptr(png))->out.append(reinterpret_cast<const char*>(data), n);
}
void pngFlush(png_structp) {}
void pngWriteError(png_structp png, png_const_charp message) {
    static_cast<PngWrite*>(png_get_error_ptr(png))->error = message;
    png_longjmp(png, 1);
}

bool pngEncode(PngWrite& w, const Image& im) {
    if (setjmp(png_jmpbuf(w.png))) return false;
    png_set_write_fn(w.png, &w, pngWriteBytes, pngFlush);
    png_set_IHDR(w.png, w.info, png_uint_32(im.width), png_uint_32(im.height), 8,
                 im.channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(w.png, w.info);
    w.rows.resize(size_t(im.height));
    for (int y = 0; y < im.height; ++y)
        w.rows[size_t(y)] = const_cast<png_bytep>(im.pixels.data() + size_t(y) * im.width * im.channels);
    png_write_image(w.png, w.rows.data());
    png_write_end(w.png, nullptr);
    return true;
}

struct JpegWrite {
    jpeg_compress_struct cinfo{};
    JpegRead::Errors errors;
    bool created = false;
    unsigned char* buffer = nullptr;
    unsigned long size = 0;
};

bool jpegEncode(JpegWrite& w, const Image& im, int quality) {
    if (setjmp(w.errors.jump)) return false;
    jpeg_create_compress(&w.cinfo);
    w.created = true;
    jpeg_mem_dest(&w.cinfo, &w.buffer, &w.size);
    w.cinfo.image_width = JDIMENSION(im.width);
    w.cinfo.image_height = JDIMENSION(im.height);
    w.cinfo.input_components = im.channels;
    w.cinfo.in_color_space = im.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&w.cinfo);
    jpeg_set_quality(&w.cinfo, quality, TRUE);
    jpeg_start_compress(&w.cinfo, TRUE);
    while (w.cinfo.next_scanline < w.cinfo.image_height) {
        JSAMPROW row = const_cast<JSAMPROW>(im.pixels.data() + size_t(w.cinfo.next_scanline) * im.width * im.channels);
        jpeg_write_scanlines(&w.cinfo, &row, 1);
    }
    jpeg_finish_compress(&w.cinfo);
    return true;
}

void checkEncodable(const Image& im, const char* what) {
    if ((im.channels != 1 && im.channels != 3) || im.width < 1 || im.height < 1 ||
        im.pixels.size() != size_t(im.width) * size_t(im.height) * size_t(im.channels))
        throw Error(std::string(what) + ": an image of " + sizeText(im.width, im.height) + "x" +
                    std::to_string(im.channels) + " with " + std::to_string(im.pixels.size()) +
                    " bytes cannot be written (1 or 3 channels, one byte per sample)");
}

// ---- Resampling ------------------------------------------------------------------------------

// Pillow's BILINEAR resampling along one axis: output pixel i covers source [i, i+1) x scale; a
// triangle filter of support max(scale, 1) weighs the source pixels around its centre.
struct AxisWeights {
    std::vector<int> first;      // (out) first source index
    std::vector<int> count;      // (out) how many source pixels
    std::vector<float> weights;  // (out, maxCount) normalised
    int maxCount = 0;
};

AxisWeights axisWeights(int in, int out) {
    AxisWeights a;
    const double scale = double(in) / out, support = std::max(scale, 1.0), filterScale = std::max(scale, 1.0);
    a.maxCount = int(std::ceil(support)) * 2 + 1;
    a.first.resize(size_t(out));
    a.count.resize(size_t(out));
    a.weights.assign(size_t(out) * size_t(a.maxCount), 0.0f);
    for (int i = 0; i < out; ++i) {
        const double centre = (i + 0.5) * scale;
        const int lo = std::max(0, int(centre - support + 0.5)), hi = std::min(in, int(centre + support + 0.5));
        double total = 0;
        float* w = a.weights.data() + size_t(i) * size_t(a.maxCount);
        for (int j = lo; j < hi; ++j) {
            const double t = std::abs((j - centre + 0.5) / filterScale);
            const double v = t < 1.0 ? 1.0 - t : 0.0;
            w[j - lo] = float(v);
            total += v;
        }
        for (int j = lo; j < hi; ++j) w[j - lo] = total > 0 ? float(w[j - lo] / total) : 0.0f;
        a.first[size_t(i)] = lo;
        a.count[size_t(i)] = hi - lo;
    }
    return a;
}

Image resize(const Image& im, int outH, int outW) {
    const int c = im.channels;
    const AxisWeights ax = axisWeights(im.width, outW), ay = axisWeights(im.height, outH);
    std::vector<float> rows(size_t(im.height) * outW * c);  // (h, outW, c) after the horizontal pass
    for (int y = 0; y < im.height; ++y)
        for (int x = 0; x < outW; ++x)
            for (int ch = 0; ch < c; ++ch) {
                const float* w = ax.weights.data() + size_t(x) * ax.maxCount;
                float s = 0;
                for (int k = 0; k < ax.count[size_t(x)]; ++k)
                    s += w[k] * im.pixels[(size_t(y) * im.width + size_t(ax.first[size_t(x)] + k)) * c + ch];
                rows[(size_t(y) * outW + x) * c + ch] = s;
            }
    Image out;
    out.height = outH;
    out.width = outW;
    out.channels = c;
    out.pixels.resize(size_t(outH) * outW * c);
    for (int y = 0; y < outH; ++y)
        for (int x = 0; x < outW; ++x)
            for (int ch = 0; ch < c; ++ch) {
                const float* w = ay.weights.data() + size_t(y) * ay.maxCount;
                float s = 0;
                for (int k = 0; k < ay.count[size_t(y)]; ++k)
                    s += w[k] * rows[(size_t(ay.first[size_t(y)] + k) * outW + x) * c + ch];
                out.pixels[(size_t(y) * outW + x) * c + ch] = uint8_t(std::clamp(std::lround(s), 0L, 255L));
            }
    return out;
}

constexpr uintmax_t kMaxImageFileBytes = uintmax_t(256) << 20;

std::vector<uint8_t> readFileBytes(const std::string& path) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(path, ec);
    if (ec) throw Error(path + ": cannot be read (" + ec.message() + ")");
    if (size > kMaxImageFileBytes)
        throw Error(path + ": " + std::to_string(size >> 20) + " MiB, more than the limit of " +
                    std::to_string(kMaxImageFileBytes >> 20) + " MiB for one image file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path + ": cannot be opened (" + std::strerror(errno) + ")");
    std::vector<uint8_t> bytes(static_cast<size_t>(size));
    in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(size));
    if (size_t(in.gcount()) != bytes.size()) throw Error(path + ": cannot be read to its end");
    return bytes;
}

}  // namespace

Image readImageFile(const std::string& path) {
    const std::vector<uint8_t> bytes = readFileBytes(path);
    return decodeImage(bytes.data(), bytes.size(), path);
}

Image decodeImage(const uint8_t* data, size_t size, const std::string& origin) {
    switch (sniffImageFormat(data, size)) {
        case ImageFormat::Png: return decodePng(data, size, origin);
        case ImageFormat::Jpeg: return decodeJpeg(data, size, origin);
        case ImageFormat::Unknown: break;
    }
    if (size == 0) throw Error(origin + ": the file is empty");
    throw Error(origin + ": neither a PNG nor a JPEG image (its first bytes are not either's signature)");
}

std::string encodePng(const Image& im) {
    checkEncodable(im, "PNG");
    PngWrite w;
    w.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &w, pngWriteError, pngWarning);
    if (!w.png) throw Error("PNG: libpng could not start (out of memory)");
    w.info = png_create_info_struct(w.png);
    const bool ok = w.info && pngEncode(w, im);
    png_destroy_write_struct(&w.png, w.info ? &w.info : nullptr);
    if (!ok) throw Error("PNG: libpng could not write the image (" + w.error + ")");
    return std::move(w.out);
}

std::string encodeJpeg(const Image& im, int quality) {
    checkEncodable(im, "JPEG");
    if (quality < 1 || quality > 100) throw Error("JPEG: quality " + std::to_string(quality) + " is not 1-100");
    JpegWrite w;
    w.cinfo.err = jpeg_std_error(&w.errors.mgr);
    w.errors.mgr.error_exit = jpegError;
    const bool ok = jpegEncode(w, im, quality);
    if (w.created) jpeg_destroy_compress(&w.cinfo);
    std::string out = ok ? std::string(reinterpret_cast<const char*>(w.buffer), w.size) : std::string();
    std::free(w.buffer);
    if (!ok) throw Error(std::string("JPEG: libjpeg could not write the image (") + w.errors.message + ")");
    return out;
}

void imageToSample(const Image& im, int channels, int height, int width, uint8_t* dst) {
    const Image* src = &im;
    Image scaled;
    if (im.height != height || im.width != width) {
        // Cover the target, then take its centre.
        const double s = std::max(double(height) / im.height, double(width) / im.width);
        const int h = std::max(height, int(std::lround(im.height * s))), w = std::max(width, int(std::lround(im.width * s)));
        scaled = resize(im, h, w);
        src = &scaled;
    }
    const int y0 = (src->height - height) / 2, x0 = (src->width - width) / 2, c = src->channels;
    const size_t plane = size_t(height) * size_t(width);
    for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x) {
            const uint8_t* p = src->pixels.data() + (size_t(y + y0) * src->width + size_t(x + x0)) * c;
            const size_t at = size_t(y) * width + size_t(x);
            if (channels == c) {
                for (int ch = 0; ch < c; ++ch) dst[size_t(ch) * plane + at] = p[ch];
            } else if (channels == 1) {  // c == 3
                dst[at] = uint8_t((299u * p[0] + 587u * p[1] + 114u * p[2] + 500u) / 1000u);
            } else {  // gray into every channel
                for (int ch = 0; ch < channels; ++ch) dst[size_t(ch) * plane + at] = p[0];
            }
        }
}

int exifOrientation(const uint8_t* t, size_t n) {
    if (n < 8) return 1;
    const bool little = t[0] == 'I' && t[1] == 'I';
    if (!little && !(t[0] == 'M' && t[1] == 'M')) return 1;
    auto u16 = [&](size_t at) { return little ? unsigned(t[at] | t[at + 1] << 8) : unsigned(t[at] << 8 | t[at + 1]); };
    auto u32 = [&](size_t at) {
        return little ? uint32_t(t[at]) | uint32_t(t[at + 1]) << 8 | uint32_t(t[at + 2]) << 16 | uint32_t(t[at + 3]) << 24
                      : uint32_t(t[at]) << 24 | uint32_t(t[at + 1]) << 16 | uint32_t(t[at + 2]) << 8 | uint32_t(t[at + 3]);
    };
    if (u16(2) != 42) return 1;
    const uint32_t ifd = u32(4);
    if (ifd > n - 2) return 1;
    const unsigned entries = u16(ifd);
    for (unsigned e = 0; e < entries; ++e) {
        const size_t at = size_t(ifd) + 2 + size_t(e) * 12;
        if (at + 12 > n) return 1;
        if (u16(at) == 0x0112 && u16(at + 2) == 3) {  // Orientation, SHORT
            const unsigned v = u16(at + 8);
            return v >= 1 && v <= 8 ? int(v) : 1;
        }
    }
    return 1;
}

Image orient(const Image& im, int orientation) {
    if (orientation < 2 || orientation > 8) return im;
    const int H = im.height, W = im.width, c = im.channels;
    const bool swap = orientation >= 5;
    Image out;
    out.height = swap ? W : H;
    out.width = swap ? H : W;
    out.channels = c;
    out.pixels.resize(im.pixels.size());
    for (int y = 0; y < out.height; ++y)
        for (int x = 0; x < out.width; ++x) {
            int sy = y, sx = x;
            switch (orientation) {
                case 2: sx = W - 1 - x; break;                 // mirrored left-right
                case 3: sy = H - 1 - y, sx = W - 1 - x; break;  // turned 180 degrees
                case 4: sy = H - 1 - y; break;                 // mirrored top-bottom
                case 5: sy = x, sx = y; break;                 // transposed
                case 6: sy = H - 1 - x, sx = y; break;         // turned 90 degrees clockwise to display
                case 7: sy = H - 1 - x, sx = W - 1 - y; break;  // transversed
                case 8: sy = x, sx = W - 1 - y; break;         // turned 90 degrees anticlockwise to display
            }
            std::memcpy(out.pixels.data() + (size_t(y) * out.width + x) * c,
                        im.pixels.data() + (size_t(sy) * W + sx) * c, size_t(c));
        }
    return out;
}

}  // namespace tb
