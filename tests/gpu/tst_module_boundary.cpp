// tst_module_boundary: the CUDA module's C boundary (backend/cuda_module.h) and NCCL's
// collectives across several ranks, on stand-in GPUs (CPU backends behind a module's C table:
// stand_in_gpus.hpp), so both run on every machine, GPU or not:
//   - the registry takes the table as it takes a loaded module: its GPUs, versions and NCCL
//   - every op of a backend through the table passes the cross-backend op check, and gives the
//     CPU backend's bits
//   - a failure inside the module crosses as TB_ERROR and arrives as a tb::Error with its message
//   - a convolution refuses the calls its plan left out (no input gradient, no bias gradient)
//   - a graph's replay carries the update it is given (every field), and none where none is given
//   - a module built from another cuda_module.h, or laid out in other sizes, is refused
//   - NCCL's communicator over 4 ranks: all-reduce (sum, mean), reduce to the holder's rank and
//     broadcast from it, for every root, fp32 and bf16, each element as expected
//   - towers on 4 stand-in GPUs through NCCL train as CPU towers do (all-reduce; holder mean with
//     the variables on gpu:2), to the bit
//   - no NCCL wait is unbounded: a rank whose collective fails ends every rank's (each throws
//     that rank's error, at once and in every later collective), and a rank that stays away ends
//     the others' wait after TB_NCCL_TIMEOUT_S, naming it; a bad TB_NCCL_TIMEOUT_S is refused;
//     a rank whose communicator reports an asynchronous error ends every rank's wait within a
//     second, with that error
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <future>
#include <string>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include "backend/backend_check.hpp"
#include "backend/backend_export.hpp"
#include "backend/module_backend.hpp"
#include "backend/registry.hpp"
#include "comm/communicator.hpp"
#include "engine/selftest.hpp"
#include "forwarding_backend.hpp"
#include "plain_check.hpp"
#include "stand_in_gpus.hpp"
#include "tensor/bf16.hpp"

using namespace tb;

namespace {

constexpr int kGpus = 4;

Device gpu(int i) { return Device{DeviceType::Cuda, i}; }

void registryTakesTheTable() {
    const GpuRuntime& r = gpuRuntime();
    CHECK(r.available, "stand-in GPUs not available: %s", r.whyNot.c_str());
    CHECK(int(r.gpus.size()) == kGpus, "%zu GPUs, not %d", r.gpus.size(), kGpus);
    CHECK(r.modulePath == "stand-in GPUs", "module path %s", r.modulePath.c_str());
    CHECK(ncclAvailable(), "NCCL not available through the table");
    const std::shared_ptr<Backend> be = makeBackend(gpu(3));
    CHECK(be->device() == gpu(3), "backend on %s, not gpu:3", be->device().str().c_str());
    CHECK(be->name().find("cpu") != std::string::npos, "name through the table: %s", be->name().c_str());
}

// The registry hands every backend the process's algorithm store (TOWERBENCH_ALGORITHM_CACHE, set
// by main before anything is made), and the C table carries a choice there and back whole.
void theAlgorithmStoreCrosses(const std::string& file) {
    (void)makeBackend(gpu(1));
    const TbAlgorithmStore* store = tbtest::standInAlgorithmStore();
    CHECK(store && store->find && store->remember, "no algorithm store reached the module");
    if (!store) return;
    TbConvChoice kept{};
    kept.forward = {6, 3, 1, 123, {}};
    kept.forward.graph = {TB_GRAPH_ENGINE, 2, 57, {{3, 1}, {11, -4}}, uint64_t(3) << 33};
    kept.backwardData = {1, 1, 0, uint64_t(5) << 32, {}};
    kept.backwardData.graph.state = TB_GRAPH_LEGACY_FASTER;
    kept.backwardFilter = {5, 2, 0, 0, {}};
    const auto same = [](const TbConvAlgorithm& a, const TbConvAlgorithm& b) {
        bool knobs = a.graph.knobCount == b.graph.knobCount;
        for (int i = 0; knobs && i < a.graph.knobCount; ++i)
            knobs = a.graph.knobs[i][0] == b.graph.knobs[i][0] && a.graph.knobs[i][1] == b.graph.knobs[i][1];
        return a.algorithm == b.algorithm && a.math == b.math && a.layout == b.layout &&
               a.workspaceBytes == b.workspaceBytes && a.graph.state == b.graph.state && a.graph.engine == b.graph.engine &&
               a.graph.workspaceBytes == b.graph.workspaceBytes && knobs;
    };
    store->remember(store->context, "the key", &kept);
    TbConvChoice found{};
    CHECK(store->find(store->context, "the key", &found) == 1, "a kept choice is not found");
    CHECK(same(found.forward, kept.forward) && same(found.backwardData, kept.backwardData) &&
              same(found.backwardFilter, kept.backwardFilter) && found.failure[0] == 0,
          "the choice changed on its way through the table");
    CHECK(store->find(store->context, "another key", &found) == 0, "a key never kept is found");
    std::strcpy(kept.failure, "no bf16 algorithm");
    store->remember(store->context, "bf16 key", &kept);
    CHECK(store->find(store->context, "bf16 key", &found) == 1 && std::string(found.failure) == "no bf16 algorithm",
          "a failure does not cross");
    std::ifstream f(file);
    const std::string text{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
    CHECK(text.find("\"the key\"") != std::string::npos && text.find("21474836480") != std::string::npos,
          "the choice did not reach TOWERBENCH_ALGORITHM_CACHE's file: %s", text.c_str());
}

// Every row of the table is wired to its op: the op check's shapes through it, and the same
// bits as the CPU backend itself gives for each (a swapped argument would differ).
void everyOpCrosses() {
    const std::shared_ptr<Backend> through = makeBackend(gpu(0));
    const std::vector<OpCheck> viaTable = checkBackendOps(*through);
    const std::shared_ptr<Backend> direct = makeCpuBackend(1);
    const std::vector<OpCheck> plain = checkBackendOps(*direct);
    CHECK(viaTable.size() == plain.size() && !plain.empty(), "%zu cases through the table, %zu direct",
          viaTable.size(), plain.size());
    for (size_t i = 0; i < viaTable.size() && i < plain.size(); ++i) {
        const OpCheck& a = viaTable[i];
        CHECK(a.passed, "%s [%s] through the table: error %g (limit %g) %s", a.op.c_str(), a.shape.c_str(), a.error,
              a.tolerance, a.failure.c_str());
        CHECK(a.error == plain[i].error, "%s [%s]: error %g through the table, %g direct", a.op.c_str(), a.shape.c_str(),
              a.error, plain[i].error);
    }
    std::printf("op check through the C table: %zu cases, each as the CPU backend gives it\n", viaTable.size());
}

// An exception inside the module (here oneDNN's, of its own type) stays there: the call returns
// TB_ERROR and the program throws a tb::Error with the same sentence.
void failuresCrossAsValues() {
    ConvDesc bad;  // no filters: the CPU backend refuses it
    bad.n = 1, bad.c = 1, bad.h = 4, bad.w = 4, bad.k = 0, bad.r = 3, bad.s = 3;
    std::string direct, through;
    try {
        makeCpuBackend(1)->makeConv(bad);
    } catch (const std::exception& e) {  // oneDNN's own exception type
        direct = e.what();
    }
    try {
        makeBackend(gpu(1))->makeConv(bad);
    } catch (const Error& e) {
        through = e.what();
    }
    CHECK(!direct.empty(), "the CPU backend took a convolution of 0 filters");
    CHECK(through == direct, "through the table: \"%s\", direct: \"%s\"", through.c_str(), direct.c_str());
}

// A convolution refuses the calls its plan left out (ConvDesc::inputGradient, biasGradient) in one
// sentence, directly and through the table alike (both flags cross it: the op check above runs
// plans made with each).
void unplannedCallsAreRefused() {
    struct Case {
        const char* what;
        bool inputGradient, biasGradient, data, giveDb;
        const char* says;
    };
    for (const Case& c : {Case{"dx of a plan without it", false, true, true, true, "without an input gradient"},
                          Case{"db of a plan without it", true, false, false, true, "without a bias gradient"},
                          Case{"no db for a plan with it", true, true, false, false, "given nowhere to write it"}}) {
        ConvDesc d;
        d.n = 1, d.c = 2, d.h = 5, d.w = 5, d.k = 3, d.r = 3, d.s = 3;
        d.inputGradient = c.inputGradient, d.biasGradient = c.biasGradient;
        std::string said[2];
        int i = 0;
        for (const std::shared_ptr<Backend>& be : {makeCpuBackend(1), makeBackend(gpu(0))}) {
            const Stream st = be->createStream();
            auto op = be->makeConv(d);
            std::vector<float> x(50), dy(27), w(54), dw(54), db(3), dx(50), ws(op->workspaceBytes() / 4 + 1);
            try {
                if (c.data) op->backwardData(st, dy.data(), w.data(), dx.data(), ws.data());
                else op->backwardWeights(st, x.data(), dy.data(), dw.data(), c.giveDb ? db.data() : nullptr, ws.data());
            } catch (const Error& e) {
                said[i] = e.what();
            }
            be->destroyStream(st);
            ++i;
        }
        CHECK(said[0].find(c.says) != std::string::npos, "%s: the CPU backend said \"%s\"", c.what, said[0].c_str());
        CHECK(said[1] == said[0], "%s: through the table \"%s\", direct \"%s\"", c.what, said[1].c_str(),
              said[0].c_str());
    }
}

// A backend that records graphs as tokens and notes each replay's update (the module's side).
class ReplayLog final : public tbtest::ForwardingBackend {
public:
    ReplayLog() : ForwardingBackend(makeCpuBackend(1)) {}
    bool canCapture() const override { return true; }
    void beginCapture(Stream) override {}
    Graph endCapture(Stream) override { return token(); }
    void launchGraph(Graph g, Stream, const UpdateParams* update) override {
        launched = g;
        given = update != nullptr;
        if (update) last = *update;
    }
    void destroyGraph(Graph) override {}
    Graph token() { return reinterpret_cast<Graph>(&tokenByte_); }
    Graph launched = nullptr;
    bool given = false;
    UpdateParams last;

private:
    char tokenByte_ = 0;
};

// A recorded step's update takes each replay's values from launchGraph's `update` (the learning
// rate, Adam's step count): the table carries every field of it, and a replay given none gets none.
void aReplaysUpdateCrosses() {
    const auto log = std::make_shared<ReplayLog>();
    const std::shared_ptr<Backend> through =
        wrapModuleBackend(tbtest::standInGpuModule(kGpus), exportBackend(log), 0);
    const Stream s = through->createStream();
    through->beginCapture(s);
    const Graph g = through->endCapture(s);
    UpdateParams u;
    u.lr = 0.125f, u.momentum = 0.5f, u.beta1 = 0.25f, u.beta2 = 0.75f, u.epsilon = 1e-3f;
    u.step = (int64_t(1) << 40) + 3;  // (no int in between)
    through->launchGraph(g, s, &u);
    const UpdateParams& got = log->last;
    CHECK(log->launched == log->token() && log->given, "the replay reached the backend without its update");
    CHECK(got.lr == u.lr && got.momentum == u.momentum && got.beta1 == u.beta1 && got.beta2 == u.beta2 &&
              got.epsilon == u.epsilon && got.step == u.step,
          "the update changed on its way: lr %g, momentum %g, betas %g %g, epsilon %g, step %lld", got.lr, got.momentum,
          got.beta1, got.beta2, got.epsilon, static_cast<long long>(got.step));
    through->launchGraph(g, s, nullptr);
    CHECK(!log->given, "a replay given no update arrived with one");
    through->destroyGraph(g);
    through->destroyStream(s);
}

void otherAbisAreRefused() {
    const TbCudaModule& good = tbtest::standInGpuModule(kGpus);
    CHECK(moduleAbiProblem(good, "x.so").empty(), "the stand-in's own ABI refused: %s",
          moduleAbiProblem(good, "x.so").c_str());
    TbCudaModule other = good;
    std::memcpy(other.abi.headerSha256, "0123456789abcdef", 16);
    const std::string hash = moduleAbiProblem(other, "/lib/old.so");
    CHECK(hash.find("/lib/old.so was built from another backend/cuda_module.h") == 0, "refusal: %s", hash.c_str());
    CHECK(hash.find("rebuild the module") != std::string::npos, "refusal: %s", hash.c_str());
    other = good;
    other.abi.backendInterfaceBytes -= 8;  // one row fewer
    const std::string size = moduleAbiProblem(other, "/lib/other.so");
    CHECK(size.find("in other sizes") != std::string::npos, "refusal: %s", size.c_str());
}

// Rank r's element i: (r + 1) * (i % 7 + 1), small integers, so every sum and the mean over 4
// ranks (a power of two) are exact in fp32 and in bf16.
float valueOf(int rank, size_t i) { return float((rank + 1) * int(i % 7 + 1)); }
float sumOf(size_t i) { return float(10 * int(i % 7 + 1)); }  // ranks 1 + 2 + 3 + 4

struct Ranks {
    std::vector<std::shared_ptr<Backend>> backends;
    std::vector<RankEndpoint> endpoints;
    Ranks() {
        for (int i = 0; i < kGpus; ++i) {
            backends.push_back(makeBackend(gpu(i)));
            endpoints.push_back({backends.back().get(), backends.back()->createStream(), gpu(i)});
        }
    }
    ~Ranks() {
        for (size_t i = 0; i < backends.size(); ++i) backends[i]->destroyStream(endpoints[i].stream);
    }
    // f(rank) on a thread per rank, as towers call collectives.
    template <class F>
    void together(F f) {
        std::vector<std::thread> t;
        for (int r = 0; r < kGpus; ++r) t.emplace_back(f, r);
        for (auto& x : t) x.join();
    }
};

void ncclAllReduces(CommPrecision wire) {
    const size_t n = 1000;
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean}) {
        Ranks ranks;
        auto comm = makeCommunicator(CommKind::Nccl, ranks.endpoints, HolderEndpoint{}, n, nullptr, wire);
        std::vector<std::vector<float>> bufs(kGpus, std::vector<float>(n));
        for (int r = 0; r < kGpus; ++r)
            for (size_t i = 0; i < n; ++i) bufs[size_t(r)][i] = valueOf(r, i);
        ranks.together([&](int r) { comm->allReduce(r, bufs[size_t(r)].data(), n, op); });
        int wrong = 0;
        for (int r = 0; r < kGpus; ++r)
            for (size_t i = 0; i < n; ++i)
                wrong += bufs[size_t(r)][i] != (op == ReduceOp::Mean ? sumOf(i) / kGpus : sumOf(i));
        CHECK(wrong == 0, "all-reduce (%s, %s): %d elements wrong", op == ReduceOp::Mean ? "mean" : "sum",
              wire == CommPrecision::Bf16 ? "bf16" : "fp32", wrong);
    }
}

// The holder on each rank's GPU in turn: the mean lands on that root only, and its variables reach
// every rank from it.
void ncclReducesToAndBroadcastsFromTheHolder(CommPrecision wire) {
    const size_t n = 777;
    for (int root = 0; root < kGpus; ++root) {
        Ranks ranks;
        const HolderEndpoint holder{ranks.backends[size_t(root)].get(), gpu(root)};
        auto comm = makeCommunicator(CommKind::Nccl, ranks.endpoints, holder, n, nullptr, wire);
        std::vector<std::vector<float>> grads(kGpus, std::vector<float>(n)), params(kGpus, std::vector<float>(n, -1.f));
        for (int r = 0; r < kGpus; ++r)
            for (size_t i = 0; i < n; ++i) grads[size_t(r)][i] = valueOf(r, i);
        std::vector<float> scratch(n, -1.f), variables(n);
        for (size_t i = 0; i < n; ++i) variables[i] = float(i) * 0.5f;
        std::vector<const float*> results(kGpus);
        ranks.together([&](int r) {
            results[size_t(r)] = comm->reduceToHolder(r, grads[size_t(r)].data(), scratch.data(), n, ReduceOp::Mean);
            comm->broadcastFromHolder(r, variables.data(), r == root ? variables.data() : params[size_t(r)].data(), n);
        });
        int wrongMean = 0, wrongVariables = 0;
        for (size_t i = 0; i < n; ++i) wrongMean += results[size_t(root)][i] != sumOf(i) / kGpus;
        for (int r = 0; r < kGpus; ++r)
            if (r != root)
                for (size_t i = 0; i < n; ++i) wrongVariables += params[size_t(r)][i] != variables[i];
        CHECK(comm->sharesHolder(root), "root %d: the holder's rank does not read the holder in place", root);
        CHECK(wrongMean == 0, "root %d (%s): %d elements of the mean wrong", root,
              wire == CommPrecision::Bf16 ? "bf16" : "fp32", wrongMean);
        CHECK(wrongVariables == 0, "root %d: %d variables wrong after the broadcast", root, wrongVariables);
    }
}

using Clock = std::chrono::steady_clock;

// f(rank) on a thread per rank; what each threw ("" where it returned) and when it returned,
// in seconds from the start. A rank still inside after 20 s is a hang: the program says so and
// ends (its threads cannot be joined).
struct Outcome {
    std::vector<std::string> errors = std::vector<std::string>(kGpus);
    std::vector<double> seconds = std::vector<double>(kGpus);
};
template <class F>
Outcome boundedly(const char* what, F f) {
    Outcome o;
    const auto t0 = Clock::now();
    std::vector<std::future<void>> done;
    for (int r = 0; r < kGpus; ++r)
        done.push_back(std::async(std::launch::async, [&, r] {
            try {
                f(r);
            } catch (const std::exception& e) {
                o.errors[size_t(r)] = e.what();
            }
            o.seconds[size_t(r)] = std::chrono::duration<double>(Clock::now() - t0).count();
        }));
    for (int r = 0; r < kGpus; ++r)
        if (done[size_t(r)].wait_until(t0 + std::chrono::seconds(20)) != std::future_status::ready) {
            std::fprintf(stderr, "FAIL %s: rank %d still waits after 20 s (a hang)\n", what, r);
            std::fflush(stderr);
            std::_Exit(1);
        }
    return o;
}

// A rank's NCCL call fails (as an unhandled system error would) and it stays away from the
// collective: every rank's call ends with that error, for an all-reduce and for a reduce to the
// holder (the failing rank the root, and not), and the next collective is refused with it too.
void aFailedCollectiveEndsEveryRank() {
    struct Case {
        const char* what;
        int failing;
        bool holder;
    };
    for (const Case& k : {Case{"all-reduce", 2, false}, Case{"reduce to the holder (its root failing)", 1, true},
                          Case{"reduce to the holder (a rank failing)", 3, true}}) {
        const size_t n = 100;
        Ranks ranks;
        const HolderEndpoint holder = k.holder ? HolderEndpoint{ranks.backends[1].get(), gpu(1)} : HolderEndpoint{};
        auto comm = makeCommunicator(CommKind::Nccl, ranks.endpoints, holder, n);
        std::vector<std::vector<float>> bufs(kGpus, std::vector<float>(n, 1.f));
        std::vector<float> scratch(n);
        tbtest::failStandInCollective(k.failing);
        const auto step = [&](int r) {
            if (k.holder) {
                comm->reduceToHolder(r, bufs[size_t(r)].data(), scratch.data(), n, ReduceOp::Mean);
                comm->broadcastFromHolder(r, scratch.data(), bufs[size_t(r)].data(), n);
            } else {
                comm->allReduce(r, bufs[size_t(r)].data(), n, ReduceOp::Mean);
            }
        };
        const Outcome first = boundedly(k.what, step);
        const std::string cause = "rank " + std::to_string(k.failing) + " (gpu:" + std::to_string(k.failing) + ")'s";
        for (int r = 0; r < kGpus; ++r) {
            const std::string& e = first.errors[size_t(r)];
            CHECK(e.find(cause) == 0 && e.find("planted by the test") != std::string::npos &&
                      e.find("the group was aborted") != std::string::npos,
                  "%s: rank %d threw '%s'", k.what, r, e.c_str());
        }
        const Outcome next = boundedly(k.what, step);
        for (int r = 0; r < kGpus; ++r)
            CHECK(next.errors[size_t(r)] == first.errors[0], "%s, the next collective: rank %d threw '%s'", k.what, r,
                  next.errors[size_t(r)].c_str());
    }
}

// One all-reduce of 64 floats on every rank of a fresh NCCL communicator (the stand-in), each rank
// running `before(rank)` first; the communicator ends with the call.
template <class F>
Outcome allReduceOnEveryRank(const char* what, F before) {
    const size_t n = 64;
    Ranks ranks;
    auto comm = makeCommunicator(CommKind::Nccl, ranks.endpoints, HolderEndpoint{}, n);
    std::vector<std::vector<float>> bufs(kGpus, std::vector<float>(n, 1.f));
    return boundedly(what, [&](int r) {
        before(r);
        comm->allReduce(r, bufs[size_t(r)].data(), n, ReduceOp::Sum);
    });
}

// Rank 3 comes 3 s late to an all-reduce whose timeout is 0.5 s: the other three return within
// a second, each with one sentence naming rank 3, and rank 3's late call is refused with it.
void aRankThatStaysAwayTimesOut() {
    setenv("TB_NCCL_TIMEOUT_S", "0.5", 1);
    {
        const Outcome o = allReduceOnEveryRank("late rank", [](int r) {
            if (r == 3) std::this_thread::sleep_for(std::chrono::seconds(3));
        });
        std::printf("a rank 3 s late, timeout 0.5 s: the others returned after %.2f, %.2f, %.2f s: %s\n", o.seconds[0],
                    o.seconds[1], o.seconds[2], o.errors[0].c_str());
        for (int r = 0; r < kGpus; ++r) {
            const std::string& e = o.errors[size_t(r)];
            CHECK(e.find("waited more than 0.5 s (TB_NCCL_TIMEOUT_S) for rank 3, which had not reached it") !=
                      std::string::npos,
                  "rank %d threw '%s'", r, e.c_str());
            if (r < 3) CHECK(o.seconds[size_t(r)] < 1.5, "rank %d waited %.2f s (timeout 0.5 s)", r, o.seconds[size_t(r)]);
        }
    }
    setenv("TB_NCCL_TIMEOUT_S", "soon", 1);
    std::string refusal;
    try {
        Ranks ranks;
        makeCommunicator(CommKind::Nccl, ranks.endpoints, HolderEndpoint{}, 1);
    } catch (const std::exception& e) {
        refusal = e.what();
    }
    CHECK(refusal == "TB_NCCL_TIMEOUT_S: 'soon' is not a number of seconds above 0", "refusal: '%s'", refusal.c_str());
    unsetenv("TB_NCCL_TIMEOUT_S");
}

// Rank 3's communicator reports an asynchronous error (a peer lost while its GPU waits, which no
// call returns) and rank 3 stays away from the all-reduce: the other three return within the
// watchdog's period (a second), long before the 30 s timeout, each with rank 3's sentence, and
// rank 3's own call is refused with it.
void anAsynchronousErrorEndsEveryRank() {
    setenv("TB_NCCL_TIMEOUT_S", "30", 1);
    {
        const Outcome o = allReduceOnEveryRank("asynchronous error", [](int r) {
            if (r == 3) {
                std::this_thread::sleep_for(std::chrono::milliseconds(200));
                tbtest::standInAsyncError(3);
                std::this_thread::sleep_for(std::chrono::seconds(2));
            }
        });
        tbtest::standInAsyncError(-1);
        std::printf("rank 3's asynchronous error, timeout 30 s: the others returned after %.2f, %.2f, %.2f s: %s\n",
                    o.seconds[0], o.seconds[1], o.seconds[2], o.errors[0].c_str());
        for (int r = 0; r < kGpus; ++r) {
            const std::string& e = o.errors[size_t(r)];
            CHECK(e.find("rank 3 (gpu:3)'s communicator failed: remote process exited or there was a network error") !=
                          std::string::npos && e.find("the group was aborted") != std::string::npos,
                  "rank %d threw '%s'", r, e.c_str());
            if (r < 3) CHECK(o.seconds[size_t(r)] < 1.8, "rank %d waited %.2f s (the watchdog polls every second)", r,
                             o.seconds[size_t(r)]);
        }
    }
    unsetenv("TB_NCCL_TIMEOUT_S");
}

DeploymentPlan towersOn(DeviceType type, VariablePlacement v, int holderTower = 0) {
    DeploymentPlan p;
    p.towers.clear();  // a plan starts with one tower on cpu:0
    for (int i = 0; i < kGpus; ++i) p.towers.push_back(Device{type, i});
    p.batchPerTower = 4;
    p.variables = v;
    p.variablesTower = holderTower;
    if (v == VariablePlacement::Replicated) p.reduce = ReduceMode::AllReduce;
    return p;
}

void towersTrainAsCpuTowersDo() {
    struct Case {
        const char* what;
        VariablePlacement v;
        int holder;
    };
    for (const Case& k : {Case{"replicated, NCCL all-reduce", VariablePlacement::Replicated, 0},
                          Case{"variables on gpu:2, NCCL reduce and broadcast", VariablePlacement::Tower, 2}}) {
        const tbtest::StandInNcclCounts before = tbtest::standInNcclCounts();
        DeploymentPlan gpus = towersOn(DeviceType::Cuda, k.v, k.holder);
        gpus.transfers = Transfers::Nccl;
        const LossComparison c = compareTowerLosses(towersOn(DeviceType::Cpu, k.v, k.holder), gpus, 6);
        const tbtest::StandInNcclCounts after = tbtest::standInNcclCounts();
        std::printf("4 stand-in GPUs, %s: losses %.5f -> %.5f, worst relative difference %g\n", k.what,
                    c.reference.front(), c.reference.back(), c.worstRelative);
        CHECK(c.worstRelative == 0 && c.candidateParams == c.referenceParams,
              "%s: losses differ by %g from CPU towers'", k.what, c.worstRelative);
        if (k.v == VariablePlacement::Replicated)
            CHECK(after.allReduce - before.allReduce == 6, "%s: %ld all-reduces for 6 steps", k.what,
                  after.allReduce - before.allReduce);
        else
            CHECK(after.reduce - before.reduce == 6 && after.broadcast - before.broadcast == 6,
                  "%s: %ld reduces and %ld broadcasts for 6 steps", k.what, after.reduce - before.reduce,
                  after.broadcast - before.broadcast);
    }
}

}  // namespace

int main() {
    const std::string choices = "tst_module_boundary-" + std::to_string(::getpid()) + "-choices.json";
    setenv("TOWERBENCH_ALGORITHM_CACHE", choices.c_str(), 1);
    useCudaModule(tbtest::standInGpuModule(kGpus), "stand-in GPUs");
    registryTakesTheTable();
    theAlgorithmStoreCrosses(choices);
    std::remove(choices.c_str());
    std::remove((choices + ".lock").c_str());
    everyOpCrosses();
    failuresCrossAsValues();
    unplannedCallsAreRefused();
    aReplaysUpdateCrosses();
    otherAbisAreRefused();
    for (CommPrecision wire : {CommPrecision::Fp32, CommPrecision::Bf16}) {
        ncclAllReduces(wire);
        ncclReducesToAndBroadcastsFromTheHolder(wire);
    }
    towersTrainAsCpuTowersDo();
    aFailedCollectiveEndsEveryRank();
    anAsynchronousErrorEndsEveryRank();
    aRankThatStaysAwayTimesOut();
    return tbcheck::exitStatus();
}
