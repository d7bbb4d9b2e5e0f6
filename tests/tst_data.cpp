// Tests of core/data: IDX and CIFAR-10 readers on files written here byte by byte (plain and
// gzip), their error messages on bad input, the synthetic sets, loadData, the shipped
// Fashion-MNIST slice, and InputPipeline (order, determinism, crops, augmentation, shutdown).
#include <zlib.h>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <numbers>
#include <tuple>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "data/dataset.hpp"
#include "data/pipeline.hpp"
#include "io/run_config.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

namespace {

using tbtest::be32;
using tbtest::writeFile;
using tbtest::writeGz;
using tbtest::readFile;
using tbtest::errorOf;
using tbtest::mentions;


QByteArray bytesOf(const std::vector<uint8_t>& v) {
    return QByteArray(reinterpret_cast<const char*>(v.data()), qsizetype(v.size()));
}

// An IDX image file: magic, n, rows, cols (big-endian), then the pixels as given.
QByteArray idxImages(uint32_t n, uint32_t rows, uint32_t cols, const std::vector<uint8_t>& px,
                     uint32_t magic = 0x00000803) {
    return be32(magic) + be32(n) + be32(rows) + be32(cols) + bytesOf(px);
}

QByteArray idxLabels(uint32_t n, const std::vector<uint8_t>& labels, uint32_t magic = 0x00000801) {
    return be32(magic) + be32(n) + bytesOf(labels);
}



std::vector<uint8_t> randomBytes(size_t n, uint32_t seed, int maxValue = 255) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = uint8_t(rng() % uint32_t(maxValue + 1));
    return v;
}



std::string str(const QString& s) { return s.toStdString(); }

// One CIFAR-10 record: label byte then 3072 pixel bytes.
QByteArray cifarRecord(uint8_t label, const std::vector<uint8_t>& px) {
    return QByteArray(1, char(label)) + bytesOf(px);
}

std::vector<uint8_t> cifarPixels(int file, int record) {
    std::vector<uint8_t> px(3072);
    for (size_t k = 0; k < px.size(); ++k) px[k] = uint8_t(file * 31 + record * 7 + int(k) * 3);
    return px;
}

// Writes data_batch_1..5.bin with 1..5 records and test_batch.bin with 2 records.
void writeCifarDir(const QString& dir) {
    for (int f = 1; f <= 5; ++f) {
        QByteArray bytes;
        for (int r = 0; r < f; ++r) bytes += cifarRecord(uint8_t((f + r) % 10), cifarPixels(f, r));
        writeFile(dir + QStringLiteral("/data_batch_%1.bin").arg(f), bytes);
    }
    writeFile(dir + "/test_batch.bin", cifarRecord(3, cifarPixels(0, 0)) + cifarRecord(9, cifarPixels(0, 1)));
}

// An image set whose label is its index, so a pass can be checked for "each sample once", and
// whose first pixel is index % 251, so x and y can be checked to travel together.
tb::Dataset indexedImages(size_t n, int c, int h, int w) {
    tb::Dataset d;
    d.name = "indexed";
    d.channels = c;
    d.height = h;
    d.width = w;
    d.numClasses = int(n);
    d.pixels.resize(n * d.sampleSize());
    d.labels.resize(n);
    for (size_t i = 0; i < n; ++i) {
        d.labels[i] = int32_t(i);
        for (size_t k = 0; k < d.sampleSize(); ++k) d.pixels[i * d.sampleSize() + k] = uint8_t((i + k) % 251);
    }
    return d;
}

// A set of one image of label 0, its pixels (c, h, w).
tb::Dataset oneImage(const char* name, int c, int h, int w, std::vector<uint8_t> pixels) {
    tb::Dataset d;
    d.name = name;
    d.channels = c;
    d.height = h;
    d.width = w;
    d.numClasses = 1;
    d.labels = {0};
    d.pixels = std::move(pixels);
    return d;
}

tb::Dataset cifarLike(size_t n, uint32_t seed) {
    tb::Dataset d;
    d.name = "cifar-like";
    d.channels = 3;
    d.height = 32;
    d.width = 32;
    d.numClasses = 10;
    d.pixels = randomBytes(n * 3072, seed);
    d.labels.resize(n);
    for (size_t i = 0; i < n; ++i) d.labels[i] = int32_t(i % 10);
    return d;
}

std::vector<tb::Batch> take(tb::InputPipeline& p, int count) {
    std::vector<tb::Batch> out;
    for (int i = 0; i < count; ++i) {
        tb::Batch b;
        if (!p.next(b)) break;
        out.push_back(std::move(b));
    }
    return out;
}

}  // namespace

class TestData : public QObject {
    Q_OBJECT

private slots:
    // IDX reader
    void idxPlainRoundTrip();
    void idxGzipRoundTrip();
    void idxDirFindsPlainAndGz();
    void idxDirMissingFile();
    void loadingGivesWayToCancel();
    void idxMissingFile();
    void idxTruncatedImages();
    void idxTruncatedLabels();
    void idxTruncatedGz();
    void idxCorruptGz();
    void idxWrongMagic();
    void idxCountMismatch();
    void idxHugeCountTinyFile();
    void idxBadHeaderFields();
    void idxTrailingBytes();
    void idxGzipEndsInItsTrailer();
    // CIFAR-10 reader
    void cifarRoundTrip();
    void cifarWrongSize();
    void cifarMissingFile();
    void cifarBadLabel();
    // synthetic sets, splits and loadData
    void syntheticDeterminism();
    void syntheticMatchesItsRecipe();
    void blobsAreLearnable();
    void splitTailMovesTheTail();
    void loadDataUnknownSpec();
    void loadDataSynthetic();
    void loadDataIdxAndCifar();
    void sampleSlice();
    void realFashionMnist();
    // pipeline
    void pipelineOnePass_data();
    void pipelineOnePass();
    void pipelineRepeatReshufflesAndFillsBatches();
    void pipelinePrefetchIsDeterministic();
    void pipelineCentralCrop();
    void pipelinePixelNormalisation();
    void pipelineFloatFeatures();
    void pipelineAugmentShapeAndStandardize();
    void pipelineAugmentIsACropAndFlip();
    void pipelineAugmentPartsForAnyImageSet();
    void augmentFlagIsParsed();
    void channelStatisticsNormalise();
    void pipelineBadOptions();
    void pipelineDestroyMidStream();
    void pipelineSpeed();
};

// ---------------------------------------------------------------- IDX

void TestData::idxPlainRoundTrip() {
    QTemporaryDir tmp;
    const QString img = tmp.filePath("imgs"), lbl = tmp.filePath("lbls");
    std::vector<uint8_t> px(3 * 4 * 5);
    for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(i * 37 + 11);
    writeFile(img, idxImages(3, 4, 5, px));
    writeFile(lbl, idxLabels(3, {2, 0, 7}));
    tb::Dataset d = tb::readIdx(str(img), str(lbl), "tiny");
    QCOMPARE(d.name, std::string("tiny"));
    QCOMPARE(d.size(), size_t(3));
    QCOMPARE(d.channels, 1);
    QCOMPARE(d.height, 4);
    QCOMPARE(d.width, 5);
    QCOMPARE(d.numClasses, 8);  // max label + 1
    QVERIFY(d.pixels == px);
    QVERIFY(d.features.empty());
    QVERIFY((d.labels == std::vector<int32_t>{2, 0, 7}));
}

void TestData::idxGzipRoundTrip() {
    QTemporaryDir tmp;
    const QString img = tmp.filePath("imgs.gz"), lbl = tmp.filePath("lbls.gz");
    const uint32_t n = 50;
    std::vector<uint8_t> px = randomBytes(n * 28 * 28, 1);
    std::vector<uint8_t> labels = randomBytes(n, 2, 9);
    labels[17] = 9;
    writeGz(img, idxImages(n, 28, 28, px));
    writeGz(lbl, idxLabels(n, labels));
    tb::Dataset d = tb::readIdx(str(img), str(lbl), "gz");
    QCOMPARE(d.size(), size_t(n));
    QCOMPARE(d.height, 28);
    QCOMPARE(d.width, 28);
    QCOMPARE(d.numClasses, 10);
    QVERIFY(d.pixels == px);
    QVERIFY(std::equal(labels.begin(), labels.end(), d.labels.begin(), d.labels.end()));
}

void TestData::idxDirFindsPlainAndGz() {
    QTemporaryDir tmp;
    writeFile(tmp.filePath("train-images-idx3-ubyte"), idxImages(2, 2, 2, {1, 2, 3, 4, 5, 6, 7, 8}));
    writeFile(tmp.filePath("train-labels-idx1-ubyte"), idxLabels(2, {1, 0}));
    writeGz(tmp.filePath("t10k-images-idx3-ubyte.gz"), idxImages(1, 2, 2, {9, 9, 9, 9}));
    writeGz(tmp.filePath("t10k-labels-idx1-ubyte.gz"), idxLabels(1, {1}));
    tb::Dataset train = tb::readIdxDir(str(tmp.path()), true);
    tb::Dataset test = tb::readIdxDir(str(tmp.path()), false);
    QCOMPARE(train.size(), size_t(2));
    QCOMPARE(train.pixels[7], uint8_t(8));
    QCOMPARE(test.size(), size_t(1));
    QCOMPARE(test.pixels[0], uint8_t(9));
}

// Loading asks its CancelCheck between chunks and stops at the first "yes": a stop does not
// wait for a whole data set (60,000 images: ~50 chunks of 1 MiB).
void TestData::loadingGivesWayToCancel() {
    int asked = 0;
    bool thrown = false;
    try {
        tb::loadData("idx:" + str(tbtest::sourcePath("samples/fashion-mnist-slice")), 0, 1, [&] { return ++asked >= 2; });
    } catch (const tb::Cancelled&) {
        thrown = true;
    }
    QVERIFY(thrown);
    QCOMPARE(asked, 2);
    const tb::DataSplits whole = tb::loadData("idx:" + str(tbtest::sourcePath("samples/fashion-mnist-slice")), 0, 1,
                                              [] { return false; });
    QCOMPARE(whole.train.size(), size_t(2000));
}

void TestData::idxDirMissingFile() {
    QTemporaryDir tmp;
    QString msg = errorOf([&] { tb::readIdxDir(str(tmp.path()), true); });
    QVERIFY2(mentions(msg, {tmp.path(), "no train-images-idx3-ubyte[.gz] found"}), qPrintable(msg));
    writeFile(tmp.filePath("t10k-images-idx3-ubyte"), idxImages(1, 1, 1, {0}));
    msg = errorOf([&] { tb::readIdxDir(str(tmp.path()), false); });
    QVERIFY2(mentions(msg, {tmp.path(), "no t10k-labels-idx1-ubyte[.gz] found"}), qPrintable(msg));
    msg = errorOf([&] { tb::readIdxDir(str(tmp.filePath("nowhere")), false); });
    QVERIFY2(mentions(msg, {tmp.filePath("nowhere"), "no such directory"}), qPrintable(msg));
}

void TestData::idxMissingFile() {
    QTemporaryDir tmp;
    writeFile(tmp.filePath("lbls"), idxLabels(1, {0}));
    const QString img = tmp.filePath("missing-images");
    QString msg = errorOf([&] { tb::readIdx(str(img), str(tmp.filePath("lbls")), "x"); });
    QVERIFY2(mentions(msg, {img, "not found"}), qPrintable(msg));
}

void TestData::idxTruncatedImages() {
    QTemporaryDir tmp;
    const QString img = tmp.filePath("train-images-idx3-ubyte"), lbl = tmp.filePath("lbls");
    writeFile(img, idxImages(10, 4, 5, randomBytes(3 * 20, 3)));  // 3 of the 10 images
    writeFile(lbl, idxLabels(10, randomBytes(10, 4, 9)));
    QString msg = errorOf([&] { tb::readIdx(str(img), str(lbl), "x"); });
    QVERIFY2(mentions(msg, {img, "truncated", "10 images of 4x5", "after 60 bytes of image data"}), qPrintable(msg));
}

void TestData::idxTruncatedLabels() {
    QTemporaryDir tmp;
    const QString img = tmp.filePath("imgs"), lbl = tmp.filePath("lbls.gz");
    writeFile(img, idxImages(10, 2, 2, randomBytes(40, 3)));
    writeGz(lbl, idxLabels(10, randomBytes(7, 4, 9)));  // header says 10, 7 labels follow
    QString msg = errorOf([&] { tb::readIdx(str(img), str(lbl), "x"); });
    QVERIFY2(mentions(msg, {lbl, "truncated", "10 labels", "after 7 bytes of label data"}), qPrintable(msg));
}

void TestData::idxTruncatedGz() {
    QTemporaryDir tmp;
    const QString img = tmp.filePath("train-images-idx3-ubyte.gz"), lbl = tmp.filePath("lbls.gz");
    writeGz(img, idxImages(200, 28, 28, randomBytes(200 * 28 * 28, 5)));
    writeGz(lbl, idxLabels(200, randomBytes(200, 6, 9)));
    QFile f(img);
    QVERIFY(f.open(QIODevice::ReadWrite));
    QVERIFY(f.size() > 100000);  // random pixels do not compress
    QVERIFY(f.resize(f.size() / 2));  // cut the compressed stream in the middle
    f.close();
    QString msg = errorOf([&] { tb::readIdx(str(img), str(lbl), "x"); });
    QVERIFY2(mentions(msg, {img, "truncated", "200 images of 28x28"}), qPrintable(msg));
}

void TestData::idxCorruptGz() {
    QTemporaryDir tmp;
    const QString img = tmp.filePath("imgs.gz"), lbl = tmp.filePath("lbls.gz");
    writeGz(img, idxImages(20, 28, 28, randomBytes(20 * 28 * 28, 7)));
    writeGz(lbl, idxLabels(20, randomBytes(20, 8, 9)));
    QFile f(img);
    QVERIFY(f.open(QIODevice::ReadWrite));
    QByteArray bytes = f.readAll();
    for (int i = 0; i < 16; ++i) bytes[bytes.size() / 2 + i] = char(~bytes[bytes.size() / 2 + i]);
    f.seek(0);
    f.write(bytes);
    f.close();
    // Whether zlib sees bad deflate data or a bad CRC, the reader must say which file is broken.
    QString msg = errorOf([&] { tb::readIdx(str(img), str(lbl), "x"); });
    QVERIFY2(mentions(msg, {img}) && !msg.startsWith('<'), qPrintable(msg));
}

void TestData::idxWrongMagic() {
    QTemporaryDir tmp;
    const QString img = tmp.filePath("train-images-idx3-ubyte.gz"), lbl = tmp.filePath("lbls");
    writeGz(img, idxImages(1, 1, 1, {0}, 0x00000801));
    writeFile(lbl, idxLabels(1, {0}));
    QString msg = errorOf([&] { tb::readIdx(str(img), str(lbl), "x"); });
    QVERIFY2(mentions(msg, {img, "wrong magic number 0x00000801 (expected 0x00000803 for IDX images)"}),
             qPrintable(msg));
    writeGz(img, idxImages(1, 1, 1, {0}));
    writeFile(lbl, idxLabels(1, {0}, 0x00000803));
    msg = errorOf([&] { tb::readIdx(str(img), str(lbl), "x"); });
    QVERIFY2(mentions(msg, {lbl, "wrong magic number 0x00000803 (expected 0x00000801 for IDX labels)"}),
             qPrintable(msg));
}

void TestData::idxCountMismatch() {
    QTemporaryDir tmp;
    const QString img = tmp.filePath("imgs"), lbl = tmp.filePath("lbls");
    writeFile(img, idxImages(5, 2, 2, randomBytes(20, 9)));
    writeFile(lbl, idxLabels(4, {0, 1, 2, 3}));
    QString msg = errorOf([&] { tb::readIdx(str(img), str(lbl), "x"); });
    QVERIFY2(mentions(msg, {img, lbl, "has 5 images", "has 4 labels"}), qPrintable(msg));
}

void TestData::idxHugeCountTinyFile() {
    // 99 million 4096x4096 images claimed by a file of a few bytes: must fail fast, not allocate.
    QTemporaryDir tmp;
    const QString lbl = tmp.filePath("lbls");
    writeFile(lbl, idxLabels(99000000, randomBytes(100, 1)));
    QString lblMsg = errorOf([&] { tb::readIdx(str(tmp.filePath("none")), str(lbl), "x"); });
    QVERIFY(lblMsg.contains("not found"));  // images are opened first
    for (bool gz : {false, true}) {
        const QString img = tmp.filePath(gz ? "huge.gz" : "huge");
        const QString lblGz = tmp.filePath("huge-labels.gz");
        QByteArray bytes = idxImages(99000000, 4096, 4096, randomBytes(100, 2));
        gz ? writeGz(img, bytes) : writeFile(img, bytes);
        QByteArray labels = idxLabels(99000000, randomBytes(100, 3, 9));
        gz ? writeGz(lblGz, labels) : writeFile(lblGz, labels);
        QElapsedTimer t;
        t.start();
        QString msg = errorOf([&] { tb::readIdx(str(img), str(lblGz), "x"); });
        QVERIFY2(t.elapsed() < 2000, qPrintable(QStringLiteral("took %1 ms").arg(t.elapsed())));
        // The label file is read first, so it is the one reported as truncated.
        QVERIFY2(mentions(msg, {lblGz, "truncated", "99000000 labels"}), qPrintable(msg));

        // With a complete label file of the right count the images are the truncated ones: the
        // label data costs 99 MB, so use a smaller but still absurd claim for the images.
        QByteArray small = idxImages(1000, 4096, 4096, randomBytes(100, 2));
        gz ? writeGz(img, small) : writeFile(img, small);
        QByteArray okLabels = idxLabels(1000, randomBytes(1000, 4, 9));
        gz ? writeGz(lblGz, okLabels) : writeFile(lblGz, okLabels);
        t.restart();
        msg = errorOf([&] { tb::readIdx(str(img), str(lblGz), "x"); });
        QVERIFY2(t.elapsed() < 2000, qPrintable(QStringLiteral("took %1 ms").arg(t.elapsed())));
        QVERIFY2(mentions(msg, {img, "truncated", "1000 images of 4096x4096", "after 100 bytes of image data"}),
                 qPrintable(msg));
    }
    // Over the 100 million limit: refused from the header alone.
    const QString img = tmp.filePath("over");
    writeFile(img, idxImages(200000000, 28, 28, {}));
    QString msg = errorOf([&] { tb::readIdx(str(img), str(lbl), "x"); });
    QVERIFY2(mentions(msg, {img, "200000000 images", "limit"}), qPrintable(msg));
}

void TestData::idxBadHeaderFields() {
    QTemporaryDir tmp;
    const QString img = tmp.filePath("imgs"), lbl = tmp.filePath("lbls");
    writeFile(lbl, idxLabels(1, {0}));
    struct Case {
        QByteArray bytes;
        QString expect;
    } cases[] = {
        {idxImages(1, 0, 5, {}), "image size 0x5 is outside 1..4096"},
        {idxImages(1, 5, 4097, {}), "image size 5x4097 is outside 1..4096"},
        {idxImages(0, 2, 2, {}), "declares 0 images"},
        {be32(0x00000803) + be32(1) + QByteArray(2, '\0'), "truncated: the file ends inside the IDX header"},
        {QByteArray(), "truncated: the file ends inside the IDX header"},
    };
    for (const Case& c : cases) {
        writeFile(img, c.bytes);
        QString msg = errorOf([&] { tb::readIdx(str(img), str(lbl), "x"); });
        QVERIFY2(mentions(msg, {img, c.expect}), qPrintable(msg));
    }
}

void TestData::idxTrailingBytes() {
    // Data after what the header declares means header and data disagree: an error, plain or gz.
    QTemporaryDir tmp;
    const QString lbl = tmp.filePath("lbls");
    writeFile(lbl, idxLabels(2, {0, 1}));
    for (bool gz : {false, true}) {
        const QString img = tmp.filePath(gz ? "imgs.gz" : "imgs");
        QByteArray bytes = idxImages(2, 2, 2, randomBytes(9, 1));  // one byte too many
        gz ? writeGz(img, bytes) : writeFile(img, bytes);
        QString msg = errorOf([&] { tb::readIdx(str(img), str(lbl), "x"); });
        QVERIFY2(mentions(msg, {img, "unexpected bytes after the 2 images of 2x2"}), qPrintable(msg));
    }
}

// A gzip stream must end in its trailer (CRC-32 and length, 8 bytes), and only another gzip
// member may follow it: a trailer cut off, a trailer that does not match, or garbage appended are
// refused (zlib's gzread took all three); two members back to back are one file, as for gunzip.
void TestData::idxGzipEndsInItsTrailer() {
    QTemporaryDir tmp;
    const QString lbl = tmp.filePath("lbls");
    writeFile(lbl, idxLabels(2, {0, 1}));
    const QByteArray content = idxImages(2, 2, 2, randomBytes(8, 1));
    const QString whole = tmp.filePath("whole.gz");
    writeGz(whole, content);
    const QByteArray gz = readFile(whole);
    QCOMPARE(tb::readIdx(str(whole), str(lbl), "x").size(), size_t(2));
    struct Case {
        const char* name;
        QByteArray bytes;
        QString says;
    };
    QByteArray badCrc = gz;
    badCrc[badCrc.size() - 8] = char(badCrc[badCrc.size() - 8] ^ 0x5a);
    const QList<Case> cases = {
        {"no trailer", gz.left(gz.size() - 8), "the gzip stream ends before its trailer"},
        {"half a trailer", gz.left(gz.size() - 3), "the gzip stream ends before its trailer"},
        {"wrong CRC", badCrc, "corrupt gzip data (incorrect data check)"},
        {"garbage after", gz + QByteArray("\n\0junk", 6), "6 bytes of other data after the gzip stream"},
    };
    for (const Case& c : cases) {
        const QString img = tmp.filePath(QString::fromLatin1(c.name).replace(' ', '-') + ".gz");
        writeFile(img, c.bytes);
        const QString msg = errorOf([&] { tb::readIdx(str(img), str(lbl), "x"); });
        QVERIFY2(mentions(msg, {img, c.says}), qPrintable(QString::fromLatin1(c.name) + ": " + msg));
    }
    // Two members: the header and first image in one, the second image in the next.
    const QString first = tmp.filePath("first.gz"), second = tmp.filePath("second.gz");
    writeGz(first, content.left(content.size() - 4));
    writeGz(second, content.right(4));
    const QString joined = tmp.filePath("joined.gz");
    writeFile(joined, readFile(first) + readFile(second));
    const tb::Dataset d = tb::readIdx(str(joined), str(lbl), "x");
    QCOMPARE(QByteArray(reinterpret_cast<const char*>(d.pixels.data()), 8), content.right(8));
}

// ---------------------------------------------------------------- CIFAR-10

void TestData::cifarRoundTrip() {
    QTemporaryDir tmp;
    writeCifarDir(tmp.path());
    tb::Dataset train = tb::readCifar10(str(tmp.path()), true);
    QCOMPARE(train.size(), size_t(1 + 2 + 3 + 4 + 5));
    QCOMPARE(train.channels, 3);
    QCOMPARE(train.height, 32);
    QCOMPARE(train.width, 32);
    QCOMPARE(train.numClasses, 10);
    size_t at = 0;
    for (int f = 1; f <= 5; ++f) {
        for (int r = 0; r < f; ++r, ++at) {
            QCOMPARE(train.labels[at], int32_t((f + r) % 10));
            std::vector<uint8_t> px = cifarPixels(f, r);
            QVERIFY(std::equal(px.begin(), px.end(), train.pixels.begin() + std::ptrdiff_t(at * 3072)));
        }
    }
    tb::Dataset test = tb::readCifar10(str(tmp.path()), false);
    QCOMPARE(test.size(), size_t(2));
    QVERIFY((test.labels == std::vector<int32_t>{3, 9}));
    // Sample 1, channel G (offset 1024), row 0, column 5 = record byte 1 + 1024 + 5.
    QCOMPARE(test.pixels[3072 + 1024 + 5], cifarPixels(0, 1)[1024 + 5]);
}

void TestData::cifarWrongSize() {
    QTemporaryDir tmp;
    writeCifarDir(tmp.path());
    const QString bad = tmp.filePath("data_batch_3.bin");
    writeFile(bad, cifarRecord(1, cifarPixels(3, 0)) + cifarRecord(2, cifarPixels(3, 1)) + QByteArray(5, 'x'));
    QString msg = errorOf([&] { tb::readCifar10(str(tmp.path()), true); });
    QVERIFY2(mentions(msg, {bad, "size 6151 bytes", "3073"}), qPrintable(msg));
    writeFile(bad, QByteArray());
    msg = errorOf([&] { tb::readCifar10(str(tmp.path()), true); });
    QVERIFY2(mentions(msg, {bad, "size 0 bytes", "non-zero multiple"}), qPrintable(msg));
}

void TestData::cifarMissingFile() {
    QTemporaryDir tmp;
    writeCifarDir(tmp.path());
    QVERIFY(QFile::remove(tmp.filePath("data_batch_4.bin")));
    QString msg = errorOf([&] { tb::readCifar10(str(tmp.path()), true); });
    QVERIFY2(mentions(msg, {tmp.filePath("data_batch_4.bin"), "not found"}), qPrintable(msg));
    QVERIFY(tb::readCifar10(str(tmp.path()), false).size() == 2);  // test set still reads
}

void TestData::cifarBadLabel() {
    QTemporaryDir tmp;
    writeCifarDir(tmp.path());
    const QString bad = tmp.filePath("test_batch.bin");
    writeFile(bad, cifarRecord(3, cifarPixels(0, 0)) + cifarRecord(12, cifarPixels(0, 1)));
    QString msg = errorOf([&] { tb::readCifar10(str(tmp.path()), false); });
    QVERIFY2(mentions(msg, {bad, "record 1 has label 12"}), qPrintable(msg));
}

// ---------------------------------------------------------------- synthetic, loadData

void TestData::syntheticDeterminism() {
    tb::Dataset a = tb::makeBlobs(500, 4, 7), b = tb::makeBlobs(500, 4, 7), c = tb::makeBlobs(500, 4, 8);
    QCOMPARE(a.features.size(), size_t(1000));
    QCOMPARE(a.channels, 2);
    QCOMPARE(a.height, 1);
    QCOMPARE(a.width, 1);
    QVERIFY(a.pixels.empty());
    QVERIFY(a.features == b.features && a.labels == b.labels);
    QVERIFY(a.features != c.features);
    tb::Dataset s1 = tb::makeSpirals(600, 3, 7), s2 = tb::makeSpirals(600, 3, 7), s3 = tb::makeSpirals(600, 3, 9);
    QVERIFY(s1.features == s2.features && s1.labels == s2.labels);
    QVERIFY(s1.features != s3.features);
    QCOMPARE(s1.numClasses, 3);
    for (float v : s1.features) QVERIFY(std::isfinite(v) && std::fabs(v) <= 1.0f);
}

void TestData::syntheticMatchesItsRecipe() {
    // mt19937_64 is fully specified and the conversions are our own (no std::normal_distribution),
    // so the first blob point can be recomputed by hand from the raw generator on any library.
    tb::Dataset a = tb::makeBlobs(4, 4, 42);
    std::mt19937_64 rng(42);
    double u1 = 1.0 - double(rng() >> 11) * 0x1.0p-53, u2 = double(rng() >> 11) * 0x1.0p-53;
    double r = std::sqrt(-2.0 * std::log(u1));
    QVERIFY(std::fabs(a.features[0] - float(3.0 + r * std::cos(2 * std::numbers::pi * u2))) < 1e-5);
    QVERIFY(std::fabs(a.features[1] - float(0.0 + r * std::sin(2 * std::numbers::pi * u2))) < 1e-5);
}

void TestData::blobsAreLearnable() {
    // Nearest-centre classification is near Bayes-optimal; it must beat 90%.
    tb::Dataset d = tb::makeBlobs(4000, 4, 3);
    int right = 0;
    for (size_t i = 0; i < d.size(); ++i) {
        int best = 0;
        double bestD = 1e30;
        for (int k = 0; k < 4; ++k) {
            const double angle = 2 * std::numbers::pi * k / 4;
            const double cx = 3.0 * std::cos(angle), cy = 3.0 * std::sin(angle);
            double dd = std::pow(d.features[2 * i] - cx, 2) + std::pow(d.features[2 * i + 1] - cy, 2);
            if (dd < bestD) bestD = dd, best = k;
        }
        right += best == d.labels[i];
    }
    QVERIFY2(right > 3600, qPrintable(QString::number(right)));
    std::vector<int> perClass(4);
    for (int32_t l : d.labels) perClass[size_t(l)]++;
    QVERIFY((perClass == std::vector<int>{1000, 1000, 1000, 1000}));
}

void TestData::splitTailMovesTheTail() {
    tb::Dataset d = indexedImages(10, 1, 2, 2);
    tb::Dataset v = tb::splitTail(d, 3, "val");
    QCOMPARE(d.size(), size_t(7));
    QCOMPARE(d.pixels.size(), size_t(28));
    QCOMPARE(v.size(), size_t(3));
    QCOMPARE(v.name, std::string("val"));
    QCOMPARE(v.height, 2);
    QCOMPARE(v.numClasses, 10);
    QVERIFY((v.labels == std::vector<int32_t>{7, 8, 9}));
    QCOMPARE(v.pixels[0], uint8_t(7));
    QCOMPARE(v.pixels[11], uint8_t(9 + 3));
    QString msg = errorOf([&] { tb::splitTail(d, 8, "val"); });
    QVERIFY2(mentions(msg, {"8 samples", "only 7"}), qPrintable(msg));
    tb::Dataset blobs = tb::makeBlobs(10, 2, 1);
    const float last = blobs.features[19];
    tb::Dataset bv = tb::splitTail(blobs, 2, "bv");
    QCOMPARE(bv.features.size(), size_t(4));
    QCOMPARE(bv.features[3], last);
    QCOMPARE(blobs.features.size(), size_t(16));
}

void TestData::loadDataUnknownSpec() {
    QString msg = errorOf([] { tb::loadData("xyz", 0, 1); });
    QVERIFY2(mentions(msg, {"--data", "unknown data spec 'xyz'", "synthetic:spirals"}), qPrintable(msg));
    msg = errorOf([] { tb::loadData("idx:", 0, 1); });
    QVERIFY2(mentions(msg, {"'idx:'", "no directory"}), qPrintable(msg));
}

void TestData::loadDataSynthetic() {
    tb::DataSplits s = tb::loadData("synthetic:blobs", 1000, 5);
    QCOMPARE(s.train.size(), size_t(7000));
    QCOMPARE(s.validation.size(), size_t(1000));
    QCOMPARE(s.test.size(), size_t(2000));
    QCOMPARE(s.train.numClasses, 4);
    QVERIFY(!s.cifarAugment);
    QVERIFY(std::vector<float>(s.train.features.begin(), s.train.features.begin() + 100) !=
            std::vector<float>(s.test.features.begin(), s.test.features.begin() + 100));
    tb::DataSplits t = tb::loadData("synthetic:spirals", 0, 5);
    QCOMPARE(t.train.size(), size_t(8000));
    QCOMPARE(t.validation.size(), size_t(0));
    QCOMPARE(t.validation.channels, 2);
    QCOMPARE(t.test.size(), size_t(2000));
    QCOMPARE(t.train.numClasses, 3);
    QString msg = errorOf([] { tb::loadData("synthetic:blobs", 8000, 5); });
    QVERIFY2(mentions(msg, {"synthetic:blobs", "8000"}), qPrintable(msg));
}

void TestData::loadDataIdxAndCifar() {
    tb::DataSplits s = tb::loadData("idx:" + str(tbtest::sourcePath("samples/fashion-mnist-slice")), 200, 1);
    QCOMPARE(s.train.size(), size_t(1800));
    QCOMPARE(s.validation.size(), size_t(200));
    QCOMPARE(s.test.size(), size_t(500));
    QVERIFY(!s.cifarAugment);
    QTemporaryDir tmp;
    writeCifarDir(tmp.path());
    tb::DataSplits c = tb::loadData("cifar10:" + str(tmp.path()), 0, 1);
    QVERIFY(c.cifarAugment);
    QCOMPARE(c.train.size(), size_t(15));
    QCOMPARE(c.test.size(), size_t(2));
    QString msg = errorOf([&] { tb::loadData("cifar10:" + str(tmp.filePath("nope")), 0, 1); });
    QVERIFY2(mentions(msg, {tmp.filePath("nope"), "no such directory"}), qPrintable(msg));
}

void TestData::sampleSlice() {
    const std::string dir = str(tbtest::sourcePath("samples/fashion-mnist-slice"));
    tb::Dataset train = tb::readIdxDir(dir, true);
    QCOMPARE(train.size(), size_t(2000));
    QCOMPARE(train.numClasses, 10);
    QCOMPARE(train.channels, 1);
    QCOMPARE(train.height, 28);
    QCOMPARE(train.width, 28);
    QCOMPARE(train.pixels.size(), size_t(2000 * 784));
    std::set<int32_t> classes(train.labels.begin(), train.labels.end());
    QCOMPARE(classes.size(), size_t(10));
    tb::Dataset test = tb::readIdxDir(dir, false);
    QCOMPARE(test.size(), size_t(500));
    // Fashion-MNIST's first training sample is an ankle boot (class 9).
    QCOMPARE(train.labels[0], int32_t(9));
}

void TestData::realFashionMnist() {
    if (!QDir(QString::fromUtf8(tb::kFashionMnistDir)).exists()) QSKIP("dataset-fashion-mnist is not installed");
    tb::DataSplits s = tb::loadData("fashion-mnist", 5000, 1);
    QCOMPARE(s.train.size(), size_t(55000));
    QCOMPARE(s.validation.size(), size_t(5000));
    QCOMPARE(s.test.size(), size_t(10000));
    QCOMPARE(s.train.numClasses, 10);
    // The shipped slice is the head of the real set.
    tb::Dataset slice = tb::readIdxDir(str(tbtest::sourcePath("samples/fashion-mnist-slice")), true);
    QVERIFY(std::equal(slice.pixels.begin(), slice.pixels.end(), s.train.pixels.begin()));
    QVERIFY(std::equal(slice.labels.begin(), slice.labels.end(), s.train.labels.begin()));
}

// ---------------------------------------------------------------- pipeline

void TestData::pipelineOnePass_data() {
    QTest::addColumn<bool>("shuffle");
    QTest::addColumn<int>("buffer");
    QTest::addColumn<int>("prefetch");
    QTest::newRow("in order") << false << 0 << 0;
    QTest::newRow("full shuffle") << true << 0 << 0;
    QTest::newRow("full shuffle, prefetch 3") << true << 0 << 3;
    QTest::newRow("buffer 100") << true << 100 << 2;
    QTest::newRow("buffer 1 (no shuffle)") << true << 1 << 1;
    QTest::newRow("buffer larger than data") << true << 5000 << 0;
}

void TestData::pipelineOnePass() {
    QFETCH(bool, shuffle);
    QFETCH(int, buffer);
    QFETCH(int, prefetch);
    tb::Dataset d = indexedImages(1000, 1, 2, 3);
    tb::PipelineOptions o;
    o.batchSize = 64;
    o.repeat = false;
    o.shuffle = shuffle;
    o.shuffleBuffer = size_t(buffer);
    o.prefetch = prefetch;
    o.seed = 11;
    tb::InputPipeline p(d, o);
    std::vector<int32_t> seen;
    tb::Batch b;
    int batches = 0;
    while (p.next(b)) {
        ++batches;
        QCOMPARE(b.c, 1);
        QCOMPARE(b.h, 2);
        QCOMPARE(b.w, 3);
        QCOMPARE(b.n, batches < 16 ? 64 : 1000 - 15 * 64);
        QCOMPARE(b.x.size(), size_t(b.n) * 6);
        QCOMPARE(b.y.size(), size_t(b.n));
        for (int i = 0; i < b.n; ++i) {
            QCOMPARE(b.x[size_t(i) * 6], float(b.y[size_t(i)] % 251) / 255.0f);  // x travels with y
            seen.push_back(b.y[size_t(i)]);
        }
    }
    QCOMPARE(batches, 16);
    QVERIFY(!p.next(b));  // stays finished
    std::vector<int32_t> sorted = seen;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int32_t> all(1000);
    std::iota(all.begin(), all.end(), 0);
    QVERIFY(sorted == all);  // every sample exactly once
    const bool inOrder = seen == all;
    QCOMPARE(inOrder, !shuffle || buffer == 1);
    // A shuffle buffer of B can only emit one of the first B samples first.
    if (shuffle && buffer > 1 && buffer < 1000) QVERIFY(seen[0] < buffer);
}

void TestData::pipelineRepeatReshufflesAndFillsBatches() {
    tb::Dataset d = indexedImages(100, 1, 1, 1);
    tb::PipelineOptions o;
    o.batchSize = 32;
    o.repeat = true;
    o.seed = 3;
    tb::InputPipeline p(d, o);
    std::vector<tb::Batch> batches = take(p, 25);  // 800 samples = 8 epochs
    QCOMPARE(batches.size(), size_t(25));
    std::vector<int32_t> seen;
    for (const tb::Batch& b : batches) {
        QCOMPARE(b.n, 32);  // batches straddle epochs
        seen.insert(seen.end(), b.y.begin(), b.y.end());
    }
    std::vector<std::vector<int32_t>> epochs;
    for (int e = 0; e < 8; ++e) {
        std::vector<int32_t> ep(seen.begin() + e * 100, seen.begin() + (e + 1) * 100);
        epochs.push_back(ep);
        std::sort(ep.begin(), ep.end());
        for (int i = 0; i < 100; ++i) QCOMPARE(ep[size_t(i)], i);  // each epoch is a permutation
    }
    QVERIFY(epochs[0] != epochs[1]);  // reshuffled each epoch
}

void TestData::pipelinePrefetchIsDeterministic() {
    tb::Dataset d = cifarLike(300, 21);
    auto run = [&](int prefetch, uint64_t seed, size_t buffer) {
        tb::PipelineOptions o;
        o.batchSize = 64;
        o.shuffleBuffer = buffer;
        o.augment = true;
        o.cropH = o.cropW = 24;
        o.standardize = true;
        o.prefetch = prefetch;
        o.seed = seed;
        tb::InputPipeline p(d, o);
        return take(p, 12);  // crosses two epoch boundaries
    };
    for (size_t buffer : {size_t(0), size_t(50)}) {
        std::vector<tb::Batch> a = run(0, 5, buffer), b = run(2, 5, buffer), c = run(2, 6, buffer);
        QCOMPARE(a.size(), size_t(12));
        QCOMPARE(b.size(), size_t(12));
        bool sameOrderAsOtherSeed = true;
        for (size_t i = 0; i < a.size(); ++i) {
            QVERIFY(a[i].y == b[i].y);
            QVERIFY(a[i].x == b[i].x);
            sameOrderAsOtherSeed = sameOrderAsOtherSeed && a[i].y == c[i].y;
        }
        QVERIFY(!sameOrderAsOtherSeed);
    }
}

// The model's input normalisation: pixels become pixel x multiply + add (the second seed's
// x / 255 - 0.5); the default is pixel / 255.
void TestData::pipelinePixelNormalisation() {
    const tb::Dataset d = oneImage("three", 1, 1, 3, {0, 255, 51});
    for (const auto& [multiply, add, want] : {std::tuple{1.f / 255.f, 0.f, std::vector<float>{0.f, 1.f, 0.2f}},
                                              std::tuple{1.f / 255.f, -0.5f, std::vector<float>{-0.5f, 0.5f, -0.3f}}}) {
        tb::PipelineOptions o;
        o.batchSize = 1;
        o.repeat = false;
        o.shuffle = false;
        o.prefetch = 0;
        o.pixelMultiply = multiply;
        o.pixelAdd = add;
        tb::InputPipeline p(d, o);
        tb::Batch b;
        QVERIFY(p.next(b));
        QCOMPARE(int(b.x.size()), 3);
        for (int i = 0; i < 3; ++i)
            QVERIFY2(std::abs(b.x[size_t(i)] - want[size_t(i)]) < 1e-6f, qPrintable(QString::number(b.x[size_t(i)])));
    }
}

void TestData::pipelineCentralCrop() {
    std::vector<uint8_t> ramp;
    for (int c = 0; c < 2; ++c)
        for (int y = 0; y < 6; ++y)
            for (int x = 0; x < 8; ++x) ramp.push_back(uint8_t(c * 48 + y * 8 + x));
    const tb::Dataset d = oneImage("ramp", 2, 6, 8, std::move(ramp));
    struct Case {
        int ch, cw, y0, x0;
    } cases[] = {{4, 4, 1, 2}, {3, 5, 1, 1}, {6, 8, 0, 0}};
    for (const Case& k : cases) {
        tb::PipelineOptions o;
        o.batchSize = 1;
        o.repeat = false;
        o.cropH = k.ch;
        o.cropW = k.cw;
        o.prefetch = 0;
        tb::InputPipeline p(d, o);
        QCOMPARE(p.outChannels(), 2);
        QCOMPARE(p.outHeight(), k.ch);
        QCOMPARE(p.outWidth(), k.cw);
        tb::Batch b;
        QVERIFY(p.next(b));
        QCOMPARE(b.h, k.ch);
        QCOMPARE(b.w, k.cw);
        for (int c = 0; c < 2; ++c)
            for (int y = 0; y < k.ch; ++y)
                for (int x = 0; x < k.cw; ++x)
                    QCOMPARE(b.x[size_t((c * k.ch + y) * k.cw + x)],
                             float(c * 48 + (y + k.y0) * 8 + (x + k.x0)) / 255.0f);
    }
}

void TestData::pipelineFloatFeatures() {
    tb::Dataset d = tb::makeBlobs(100, 4, 1);
    tb::PipelineOptions o;
    o.batchSize = 100;
    o.shuffle = false;
    o.repeat = false;
    tb::InputPipeline p(d, o);
    tb::Batch b;
    QVERIFY(p.next(b));
    QCOMPARE(b.n, 100);
    QCOMPARE(b.c, 2);
    QVERIFY(b.x == d.features);
    QVERIFY(b.y == d.labels);
    QVERIFY(!p.next(b));
}

void TestData::pipelineAugmentShapeAndStandardize() {
    tb::Dataset d = cifarLike(256, 4);
    tb::PipelineOptions o;
    o.batchSize = 128;
    o.augment = true;
    o.cropH = o.cropW = 24;
    o.standardize = true;
    tb::InputPipeline p(d, o);
    for (int rep = 0; rep < 3; ++rep) {
        tb::Batch b;
        QVERIFY(p.next(b));
        QCOMPARE(b.n, 128);
        QCOMPARE(b.c, 3);
        QCOMPARE(b.h, 24);
        QCOMPARE(b.w, 24);
        QCOMPARE(b.x.size(), size_t(128 * 3 * 24 * 24));
        for (int i = 0; i < b.n; ++i) {
            const float* img = b.x.data() + size_t(i) * 1728;
            double sum = 0, sq = 0;
            for (int k = 0; k < 1728; ++k) sum += img[k];
            const double mean = sum / 1728;
            for (int k = 0; k < 1728; ++k) sq += (img[k] - mean) * (img[k] - mean);
            const double sd = std::sqrt(sq / 1728);
            QVERIFY2(std::fabs(mean) < 1e-4, qPrintable(QString::number(mean)));
            QVERIFY2(std::fabs(sd - 1.0) < 1e-3, qPrintable(QString::number(sd)));
        }
    }
    // Without augmentation, standardisation alone of a constant image leaves zeros (the
    // adjusted stddev 1/sqrt(N) keeps it finite).
    tb::Dataset flat = indexedImages(1, 1, 4, 4);
    std::fill(flat.pixels.begin(), flat.pixels.end(), uint8_t(200));
    tb::PipelineOptions s;
    s.standardize = true;
    s.repeat = false;
    tb::InputPipeline q(flat, s);
    tb::Batch b;
    QVERIFY(q.next(b));
    for (float v : b.x) QCOMPARE(v, 0.0f);
}

void TestData::pipelineAugmentIsACropAndFlip() {
    // Pixel = 16 * y + x, all distinct. Brightness and contrast are increasing affine maps per
    // channel, so the output of a crop must rise by one step per column (falling if flipped)
    // and by 16 steps per row.
    tb::Dataset d;
    d.name = "grid";
    d.channels = 1;
    d.height = d.width = 16;
    d.numClasses = 1;
    for (int i = 0; i < 64; ++i) {
        for (int k = 0; k < 256; ++k) d.pixels.push_back(uint8_t(k));
        d.labels.push_back(0);
    }
    tb::PipelineOptions o;
    o.batchSize = 64;
    o.augment = true;
    o.cropH = o.cropW = 8;
    o.seed = 9;
    tb::InputPipeline p(d, o);
    tb::Batch b;
    QVERIFY(p.next(b));
    int flipped = 0;
    std::set<float> firstValues;
    for (int i = 0; i < b.n; ++i) {
        const float* img = b.x.data() + size_t(i) * 64;
        const float step = img[1] - img[0];
        QVERIFY(std::fabs(step) > 1e-4f);
        flipped += step < 0;
        for (int y = 0; y < 8; ++y)
            for (int x = 0; x < 8; ++x) {
                const float expect = img[0] + step * float(x) + std::fabs(step) * 16.0f * float(y);
                QVERIFY2(std::fabs(img[y * 8 + x] - expect) < 1e-4f,
                         qPrintable(QStringLiteral("sample %1 (%2,%3)").arg(i).arg(y).arg(x)));
            }
        firstValues.insert(img[0]);
    }
    QVERIFY2(flipped > 10 && flipped < 54, qPrintable(QString::number(flipped)));
    QVERIFY(firstValues.size() > 32);  // crops, brightness and contrast vary per sample
}

// --augment crop:2,flip on a 6x6 image of distinct values (no brightness, no contrast): each
// sample is the image shifted by dy, dx in [-2, 2] (zeros where it left the image), mirrored or
// not, and every shift and both mirrors occur; brightness:40 alone shifts all pixels alike.
void TestData::pipelineAugmentPartsForAnyImageSet() {
    std::vector<uint8_t> px(36);
    for (int i = 0; i < 36; ++i) px[size_t(i)] = uint8_t(i + 1);
    tb::Dataset d = oneImage("grid", 1, 6, 6, px);
    for (int i = 1; i < 200; ++i) {
        d.pixels.insert(d.pixels.end(), px.begin(), px.end());
        d.labels.push_back(0);
    }
    tb::PipelineOptions o;
    o.batchSize = 200;
    o.augment = true;
    o.pad = 2;
    o.flip = true;
    o.brightness = 0;
    o.contrastLow = o.contrastHigh = 1;
    o.pixelMultiply = 1;
    o.seed = 3;
    tb::InputPipeline p(d, o);
    tb::Batch b;
    QVERIFY(p.next(b));
    std::set<std::tuple<int, int, bool>> seen;
    for (int i = 0; i < b.n; ++i) {
        const float* img = b.x.data() + size_t(i) * 36;
        bool found = false;
        for (int dy = -2; dy <= 2 && !found; ++dy)
            for (int dx = -2; dx <= 2 && !found; ++dx)
                for (bool flip : {false, true}) {
                    bool match = true;
                    for (int y = 0; y < 6 && match; ++y)
                        for (int x = 0; x < 6 && match; ++x) {
                            const int sy = y + dy, sx = dx + (flip ? 5 - x : x);
                            const float want = sy >= 0 && sy < 6 && sx >= 0 && sx < 6 ? float(px[size_t(sy * 6 + sx)]) : 0.0f;
                            match = img[y * 6 + x] == want;
                        }
                    if (match) {
                        seen.insert({dy, dx, flip});
                        found = true;
                        break;
                    }
                }
        QVERIFY2(found, qPrintable(QString("sample %1 is no shift of the image").arg(i)));
    }
    QVERIFY2(seen.size() >= 40, qPrintable(QString::number(seen.size())));  // of 5 x 5 x 2 = 50
    o.pad = 0;
    o.flip = false;
    o.brightness = 40.0f;
    tb::InputPipeline bright(d, o);
    QVERIFY(bright.next(b));
    for (int i = 0; i < b.n; ++i) {
        const float* img = b.x.data() + size_t(i) * 36;
        const float delta = img[0] - 1.0f;
        QVERIFY(std::fabs(delta) <= 40.0f);
        for (int k = 0; k < 36; ++k) QVERIFY(std::fabs(img[k] - float(k + 1) - delta) < 1e-4f);
    }
}

// --normalise mean-std: the statistics of a set's scaled pixels per channel, and a pipeline that
// applies them gives each channel mean 0 and deviation 1 over the set.
void TestData::channelStatisticsNormalise() {
    tb::Dataset d = indexedImages(50, 3, 4, 4);
    const tb::ChannelStatistics s = tb::channelStatistics(d, 1.0f / 255, 0.0f);
    QCOMPARE(s.mean.size(), size_t(3));
    tb::PipelineOptions o;
    o.batchSize = 50;
    o.shuffle = false;
    o.repeat = false;
    o.channelMean = s.mean;
    o.channelStd = s.stddev;
    tb::InputPipeline p(d, o);
    tb::Batch b;
    QVERIFY(p.next(b));
    for (int ch = 0; ch < 3; ++ch) {
        double sum = 0, sq = 0;
        for (int i = 0; i < 50; ++i)
            for (int k = 0; k < 16; ++k) {
                const double v = b.x[size_t(i) * 48 + size_t(ch) * 16 + size_t(k)];
                sum += v;
                sq += v * v;
            }
        const double mean = sum / 800, sd = std::sqrt(sq / 800 - mean * mean);
        QVERIFY2(std::abs(mean) < 1e-5 && std::abs(sd - 1) < 1e-4, qPrintable(QString("channel %1: %2, %3").arg(ch).arg(mean).arg(sd)));
    }
    o.channelMean.pop_back();
    QVERIFY(mentions(errorOf([&] { tb::InputPipeline q(d, o); }), {"channel statistics of 2 channels"}));
}

void TestData::augmentFlagIsParsed() {
    const tb::AugmentSettings a = tb::AugmentSettings::parse("crop:4,flip,brightness:63,contrast:0.2:1.8", "--augment");
    QVERIFY(a.enabled && !a.automatic && a.flip);
    QCOMPARE(a.pad, 4);
    QCOMPARE(a.brightness, 63.0f / 255.0f);
    QCOMPARE(a.contrastLow, 0.2f);
    QVERIFY(tb::AugmentSettings::parse("auto", "--augment").automatic);
    QVERIFY(!tb::AugmentSettings::parse("none", "--augment").enabled);
    for (const char* bad : {"rotate", "crop", "crop:x", "crop:1.5", "brightness:-1", "contrast:2:1", "contrast:1", "flip:1"}) {
        const QString msg = errorOf([&] { tb::AugmentSettings::parse(bad, "--augment"); });
        QVERIFY2(mentions(msg, {"--augment"}), qPrintable(QString(bad) + ": " + msg));
    }
}

void TestData::pipelineBadOptions() {
    tb::Dataset d = indexedImages(4, 1, 8, 8);
    tb::PipelineOptions o;
    o.cropH = 9;
    o.cropW = 4;
    QString msg = errorOf([&] { tb::InputPipeline p(d, o); });
    QVERIFY2(mentions(msg, {"indexed", "crop 9x4", "8x8"}), qPrintable(msg));
    o = {};
    o.batchSize = 0;
    msg = errorOf([&] { tb::InputPipeline p(d, o); });
    QVERIFY2(mentions(msg, {"batch size 0"}), qPrintable(msg));
    tb::Dataset empty;
    empty.name = "nothing";
    msg = errorOf([&] { tb::InputPipeline p(empty, tb::PipelineOptions{}); });
    QVERIFY2(mentions(msg, {"nothing", "empty"}), qPrintable(msg));
}

void TestData::pipelineDestroyMidStream() {
    tb::Dataset d = cifarLike(200, 8);
    QElapsedTimer t;
    t.start();
    for (int round = 0; round < 30; ++round) {
        tb::PipelineOptions o;
        o.batchSize = 16;
        o.prefetch = 1 + round % 4;
        o.augment = round % 2 == 0;
        o.cropH = o.cropW = 24;
        o.repeat = round % 3 != 0;
        o.seed = uint64_t(round);
        auto p = std::make_unique<tb::InputPipeline>(d, o);
        take(*p, round % 5);  // 0..4 batches, then stop consuming with the queue full or filling
        p.reset();
    }
    QVERIFY2(t.elapsed() < 5000, qPrintable(QStringLiteral("%1 ms").arg(t.elapsed())));
}

void TestData::pipelineSpeed() {
    tb::Dataset d = cifarLike(512, 10);
    tb::PipelineOptions o;
    o.batchSize = 128;
    o.augment = true;
    o.cropH = o.cropW = 24;
    o.standardize = true;
    o.prefetch = 0;  // measure the work itself, on this thread
    tb::InputPipeline p(d, o);
    tb::Batch b;
    QVERIFY(p.next(b));  // warm-up
    QElapsedTimer t;
    t.start();
    const int batches = 20;
    for (int i = 0; i < batches; ++i) QVERIFY(p.next(b));
    const double usPerImage = double(t.nsecsElapsed()) / 1000.0 / (batches * 128);
    qInfo("augmented CIFAR batch: %.1f us per image", usPerImage);
    QVERIFY2(usPerImage < 1000.0, qPrintable(QString::number(usPerImage)));
}

QTEST_GUILESS_MAIN(TestData)
#include "tst_data.moc"
