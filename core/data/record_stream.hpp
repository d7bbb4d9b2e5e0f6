// Streamed input: a TFRecord training split of many shards, larger than memory, read as it is
// used (the tf.data pipeline of the seeds: list_files(shuffle) -> interleave -> shard -> shuffle
// -> map(decode, parallel) -> batch -> prefetch). Memory is bounded by the buffers, whatever the
// set's size: the shuffle buffer's encoded records, one batch's records being decoded, and the
// prefetched batches.
//
// One epoch, for process p of P (one process: p = 0, P = 1):
//   files     the shards in an order drawn from (seed, epoch), every process's; kInterleaveFiles of them open at
//             once, one record from each in turn (tf.data interleave, block length 1), the next
//             shard taking the place of one that ends;
//   share     record k of that interleaved sequence is process p's where k % P == p (the others
//             are stepped over unread), so the processes' shares of an epoch never overlap and
//             differ in size by at most one record;
//   shuffle   p's records pass a shuffle buffer of `shuffleBuffer` records (0: kDefaultStreamBuffer),
//             drawn from (seed, epoch, p, P); the buffer fills with the epoch's first records
//             and drains at its end, and repeating batches straddle epochs;
//   decode    each batch's records are decoded and transformed by `loaderThreads` threads (the
//             caller among them), a contiguous share each; sample s of this process (counted
//             from the run's start) draws its augmentation from SplitMix64(f(seed, p, s)), so the
//             output does not depend on the number of threads.
// So the order is fixed by the seed and the process count, and resume is exact for the same
// process count: skipSamples restarts the right epoch at once and replays its draws so far
// stepping over the records, decoding none. The towers of a process take contiguous slices of
// each of its batches (parallel/tower_set.hpp), so they too never share a record.
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "data/batch_source.hpp"
#include "data/dataset.hpp"
#include "data/pipeline.hpp"
#include "data/tfrecord_dataset.hpp"
#include "io/tfrecord.hpp"
#include "util/fork_join.hpp"

namespace tb {

inline constexpr size_t kDefaultStreamBuffer = 10000;
inline constexpr size_t kInterleaveFiles = 16;

// A split's shards as a stream reads them: each one's size and record count as they were when the
// set was opened (a shard that has changed or gone since is an error when the stream reaches it).
struct StreamedSet {
    struct Shard {
        std::string path;
        uint64_t bytes = 0;    // the file's size when opened
        uint64_t records = 0;  // the records the stream reads: the first `records` of the file
    };
    std::string name;
    TFRecordFeatures features;
    std::vector<Shard> shards;  // in name order
    ImageShape fit;             // what encoded images are fitted to (0: the first record's)
    int channels = 0, height = 0, width = 0;  // every sample's (c, h, w)
    int numClasses = 0;                       // the largest label + 1
    uint64_t size() const;      // records in all
    uint64_t bytes() const;     // the shards' bytes

    // The first `count` records in file order, decoded into memory (samples to look at).
    Dataset head(size_t count) const;
    // Takes the last `count` records (in file order) out of the stream into a set in memory: the
    // validation split, as splitTail takes it from a set in memory.
    Dataset takeTail(size_t count, const std::string& name);
};

// Opens `files` for streaming: every record's framing and label read on `threads` threads (0:
// every core; a shard per thread at a time) to count the records and classes, the sample shape
// from the first record (encoded images: fitted to `fit`). One tb::Error naming the file and
// record on any fault; Cancelled where `cancelled` says so.
StreamedSet openStreamedSet(const std::vector<std::string>& files, const TFRecordFeatures& features,
                            const std::string& name, ImageShape fit, int threads, const CancelCheck& cancelled = {});

// --normalise mean-std over a streamed set: one pass over every record, a shard per thread, the
// shards' sums added in shard order (so the result does not depend on `threads`).
ChannelStatistics channelStatistics(const StreamedSet& set, float multiply, float add, int threads);

// What a stream of `set` holds in memory with a shuffle buffer of `bufferRecords` (0: the
// default): the buffer's records at the set's mean size, and the open shards' read buffers.
uint64_t streamBufferBytes(const StreamedSet& set, size_t bufferRecords);

class RecordStream final : public BatchSource {
public:
    // `set` is not copied: it must outlive the stream. Throws tb::Error on bad options.
    RecordStream(const StreamedSet& set, PipelineOptions options);
    ~RecordStream() override;

    // This process's records in one epoch.
    uint64_t epochShare() const { return share_; }

private:
    // A record waiting in the shuffle buffer: its bytes (none while a resume replays the epoch)
    // and where it is, for the bytes and for error messages.
    struct Pending {
        std::string bytes;
        uint32_t shard = 0;
        uint64_t index = 0, offset = 0;
    };
    struct OpenShard {
        uint32_t shard = 0;
        std::unique_ptr<TFRecordReader> in;
    };

    bool makeBatch(Batch& b) override;
    void startEpoch(uint64_t epoch);
    void open(size_t slot, uint32_t shard);     // the shard into an interleave slot, checked
    bool nextRecord(Pending& out);              // this process's next record of the epoch
    bool draw(Pending& out);                    // the shuffle buffer's next record
    void replay(uint64_t records);              // resume: this epoch's first draws, no bytes
    void decode(size_t begin, size_t end, int worker, Batch& b, uint64_t first);

    const StreamedSet& set_;
    PipelineOptions opt_;
    std::string who_;
    uint64_t share_ = 0;     // this process's records per epoch
    size_t bufferSize_ = 1;  // the shuffle buffer's records (1: in order)
    std::unique_ptr<ForkJoin> loaders_;

    // The epoch being read (the loader thread's, or the caller's without prefetch).
    uint64_t epoch_ = 0;
    std::mt19937_64 orderRng_;
    std::vector<uint32_t> fileOrder_;  // the shards in this epoch's order
    size_t nextFile_ = 0;              // the next of fileOrder_ to open
    std::vector<OpenShard> cycle_;     // the interleave's open shards
    size_t turn_ = 0;                  // the slot whose record comes next
    uint64_t position_ = 0;            // records of the interleaved sequence so far (every process's)
    std::vector<Pending> buffer_;
    bool filled_ = false;              // the buffer has had its epoch's first records
    bool dry_ = false;                 // replaying: records are stepped over, their places kept
    bool passDone_ = false;
    uint64_t taken_ = 0;               // this process's samples so far (the augmentation counter)

    // One batch's records being decoded, and each loader thread's scratch.
    std::vector<Pending> batchRecords_;
    struct Scratch {
        Example example;
        std::vector<uint8_t> pixels;
        std::vector<float> transpose;
    };
    std::unique_ptr<Scratch[]> scratch_;  // (loader threads)
};

}  // namespace tb
