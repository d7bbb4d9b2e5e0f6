// tst_compute_threads: every thread that runs engine arithmetic is a compute thread
// (util/compute_thread.hpp): it flushes denormals to zero (FTZ and DAZ), so that Adam's decaying
// moments never hit Intel's 100x denormal penalty, and it takes no asynchronous signal, so that a
// handler's frame never lands where oneDNN's GEMM kernels point rsp: in the heap.
//   (a) enterComputeThread() makes denormal arithmetic give zero and blocks the asynchronous
//       signals on this thread and threads it starts, and enterComputeTeam() on its OpenMP team
//   (b) whole runs (2 sync towers with evaluation and a moving average, 2 async towers, replicas
//       averaged every 2 steps) on a CPU backend that checks, at every op, the calling thread,
//       the OpenMP team it leads (oneDNN's and our loops' threads) and the vector arithmetic's
//       loops, which run on the calling thread (a denormal scaled there must come back zero)
//   (c) the input pipeline's prefetch thread (a denormal sample comes out as zero)
//   (d) a storm of SIGPROF, 10,000 a second with a handler installed, through two
//       towers of mnist_cnn: the heap survives (with the signals open on the towers, glibc
//       aborted with "corrupted size vs. prev_size"), and a thread that only waits took them
// This program's own main thread keeps the default state, so nothing is inherited by accident.
#include <omp.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cfloat>
#include <chrono>
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
#include "util/compute_thread.hpp"

namespace {

const float kDenormal = FLT_MIN / 64;  // 2^-132

// The CPU backend, checking the float mode of whoever calls it.
class ModeProbe final : public tbtest::ForwardingBackend {
public:
    explicit ModeProbe(int threads) : ForwardingBackend(tb::makeCpuBackend(threads)) {}
    void onCompute(const char* op) override {
        ++calls;
        if (!tb::denormalsFlushed()) miss(op, "the calling thread (denormals)");
        else if (!tb::asynchronousSignalsBlocked()) miss(op, "the calling thread (signals)");
        else if (!tb::isComputeTeam(omp_get_max_threads())) miss(op, "its OpenMP team");
        else if (std::string(op) == "axpy" || std::string(op) == "scale") checkVectorArithmetic(op);
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
    // The vector arithmetic (axpy, scale) runs on the calling thread: a denormal times one must
    // come back as zero there.
    void checkVectorArithmetic(const char* op) {
        std::vector<float> v(100000, kDenormal);
        inner().scale(nullptr, v.data(), 1.f, v.size());
        for (float x : v)
            if (x != 0.f) return miss(op, "the vector arithmetic");
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

// SIGPROF's handler: counts, on whichever thread takes it (what a sampling profiler does, more
// often; a handler's frame is what lands on the interrupted thread's stack pointer).
std::atomic<int64_t> taken{0};
extern "C" void onProf(int) { taken.fetch_add(1, std::memory_order_relaxed); }

void signalStorm() {
    struct sigaction a = {}, before = {};
    a.sa_handler = onProf;
    a.sa_flags = SA_RESTART;
    sigemptyset(&a.sa_mask);
    sigaction(SIGPROF, &a, &before);
    // The thread that takes them, as StopSignals' watcher: it only waits.
    std::atomic<bool> done{false};
    std::thread taker([&done] {
        const sigset_t async = tb::asynchronousSignals();
        pthread_sigmask(SIG_UNBLOCK, &async, nullptr);
        while (!done) ::usleep(1000);
    });
    // Every 100 us of the clock, to the process (the kernel hands it to a thread that takes it):
    // a profiler's ITIMER_PROF ticks with the scheduler, too seldom for a 2-second test.
    sigevent toProcess = {};
    toProcess.sigev_notify = SIGEV_SIGNAL;
    toProcess.sigev_signo = SIGPROF;
    timer_t timer;
    CHECK(timer_create(CLOCK_MONOTONIC, &toProcess, &timer) == 0, "timer_create failed");
    const itimerspec every100us{{0, 100000}, {0, 100000}}, off{};
    timer_settime(timer, 0, &every100us, nullptr);
    tb::RunConfig c;
    c.model = "mnist_cnn";  // its dense layers' weight gradients run oneDNN's jit gemm_f32
    c.data = std::string("idx:") + TB_SOURCE_DIR + "/samples/fashion-mnist-slice";
    c.batch = 64;
    c.steps = 40;
    c.threads = 2;
    c.quiet = true;
    c.validation = 0;
    c.towers = "cpu:0,cpu:1";
    const auto t0 = std::chrono::steady_clock::now();
    // A thread open to every signal (this program's main thread is a compute thread since (b)),
    // the first tower's: the engine makes it and the towers compute threads in run().
    std::thread([&c] {
        const sigset_t async = tb::asynchronousSignals();
        pthread_sigmask(SIG_UNBLOCK, &async, nullptr);
        tb::Trainer(c).run();
    }).join();
    timer_settime(timer, 0, &off, nullptr);
    timer_delete(timer);
    done = true;
    taker.join();
    sigaction(SIGPROF, &before, nullptr);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("signal storm: %lld SIGPROF taken in %.1f s of 2 towers' training, the heap intact\n", (long long)taken.load(),
                seconds);
    CHECK(taken > 1000, "only %lld signals were taken: the storm did not happen", (long long)taken.load());
}

}  // namespace

int main() {
    CHECK(!tb::denormalsFlushed() && !tb::asynchronousSignalsBlocked(), "the test's main thread must start in the default state");
    // (a)
    std::thread([] {
        tb::enterComputeThread();
        volatile float d = kDenormal;
        CHECK(d * 1.f == 0.f, "a compute thread still makes denormals");
        CHECK(tb::asynchronousSignalsBlocked(), "a compute thread takes asynchronous signals");
        std::thread([] {
            CHECK(tb::denormalsFlushed() && tb::asynchronousSignalsBlocked(), "a thread started by a compute thread is not one");
        }).join();
        CHECK(tb::isComputeTeam(4) || (tb::enterComputeTeam(4), tb::isComputeTeam(4)), "enterComputeTeam left a team thread out");
    }).join();
    std::thread([] {
        // An OpenMP team made before its leader entered: enterComputeTeam reaches its threads.
#pragma omp parallel num_threads(4)
        CHECK(!tb::asynchronousSignalsBlocked(), "a team thread blocks signals before anyone asked");
        tb::enterComputeTeam(4);
        CHECK(tb::isComputeTeam(4), "enterComputeTeam left a thread of an older team out");
    }).join();

    // (b)
    const std::string dir = std::filesystem::temp_directory_path() / ("tb_compute_threads." + std::to_string(getpid()));
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
    std::filesystem::remove_all(dir);
    CHECK(ModeProbe::misses == 0, "%lld calls ran outside a compute thread; first: %s", (long long)ModeProbe::misses.load(),
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

    // (d)
    signalStorm();
    return tbcheck::exitStatus();
}
