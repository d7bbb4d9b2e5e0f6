// Image files: the decoders' rules (data/image_codec.hpp), their refusals, and image folders
// (data/image_folder.hpp): a folder written from an IDX set reads back as that set, bit for bit
// and in its order, and every malformed folder is refused in one sentence naming what is wrong.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "test_support.hpp"

#ifdef TB_HAVE_IMAGES
#include "data/dataset.hpp"
#include "data/image_codec.hpp"
#include "data/image_folder.hpp"

#include <cstdio>
#include <jpeglib.h>
#include "util/error.hpp"
#ifdef TB_HAVE_PROTOBUF
#include "data/tfrecord_dataset.hpp"
#include "io/tfrecord.hpp"
#include "tensorflow/example.hpp"
#endif

namespace fs = std::filesystem;
using tbtest::mentions;
using tbtest::sourcePath;

namespace {

tb::Image gradient(int h, int w, int c) {
    tb::Image im{h, w, c, {}};
    im.pixels.resize(size_t(h) * w * c);
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
            for (int ch = 0; ch < c; ++ch) im.pixels[(size_t(y) * w + x) * c + ch] = uint8_t((y * 17 + x * 5 + ch * 80) % 256);
    return im;
}

// A smooth image (no wrap-around edges), what JPEG is made for.
tb::Image smooth(int h, int w, int c) {
    tb::Image im{h, w, c, {}};
    im.pixels.resize(size_t(h) * w * c);
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
            for (int ch = 0; ch < c; ++ch) im.pixels[(size_t(y) * w + x) * c + ch] = uint8_t(std::min(255, y * 3 + x * 2 + ch * 20));
    return im;
}

tb::DataOptions fitTo(int c, int h, int w, bool skipBadImages = false) {
    tb::DataOptions o;
    o.channels = c;
    o.height = h;
    o.width = w;
    o.skipBadImages = skipBadImages;
    return o;
}

tb::Image decode(const std::string& bytes, const std::string& origin = "test image") {
    return tb::decodeImage(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), origin);
}

QString errorOf(const std::function<void()>& f) {
    try {
        f();
    } catch (const tb::Error& e) {
        return QString::fromUtf8(e.what());
    }
    return {};
}

void writeBytes(const fs::path& path, const std::string& bytes) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

// A JPEG with an EXIF APP1 segment giving `orientation`, inserted after the SOI marker.
std::string withExifOrientation(const std::string& jpeg, int orientation) {
    std::string tiff = std::string("II*\0\x08\0\0\0", 8) + std::string("\x01\0", 2) +  // one IFD entry
                       std::string("\x12\x01\x03\0\x01\0\0\0", 8) + char(orientation) + std::string("\0\0\0", 3) +
                       std::string("\0\0\0\0", 4);
    const std::string payload = std::string("Exif\0\0", 6) + tiff;
    const size_t len = payload.size() + 2;
    return jpeg.substr(0, 2) + "\xFF\xE1" + char(len >> 8) + char(len & 0xFF) + payload + jpeg.substr(2);
}

}  // namespace

class TestImages : public QObject {
    Q_OBJECT
private slots:
    void pngRoundTripsExactly() {
        for (int c : {1, 3}) {
            const tb::Image im = gradient(13, 29, c);
            const tb::Image back = decode(tb::encodePng(im));
            QCOMPARE(back.height, 13);
            QCOMPARE(back.width, 29);
            QCOMPARE(back.channels, c);
            QVERIFY(back.pixels == im.pixels);
        }
    }
    void jpegDecodesCloseToItsSource() {
        for (int c : {1, 3}) {
            const tb::Image im = smooth(32, 48, c);
            const tb::Image back = decode(tb::encodeJpeg(im, 95));
            QCOMPARE(back.channels, c);
            double err = 0;
            for (size_t i = 0; i < im.pixels.size(); ++i) err += std::abs(int(back.pixels[i]) - int(im.pixels[i]));
            err /= double(im.pixels.size());
            QVERIFY2(err < 2, qPrintable(QString("mean error %1 of 255 at quality 95").arg(err)));
        }
    }
    // EXIF orientation 6 (turn 90 degrees clockwise to display): a bright top-left block of the
    // stored image is at the top-right of the displayed one; 3 turns it to the bottom-right.
    void exifOrientationIsApplied() {
        tb::Image im{32, 48, 1, std::vector<uint8_t>(32 * 48, 0)};
        for (int y = 0; y < 8; ++y)
            for (int x = 0; x < 8; ++x) im.pixels[size_t(y) * 48 + x] = 255;
        const std::string jpeg = tb::encodeJpeg(im, 100);
        const tb::Image six = decode(withExifOrientation(jpeg, 6));
        QCOMPARE(six.height, 48);
        QCOMPARE(six.width, 32);
        QVERIFY(six.pixels[size_t(3) * 32 + 28] > 200 && six.pixels[size_t(3) * 32 + 3] < 50);
        const tb::Image three = decode(withExifOrientation(jpeg, 3));
        QCOMPARE(three.height, 32);
        QVERIFY(three.pixels[size_t(28) * 48 + 44] > 200 && three.pixels[size_t(3) * 48 + 3] < 50);
        QCOMPARE(decode(withExifOrientation(jpeg, 1)).pixels, decode(jpeg).pixels);
        // Every orientation is a permutation of the pixels that 1 undoes with its inverse.
        const tb::Image g = gradient(5, 7, 3);
        for (int o = 1; o <= 8; ++o) {
            tb::Image t = tb::orient(g, o);
            QCOMPARE(t.pixels.size(), g.pixels.size());
            const int inverse = o == 6 ? 8 : o == 8 ? 6 : o;
            QVERIFY2(tb::orient(t, inverse).pixels == g.pixels, qPrintable(QString("orientation %1").arg(o)));
        }
    }
    // The stated expansions, on PNG files made by hand (tests/fuzz/corpus/fuzz_image, written by
    // Python's zlib): a palette with a tRNS chunk becomes its RGB colours (transparency dropped),
    // 16-bit gray with alpha becomes round(v * 255 / 65535) gray (alpha dropped).
    void pngExpansionsFollowTheRules() {
        const tb::Image pal = tb::readImageFile(sourcePath("tests/fuzz/corpus/fuzz_image/palette_trns.png").toStdString());
        QCOMPARE(pal.channels, 3);
        QCOMPARE(pal.width, 4);
        const std::vector<uint8_t> colours[3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}};
        const int index[2][4] = {{0, 1, 2, 1}, {2, 1, 0, 0}};
        for (int y = 0; y < 2; ++y)
            for (int x = 0; x < 4; ++x)
                QVERIFY(std::equal(colours[index[y][x]].begin(), colours[index[y][x]].end(),
                                   pal.pixels.begin() + (y * 4 + x) * 3));
        const tb::Image g16 = tb::readImageFile(sourcePath("tests/fuzz/corpus/fuzz_image/gray16_alpha.png").toStdString());
        QCOMPARE(g16.channels, 1);
        QCOMPARE(g16.width, 3);
        for (int x = 0; x < 3; ++x) QCOMPARE(int(g16.pixels[size_t(x)]), int(std::lround(8000.0 * x * 255 / 65535)));
    }
    // CMYK JPEG (as Photoshop writes it: Adobe marker, inverted values, 255 = no ink) becomes RGB
    // by R = C*K/255: with no black ink (K = 255) the colour is C, M, Y themselves.
    void cmykJpegBecomesRgb() {
        jpeg_compress_struct c{};
        jpeg_error_mgr err{};
        c.err = jpeg_std_error(&err);
        jpeg_create_compress(&c);
        unsigned char* buffer = nullptr;
        unsigned long size = 0;
        jpeg_mem_dest(&c, &buffer, &size);
        c.image_width = 16, c.image_height = 16, c.input_components = 4, c.in_color_space = JCS_CMYK;
        jpeg_set_defaults(&c);
        jpeg_set_quality(&c, 100, TRUE);
        jpeg_start_compress(&c, TRUE);
        std::vector<uint8_t> row(16 * 4);
        for (int x = 0; x < 16; ++x) row[size_t(x) * 4] = 200, row[size_t(x) * 4 + 1] = 120, row[size_t(x) * 4 + 2] = 40, row[size_t(x) * 4 + 3] = 255;
        for (int y = 0; y < 16; ++y) {
            JSAMPROW r = row.data();
            jpeg_write_scanlines(&c, &r, 1);
        }
        jpeg_finish_compress(&c);
        jpeg_destroy_compress(&c);
        const std::string bytes(reinterpret_cast<const char*>(buffer), size);
        std::free(buffer);
        const tb::Image rgb = decode(bytes, "cmyk.jpg");
        QCOMPARE(rgb.channels, 3);
        for (size_t p = 0; p < 256; ++p) {
            QVERIFY2(std::abs(int(rgb.pixels[p * 3]) - 200) <= 2 && std::abs(int(rgb.pixels[p * 3 + 1]) - 120) <= 2 &&
                         std::abs(int(rgb.pixels[p * 3 + 2]) - 40) <= 2,
                     qPrintable(QString("pixel %1: %2 %3 %4").arg(p).arg(rgb.pixels[p * 3]).arg(rgb.pixels[p * 3 + 1]).arg(rgb.pixels[p * 3 + 2])));
        }
    }
    void badFilesAreRefusedNamingThem() {
        const std::string png = tb::encodePng(gradient(20, 20, 3)), jpeg = tb::encodeJpeg(gradient(20, 20, 3), 90);
        QVERIFY(mentions(errorOf([&] { decode(png.substr(0, png.size() / 2), "cat/1.png"); }), {"cat/1.png", "PNG"}));
        QVERIFY(mentions(errorOf([&] { decode(jpeg.substr(0, jpeg.size() / 2), "cat/2.jpg"); }), {"cat/2.jpg", "JPEG"}));
        QVERIFY(mentions(errorOf([&] { decode("GIF89a....", "cat/3.png"); }), {"cat/3.png", "neither a PNG nor a JPEG"}));
        QVERIFY(mentions(errorOf([&] { decode("", "cat/4.png"); }), {"cat/4.png", "empty"}));
        std::string flipped = png;
        flipped[40] = char(flipped[40] ^ 0x55);  // inside IDAT: a CRC or inflate error
        QVERIFY(mentions(errorOf([&] { decode(flipped, "cat/5.png"); }), {"cat/5.png"}));
        // A header claiming 60000 x 60000 pixels is refused before any pixel buffer exists.
        std::string huge = jpeg;
        for (size_t i = 2; i + 8 < huge.size(); ++i)
            if (uint8_t(huge[i]) == 0xFF && uint8_t(huge[i + 1]) == 0xC0) {  // SOF0: height, width at +5, +7
                huge[i + 5] = char(0xEA), huge[i + 6] = char(0x60), huge[i + 7] = char(0xEA), huge[i + 8] = char(0x60);
                break;
            }
        QVERIFY(mentions(errorOf([&] { decode(huge, "big.jpg"); }), {"big.jpg", "60000x60000", "limit"}));
    }
    // Gray to RGB replicates, RGB to gray is BT.601 luminance, other sizes are fitted by covering
    // the target then taking its centre; shrinking averages (a checkerboard halves to grey).
    void samplesFollowTheStatedRules() {
        tb::Image rgb{1, 1, 3, {200, 100, 50}};
        uint8_t gray = 0;
        tb::imageToSample(rgb, 1, 1, 1, &gray);
        QCOMPARE(int(gray), (299 * 200 + 587 * 100 + 114 * 50 + 500) / 1000);
        tb::Image g{1, 1, 1, {77}};
        uint8_t three[3] = {};
        tb::imageToSample(g, 3, 1, 1, three);
        QVERIFY(three[0] == 77 && three[1] == 77 && three[2] == 77);
        tb::Image checker{4, 4, 1, std::vector<uint8_t>(16)};
        for (int i = 0; i < 16; ++i) checker.pixels[size_t(i)] = ((i / 4 + i % 4) % 2) ? 255 : 0;
        uint8_t half[4] = {};
        tb::imageToSample(checker, 1, 2, 2, half);
        for (uint8_t v : half) QVERIFY2(std::abs(v - 127.5) < 8, qPrintable(QString::number(v)));
        // A 10x20 image into 10x10: scaled to cover (already covers), then the centre 10 columns.
        const tb::Image wide = gradient(10, 20, 1);
        std::vector<uint8_t> centre(100);
        tb::imageToSample(wide, 1, 10, 10, centre.data());
        for (int y = 0; y < 10; ++y)
            for (int x = 0; x < 10; ++x) QCOMPARE(centre[size_t(y) * 10 + x], wide.pixels[size_t(y) * 20 + x + 5]);
        // A constant image stays constant at any scale.
        tb::Image flat{7, 9, 1, std::vector<uint8_t>(63, 90)};
        std::vector<uint8_t> up(30 * 30);
        tb::imageToSample(flat, 1, 30, 30, up.data());
        QVERIFY(std::all_of(up.begin(), up.end(), [](uint8_t v) { return v == 90; }));
    }
    // The shipped slice of Fashion-MNIST written as PNG files reads back as the IDX set: the
    // same pixels, labels and order (so training on it is bit for bit the same), its class names
    // the folders'.
    void pngFolderIsTheIdxSet() {
        QTemporaryDir tmp;
        const tb::DataSplits idx = tb::loadData("idx:" + sourcePath("samples/fashion-mnist-slice").toStdString(), 0, 1);
        tb::writeImageFolder(idx.train, idx.test, tmp.path().toStdString(), 0);
        const tb::DataSplits folder = tb::loadData("folder:" + tmp.path().toStdString(), 0, 1, {}, fitTo(1, 28, 28));
        QVERIFY(folder.train.pixels == idx.train.pixels);
        QVERIFY(folder.train.labels == idx.train.labels);
        QVERIFY(folder.test.pixels == idx.test.pixels);
        QVERIFY(folder.test.labels == idx.test.labels);
        QCOMPARE(folder.train.classNames.front(), std::string("0-T-shirt_top"));
        QCOMPARE(folder.train.numClasses, 10);
        // Without a shape the first image's is taken.
        QCOMPARE(tb::loadData("folder:" + tmp.path().toStdString(), 0, 1).train.height, 28);
        // Read for a 3-channel 32x32 model: gray replicated, fitted by the stated rule.
        const tb::DataSplits rgb = tb::loadData("folder:" + tmp.path().toStdString(), 0, 1, {}, fitTo(3, 32, 32));
        QCOMPARE(rgb.train.sampleSize(), size_t(3 * 32 * 32));
        QVERIFY(std::equal(rgb.train.pixels.begin(), rgb.train.pixels.begin() + 1024, rgb.train.pixels.begin() + 2048));
    }
    void jpegFolderIsCloseToTheIdxSet() {
        QTemporaryDir tmp;
        const tb::DataSplits idx = tb::loadData("idx:" + sourcePath("samples/fashion-mnist-slice").toStdString(), 0, 1);
        tb::writeImageFolder(idx.train, idx.test, tmp.path().toStdString(), 90);
        const tb::DataSplits folder = tb::loadData("folder:" + tmp.path().toStdString(), 0, 1, {}, fitTo(1, 28, 28));
        QVERIFY(folder.train.labels == idx.train.labels);
        double err = 0;
        for (size_t i = 0; i < idx.train.pixels.size(); ++i) err += std::abs(int(folder.train.pixels[i]) - int(idx.train.pixels[i]));
        err /= double(idx.train.pixels.size());
        QVERIFY2(err > 0 && err < 8, qPrintable(QString("mean error %1 of 255 at quality 90").arg(err)));
    }
    // classify: a run's checkpoint on its own test images gives, image by image, what the run's
    // evaluation wrote to predictions.json (the class and its probability, the batch differing:
    // 7 images a pass against the run's 128), with the folders' class names.
    void classifyAgreesWithTheRunsPredictions() {
        QTemporaryDir tmp;
        const tb::DataSplits idx = tb::loadData("idx:" + sourcePath("samples/fashion-mnist-slice").toStdString(), 0, 1);
        const QString folder = tmp.filePath("png"), run = tmp.filePath("run");
        tb::writeImageFolder(idx.train, idx.test, folder.toStdString(), 0);
        const tbtest::RunResult r = tbtest::runTowerbench({"--model", "mlp", "--data", "folder:" + folder, "--steps", "40",
                                                           "--threads", "2", "--run-dir", run, "--quiet"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QJsonObject p = QJsonDocument::fromJson(tbtest::readFile(run + "/predictions.json")).object();
        const QJsonArray predicted = p["predicted"].toArray(), confidence = p["confidence"].toArray();
        // The first 7 test images in the reader's order (file names are the set's indices).
        std::vector<fs::path> files;
        for (const auto& e : fs::recursive_directory_iterator(folder.toStdString() + "/test"))
            if (e.is_regular_file()) files.push_back(e.path());
        std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
        QStringList args = {"classify", run, "--top", "2"};
        for (size_t i = 0; i < 7; ++i) args << QString::fromStdString(files[i].string());
        const tbtest::RunResult c = tbtest::runTowerbench(args);
        QVERIFY2(c.exitCode == 0, qPrintable(c.err));
        const QStringList lines = c.out.trimmed().split('\n');
        QCOMPARE(lines.size(), 7);
        for (int i = 0; i < 7; ++i) {
            const QJsonObject o = QJsonDocument::fromJson(lines[i].toUtf8()).object();
            QCOMPARE(o["image"].toString(), QString::fromStdString(files[size_t(i)].string()));
            QCOMPARE(o["label"].toInt(), predicted[i].toInt());
            QCOMPARE(o["class"].toString(), p["class_names"].toArray()[predicted[i].toInt()].toString());
            QCOMPARE(o["top"].toArray().size(), 2);
            const double prob = o["top"].toArray()[0].toObject()["probability"].toDouble();
            QVERIFY2(std::abs(prob - confidence[i].toDouble()) < 1e-5,
                     qPrintable(QString("image %1: %2 against the run's %3").arg(i).arg(prob).arg(confidence[i].toDouble())));
            double sum = 0;
            for (const QJsonValue v : o["probabilities"].toArray()) sum += v.toDouble();
            QVERIFY(std::abs(sum - 1) < 1e-5);
        }
        // Refusals, one sentence each: a missing image, a corrupt one, a folder without checkpoints.
        const tbtest::RunResult missing = tbtest::runTowerbench({"classify", run, tmp.filePath("nope.png")});
        QCOMPARE(missing.exitCode, 2);
        QVERIFY2(mentions(missing.err, {"nope.png"}), qPrintable(missing.err));
        writeBytes(tmp.filePath("bad.jpg").toStdString(), "\xFF\xD8\xFF garbage");
        const tbtest::RunResult bad = tbtest::runTowerbench({"classify", run, tmp.filePath("bad.jpg")});
        QCOMPARE(bad.exitCode, 2);
        QVERIFY2(mentions(bad.err, {"bad.jpg", "JPEG"}), qPrintable(bad.err));
        const tbtest::RunResult none = tbtest::runTowerbench({"classify", tmp.path(), files[0].c_str()});
        QCOMPARE(none.exitCode, 2);
        QVERIFY2(mentions(none.err, {"no checkpoint"}), qPrintable(none.err));
        const tbtest::RunResult noImages = tbtest::runTowerbench({"classify", run});
        QCOMPARE(noImages.exitCode, 2);
        QVERIFY2(mentions(noImages.err, {"image files"}), qPrintable(noImages.err));
    }
#ifdef TB_HAVE_PROTOBUF
    // tf.train.Examples whose image_raw holds PNG (or JPEG) file bytes, with no height and width
    // beside them, are decoded: the shipped slice as such a TFRecord set reads back as the IDX set.
    void tfrecordOfEncodedImagesIsDecoded() {
        QTemporaryDir tmp;
        const tb::DataSplits idx = tb::loadData("idx:" + sourcePath("samples/fashion-mnist-slice").toStdString(), 0, 1);
        for (const auto& [split, d] : {std::pair{"train", &idx.train}, std::pair{"test", &idx.test}}) {
            tb::TFRecordWriter out(tmp.filePath(QString(split) + ".tfrecords").toStdString());
            for (size_t i = 0; i < d->size(); ++i) {
                tb::Image im{d->height, d->width, 1, std::vector<uint8_t>(d->pixels.begin() + std::ptrdiff_t(i * d->sampleSize()),
                                                                          d->pixels.begin() + std::ptrdiff_t((i + 1) * d->sampleSize()))};
                tb::Example e;
                e.setInt64("label", d->labels[i]);
                e.setBytes("image_raw", i % 2 ? tb::encodePng(im) : tb::encodeJpeg(im, 100));
                out.write(e.serialize());
            }
            out.flush();
        }
        const tb::DataSplits tf = tb::loadData("tfrecord:" + tmp.path().toStdString(), 0, 1, {}, fitTo(1, 28, 28));
        QVERIFY(tf.train.labels == idx.train.labels);
        QCOMPARE(tf.train.pixels.size(), idx.train.pixels.size());
        // PNG records exactly, JPEG (quality 100) within a few levels.
        for (size_t i = 0; i < 20; ++i) {
            int worst = 0;
            for (size_t k = 0; k < 784; ++k)
                worst = std::max(worst, std::abs(int(tf.train.pixels[i * 784 + k]) - int(idx.train.pixels[i * 784 + k])));
            QVERIFY2(i % 2 ? worst == 0 : worst <= 12, qPrintable(QString("image %1: %2 levels off").arg(i).arg(worst)));
        }
        // A damaged encoded image is named by file and record.
        {
            tb::TFRecordWriter out(tmp.filePath("train.tfrecords").toStdString());
            tb::Example e;
            e.setInt64("label", 1);
            e.setBytes("image_raw", tb::encodePng(gradient(8, 8, 1)).substr(0, 40));
            out.write(e.serialize());
            out.flush();
        }
        QVERIFY(mentions(errorOf([&] { tb::loadData("tfrecord:" + tmp.path().toStdString(), 0, 1); }), {"train.tfrecords", "record 0", "PNG"}));
    }
    // convert --shards 3 --repeat 2: record k in shard k % 3, the first pass the set itself, the
    // second its images shifted by at most 2 pixels each way, mirrored or not.
    void tfrecordShardsHoldEveryPass() {
        QTemporaryDir tmp;
        const tb::DataSplits idx = tb::loadData("idx:" + sourcePath("samples/fashion-mnist-slice").toStdString(), 0, 1);
        const tb::Dataset& d = idx.train;
        const std::vector<std::string> files = tb::writeTFRecordShards(d, tmp.path().toStdString(), "train", 3, 2, 7);
        QCOMPARE(files.size(), size_t(3));
        QVERIFY(QString::fromStdString(files[1]).endsWith("train-00001-of-00003.tfrecords"));
        std::vector<tb::Dataset> shard;
        for (const std::string& f : files) shard.push_back(tb::readTFRecordExamples({f}, {}, "shard"));
        const size_t n = d.size();
        QCOMPARE(shard[0].size() + shard[1].size() + shard[2].size(), 2 * n);
        auto record = [&](size_t k) { return std::pair{&shard[k % 3], k / 3}; };
        for (size_t k = 0; k < 2 * n; ++k) {
            const auto [s, at] = record(k);
            const size_t i = k % n;
            QCOMPARE(s->labels[at], d.labels[i]);
            const uint8_t* got = s->pixels.data() + at * 784;
            const uint8_t* src = d.pixels.data() + i * 784;
            if (k < n) {
                QVERIFY2(std::equal(got, got + 784, src), qPrintable(QString("record %1 is not image %2").arg(k).arg(i)));
                continue;
            }
            bool shifted = false;
            for (int dy = -2; dy <= 2 && !shifted; ++dy)
                for (int dx = -2; dx <= 2 && !shifted; ++dx)
                    for (bool flip : {false, true}) {
                        bool same = true;
                        for (int y = 0; y < 28 && same; ++y)
                            for (int x = 0; x < 28 && same; ++x) {
                                const int sy = y + dy, sx = (flip ? 27 - x : x) + dx;
                                same = got[y * 28 + x] == (sy >= 0 && sy < 28 && sx >= 0 && sx < 28 ? src[sy * 28 + sx] : 0);
                            }
                        shifted |= same;
                    }
            QVERIFY2(shifted, qPrintable(QString("record %1 is no shift of image %2").arg(k).arg(i)));
        }
    }
#endif
    void badFoldersAreRefused() {
        QTemporaryDir tmp;
        const fs::path root = tmp.path().toStdString();
        const std::string png = tb::encodePng(gradient(8, 8, 1));
        auto load = [&](bool skip = false) {
            return tb::loadData("folder:" + root.string(), 0, 1, {}, fitTo(1, 8, 8, skip));
        };
        QVERIFY(mentions(errorOf([&] { tb::loadData("folder:" + (root / "none").string(), 0, 1); }), {"none", "not a folder"}));
        for (int i = 0; i < 30; ++i) writeBytes(root / "cat" / (std::to_string(i) + ".png"), png);
        QVERIFY(mentions(errorOf([&] { load(); }), {"1 class folder", "at least 2"}));
        fs::create_directories(root / "dog");
        QVERIFY(mentions(errorOf([&] { load(); }), {"dog", "holds no .png"}));
        for (int i = 0; i < 30; ++i) writeBytes(root / "dog" / (std::to_string(i) + ".PNG"), png);
        writeBytes(root / "dog" / "notes.txt", "not an image");
        writeBytes(root / ".hidden" / "x.png", "hidden folders are not classes");
        // The hash split: about a tenth for testing, the other files training, none in both.
        const tb::DataSplits ok = load();
        QCOMPARE(ok.train.size() + ok.test.size(), size_t(60));
        QVERIFY(ok.test.size() >= 1 && ok.test.size() <= 15);
        QCOMPARE(ok.ignoredFiles, size_t(1));
        QCOMPARE(ok.train.numClasses, 2);
        // A corrupt image: refused naming it, or left out and named with --skip-bad-images.
        writeBytes(root / "dog" / "7.PNG", png.substr(0, 30));
        QVERIFY(mentions(errorOf([&] { load(); }), {"7.PNG", "--skip-bad-images"}));
        const tb::DataSplits skipped = load(true);
        QCOMPARE(skipped.skipped.size(), size_t(1));
        QVERIFY(QString::fromStdString(skipped.skipped[0]).contains("7.PNG"));
        QCOMPARE(skipped.train.size() + skipped.test.size(), size_t(59));
        // train/ and test/ with a test class that has no training folder.
        QTemporaryDir split;
        const fs::path s = split.path().toStdString();
        writeBytes(s / "train" / "a" / "1.png", png);
        writeBytes(s / "train" / "b" / "1.png", png);
        writeBytes(s / "test" / "c" / "1.png", png);
        QVERIFY(mentions(errorOf([&] { tb::loadData("folder:" + s.string(), 0, 1); }), {"'c'", "no training folder"}));
    }
};

#else
class TestImages : public QObject {
    Q_OBJECT
private slots:
    void noImageLibraries() { QSKIP("built without libpng and libjpeg"); }
};
#endif

QTEST_GUILESS_MAIN(TestImages)
#include "tst_images.moc"
