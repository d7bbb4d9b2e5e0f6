// ProcessGroup: the processes of one run (`mpirun -np N towerbench-run ...`), each with its own
// towers on its own slice of every global batch. A process's towers reduce among themselves first
// (their Communicator), then the processes reduce the result (hierarchical, as Horovod does); GPU
// replicas on GPUs of their own meet in one NCCL group instead. Every process keeps a full copy
// of the variables and applies the same update, so the copies stay equal (with --ps-tasks the
// servers hold them). MPI implements it (mpi_process_group.cpp). Collectives run on `lanes`, each
// its own MPI communicator, so a process's tower threads reduce their chunks at once; lane L of
// every process meets lane L of the others. Parameter-server messages go point to point on lane 0.
// Bytes counted: those this process sends; an all-reduce of count floats by nccl-tests' bus bytes,
// 2 (P - 1) / P x count x 4; a message by its length; start-up checks and votes are not counted.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/bf16_wire.hpp"

namespace tb {

class ProcessGroup {
public:
    virtual ~ProcessGroup() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual int localSize() const = 0;         // the run's processes on this machine (this one included)
    virtual std::string describe() const = 0;  // "2 processes (Open MPI v4.1.4)"
    // Makes `lanes` channels; collective: every process calls it with the same number, in the
    // same order as its other collectives. Lane 0 exists from the start.
    virtual void setLanes(int lanes) = 0;
    // recv := op over every process's send (count floats in host memory); send may be recv (in
    // place). Large buffers go in pieces. Mean divides by the number of processes. `wire` bf16:
    // send is rounded to bf16 and the processes exchange and sum bf16 (each addition widened to
    // fp32 and rounded back), recv the result widened, then divided for the mean.
    virtual void allReduce(int lane, const float* send, float* recv, size_t count, ReduceOp op,
                           CommPrecision wire = CommPrecision::Fp32) = 0;
    // On lane 0: true on every process where any process passed true (votes to stop).
    virtual bool any(bool flag) = 0;
    // On lane 0: process `root`'s text on every process.
    virtual std::string broadcast(const std::string& text, int root = 0) = 0;
    // Point to point on lane 0 (complete on return). A message is `bytes` bytes tagged `tag`.
    struct Message {
        int peer = 0;
        int tag = 0;
        void* data = nullptr;
        size_t bytes = 0;
    };
    // Posts every receive, then every send, and waits for all of them.
    virtual void exchange(const std::vector<Message>& sends, const std::vector<Message>& receives) = 0;
    // Waits for the next message from any process: its sender, tag and length (not yet received).
    virtual Message probe() = 0;
    // Receives the message probe() announced into `data` (its length must be `bytes`).
    virtual void receive(const Message& m) = 0;
    // Point to point on `lane`, for a pipeline's stages in processes of their own: a send under
    // way returns at once (its buffer must stay as it is until the send's wait() has returned), so
    // two stages sending to each other at once (1f1b) do not wait for each other's receive; a
    // receive returns once `data` holds the message (exactly m.bytes long). awaitOn waits until
    // the message from `peer` tagged `tag` has arrived, without receiving it (so that a stage's
    // timeline tells waiting for its neighbour from receiving).
    class Sending {
    public:
        virtual ~Sending() = default;
        virtual void wait() = 0;
    };
    virtual std::unique_ptr<Sending> startSend(int lane, const Message& m) = 0;
    virtual void receiveOn(int lane, const Message& m) = 0;
    virtual void awaitOn(int lane, int peer, int tag) = 0;
    // Ends every process of the run with `code` (after this one has said why).
    [[noreturn]] virtual void abort(int code) = 0;

    // Every process's `text`, in rank order (a broadcast from each in turn: for start-up checks).
    std::vector<std::string> gather(const std::string& text);

    // Bytes this process sent to the others, by the definition above.
    int64_t bytesMoved() const { return bytes_.load(); }
    // Counts an all-reduce of `count` elements across the processes, also one another library
    // carried: NCCL's ring over `ranks` GPUs of several processes sends 2 (ranks - 1) / ranks x
    // count x 4 bytes (x 2 in bf16) over each link, one of which leaves this process (ranks 0: the
    // processes).
    void countAllReduce(size_t count, int ranks = 0, CommPrecision wire = CommPrecision::Fp32) {
        const int p = size(), r = ranks > 0 ? ranks : p;
        if (p > 1) bytes_ += int64_t(2.0 * (r - 1) / r * double(count) * double(gradientElementBytes(wire)));
    }

protected:
    void countSent(size_t bytes) { bytes_ += int64_t(bytes); }

private:
    std::atomic<int64_t> bytes_{0};
};

// The processes mpirun (Open MPI) or a PMI launcher (MPICH's hydra, Slurm) started this one
// among, from its environment; 0 when no launcher started it.
int launchedProcesses();
// The run's process group when this process was started by mpirun (a group of one for
// `mpirun -np 1`); null otherwise. Throws tb::Error (one sentence) where mpirun started several but this build has no
// MPI, or MPI cannot give the threads the towers need.
std::unique_ptr<ProcessGroup> joinProcessGroup();

}  // namespace tb
