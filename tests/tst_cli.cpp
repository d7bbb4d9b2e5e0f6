// Tests of towerbench-run, the headless program, driven as a user would through QProcess:
// every kind of bad input ends with exit status 2 and exactly one line on stderr naming the
// flag or file at fault; good runs print a JSON summary as the last line of stdout, honour
// config files and flag overrides, write JSON-lines metrics, count steps from epochs after the
// validation split, and reach stated accuracies on the shipped Fashion-MNIST slice.
#include <signal.h>
#include <sys/resource.h>
#include <zlib.h>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "backend/backend.hpp"
#include "stop_signals.hpp"
#include "test_support.hpp"

namespace {

using tbtest::be32;
using tbtest::writeFile;
using tbtest::writeGz;

const QString kRunFailed = QStringLiteral("towerbench-run: ");

QString slice() { return tbtest::sourcePath(QStringLiteral("samples/fashion-mnist-slice")); }


// IDX files: magic, counts (big-endian), then `count` samples of zero bytes.
QByteArray idxImages(uint32_t n, uint32_t count, uint32_t magic = 0x00000803, uint32_t side = 28) {
    return be32(magic) + be32(n) + be32(side) + be32(side) + QByteArray(qsizetype(count * side * side), '\0');
}
QByteArray idxLabels(uint32_t n, uint32_t count, char label = 1) {
    return be32(0x00000801) + be32(n) + QByteArray(qsizetype(count), label);
}



// An IDX folder with the given training images and labels and a valid 10-sample test set.
void writeIdxDir(const QString& dir, const QByteArray& trainImages, const QByteArray& trainLabels, bool gzImages = false) {
    QVERIFY(QDir().mkpath(dir));
    if (gzImages) writeGz(dir + "/train-images-idx3-ubyte.gz", trainImages);
    else writeFile(dir + "/train-images-idx3-ubyte", trainImages);
    writeFile(dir + "/train-labels-idx1-ubyte", trainLabels);
    writeFile(dir + "/t10k-images-idx3-ubyte", idxImages(10, 10));
    writeFile(dir + "/t10k-labels-idx1-ubyte", idxLabels(10, 10));
}

QStringList linesOf(const QString& text) { return text.split('\n', Qt::SkipEmptyParts); }

// The last line of stdout as a JSON object (empty when it is not one).
QJsonObject summaryOf(const tbtest::RunResult& r) {
    const QStringList lines = linesOf(r.out);
    if (lines.isEmpty()) return {};
    QJsonParseError e;
    const QJsonDocument doc = QJsonDocument::fromJson(lines.last().toUtf8(), &e);
    return doc.isObject() ? doc.object() : QJsonObject();
}

QString describe(const tbtest::RunResult& r) {
    return QStringLiteral("exit %1\n--- stderr:\n%2--- stdout (last 400):\n%3").arg(r.exitCode).arg(r.err, r.out.right(400));
}

// Runs towerbench-run with its address space limited to `bytes` (setrlimit in the child), so an
// allocation sized by a lying header fails instead of quietly reserving virtual memory.
// Under AddressSanitizer (make asan), which reserves terabytes of address space for its shadow,
// its allocator's own limit on one allocation stands in for the address-space limit.
tbtest::RunResult runWithAddressLimit(const QStringList& args, rlim_t bytes, int timeoutMs = 30000) {
    QProcess p;
#if defined(__SANITIZE_ADDRESS__)
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("ASAN_OPTIONS", env.value("ASAN_OPTIONS") + QStringLiteral(":allocator_may_return_null=1:max_allocation_size_mb=%1")
                                                              .arg(qulonglong(bytes >> 20)));
    p.setProcessEnvironment(env);
#else
    p.setChildProcessModifier([bytes] {
        const rlimit limit{bytes, bytes};
        setrlimit(RLIMIT_AS, &limit);
    });
#endif
    p.start(QStringLiteral(TB_RUN_BINARY), args);
    tbtest::RunResult r;
    if (!p.waitForFinished(timeoutMs)) {
        p.kill();
        p.waitForFinished();
        r.err = QStringLiteral("timed out");
        return r;
    }
    r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
    r.out = QString::fromUtf8(p.readAllStandardOutput());
    r.err = QString::fromUtf8(p.readAllStandardError());
    return r;
}

// Exit 2 (not a crash, not a hang), nothing on stdout, and exactly one stderr line that
// mentions every part.
void expectOneLineError(const tbtest::RunResult& r, const QStringList& parts) {
    QVERIFY2(r.err != QStringLiteral("timed out"), "timed out");
    QVERIFY2(r.exitCode != -2, qPrintable("crashed\n" + describe(r)));
    QVERIFY2(r.exitCode == 2, qPrintable(describe(r)));
    QVERIFY2(r.out.isEmpty(), qPrintable(describe(r)));
    for (const QString& part : parts)
        QVERIFY2(r.err.contains(part), qPrintable("expected '" + part + "' in stderr\n" + describe(r)));
    const QStringList lines = linesOf(r.err);
    QVERIFY2(lines.size() == 1 && r.err.endsWith('\n') && lines[0].startsWith(kRunFailed),
             qPrintable(QStringLiteral("expected exactly one stderr line, got %1\n").arg(lines.size()) + describe(r)));
}

}  // namespace

class TestCli : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    // bad input
    void badInput_data();
    void badInput();
    void hugeHeadersNeedNoMemory();
    void writeErrorsEndTheRun();
    void refusedRunLeavesMetricsFileAlone();
    void fullDiskEndsTheRun();
    void signalStopsAfterTheStep_data();
    void signalStopsAfterTheStep();
    void secondSignalEndsAtOnce();
    void signalWatcherEndsAtOnce();
    void windowStopsOnSignal();
    void valueMissingBeforeNextFlag_data();
    void valueMissingBeforeNextFlag();
    void outOfRangeIntegers_data();
    void outOfRangeIntegers();
    // good runs
    void help();
    void cpuRunLoadsNoCudaLibrary();
    void summaryIsLastLine();
    void configFileAndFlagOverride();
    void metricsFile();
    void epochsCountStepsAfterValidation();
    void syntheticHoldsOutTenPercent();
    void mlpReachesAccuracy();
    void mnistCnnReachesAccuracy();
    void bf16TrainsLikeFp32();

private:
    QTemporaryDir tmp_;
};

void TestCli::initTestCase() {
    QVERIFY(tmp_.isValid());
    QVERIFY2(QFile::exists(QStringLiteral(TB_RUN_BINARY)), TB_RUN_BINARY);
    QVERIFY2(QFile::exists(slice() + "/train-images-idx3-ubyte.gz"), qPrintable(slice()));
    const QString t = tmp_.path();
    writeFile(t + "/unknown_layer.json",
              R"({"name": "bad", "input": [1, 28, 28], "layers": [{"type": "conv3d", "filters": 4, "kernel": 3}]})");
    writeFile(t + "/negative_per_tower.json", R"({"batch_per_tower": -3})");
    writeFile(t + "/misspelt.json", R"({"optimiser": "adam"})");
    writeFile(t + "/bad_line2.json", "{\"batch\": 32,\n \"lr\": x}");
    writeFile(t + "/huge_number.json", R"({"lr": 1e999})");
    writeFile(t + "/huge_config.json", "{\"batch\": 32" + QByteArray(2 << 20, ' ') + "}");
    writeFile(t + "/huge_model.json", "{\"layers\": []" + QByteArray(5 << 20, ' ') + "}");
    QVERIFY(QDir().mkpath(t + "/cifar"));
    writeFile(t + "/cifar/data_batch_1.bin", QByteArray(1000, '\0'));  // not a multiple of 3073
    writeIdxDir(t + "/truncated", idxImages(100, 10), idxLabels(100, 100));
    writeIdxDir(t + "/hugegz", idxImages(0x80000000u, 10), idxLabels(100, 100), true);
    writeIdxDir(t + "/mismatch", idxImages(100, 100), idxLabels(90, 90));
    writeIdxDir(t + "/magic", idxImages(100, 100, 0x00000801), idxLabels(100, 100));
    // Test images larger than the training images (once a heap overflow in evaluation), and
    // test labels beyond the model's 10 outputs.
    writeIdxDir(t + "/testshape", idxImages(100, 100), idxLabels(100, 100));
    writeFile(t + "/testshape/t10k-images-idx3-ubyte", idxImages(10, 10, 0x00000803, 32));
    writeIdxDir(t + "/testlabels", idxImages(100, 100), idxLabels(100, 100));
    writeFile(t + "/testlabels/t10k-labels-idx1-ubyte", idxLabels(10, 10, 12));
    writeFile(t + "/no_params.json", R"({"name": "no_params", "input": [1, 28, 28], "layers": [{"type": "flatten"}]})");
    writeFile(t + "/malformed.json", R"({"batch": 32,)");
    writeFile(t + "/unknown_key.json", R"({"batchsize": 32})");
    writeFile(t + "/wrong_type.json", R"({"batch": "big"})");
    writeFile(t + "/keep_config.json", R"({"model": "tiny_mlp", "data": "synthetic:blobs", "steps": 1})");
    // 10^6 filters of 5x5 over 28x28: about 160 GiB of activations and variables.
    writeFile(t + "/too_big.json", R"({"name": "too_big", "input": [1, 28, 28], "layers": [
        {"type": "conv2d", "filters": 1000000, "kernel": 5}, {"type": "flatten"}, {"type": "dense", "units": 10}]})");
}

// ---------------------------------------------------------------- bad input

void TestCli::badInput_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QStringList>("expect");
    const QString t = tmp_.path();
    // Where a mistake might let training start, it would be a tiny one.
    const QStringList tiny = {"--model", "tiny_mlp", "--data", "synthetic:blobs", "--steps", "1"};
    QTest::newRow("unknown flag") << QStringList{"--frobnicate"}
                                  << QStringList{"'--frobnicate'", "unknown argument", "(see --help)"};
    QTest::newRow("mistyped flag") << QStringList{"--bacth", "64"}
                                   << QStringList{"unknown argument '--bacth' (did you mean '--batch'?)"};
    QTest::newRow("mistyped model") << QStringList{"--model", "mnsit_cnn"}
                                    << QStringList{"--model: no model named 'mnsit_cnn' (did you mean 'mnist_cnn'?); "
                                                   "looked for mnsit_cnn.json in"};
    QTest::newRow("flag without value") << QStringList{"--batch"} << QStringList{"--batch", "needs a value"};
    QTest::newRow("precision fp16") << QStringList{"--precision", "fp16"}
                                    << QStringList{"--precision", "'fp16'", "not fp32 or bf16"};
    QTest::newRow("comm precision fp8") << QStringList{"--comm-precision", "fp8"}
                                        << QStringList{"--comm-precision", "'fp8'", "not fp32 or bf16"};
    QTest::newRow("bf16 gradients while averaging")
        << QStringList{"--comm-precision", "bf16", "--towers", "cpu:0,cpu:1", "--variables", "replicated", "--reduce",
                       "allreduce", "--average-every", "3"}
        << QStringList{"--comm-precision bf16", "averaging every K steps exchanges the variables"};
    QTest::newRow("batch abc") << QStringList{"--batch", "abc"} << QStringList{"--batch", "expected an integer", "'abc'"};
    QTest::newRow("batch 0") << QStringList{"--batch", "0"} << QStringList{"--batch", "between 1 and 65536", "got 0"};
    QTest::newRow("batch-per-tower 0") << QStringList{"--batch-per-tower", "0"}
                                       << QStringList{"--batch-per-tower", "between 1 and 65536", "got 0"};
    QTest::newRow("batch-per-tower -3") << QStringList{"--batch-per-tower", "-3"}
                                        << QStringList{"--batch-per-tower", "between 1 and 65536", "got -3"};
    QTest::newRow("batch-per-tower 70000") << QStringList{"--batch-per-tower", "70000"}
                                           << QStringList{"--batch-per-tower", "between 1 and 65536", "got 70000"};
    QTest::newRow("batch-per-tower over the limit together")
        << (tiny + QStringList{"--towers", "cpu:0,cpu:1,cpu:2,cpu:3", "--batch-per-tower", "20000"})
        << QStringList{"--batch-per-tower", "20000 examples on each of 4 towers are 80000 at once", "limit of 65536"};
    QTest::newRow("batch_per_tower -3 in a config")
        << QStringList{"--config", t + "/negative_per_tower.json"}
        << QStringList{t + "/negative_per_tower.json", "'batch_per_tower' must be between 1 and 65536", "got -3"};
    QTest::newRow("steps -5") << QStringList{"--steps", "-5"} << QStringList{"--steps: must not be negative, got -5"};
    QTest::newRow("optimizer rmsprop") << QStringList{"--optimizer", "rmsprop"}
                                       << QStringList{"--optimizer", "unknown optimizer 'rmsprop'"};
    QTest::newRow("lr -1") << QStringList{"--lr", "-1"} << QStringList{"--lr: must be above 0 and below 1000, got -1"};
    // Positive, and still refused: the message says the bound it broke (it said "must be positive").
    QTest::newRow("lr 5000") << QStringList{"--lr", "5000"} << QStringList{"--lr: must be above 0 and below 1000, got 5000"};
    QTest::newRow("model no_such_model") << QStringList{"--model", "no_such_model"}
                                         << QStringList{"--model", "no model named 'no_such_model'",
                                                        tbtest::sourcePath("resources/models")};
    QTest::newRow("model missing file") << QStringList{"--model", "/nonexistent/x.json"}
                                        << QStringList{"/nonexistent/x.json", "cannot open model file"};
    QTest::newRow("model unknown layer type")
        << QStringList{"--model", t + "/unknown_layer.json", "--data", "idx:" + slice()}
        << QStringList{t + "/unknown_layer.json", "unknown layer type 'conv3d'"};
    QTest::newRow("model without parameters")
        << QStringList{"--model", t + "/no_params.json", "--data", "idx:" + slice(), "--steps", "2"}
        << QStringList{"--model", "no_params has no parameters to train"};
    QTest::newRow("idx test images larger") << QStringList{"--data", "idx:" + t + "/testshape", "--steps", "2"}
                                            << QStringList{"--data", "the test samples are 1x32x32",
                                                           "training samples 1x28x28"};
    QTest::newRow("idx test label too large") << QStringList{"--data", "idx:" + t + "/testlabels", "--steps", "2"}
                                              << QStringList{"--data", "13 classes", "10 outputs"};
    QTest::newRow("idx missing dir") << QStringList{"--data", "idx:/nonexistent"}
                                     << QStringList{"/nonexistent", "no such directory"};
    QTest::newRow("cifar10 wrong size") << QStringList{"--model", "cifar10_cnn", "--data", "cifar10:" + t + "/cifar"}
                                        << QStringList{t + "/cifar/data_batch_1.bin", "size 1000 bytes", "3073"};
    QTest::newRow("data bogus") << QStringList{"--data", "bogus"} << QStringList{"--data", "unknown data spec 'bogus'"};
    QTest::newRow("idx truncated images")
        << QStringList{"--model", "mlp", "--data", "idx:" + t + "/truncated"}
        << QStringList{t + "/truncated/train-images-idx3-ubyte", "truncated", "100 images of 28x28",
                       "after 7840 bytes"};
    QTest::newRow("idx gz claims 2^31 images")
        << QStringList{"--model", "mlp", "--data", "idx:" + t + "/hugegz"}
        << QStringList{t + "/hugegz/train-images-idx3-ubyte.gz", "2147483648 images", "limit"};
    QTest::newRow("idx count mismatch")
        << QStringList{"--model", "mlp", "--data", "idx:" + t + "/mismatch"}
        << QStringList{t + "/mismatch/train-images-idx3-ubyte", "has 100 images", "has 90 labels"};
    QTest::newRow("idx wrong magic")
        << QStringList{"--model", "mlp", "--data", "idx:" + t + "/magic"}
        << QStringList{t + "/magic/train-images-idx3-ubyte", "wrong magic number 0x00000801"};
    QTest::newRow("model/data mismatch")
        << QStringList{"--model", "cifar10_cnn", "--data", "idx:" + slice()}
        << QStringList{"--model", "cifar10_cnn", "expects input (3, 24, 24)", "gives (1, 28, 28)"};
    QTest::newRow("config malformed") << QStringList{"--config", t + "/malformed.json"}
                                      << QStringList{t + "/malformed.json", "malformed JSON"};
    QTest::newRow("config error placed") << QStringList{"--config", t + "/bad_line2.json"}
                                         << QStringList{t + "/bad_line2.json", "malformed JSON at line 2, column 8"};
    QTest::newRow("config number too large") << QStringList{"--config", t + "/huge_number.json"}
                                             << QStringList{t + "/huge_number.json", "malformed JSON: a number too large"};
    QTest::newRow("config /dev/zero") << QStringList{"--config", "/dev/zero"}
                                      << QStringList{"/dev/zero", "not a regular file, so not a run config file"};
    QTest::newRow("config over 1 MiB") << QStringList{"--config", t + "/huge_config.json"}
                                       << QStringList{t + "/huge_config.json", "more than the 1024 KiB a run config"};
    QTest::newRow("model over 4 MiB") << QStringList{"--model", t + "/huge_model.json"}
                                      << QStringList{t + "/huge_model.json", "more than the 4096 KiB a model file"};
    QTest::newRow("newline in a value") << QStringList{"--model", "two\nlines"}
                                        << QStringList{"--model", "no model named 'two\\nlines'"};
    QTest::newRow("config key misspelt") << QStringList{"--config", t + "/misspelt.json"}
                                         << QStringList{t + "/misspelt.json", "unknown setting 'optimiser' (did you mean 'optimizer'?)"};
    QTest::newRow("config unknown key") << QStringList{"--config", t + "/unknown_key.json"}
                                        << QStringList{t + "/unknown_key.json", "unknown setting 'batchsize'"};
    QTest::newRow("config wrong type") << QStringList{"--config", t + "/wrong_type.json"}
                                       << QStringList{t + "/wrong_type.json", "'batch' must be an integer", "\"big\""};
    QTest::newRow("config missing file") << QStringList{"--config", t + "/absent.json"}
                                         << QStringList{t + "/absent.json", "cannot open run config file"};
    QTest::newRow("config without value") << QStringList{"--config"} << QStringList{"--config", "needs a file name"};
    QTest::newRow("run-dir is the data folder")
        << QStringList{"--data", "idx:" + t + "/testshape", "--run-dir", t + "/testshape"}
        << QStringList{"--run-dir", t + "/testshape is not empty", "choose a new or empty folder"};
    QTest::newRow("run-dir is a file") << (tiny + QStringList{"--run-dir", t + "/keep_config.json"})
                                       << QStringList{"--run-dir", "keep_config.json is a file, not a folder"};
    QTest::newRow("batch larger than the training set")
        << QStringList{"--model", "mlp", "--data", "idx:" + slice(), "--batch", "1801"}
        << QStringList{"--batch: 1801 examples per step", "the training set has only 1800", "200 held out"};
    // Refused from the estimate, before allocating (it was "out of host memory allocating ..." or
    // the kernel's OOM killer, depending on the machine).
    QTest::newRow("model too big for memory")
        << QStringList{"--model", t + "/too_big.json", "--data", "idx:" + slice(), "--steps", "1"}
        << QStringList{"--model too_big: this run needs about", "GiB of host memory", "more is available"};
    QTest::newRow("metrics in a missing folder") << (tiny + QStringList{"--metrics", "/nonexistent_dir/m.jsonl"})
                                                 << QStringList{"--metrics", "the folder /nonexistent_dir does not exist"};
    // An output never overwrites an input (the file would be emptied as the run opens it).
    QTest::newRow("metrics is the model file")
        << QStringList{"--model", t + "/no_params.json", "--metrics", t + "/no_params.json"}
        << QStringList{"--metrics", t + "/no_params.json", "is also an input of this run"};
    QTest::newRow("metrics is the config file")
        << QStringList{"--config", t + "/keep_config.json", "--metrics", t + "/keep_config.json"}
        << QStringList{"--metrics", t + "/keep_config.json", "is also an input of this run"};
    QTest::newRow("metrics is a shipped model")
        << QStringList{"--model", "tiny_mlp", "--metrics", tbtest::sourcePath("resources/models/tiny_mlp.json")}
        << QStringList{"--metrics", "tiny_mlp.json", "is also an input of this run"};
    QTest::newRow("metrics in the data folder")
        << QStringList{"--data", "idx:" + t + "/testshape", "--metrics", t + "/testshape/m.jsonl"}
        << QStringList{"--metrics", t + "/testshape/m.jsonl", "lies in " + t + "/testshape"};
    QTest::newRow("metrics is a folder") << (tiny + QStringList{"--metrics", t})
                                         << QStringList{"--metrics", t + " is a folder, not a file"};
}

void TestCli::badInput() {
    QFETCH(QStringList, args);
    QFETCH(QStringList, expect);
    // No --quiet: the one-line promise holds for a plain invocation, progress output and all.
    QElapsedTimer t;
    t.start();
    // --threads first: a flag left without its value must be the last argument.
    const tbtest::RunResult r = tbtest::runTowerbench(QStringList{"--threads", "2"} + args, 60000);
    const qint64 ms = t.elapsed();
    expectOneLineError(r, expect);
    QVERIFY2(ms < 10000, qPrintable(QStringLiteral("took %1 ms").arg(ms)));  // refused up front, not after work
}

// A record that cannot be written is an error, not a run reported as fine: a metrics file on a
// full disk (/dev/full) ends the run with one line; so does a summary line that standard output
// cannot take (the summary is still in the run folder, and the line says where).
void TestCli::writeErrorsEndTheRun() {
    const QStringList tiny = {"--model", "tiny_mlp", "--data", "synthetic:blobs", "--steps", "5", "--quiet",
                              "--threads", "2"};
    const tbtest::RunResult metrics = tbtest::runTowerbench(tiny + QStringList{"--metrics", "/dev/full"});
    expectOneLineError(metrics, {"--metrics: cannot write /dev/full", "No space left on device"});
    QProcess p;
    p.setStandardOutputFile(QStringLiteral("/dev/full"));
    p.start(QStringLiteral(TB_RUN_BINARY), tiny);
    QVERIFY(p.waitForFinished(60000));
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QCOMPARE(p.exitCode(), 2);
    QVERIFY2(err.contains("standard output: cannot write the summary line") && err.contains("summary.json"),
             qPrintable(err));
}

// The metrics file is opened only once the inputs were read and checked: a run refused while
// loading (here, test images of another shape than the training images, found after reading
// both) leaves an existing file as it was, and so does one refused up front.
void TestCli::refusedRunLeavesMetricsFileAlone() {
    const QString path = tmp_.filePath("kept.jsonl");
    writeFile(path, "keep me\n");
    for (const QString& data : {tmp_.path() + "/testshape", QStringLiteral("/nonexistent")}) {
        const tbtest::RunResult r = tbtest::runTowerbench(
            {"--model", "mlp", "--data", "idx:" + data, "--steps", "2", "--metrics", path, "--quiet"}, 60000);
        QVERIFY2(r.exitCode == 2, qPrintable(describe(r)));
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QCOMPARE(f.readAll(), QByteArray("keep me\n"));
    }
}

// A run folder on a disk that fills up (a tmpfs of a few KiB, mounted where the test may: root
// in CI) at each stage of the run: its settings, the metrics, the event file, a checkpoint. Every
// one ends the run with exit 2 and one line naming the file and "No space left on device".
void TestCli::fullDiskEndsTheRun() {
    const QString mnt = tmp_.filePath("small");
    QVERIFY(QDir().mkpath(mnt));
    for (const char* size : {"8k", "16k", "24k", "32k", "40k", "64k"}) {  // config, run.json, log, events, metrics, checkpoint
        if (QProcess::execute("mount", {"-t", "tmpfs", "-o", QStringLiteral("size=%1").arg(size), "tmpfs", mnt}) != 0)
            QSKIP("cannot mount a tmpfs here (needs root)");
        const tbtest::RunResult r = tbtest::runTowerbench({"--model", "mlp", "--data", "idx:" + slice(), "--steps", "40",
                                                           "--checkpoint-every", "20", "--run-dir", mnt + "/run",
                                                           "--threads", "2", "--quiet"},
                                                          60000);
        QProcess::execute("umount", {mnt});
        QVERIFY2(r.exitCode == 2 && linesOf(r.err).size() == 1 && r.err.contains("No space left on device") &&
                     r.err.contains(mnt + "/run/"),
                 qPrintable(QString(size) + ": " + describe(r)));
    }
}

namespace {
// Starts `program` and waits until `metrics` holds a step line (the run is training).
bool startAndWaitForSteps(QProcess& p, const QString& program, const QStringList& args, const QString& metrics) {
    p.start(program, args);
    if (!p.waitForStarted(10000)) return false;
    QElapsedTimer t;
    t.start();
    while (t.elapsed() < 120000 && p.state() == QProcess::Running) {
        QFile f(metrics);
        if (f.open(QIODevice::ReadOnly) && f.readAll().contains("\"type\":\"step\"")) return true;
        QTest::qWait(50);
    }
    return false;
}

QJsonObject lastStateLine(const QString& metrics) {
    QFile f(metrics);
    QJsonObject last;
    if (!f.open(QIODevice::ReadOnly)) return last;
    for (const QByteArray& line : f.readAll().split('\n')) {
        const QJsonObject o = QJsonDocument::fromJson(line).object();
        if (o["type"].toString() == "state") last = o;
    }
    return last;
}
}  // namespace

// Ctrl-C (SIGINT) or a TERM stops a run as the window's Stop does: after the step in progress,
// with the final evaluation, a checkpoint, the final state line and the summary (on stdout and
// in the run folder), and exits 128 + the signal. Before, the process died at once with none
// of them.
void TestCli::signalStopsAfterTheStep_data() {
    QTest::addColumn<int>("signal");
    QTest::newRow("SIGINT") << int(SIGINT);
    QTest::newRow("SIGTERM") << int(SIGTERM);
}

void TestCli::signalStopsAfterTheStep() {
    QFETCH(int, signal);
    const QString dir = tmp_.filePath(QStringLiteral("signal-%1").arg(signal)), metrics = dir + ".jsonl";
    QProcess p;
    QVERIFY(startAndWaitForSteps(p, QStringLiteral(TB_RUN_BINARY),
                                 {"--model", "mlp", "--data", "idx:" + slice(), "--steps", "1000000", "--run-dir", dir,
                                  "--metrics", metrics, "--threads", "2", "--quiet"},
                                 metrics));
    QCOMPARE(::kill(pid_t(p.processId()), signal), 0);
    QVERIFY(p.waitForFinished(60000));
    const QString out = QString::fromUtf8(p.readAllStandardOutput()), err = QString::fromUtf8(p.readAllStandardError());
    QCOMPARE(p.exitStatus(), QProcess::NormalExit);
    QVERIFY2(p.exitCode() == 128 + signal, qPrintable(QString::number(p.exitCode()) + " " + err));
    QVERIFY2(err.contains(signal == SIGINT ? "stopped by SIGINT" : "stopped by SIGTERM"), qPrintable(err));
    const QJsonObject summary = QJsonDocument::fromJson(linesOf(out).value(linesOf(out).size() - 1).toUtf8()).object();
    QVERIFY2(summary["stopped"].toBool() && summary["steps"].toInteger() > 0, qPrintable(out));
    QVERIFY2(summary.contains("test_accuracy"), qPrintable(out));  // the final evaluation ran
    QCOMPARE(lastStateLine(metrics)["state"].toString(), QStringLiteral("stopped"));
    QCOMPARE(lastStateLine(dir + "/metrics.jsonl")["state"].toString(), QStringLiteral("stopped"));
    QFile saved(dir + "/summary.json");
    QVERIFY(saved.open(QIODevice::ReadOnly));
    QCOMPARE(QJsonDocument::fromJson(saved.readAll()).object()["steps"].toInteger(), summary["steps"].toInteger());
    const QStringList checkpoints = QDir(dir + "/checkpoints").entryList({"step-*.safetensors"});
    QVERIFY2(checkpoints.contains(QStringLiteral("step-%1.safetensors").arg(summary["steps"].toInteger(), 8, 10, QChar('0'))),
             qPrintable(checkpoints.join(' ')));
}

// A second signal while the first stop is under way ends the process at once (no evaluation,
// checkpoint or summary), with 128 + the first signal.
void TestCli::secondSignalEndsAtOnce() {
    const QString dir = tmp_.filePath("twice"), metrics = dir + ".jsonl";
    QProcess p;
    QVERIFY(startAndWaitForSteps(p, QStringLiteral(TB_RUN_BINARY),
                                 {"--model", "mnist_cnn", "--data", "idx:" + slice(), "--steps", "1000000", "--run-dir",
                                  dir, "--metrics", metrics, "--threads", "2", "--quiet"},
                                 metrics));
    // Two different signals: two of the same kind pending at once would count as one.
    QCOMPARE(::kill(pid_t(p.processId()), SIGINT), 0);
    QCOMPARE(::kill(pid_t(p.processId()), SIGTERM), 0);
    QVERIFY(p.waitForFinished(60000));
    const QString out = QString::fromUtf8(p.readAllStandardOutput()), err = QString::fromUtf8(p.readAllStandardError());
    // Either may arrive first (the kernel hands each to any thread, and the line naming the first
    // may not be printed yet when the second ends the process): the status is 128 + one of them.
    QVERIFY2(p.exitCode() == 128 + SIGINT || p.exitCode() == 128 + SIGTERM,
             qPrintable(QString::number(p.exitCode()) + " " + err));
    QVERIFY2(err.contains("signalled again: ending at once"), qPrintable(err));
    QVERIFY2(out.isEmpty(), qPrintable(out));
    QVERIFY(!QFile::exists(dir + "/summary.json"));
}

// Ending the signal watcher wakes it: no command waits for it. It polled every 100 ms, and each of
// the bad-input campaign's 1,800 refused command lines spent 90 ms of its 130 ms waiting there.
// 20 in a row, each watching 10 ms first, took 2.0 s that way (0.2 s woken); the bound leaves the
// thread starts and joins 40 ms each.
void TestCli::signalWatcherEndsAtOnce() {
    QElapsedTimer t;
    t.start();
    int firsts = 0;
    for (int i = 0; i < 20; ++i) {
        StopSignals watcher("tst_cli", [&](int) { ++firsts; });
        QThread::msleep(10);  // the watcher is waiting by then, as in a run
    }
    QVERIFY2(t.elapsed() < 1000, qPrintable(QString::number(t.elapsed()) + " ms"));
    QCOMPARE(firsts, 0);  // the destructor's wake-up is not a signal
    // A signal still reaches it, once.
    int signal = 0;
    {
        StopSignals watcher("tst_cli", [&](int s) { signal = s; });
        QCOMPARE(::kill(::getpid(), SIGUSR1), 0);
        QTRY_COMPARE(signal, int(SIGUSR1));
        QCOMPARE(watcher.received(), int(SIGUSR1));
    }
}

// The window takes SIGTERM as Stop, then closes: the run keeps its summary and final state.
void TestCli::windowStopsOnSignal() {
    const QString runs = tmp_.filePath("window-runs"), config = tmp_.filePath("window.json");
    writeFile(config, QStringLiteral(R"({"model": "mlp", "data": "idx:%1", "steps": 1000000, "threads": 2})")
                          .arg(slice()).toUtf8());
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("TOWERBENCH_RUNS_DIR", runs);
    env.insert("QT_QPA_PLATFORM", "offscreen");
    p.setProcessEnvironment(env);
    p.start(QStringLiteral(TB_WINDOW_BINARY), {"--config", config, "--start"});
    QVERIFY(p.waitForStarted(10000));
    QString metrics;
    QElapsedTimer t;
    t.start();
    while (t.elapsed() < 120000 && p.state() == QProcess::Running) {
        const QStringList found = QDir(runs).entryList(QDir::Dirs | QDir::NoDotAndDotDot);
        if (!found.isEmpty()) {
            metrics = runs + "/" + found.first() + "/metrics.jsonl";
            QFile f(metrics);
            if (f.open(QIODevice::ReadOnly) && f.readAll().contains("\"type\":\"step\"")) break;
        }
        QTest::qWait(50);
    }
    QVERIFY2(!metrics.isEmpty() && p.state() == QProcess::Running, qPrintable(p.readAllStandardError()));
    p.terminate();  // SIGTERM
    QVERIFY(p.waitForFinished(60000));
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 143, qPrintable(QString::number(p.exitCode()) + err));
    QCOMPARE(lastStateLine(metrics)["state"].toString(), QStringLiteral("stopped"));
    QVERIFY(QFile::exists(QFileInfo(metrics).path() + "/summary.json"));
}

void TestCli::hugeHeadersNeedNoMemory() {
    // Image files whose gzip header claims 2^31 images (over the reader's limit) or 50 million
    // (under it, 39 GB of pixels) but hold 10: refused quickly inside a 1 GiB address space.
    const QString t = tmp_.path();
    writeIdxDir(t + "/huge50m", idxImages(50000000, 10), idxLabels(100, 100), true);
    // The labels are read first and must match the claim to get to the images.
    writeGz(t + "/huge50m/train-labels-idx1-ubyte.gz", idxLabels(50000000, 50000000));
    QVERIFY(QFile::remove(t + "/huge50m/train-labels-idx1-ubyte"));
    struct Case {
        QString dir;
        QStringList expect;
    } cases[] = {
        {t + "/hugegz", {"2147483648 images", "limit"}},
        {t + "/huge50m", {"train-images-idx3-ubyte.gz", "truncated", "50000000 images of 28x28", "after 7840 bytes"}},
    };
    for (const Case& c : cases) {
        QElapsedTimer timer;
        timer.start();
        const tbtest::RunResult r =
            runWithAddressLimit({"--model", "mlp", "--data", "idx:" + c.dir, "--threads", "2", "--quiet"}, rlim_t(1) << 30);
        const qint64 ms = timer.elapsed();
        expectOneLineError(r, c.expect);
        QVERIFY2(!r.err.contains("out of memory"), qPrintable(r.err));
        QVERIFY2(ms < 5000, qPrintable(QStringLiteral("%1: took %2 ms").arg(c.dir).arg(ms)));
    }
}

void TestCli::valueMissingBeforeNextFlag_data() {
    // A flag followed by another flag has no value: the message must name the first flag, and
    // the second must not be taken as a value (a file named "--quiet", a run config "--threads").
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("flag");
    QTest::newRow("--batch --steps 3") << QStringList{"--batch", "--steps", "3"} << "--batch";
    QTest::newRow("--data --steps 3") << QStringList{"--data", "--steps", "3"} << "--data";
    QTest::newRow("--config --quiet") << QStringList{"--config", "--quiet"} << "--config";
}

void TestCli::valueMissingBeforeNextFlag() {
    QFETCH(QStringList, args);
    QFETCH(QString, flag);
    const tbtest::RunResult r = tbtest::runTowerbench(args, 60000);
    expectOneLineError(r, {flag + ":"});
}

void TestCli::outOfRangeIntegers_data() {
    // Values a setting's type cannot hold must be refused, not wrapped: batch is an int, so
    // 4294967297 would become batch 1; seed is unsigned, so -1 would become 2^64 - 1.
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QStringList>("expect");
    const QStringList tiny = {"--model", "tiny_mlp", "--data", "synthetic:blobs", "--steps", "1", "--quiet"};
    QTest::newRow("batch 2^32 + 1") << (tiny + QStringList{"--batch", "4294967297"}) << QStringList{"--batch"};
    QTest::newRow("batch 99999999999") << (tiny + QStringList{"--batch", "99999999999"})
                                       << QStringList{"--batch", "99999999999"};
    QTest::newRow("threads 2^32 + 2") << (tiny + QStringList{"--threads", "4294967298"}) << QStringList{"--threads"};
    QTest::newRow("seed -1") << (tiny + QStringList{"--seed", "-1"}) << QStringList{"--seed"};
}

void TestCli::outOfRangeIntegers() {
    QFETCH(QStringList, args);
    QFETCH(QStringList, expect);
    const tbtest::RunResult r = tbtest::runTowerbench(args, 60000);
    expectOneLineError(r, expect);
}

// ---------------------------------------------------------------- good runs

void TestCli::help() {
    for (const char* flag : {"--help", "-h"}) {
        const tbtest::RunResult r = tbtest::runTowerbench({flag});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.startsWith("usage: towerbench-run"), qPrintable(r.out));
        for (const char* documented : {"--config", "--model", "--data", "--batch", "--steps", "--epochs", "--optimizer",
                                       "--lr", "--seed", "--eval-every", "--validation", "--metrics", "--threads"})
            QVERIFY2(r.out.contains(documented), documented);
        QVERIFY2(r.err.isEmpty(), qPrintable(r.err));
    }
    // --help wins wherever it stands after valid flags, and starts nothing.
    const tbtest::RunResult r = tbtest::runTowerbench({"--steps", "3", "--help", "--model", "no_such_model"});
    QVERIFY2(r.exitCode == 0 && r.out.startsWith("usage:"), qPrintable(describe(r)));
}

// Loading the CUDA module runs its libraries' initialisers (cuDNN, cuBLAS, NCCL): 0.3 s of every
// start, once paid by each CPU run and each test that starts one. The dynamic linker's own account
// (LD_DEBUG=files) says which files a run loaded.
void TestCli::cpuRunLoadsNoCudaLibrary() {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("LD_DEBUG", "files");
    const QStringList run{"--model", "tiny_mlp", "--data", "synthetic:blobs", "--steps", "2", "--validation", "0",
                          "--threads", "1", "--quiet", "--run-dir", tmp_.path() + "/no_cuda"};
    // Where this build has the module, a run that names a GPU loads it: the probe sees a load.
    const tbtest::RunResult gpu = tbtest::runTowerbench(QStringList(run) << "--towers" << "gpu:0", 120000, env);
    if (!gpu.err.contains("libtb_backend_cuda"))
        qInfo("this build has no CUDA module: the CPU run below cannot load one either");
    const tbtest::RunResult cpu = tbtest::runTowerbench(run, 120000, env);
    QVERIFY2(cpu.exitCode == 0, qPrintable(describe(cpu).right(2000)));
    for (const char* library : {"libtb_backend_cuda", "libcudart", "libcudnn", "libcublas", "libnccl"})
        QVERIFY2(!cpu.err.contains(library), library);
}

void TestCli::summaryIsLastLine() {
    const tbtest::RunResult r = tbtest::runTowerbench(
        {"--model", "mlp", "--data", "idx:" + slice(), "--steps", "4", "--batch", "16", "--threads", "2"}, 60000);
    QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
    QCOMPARE(linesOf(r.out).size(), 1);  // progress goes to stderr
    const QJsonObject s = summaryOf(r);
    QVERIFY2(!s.isEmpty(), qPrintable(r.out));
    for (const char* key : {"steps", "examples_per_sec", "final_loss", "test_accuracy", "params"})
        QVERIFY2(s.contains(key), key);
    QCOMPARE(s["steps"].toInteger(), 4);
    QCOMPARE(s["params"].toInteger(), 669706);
    QCOMPARE(s["model"].toString(), QStringLiteral("mlp"));
    QCOMPARE(s["stopped"].toBool(), false);
    QCOMPARE(s["flops_per_example"].toInteger(), 2LL * (3 * (784 * 512 + 512 * 512 + 512 * 10) - 784 * 512));
    QVERIFY2(std::abs(s["epochs"].toDouble() - 4.0 * 16 / 1800) < 1e-12, qPrintable(QString::number(s["epochs"].toDouble())));
    QVERIFY2(s["backend"].toString().contains("2 threads"), qPrintable(s["backend"].toString()));
    QVERIFY(s["examples_per_sec"].toDouble() > 0);
    const double loss = s["final_loss"].toDouble();
    QVERIFY2(std::isfinite(loss) && loss > 0 && loss < 10, qPrintable(QString::number(loss)));
    const double acc = s["test_accuracy"].toDouble();
    QVERIFY2(acc >= 0 && acc <= 1, qPrintable(QString::number(acc)));
    // 500 test images: the accuracy is a whole number of them.
    QVERIFY2(std::abs(acc * 500 - std::round(acc * 500)) < 1e-6, qPrintable(QString::number(acc)));
    QVERIFY(s.contains("validation_accuracy"));
    QVERIFY2(r.err.contains("finished"), qPrintable(r.err));
}

void TestCli::configFileAndFlagOverride() {
    const QString config = tmp_.filePath("run.json");
    QJsonObject o{{"model", "mlp"}, {"data", "idx:" + slice()}, {"batch", 32}, {"steps", 5}, {"threads", 2}, {"quiet", true}};
    writeFile(config, QJsonDocument(o).toJson());
    // The file alone: 5 steps of 32.
    tbtest::RunResult r = tbtest::runTowerbench({"--config", config}, 60000);
    QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
    QJsonObject s = summaryOf(r);
    QCOMPARE(s["steps"].toInteger(), 5);
    QVERIFY(std::abs(s["epochs"].toDouble() - 5.0 * 32 / 1800) < 1e-12);
    QVERIFY2(r.err.isEmpty(), qPrintable(r.err));  // "quiet": true from the file
    // A flag overrides the file wherever --config stands; the file's batch still holds.
    for (const QStringList& args : {QStringList{"--config", config, "--steps", "7"}, QStringList{"--steps", "7", "--config", config}}) {
        r = tbtest::runTowerbench(args, 60000);
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        s = summaryOf(r);
        QCOMPARE(s["steps"].toInteger(), 7);
        QVERIFY2(std::abs(s["epochs"].toDouble() - 7.0 * 32 / 1800) < 1e-12, qPrintable(QString::number(s["epochs"].toDouble())));
    }
}

void TestCli::metricsFile() {
    const QString path = tmp_.filePath("metrics.jsonl");
    const tbtest::RunResult r = tbtest::runTowerbench({"--model", "mlp", "--data", "idx:" + slice(), "--steps", "6", "--batch",
                                                       "32", "--eval-every", "2", "--metrics", path, "--threads", "2",
                                                       "--quiet"},
                                                      60000);
    QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
    QFile f(path);
    QVERIFY2(f.open(QIODevice::ReadOnly), qPrintable(path));
    QStringList sequence;  // "state:loading", "step:1", "eval:validation:2", ...
    int64_t lastStep = 0;
    for (const QByteArray& line : f.readAll().split('\n')) {
        if (line.isEmpty()) continue;
        QJsonParseError e;
        const QJsonDocument doc = QJsonDocument::fromJson(line, &e);
        QVERIFY2(doc.isObject(), qPrintable(QString::fromUtf8(line) + ": " + e.errorString()));
        const QJsonObject o = doc.object();
        const QString type = o["type"].toString();
        if (type == "state") {
            sequence << "state:" + o["state"].toString();
        } else if (type == "step") {
            const int64_t step = o["step"].toInteger();
            QVERIFY2(step == lastStep + 1, qPrintable(QString::fromUtf8(line)));
            lastStep = step;
            QCOMPARE(o["total_steps"].toInteger(), 6);
            QVERIFY(std::abs(o["epoch"].toDouble() - double(step) * 32 / 1800) < 1e-12);
            QVERIFY(std::abs(o["lr"].toDouble() - 0.01) < 1e-9);  // the default, constant
            const double loss = o["loss"].toDouble(), acc = o["accuracy"].toDouble();
            QVERIFY2(std::isfinite(loss) && loss > 0, qPrintable(QString::fromUtf8(line)));
            QVERIFY2(acc >= 0 && acc <= 1 && std::abs(acc * 32 - std::round(acc * 32)) < 1e-9, qPrintable(QString::fromUtf8(line)));
            for (const char* key : {"examples_per_sec", "step_ms", "data_wait_ms", "compute_ms", "elapsed_s"})
                QVERIFY2(o[key].toDouble() >= 0 && o.contains(key), key);
            sequence << QStringLiteral("step:%1").arg(step);
        } else if (type == "eval") {
            const QString split = o["split"].toString();
            QCOMPARE(o["examples"].toInteger(), split == "test" ? 500 : 200);  // 10% of 2000 held out
            QCOMPARE(o["ema"].toBool(), false);
            const double acc = o["accuracy"].toDouble();
            QVERIFY(acc >= 0 && acc <= 1);
            sequence << QStringLiteral("eval:%1:%2").arg(split).arg(o["step"].toInteger());
        } else if (type == "layer_times") {  // tower 0's profiled step 5: one time per layer each way
            QCOMPARE(o["step"].toInteger(), 5);
            QCOMPARE(o["forward_ms"].toArray().size(), o["backward_ms"].toArray().size());
            QVERIFY(o["forward_ms"].toArray().size() > 0);
            for (const auto& v : o["forward_ms"].toArray()) QVERIFY(v.toDouble() >= 0);
            sequence << QStringLiteral("layers:%1").arg(o["step"].toInteger());
        } else {
            QFAIL(qPrintable("unknown line type: " + QString::fromUtf8(line)));
        }
    }
    const QStringList expected = {"state:loading", "state:running", "step:1", "step:2", "eval:validation:2", "step:3",
                                  "step:4", "eval:validation:4", "step:5", "layers:5", "step:6", "state:evaluating", "eval:validation:6",
                                  "eval:test:6", "state:finished"};
    QVERIFY2(sequence == expected, qPrintable(sequence.join(' ')));
    // The file's last test evaluation is the summary's.
    QCOMPARE(summaryOf(r)["steps"].toInteger(), 6);
}

void TestCli::epochsCountStepsAfterValidation() {
    // trainer.cpp: validation -1 holds out min(5000, 10%) of the training set, and epochs count
    // passes over what is left: 2000 - 200 = 1800 samples, ceil(1800 / 100) = 18 steps.
    struct Case {
        QStringList extra;
        int steps;
        int trainSize;  // after the validation split
        bool validation;
    } cases[] = {
        {{}, 18, 1800, true},
        {{"--validation", "0"}, 20, 2000, false},
        {{"--validation", "500"}, 15, 1500, true},
        {{"--epochs", "0.5"}, 9, 1800, true},
        {{"--epochs", "1.02"}, 19, 1800, true},  // ceil(18.36)
    };
    for (const Case& c : cases) {
        const QStringList args = QStringList{"--model", "mlp", "--data", "idx:" + slice(), "--epochs", "1", "--batch", "100",
                                             "--threads", "2", "--quiet"} +
                                 c.extra;
        const tbtest::RunResult r = tbtest::runTowerbench(args, 60000);
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        const QJsonObject s = summaryOf(r);
        const QString what = c.extra.join(' ');
        QVERIFY2(s["steps"].toInteger() == c.steps, qPrintable(what + ": steps " + QString::number(s["steps"].toInteger())));
        QVERIFY2(std::abs(s["epochs"].toDouble() - double(c.steps) * 100 / c.trainSize) < 1e-12,
                 qPrintable(what + ": epochs " + QString::number(s["epochs"].toDouble())));
        QVERIFY2(s.contains("validation_accuracy") == c.validation, qPrintable(what));
    }
    // More held out than there is: refused.
    const tbtest::RunResult r = tbtest::runTowerbench(
        {"--model", "mlp", "--data", "idx:" + slice(), "--validation", "2000", "--threads", "2", "--quiet"}, 60000);
    expectOneLineError(r, {"--validation", "2000"});
}

void TestCli::syntheticHoldsOutTenPercent() {
    // run_config.hpp: validation -1 means 10% of the training set, at most 5000, for every data
    // set: 800 of the 8000 synthetic training points are held out.
    const tbtest::RunResult r = tbtest::runTowerbench(
        {"--model", "tiny_mlp", "--data", "synthetic:blobs", "--epochs", "1", "--batch", "100", "--threads", "2", "--quiet"},
        60000);
    QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
    const QJsonObject s = summaryOf(r);
    QVERIFY2(s.contains("validation_accuracy"), qPrintable(linesOf(r.out).last()));
    QCOMPARE(s["steps"].toInteger(), 72);  // 7200 / 100
}

// A deterministic run's figures, held to what it gave: `accuracy` within `examples` test examples
// (of the slice's 500) and `loss` within `relative`. oneDNN's kernels differ by instruction set, so
// the same run gives the same figures to a few examples on AVX2, AVX-512 and AMX machines.
void expectFigures(const QJsonObject& s, double accuracy, int examples, double loss, double relative) {
    const double acc = s["test_accuracy"].toDouble(), l = s["test_loss"].toDouble();
    QVERIFY2(std::abs(acc - accuracy) <= examples / 500.0 + 1e-9,
             qPrintable(QString("test accuracy %1, expected %2 within %3 examples").arg(acc).arg(accuracy).arg(examples)));
    QVERIFY2(std::abs(l - loss) <= relative * loss,
             qPrintable(QString("test loss %1, expected %2 within %3").arg(l).arg(loss).arg(relative)));
}

void TestCli::mlpReachesAccuracy() {
    // Seed 1 of 10 measured (141 steps): test accuracy 0.812, 0.818, 0.780, 0.824, 0.826, 0.792,
    // 0.830, 0.832, 0.776, 0.814 (before each epoch's order had its own seed; seed 1 gave 0.812 /
    // 0.47853 on AVX2 and AVX-512 alike). With the per-epoch seeds of 2026-12-02 seed 1 gives 0.820
    // and test loss 0.50925 on AVX-512 (whose fp32 kernels AMX machines run too), and 0.816 /
    // 0.52054 on AVX2 (an AMD EPYC, 2026-12-07): oneDNN's AVX2 kernels sum in another order, and
    // over 141 steps the two part by 2% in test loss. Run twice, it gives the same bits.
    QElapsedTimer t;
    t.start();
    const QStringList run = {"--model", "mlp", "--data", "idx:" + slice(), "--epochs", "5", "--batch", "64",
                             "--optimizer", "adam", "--lr", "0.001", "--threads", "2", "--quiet"};
    const tbtest::RunResult r = tbtest::runTowerbench(run, 120000);
    QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
    const QJsonObject s = summaryOf(r);
    QCOMPARE(s["steps"].toInteger(), 141);  // ceil(5 * 1800 / 64)
    qInfo("mlp on the slice: test accuracy %.3f, test loss %.5f, %.1f s", s["test_accuracy"].toDouble(),
          s["test_loss"].toDouble(), double(t.elapsed()) / 1000);
    const bool avx2 = tb::cpuIsaName().rfind("avx2", 0) == 0;  // "avx2" or "avx2_vnni"
    expectFigures(s, avx2 ? 0.816 : 0.820, 2, avx2 ? 0.52054 : 0.50925, 0.005);
    const QJsonObject again = summaryOf(tbtest::runTowerbench(run, 120000));
    for (const char* key : {"test_loss", "test_accuracy", "final_loss", "validation_accuracy"})
        QCOMPARE(again[key].toDouble(), s[key].toDouble());
}

void TestCli::mnistCnnReachesAccuracy() {
    // Measured with mnist_cnn.json's Glorot initialisation (seeds 1..8, 100 steps of 64 with
    // Adam 0.001): test accuracy 0.790, 0.780, 0.792, 0.806, 0.762, 0.782, 0.762, 0.790. Seed 1
    // gave 0.788 / test loss 0.5338 on AVX-512 and 0.790 / 0.5323 on AVX2; with the per-epoch
    // seeds of 2026-12-02 it gives 0.768 / 0.60367 (AVX-512, within the spread). About 7 s on 2 idle
    // cores, up to 32 s while a build shares them.
    QElapsedTimer t;
    t.start();
    const tbtest::RunResult r =
        tbtest::runTowerbench({"--model", "mnist_cnn", "--data", "idx:" + slice(), "--steps", "100", "--batch", "64",
                               "--optimizer", "adam", "--lr", "0.001", "--threads", "2", "--quiet"},
                              180000);
    QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
    const QJsonObject s = summaryOf(r);
    QCOMPARE(s["steps"].toInteger(), 100);
    QCOMPARE(s["params"].toInteger(), 3274634);
    const double acc = s["test_accuracy"].toDouble();
    qInfo("mnist_cnn on the slice: test accuracy %.3f, test loss %.5f, %.1f s", acc, s["test_loss"].toDouble(),
          double(t.elapsed()) / 1000);
    expectFigures(s, 0.768, 3, 0.60367, 0.01);
}

void TestCli::bf16TrainsLikeFp32() {
    const QStringList run = {"--model", "mnist_cnn", "--data", "idx:" + slice(), "--steps", "100", "--batch", "64",
                             "--optimizer", "adam", "--lr", "0.001", "--threads", "2", "--quiet", "--precision", "bf16"};
    // A processor without bf16 instructions (oneDNN held to AVX2 stands in for one): refused in
    // one line naming what is missing, never emulated slowly.
    QProcessEnvironment avx2 = QProcessEnvironment::systemEnvironment();
    avx2.insert("ONEDNN_MAX_CPU_ISA", "AVX2");
    expectOneLineError(tbtest::runTowerbench(run, 60000, avx2), {"--precision bf16", "no AVX512-BF16 or AMX", "avx2"});
    if (const std::string why = tb::cpuBf16Missing(); !why.empty()) QSKIP(why.c_str());
    // The run mnistCnnReachesAccuracy makes in fp32, with bf16 matrix work: seeds 1..3 gave
    // test accuracy 0.788, 0.782, 0.804 on an AMD EPYC with AVX512-BF16 (fp32: 0.788, 0.780, 0.796);
    // seed 1 gave 0.790 / test loss 0.5432 there, and with the per-epoch seeds of 2026-12-02
    // 0.766 / 0.59725.
    const tbtest::RunResult r = tbtest::runTowerbench(run, 180000);
    QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
    const QJsonObject s = summaryOf(r);
    QCOMPARE(s["precision"].toString(), QStringLiteral("bf16"));
    QVERIFY2(s["backend"].toString().contains("bf16 matrix work"), qPrintable(s["backend"].toString()));
    const double acc = s["test_accuracy"].toDouble();
    qInfo("mnist_cnn on the slice in bf16: test accuracy %.3f, test loss %.5f", acc, s["test_loss"].toDouble());
    expectFigures(s, 0.766, 3, 0.59725, 0.02);
}

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
