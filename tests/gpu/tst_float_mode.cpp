// tst_float_mode: every thread that runs engine arithmetic flushes denormals to zero (FTZ and
// DAZ), so that Adam's decaying moments never hit Intel's 100x denormal penalty.
//   (a) flushDenormals() makes denormal arithmetic give zero on this thread and threads it starts
//   (b) whole runs (2 sync towers with evaluation and a moving average, 2 async towers, replicas
//       averaged every 2 steps) on a CPU backend that checks, at every op, the calling thread,
//       the OpenMP team it leads (oneDNN's and our loops' threads) and OpenBLAS (a denormal
//       scaled there must come back zero)
//   (c) the input pipeline's prefetch thread (a denormal sample comes out as zero)
// This program's own main thread keeps the default mode, so nothing is inherited by accident.
#include <omp.h>

#include <atomic>
#include <cfloat>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/registry.hpp"
#include "data/pipeline.hpp"
#include "engine/trainer.hpp"
#include "forwarding_backend.hpp"
#include "plain_check.hpp"
#include "util/float_mode.hpp"

namespace {

const float kDenormal = FLT_MIN / 64;  // 2^-132

// The CPU backend, checking the float mode of whoever calls it.
class ModeProbe final : public tbtest::ForwardingBackend {
public:
    explicit ModeProbe(int threads) : ForwardingBackend(tb::makeCpuBackend(threads)) {}
    void onCompute(const char* op) override {
        ++calls;
        if (!tb::denormalsFlushed()) miss(op, "the calling thread");
        else if (!tb::denormalsFlushedInTeam(omp_get_max_threads())) miss(op, "its OpenMP team");
        else if (std::string(op) == "axpy" || std::string(op) == "scale") checkBlas(op);
    }
    static inline std::atomic<int64_t> calls{0}, misses{0};
    static inline std::mutex mutex;
    static inline std::string firstMiss;

private:
    void miss(const char* op, const char* where) {
        ++misses;
        std::lock_guard lock(mutex);
        if (firstMiss.empty()) firstMiss = std::string(op) + " on " + where;
    }
    // OpenBLAS computes the vector arithmetic: a denormal times one must come back as zero.
    void checkBlas(const char* op) {
        std::vector<float> v(100000, kDenormal);
        inner().scale(nullptr, v.data(), 1.f, v.size());
        for (float x : v)
            if (x != 0.f) return miss(op, "OpenBLAS");
    }
};

std::string writeModel(const std::string& dir) {
    const std::string path = dir + "/probe_cnn.json";
    std::ofstream(path) << R"({"name": "probe_cnn", "input": [1, 28, 28], "layers": [
        {"type": "conv2d", "name": "conv1", "filters": 8, "kernel": 5, "padding": "same", "bias": 0.1},
        {"type": "relu"}, {"type": "maxpool", "name": "pool1", "size": 2, "stride": 2},
        {"type": "lrn", "name": "norm1", "depth_radius": 2, "alpha": 0.001, "beta": 0.75},
        {"type": "flatten"}, {"type": "dense", "name": "fc1", "units": 32, "weight_decay": 0.004},
        {"type": "relu"}, {"type": "dropout", "keep": 0.8},
        {"type": "dense", "name": "logits", "units": 10}]})";
    return path;
}

void run(const char* what, tb::RunConfig c) {
    const int64_t before = ModeProbe::calls;
    tb::Trainer(c).run();
    std::printf("%s: %lld backend calls checked\n", what, (long long)(ModeProbe::calls - before));
    CHECK(ModeProbe::calls > before, "%s made no backend calls", what);
}

}  // namespace

int main() {
    CHECK(!tb::denormalsFlushed(), "the test's main thread must start in the default mode");
    // (a)
    std::thread([] {
        tb::flushDenormals();
        volatile float d = kDenormal;
        CHECK(d * 1.f == 0.f, "a flushed thread still makes denormals");
        std::thread([] { CHECK(tb::denormalsFlushed(), "a thread started by a flushed one is not flushed"); }).join();
        CHECK(tb::denormalsFlushedInTeam(4) || (tb::flushDenormalsInTeam(4), tb::denormalsFlushedInTeam(4)),
              "flushDenormalsInTeam left a team thread unflushed");
    }).join();

    // (b)
    const std::string dir = std::filesystem::temp_directory_path() / "tb_float_mode";
    std::filesystem::create_directories(dir);
    auto previous = tb::setBackendFactory(tb::DeviceType::Cpu, [](const tb::Device&, const tb::BackendOptions& o) {
        return std::shared_ptr<tb::Backend>(new ModeProbe(o.cpuThreads));
    });
    tb::RunConfig c;
    c.model = writeModel(dir);
    c.data = std::string("idx:") + TB_SOURCE_DIR + "/samples/fashion-mnist-slice";
    c.batch = 32;
    c.steps = 12;
    c.threads = 4;
    c.quiet = true;
    c.validation = 100;
    c.towers = "cpu:0,cpu:1";
    c.evalEvery = 6;
    c.emaDecay = 0.9;
    run("2 sync towers, evaluation, moving average", c);
    c.update = "async";
    c.emaDecay = 0;
    c.optimizer = "adam";
    run("2 async towers", c);
    c.update = "sync";
    c.variables = "replicated";
    c.reduce = "allreduce";
    c.averageEvery = 2;
    run("2 replicas averaged every 2 steps", c);
    tb::setBackendFactory(tb::DeviceType::Cpu, previous);
    CHECK(ModeProbe::misses == 0, "%lld calls ran without flushing denormals; first: %s", (long long)ModeProbe::misses.load(),
          ModeProbe::firstMiss.c_str());

    // (c)
    tb::Dataset d;
    d.name = "denormals";
    d.channels = 1;
    d.height = d.width = 4;
    d.numClasses = 2;
    d.features.assign(10 * 16, kDenormal);
    d.labels.assign(10, 1);
    tb::PipelineOptions o;
    o.batchSize = 4;
    o.prefetch = 1;
    tb::InputPipeline pipe(d, o);
    tb::Batch b;
    pipe.next(b);
    int nonzero = 0;
    for (float x : b.x) nonzero += x != 0.f;
    CHECK(nonzero == 0, "the pipeline's thread passed %d denormals through", nonzero);
    return tbcheck::exitStatus();
}
