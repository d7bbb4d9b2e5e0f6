// Runs that last: safetensors files (written, read back by an independent reader written here
// from the published format, and refused in every corrupt shape), the input pipeline's skip
// ahead, exact resume (a run stopped at a random step and resumed gives bitwise the losses of
// an uninterrupted run, for holder, all-reduce and averaging plans with momentum, Adam, EMA,
// dropout, a shuffle buffer, and batch norm per tower and synchronised), weights into another plan, refusals, evaluation of a
// checkpoint, and the run folder's files.
#include <QRegularExpression>
#include <QtTest>

#include <sstream>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <QDateTime>
#include <QJsonArray>
#include <QtEndian>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QThread>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>
#include <sqlite3.h>
#include <nlohmann/json.hpp>

#include "data/dataset.hpp"
#include "data/pipeline.hpp"
#include "data/tfrecord_dataset.hpp"
#include "engine/checkpoint.hpp"
#include "nn/model_spec.hpp"
#include "engine/metrics_file.hpp"
#include "engine/observer_hub.hpp"
#include "engine/run_folder.hpp"
#include "engine/trainer.hpp"
#include "io/run_index.hpp"
#include "io/run_lock.hpp"
#include "io/safetensors.hpp"
#include "io/tfrecord.hpp"
#include "test_support.hpp"
#include "util/system_text.hpp"
#ifdef TB_HAVE_PROTOBUF
#include "tensorflow/tensorflow.pb.h"
#endif

using namespace tb;
using tbtest::errorOf;
using tbtest::mentions;

namespace {


// The published format, read without the code under test: u64 LE header length, a JSON header,
// the data. Returns the header, and checks that every tensor's offsets lie in the data.
QJsonObject independentHeader(const QByteArray& file, QString* problem) {
    if (file.size() < 8) return *problem = "short", QJsonObject();
    quint64 n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | quint8(file[i]);
    if (n > quint64(file.size() - 8)) return *problem = "header length", QJsonObject();
    const QJsonDocument doc = QJsonDocument::fromJson(file.mid(8, qsizetype(n)));
    if (!doc.isObject()) return *problem = "header JSON", QJsonObject();
    const qint64 data = file.size() - 8 - qint64(n);
    const QJsonObject header = doc.object();
    for (auto it = header.begin(); it != header.end(); ++it) {
        if (it.key() == "__metadata__") continue;
        const QJsonArray off = it.value().toObject().value("data_offsets").toArray();
        if (off.size() != 2 || off[0].toInteger() > off[1].toInteger() || off[1].toInteger() > data)
            return *problem = "offsets of " + it.key(), QJsonObject();
    }
    return header;
}

// The F32 values of tensor `name` per the independent reading.
std::vector<float> independentFloats(const QByteArray& file, const QJsonObject& header, const QString& name) {
    quint64 n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | quint8(file[i]);
    const QJsonArray off = header.value(name).toObject().value("data_offsets").toArray();
    const qint64 begin = 8 + qint64(n) + off[0].toInteger(), end = 8 + qint64(n) + off[1].toInteger();
    std::vector<float> out(size_t(end - begin) / 4);
    std::memcpy(out.data(), file.constData() + begin, size_t(end - begin));
    return out;
}

// A file of raw bytes: an 8-byte length and `header` as given, then `data`.
QByteArray rawFile(const QByteArray& header, const QByteArray& data, qint64 claimed = -1) {
    const quint64 n = claimed >= 0 ? quint64(claimed) : quint64(header.size());
    QByteArray out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = char((n >> (8 * i)) & 0xff);
    return out + header + data;
}

// CRC-32C bit by bit, from its definition (reflected polynomial 0x82F63B78), and TFRecord's
// mask: a reader independent of io/tfrecord's table.
uint32_t bitwiseCrc32c(const char* p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; ++i) {
        c ^= uint8_t(p[i]);
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return ~c;
}
uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

// Every record of a TFRecord file, each length and CRC checked; empty on any fault.
QList<QByteArray> independentRecords(const QByteArray& file, QString* problem) {
    QList<QByteArray> out;
    qsizetype at = 0;
    auto le = [&](qsizetype pos, int bytes) {
        quint64 v = 0;
        for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | quint8(file[pos + i]);
        return v;
    };
    while (at < file.size()) {
        if (file.size() - at < 16) return *problem = "cut short", QList<QByteArray>();
        const quint64 n = le(at, 8);
        if (le(at + 8, 4) != masked(bitwiseCrc32c(file.constData() + at, 8))) return *problem = "length CRC", QList<QByteArray>();
        if (n > quint64(file.size() - at - 16)) return *problem = "length", QList<QByteArray>();
        const QByteArray data = file.mid(at + 12, qsizetype(n));
        if (le(at + 12 + qsizetype(n), 4) != masked(bitwiseCrc32c(data.constData(), size_t(data.size()))))
            return *problem = "data CRC", QList<QByteArray>();
        out << data;
        at += 16 + qsizetype(n);
    }
    return out;
}

// A model with dropout, so exact resume covers the counter-based masks.
const char* kDropNet = R"({"name": "dropnet", "input": [2, 1, 1], "layers": [
    {"type": "dense", "name": "hidden", "units": 48, "init": {"type": "glorot"}}, {"type": "relu"},
    {"type": "dropout", "keep": 0.7},
    {"type": "dense", "name": "logits", "units": 4, "init": {"type": "glorot"}}]})";

// A model with batch norm (a fused ReLU after one), so exact resume covers the moving statistics.
const char* kNormNet = R"({"name": "normnet", "input": [2, 1, 1], "layers": [
    {"type": "dense", "name": "hidden", "units": 32, "init": {"type": "glorot"}},
    {"type": "batch_norm", "name": "bn"}, {"type": "relu"},
    {"type": "dense", "name": "logits", "units": 4, "init": {"type": "glorot"}}]})";

// A model for the streamed set's (1, 4, 4) images, with dropout.
const char* kStreamNet = R"({"name": "streamnet", "input": [1, 4, 4], "layers": [
    {"type": "flatten"},
    {"type": "dense", "name": "hidden", "units": 32, "init": {"type": "glorot"}}, {"type": "relu"},
    {"type": "dropout", "keep": 0.8},
    {"type": "dense", "name": "logits", "units": 4, "init": {"type": "glorot"}}]})";

// n (1, 4, 4) images of 4 classes: class k brighter in quadrant k, with noise from `seed`.
Dataset quadrants(size_t n, uint32_t seed) {
    Dataset d;
    d.channels = 1, d.height = 4, d.width = 4;
    d.numClasses = 4;
    std::mt19937 rng(seed);
    for (size_t i = 0; i < n; ++i) {
        const int k = int(rng() % 4);
        for (int y = 0; y < 4; ++y)
            for (int x = 0; x < 4; ++x)
                d.pixels.push_back(uint8_t((((y / 2) * 2 + x / 2) == k ? 150 : 50) + int(rng() % 80)));
        d.labels.push_back(k);
    }
    return d;
}

// Every step's loss, in step order, as the run reports them; and every validation accuracy.
struct Losses : TrainingObserver {
    std::mutex mutex;
    std::map<int64_t, double> byStep;
    std::vector<double> validation;
    std::function<void(int64_t)> onStep;
    void onEval(const EvalResult& r) override {
        std::lock_guard lock(mutex);
        if (r.split == "validation") validation.push_back(r.accuracy);
    }
    void onStepEnd(const StepMetrics& m) override {
        {
            std::lock_guard lock(mutex);
            byStep[m.step] = m.loss;
        }
        if (onStep) onStep(m.step);
    }
};

}  // namespace

class CheckpointTest : public QObject {
    Q_OBJECT
    QTemporaryDir dir_;
    QString model_, normModel_, streamModel_, streamData_;

    // A run of `c` trained in a new folder, which is closed (its lock dropped) on return.
    static void trainInFolder(const RunConfig& c, const QString& folderPath) {
        auto folder = RunFolder::create(c, folderPath.toStdString());
        Trainer t(c);
        t.setRunFolder(folder.get());
        t.run();
    }

    // The run in the folder resumed to `steps` steps, as --resume does.
    static RunSummary resumeInFolder(const QString& folderPath, int64_t steps) {
        RunConfig r = RunFolder::resumeConfig(folderPath.toStdString());
        r.steps = steps;
        auto folder = RunFolder::reopen(folderPath.toStdString());
        Trainer t(r);
        t.setRunFolder(folder.get());
        return t.run();
    }

    RunConfig run(const QString& kind) const {
        RunConfig c;
        c.model = model_.toStdString();
        c.data = "synthetic:spirals";
        c.batch = 64;
        c.steps = 90;
        c.optimizer = "momentum";
        c.lr = 0.05;
        c.threads = 2;
        c.quiet = true;
        c.checkpointEvery = 10;
        c.checkpointMinutes = 0;
        c.evalEvery = 30;
        if (kind == "holder") c.towers = "cpu:0,cpu:1";
        if (kind == "adam ema buffer") {
            c.optimizer = "adam";
            c.lr = 0.003;
            c.emaDecay = 0.99;
            c.shuffleBuffer = 500;
        }
        if (kind == "all-reduce") {
            c.towers = "cpu:0,cpu:1";
            c.variables = "replicated";
            c.reduce = "allreduce";
        }
        if (kind == "averaging") {
            c.towers = "cpu:0,cpu:1";
            c.variables = "replicated";
            c.reduce = "allreduce";
            c.averageEvery = 4;
            c.checkpointEvery = 8;
        }
        if (kind.startsWith("batch norm")) {  // per tower (each its own statistics), or synchronised
            c.model = normModel_.toStdString();
            c.towers = "cpu:0,cpu:1";
            c.syncBn = kind.endsWith("sync");
        }
        if (kind.startsWith("streamed")) {  // shards read as they are used, augmented (tf.data's order)
            c.model = streamModel_.toStdString();
            c.data = "tfrecord:" + streamData_.toStdString();
            c.stream = "true";
            c.shuffleBuffer = 300;
            c.augment = "flip,brightness:20";
            c.prefetch = 2;
            c.loaderThreads = 2;
            if (kind.endsWith("holder")) c.towers = "cpu:0,cpu:1";
        }
        return c;
    }

private slots:
    void initTestCase() {
        QVERIFY(dir_.isValid());
        model_ = dir_.filePath("dropnet.json");
        tbtest::writeFile(model_, kDropNet);
        normModel_ = dir_.filePath("normnet.json");
        tbtest::writeFile(normModel_, kNormNet);
        streamModel_ = dir_.filePath("streamnet.json");
        tbtest::writeFile(streamModel_, kStreamNet);
        // Eight shards of 2,000 images (200 for validation, 1,800 streamed: 28 steps an epoch) and a test split.
        streamData_ = dir_.filePath("quadrants");
        QVERIFY(QDir().mkpath(streamData_));
        writeTFRecordShards(quadrants(2000, 1), streamData_.toStdString(), "train", 8, 1, 1);
        writeTFRecordExamples(quadrants(300, 2), (streamData_ + "/test.tfrecords").toStdString());
        qputenv("TOWERBENCH_RUNS_DIR", dir_.filePath("runs").toLocal8Bit());
    }

    // A checkpoint's snapshot gives its pages back when the write is done, even when glibc has
    // untouched free space to serve it from (as a long run leaves it: the window's soak kept a
    // 12.5 MiB run of such pages resident after the first best-checkpoint, with std::vector).
    void snapshotBuffersGiveTheirPagesBack() {
#if defined(__SANITIZE_ADDRESS__)
        QSKIP("AddressSanitizer's allocator is not glibc's");
#else
        // glibc's thresholds raised by a large block freed; then a block freed untouched, so the
        // arena holds 16 MiB of free pages that were never resident.
        void* large = std::malloc(24 << 20);
        QVERIFY(large);
        static_cast<volatile char*>(large)[0] = 1;
        std::free(large);
        void* untouched = std::malloc(16 << 20);
        QVERIFY(untouched);
        std::free(untouched);
        const qint64 before = tbtest::residentKiB();
        {
            decltype(TrainingSnapshot::variables) variables(size_t(3) << 20, 1.f);  // 12 MiB, every page written
            QCOMPARE(variables[variables.size() - 1], 1.f);
        }
        const qint64 after = tbtest::residentKiB();
        QVERIFY2(before > 0 && after - before < 2048,
                 qPrintable(QStringLiteral("a freed 12 MiB snapshot buffer left %1 KiB resident").arg(after - before)));
#endif
    }

    void safetensorsRoundTrip() {
        const float a[6] = {1.5f, -2.f, 3.25f, 0.f, 1e-30f, -7.f};
        const int64_t b = 123456789012345;
        const uint8_t c[5] = {1, 2, 3, 254, 255};
        const std::vector<safetensors::TensorRef> refs = {{"a/weights", safetensors::Dtype::F32, {2, 3}, a},
                                                           {"b", safetensors::Dtype::I64, {}, &b},
                                                           {"c", safetensors::Dtype::U8, {5}, c}};
        const std::string head = safetensors::header(refs, {{"format", "test"}, {"note", "ünïcode"}});
        QCOMPARE(head.size() % 8, size_t(0));  // the data starts aligned
        QByteArray file = QByteArray::fromStdString(head);
        file.append(reinterpret_cast<const char*>(a), sizeof a);
        file.append(reinterpret_cast<const char*>(&b), sizeof b);
        file.append(reinterpret_cast<const char*>(c), sizeof c);
        QCOMPARE(size_t(file.size()) - head.size(), safetensors::dataBytes(refs));
        const QString path = dir_.filePath("round.safetensors");
        tbtest::writeFile(path, file);

        QString problem;
        const QJsonObject h = independentHeader(file, &problem);
        QVERIFY2(problem.isEmpty(), qPrintable(problem));
        QCOMPARE(h.value("a/weights").toObject().value("dtype").toString(), QStringLiteral("F32"));
        QCOMPARE(h.value("a/weights").toObject().value("shape").toArray(), QJsonArray({2, 3}));
        QCOMPARE(h.value("__metadata__").toObject().value("note").toString(), QStringLiteral("ünïcode"));
        const std::vector<float> ia = independentFloats(file, h, "a/weights");
        QCOMPARE(ia, std::vector<float>(a, a + 6));

        const safetensors::File f = safetensors::File::read(path.toStdString());
        QCOMPARE(f.meta("note"), std::string("ünïcode"));
        std::vector<float> back(6);
        f.readFloats("a/weights", back.data(), 6);
        QCOMPARE(back, std::vector<float>(a, a + 6));
        QCOMPARE(f.int64s("b"), std::vector<int64_t>{b});
        QCOMPARE(f.info("c").bytes, size_t(5));
        QVERIFY(std::memcmp(f.data("c"), c, 5) == 0);
        QVERIFY(mentions(QString::fromStdString(errorOf([&] { f.readFloats("b", back.data(), 1); }).toStdString()),
                         {"not F32"}));
        // The header alone: the same names, shapes and metadata; the bytes refused, not made up.
        const safetensors::File header = safetensors::File::readHeader(path.toStdString());
        QCOMPARE(header.names(), f.names());
        QCOMPARE(header.info("a/weights").shape, (std::vector<int64_t>{2, 3}));
        QCOMPARE(header.meta("note"), std::string("ünïcode"));
        QVERIFY(mentions(errorOf([&] { header.readFloats("a/weights", back.data(), 6); }), {"header only", "a/weights"}));
        // A file cut short after its header: its tensors' offsets lie past its end.
        tbtest::writeFile(path, file.left(file.size() - 1));
        QVERIFY(mentions(errorOf([&] { safetensors::File::readHeader(path.toStdString()); }), {"lie outside"}));
    }

    void safetensorsCorrupt_data() {
        QTest::addColumn<QByteArray>("file");
        QTest::addColumn<QString>("says");
        const QByteArray ok4 = QByteArray(4, '\0');
        QTest::newRow("empty") << QByteArray() << "not a safetensors file";
        QTest::newRow("7 bytes") << QByteArray(7, 'x') << "not a safetensors file";
        QTest::newRow("length beyond the file") << rawFile("{}", {}, 1000) << "exceeds the file";
        QTest::newRow("length 2^62") << rawFile("{}", {}, qint64(1) << 62) << "exceeds the file";
        QTest::newRow("not JSON") << rawFile("{nope", {}) << "not valid JSON";
        QTest::newRow("an array") << rawFile("[1, 2]", {}) << "not a JSON object";
        QTest::newRow("unknown dtype") << rawFile(R"({"t": {"dtype": "F128", "shape": [1], "data_offsets": [0, 4]}})", ok4)
                                       << "unknown dtype";
        QTest::newRow("negative size") << rawFile(R"({"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", ok4)
                                       << "not a size";
        QTest::newRow("offsets past the data")
            << rawFile(R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}})", ok4) << "lie outside";
        QTest::newRow("offsets against the shape")
            << rawFile(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", ok4) << "need 8 bytes";
        QTest::newRow("a shape that overflows")
            << rawFile(R"({"t": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})", ok4)
            << "too many";
        QTest::newRow("overlap") << rawFile(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                               "b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}})",
                                            ok4)
                                 << "overlap";
        QTest::newRow("bytes of no tensor")
            << rawFile(R"({"t": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})", ok4) << "belong to no tensor";
        QTest::newRow("metadata not strings") << rawFile(R"({"__metadata__": {"k": 1}})", {}) << "not a string";
        QTest::newRow("missing offsets") << rawFile(R"({"t": {"dtype": "U8", "shape": [4]}})", ok4)
                                         << "lacks dtype, shape or data_offsets";
    }

    void safetensorsCorrupt() {
        QFETCH(QByteArray, file);
        QFETCH(QString, says);
        const QString path = dir_.filePath("bad.safetensors");
        tbtest::writeFile(path, file);
        const QString e = errorOf([&] { safetensors::File::read(path.toStdString()); });
        QVERIFY2(mentions(e, {path, says}), qPrintable(e));
        const QString h = errorOf([&] { safetensors::File::readHeader(path.toStdString()); });
        QVERIFY2(mentions(h, {path, says}), qPrintable(h));
    }

    // A pipeline told to skip k samples continues exactly as one that took them: full shuffle,
    // a shuffle buffer and CIFAR-style augmentation, k across an epoch's end; from the run's start,
    // and a trillion samples in (3.3 billion epochs of 300: a skip costs at most one epoch's draws,
    // so a resume after any number of steps starts at once; replaying every draw never ended).
    void pipelineSkipsAsIfItHadTaken_data() {
        QTest::addColumn<int>("buffer");
        QTest::addColumn<bool>("augment");
        QTest::addColumn<qulonglong>("base");
        for (qulonglong base : {0ull, 1000000000000ull}) {
            const char* at = base ? ", a trillion samples in" : "";
            QTest::addRow("full shuffle%s", at) << 0 << false << base;
            QTest::addRow("shuffle buffer%s", at) << 50 << false << base;
            QTest::addRow("augmentation%s", at) << 0 << true << base;
        }
    }

    void pipelineSkipsAsIfItHadTaken() {
        QFETCH(int, buffer);
        QFETCH(bool, augment);
        QFETCH(qulonglong, base);
        Dataset d;
        d.name = "ramp";
        d.channels = 1;
        d.height = d.width = 6;
        d.numClasses = 3;
        for (int i = 0; i < 300; ++i) {
            for (int p = 0; p < 36; ++p) d.pixels.push_back(uint8_t((i * 7 + p * 13) % 256));
            d.labels.push_back(i % 3);
        }
        PipelineOptions o;
        o.batchSize = 32;
        o.shuffleBuffer = size_t(buffer);
        o.augment = augment;
        if (augment) o.cropH = o.cropW = 4;
        o.seed = 9;
        const int k = 11 * 32 + 5;  // past the first epoch of 300
        Batch taken, skipped;
        // Take k samples one batch at a time, the last batch partly: a pipeline of batch 1 would
        // differ only in batching, so take them through a batch-1 twin instead.
        PipelineOptions one = o;
        one.batchSize = 1;
        one.skipSamples = base;
        InputPipeline first(d, one);
        for (int i = 0; i < k; ++i) QVERIFY(first.next(taken));
        PipelineOptions skip = o;
        skip.skipSamples = base + uint64_t(k);
        InputPipeline b(d, skip);
        for (int i = 0; i < 20; ++i) {
            QVERIFY(first.next(taken));
            QVERIFY(b.next(skipped));
            // b's batch i holds the next 32 samples of `first`; compare sample by sample.
            const size_t per = size_t(skipped.c) * skipped.h * skipped.w;
            for (int j = 0; j < skipped.n; ++j) {
                if (j > 0) QVERIFY(first.next(taken));
                QCOMPARE(taken.y[0], skipped.y[size_t(j)]);
                QVERIFY(std::memcmp(taken.x.data(), skipped.x.data() + size_t(j) * per, per * sizeof(float)) == 0);
            }
        }
    }

    // Stopped at a random step (its final checkpoint kept, or lost as in a crash) and resumed:
    // every later step's loss is bitwise the uninterrupted run's, and the folder's metrics hold
    // each step once.
    void resumeIsExact_data() {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<bool>("crash");
        for (const char* k : {"one tower", "holder", "adam ema buffer", "all-reduce", "averaging", "batch norm",
                              "batch norm sync", "streamed", "streamed holder"}) {
            QTest::addRow("%s, stopped", k) << QString(k) << false;
            QTest::addRow("%s, crashed", k) << QString(k) << true;
        }
    }

    void resumeIsExact() {
        QFETCH(QString, kind);
        QFETCH(bool, crash);
        const RunConfig c = run(kind);
        Losses plain;
        double plainTest = -1, plainTestLoss = -1;
        {
            Trainer t(c);
            t.addObserver(&plain);
            const RunSummary s = t.run();
            plainTest = s.testAccuracy, plainTestLoss = s.testLoss;
        }
        QCOMPARE(int(plain.byStep.size()), 90);

        std::mt19937 rng(uint32_t(std::hash<std::string>{}(QTest::currentDataTag())));  // the same each run
        const int64_t stopAt = 15 + int64_t(rng() % 60);
        const QString folderPath = dir_.filePath(QStringLiteral("resume-%1").arg(QTest::currentDataTag()).replace(' ', '_'));
        int64_t stoppedAt = 0;
        std::vector<double> firstValidation;  // the stopped part's, also those a crash leaves out of metrics.jsonl
        {
            auto folder = RunFolder::create(c, folderPath.toStdString());
            Trainer t(c);
            Losses first;
            first.onStep = [&](int64_t s) {
                if (s >= stopAt) t.requestStop();
            };
            t.addObserver(&first);
            t.setRunFolder(folder.get());
            const RunSummary s = t.run();
            QVERIFY(s.stopped);
            stoppedAt = s.steps;
            firstValidation = first.validation;
            for (const auto& [step, loss] : first.byStep) QCOMPARE(loss, plain.byStep.at(step));
        }
        const QString finalCheckpoint = folderPath + QStringLiteral("/checkpoints/step-%1.safetensors")
                                                         .arg(stoppedAt, 8, 10, QLatin1Char('0'));
        QVERIFY2(QFile::exists(finalCheckpoint), qPrintable(finalCheckpoint));
        if (crash) QVERIFY(QFile::remove(finalCheckpoint));  // as if killed before its end
        const int64_t from = Checkpoint::open(RunFolder::newestCheckpointIn(folderPath.toStdString())).meta().step;
        QVERIFY2(crash ? from < stoppedAt : from == stoppedAt, qPrintable(QString::number(from)));

        auto folder = RunFolder::reopen(folderPath.toStdString());
        Trainer t(RunFolder::resumeConfig(folderPath.toStdString()));
        Losses resumed;
        t.addObserver(&resumed);
        t.setRunFolder(folder.get());
        const RunSummary s = t.run();
        QCOMPARE(s.resumedAt, from);
        QCOMPARE(s.steps, int64_t(90));
        // The test set evaluated at the end as the uninterrupted run did (batch norm: with tower 0's
        // moving statistics as they would have been).
        QCOMPARE(s.testAccuracy, plainTest);
        QCOMPARE(s.testLoss, plainTestLoss);
        QCOMPARE(resumed.byStep.begin()->first, from + 1);
        for (const auto& [step, loss] : resumed.byStep)
            QVERIFY2(loss == plain.byStep.at(step),
                     qPrintable(QStringLiteral("step %1: %2 resumed, %3 uninterrupted").arg(step).arg(loss, 0, 'g', 17)
                                    .arg(plain.byStep.at(step), 0, 'g', 17)));

        // metrics.jsonl: steps 1..90, each once, in order.
        std::ifstream in((folderPath + "/metrics.jsonl").toStdString());
        int64_t expect = 1;
        for (std::string line; std::getline(in, line);) {
            const nlohmann::json j = nlohmann::json::parse(line);
            if (j["type"] == "step") QCOMPARE(j["step"].get<int64_t>(), expect++);
        }
        QCOMPARE(expect, int64_t(91));
        const QJsonObject runJson = QJsonDocument::fromJson(tbtest::readFile(folderPath + "/run.json")).object();
        QCOMPARE(runJson.value("state").toString(), QStringLiteral("finished"));
        QVERIFY(QFile::exists(folderPath + "/summary.json"));
        QVERIFY(QFile::exists(folderPath + "/checkpoints/best.safetensors"));  // validation every 30 steps
        // best.safetensors holds the best validation accuracy of all, the stopped part's included
        // (a crash leaves its evaluations after the resumed checkpoint out of metrics.jsonl).
        double bestSeen = firstValidation.empty() ? -1 : *std::max_element(firstValidation.begin(), firstValidation.end());
        std::ifstream evals((folderPath + "/metrics.jsonl").toStdString());
        for (std::string line; std::getline(evals, line);) {
            const nlohmann::json j = nlohmann::json::parse(line);
            if (j["type"] == "eval" && j["split"] == "validation") bestSeen = std::max(bestSeen, j["accuracy"].get<double>());
        }
        QCOMPARE(Checkpoint::open((folderPath + "/checkpoints/best.safetensors").toStdString()).meta().validationAccuracy,
                 bestSeen);
        // The last 3 step checkpoints and best.
        const QStringList kept = QDir(folderPath + "/checkpoints").entryList({"step-*.safetensors"});
        QCOMPARE(kept.size(), 3);
        QCOMPARE(kept.last(), QStringLiteral("step-00000090.safetensors"));
    }

    // The file as Python's safetensors would see it: every variable under params/ with its shape.
    void checkpointReadsIndependently() {
        RunConfig c = run("adam ema buffer");
        c.steps = 20;
        auto folder = RunFolder::create(c, dir_.filePath("independent").toStdString());
        Trainer t(c);
        t.setRunFolder(folder.get());
        t.run();
        const QByteArray file = tbtest::readFile(dir_.filePath("independent/checkpoints/step-00000020.safetensors"));
        QString problem;
        const QJsonObject h = independentHeader(file, &problem);
        QVERIFY2(problem.isEmpty(), qPrintable(problem));
        QCOMPARE(h.value("params/hidden/weights").toObject().value("shape").toArray(), QJsonArray({48, 2}));
        QCOMPARE(h.value("params/logits/biases").toObject().value("shape").toArray(), QJsonArray({4}));
        QVERIFY(h.contains("ema/hidden/weights"));
        QVERIFY(h.contains("state/optimizer/m") && h.contains("state/optimizer/v"));
        const QJsonObject md = h.value("__metadata__").toObject();
        QCOMPARE(md.value("format").toString(), QStringLiteral("towerbench-checkpoint"));
        QCOMPARE(md.value("step").toString(), QStringLiteral("20"));
        QCOMPARE(md.value("samples").toString(), QStringLiteral("1280"));
        QCOMPARE(QJsonDocument::fromJson(md.value("config").toString().toUtf8()).object().value("optimizer").toString(),
                 QStringLiteral("adam"));
        for (const float v : independentFloats(file, h, "params/hidden/weights")) QVERIFY(std::isfinite(v));
    }

    // Every tensor carries a CRC-32C in the metadata: a bit flipped in any of them (the last one
    // here: the optimiser's second moment) is refused naming it, by open, by a resume of the
    // folder and by the command line; a checkpoint written before checksums loads with a note.
    void flippedBitRefusedNamingItsTensor() {
        RunConfig c = run("adam ema buffer");
        c.steps = 20;
        const QString folderPath = dir_.filePath("flipped");
        trainInFolder(c, folderPath);
        const QString path = folderPath + "/checkpoints/step-00000020.safetensors";
        const QByteArray clean = tbtest::readFile(path);
        QVERIFY(Checkpoint::open(path.toStdString()).note().empty());
        QString problem;
        const QJsonObject h = independentHeader(clean, &problem);
        QVERIFY2(problem.isEmpty(), qPrintable(problem));
        QVERIFY(h.value("__metadata__").toObject().value("checksums").toString().contains("crc32c:"));
        // Each tensor in turn: a bit of its last byte flipped.
        const qsizetype dataStart = 8 + qsizetype(qFromLittleEndian<quint64>(clean.constData()));
        for (auto it = h.begin(); it != h.end(); ++it) {
            if (it.key() == "__metadata__") continue;
            QByteArray damaged = clean;
            const qsizetype end = qsizetype(it.value().toObject().value("data_offsets").toArray().at(1).toInteger());
            damaged[dataStart + end - 1] = char(damaged[dataStart + end - 1] ^ 0x10);
            tbtest::writeFile(path, damaged);
            const QString e = errorOf([&] { Checkpoint::open(path.toStdString()); });
            QVERIFY2(mentions(e, {"tensor " + it.key(), "does not match its checksum", "step-00000020.safetensors"}),
                     qPrintable(e));
        }
        // Resumed: refused, naming the tensor, not passed over for an older checkpoint.
        {
            RunConfig r = RunFolder::resumeConfig(folderPath.toStdString());
            r.steps = 30;
            auto folder = RunFolder::reopen(folderPath.toStdString());
            Trainer t(r);
            t.setRunFolder(folder.get());
            const QString e = errorOf([&] { t.run(); });
            QVERIFY2(mentions(e, {"does not match its checksum"}), qPrintable(e));
        }
        const tbtest::RunResult cli = tbtest::runTowerbench({"eval", path});
        QCOMPARE(cli.exitCode, 2);
        QVERIFY2(cli.err.contains("does not match its checksum") && cli.err.trimmed().count('\n') == 0,
                 qPrintable(cli.err));

        // Written before checksums: the same file without the metadata key loads, with a note.
        std::vector<safetensors::TensorRef> refs;
        const safetensors::File f = safetensors::File::parse(std::vector<uint8_t>(clean.begin(), clean.end()), "clean");
        for (const std::string& name : f.names())
            refs.push_back({name, f.info(name).dtype, f.info(name).shape, f.data(name)});
        std::map<std::string, std::string> md = f.metadata();
        md.erase("checksums");
        QByteArray old = QByteArray::fromStdString(safetensors::header(refs, md));
        for (const auto& r : refs) old.append(reinterpret_cast<const char*>(r.data), qsizetype(safetensors::dataBytes({r})));
        tbtest::writeFile(path, old);
        const Checkpoint loaded = Checkpoint::open(path.toStdString());
        QVERIFY2(mentions(QString::fromStdString(loaded.note()), {"written before checkpoints carried checksums"}),
                 qPrintable(QString::fromStdString(loaded.note())));
        QCOMPARE(loaded.meta().step, int64_t(20));
        const tbtest::RunResult noted = tbtest::runTowerbench({"eval", path});
        QCOMPARE(noted.exitCode, 0);
        QVERIFY2(noted.err.contains("note: ") && noted.err.contains("unverified"), qPrintable(noted.err));
    }

    // A checkpoint's weights in another plan: 1 tower trained, 2 replicated towers continue.
    void weightsIntoAnotherPlan() {
        RunConfig c = run("one tower");
        c.steps = 40;
        auto folder = RunFolder::create(c, dir_.filePath("source").toStdString());
        Trainer t(c);
        t.setRunFolder(folder.get());
        t.run();
        const std::string ckpt = RunFolder::newestCheckpointIn(dir_.filePath("source").toStdString());
        RunConfig d = run("all-reduce");
        d.initFrom = ckpt;
        d.steps = 1;
        d.lr = 1e-30;  // the step moves nothing measurable: the weights are the checkpoint's
        d.momentum = 0;
        auto target = RunFolder::create(d, dir_.filePath("target").toStdString());
        Trainer u(d);
        Losses first;
        u.addObserver(&first);
        u.setRunFolder(target.get());
        u.run();
        const Checkpoint a = Checkpoint::open(ckpt);
        const Checkpoint b = Checkpoint::open(RunFolder::newestCheckpointIn(dir_.filePath("target").toStdString()));
        std::vector<float> wa(2 * 48), wb(2 * 48);
        a.file().readFloats("params/hidden/weights", wa.data(), wa.size());
        b.file().readFloats("params/hidden/weights", wb.data(), wb.size());
        QCOMPARE(wa, wb);
        Losses fresh;
        RunConfig f = d;
        f.initFrom.clear();
        Trainer v(f);
        v.addObserver(&fresh);
        v.run();
        QVERIFY2(first.byStep.at(1) < fresh.byStep.at(1),
                 qPrintable(QStringLiteral("%1 vs %2").arg(first.byStep.at(1)).arg(fresh.byStep.at(1))));
    }

    void refusals() {
        RunConfig c = run("one tower");
        c.steps = 20;
        const std::string folderPath = dir_.filePath("refusals").toStdString();
        {
            auto folder = RunFolder::create(c, folderPath);
            Trainer t(c);
            t.setRunFolder(folder.get());
            t.run();
        }
        // Another learning rate: not the same run any more.
        {
            RunConfig r = RunFolder::resumeConfig(folderPath);
            r.steps = 30;
            r.lr = 0.5;
            auto folder = RunFolder::reopen(folderPath);
            Trainer t(r);
            t.setRunFolder(folder.get());
            const QString e = errorOf([&] { t.run(); });
            QVERIFY2(mentions(e, {"--resume: --lr is 0.5", "--init-from"}), qPrintable(e));
        }
        // Nothing left to train.
        {
            auto folder = RunFolder::reopen(folderPath);
            Trainer t(RunFolder::resumeConfig(folderPath));
            t.setRunFolder(folder.get());
            const QString e = errorOf([&] { t.run(); });
            QVERIFY2(mentions(e, {"has trained its 20 steps", "--steps"}), qPrintable(e));
        }
        // A new folder where a run already is.
        QVERIFY2(mentions(errorOf([&] { RunFolder::create(c, folderPath); }), {"already holds a run", "--resume"}),
                 "create over a run");
        // Weights into another model.
        const std::string ckpt = RunFolder::newestCheckpointIn(folderPath);
        RunConfig other = c;
        other.model = "tiny_mlp";
        other.initFrom = ckpt;
        const QString e = errorOf([&] { Trainer(other).run(); });
        QVERIFY2(mentions(e, {QString::fromStdString(ckpt), "another model"}), qPrintable(e));
        // A newer format, and another precision.
        safetensors::File f = safetensors::File::read(ckpt);
        auto rewrite = [&](const std::string& path, const std::map<std::string, std::string>& md, safetensors::Dtype dtype) {
            std::vector<safetensors::TensorRef> refs;
            for (const std::string& n : f.names())
                refs.push_back({n, n == "params/hidden/weights" ? dtype : safetensors::Dtype::F32, f.info(n).shape, f.data(n)});
            for (auto& r : refs)
                if (r.dtype == safetensors::Dtype::F16) r.shape.back() *= 2;  // the same bytes, as twice the halves
            std::ofstream out(path, std::ios::binary);
            const std::string h = safetensors::header(refs, md);
            out.write(h.data(), std::streamsize(h.size()));
            for (const auto& r : refs) out.write(static_cast<const char*>(r.data), std::streamsize(f.info(r.name).bytes));
        };
        auto md = f.metadata();
        md["version"] = "2";
        rewrite(dir_.filePath("newer.safetensors").toStdString(), md, safetensors::Dtype::F32);
        QVERIFY(mentions(errorOf([&] { Checkpoint::open(dir_.filePath("newer.safetensors").toStdString()); }),
                         {"format 2 is newer than this Towerbench reads (1)"}));
        rewrite(dir_.filePath("half.safetensors").toStdString(), f.metadata(), safetensors::Dtype::F16);
        RunConfig half = c;
        half.initFrom = dir_.filePath("half.safetensors").toStdString();
        const QString h = errorOf([&] { Trainer(half).run(); });
        QVERIFY2(mentions(h, {"hidden/weights is F16, not F32"}), qPrintable(h));
    }

    // eval gives the test accuracy the run itself reported at its end.
    void evaluateCheckpointAgreesWithTheRun() {
        RunConfig c = run("adam ema buffer");
        c.steps = 40;
        c.validation = 0;
        auto folder = RunFolder::create(c, dir_.filePath("eval").toStdString());
        Trainer t(c);
        t.setRunFolder(folder.get());
        const RunSummary s = t.run();
        const EvalResult r = evaluateCheckpoint(RunFolder::newestCheckpointIn(dir_.filePath("eval").toStdString()), c);
        QCOMPARE(r.step, int64_t(40));
        QVERIFY(r.averagedWeights);
        QCOMPARE(r.accuracy, s.testAccuracy);
        QCOMPARE(r.loss, s.testLoss);
    }

    // Event files and TFRecord output on a full disk: the write or the flush throws, naming the
    // file (the run then fails with that line instead of losing its events).
    void tfrecordWriteErrorsThrow() {
        TFRecordWriter w("/dev/full");
        QString message;
        try {
            for (int i = 0; i < 1000; ++i) w.write(std::string(1000, 'e'));  // more than stdio buffers
            w.flush();
        } catch (const tb::Error& e) {
            message = e.what();
        }
        QVERIFY2(message.contains("/dev/full: write failed (No space left on device)"), qPrintable(message));
    }

    void tfrecordFraming() {
        QCOMPARE(crc32c("123456789", 9), 0xE3069283u);  // the check value of CRC-32C
        QCOMPARE(crc32c("123456789", 9), bitwiseCrc32c("123456789", 9));
        const QString path = dir_.filePath("records.tfrecord");
        {
            TFRecordWriter w(path.toStdString());
            w.write("first");
            w.write(std::string());
            w.write(std::string(70000, 'x'));
        }
        QString problem;
        const QList<QByteArray> records = independentRecords(tbtest::readFile(path), &problem);
        QVERIFY2(problem.isEmpty(), qPrintable(problem));
        QCOMPARE(records.size(), 3);
        QCOMPARE(records[0], QByteArray("first"));
        QCOMPARE(records[2].size(), 70000);
        TFRecordReader r(path.toStdString());
        std::string rec;
        QVERIFY(r.next(rec) && rec == "first");
        QVERIFY(r.next(rec) && rec.empty());
        QVERIFY(r.next(rec) && rec.size() == 70000);
        QVERIFY(!r.next(rec));

        // Corrupt files: one line naming the file and the record, nothing allocated from a lie.
        const QByteArray good = tbtest::readFile(path);
        struct Bad {
            const char* name;
            QByteArray bytes;
            const char* says;
        };
        QByteArray flippedData = good;
        flippedData[12 + 2] = 'X';  // inside record 0's data
        QByteArray flippedLength = good;
        flippedLength[0] = char(0x7f);  // record 0's length, its CRC now wrong
        QByteArray huge = good.left(0);
        {
            char head[12];
            const quint64 n = quint64(1) << 60;
            for (int i = 0; i < 8; ++i) head[i] = char((n >> (8 * i)) & 0xff);
            const uint32_t c = masked(bitwiseCrc32c(head, 8));
            for (int i = 0; i < 4; ++i) head[8 + i] = char((c >> (8 * i)) & 0xff);
            huge = QByteArray(head, 12) + QByteArray(8, '\0');
        }
        const QList<Bad> bads = {{"cut", good.left(good.size() - 3), "record 2 claims"},
                                 {"data", flippedData, "record 0: its data's CRC does not match"},
                                 {"length", flippedLength, "record 0: its length's CRC does not match"},
                                 {"huge", huge, "record 0 claims 1152921504606846976 bytes"},
                                 {"header", good.left(good.size() - 70016 - 10), "record 1 is cut short"}};
        for (const Bad& b : bads) {
            const QString p = dir_.filePath(QStringLiteral("bad-%1.tfrecord").arg(b.name));
            tbtest::writeFile(p, b.bytes);
            const QString e = errorOf([&] {
                TFRecordReader rd(p.toStdString());
                std::string x;
                while (rd.next(x)) {
                }
            });
            QVERIFY2(mentions(e, {p, b.says}), qPrintable(QString(b.name) + ": " + e));
        }
    }

#ifdef TB_HAVE_PROTOBUF
    // The run folder's TensorBoard file, read with the bit-by-bit CRC above and protobuf's own
    // parser: the version record first, then every step's scalars and the evaluations'.
    void tensorboardEvents() {
        RunConfig c = run("holder");
        c.steps = 25;
        c.evalEvery = 10;
        const QString folder = dir_.filePath("events");
        auto f = RunFolder::create(c, folder.toStdString());
        Trainer t(c);
        Losses losses;
        t.addObserver(&losses);
        t.setRunFolder(f.get());
        const RunSummary s = t.run();
        f.reset();
        const QStringList files = QDir(folder).entryList({"events.out.tfevents.*"});
        QCOMPARE(files.size(), 1);
        QString problem;
        const QList<QByteArray> records = independentRecords(tbtest::readFile(folder + "/" + files[0]), &problem);
        QVERIFY2(problem.isEmpty(), qPrintable(problem));
        tensorflow::Event first;
        QVERIFY(first.ParseFromArray(records[0].constData(), int(records[0].size())));
        QCOMPARE(QString::fromStdString(first.file_version()), QStringLiteral("brain.Event:2"));
        std::map<std::string, std::map<int64_t, float>> scalars;
        for (qsizetype i = 1; i < records.size(); ++i) {
            tensorflow::Event e;
            QVERIFY(e.ParseFromArray(records[i].constData(), int(records[i].size())));
            QVERIFY(e.wall_time() > 1.7e9);
            for (const auto& v : e.summary().value()) scalars[v.tag()][e.step()] = v.simple_value();
        }
        QCOMPARE(int(scalars["loss"].size()), 25);
        for (const auto& [step, loss] : losses.byStep) QCOMPARE(scalars["loss"].at(step), float(loss));
        QCOMPARE(int(scalars["tower1/backward_ms"].size()), 25);
        QCOMPARE(int(scalars["validation/accuracy"].size()), 3);  // steps 10, 20 and the end
        QCOMPARE(scalars["test/accuracy"].at(25), float(s.testAccuracy));
        QVERIFY(scalars.count("learning_rate") && scalars.count("examples_per_sec"));
    }

    // What the window's grid and matrix show after an evaluation is what the model computes: a
    // forward pass written here, in double, from the final checkpoint's weights (read by the
    // independent reader) predicts every test image as the run said (but where its two best
    // classes are within 1e-4 of each other), the matrix counts exactly those predictions, its
    // diagonal is the accuracy the loss kernel counted, and predictions.json and the metrics
    // line say the same. A 2-D set gets the matrix alone.
    void predictionsAreTheModelsOwn() {
        RunConfig c;
        c.model = "mlp";
        c.data = "idx:" + tbtest::sourcePath("samples/fashion-mnist-slice").toStdString();
        c.towers = "cpu:0";
        c.batch = 32;
        c.steps = 40;
        c.threads = 2;
        c.quiet = true;
        struct Evals : TrainingObserver {
            std::vector<EvalResult> all;
            void onEval(const EvalResult& r) override { all.push_back(r); }
        } evals;
        const QString dir = dir_.filePath("predictions");
        auto folder = RunFolder::create(c, dir.toStdString());
        Trainer t(c);
        t.setRunFolder(folder.get());
        t.addObserver(&evals);
        const RunSummary s = t.run();
        folder.reset();
        QVERIFY(!evals.all.empty());
        const EvalResult& r = evals.all.back();
        QCOMPARE(QString::fromStdString(r.split), QStringLiteral("test"));
        QVERIFY(r.predictions);
        const Predictions& p = *r.predictions;
        QCOMPARE(int(p.labels.size()), 500);
        QCOMPARE(p.classNames.front(), std::string("T-shirt/top"));
        QCOMPARE(r.classes, 10);
        std::vector<int64_t> counts(100, 0);
        for (size_t i = 0; i < 500; ++i) ++counts[size_t(p.labels[i]) * 10 + size_t(p.predicted[i])];
        QCOMPARE(counts, r.confusion);
        int64_t right = 0;
        for (int k = 0; k < 10; ++k) right += r.confusion[size_t(k) * 11];
        QCOMPARE(double(right) / 500.0, s.testAccuracy);

        // The model by hand: 784-512-512-10, ReLU, on pixels / 255.
        const QByteArray file = tbtest::readFile(QString::fromStdString(RunFolder::newestCheckpointIn(dir.toStdString())));
        QString problem;
        const QJsonObject header = independentHeader(file, &problem);
        QVERIFY2(problem.isEmpty(), qPrintable(problem));
        const Dataset test = loadData(c.data, 0, 1).test;
        std::vector<double> x(784), h1(512), h2(512), logits(10);
        auto dense = [&](const std::vector<double>& in, std::vector<double>& out, const QString& layer, bool relu) {
            const std::vector<float> w = independentFloats(file, header, "params/" + layer + "/weights");  // (out, in)
            const std::vector<float> b = independentFloats(file, header, "params/" + layer + "/biases");
            for (size_t o = 0; o < out.size(); ++o) {
                double acc = b[o];
                for (size_t i = 0; i < in.size(); ++i) acc += double(w[o * in.size() + i]) * in[i];
                out[o] = relu ? std::max(0.0, acc) : acc;
            }
        };
        int agree = 0, nearTies = 0;
        for (size_t n = 0; n < 500; ++n) {
            for (size_t i = 0; i < 784; ++i) x[i] = test.pixels[n * 784 + i] / 255.0;
            dense(x, h1, "hidden1", true);
            dense(h1, h2, "hidden2", true);
            dense(h2, logits, "logits", false);
            const int best = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
            std::vector<double> sorted = logits;
            std::sort(sorted.rbegin(), sorted.rend());
            if (best == p.predicted[n]) ++agree;
            else if (sorted[0] - sorted[1] < 1e-4) ++nearTies;
            double z = 0;
            for (double l : logits) z += std::exp(l - sorted[0]);
            QVERIFY2(std::fabs(1.0 / z - p.confidence[n]) < 1e-4, qPrintable(QString("example %1").arg(n)));
        }
        qInfo("hand-computed predictions: %d of 500 agree, %d near ties", agree, nearTies);
        QCOMPARE(agree + nearTies, 500);

        // The run folder: predictions.json and the metrics line's matrix.
        const QJsonObject saved = QJsonDocument::fromJson(tbtest::readFile(dir + "/predictions.json")).object();
        QCOMPARE(saved.value("step").toInt(), 40);
        const QJsonArray predicted = saved.value("predicted").toArray();
        QCOMPARE(predicted.size(), qsizetype(500));
        for (size_t n = 0; n < 500; ++n) QCOMPARE(predicted[qsizetype(n)].toInt(), p.predicted[n]);
        QFile metrics(dir + "/metrics.jsonl");
        QVERIFY(metrics.open(QIODevice::ReadOnly));
        MetricsLine last;
        for (const QByteArray& line : metrics.readAll().split('\n')) {
            MetricsLine m;
            if (parseMetricsLine(line.toStdString(), m) && m.kind == MetricsLine::Kind::Eval) last = m;
        }
        QCOMPARE(last.eval.confusion, r.confusion);

        // A 2-D set: a matrix, no images.
        RunConfig planar = run("sync");
        planar.steps = 5;
        Evals two;
        Trainer t2(planar);
        t2.addObserver(&two);
        t2.run();
        QVERIFY(!two.all.empty() && !two.all.back().predictions);
        int64_t total = 0;
        for (int64_t v : two.all.back().confusion) total += v;
        QCOMPARE(total, two.all.back().examples);
    }

    // convert writes the IDX slice as TFRecord Examples; training on them is bitwise training on
    // the IDX files (same pixels, labels and order); broken Examples are refused in one line.
    void tfrecordInput() {
        const QString slice = tbtest::sourcePath("samples/fashion-mnist-slice");
        const QString out = dir_.filePath("slice-tf");
        tbtest::RunResult r = tbtest::runTowerbench({"convert", "idx:" + slice, "tfrecord:" + out});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QJsonObject made = QJsonDocument::fromJson(r.out.trimmed().toUtf8()).object();
        QCOMPARE(made.value("train_records").toInt(), 2000);
        QCOMPARE(made.value("test_records").toInt(), 500);
        QString problem;
        const QList<QByteArray> records = independentRecords(tbtest::readFile(out + "/train.tfrecords"), &problem);
        QVERIFY2(problem.isEmpty() && records.size() == 2000, qPrintable(problem));
        tensorflow::Example e;
        QVERIFY(e.ParseFromArray(records[0].constData(), int(records[0].size())));
        QCOMPARE(int(e.features().feature().at("image_raw").bytes_list().value(0).size()), 784);
        QCOMPARE(e.features().feature().at("height").int64_list().value(0), int64_t(28));

        const QStringList run = {"--model", "mlp", "--steps", "20", "--batch", "32", "--threads", "2", "--quiet"};
        const tbtest::RunResult a = tbtest::runTowerbench(run + QStringList{"--data", "idx:" + slice});
        const tbtest::RunResult b = tbtest::runTowerbench(run + QStringList{"--data", "tfrecord:" + out});
        QVERIFY2(a.exitCode == 0 && b.exitCode == 0, qPrintable(a.err + b.err));
        const QJsonObject sa = QJsonDocument::fromJson(a.out.trimmed().section('\n', -1).toUtf8()).object();
        const QJsonObject sb = QJsonDocument::fromJson(b.out.trimmed().section('\n', -1).toUtf8()).object();
        QCOMPARE(sb.value("final_loss").toDouble(), sa.value("final_loss").toDouble());
        QCOMPARE(sb.value("test_accuracy").toDouble(), sa.value("test_accuracy").toDouble());

        // Broken Examples, each in a train file of its own folder.
        auto example = [](const char* imageKey, int bytes, int64_t label, int64_t height) {
            tensorflow::Example x;
            auto& m = *x.mutable_features()->mutable_feature();
            m[imageKey].mutable_bytes_list()->add_value(std::string(size_t(bytes), '\x7f'));
            m["label"].mutable_int64_list()->add_value(label);
            if (height > 0) m["height"].mutable_int64_list()->add_value(height);
            return x.SerializeAsString();
        };
        struct Bad {
            const char* name;
            std::string record;
            QString says;
        };
        const QList<Bad> bads = {{"not an Example", std::string("\xff\xff\xff", 3), "record 1 is not a tf.train.Example"},
                                 {"no image", example("pixels", 16, 1, 0), "record 1 has no bytes feature 'image_raw'"},
                                 {"wrong size", example("image_raw", 15, 1, 4), "image_raw holds 15 bytes, not "},
                                 {"negative label", example("image_raw", 16, -3, 0), "label -3 is not a class index"},
                                 {"huge height", example("image_raw", 16, 1, 1 << 20), "is not a plausible size"}};
        for (const Bad& bad : bads) {
            const QString folder = dir_.filePath(QStringLiteral("bad-tf-%1").arg(bad.name).replace(' ', '-'));
            QDir().mkpath(folder);
            {
                TFRecordWriter w((folder + "/train.tfrecords").toStdString());
                w.write(example("image_raw", 16, 0, 4));
                w.write(bad.record);
                TFRecordWriter t((folder + "/test.tfrecords").toStdString());
                t.write(example("image_raw", 16, 0, 4));
            }
            const QString e = errorOf([&] { loadData(("tfrecord:" + folder).toStdString(), 0, 1); });
            QVERIFY2(mentions(e, {folder + "/train.tfrecords", bad.says}), qPrintable(QString(bad.name) + ": " + e));
        }
        QVERIFY(mentions(errorOf([&] { loadData(("tfrecord:" + out).toStdString(), 0, 1, {}, {.tfrecordFeatures = "picture=x"}); }),
                         {"--tfrecord-features: unknown role 'picture'"}));
        QVERIFY(mentions(errorOf([&] { loadData(("tfrecord:" + out).toStdString(), 0, 1, {}, {.tfrecordFeatures = "image=pixels"}); }),
                         {"has no bytes feature 'pixels'"}));
        QVERIFY(mentions(errorOf([&] { loadData(("tfrecord:" + dir_.filePath("nowhere")).toStdString(), 0, 1); }),
                         {"not a folder"}));
    }
#endif

    // Two runs started in the same second get folders of their own (the name is claimed by making
    // the folder), and a run refused before it began leaves none.
    void folderNamesAreClaimed() {
        qputenv("TOWERBENCH_RUNS_DIR", dir_.filePath("claimed").toLocal8Bit());
        const RunConfig c = run("one tower");
        auto a = RunFolder::create(c), b = RunFolder::create(c);
        QVERIFY(a->path() != b->path());
        QVERIFY(QDir(QString::fromStdString(a->path())).exists() && QDir(QString::fromStdString(b->path())).exists());
        a.reset();
        b.reset();
        QCOMPARE(QDir(dir_.filePath("claimed")).entryList(QDir::Dirs | QDir::NoDotAndDotDot).size(), 0);
        qputenv("TOWERBENCH_RUNS_DIR", dir_.filePath("runs").toLocal8Bit());
    }

    // The runs index mirrors the folders: built from them, updated where one changed, rows of
    // removed folders dropped, and rebuilt when the database is garbage or of another schema.
    // The hub drops reports for an observer that falls behind (a window), never for a file: a
    // lossless observer sees every step in order while a slow one sees some, and the count of
    // the rest is dropped(). (Before, one queue dropped steps for every observer, the metrics
    // file's too.)
    void filesNeverMissAStep() {
        struct Counting : TrainingObserver {
            bool keepsAll = false;
            std::chrono::microseconds pause{0};
            std::vector<int64_t> steps;
            void onStepEnd(const StepMetrics& m) override {
                if (pause.count()) std::this_thread::sleep_for(pause);
                steps.push_back(m.step);
            }
            bool lossless() const override { return keepsAll; }
        } file, window;
        file.keepsAll = true;
        window.pause = std::chrono::microseconds(300);
        int64_t dropped = 0;
        {
            ObserverHub hub({&window, &file}, 16);
            for (int64_t s = 1; s <= 3000; ++s) {
                StepMetrics m;
                m.step = s;
                hub.onStepEnd(m);
            }
            hub.flush();
            dropped = hub.dropped();
        }
        QCOMPARE(int64_t(file.steps.size()), int64_t(3000));
        for (size_t i = 0; i < file.steps.size(); ++i) QCOMPARE(file.steps[i], int64_t(i + 1));
        QVERIFY2(dropped > 0 && int64_t(window.steps.size()) + dropped == 3000,
                 qPrintable(QStringLiteral("%1 shown, %2 dropped").arg(window.steps.size()).arg(dropped)));
        QVERIFY(std::is_sorted(window.steps.begin(), window.steps.end()));
    }

    // An unfinished run's steps are its metrics file's last whole step line, read from the file's
    // end: past 64 KiB of device samples after it, with a half-written line last, and at the
    // file's first line.
    void runIndexReadsTheLastStepFromTheEnd() {
        const QString root = dir_.filePath("index-tail");
        RunConfig c = run("one tower");
        c.steps = 12;
        {
            auto f = RunFolder::create(c, (root + "/live").toStdString());
            Trainer t(c);
            t.setRunFolder(f.get());
            t.run();
        }
        QFile::remove(root + "/live/summary.json");  // as if it were still running
        QByteArray metrics = tbtest::readFile(root + "/live/metrics.jsonl");
        for (int i = 0; i < 4000; ++i) metrics += R"({"type":"device","t":1.5,"device":"gpu:0","util":97.0,"memory_used":1234567})" "\n";
        metrics += "{\"type\":\"step\",\"step\":13,\"lo";  // half written: not counted (no raw string: moc counts its brace)
        tbtest::writeFile(root + "/live/metrics.jsonl", metrics);
        QVERIFY(metrics.size() > 4 * 65536);
        QCOMPARE(readRunFolder((root + "/live").toStdString()).steps, int64_t(12));
        tbtest::writeFile(root + "/live/metrics.jsonl", R"({"type":"step","step":3,"loss":1})" "\n");
        QCOMPARE(readRunFolder((root + "/live").toStdString()).steps, int64_t(3));
        // A resumed run training again keeps its earlier segment's summary.json until it ends: its
        // row takes the metrics file's step and no accuracy (it showed the old segment's), until
        // run.json says it ended.
        tbtest::writeFile(root + "/live/summary.json", R"({"steps": 2, "test_accuracy": 0.5, "validation_accuracy": 0.4})");
        tbtest::writeFile(root + "/live/run.json", R"({"format": "towerbench-run", "version": 1, "state": "running"})");
        RunRecord resumed = readRunFolder((root + "/live").toStdString());
        QCOMPARE(resumed.steps, int64_t(3));
        QCOMPARE(resumed.testAccuracy, -1.0);
        QCOMPARE(resumed.validationAccuracy, -1.0);
        tbtest::writeFile(root + "/live/run.json", R"({"format": "towerbench-run", "version": 1, "state": "stopped"})");
        resumed = readRunFolder((root + "/live").toStdString());
        QCOMPARE(resumed.steps, int64_t(2));
        QCOMPARE(resumed.testAccuracy, 0.5);
    }

    // A run's plan in the runs list says what it trained as: a pipeline's stages, replicas and
    // schedule (not "1 tower", its plan's towers field), and its processes, which the index keeps
    // (the window resumes a run as the processes it trained as). A count no run has is one.
    void runIndexSaysStagesAndProcesses() {
        const QString root = dir_.filePath("index-plans");
        const auto folder = [&](const QString& name, const QByteArray& plan) {
            QVERIFY(QDir().mkpath(root + "/" + name));
            tbtest::writeFile(root + "/" + name + "/run.json", R"({"format": "towerbench-run", "version": 1, "state": "finished"})");
            tbtest::writeFile(root + "/" + name + "/plan.json", plan);
        };
        folder("grid", R"({"stages": "cpu:0=flatten0..hidden1,cpu:1=relu2..logits", "stage_replicas": 2, "pipeline": "1f1b",
                           "stage_per_process": true, "processes": 4, "towers": ["cpu:0"], "variables": "cpu"})");
        folder("hybrid", R"({"stages": "cpu:0=0..3,cpu:1=4..5,cpu:2=6..7", "pipeline": "gpipe", "processes": 2, "towers": ["cpu:0"]})");
        folder("towers", R"({"towers": ["cpu:0", "cpu:1"], "variables": "cpu", "update": "sync", "processes": 3})");
        folder("servers", R"({"towers": ["cpu:0"], "variables": "cpu", "update": "async", "processes": 3, "ps_tasks": 1})");
        folder("one", R"({"stages": "cpu:0=0..7", "stage_replicas": 1.5, "stage_per_process": true, "processes": 2.7, "towers": ["cpu:0"]})");
        folder("garbled", R"({"towers": ["cpu:0"], "variables": "cpu", "processes": 1e300, "ps_tasks": -4})");
        const std::map<std::string, std::pair<std::string, int>> expected = {
            {"grid", {"2 stages x 2 replicas, 1f1b, a process per stage and replica", 4}},
            {"hybrid", {"3 stages, gpipe, in each of 2 processes", 2}},
            {"towers", {"2 towers in each of 3 processes, variables cpu, sync", 3}},
            {"servers", {"1 tower in each of 2 processes, variables cpu, async, 1 parameter-server process", 3}},
            {"one", {"1 stage, naive", 1}},
            {"garbled", {"1 tower, variables cpu, sync", 1}}};
        RunIndex index(root.toStdString());
        const std::vector<RunRecord> all = index.list();
        QCOMPARE(all.size(), expected.size());
        for (const RunRecord& r : all) {
            const auto& [plan, processes] = expected.at(r.name);
            QVERIFY2(r.plan == plan && r.processes == processes, (r.name + ": " + r.plan + ", " + std::to_string(r.processes)).c_str());
            QVERIFY(r == readRunFolder(r.path));  // the index holds what the folder says
        }
    }

    // The model view's times from a finished run: the last profiled step's, read from the end of
    // its metrics file past lines of other kinds, a half-written one left out; none beyond the
    // limit.
    void layerTimesReadFromTheEnd() {
        const QString root = dir_.filePath("layer-tail");
        RunConfig c = run("one tower");
        c.steps = 12;  // profiled at step 5 (TowerSet::kProfileFirst counts from 0)
        {
            auto f = RunFolder::create(c, (root + "/run").toStdString());
            Trainer t(c);
            t.setRunFolder(f.get());
            t.run();
        }
        QByteArray metrics = tbtest::readFile(root + "/run/metrics.jsonl");
        for (int i = 0; i < 4000; ++i) metrics += R"({"type":"device","t":1.5,"device":"gpu:0","util":97.0,"memory_used":1234567})" "\n";
        metrics += "{\"type\":\"layer_times\",\"step\":250,\"forward_ms\":[1,";  // half written
        QVERIFY(metrics.size() > 4 * 65536);
        std::istringstream in(metrics.toStdString());
        MetricsLine m;
        QVERIFY(lastLayerTimes(in, m));
        QCOMPARE(m.step.step, int64_t(5));
        QCOMPARE(m.layers.forward.size(), tb::findModel(c.model).layers.size());
        std::istringstream near(metrics.toStdString());
        QVERIFY(!lastLayerTimes(near, m, 65536));  // the profiled step is further back than that
    }

    void runIndexFollowsTheFolders() {
        const QString root = dir_.filePath("index-root");
        auto train = [&](const QString& name, const char* data, int64_t steps) {
            RunConfig c = run("one tower");
            c.data = data;
            c.steps = steps;
            auto f = RunFolder::create(c, (root + "/" + name).toStdString());
            Trainer t(c);
            t.setRunFolder(f.get());
            return t.run();
        };
        const RunSummary a = train("a", "synthetic:blobs", 20);
        train("b", "synthetic:spirals", 30);
        {
            RunIndex index(root.toStdString());
            const std::vector<RunRecord> all = index.list({}, "steps", true);
            QCOMPARE(int(all.size()), 2);
            QCOMPARE(all[0].name, std::string("a"));
            QCOMPARE(all[0].steps, int64_t(20));
            QCOMPARE(all[0].testAccuracy, a.testAccuracy);
            QCOMPARE(all[0].state, std::string("finished"));
            QCOMPARE(all[0].model, std::string("dropnet"));
            QCOMPARE(all[0].plan, std::string("1 tower, variables cpu, sync"));
            QCOMPARE(int(index.list("spirals").size()), 1);
            QVERIFY(mentions(errorOf([&] { index.list({}, "drop table"); }), {"--sort: unknown column"}));
        }
        // b resumed to 40 steps; a removed; c added.
        {
            auto f = RunFolder::reopen((root + "/b").toStdString());
            RunConfig c = RunFolder::resumeConfig((root + "/b").toStdString());
            c.steps = 40;
            Trainer t(c);
            t.setRunFolder(f.get());
            t.run();
        }
        QVERIFY(QDir(root + "/a").removeRecursively());
        train("c", "synthetic:blobs", 10);
        RunIndex index(root.toStdString());
        QVERIFY(!index.rebuilt());
        std::vector<RunRecord> all = index.list({}, "name", true);
        QCOMPARE(int(all.size()), 2);
        QCOMPARE(all[0].name, std::string("b"));
        QCOMPARE(all[0].steps, int64_t(40));
        QCOMPARE(all[0].model, std::string("dropnet"));  // its config names model.json since the resume

        // Garbage where the database was: rebuilt from the folders, same rows.
        tbtest::writeFile(root + "/index.sqlite", QByteArray(4096, 'z'));
        RunIndex again(root.toStdString());
        QVERIFY(again.rebuilt());
        QCOMPARE(int(again.list().size()), 2);

        // A database of this schema version whose table another program changed: rebuilt too (it
        // failed every refresh with "no such column", and the throwing constructor leaked it).
        sqlite3* db = nullptr;
        QCOMPARE(sqlite3_open((root + "/index.sqlite").toUtf8().constData(), &db), SQLITE_OK);
        QCOMPARE(sqlite3_exec(db, "DROP TABLE runs; CREATE TABLE runs (path TEXT)", nullptr, nullptr, nullptr), SQLITE_OK);
        sqlite3_close(db);
        RunIndex healed(root.toStdString());
        QVERIFY(healed.rebuilt());
        QCOMPARE(int(healed.list().size()), 2);

        // A folder left "running" by a process of this machine that is gone (killed, or ended by
        // another process of its run) is listed as interrupted, asked at each listing; one whose
        // process lives is running.
        QProcess gone;
        gone.start("true", {});
        QVERIFY(gone.waitForFinished(5000));
        const auto record = [&](const QString& name, int64_t pid) {
            QVERIFY(QDir().mkpath(root + "/" + name));
            tbtest::writeFile(root + "/" + name + "/run.json",
                              QByteArray::fromStdString(nlohmann::json{{"state", "running"},
                                                                       {"host", tb::hostName()},
                                                                       {"pid", pid},
                                                                       {"created", "2026-11-29T00:00:00Z"}}
                                                            .dump()));
        };
        record("killed", gone.processId());
        record("live", int64_t(QCoreApplication::applicationPid()));
        const RunLock held((root + "/live").toStdString(), "test");  // its trainer's lock, held
        RunIndex listing(root.toStdString());
        std::map<std::string, std::string> states;
        for (const RunRecord& r : listing.list()) states[r.name] = r.state;
        QCOMPARE(states["killed"], std::string("interrupted"));
        QCOMPARE(states["live"], std::string("running"));

        // A failed run is listed with its one sentence (the window's tooltip, the command line's
        // line under the row); an index of the first schema, which had no room for it, is rebuilt.
        {
            RunConfig c = run("one tower");
            c.model = "mlp";  // (1, 28, 28) against the blobs' 2-D points
            auto f = RunFolder::create(c, (root + "/failed").toStdString());
            Trainer t(c);
            t.setRunFolder(f.get());
            QVERIFY(errorOf([&] { t.run(); }).contains("expects input"));
        }
        QCOMPARE(sqlite3_open((root + "/index.sqlite").toUtf8().constData(), &db), SQLITE_OK);
        QCOMPARE(sqlite3_exec(db, "PRAGMA user_version = 1", nullptr, nullptr, nullptr), SQLITE_OK);
        sqlite3_close(db);
        RunIndex withErrors(root.toStdString());
        QVERIFY(withErrors.rebuilt());
        std::map<std::string, RunRecord> byName;
        for (const RunRecord& r : withErrors.list()) byName[r.name] = r;
        QCOMPARE(byName["failed"].state, std::string("failed"));
        QCOMPARE(byName["failed"].error,
                 std::string("--model: mlp expects input (1, 28, 28) but --data synthetic:spirals gives (2, 1, 1)"));
        QCOMPARE(byName["b"].error, std::string());
    }

    // The command line: a run's folder, its summary's run_dir, --resume with more steps, eval,
    // and the refusals of each in one line.
    void commandLine() {
        const QString folder = dir_.filePath("cli");
        const QStringList base = {"--model", model_, "--data", "synthetic:blobs", "--steps", "30", "--batch", "32",
                                  "--threads", "2", "--quiet", "--checkpoint-every", "10"};
        tbtest::RunResult r = tbtest::runTowerbench(base + QStringList{"--run-dir", folder});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QJsonObject s = QJsonDocument::fromJson(r.out.trimmed().section('\n', -1).toUtf8()).object();
        QCOMPARE(s.value("run_dir").toString(), folder);
        // Steps 10, 20, 30, and 30 again as best.safetensors: the final validation is the first.
        QCOMPARE(s.value("checkpoints").toInt(), 4);
        QVERIFY(QFile::exists(folder + "/checkpoints/best.safetensors"));
        for (const char* f : {"run.json", "config.json", "model.json", "plan.json", "metrics.jsonl", "log.txt",
                              "summary.json", "checkpoints/step-00000030.safetensors"})
            QVERIFY2(QFile::exists(folder + "/" + f), f);

        r = tbtest::runTowerbench({"--resume", folder, "--steps", "45", "--quiet"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QJsonObject t = QJsonDocument::fromJson(r.out.trimmed().section('\n', -1).toUtf8()).object();
        QCOMPARE(t.value("resumed_at").toInt(), 30);
        QCOMPARE(t.value("steps").toInt(), 45);
        // The log says each run's end once (it said "finished" twice: the state, then the folder).
        const QStringList log = QString::fromUtf8(tbtest::readFile(folder + "/log.txt")).split('\n', Qt::SkipEmptyParts);
        QCOMPARE(log.filter(QRegularExpression(QStringLiteral("Z finished$"))).size(), 2);

        r = tbtest::runTowerbench({"eval", folder});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QJsonObject e = QJsonDocument::fromJson(r.out.trimmed().toUtf8()).object();
        QCOMPARE(e.value("step").toInt(), 45);
        QCOMPARE(e.value("data").toString(), QStringLiteral("synthetic:blobs"));
        QCOMPARE(e.value("test_accuracy").toDouble(), t.value("test_accuracy").toDouble());

        const QString foreign = dir_.filePath("foreign.safetensors");  // a valid file, not ours
        tbtest::writeFile(foreign, rawFile(R"({"__metadata__": {"format": "pt"}})", {}));
        struct Refusal {
            QStringList args;
            QString says;
        };
        const QList<Refusal> refusals = {
            {{"--resume", dir_.filePath("nowhere")}, "is not a folder"},
            {{"--resume", folder, "--config", model_}, "--config: a resumed run keeps its own settings"},
            {{"--resume", folder, "--lr", "0.9"}, "--resume: --lr is 0.9"},
            {{"--resume", folder, "--run-dir", folder}, "--run-dir: a resumed run stays in its own folder"},
            {base + QStringList{"--run-dir", folder}, "already holds a run"},
            {{"eval", foreign}, "not a Towerbench checkpoint"},
            {{"eval"}, "eval: needs a run folder or a checkpoint file"},
            {{"--steps", "5", "--init-from", dir_.filePath("nothing.safetensors")}, "nothing.safetensors: cannot open"},
        };
        for (const Refusal& x : refusals) {
            r = tbtest::runTowerbench(x.args);
            QVERIFY2(r.exitCode == 2 && r.err.contains(x.says) && r.err.count('\n') == 1,
                     qPrintable(x.args.join(' ') + " -> " + QString::number(r.exitCode) + ": " + r.err));
        }
        // A run that a live process is still training is not resumed beside it: that process holds
        // the folder's lock (here, this test), whatever run.json says.
        {
            const RunLock held(folder.toStdString(), "test");
            r = tbtest::runTowerbench({"--resume", folder, "--steps", "50"});
            QVERIFY2(r.exitCode == 2 && r.err.contains("is being trained by process " + QString::number(QCoreApplication::applicationPid())),
                     qPrintable(r.err));
        }
        // Another host's fresh lease holds it too (a shared folder, where flocks may not reach);
        // a stale one does not.
        const auto lease = [&](int64_t ago) {
            const int64_t now = QDateTime::currentSecsSinceEpoch();
            tbtest::writeFile(folder + "/lease.json",
                              QByteArray(R"({"host":"elsewhere","pid":77,"renewed":)") + QByteArray::number(now - ago) + "}");
        };
        lease(3);
        r = tbtest::runTowerbench({"--resume", folder, "--steps", "50"});
        QVERIFY2(r.exitCode == 2 && r.err.contains("process 77 on host elsewhere") && r.err.contains("stale after 30 s"),
                 qPrintable(r.err));
        lease(kLeaseStaleSeconds + 5);
        r = tbtest::runTowerbench({"--resume", folder, "--steps", "50", "--quiet"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    }

    // A trainer killed and not yet reaped (a zombie still answers kill(pid, 0); in a container
    // without an init it may never be reaped): its lock went with it, and the run resumes at once.
    // (Asked by pid, as before the lock, the resume was refused: "still being trained".)
    void resumeRightAfterACrash() {
        RunConfig c = run("one tower");
        c.steps = 20;
        const QString folder = dir_.filePath("zombie");
        trainInFolder(c, folder);
        // The "trainer": takes the folder's flock as RunLock does, says in run.json that it is
        // running, and dies without a word (only system calls after fork: this process has threads).
        const QByteArray lockPath = (folder + "/.lock").toLocal8Bit(), runPath = (folder + "/run.json").toLocal8Bit();
        QJsonObject record = QJsonDocument::fromJson(tbtest::readFile(folder + "/run.json")).object();
        record["state"] = "running";
        const pid_t child = ::fork();
        if (child == 0) {
            const int lock = ::open(lockPath.constData(), O_RDWR | O_CREAT, 0644);
            if (lock < 0 || ::flock(lock, LOCK_EX) != 0) ::_exit(1);
            char text[64];
            const int n = std::snprintf(text, sizeof text, "{\"state\":\"running\",\"pid\":%d}", int(::getpid()));
            const int run = ::open(runPath.constData(), O_WRONLY | O_TRUNC);
            if (run < 0 || ::write(run, text, size_t(n)) != n) ::_exit(1);
            ::close(run);
            ::_exit(0);
        }
        QVERIFY(child > 0);
        QTRY_VERIFY_WITH_TIMEOUT(QJsonDocument::fromJson(tbtest::readFile(folder + "/run.json")).object().value("pid").toInt() == child,
                                 5000);
        record["pid"] = int(child);  // the whole record back, as the trainer wrote it
        tbtest::writeFile(folder + "/run.json", QJsonDocument(record).toJson());
        QTest::qWait(200);  // dead, unreaped
        QCOMPARE(::kill(child, 0), 0);  // a pid says it lives
        QVERIFY(!RunFolder::trainer(folder.toStdString()));
        QVERIFY(interrupted(folder.toStdString()));
        QCOMPARE(resumeInFolder(folder, 30).steps, int64_t(30));
        ::waitpid(child, nullptr, 0);
    }

    // A resume reads its checkpoint's bytes once (and verifies them once): what needs only the
    // step, or whether a file is a checkpoint, reads the header (Checkpoint::readMeta). Before, the
    // search for the newest, the resume and the folder's metrics each read all of it: 4 checkpoints'
    // bytes with best.safetensors, which a start reads whole (a damaged best is replaced by the
    // next evaluation), where 2 are read now.
    void aResumeReadsItsCheckpointOnce() {
        const QString wide = dir_.filePath("wide_once.json");
        tbtest::writeFile(wide, R"({"name": "wide", "input": [2, 1, 1], "layers": [
            {"type": "dense", "units": 1536}, {"type": "relu"}, {"type": "dense", "units": 1536}, {"type": "relu"},
            {"type": "dense", "units": 4}]})");
        RunConfig c = run("");
        c.model = wide.toStdString();
        c.data = "synthetic:blobs";
        c.steps = 2;
        c.checkpointEvery = 1;
        const QString folderPath = dir_.filePath("read_once");
        trainInFolder(c, folderPath);
        const qint64 bytes = QFileInfo(folderPath + "/checkpoints/step-00000002.safetensors").size();
        QVERIFY(bytes > 4'000'000);
        auto readSoFar = [] {  // bytes this process has read from files (and pipes) so far
            QFile io(QStringLiteral("/proc/self/io"));
            if (!io.open(QIODevice::ReadOnly)) return qint64(-1);
            for (const QByteArray& line : io.readAll().split('\n'))
                if (line.startsWith("rchar:")) return line.mid(6).trimmed().toLongLong();
            return qint64(-1);
        };
        const qint64 before = readSoFar();
        if (before < 0) QSKIP("this kernel keeps no I/O accounting (/proc/self/io)");
        QCOMPARE(resumeInFolder(folderPath, 3).resumedAt, int64_t(2));
        const qint64 read = readSoFar() - before;
        QVERIFY(QFile::exists(folderPath + "/checkpoints/best.safetensors"));
        QVERIFY2(read >= 2 * bytes && read < bytes * 5 / 2,
                 qPrintable(QStringLiteral("read %1 bytes for a checkpoint of %2").arg(read).arg(bytes)));
    }

    // 100 kill -9 at random instants of runs that checkpoint every step (a 19 MB checkpoint, so
    // many kills land mid-write); each time the run is resumed from its newest checkpoint, which
    // must load, and every checkpoint left in its folder must load. Two runs, each in its own
    // folder, are killed 50 times each side by side: each runs on one core, the test mostly waits.
    // Under ASan 10 times each: a killed run reports nothing, and what ASan checks (the resume,
    // the reads of what a kill left) is the same in every round; each round there costs twice
    // the Release build's, and the statistics are the Release build's to gather.
    void killNineNeverLeavesATornCheckpoint() {
#if defined(__SANITIZE_ADDRESS__)
        constexpr int kRounds = 10;
#else
        constexpr int kRounds = 50;
#endif
        const QString wide = dir_.filePath("wide.json");
        tbtest::writeFile(wide, R"({"name": "wide", "input": [2, 1, 1], "layers": [
            {"type": "dense", "units": 1536}, {"type": "relu"}, {"type": "dense", "units": 1536}, {"type": "relu"},
            {"type": "dense", "units": 4}]})");
        using Clock = std::chrono::steady_clock;
        struct Lane {
            QString folder;
            std::mt19937 rng;    // this lane's kill instants, whatever the other lane does
            std::string before;  // the newest checkpoint when this run started
            std::unique_ptr<QProcess> run;
            Clock::time_point killAt{};
            bool early = false;  // killed at a blind instant of its start (maybe mid-resume)
            int64_t lastStep = 0;
        };
        Lane lanes[2];
        for (int l = 0; l < 2; ++l) {
            lanes[l].folder = dir_.filePath(QStringLiteral("killed%1").arg(l));
            lanes[l].rng.seed(20261126 + l);
        }
        int kills = 0, midWrite = 0, resumed = 0, early = 0;
        for (int round = 0; round < kRounds; ++round) {
            for (Lane& lane : lanes) {
                lane.before = RunFolder::newestCheckpointIn(lane.folder.toStdString());
                const QStringList args = !QFile::exists(lane.folder + "/run.json")
                                             ? QStringList{"--model", wide, "--data", "synthetic:blobs", "--steps",
                                                           "1000000", "--batch", "32", "--threads", "1",
                                                           "--checkpoint-every", "1", "--keep-checkpoints", "2",
                                                           "--quiet", "--run-dir", lane.folder}
                                             : QStringList{"--resume", lane.folder, "--quiet"};
                resumed += int(!lane.before.empty());
                // One kill in five at a blind instant of the first 400 ms (the resume: reading the
                // checkpoint, rewriting the metrics, clearing a killed writer's leftovers); the
                // others within 300 ms of the run's first checkpoint of its own, when the start is
                // behind it and it writes a checkpoint every step, so the instant falls in a write
                // or between two as their times have it.
                lane.early = !lane.before.empty() && lane.rng() % 5 == 0;
                lane.killAt = lane.early ? Clock::now() + std::chrono::milliseconds(lane.rng() % 400) : Clock::time_point{};
                early += int(lane.early);
                lane.run = std::make_unique<QProcess>();
                lane.run->start(QStringLiteral(TB_RUN_BINARY), args);
                QVERIFY(lane.run->waitForStarted());
            }
            const auto deadline = Clock::now() + std::chrono::seconds(20);
            for (int live = 2; live > 0;) {
                QVERIFY2(Clock::now() < deadline, "a run wrote no checkpoint in 20 s");
                for (Lane& lane : lanes) {
                    if (!lane.run) continue;
                    QVERIFY2(!lane.run->waitForFinished(3),  // a run must not end before its kill
                             qPrintable(QStringLiteral("run in %1 ended: %2").arg(lane.folder,
                                                                                  lane.run->readAllStandardError())));
                    const auto now = Clock::now();
                    if (lane.killAt == Clock::time_point{} &&
                        RunFolder::newestCheckpointIn(lane.folder.toStdString()) != lane.before)
                        lane.killAt = now + std::chrono::milliseconds(lane.rng() % 300);
                    if (lane.killAt == Clock::time_point{} || now < lane.killAt) continue;
                    lane.run->kill();  // SIGKILL
                    QVERIFY(lane.run->waitForFinished());
                    lane.run.reset();
                    --live;
                }
            }
            for (Lane& lane : lanes) {
                ++kills;
                const QString checkpoints = lane.folder + "/checkpoints/";
                const QStringList temps = QDir(checkpoints).entryList({"*.tmp.*"});
                midWrite += int(!temps.isEmpty());
                for (const QString& t : temps) QFile::remove(checkpoints + t);  // a killed writer's leftovers
                for (const QString& f : QDir(checkpoints).entryList({"*.safetensors"})) {
                    const QString e = errorOf([&] { Checkpoint::open((checkpoints + f).toStdString()); });
                    QVERIFY2(e == "<no exception>", qPrintable(QStringLiteral("after kill %1: %2").arg(kills).arg(e)));
                }
                const std::string newest = RunFolder::newestCheckpointIn(lane.folder.toStdString());
                QVERIFY2(!newest.empty(), qPrintable(QStringLiteral("after kill %1").arg(kills)));
                const int64_t step = Checkpoint::readMeta(newest).step;
                // A run killed after its first checkpoint of its own has moved the newest on.
                QVERIFY2(lane.early ? step >= lane.lastStep : step > lane.lastStep,
                         qPrintable(QStringLiteral("after kill %1: newest checkpoint at step %2, was %3")
                                        .arg(kills).arg(step).arg(lane.lastStep)));
                lane.lastStep = step;
            }
        }
        qInfo("%d kills (%d early): %d landed while a checkpoint was being written, %d resumed; newest checkpoints "
              "at steps %lld and %lld", kills, early, midWrite, resumed, static_cast<long long>(lanes[0].lastStep),
              static_cast<long long>(lanes[1].lastStep));
        QCOMPARE(kills, 2 * kRounds);
        QCOMPARE(resumed, 2 * kRounds - 2);  // each folder's first run creates it
        QVERIFY(midWrite > 0);  // the test reached the moment it is about
    }
};

QTEST_MAIN(CheckpointTest)
#include "tst_checkpoint.moc"
