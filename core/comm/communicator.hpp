// Communicator: every transfer between towers, and between towers and the variables' holder,
// goes through one (PyTorch's ProcessGroup, NCCL's communicator); strategies never read another
// tower's buffers. Ranks are towers (backend, device, own stream); the holder is the backend whose
// memory keeps the variables. Implementations: shared memory, copies, NCCL (implementations.hpp);
// across processes, each rank's chunk goes on over the ProcessGroup (process_group.hpp).
// Collectives: every rank calls from its own thread with completed buffers (its stream synchronised);
// a rank that fails still meets the others (rethrown at the end); buffers are read until every
// rank has returned. Bytes moved, as between separate devices (nothing within one device; a read
// in place counts as the transfer it replaces), E = 4 bytes an element, 2 for bf16 gradients:
//   reduceToHolder, broadcastFromHolder   count x E for each rank not on the holder's device
//   allReduce                            2 (D - 1) x count x E over the ranks' D distinct devices (ring)
//   allGather                            (D - 1) x count x 4 for each rank's count (each device
//                                        receives every other device's part; always fp32)
//   pull, push                           count x E for a rank not on the holder's device
// bf16 gradients (reduceToHolder, allReduce, push; variables move in fp32) are rounded on the
// sender's device into its wire buffer (summed in fp32 here, in bf16 by MPI and NCCL), a collective
// buffer: a rank's next gradient collective must not begin before every rank has returned from
// its last (TowerSet's step barrier and the strategies' meets see to it).
#pragma once
#include <atomic>
#include <mutex>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "comm/bf16_wire.hpp"
#include "comm/process_group.hpp"
#include "util/abortable_barrier.hpp"

namespace tb {

enum class ReduceOp { Sum, Mean };

// One rank: a tower's device, its backend and its own queue there.
struct RankEndpoint {
    Backend* backend = nullptr;
    Stream stream = nullptr;
    Device device;
};

// The holder of the variables: its backend and device (the host as a parameter server, or one of
// the ranks' devices).
struct HolderEndpoint {
    Backend* backend = nullptr;
    Device device;
};

struct Range {
    size_t begin = 0, end = 0;
    size_t size() const { return end - begin; }
};

enum class CommKind { SharedMemory, Copies, Nccl };

class Communicator {
public:
    Communicator(std::vector<RankEndpoint> ranks, HolderEndpoint holder);
    virtual ~Communicator();
    Communicator(const Communicator&) = delete;
    Communicator& operator=(const Communicator&) = delete;

    virtual std::string name() const = 0;  // "shared memory", "copies"
    int size() const { return int(ranks_.size()); }
    const RankEndpoint& endpoint(int rank) const { return ranks_[size_t(rank)]; }
    // Rank r's share of `count` elements, in whole cache lines, for work split across the ranks.
    Range chunk(int rank, size_t count) const;
    // True when the rank reads the holder's memory in place (a strategy may then bind its
    // replica to the holder's variables, and broadcastFromHolder has nothing to copy).
    virtual bool sharesHolder(int rank) const = 0;

    // holder := op over every rank's `send` (count floats). Returns where the holder reads the
    // result: `holderScratch` (count floats of holder memory), or a single rank's own buffer
    // where the holder reads it in place. On return this rank's chunk(rank, count) of it is
    // complete; all of it once every rank has returned.
    virtual const float* reduceToHolder(int rank, const float* send, float* holderScratch, size_t count,
                                        ReduceOp op) = 0;
    // recv := holderSrc (nothing to do where recv is holderSrc itself). Complete on return.
    virtual void broadcastFromHolder(int rank, const float* holderSrc, float* recv, size_t count) = 0;
    // Every rank's buf := op over all of them, in place. Complete for all ranks on return.
    virtual void allReduce(int rank, float* buf, size_t count, ReduceOp op) = 0;
    // recv (size() x count floats) := every rank's `send` (count floats), rank by rank, on every
    // rank; send may be recv's own part (recv + rank x count). Complete for all ranks on return.
    // In one process (a layer split over devices, issue 32): refused across processes.
    virtual void allGather(int rank, const float* send, float* recv, size_t count) = 0;
    // Point to point with the holder (asynchronous updates), complete on return: the rank's dst
    // := the holder's src; and the rank's src made readable by the holder (returns where).
    virtual void pull(int rank, const float* holderSrc, float* dst, size_t count) = 0;
    virtual const float* push(int rank, const float* src, size_t count) = 0;
    void barrier(int rank);
    // A rank that failed and will not come to the collectives it had left: every rank waiting in
    // one, and every later collective, throws `why` instead of waiting for it (NCCL: the group is
    // aborted). For good: the communicator serves no step after.
    virtual void abandon(const std::string& why);
    // Not a collective: from one thread while the ranks are idle (evaluating, say), out (count
    // floats on rank 0's device) := the mean of every rank's buffer. Not counted as traffic.
    virtual void meanOfRanks(const std::vector<const float*>& perRank, float* out, size_t count) = 0;
    // Rank r's queue on the holder's backend, for its share of the holder's work.
    Stream holderStream(int rank) const { return holderStreams_[size_t(rank)]; }

    // Bytes moved by the definition above: all ranks, and one rank's point-to-point share.
    int64_t bytesMoved() const { return total_.load(); }
    int64_t bytesMovedBy(int rank) const { return byRank_[size_t(rank)]->load(); }
    // Seconds this rank waited inside collectives for the others since the last call.
    double takeWaitSeconds(int rank);

protected:
    // Waits for every rank (timed as this rank's wait).
    void meet(int rank);
    // Runs one stage of a collective: a failure is kept (in `failure`) instead of thrown, so the
    // rank still meets the others at every barrier of the collective; rethrown at its end.
    template <class F>
    static void attempt(std::exception_ptr& failure, F&& f) {
        if (failure) return;
        try {
            f();
        } catch (...) {
            failure = std::current_exception();
        }
    }
    void countByRank(int rank, int64_t bytes);
    void countTotal(int64_t bytes);
    bool onHolderDevice(int rank) const { return ranks_[size_t(rank)].device == holder_.device; }
    int64_t ringBytes(size_t count) const;  // 2 (D - 1) x count x the gradients' element bytes
    // An all-gather's count: (D - 1) x count x 4 per rank (rank 0 counts them all); refuses processes.
    void countAllGather(int rank, size_t count);
    bool bf16Gradients() const { return gradients_ == CommPrecision::Bf16; }
    int64_t gradientBytes(size_t count) const { return int64_t(count * gradientElementBytes(gradients_)); }
    // bf16 gradients, and the rank's go somewhere: it is not on the holder's device, or (no holder)
    // the replicas span several devices or processes.
    bool roundsOnWire(int rank) const {
        return bf16Gradients() && (holder_.backend ? !onHolderDevice(rank) : distinctDevices_ > 1 || processes_);
    }
    bool anyRoundsOnWire() const;
    // bf16 gradients: the rank's `src` (on its device) rounded there, its bits in the rank's host
    // wire buffer (what crosses; count elements).
    void toWire(int rank, const float* src, size_t count);
    // ...and widened again where the holder reads it (the rank's landing buffer, host, returned).
    const float* throughWire(int rank, const float* src, size_t count);
    // dst (count floats on the rank's device) := bf16 bits from host memory, widened on the device.
    void fromWire(int rank, const uint16_t* hostBits, float* dst, size_t count);
    // The rank's bf16 buffer on its own device (maxCount): a GPU's, or its host wire buffer.
    uint16_t* deviceWire(int rank) const;
    // A bf16 buffer of host memory (maxCount): the copies' all-reduce result as it crosses back.
    uint16_t* resultWire() const { return resultWire_.get(); }
    // out's chunk c := op over every rank's gradients, summed in fp32 in rank order: the wire
    // buffer of a rank that rounds, `fp32[rank]` (host memory) of one that does not.
    void reduceGradients(Range c, const std::vector<const float*>& fp32, float* out, ReduceOp op) const;
    // p's chunk c := itself rounded to bf16 (an all-reduce's result crossing back).
    static void roundTrip(float* p, Range c);

    std::vector<RankEndpoint> ranks_;
    HolderEndpoint holder_;
    std::vector<Stream> holderStreams_;    // per rank, on the holder's backend: its share of reductions
    std::vector<const float*> published_;  // per rank: the buffer it brought to the current collective
    std::vector<float*> publishedOut_;
    ProcessGroup* processes_ = nullptr;  // the processes the reductions span beyond this one's towers
    CommPrecision gradients_ = CommPrecision::Fp32;

private:
    friend std::unique_ptr<Communicator> makeCommunicator(CommKind, std::vector<RankEndpoint>, HolderEndpoint, size_t,
                                                          ProcessGroup*, CommPrecision);
    // bf16 gradients only, per rank that rounds (maxCount): its gradients as sent (host memory,
    // pinned for a GPU rank; a GPU rank rounds into deviceWire_ first), and widened as received.
    // NCCL (`hostSide` false) reduces the device buffers alone, every GPU rank's.
    void prepareWire(size_t maxCount, bool hostSide);
    std::vector<std::shared_ptr<uint16_t>> wire_, deviceWire_;
    std::vector<std::vector<float>> landed_;
    std::shared_ptr<uint16_t> resultWire_;
    AbortableBarrier barrier_;
    std::mutex abandonedMutex_;
    std::string abandoned_;  // abandon()'s why
    std::atomic<int64_t> total_{0};
    std::vector<std::unique_ptr<std::atomic<int64_t>>> byRank_;
    std::vector<double> waited_;
    int distinctDevices_ = 0;
};

// out[c] := op over the sources' chunk c, on `be` and stream `s`, completed: out := the first,
// then each other added in order, then scaled for the mean (so every caller sums alike).
void reduceChunk(Backend& be, Stream s, Range c, const std::vector<const float*>& sources, float* out, ReduceOp op);

// The communicator for ranks and a holder (holder.backend null: no holder, replicas only);
// `maxCount` bounds the floats of one transfer (staging is sized for it); `processes`: the other
// processes of the run the reductions span (CPU towers: shared memory, then MPI; GPU towers: NCCL
// over every process's GPUs, or copies to the host, then MPI), or null; `gradients`: the
// gradients' number format on the wire (bf16: a GPU holder through NCCL only).
std::unique_ptr<Communicator> makeCommunicator(CommKind kind, std::vector<RankEndpoint> ranks, HolderEndpoint holder,
                                               size_t maxCount, ProcessGroup* processes = nullptr,
                                               CommPrecision gradients = CommPrecision::Fp32);

// Across processes, a collective: "" where no GPU holds towers of two processes, else a sentence
// naming the first such GPU and its processes (NCCL refuses two ranks on one GPU).
std::string gpuSharedByProcesses(ProcessGroup& processes, const std::vector<Device>& towers);

}  // namespace tb
