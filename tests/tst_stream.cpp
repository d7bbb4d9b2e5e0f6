// Tests of streamed input (data/record_stream.hpp) on TFRecord shards written here: every record
// once an epoch, the processes' shares disjoint and whole, the order fixed by the seed whatever
// the loader threads, resume exact (mid-epoch, across epochs, per process), the validation tail
// and channel statistics equal to the set read into memory, and the faults: a shard gone or
// changed mid-run, a corrupt record, a label beyond the classes.
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "data/record_stream.hpp"
#include "data/tfrecord_dataset.hpp"
#include "io/tfrecord.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

namespace {

using tbtest::errorOf;
using tbtest::mentions;

// n images of (1, 4, 4) whose first two pixels spell their index (so every record is known by
// its pixels) and whose label is index % 5.
tb::Dataset numbered(size_t n) {
    tb::Dataset d;
    d.name = "numbered";
    d.channels = 1, d.height = 4, d.width = 4;
    d.numClasses = 5;
    for (size_t i = 0; i < n; ++i) {
        for (int p = 0; p < 16; ++p)
            d.pixels.push_back(uint8_t(p == 0 ? i & 0xff : p == 1 ? (i >> 8) & 0xff : (i * 7 + size_t(p)) & 0xff));
        d.labels.push_back(int32_t(i % 5));
    }
    return d;
}

// The index an unaugmented (1, 4, 4) sample of `numbered` spells (pixels scaled by 1/255).
size_t indexOf(const float* x) { return size_t(std::lround(x[0] * 255)) + (size_t(std::lround(x[1] * 255)) << 8); }

tb::PipelineOptions plain(int batch) {
    tb::PipelineOptions o;
    o.batchSize = batch;
    o.prefetch = 0;
    o.seed = 7;
    return o;
}

// Every sample's index of `count` batches.
std::vector<size_t> indices(tb::BatchSource& s, int count) {
    std::vector<size_t> out;
    tb::Batch b;
    for (int i = 0; i < count && s.next(b); ++i)
        for (int j = 0; j < b.n; ++j) out.push_back(indexOf(b.x.data() + size_t(j) * 16));
    return out;
}

std::vector<tb::Batch> batches(tb::BatchSource& s, int count) {
    std::vector<tb::Batch> out(static_cast<size_t>(count));
    for (tb::Batch& b : out)
        if (!s.next(b)) break;
    return out;
}

bool same(const tb::Batch& a, const tb::Batch& b) {
    return a.n == b.n && a.y == b.y && a.x.size() == b.x.size() &&
           std::memcmp(a.x.data(), b.x.data(), a.x.size() * sizeof(float)) == 0;
}

}  // namespace

class StreamTest : public QObject {
    Q_OBJECT
    QTemporaryDir dir_;
    std::vector<std::string> files_;  // 20 shards of numbered(1000): more than the interleave holds open

    tb::StreamedSet open(const std::vector<std::string>& files, int threads = 2) {
        return tb::openStreamedSet(files, {}, "numbered train", {}, threads);
    }
    std::vector<std::string> shardsIn(const QString& sub, size_t n, int shards) {
        const QString d = dir_.filePath(sub);
        QDir().mkpath(d);
        return tb::writeTFRecordShards(numbered(n), d.toStdString(), "train", shards, 1, 1);
    }

private slots:
    void initTestCase() {
        QVERIFY(dir_.isValid());
        files_ = shardsIn("twenty", 1000, 20);
    }

    void opensWithCountsShapeAndClasses() {
        const tb::StreamedSet s = open(files_);
        QCOMPARE(s.size(), uint64_t(1000));
        QCOMPARE(s.shards.size(), size_t(20));
        for (const auto& shard : s.shards) QCOMPARE(shard.records, uint64_t(50));
        QCOMPARE(s.channels, 1);
        QCOMPARE(s.height, 4);
        QCOMPARE(s.width, 4);
        QCOMPARE(s.numClasses, 5);
        // The same counts on one thread as on three.
        const tb::StreamedSet one = open(files_, 1), three = open(files_, 3);
        QCOMPARE(one.size(), s.size());
        QCOMPARE(three.numClasses, s.numClasses);
    }

    // Unshuffled: the shards in name order, 16 open at once, one record from each in turn.
    void interleavesInOrderWithoutShuffle() {
        const tb::StreamedSet s = open(files_);
        tb::PipelineOptions o = plain(100);
        o.shuffle = false;
        o.repeat = false;
        tb::RecordStream r(s, o);
        const std::vector<size_t> got = indices(r, 100);
        QCOMPARE(got.size(), size_t(1000));
        // Record k of the set went to shard k % 20 (writeTFRecordShards): the first turn takes
        // record 0 of shards 0..15, i.e. images 0..15; then record 1 of each: images 20..35.
        for (size_t i = 0; i < 16; ++i) QCOMPARE(got[i], i);
        for (size_t i = 0; i < 16; ++i) QCOMPARE(got[16 + i], 20 + i);
        QCOMPARE(std::set<size_t>(got.begin(), got.end()).size(), size_t(1000));
    }

    // Shuffled and repeating: each epoch holds every record once (batches straddle epochs).
    void everyRecordOnceAnEpoch() {
        const tb::StreamedSet s = open(files_);
        tb::PipelineOptions o = plain(40);  // 25 batches an epoch
        o.shuffleBuffer = 64;
        tb::RecordStream r(s, o);
        std::vector<size_t> epochs[3];
        for (auto& e : epochs) {
            e = indices(r, 25);
            QCOMPARE(std::set<size_t>(e.begin(), e.end()).size(), size_t(1000));
        }
        QVERIFY(epochs[0] != epochs[1]);  // a new file order and new draws each epoch
        // Shuffled for real: the first 100 are not near file order.
        int inOrder = 0;
        for (size_t i = 1; i < 100; ++i) inOrder += epochs[0][i] == epochs[0][i - 1] + 1;
        QVERIFY2(inOrder < 10, qPrintable(QString::number(inOrder)));
    }

    // Processes: their shares of an epoch are disjoint and make up the set.
    void processSharesAreDisjointAndWhole() {
        const tb::StreamedSet s = open(files_);
        for (int processes : {2, 3}) {
            std::vector<size_t> all;
            for (int p = 0; p < processes; ++p) {
                tb::PipelineOptions o = plain(1);
                o.sliceIndex = p, o.sliceCount = processes;
                o.shuffleBuffer = 50;
                tb::RecordStream r(s, o);
                const uint64_t share = 1000 / uint64_t(processes) + (uint64_t(p) < 1000 % uint64_t(processes) ? 1 : 0);
                QCOMPARE(r.epochShare(), share);
                const std::vector<size_t> mine = indices(r, int(share));
                all.insert(all.end(), mine.begin(), mine.end());
            }
            QCOMPARE(all.size(), size_t(1000));
            QCOMPARE(std::set<size_t>(all.begin(), all.end()).size(), size_t(1000));
        }
    }

    // The seed fixes every batch, augmentation included, whatever the loader threads and prefetch.
    void deterministicWhateverTheThreads() {
        const tb::StreamedSet s = open(files_);
        tb::PipelineOptions o = plain(32);
        o.shuffleBuffer = 100;
        o.augment = true;
        o.pad = 1;
        o.brightness = 0.1f;
        std::vector<tb::Batch> reference;
        {
            tb::RecordStream r(s, o);
            reference = batches(r, 70);  // past the first epoch
        }
        for (auto [threads, prefetch] : {std::pair{1, 2}, std::pair{3, 0}, std::pair{4, 3}}) {
            tb::PipelineOptions p = o;
            p.loaderThreads = threads, p.prefetch = prefetch;
            tb::RecordStream r(s, p);
            const std::vector<tb::Batch> got = batches(r, 70);
            for (size_t i = 0; i < got.size(); ++i)
                QVERIFY2(same(got[i], reference[i]), qPrintable(QStringLiteral("batch %1, %2 threads").arg(i).arg(threads)));
        }
        tb::PipelineOptions other = o;
        other.seed = 8;
        tb::RecordStream r(s, other);
        QVERIFY(!same(batches(r, 1)[0], reference[0]));
    }

    // Resume: a stream that skips k samples gives what an uninterrupted one gives after k, within
    // an epoch, at its end and epochs later; for each process of several.
    void resumeIsExact_data() {
        QTest::addColumn<int>("processes");
        QTest::addColumn<int>("steps");
        for (int steps : {1, 7, 31, 62, 100}) {
            QTest::addRow("1 process, %d steps", steps) << 1 << steps;
            QTest::addRow("3 processes, %d steps", steps) << 3 << steps;
        }
    }
    void resumeIsExact() {
        QFETCH(int, processes);
        QFETCH(int, steps);
        const tb::StreamedSet s = open(files_);
        for (int p = 0; p < processes; ++p) {
            tb::PipelineOptions o = plain(16);  // 1000 / 16: epochs end mid-batch
            o.shuffleBuffer = 200;
            o.augment = true;
            o.sliceIndex = p, o.sliceCount = processes;
            tb::RecordStream whole(s, o);
            const std::vector<tb::Batch> all = batches(whole, steps + 5);
            o.skipSamples = uint64_t(steps) * 16 * uint64_t(processes);  // global samples, as the engine counts
            tb::RecordStream resumed(s, o);
            const std::vector<tb::Batch> after = batches(resumed, 5);
            for (int i = 0; i < 5; ++i)
                QVERIFY2(same(after[size_t(i)], all[size_t(steps + i)]),
                         qPrintable(QStringLiteral("process %1, batch %2 after the resume").arg(p).arg(i)));
        }
    }

    // The validation tail and channel statistics are those of the set read into memory.
    void tailAndStatisticsMatchTheHeldSet() {
        tb::StreamedSet s = open(files_);
        tb::Dataset held = tb::readTFRecordExamples(files_, {}, "held");
        const tb::ChannelStatistics streamed = tb::channelStatistics(s, 1.0f / 255, 0.0f, 3);
        const tb::ChannelStatistics inMemory = tb::channelStatistics(held, 1.0f / 255, 0.0f);
        QCOMPARE(streamed.mean.size(), size_t(1));
        QVERIFY(std::abs(streamed.mean[0] - inMemory.mean[0]) < 1e-6f);
        QVERIFY(std::abs(streamed.stddev[0] - inMemory.stddev[0]) < 1e-6f);

        const tb::Dataset tail = s.takeTail(120, "validation");
        const tb::Dataset heldTail = tb::splitTail(held, 120, "validation");
        QCOMPARE(tail.pixels, heldTail.pixels);
        QCOMPARE(tail.labels, heldTail.labels);
        QCOMPARE(s.size(), uint64_t(880));
        // The tail is out of the stream: an epoch is the 880 others.
        tb::PipelineOptions o = plain(88);
        tb::RecordStream r(s, o);
        const std::vector<size_t> epoch = indices(r, 10);
        const std::set<size_t> seen(epoch.begin(), epoch.end());
        QCOMPARE(seen.size(), size_t(880));
        for (size_t i = 0; i < 120; ++i) QVERIFY(!seen.count(size_t(tail.pixels[i * 16]) + (size_t(tail.pixels[i * 16 + 1]) << 8)));
        // The head in file order: shard 0's first records, images 0, 20 and 40.
        const tb::Dataset head = s.head(3);
        QCOMPARE(head.size(), size_t(3));
        for (size_t i = 0; i < 3; ++i) QCOMPARE(size_t(head.pixels[i * 16]), 20 * i);
    }

    // A shard removed or cut short mid-run: the stream stops, naming it, when it reaches it (the 16
    // open at the time stay readable, as POSIX keeps an open file).
    void shardGoneOrChangedMidEpoch_data() {
        QTest::addColumn<bool>("removed");
        QTest::newRow("removed") << true;
        QTest::newRow("cut short") << false;
    }
    void shardGoneOrChangedMidEpoch() {
        QFETCH(bool, removed);
        const std::vector<std::string> files = shardsIn(removed ? "gone" : "changed", 1000, 20);
        const tb::StreamedSet s = open(files);
        tb::RecordStream r(s, plain(50));
        tb::Batch b;
        QVERIFY(r.next(b));
        for (const std::string& f : files)
            removed ? (void)std::filesystem::remove(f) : std::filesystem::resize_file(f, std::filesystem::file_size(f) / 2);
        const QString e = errorOf([&] {
            for (int i = 0; i < 40; ++i) r.next(b);
        });
        QVERIFY2(mentions(e, {removed ? "has gone since the run began" : "has changed since the run began", "train-000"}),
                 qPrintable(e));
    }

    // Faults found when the set is opened, each naming the file and record.
    void badShardsRefusedAtOpen() {
        const std::vector<std::string> files = shardsIn("bad", 100, 2);
        QFile f(QString::fromStdString(files[1]));
        QVERIFY(f.open(QIODevice::ReadWrite));
        f.seek(f.size() - 30);
        f.write("X");  // inside the last record's data
        f.close();
        // The open pass checks the framing and reads labels; a flipped pixel byte is found by the
        // data CRC, when the record is read.
        const QString e = errorOf([&] { open(files); });
        QVERIFY2(mentions(e, {"train-00001-of-00002.tfrecords: record 49", "CRC"}), qPrintable(e));

        const QString torn = dir_.filePath("bad/torn-train.tfrecords");
        QByteArray bytes = tbtest::readFile(QString::fromStdString(files[0]));
        bytes.chop(7);
        tbtest::writeFile(torn, bytes);
        const QString t = errorOf([&] { open({torn.toStdString()}); });
        QVERIFY2(mentions(t, {"torn-train.tfrecords: record 49"}), qPrintable(t));

        const QString empty = dir_.filePath("bad/empty-train.tfrecords");
        tbtest::writeFile(empty, {});
        QVERIFY(mentions(errorOf([&] { open({empty.toStdString()}); }), {"empty-train.tfrecords", "holds no records"}));

        // A process with no share of a tiny set.
        const tb::StreamedSet tiny = open({files[0]});
        tb::PipelineOptions o = plain(1);
        o.sliceIndex = 55, o.sliceCount = 60;  // 50 records: processes 0..49 have one each
        QVERIFY(mentions(errorOf([&] { tb::RecordStream r(tiny, o); }), {"leave none for process 55 of 60"}));
    }
};

QTEST_GUILESS_MAIN(StreamTest)
#include "tst_stream.moc"
