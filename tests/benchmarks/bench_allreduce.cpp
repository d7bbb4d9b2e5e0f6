// tb_bench_allreduce: the all-reduce between processes as nccl-tests reports it, Towerbench's
// path against a bare MPI_Allreduce loop on the same buffers. Run under mpirun:
//   mpirun -np 2 tb_bench_allreduce [--min 1024] [--max 67108864] [--rounds 5]
// For each size (bytes, x4 from --min to --max) and each of the two ways, in alternating rounds:
//   bare        MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), n floats
//   towerbench  the training path: a shared-memory Communicator of one CPU tower whose reductions
//               span the processes (ProcessGroup), Communicator::allReduce(Sum) on the same buffer
//   bf16        the same with bf16 gradients (--comm-precision bf16): half the bytes on the wire,
//               plus the rounding and the widening, and MPI summing with our own MPI_Op
// Each round times `iters` calls after 2 untimed ones (iters so that a round moves about 256 MB,
// at least 5, at most 1000), with a barrier before; the time is the slowest process's. Printed:
// size, time per call (median of the rounds), algorithm bandwidth (bytes / time) and bus bandwidth
// (algbw x 2 (P - 1) / P, nccl-tests' definition), for both, and towerbench's time / bare's; bf16's
// time per call and its time / towerbench's fp32 (bandwidths are of the fp32 buffer's bytes).
// Process 0 prints the table and one JSON line per size.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/registry.hpp"
#include "bench_machine.hpp"
#include "comm/communicator.hpp"
#include "comm/process_group.hpp"
#include "util/error.hpp"

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Seconds per call of f over `iters` calls, the slowest process's.
template <class F>
double timed(int iters, F&& f) {
    f();
    f();
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) f();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return s;
}

int run(int argc, char** argv) {
    size_t minBytes = 1024, maxBytes = size_t(64) << 20;
    int rounds = 5;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) throw tb::Error(a + ": needs a value");
        const std::string v = argv[++i];
        if (a == "--min") minBytes = std::strtoull(v.c_str(), nullptr, 10);
        else if (a == "--max") maxBytes = std::strtoull(v.c_str(), nullptr, 10);
        else if (a == "--rounds") rounds = std::atoi(v.c_str());
        else throw tb::Error(a + ": unknown option");
    }
    if (minBytes < 4 || maxBytes < minBytes || rounds < 1) throw tb::Error("--min, --max: 4 <= min <= max; --rounds >= 1");
    // Before the processes meet (each on its own core, one thread): no rank spins in MPI meanwhile.
    const std::string machine = tbbench::machineLine(1);
    std::unique_ptr<tb::ProcessGroup> processes = tb::joinProcessGroup();
    if (!processes || processes->size() < 2)
        throw tb::Error("run under mpirun with 2 or more processes (mpirun -np 2 tb_bench_allreduce)");
    const int p = processes->size();
    const bool leader = processes->rank() == 0;

    const size_t maxCount = maxBytes / sizeof(float);
    auto backend = tb::makeBackend(tb::Device{}, tb::BackendOptions{1});
    const tb::Stream stream = backend->createStream();
    auto comm = tb::makeCommunicator(tb::CommKind::SharedMemory, {{backend.get(), stream, tb::Device{}}}, {}, maxCount,
                                     processes.get());
    auto bf16 = tb::makeCommunicator(tb::CommKind::SharedMemory, {{backend.get(), stream, tb::Device{}}}, {}, maxCount,
                                     processes.get(), tb::CommPrecision::Bf16);
    std::vector<float> buf(maxCount, 1.0f);
    if (leader) {
        std::printf("%s\n%s; Open MPI over shared memory (btl self,vader)\n", machine.c_str(),
                    processes->describe().c_str());
        std::printf("%12s %10s %12s %12s %10s %12s %12s %9s %10s %9s\n", "bytes", "bare us", "algbw GB/s", "busbw GB/s",
                    "tb us", "algbw GB/s", "busbw GB/s", "tb/bare", "bf16 us", "bf16/tb");
    }
    for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= 4) {
        const size_t count = bytes / sizeof(float);
        const int iters = int(std::clamp<size_t>((size_t(256) << 20) / bytes, 5, 1000));
        std::vector<double> bare, ours, halves;
        for (int r = 0; r < rounds; ++r) {
            bare.push_back(timed(iters, [&] {
                MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            }));
            ours.push_back(timed(iters, [&] { comm->allReduce(0, buf.data(), count, tb::ReduceOp::Sum); }));
            halves.push_back(timed(iters, [&] { bf16->allReduce(0, buf.data(), count, tb::ReduceOp::Sum); }));
        }
        const double b = median(bare), t = median(ours), h = median(halves), bus = 2.0 * (p - 1) / p;
        if (leader) {
            std::printf("%12zu %10.1f %12.2f %12.2f %10.1f %12.2f %12.2f %9.3f %10.1f %9.3f\n", bytes, 1e6 * b,
                        bytes / b / 1e9, bus * bytes / b / 1e9, 1e6 * t, bytes / t / 1e9, bus * bytes / t / 1e9, t / b,
                        1e6 * h, h / t);
            std::printf("{\"bytes\":%zu,\"processes\":%d,\"bare_s\":%.9g,\"towerbench_s\":%.9g,\"ratio\":%.4f,"
                        "\"bare_busbw_gbps\":%.4f,\"towerbench_busbw_gbps\":%.4f,\"bf16_s\":%.9g,\"bf16_ratio\":%.4f}\n",
                        bytes, p, b, t, t / b, bus * bytes / b / 1e9, bus * bytes / t / 1e9, h, h / t);
            std::fflush(stdout);
        }
    }
    comm.reset();
    bf16.reset();
    backend->destroyStream(stream);
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return tbbench::guardedMain("tb_bench_allreduce", run, argc, argv); }
