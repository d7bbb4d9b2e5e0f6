// BatchSource's loader thread: waits for room, makes a batch, queues it; the caller takes the
// oldest and hands back its spent buffers for reuse.
#include "data/batch_source.hpp"

#include <utility>

#include "util/error.hpp"
#include "util/compute_thread.hpp"

namespace tb {

void checkPipelineOptions(const PipelineOptions& o, const std::string& who, int c, int h, int w, bool images) {
    if (o.batchSize < 1) throw Error(who + ": batch size " + std::to_string(o.batchSize) + " is not positive");
    if (o.prefetch < 0) throw Error(who + ": prefetch " + std::to_string(o.prefetch) + " is negative");
    if (o.sliceCount < 1 || o.sliceIndex < 0 || o.sliceIndex >= o.sliceCount || (o.sliceCount > 1 && !o.repeat))
        throw Error(who + ": slice " + std::to_string(o.sliceIndex) + " of " + std::to_string(o.sliceCount) +
                    " (a repeating pipeline's slice from 0 to the count)");
    if (!o.channelMean.empty() && (o.channelMean.size() != size_t(c) || o.channelStd.size() != size_t(c)))
        throw Error(who + ": channel statistics of " + std::to_string(o.channelMean.size()) + " channels for samples of " +
                    std::to_string(c));
    if (o.augment && o.pad > 0 && !images)
        throw Error(who + ": --augment crop pads images, and these samples are features (not pixels)");
    if (o.pad < 0 || o.pad > 1024 || o.brightness < 0 || !(o.contrastLow <= o.contrastHigh))
        throw Error(who + ": augmentation pad " + std::to_string(o.pad) + ", brightness " + std::to_string(o.brightness) +
                    ", contrast " + std::to_string(o.contrastLow) + "-" + std::to_string(o.contrastHigh) +
                    " (a pad of 0-1024 pixels, a brightness >= 0, a contrast range low <= high)");
    if (o.cropH < 0 || o.cropW < 0 || o.cropH > h || o.cropW > w)
        throw Error(who + ": crop " + std::to_string(o.cropH) + "x" + std::to_string(o.cropW) + " does not fit its " +
                    std::to_string(h) + "x" + std::to_string(w) + " samples");
    if (o.skipSamples > 0 && !o.repeat) throw Error(who + ": only a repeating (training) pipeline can skip samples");
}

BatchSource::~BatchSource() { stopPrefetch(); }

void BatchSource::startPrefetch(int prefetch) {
    prefetch_ = prefetch;
    if (prefetch_ > 0) producer_ = std::thread([this] { produce(); });
}

void BatchSource::stopPrefetch() {
    {
        std::lock_guard<std::mutex> lk(mutex_);
        stop_ = true;
    }
    spaceCv_.notify_all();
    readyCv_.notify_all();
    if (producer_.joinable()) producer_.join();
}

void BatchSource::produce() {
    enterComputeThread();  // augmentation and standardisation are float arithmetic (util/compute_thread.hpp)
    for (;;) {
        Batch b;
        {
            // Wait for room first, so at most `prefetch` batches are ever made ahead.
            std::unique_lock<std::mutex> lk(mutex_);
            spaceCv_.wait(lk, [this] { return stop_ || ready_.size() < size_t(prefetch_); });
            if (stop_) return;
            if (!spare_.empty()) {
                b = std::move(spare_.back());
                spare_.pop_back();
            }
        }
        bool ok = false;
        try {
            ok = makeBatch(b);
        } catch (...) {
            std::lock_guard<std::mutex> lk(mutex_);
            error_ = std::current_exception();
            finished_ = true;
            readyCv_.notify_all();
            return;
        }
        {
            std::lock_guard<std::mutex> lk(mutex_);
            if (ok)
                ready_.push_back(std::move(b));
            else
                finished_ = true;
        }
        readyCv_.notify_one();
        if (!ok) return;
    }
}

bool BatchSource::next(Batch& out) {
    if (prefetch_ == 0) return makeBatch(out);
    std::unique_lock<std::mutex> lk(mutex_);
    readyCv_.wait(lk, [this] { return !ready_.empty() || finished_; });
    if (ready_.empty()) {
        if (error_) std::rethrow_exception(error_);
        return false;
    }
    std::swap(out, ready_.front());
    spare_.push_back(std::move(ready_.front()));  // the caller's old buffers, reused by the producer
    ready_.pop_front();
    if (spare_.size() > size_t(prefetch_) + 1) spare_.pop_back();  // callers passing fresh batches
    lk.unlock();
    spaceCv_.notify_one();
    return true;
}

}  // namespace tb
