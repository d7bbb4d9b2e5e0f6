// Tests of core/nn: the shipped models (exact parameter counts, shapes, FLOPs), the model-file
// parser's error messages on bad files, model lookup, TF padding, the initialisers' statistics
// and determinism, one forward pass checked against a softmax cross-entropy computed here, and
// networks bound to an external parameter buffer.
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <numbers>
#include <numeric>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/elementwise_math.hpp"
#include "engine/memory_estimate.hpp"
#include "nn/init.hpp"
#include "nn/layers.hpp"
#include "nn/model_spec.hpp"
#include "nn/network.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

namespace {

using tbtest::errorOf;
using tbtest::mentions;



std::string str(const QString& s) { return s.toStdString(); }

void writeText(const QString& path, const QByteArray& text) {
    QFile f(path);
    QVERIFY2(f.open(QIODevice::WriteOnly | QIODevice::Truncate), qPrintable(path));
    QCOMPARE(f.write(text), text.size());
}

// Loads `text` as a model file in `dir` and builds it (batch 2, CPU): the tb::Error message.
QString buildError(const QTemporaryDir& dir, const QString& fileName, const QByteArray& text) {
    const QString path = dir.filePath(fileName);
    writeText(path, text);
    auto backend = tb::makeCpuBackend(1);
    return errorOf([&] {
        tb::ModelSpec spec = tb::loadModelSpec(str(path));
        tb::Network net(spec, *backend, 2);
    });
}

// The smallest float not below x: a float drawn within a double bound may round up to this.
float roundUp(double x) {
    float f = float(x);
    return double(f) >= x ? f : std::nextafter(f, 1e30f);
}

// Sample mean and standard deviation.
std::pair<double, double> meanStd(const std::vector<float>& v) {
    double s = 0, s2 = 0;
    for (float x : v) s += x;
    const double mean = s / double(v.size());
    for (float x : v) s2 += (x - mean) * (x - mean);
    return {mean, std::sqrt(s2 / double(v.size() - 1))};
}

}  // namespace

class TestModel : public QObject {
    Q_OBJECT

private slots:
    // shipped models
    void shippedParameterCounts_data();
    void shippedParameterCounts();
    void mnistCnnLayout();
    void layerSummaries();
    void cifarCnnLayout();
    void trainFlops();
    void forwardMatchesSoftmaxCrossEntropy();
    void bindParamsUsesTheExternalBuffer();
    void memoryEstimateMatchesTheBuiltNetwork_data();
    void memoryEstimateMatchesTheBuiltNetwork();
    void memoryEstimateRefusesWhatCannotFit();
    // bad model files
    void badModelFiles_data();
    void badModelFiles();
    void countsMustBeIntegers_data();
    void countsMustBeIntegers();
    void badModelFileMissing();
    void badBatch();
    void findModelSearchPath();
    void tfPaddingValues();
    // initialisers
    void initialParamsDeterministic();
    void initialParamsFollowTheSpec();
    void truncatedNormalStatistics();
    void glorotLimits();
    void constantExact();
    void parseInitKindErrors();
};

// ---------------------------------------------------------------- shipped models

void TestModel::shippedParameterCounts_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<qlonglong>("params");
    QTest::addColumn<int>("c");
    QTest::addColumn<int>("h");
    QTest::addColumn<int>("w");
    QTest::addColumn<int>("tensors");
    QTest::newRow("cifar10_cnn") << "cifar10_cnn" << 1068298LL << 3 << 24 << 24 << 10;
    QTest::newRow("mnist_cnn") << "mnist_cnn" << 3274634LL << 1 << 28 << 28 << 8;
    QTest::newRow("mlp") << "mlp" << 669706LL << 1 << 28 << 28 << 6;
    QTest::newRow("tiny_mlp") << "tiny_mlp" << qlonglong(2 * 64 + 64 + 64 * 64 + 64 + 64 * 4 + 4) << 2 << 1 << 1 << 6;
    // Graphs (scripts/make_models.py counts them by a shape walk of its own): 21 convolutions
    // without bias (18 in blocks, the stem, 2 projections), 21 batch norms of gamma and beta, the
    // dense layer's 2; resnet20's 272,474 is option A's 269,722 plus the projections' 2,560
    // weights and their batch norms' 192.
    QTest::newRow("resnet20") << "resnet20" << 272474LL << 3 << 32 << 32 << 21 + 42 + 2;
    QTest::newRow("resnet56") << "resnet56" << 855770LL << 3 << 32 << 32 << 57 + 114 + 2;
    QTest::newRow("resnet20_mnist") << "resnet20_mnist" << 272186LL << 1 << 28 << 28 << 21 + 42 + 2;
    QTest::newRow("vgg_bn") << "vgg_bn" << 72666LL << 1 << 28 << 28 << 6 + 12 + 2;
}

void TestModel::shippedParameterCounts() {
    QFETCH(QString, model);
    QFETCH(qlonglong, params);
    QFETCH(int, c);
    QFETCH(int, h);
    QFETCH(int, w);
    QFETCH(int, tensors);
    auto backend = tb::makeCpuBackend(1);
    const tb::ModelSpec spec = tb::findModel(str(model));
    QCOMPARE(QString::fromStdString(spec.name), model);
    QVERIFY2(QString::fromStdString(spec.source).endsWith("/" + model + ".json"), spec.source.c_str());
    tb::Network net(spec, *backend, 2);
    QCOMPARE(net.paramCount(), int64_t(params));
    QCOMPARE(net.batch(), 2);
    QCOMPARE(net.outputs(), model == "tiny_mlp" ? 4 : 10);
    QCOMPARE(net.inputDims(), (tb::Dims{c, h, w}));
    QCOMPARE(int(net.paramInfos().size()), tensors);
    QCOMPARE(net.paramOffsets().size(), net.paramInfos().size());
    // The flat buffer is the tensors back to back, in order.
    int64_t offset = 0;
    for (size_t i = 0; i < net.paramInfos().size(); ++i) {
        QCOMPARE(net.paramOffsets()[i], offset);
        offset += net.paramInfos()[i].shape.numel();
    }
    QCOMPARE(offset, int64_t(params));
    QCOMPARE(int64_t(net.initialParams(1).size()), int64_t(params));
}

void TestModel::mnistCnnLayout() {
    auto backend = tb::makeCpuBackend(1);
    tb::Network net(tb::findModel("mnist_cnn"), *backend, 2);
    const auto& p = net.paramInfos();
    QCOMPARE(p[0].name, std::string("conv1/weights"));
    QCOMPARE(p[0].shape, (tb::Shape{32, 1, 5, 5}));
    QCOMPARE(p[0].fanIn, int64_t(25));
    QCOMPARE(p[0].fanOut, int64_t(32 * 25));
    QCOMPARE(p[1].name, std::string("conv1/biases"));
    QCOMPARE(p[1].shape, (tb::Shape{32}));
    QCOMPARE(p[2].shape, (tb::Shape{64, 32, 5, 5}));
    QCOMPARE(p[2].fanIn, int64_t(32 * 25));
    QCOMPARE(p[4].name, std::string("fc1/weights"));
    QCOMPARE(p[4].shape, (tb::Shape{1024, 7 * 7 * 64}));  // two SAME 2x2 pools: 28 -> 14 -> 7
    QCOMPARE(p[6].name, std::string("logits/weights"));
    QCOMPARE(p[6].shape, (tb::Shape{10, 1024}));
    QCOMPARE(p[7].shape, (tb::Shape{10}));
    // The layer list is the file's, names defaulting to type + index.
    QCOMPARE(int(net.layers().size()), 10);
    QCOMPARE(net.layers()[1]->name(), std::string("relu1"));
    QCOMPARE(net.layers()[6]->name(), std::string("flatten6"));
}

void TestModel::cifarCnnLayout() {
    auto backend = tb::makeCpuBackend(1);
    tb::Network net(tb::findModel("cifar10_cnn"), *backend, 2);
    const auto& p = net.paramInfos();
    QCOMPARE(p[0].shape, (tb::Shape{64, 3, 5, 5}));
    QCOMPARE(p[4].name, std::string("local3/weights"));
    QCOMPARE(p[4].shape, (tb::Shape{384, 6 * 6 * 64}));  // SAME 3x3/2 pools: 24 -> 12 -> 6
    QCOMPARE(p[4].weightDecay, 0.004f);
    QCOMPARE(p[6].shape, (tb::Shape{192, 384}));
    QCOMPARE(p[6].weightDecay, 0.004f);
    QCOMPARE(p[8].weightDecay, 0.f);
    QCOMPARE(p[5].weightDecay, 0.f);  // biases never decay
    QCOMPARE(p[3].init.kind, tb::InitSpec::Kind::Constant);
    QCOMPARE(p[3].init.value, 0.1f);  // conv2 "bias": 0.1
    QCOMPARE(p[8].init.kind, tb::InitSpec::Kind::TruncatedNormal);
    QCOMPARE(p[8].init.stddev, 0.0052083333f);
}

// The model list's FLOPs and parameters per layer (summarizeLayers), by hand for resnet20: each
// 3x3 convolution of a stage does h w k c 9 multiply-adds (the stem 32 x 32 x 16 x 3 x 9), a
// projection h w k c; 2 FLOPs a multiply-add; the same total as scripts/make_models.py's 81,626,368.
void TestModel::layerSummaries() {
    const tb::ModelSpec spec = tb::findModel("resnet20");
    const std::vector<tb::LayerSummary> layers = tb::summarizeLayers(spec);
    QCOMPARE(layers.size(), spec.layers.size());
    int64_t flops = 0, params = 0;
    for (const tb::LayerSummary& l : layers) flops += l.forwardFlops, params += l.params;
    const int64_t macs = 32LL * 32 * 16 * 3 * 9 + 6 * (32LL * 32 * 16 * 16 * 9) +                       // stem, stage 1
                         16LL * 16 * 32 * 16 * 9 + 5 * (16LL * 16 * 32 * 32 * 9) + 16LL * 16 * 32 * 16 +  // stage 2
                         8LL * 8 * 64 * 32 * 9 + 5 * (8LL * 8 * 64 * 64 * 9) + 8LL * 8 * 64 * 32 +       // stage 3
                         64 * 10;                                                                    // logits
    QCOMPARE(flops, 2 * macs);
    QCOMPARE(flops, int64_t(81626368));
    QCOMPARE(params, int64_t(272474));
    // The first block's add reads its second batch norm and the stem's ReLU.
    const auto at = [&](const std::string& name) {
        for (size_t i = 0; i < layers.size(); ++i)
            if (layers[i].name == name) return int(i);
        return -2;
    };
    QCOMPARE(layers[size_t(at("s1b1_add"))].inputs, (std::vector<int>{at("s1b1_conv2_bn"), at("stem_relu")}));
    QCOMPARE(layers[size_t(at("s2b1_add"))].output, (tb::Dims{32, 16, 16}));
    QCOMPARE(layers[size_t(at("stem_bn"))].params, int64_t(32));
    // Cuts between blocks, none inside one.
    QVERIFY(tb::cutProblem(spec, at("s1b2_conv1")).empty());
    const std::string inside = tb::cutProblem(spec, at("s1b2_conv2"));
    QVERIFY2(inside.find("reads 's1b1_out' across the cut") != std::string::npos, inside.c_str());
}

void TestModel::trainFlops() {
    auto backend = tb::makeCpuBackend(1);
    tb::Network mlp(tb::findModel("mlp"), *backend, 2);
    // Forward, weight gradient and input gradient of every layer, but no input gradient for the
    // first (3.21 MFLOP for mlp; counting it, as before, said 4.01).
    const int64_t h1 = 2LL * 784 * 512, h2 = 2LL * 512 * 512, out = 2LL * 512 * 10;
    QCOMPARE(mlp.trainFlopsPerExample(), 2 * h1 + 3 * (h2 + out));
    tb::Network cnn(tb::findModel("mnist_cnn"), *backend, 2);
    const int64_t conv1 = 2LL * 28 * 28 * 32 * 1 * 25, conv2 = 2LL * 14 * 14 * 64 * 32 * 25;
    const int64_t fc1 = 2LL * 3136 * 1024, logits = 2LL * 1024 * 10;
    QCOMPARE(cnn.trainFlopsPerExample(), 2 * conv1 + 3 * (conv2 + fc1 + logits));
}

void TestModel::forwardMatchesSoftmaxCrossEntropy() {
    // mlp, batch 2, on the CPU backend (host pointers): probabilities are a softmax (rows sum to
    // 1), stats[0] is the summed cross-entropy of the valid rows and stats[1] counts argmax hits.
    auto backend = tb::makeCpuBackend(1);
    tb::Network net(tb::findModel("mlp"), *backend, 2);
    const std::vector<float> init = net.initialParams(7);
    std::copy(init.begin(), init.end(), net.params());
    for (int i = 0; i < 2 * 784; ++i) net.input()[i] = float((i * 37) % 101) / 101.f;
    net.labels()[0] = 3;
    net.labels()[1] = 8;
    for (int valid : {2, 1}) {
        float stats[3] = {0, 0, 0};
        net.forward(nullptr, false, 0, valid, stats);
        backend->synchronize(nullptr);
        double loss = 0;
        int right = 0;
        for (int r = 0; r < valid; ++r) {
            const float* p = net.probs() + r * 10;
            double sum = 0;
            for (int k = 0; k < 10; ++k) {
                QVERIFY(p[k] > 0 && p[k] < 1);
                sum += p[k];
            }
            QVERIFY2(std::abs(sum - 1.0) < 1e-5, qPrintable(QString::number(sum)));
            loss += -std::log(double(p[net.labels()[r]]));
            right += int(std::max_element(p, p + 10) - p) == net.labels()[r];
        }
        QVERIFY2(std::abs(stats[0] - loss) < 1e-4 * std::max(1.0, loss),
                 qPrintable(QStringLiteral("%1 vs %2").arg(stats[0]).arg(loss)));
        QCOMPARE(double(stats[1]), double(right));
        QCOMPARE(stats[2], 0.f);  // evaluation adds no weight decay
    }
    // Two forwards with the same input and parameters agree exactly (no hidden state).
    std::vector<float> first(net.probs(), net.probs() + 20);
    float stats[3] = {0, 0, 0};
    net.forward(nullptr, false, 0, 2, stats);
    QVERIFY(std::equal(first.begin(), first.begin() + 10, net.probs()));
}

// The estimate a run is admitted by (engine/memory_estimate.hpp) against what a network really
// allocates: parameters, gradients and activations byte for byte; the saved buffers at least
// what the layers keep and at most 4x (oneDNN's max-pooling keeps one byte per output).
void TestModel::memoryEstimateMatchesTheBuiltNetwork_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("batch");
    QTest::addColumn<int>("first");
    QTest::addColumn<int>("last");
    for (const char* m : {"tiny_mlp", "mlp", "deep_mlp", "mnist_cnn", "cifar10_cnn", "resnet20", "vgg_bn"})
        for (int b : {1, 128}) QTest::newRow(qPrintable(QStringLiteral("%1 batch %2").arg(m).arg(b))) << QString(m) << b << 0 << -1;
    // Stages (model parallelism): a first, a middle and a last one.
    QTest::newRow("mnist_cnn layers 0-3") << QString("mnist_cnn") << 16 << 0 << 3;
    QTest::newRow("mnist_cnn layers 4-7") << QString("mnist_cnn") << 16 << 4 << 7;
    QTest::newRow("mnist_cnn layers 8-end") << QString("mnist_cnn") << 16 << 8 << -1;
    QTest::newRow("deep_mlp layers 5-11") << QString("deep_mlp") << 8 << 5 << 11;
    // A graph's stages start at a cut between blocks (s1b2_conv1, layer 10; s2b1_conv1, layer 24).
    QTest::newRow("resnet20 layers 10-23") << QString("resnet20") << 8 << 10 << 23;
    QTest::newRow("resnet20 layers 24-end") << QString("resnet20") << 8 << 24 << -1;
}

void TestModel::memoryEstimateMatchesTheBuiltNetwork() {
    QFETCH(QString, model);
    QFETCH(int, batch);
    QFETCH(int, first);
    QFETCH(int, last);
    const tb::ModelSpec spec = tb::findModel(model.toStdString());
    auto backend = tb::makeCpuBackend(1);
    const tb::Network net(spec, *backend, batch, tb::LayerRange{first, last});
    const tb::NetworkMemory built = net.memoryUse(), estimated = tb::estimateNetworkMemory(spec, batch, {first, last});
    QCOMPARE(estimated.params, built.params);
    QCOMPARE(estimated.grads, built.grads);
    QCOMPARE(estimated.activations, built.activations);
    QCOMPARE(estimated.statistics, built.statistics);
    QVERIFY2(estimated.saved >= built.saved && estimated.saved <= 4 * built.saved,
             qPrintable(QStringLiteral("saved: estimated %1, built %2").arg(estimated.saved).arg(built.saved)));
    // The layers' own workspace (a fused dense ReLU's masked gradient), which the backend's may
    // exceed (its convolutions' algorithms).
    bool convolutions = false;
    for (const tb::LayerSpec& l : spec.layers) convolutions |= l.type == tb::LayerType::Conv2d;
    // (Without convolutions nothing else asks for any: exactly the estimate.)
    QVERIFY2(convolutions ? estimated.workspace <= built.workspace : estimated.workspace == built.workspace,
             qPrintable(QStringLiteral("workspace: estimated %1, built %2").arg(estimated.workspace).arg(built.workspace)));
}

// Host and GPU needs against what each memory has: the message names the memory, the estimate
// and its parts; an unknown amount (0) is not checked.
void TestModel::memoryEstimateRefusesWhatCannotFit() {
    const tb::ModelSpec spec = tb::findModel("mnist_cnn");
    tb::DeploymentPlan plan;
    plan.towers = {tb::Device{tb::DeviceType::Cuda, 0}, tb::Device{tb::DeviceType::Cuda, 0}};
    plan.variables = tb::VariablePlacement::Cpu;
    const auto needs = tb::estimateRunMemory(spec, plan, 128, 1, false, 50 << 20);
    QCOMPARE(int(needs.size()), 2);  // host (datasets, variables) and gpu:0 (two towers)
    const tb::NetworkMemory one = tb::estimateNetworkMemory(spec, 128);
    size_t gpu = 0, host = 0;
    for (const tb::MemoryNeed& n : needs) (n.device.type == tb::DeviceType::Cuda ? gpu : host) = n.bytes;
    QCOMPARE(one.workspace, size_t(0));  // fc1's fused ReLU: fc2 masks its gradient, from the mask fc1 keeps
    QVERIFY(one.saved >= tb::ew::reluMaskBytes(128, 1024));
    QCOMPARE(gpu, 2 * (one.params + one.grads + one.activations + one.saved + one.workspace + (size_t(32) << 20)));
    QCOMPARE(host, size_t(50 << 20) + 2 * one.params);  // datasets, variables and their momentum
    QString message;
    try {
        tb::checkMemoryFits(needs, [&](const tb::Device& d) { return d.type == tb::DeviceType::Cuda ? gpu - 1 : size_t(0); },
                            "--model mnist_cnn");
    } catch (const tb::Error& e) {
        message = e.what();
    }
    QVERIFY2(message.startsWith("--model mnist_cnn: this run needs about") && message.contains("of gpu:0's memory") &&
                 message.contains("2 towers") && message.contains("(2 x "),
             qPrintable(message));
    tb::checkMemoryFits(needs, [&](const tb::Device& d) { return d.type == tb::DeviceType::Cuda ? gpu : size_t(0); },
                        "--model mnist_cnn");  // fits exactly; the host's amount unknown
    // bf16: each tower adds its bf16 copies, half the bytes of the weights and the activations.
    for (const tb::MemoryNeed& n : tb::estimateRunMemory(spec, plan, 128, 1, false, 50 << 20, tb::MatmulPrecision::Bf16))
        if (n.device.type == tb::DeviceType::Cuda) QCOMPARE(n.bytes, gpu + 2 * ((one.params + one.activations) / 2));
        else QCOMPARE(n.bytes, host);  // GPU towers copy the variables: nothing rounded on the host
    // CPU towers read host-held variables in place: in bf16 the update keeps them rounded too.
    plan.towers = {tb::Device{}, tb::Device{}};
    const auto cpuNeed = [&](tb::MatmulPrecision p) { return tb::estimateRunMemory(spec, plan, 128, 1, false, 0, p)[0].bytes; };
    QCOMPARE(cpuNeed(tb::MatmulPrecision::Bf16),
             cpuNeed(tb::MatmulPrecision::Fp32) + 2 * ((one.params + one.activations) / 2) + one.params / 2);
}

void TestModel::bindParamsUsesTheExternalBuffer() {
    // A network bound to an external buffer computes with it (and writes gradients for it) as if
    // the values were in its own buffer.
    auto backend = tb::makeCpuBackend(1);
    const tb::ModelSpec spec = tb::findModel("mnist_cnn");
    tb::Network own(spec, *backend, 2), bound(spec, *backend, 2);
    std::vector<float> external = own.initialParams(11);
    std::copy(external.begin(), external.end(), own.params());
    std::fill(bound.params(), bound.params() + bound.paramCount(), 0.f);  // its own buffer: zeros
    bound.bindParams(external.data());
    QCOMPARE(bound.params(), external.data());
    for (tb::Network* net : {&own, &bound}) {
        for (int i = 0; i < 2 * 784; ++i) net->input()[i] = float((i * 13) % 29) / 29.f;
        net->labels()[0] = 1;
        net->labels()[1] = 6;
        float stats[3] = {0, 0, 0};
        net->forward(nullptr, true, 5, 2, stats);
        net->backward(nullptr);
    }
    backend->synchronize(nullptr);
    QVERIFY(std::equal(own.probs(), own.probs() + 20, bound.probs()));
    QVERIFY(std::equal(own.grads(), own.grads() + own.paramCount(), bound.grads()));
    // A different external buffer changes the output.
    std::vector<float> other = own.initialParams(12);
    bound.bindParams(other.data());
    float stats[3] = {0, 0, 0};
    bound.forward(nullptr, false, 0, 2, stats);
    QVERIFY(!std::equal(own.probs(), own.probs() + 20, bound.probs()));
}

// ---------------------------------------------------------------- bad model files

void TestModel::badModelFiles_data() {
    QTest::addColumn<QByteArray>("json");
    QTest::addColumn<QStringList>("expect");
    const QByteArray in = R"("input": [1, 8, 8], )";
    QTest::newRow("malformed JSON") << QByteArray(R"({"input": [1, 8, 8], "layers": [)")
                                    << QStringList{"malformed JSON"};
    QTest::newRow("not an object") << QByteArray("[1, 2, 3]") << QStringList{"must hold one JSON object"};
    QTest::newRow("missing input") << QByteArray(R"({"layers": [{"type": "flatten"}]})")
                                   << QStringList{"'input' must be [channels, height, width]"};
    QTest::newRow("short input") << QByteArray(R"({"input": [1, 28], "layers": [{"type": "flatten"}]})")
                                 << QStringList{"'input' must be [channels, height, width]"};
    QTest::newRow("zero input") << QByteArray(R"({"input": [1, 0, 28], "layers": [{"type": "flatten"}]})")
                                << QStringList{"'input' must be [channels, height, width] of positive sizes"};
    QTest::newRow("empty layers") << QByteArray(R"({"input": [1, 8, 8], "layers": []})")
                                  << QStringList{"'layers' must be a non-empty array"};
    QTest::newRow("no layers") << QByteArray(R"({"input": [1, 8, 8]})")
                               << QStringList{"'layers' must be a non-empty array"};
    QTest::newRow("unknown type conv3d")
        << QByteArray("{" + in + R"("layers": [{"type": "conv3d", "filters": 4, "kernel": 3}]})")
        << QStringList{"layer 0", "unknown layer type 'conv3d'", "expected conv2d"};
    QTest::newRow("typo in a layer's field")
        << QByteArray("{" + in + R"("layers": [{"type": "conv2d", "name": "c1", "fitlers": 4, "kernel": 3}]})")
        << QStringList{"layer 'c1'", "unknown field 'fitlers' (did you mean 'filters'?)", "it may have type, name"};
    QTest::newRow("another layer type's field")
        << QByteArray("{" + in + R"("layers": [{"type": "flatten"}, {"type": "dense", "name": "fc", "units": 2, "kernel": 3}]})")
        << QStringList{"layer 'fc'", "unknown field 'kernel'", "units"};
    QTest::newRow("typo at the top")
        << QByteArray(R"({"inputs": [1, 8, 8], "layers": [{"type": "flatten"}]})")
        << QStringList{"unknown field 'inputs' (did you mean 'input'?)"};
    QTest::newRow("typo in an initialiser")
        << QByteArray("{" + in + R"("layers": [{"type": "flatten"}, {"type": "dense", "name": "fc", "units": 2, "init": {"type": "truncated_normal", "stdev": 0.1}}]})")
        << QStringList{"layer 'fc' init", "unknown field 'stdev' (did you mean 'stddev'?)"};
    QTest::newRow("conv2d without filters")
        << QByteArray("{" + in + R"("layers": [{"type": "conv2d", "name": "c1", "kernel": 3}, {"type": "flatten"}]})")
        << QStringList{"layer 'c1'", "'filters' must be a positive integer, got 0"};
    QTest::newRow("negative weight_decay")
        << QByteArray("{" + in + R"("layers": [{"type": "flatten"}, {"type": "dense", "name": "fc", "units": 10, "weight_decay": -0.1}]})")
        << QStringList{"layer 'fc'", "weight_decay must not be negative"};
    QTest::newRow("flatten past 2^31 values")  // int(4294967296) wrapped to 0 before
        << QByteArray(R"({"input": [256, 4096, 4096], "layers": [{"type": "flatten", "name": "flat"}, {"type": "dense", "units": 2}]})")
        << QStringList{"layer 'flat'", "gives 4294967296 values, more than the 2,147,483,647"};
    QTest::newRow("dropout keep 0")
        << QByteArray("{" + in + R"("layers": [{"type": "flatten"}, {"type": "dropout", "name": "drop", "keep": 0}, {"type": "dense", "units": 2}]})")
        << QStringList{"layer 'drop'", "keep must be in (0, 1]"};
    QTest::newRow("dropout keep 1.5")
        << QByteArray("{" + in + R"("layers": [{"type": "flatten"}, {"type": "dropout", "name": "drop", "keep": 1.5}, {"type": "dense", "units": 2}]})")
        << QStringList{"layer 'drop'", "keep must be in (0, 1]"};
    QTest::newRow("dense on non-flat input")
        << QByteArray("{" + in + R"("layers": [{"type": "dense", "name": "fc", "units": 10}]})")
        << QStringList{"layer 'fc'", "(1, 8, 8) is not flat", "flatten"};
    QTest::newRow("VALID conv too big")
        << QByteArray(R"({"input": [1, 4, 4], "layers": [{"type": "conv2d", "name": "big", "filters": 2, "kernel": 5, "padding": "valid"}, {"type": "flatten"}]})")
        << QStringList{"layer 'big'", "5x5 VALID convolution does not fit its input (1, 4, 4)"};
    QTest::newRow("pool too big")
        << QByteArray(R"({"input": [1, 2, 2], "layers": [{"type": "maxpool", "name": "p", "size": 3, "padding": "valid"}, {"type": "flatten"}]})")
        << QStringList{"layer 'p'", "pooling window does not fit its input (1, 2, 2)"};
    QTest::newRow("input normalisation multiplying by zero")
        << QByteArray("{" + in + R"("input_normalisation": {"multiply": 0, "add": -0.5}, "layers": [{"type": "flatten"}]})")
        << QStringList{"input_normalisation: multiply must be a non-zero number"};
    QTest::newRow("input normalisation of an unknown field")
        << QByteArray("{" + in + R"("input_normalisation": {"scale": 2}, "layers": [{"type": "flatten"}]})")
        << QStringList{"input_normalisation", "scale"};
    QTest::newRow("input normalisation not an object")
        << QByteArray("{" + in + R"("input_normalisation": 0.5, "layers": [{"type": "flatten"}]})")
        << QStringList{"input_normalisation must be an object"};
    QTest::newRow("avgpool too big")
        << QByteArray(R"({"input": [1, 2, 2], "layers": [{"type": "avgpool", "name": "a", "size": 3, "padding": "valid"}, {"type": "flatten"}]})")
        << QStringList{"layer 'a'", "pooling window does not fit its input (1, 2, 2)"};
    QTest::newRow("global_avgpool with a size")
        << QByteArray("{" + in + R"("layers": [{"type": "global_avgpool", "name": "gap", "size": 2}, {"type": "dense", "units": 2}]})")
        << QStringList{"layer 'gap'", "size"};
    QTest::newRow("last layer not flat")
        << QByteArray("{" + in + R"("layers": [{"type": "conv2d", "filters": 4, "kernel": 3}]})")
        << QStringList{"last layer must output a flat vector", "(4, 8, 8)"};
    QTest::newRow("filters of wrong type")
        << QByteArray("{" + in + R"("layers": [{"type": "conv2d", "name": "c", "filters": "many", "kernel": 3}, {"type": "flatten"}]})")
        << QStringList{"layer 'c'", "field 'filters' has the wrong type (string, expected an integer)"};
    QTest::newRow("layer not an object")
        << QByteArray("{" + in + R"("layers": [{"type": "flatten"}, 42]})")
        << QStringList{"layer 1 is not a JSON object"};
    QTest::newRow("bad padding")
        << QByteArray("{" + in + R"("layers": [{"type": "conv2d", "name": "c", "filters": 2, "kernel": 3, "padding": "full"}, {"type": "flatten"}]})")
        << QStringList{"layer 'c'", "padding must be \"same\" or \"valid\", got \"full\""};
    QTest::newRow("unknown initialiser")
        << QByteArray("{" + in + R"("layers": [{"type": "flatten"}, {"type": "dense", "name": "fc", "units": 2, "init": {"type": "he"}}]})")
        << QStringList{"layer 'fc' init", "unknown initialiser 'he'"};
    QTest::newRow("non-positive stddev")
        << QByteArray("{" + in + R"("layers": [{"type": "flatten"}, {"type": "dense", "name": "fc", "units": 2, "init": {"type": "truncated_normal", "stddev": 0}}]})")
        << QStringList{"layer 'fc' init", "stddev must be positive"};
    QTest::newRow("lrn radius")
        << QByteArray("{" + in + R"("layers": [{"type": "lrn", "name": "n", "depth_radius": 65}, {"type": "flatten"}]})")
        << QStringList{"layer 'n'", "depth_radius must be in 0..64"};
    // Models as graphs.
    const QByteArray head = "{" + in + R"("layers": [{"type": "conv2d", "name": "a", "filters": 2, "kernel": 3}, )";
    const QByteArray tail = R"(, {"type": "global_avgpool", "name": "gap"}, {"type": "flatten", "name": "f"}]})";
    QTest::newRow("a cycle")
        << QByteArray(head + R"({"type": "relu", "name": "b", "inputs": ["d"]}, {"type": "relu", "name": "c", "inputs": ["b"]},
                                {"type": "add", "name": "d", "inputs": ["a", "c"]})" + tail)
        << QStringList{"inputs form a cycle", "'b' -> 'c' -> 'd' -> 'b'"};
    QTest::newRow("an input no layer has")
        << QByteArray(head + R"({"type": "add", "name": "s", "inputs": ["a", "bb"]})" + tail)
        << QStringList{"layer 's' reads 'bb', which no layer is"};
    QTest::newRow("an input misspelt")
        << QByteArray(head + R"({"type": "relu", "name": "r"}, {"type": "add", "name": "s", "inputs": ["a", "rr"]})" + tail)
        << QStringList{"layer 's' reads 'rr'", "did you mean 'r'?"};
    QTest::newRow("an unused layer")
        << QByteArray(head + R"({"type": "relu", "name": "lost"}, {"type": "relu", "name": "r", "inputs": ["a"]})" + tail)
        << QStringList{"layer 'lost' is read by no other layer", "only the last layer, 'f'"};
    QTest::newRow("add of two shapes")
        << QByteArray(head + R"({"type": "conv2d", "name": "b", "filters": 3, "kernel": 3}, {"type": "add", "name": "s", "inputs": ["a", "b"]})" + tail)
        << QStringList{"layer 's'", "add needs inputs of one shape", "(2, 8, 8) and (3, 8, 8)"};
    QTest::newRow("concat of two sizes")
        << QByteArray(head + R"({"type": "maxpool", "name": "p", "size": 2}, {"type": "concat", "name": "j", "inputs": ["a", "p"]})" + tail)
        << QStringList{"layer 'j'", "concat needs inputs of one height and width", "(2, 8, 8) and (2, 4, 4)"};
    QTest::newRow("add of one input")
        << QByteArray(head + R"({"type": "add", "name": "s", "inputs": ["a"]})" + tail)
        << QStringList{"layer 's'", "add joins two or more layers"};
    QTest::newRow("a relu of two inputs")
        << QByteArray(head + R"({"type": "relu", "name": "r", "inputs": ["a", "a"]})" + tail)
        << QStringList{"layer 'r'", "a relu layer reads one input, not 2"};
    QTest::newRow("two layers of one name")
        << QByteArray(head + R"({"type": "relu", "name": "a"})" + tail)
        << QStringList{"two layers are named 'a'"};
    QTest::newRow("a layer named input")
        << QByteArray(head + R"({"type": "relu", "name": "input"})" + tail)
        << QStringList{"may not be named 'input'"};
    QTest::newRow("inputs not names")
        << QByteArray(head + R"({"type": "add", "name": "s", "inputs": ["a", 3]})" + tail)
        << QStringList{"layer 's'", "'inputs' must be a non-empty array of layer names"};
    QTest::newRow("batch norm momentum of PyTorch's sense")
        << QByteArray(head + R"({"type": "batch_norm", "name": "bn", "momentum": 1.0})" + tail)
        << QStringList{"layer 'bn'", "momentum must be in [0, 1)", "PyTorch's momentum 0.1 is 0.9"};
    QTest::newRow("batch norm epsilon")
        << QByteArray(head + R"({"type": "batch_norm", "name": "bn", "epsilon": 0})" + tail)
        << QStringList{"layer 'bn'", "epsilon must be in (0, 1]"};
    QTest::newRow("a dense layer without its bias")
        << QByteArray("{" + in + R"("layers": [{"type": "flatten"}, {"type": "dense", "name": "fc", "units": 2, "bias": false}]})")
        << QStringList{"layer 'fc'", "a dense layer keeps its bias"};
}

void TestModel::badModelFiles() {
    QFETCH(QByteArray, json);
    QFETCH(QStringList, expect);
    QTemporaryDir tmp;
    const QString name = QStringLiteral("bad_model.json");
    const QString msg = buildError(tmp, name, json);
    QVERIFY2(!msg.startsWith('<'), qPrintable(msg));
    QVERIFY2(msg.contains(tmp.filePath(name)), qPrintable(msg));
    for (const QString& part : expect) QVERIFY2(msg.contains(part), qPrintable(msg + "  (expected: " + part + ")"));
    // One sentence: messages are printed as one line by the CLI.
    QVERIFY2(!msg.contains('\n'), qPrintable(msg));
}

void TestModel::countsMustBeIntegers_data() {
    QTest::addColumn<QByteArray>("json");
    QTest::addColumn<QStringList>("expect");
    const QByteArray in = R"("input": [1, 8, 8], )";
    // A fraction or a boolean is not a count: nlohmann's get<int>() would truncate 2.5 to 2 and
    // turn true into 1, so the parser must check the JSON type itself.
    QTest::newRow("fractional filters")
        << QByteArray("{" + in + R"("layers": [{"type": "conv2d", "name": "c", "filters": 2.5, "kernel": 3}, {"type": "flatten"}]})")
        << QStringList{"layer 'c'", "'filters'"};
    QTest::newRow("boolean units")
        << QByteArray("{" + in + R"("layers": [{"type": "flatten"}, {"type": "dense", "name": "fc", "units": true}]})")
        << QStringList{"layer 'fc'", "'units'"};
    QTest::newRow("huge units")
        << QByteArray("{" + in + R"("layers": [{"type": "flatten"}, {"type": "dense", "name": "fc", "units": 10000000000}]})")
        << QStringList{"layer 'fc'", "'units'"};
    QTest::newRow("fractional input")
        << QByteArray(R"({"input": [1, 8.5, 8], "layers": [{"type": "flatten"}]})")
        << QStringList{"'input'"};
}

void TestModel::countsMustBeIntegers() { badModelFiles(); }

void TestModel::badModelFileMissing() {
    QTemporaryDir tmp;
    const QString path = tmp.filePath("absent.json");
    QString msg = errorOf([&] { tb::loadModelSpec(str(path)); });
    QVERIFY2(mentions(msg, {path, "cannot open model file"}), qPrintable(msg));
    // A path (has '/' or ends in .json) is never looked up by name.
    msg = errorOf([&] { tb::findModel(str(path)); });
    QVERIFY2(mentions(msg, {path, "cannot open model file"}), qPrintable(msg));
}

void TestModel::badBatch() {
    auto backend = tb::makeCpuBackend(1);
    const tb::ModelSpec spec = tb::findModel("tiny_mlp");
    QString msg = errorOf([&] { tb::Network net(spec, *backend, 0); });
    QVERIFY2(mentions(msg, {"batch size must be at least 1, got 0"}), qPrintable(msg));
}

void TestModel::findModelSearchPath() {
    QString msg = errorOf([] { tb::findModel("no_such_model"); });
    QVERIFY2(mentions(msg, {"--model", "no_such_model", "no_such_model.json"}), qPrintable(msg));
    const std::vector<std::string> dirs = tb::modelSearchPath();
    QVERIFY(!dirs.empty());
    for (const std::string& d : dirs) QVERIFY2(msg.contains(QString::fromStdString(d)), qPrintable(msg));
    QVERIFY2(msg.contains(tbtest::sourcePath("resources/models")), qPrintable(msg));

    // TOWERBENCH_MODELS_DIR folders come first, so a user's model shadows a shipped one.
    QTemporaryDir a, b;
    const QByteArray old = qgetenv("TOWERBENCH_MODELS_DIR");
    const bool hadOld = qEnvironmentVariableIsSet("TOWERBENCH_MODELS_DIR");
    qputenv("TOWERBENCH_MODELS_DIR", (a.path() + ":" + b.path()).toLocal8Bit());
    writeText(b.filePath("mlp.json"),
              R"({"name": "my_mlp", "input": [2, 1, 1], "layers": [{"type": "dense", "units": 3}]})");
    const tb::ModelSpec mine = tb::findModel("mlp");
    const tb::ModelSpec shipped = tb::findModel("mnist_cnn");
    msg = errorOf([] { tb::findModel("no_such_model"); });
    if (hadOld) qputenv("TOWERBENCH_MODELS_DIR", old);
    else qunsetenv("TOWERBENCH_MODELS_DIR");
    QCOMPARE(mine.name, std::string("my_mlp"));
    QCOMPARE(mine.source, str(b.filePath("mlp.json")));
    QCOMPARE(shipped.name, std::string("mnist_cnn"));
    QVERIFY2(mentions(msg, {a.path(), b.path()}), qPrintable(msg));
    QVERIFY2(msg.indexOf(a.path()) < msg.indexOf(tbtest::sourcePath("resources/models")), qPrintable(msg));
}

void TestModel::tfPaddingValues() {
    struct Case {
        int in, kernel, stride;
        bool same;
        int out, before, after;
    } cases[] = {
        {28, 5, 1, true, 28, 2, 2},  {28, 2, 2, true, 14, 0, 0}, {24, 3, 2, true, 12, 0, 1},
        {12, 3, 2, true, 6, 0, 1},   {7, 2, 2, true, 4, 0, 1},   {28, 5, 1, false, 24, 0, 0},
        {4, 5, 1, false, 0, 0, 0},   {7, 3, 2, false, 3, 0, 0},  {1, 5, 1, true, 1, 2, 2},
    };
    for (const Case& c : cases) {
        const tb::AxisPadding p = tb::tfPadding(c.in, c.kernel, c.stride, c.same);
        const QString what = QStringLiteral("in %1 k %2 s %3 %4").arg(c.in).arg(c.kernel).arg(c.stride).arg(c.same);
        QVERIFY2(p.out == c.out && p.before == c.before && p.after == c.after,
                 qPrintable(what + QStringLiteral(": got %1 %2 %3").arg(p.out).arg(p.before).arg(p.after)));
    }
}

// ---------------------------------------------------------------- initialisers

void TestModel::initialParamsDeterministic() {
    auto backend = tb::makeCpuBackend(1);
    tb::Network net(tb::findModel("mnist_cnn"), *backend, 2);
    const std::vector<float> a = net.initialParams(42), b = net.initialParams(42), c = net.initialParams(43);
    QVERIFY(a == b);
    QCOMPARE(a.size(), c.size());
    // Weights differ everywhere but by coincidence; constant biases are the same.
    const auto& info = net.paramInfos();
    const auto& off = net.paramOffsets();
    for (size_t t = 0; t < info.size(); ++t) {
        const size_t n = size_t(info[t].shape.numel());
        size_t same = 0;
        for (size_t i = 0; i < n; ++i) same += a[size_t(off[t]) + i] == c[size_t(off[t]) + i];
        if (info[t].init.kind == tb::InitSpec::Kind::Constant) QCOMPARE(same, n);
        else QVERIFY2(same < n / 100 + 2, qPrintable(QString::fromStdString(info[t].name) + ": " + QString::number(same)));
    }
    // A second network of another batch size draws the same values for the same seed.
    tb::Network other(tb::findModel("mnist_cnn"), *backend, 5);
    QVERIFY(other.initialParams(42) == a);
}

void TestModel::initialParamsFollowTheSpec() {
    // Every tensor of every shipped model is drawn as its file says: constants exactly, truncated
    // normals within 2 stddev and reaching past 1.5 stddev, Glorot within sqrt(6 / (fanIn + fanOut))
    // and reaching past 0.9 of it.
    auto backend = tb::makeCpuBackend(1);
    for (const char* model : {"mlp", "deep_mlp", "mnist_cnn", "cifar10_cnn", "tiny_mlp", "resnet20_mnist"}) {
        tb::Network net(tb::findModel(model), *backend, 2);
        const std::vector<float> p = net.initialParams(3);
        const auto& info = net.paramInfos();
        const auto& off = net.paramOffsets();
        for (size_t t = 0; t < info.size(); ++t) {
            const auto first = p.begin() + off[t], last = first + info[t].shape.numel();
            const QString what = QStringLiteral("%1 %2").arg(model, QString::fromStdString(info[t].name));
            const tb::InitSpec& init = info[t].init;
            double limit = 0, reach = 0;
            switch (init.kind) {
            case tb::InitSpec::Kind::Constant:
                QVERIFY2(std::all_of(first, last, [&](float x) { return x == init.value; }), qPrintable(what));
                continue;
            case tb::InitSpec::Kind::TruncatedNormal:
                limit = 2 * init.stddev;
                reach = 1.5 * init.stddev;
                break;
            case tb::InitSpec::Kind::Glorot:
                limit = roundUp(std::sqrt(6.0 / double(info[t].fanIn + info[t].fanOut)));
                reach = 0.9 * limit;
                break;
            case tb::InitSpec::Kind::HeNormal: {  // N(0, 2 / fanIn): the sample's spread within 10%
                double sq = 0;
                for (auto it = first; it != last; ++it) sq += double(*it) * double(*it);
                const double sd = std::sqrt(sq / double(last - first)), want = std::sqrt(2.0 / double(info[t].fanIn));
                QVERIFY2(std::abs(sd / want - 1) < 0.1, qPrintable(what + QStringLiteral(": stddev %1, not %2").arg(sd).arg(want)));
                continue;
            }
            }
            QVERIFY2(info[t].name.ends_with("/weights"), qPrintable(what));
            QVERIFY2(std::all_of(first, last, [&](float x) { return std::abs(x) <= limit; }), qPrintable(what));
            QVERIFY2(std::any_of(first, last, [&](float x) { return std::abs(x) > reach; }), qPrintable(what));
        }
    }
    // Spelled out for mlp (glorot, "bias": 0.0): hidden1 (512, 784) within sqrt(6 / (784 + 512)).
    tb::Network mlp(tb::findModel("mlp"), *backend, 2);
    QCOMPARE(mlp.paramInfos()[0].init.kind, tb::InitSpec::Kind::Glorot);
    QCOMPARE(mlp.paramInfos()[0].fanIn, int64_t(784));
    QCOMPARE(mlp.paramInfos()[0].fanOut, int64_t(512));
    const std::vector<float> q = mlp.initialParams(3);
    const float limit = roundUp(std::sqrt(6.0 / (784 + 512)));
    const auto w = q.begin(), wEnd = q.begin() + 784 * 512;
    QVERIFY(std::all_of(w, wEnd, [&](float x) { return std::abs(x) <= limit; }));
    QVERIFY(*std::max_element(w, wEnd) > 0.99f * limit);
    QVERIFY(std::all_of(wEnd, wEnd + 512, [](float x) { return x == 0.f; }));
    // and for cifar10_cnn's conv1 (truncated normal, stddev 0.05).
    tb::Network cifar(tb::findModel("cifar10_cnn"), *backend, 2);
    QCOMPARE(cifar.paramInfos()[0].init.kind, tb::InitSpec::Kind::TruncatedNormal);
    QCOMPARE(cifar.paramInfos()[0].init.stddev, 0.05f);
    const std::vector<float> c = cifar.initialParams(3);
    QVERIFY(std::all_of(c.begin(), c.begin() + 64 * 3 * 25, [](float x) { return std::abs(x) <= 0.1f; }));
}

void TestModel::truncatedNormalStatistics() {
    const float stddev = 0.1f;
    tb::InitSpec spec{tb::InitSpec::Kind::TruncatedNormal, stddev, 0.f};
    std::vector<float> v(100000);
    tb::initialise(spec, v, 10, 10, 12345);
    // Never beyond 2 stddev (resampled, as tf.truncated_normal).
    for (float x : v) QVERIFY2(std::abs(x) <= 2 * stddev, qPrintable(QString::number(x)));
    // A standard normal cut at +-2 has variance 1 - 4 phi(2) / (Phi(2) - Phi(-2)) = 0.8796^2.
    const double phi2 = std::exp(-2.0) / std::sqrt(2 * std::numbers::pi);
    const double mass = std::erf(2.0 / std::sqrt(2.0));
    const double factor = std::sqrt(1 - 4 * phi2 / mass);
    QVERIFY(std::abs(factor - 0.8796) < 1e-3);
    auto [mean, sd] = meanStd(v);
    QVERIFY2(std::abs(mean) < 0.01 * stddev, qPrintable(QString::number(mean)));
    QVERIFY2(std::abs(sd / (stddev * factor) - 1) < 0.01,
             qPrintable(QStringLiteral("std %1, expected %2").arg(sd).arg(stddev * factor)));
    // The tails reach close to the cut: (P(1.9 < |z| < 2) / P(|z| < 2) = 1.25%).
    const auto tail = std::count_if(v.begin(), v.end(), [&](float x) { return std::abs(x) > 1.9f * stddev; });
    QVERIFY2(tail > 1000 && tail < 1500, qPrintable(QString::number(tail)));
    // Same seed, same draws; another seed, other draws.
    std::vector<float> again(100000), other(100000);
    tb::initialise(spec, again, 10, 10, 12345);
    tb::initialise(spec, other, 10, 10, 12346);
    QVERIFY(again == v);
    QVERIFY(other != v);
}

void TestModel::glorotLimits() {
    tb::InitSpec spec{tb::InitSpec::Kind::Glorot, 0.1f, 0.f};
    for (auto [fanIn, fanOut] : {std::pair<int64_t, int64_t>{784, 512}, {2, 64}, {800, 1600}}) {
        std::vector<float> v(50000);
        tb::initialise(spec, v, fanIn, fanOut, uint64_t(fanIn));
        const double limit = std::sqrt(6.0 / double(fanIn + fanOut));
        for (float x : v) QVERIFY2(std::abs(x) <= roundUp(limit), qPrintable(QString::number(x)));
        auto [mean, sd] = meanStd(v);
        // Uniform(-L, L): mean 0, stddev L / sqrt(3).
        QVERIFY2(std::abs(mean) < 0.02 * limit, qPrintable(QString::number(mean)));
        QVERIFY2(std::abs(sd / (limit / std::sqrt(3.0)) - 1) < 0.02, qPrintable(QString::number(sd)));
        QVERIFY(*std::max_element(v.begin(), v.end()) > 0.999 * limit);
        QVERIFY(*std::min_element(v.begin(), v.end()) < -0.999 * limit);
    }
}

void TestModel::constantExact() {
    for (float value : {0.f, 0.1f, -3.25f}) {
        tb::InitSpec spec{tb::InitSpec::Kind::Constant, 0.5f, value};
        std::vector<float> v(1000, 123.f);
        tb::initialise(spec, v, 1, 1, 9);
        QVERIFY(std::all_of(v.begin(), v.end(), [&](float x) { return x == value; }));
    }
}

void TestModel::parseInitKindErrors() {
    QCOMPARE(tb::parseInitKind("truncated_normal", "x"), tb::InitSpec::Kind::TruncatedNormal);
    QCOMPARE(tb::parseInitKind("constant", "x"), tb::InitSpec::Kind::Constant);
    QCOMPARE(tb::parseInitKind("glorot", "x"), tb::InitSpec::Kind::Glorot);
    QCOMPARE(tb::parseInitKind("glorot_uniform", "x"), tb::InitSpec::Kind::Glorot);
    QString msg = errorOf([] { tb::parseInitKind("xavier", "m.json: layer 'fc' init"); });
    QVERIFY2(mentions(msg, {"m.json: layer 'fc' init", "unknown initialiser 'xavier'"}), qPrintable(msg));
}

QTEST_GUILESS_MAIN(TestModel)
#include "tst_model.moc"
