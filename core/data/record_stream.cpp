// RecordStream: the interleave, the process's share, the shuffle buffer and the decoding team of
// data/record_stream.hpp; and the one pass over the shards that opens a streamed set.
#include "data/record_stream.hpp"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <numeric>
#include <optional>

#include "data/sample_transform.hpp"
#include "util/error.hpp"

namespace fs = std::filesystem;

namespace tb {
namespace {

int teamSize(int threads) { return threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency())); }

}  // namespace

uint64_t StreamedSet::size() const {
    uint64_t n = 0;
    for (const Shard& s : shards) n += s.records;
    return n;
}

uint64_t StreamedSet::bytes() const {
    uint64_t n = 0;
    for (const Shard& s : shards) n += s.bytes;
    return n;
}

StreamedSet openStreamedSet(const std::vector<std::string>& files, const TFRecordFeatures& features,
                            const std::string& name, ImageShape fit, int threads, const CancelCheck& cancelled) {
    StreamedSet set;
    set.name = name;
    set.features = features;
    set.fit = fit;
    set.shards.resize(files.size());
    std::vector<int64_t> maxLabel(files.size(), -1);
    std::atomic<bool> stop{false};
    ForkJoin team(teamSize(threads));
    team.run(files.size(), [&](size_t begin, size_t end, int) {
        std::string record;
        Example e;
        for (size_t f = begin; f < end && !stop; ++f) {
            TFRecordReader in(files[f]);
            StreamedSet::Shard& s = set.shards[f];
            s.path = files[f];
            s.bytes = in.size();
            while (in.next(record)) {
                if (cancelled && in.index() % 4096 == 0 && cancelled()) {
                    stop = true;
                    return;
                }
                // The label only: the images are decoded as they are trained on.
                const auto where = [&] { return files[f] + ": record " + std::to_string(in.index() - 1); };
                if (!e.parse(record)) throw Error(where() + " is not a tf.train.Example");
                const std::optional<int64_t> y = e.oneInt64(features.label);
                if (!y) throw Error(where() + " has no int64 feature '" + features.label + "' (--tfrecord-features label=KEY)");
                if (*y < 0 || *y >= 65536) throw Error(where() + ": label " + std::to_string(*y) + " is not a class index");
                maxLabel[f] = std::max(maxLabel[f], *y);
            }
            s.records = uint64_t(in.index());
        }
    });
    if (stop) throw Cancelled();
    set.numClasses = int(*std::max_element(maxLabel.begin(), maxLabel.end()) + 1);
    // The sample shape: the first record's (an encoded image's as fitted to `fit`).
    const auto first = std::find_if(set.shards.begin(), set.shards.end(), [](const auto& s) { return s.records > 0; });
    if (first == set.shards.end()) throw Error(files.front() + ": holds no records");
    TFRecordReader in(first->path);
    std::string record;
    in.next(record);
    Example e;
    ImageShape shape;
    std::vector<uint8_t> pixels;
    decodeExample(record, features, first->path, 0, e, fit, shape, pixels);
    set.channels = shape.channels, set.height = shape.height, set.width = shape.width;
    return set;
}

namespace {

// Decodes records [from, to) of a shard into d (its shape set), appending.
void appendRecords(const StreamedSet& set, const StreamedSet::Shard& s, uint64_t from, uint64_t to, Dataset& d) {
    TFRecordReader in(s.path);
    for (uint64_t i = 0; i < from; ++i) in.skip();
    std::string record;
    Example e;
    ImageShape shape{set.channels, set.height, set.width};
    std::vector<uint8_t> pixels;
    for (uint64_t i = from; i < to; ++i) {
        if (!in.next(record)) throw Error(s.path + ": ends after " + std::to_string(i) + " records, but held " + std::to_string(s.records) + " when it was opened");
        d.labels.push_back(decodeExample(record, set.features, s.path, i, e, set.fit, shape, pixels));
        d.pixels.insert(d.pixels.end(), pixels.begin(), pixels.end());
    }
}

Dataset emptyLike(const StreamedSet& set, const std::string& name) {
    Dataset d;
    d.name = name;
    d.channels = set.channels, d.height = set.height, d.width = set.width;
    d.numClasses = set.numClasses;
    return d;
}

}  // namespace

Dataset StreamedSet::head(size_t count) const {
    Dataset d = emptyLike(*this, name);
    for (const Shard& s : shards) {
        if (d.size() >= count) break;
        appendRecords(*this, s, 0, std::min<uint64_t>(s.records, count - d.size()), d);
    }
    return d;
}

Dataset StreamedSet::takeTail(size_t count, const std::string& tailName) {
    if (count > size())
        throw Error("validation split: " + std::to_string(count) + " samples requested but '" + name + "' has only " +
                    std::to_string(size()));
    std::vector<uint64_t> take(shards.size());
    uint64_t left = count;
    for (size_t i = shards.size(); i-- > 0 && left > 0;) {
        take[i] = std::min(left, shards[i].records);
        left -= take[i];
    }
    Dataset d = emptyLike(*this, tailName);
    for (size_t i = 0; i < shards.size(); ++i) {
        if (take[i] == 0) continue;
        appendRecords(*this, shards[i], shards[i].records - take[i], shards[i].records, d);
        shards[i].records -= take[i];
    }
    return d;
}

ChannelStatistics channelStatistics(const StreamedSet& set, float multiply, float add, int threads) {
    const size_t c = size_t(set.channels), plane = size_t(set.height) * size_t(set.width);
    std::vector<std::vector<double>> sums(set.shards.size(), std::vector<double>(2 * c));  // (shard) sum, sq by channel
    ForkJoin team(teamSize(threads));
    team.run(set.shards.size(), [&](size_t begin, size_t end, int) {
        std::string record;
        Example e;
        std::vector<uint8_t> pixels;
        for (size_t f = begin; f < end; ++f) {
            const StreamedSet::Shard& s = set.shards[f];
            TFRecordReader in(s.path);
            ImageShape shape{set.channels, set.height, set.width};
            for (uint64_t i = 0; i < s.records && in.next(record); ++i) {
                decodeExample(record, set.features, s.path, i, e, set.fit, shape, pixels);
                for (size_t ch = 0; ch < c; ++ch)
                    for (size_t k = 0; k < plane; ++k) {
                        const double v = double(float(pixels[ch * plane + k]) * multiply + add);
                        sums[f][ch] += v;
                        sums[f][c + ch] += v * v;
                    }
            }
        }
    });
    std::vector<double> sum(c), sq(c);
    for (const std::vector<double>& s : sums)
        for (size_t ch = 0; ch < c; ++ch) sum[ch] += s[ch], sq[ch] += s[c + ch];
    if (set.size() == 0) throw Error("--normalise mean-std: '" + set.name + "' holds no images to take statistics of");
    return statisticsOf(sum, sq, double(set.size()) * double(plane));
}

uint64_t streamBufferBytes(const StreamedSet& set, size_t bufferRecords) {
    const uint64_t records = std::min<uint64_t>(bufferRecords > 0 ? bufferRecords : kDefaultStreamBuffer, set.size());
    const uint64_t meanRecord = set.size() > 0 ? set.bytes() / std::max<uint64_t>(1, set.size()) : 0;
    return records * (meanRecord + sizeof(std::string) + 24) + kInterleaveFiles * (uint64_t(1) << 20);
}

RecordStream::RecordStream(const StreamedSet& set, PipelineOptions options) : set_(set), opt_(std::move(options)) {
    who_ = "input stream of '" + set.name + "'";
    if (set.size() == 0) throw Error(who_ + ": the set holds no records");
    checkPipelineOptions(opt_, who_, set.channels, set.height, set.width, true);
    outC_ = set.channels;
    outH_ = opt_.cropH > 0 ? opt_.cropH : set.height;
    outW_ = opt_.cropW > 0 ? opt_.cropW : set.width;
    const uint64_t n = set.size(), processes = uint64_t(opt_.sliceCount), p = uint64_t(opt_.sliceIndex);
    share_ = n / processes + (p < n % processes ? 1 : 0);
    if (share_ == 0)
        throw Error(who_ + ": its " + std::to_string(n) + " records leave none for process " + std::to_string(p) + " of " +
                    std::to_string(processes));
    bufferSize_ = !opt_.shuffle ? 1 : opt_.shuffleBuffer > 0 ? opt_.shuffleBuffer : kDefaultStreamBuffer;
    loaders_ = std::make_unique<ForkJoin>(std::max(1, opt_.loaderThreads));
    scratch_ = std::make_unique<Scratch[]>(size_t(loaders_->threads()));
    // Resume: this process has taken its share of the global samples skipped, whole epochs of them
    // and part of the next, whose draws are replayed.
    const uint64_t mine = opt_.skipSamples / processes;
    startEpoch(mine / share_);
    if (mine % share_ > 0) replay(mine % share_);
    taken_ = mine;
    startPrefetch(opt_.prefetch);
}

RecordStream::~RecordStream() { stopPrefetch(); }

void RecordStream::startEpoch(uint64_t epoch) {
    epoch_ = epoch;
    // The file order is every process's (so their shares of the interleave do not overlap); the
    // shuffle buffer's draws are this process's.
    std::mt19937_64 files(seedOf({opt_.seed, epoch}));
    fileOrder_.resize(set_.shards.size());
    std::iota(fileOrder_.begin(), fileOrder_.end(), 0u);
    if (opt_.shuffle)
        for (size_t i = fileOrder_.size() - 1; i > 0; --i) std::swap(fileOrder_[i], fileOrder_[uniformIndex(files, i + 1)]);
    orderRng_.seed(seedOf({opt_.seed, epoch, uint64_t(opt_.sliceIndex), uint64_t(opt_.sliceCount)}));
    cycle_.clear();
    cycle_.resize(std::min(kInterleaveFiles, fileOrder_.size()));
    nextFile_ = 0;
    for (size_t slot = 0; slot < cycle_.size(); ++slot) open(slot, fileOrder_[nextFile_++]);
    turn_ = 0;
    position_ = 0;
    buffer_.clear();
    filled_ = false;
}

void RecordStream::open(size_t slot, uint32_t shard) {
    const StreamedSet::Shard& s = set_.shards[shard];
    std::error_code ec;
    const uintmax_t bytes = fs::file_size(s.path, ec);
    if (ec)
        throw Error(who_ + ": " + s.path + " has gone since the run began (it held " + std::to_string(s.records) +
                    " records; " + ec.message() + "): put it back and resume the run");
    if (bytes != s.bytes)
        throw Error(who_ + ": " + s.path + " has changed since the run began (" + std::to_string(s.bytes) + " bytes then, " +
                    std::to_string(bytes) + " now): a streamed set must stay as it was while it trains");
    cycle_[slot] = {shard, std::make_unique<TFRecordReader>(s.path)};
}

bool RecordStream::nextRecord(Pending& out) {
    const uint64_t processes = uint64_t(opt_.sliceCount), p = uint64_t(opt_.sliceIndex);
    while (!cycle_.empty()) {
        OpenShard& o = cycle_[turn_];
        const StreamedSet::Shard& s = set_.shards[o.shard];
        if (uint64_t(o.in->index()) >= s.records) {  // this shard is done: the next one takes its place
            if (nextFile_ < fileOrder_.size()) {
                open(turn_, fileOrder_[nextFile_++]);
            } else {
                cycle_.erase(cycle_.begin() + std::ptrdiff_t(turn_));
                if (turn_ >= cycle_.size()) turn_ = 0;
            }
            continue;
        }
        const bool mine = position_++ % processes == p;
        if (mine) out.shard = o.shard, out.index = uint64_t(o.in->index()), out.offset = o.in->offset();
        const bool read = mine && !dry_ ? o.in->next(out.bytes) : o.in->skip();
        if (!read)
            throw Error(who_ + ": " + s.path + " ends after " + std::to_string(o.in->index()) + " records, but held " +
                        std::to_string(s.records) + " when the run began (it was cut short since)");
        if (mine && dry_) out.bytes.clear();
        turn_ = (turn_ + 1) % cycle_.size();
        if (mine) return true;
    }
    return false;
}

bool RecordStream::draw(Pending& out) {
    if (!filled_) {  // the epoch's first records fill the buffer
        buffer_.resize(bufferSize_);
        size_t n = 0;
        while (n < bufferSize_ && nextRecord(buffer_[n])) ++n;
        buffer_.resize(n);
        filled_ = true;
    }
    if (buffer_.empty()) return false;
    // tf.data shuffle(B): a random slot, refilled with the next record; at the epoch's end the
    // buffer drains. (Swapped, so strings' capacity circulates instead of being reallocated.)
    const size_t slot = bufferSize_ > 1 ? uniformIndex(orderRng_, buffer_.size()) : 0;
    std::swap(out, buffer_[slot]);
    if (!nextRecord(buffer_[slot])) {
        if (slot + 1 != buffer_.size()) std::swap(buffer_[slot], buffer_.back());
        buffer_.pop_back();
    }
    return true;
}

void RecordStream::replay(uint64_t records) {
    dry_ = true;
    Pending p;
    for (uint64_t i = 0; i < records; ++i) draw(p);
    dry_ = false;
    // The records still waiting in the buffer are read now, in file order (forward seeks only).
    std::vector<Pending*> waiting;
    for (Pending& q : buffer_) waiting.push_back(&q);
    std::sort(waiting.begin(), waiting.end(),
              [](const Pending* a, const Pending* b) { return a->shard != b->shard ? a->shard < b->shard : a->offset < b->offset; });
    std::unique_ptr<TFRecordReader> in;
    uint32_t shard = 0;
    for (Pending* q : waiting) {
        if (!in || q->shard != shard) in = std::make_unique<TFRecordReader>(set_.shards[q->shard].path), shard = q->shard;
        in->seek(q->offset, int64_t(q->index));
        if (!in->next(q->bytes))
            throw Error(who_ + ": " + set_.shards[shard].path + " ends before record " + std::to_string(q->index) +
                        " (it was cut short since the run began)");
    }
}

bool RecordStream::makeBatch(Batch& b) {
    if (passDone_) return false;
    const size_t cap = size_t(opt_.batchSize);
    if (batchRecords_.size() < cap) batchRecords_.resize(cap);
    size_t n = 0;
    while (n < cap) {
        if (draw(batchRecords_[n])) {
            ++n;
        } else if (!opt_.repeat) {
            passDone_ = true;
            break;
        } else {
            startEpoch(epoch_ + 1);  // repeating batches straddle epochs, so every batch is full
        }
    }
    if (n == 0) return false;
    const size_t per = size_t(outC_) * size_t(outH_) * size_t(outW_);
    b.n = int(n);
    b.c = outC_, b.h = outH_, b.w = outW_;
    b.x.resize(n * per);
    b.y.resize(n);
    const uint64_t first = taken_;
    loaders_->run(n, [&](size_t begin, size_t end, int worker) { decode(begin, end, worker, b, first); });
    taken_ += n;
    return true;
}

void RecordStream::decode(size_t begin, size_t end, int worker, Batch& b, uint64_t first) {
    Scratch& s = scratch_[size_t(worker)];
    const size_t per = size_t(outC_) * size_t(outH_) * size_t(outW_);
    for (size_t i = begin; i < end; ++i) {
        const Pending& r = batchRecords_[i];
        const std::string& path = set_.shards[r.shard].path;
        ImageShape shape{set_.channels, set_.height, set_.width};
        const int32_t y = decodeExample(r.bytes, set_.features, path, r.index, s.example, set_.fit, shape, s.pixels);
        if (y >= set_.numClasses)
            throw Error(who_ + ": " + path + ": record " + std::to_string(r.index) + " has label " + std::to_string(y) +
                        ", but the set held " + std::to_string(set_.numClasses) + " classes when the run began");
        SplitMix64 rng{seedOf({opt_.seed ^ 0xA5A5A5A55A5A5A5Aull, uint64_t(opt_.sliceIndex), first + i})};
        const SampleDraws d = opt_.augment ? drawAugmentation(rng, opt_, set_.height, set_.width, outH_, outW_)
                                           : centralWindow(set_.height, set_.width, outH_, outW_);
        transformSample(s.pixels.data(), nullptr, set_.channels, set_.height, set_.width, opt_, outH_, outW_, d,
                        b.x.data() + i * per, s.transpose);
        b.y[i] = y;
    }
}

}  // namespace tb
