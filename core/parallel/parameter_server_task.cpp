#include "parallel/parameter_server_task.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "backend/registry.hpp"
#include "optim/optimizer.hpp"
#include "parallel/processes.hpp"
#include "util/error.hpp"

namespace tb {

ShardLayout::ShardLayout(const Network& net, int tasks) : ranges_(size_t(tasks)), counts_(size_t(tasks), 0) {
    for (size_t v = 0; v < net.paramInfos().size(); ++v) {
        const size_t s = v % size_t(tasks), n = size_t(net.paramInfos()[v].shape.numel());
        ranges_[s].emplace_back(size_t(net.paramOffsets()[v]), n);
        counts_[s] += n;
    }
    for (int s = 0; s < tasks; ++s) {
        if (counts_[size_t(s)] == 0)
            throw Error("--ps-tasks: " + std::to_string(tasks) + " parameter-server tasks, but the model has only " +
                        std::to_string(net.paramInfos().size()) + " variables to deal over them");
        // One message carries a shard (MPI counts are ints).
        if (counts_[size_t(s)] * sizeof(float) + sizeof(ReplyHeader) > size_t(std::numeric_limits<int>::max()))
            throw Error("--ps-tasks: shard " + std::to_string(s) + " holds " +
                        std::to_string(counts_[size_t(s)] * sizeof(float) >> 20) +
                        " MiB, over one MPI message's 2 GiB; use more parameter-server tasks");
    }
}

void ShardLayout::pack(int shard, const float* flat, float* packed) const {
    for (auto [off, n] : ranges_[size_t(shard)]) {
        std::memcpy(packed, flat + off, n * sizeof(float));
        packed += n;
    }
}

void ShardLayout::unpack(int shard, const float* packed, float* flat) const {
    for (auto [off, n] : ranges_[size_t(shard)]) {
        std::memcpy(flat + off, packed, n * sizeof(float));
        packed += n;
    }
}

int slotsOf(UpdateRule rule) { return int(Optimizer::slotNames(rule).size()); }

std::string serverStateName(int shard, const std::string& name) { return "server" + std::to_string(shard) + "/" + name; }

void updatesToFloats(int64_t updates, float* two) {
    two[0] = float(updates >> 24);
    two[1] = float(updates & 0xffffff);
}

int64_t updatesFromFloats(const float* two) {
    if (!(two[0] >= 0 && two[0] < 16777216.f && two[1] >= 0 && two[1] < 16777216.f))
        throw Error("a server's update count in the checkpoint is not two counts of 24 bits");
    return (int64_t(two[0]) << 24) | int64_t(two[1]);
}

struct ParameterServerTask::Holder {
    std::shared_ptr<Backend> backend;
    Stream stream = nullptr;
    Tensor params, mean;  // (count) the shard's variables; the workers' mean gradients (sync), or a bf16 push widened (async)
    std::unique_ptr<Optimizer> opt;
    ~Holder() {
        opt.reset();
        params = mean = Tensor();
        if (backend) backend->destroyStream(stream);
    }
};

ParameterServerTask::ParameterServerTask(ProcessGroup& processes, const ShardLayout& layout,
                                         const std::vector<float>& init, const OptimizerSettings& opt, bool async,
                                         int towersPerWorker, CommPrecision gradients)
    : processes_(processes),
      layout_(layout),
      shard_(processes.rank()),
      workers_(processes.size() - layout.tasks()),
      async_(async),
      gradients_(gradients),
      reportFloats_(async && shard_ == 0 ? size_t(towersPerWorker) * kTowerReportFloats : 0),
      reports_(size_t(workers_) * reportFloats_, std::nanf("")),
      holder_(std::make_unique<Holder>()) {
    const size_t count = layout_.count(shard_);
    Holder& h = *holder_;
    h.backend = makeBackend(Device{}, BackendOptions{1});  // the update of one shard: one core's work
    h.stream = h.backend->createStream();
    h.params = h.backend->empty(Shape{int64_t(count)});
    h.mean = h.backend->empty(Shape{int64_t(count)});
    layout_.pack(shard_, init.data(), h.params.data());
    h.opt = std::make_unique<Optimizer>(*h.backend, opt.rule, opt.hyper, opt.schedule, count, h.stream);
    h.backend->synchronize(h.stream);
}

ParameterServerTask::~ParameterServerTask() = default;

ReplyHeader ParameterServerTask::apply(const float* grads, int64_t total, bool stopAsked) {
    stopAsked_ = stopAsked_ || stopAsked;
    ReplyHeader r;
    if (!stopAsked_ && update_ < total) {
        Holder& h = *holder_;
        r.lr = h.opt->apply(h.stream, h.params.data(), grads, update_);
        h.backend->synchronize(h.stream);
        ++update_;
        r.applied = 1;
    }
    r.update = update_;
    r.last = stopAsked_ || update_ >= total;
    return r;
}

void ParameterServerTask::serve(const std::function<bool()>& afterStep) {
    if (async_) serveAsync();
    else serveSync(afterStep);
}

// Served: the chief may still ask for the state (its last checkpoint) until it asks for the final one.
void ParameterServerTask::finish() {
    const int chief = layout_.tasks();
    while (!finalAsked_) {
        const ProcessGroup::Message m = processes_.probe();
        if (m.tag == kStateTag) {
            answerStateRequest(m);
            continue;
        }
        if (m.tag != kFinalTag || m.peer != chief || m.bytes != 0)
            throw unexpected(m, " after serving, where only the chief's requests for its state were due");
        receiveEmpty(m);
        finalAsked_ = true;
    }
    sendState(chief, kFinalTag);
}

void ParameterServerTask::sendState(int peer, int tag) {
    const size_t count = layout_.count(shard_);
    Holder& h = *holder_;
    ShardMessage<ReplyHeader> m;
    m.resize(stateFloats(count, h.opt->rule()));
    ReplyHeader header;
    header.update = update_;
    m.setHeader(header);
    float* at = m.floats();
    std::memcpy(at, h.params.data(), count * sizeof(float));
    for (auto& [name, slot] : h.opt->slotBuffers()) std::memcpy(at += count, slot->data(), count * sizeof(float));
    processes_.exchange({m.to(peer, tag)}, {});
}

Error ParameterServerTask::unexpected(const ProcessGroup::Message& m, const std::string& due) const {
    return Error("--ps-tasks: server " + std::to_string(shard_) + " received " + std::to_string(m.bytes) +
                 " bytes tagged " + std::to_string(m.tag) + " from process " + std::to_string(m.peer) + due);
}

void ParameterServerTask::receiveEmpty(const ProcessGroup::Message& m) {
    unsigned char none = 0;
    processes_.receive({m.peer, m.tag, &none, 0});
}

void ParameterServerTask::answerStateRequest(const ProcessGroup::Message& m) {
    if (m.peer != layout_.tasks() || m.bytes != 0)
        throw Error("--ps-tasks: server " + std::to_string(shard_) + " was asked for its state by process " +
                    std::to_string(m.peer) + " (" + std::to_string(m.bytes) + " bytes), not by the chief");
    receiveEmpty(m);
    sendState(m.peer, kStateReplyTag);
}

void ParameterServerTask::restore(const SavedRun& from, const Network& layout) {
    const std::vector<float> weights = from.weights(layout);
    Holder& h = *holder_;
    const size_t count = layout_.count(shard_);
    layout_.pack(shard_, weights.data(), h.params.data());
    for (auto& [name, slot] : h.opt->slotBuffers())
        from.readState(serverStateName(shard_, "optimizer/" + name), slot->data(), count);
    float two[2];
    from.readState(serverStateName(shard_, "updates"), two, 2);
    update_ = updatesFromFloats(two);
}

// Every worker's push of one step (a worker pushes step s + 1 only after every answer of step s).
void ParameterServerTask::receivePushes(std::vector<ShardMessage<PushHeader>>& pushes) {
    const int first = layout_.tasks();
    std::vector<bool> got(size_t(workers_), false);
    for (int left = workers_; left > 0;) {
        const ProcessGroup::Message m = processes_.probe();
        if (m.tag == kStateTag) {
            answerStateRequest(m);
            continue;
        }
        const int w = m.peer - first;
        if (w < 0 || w >= workers_ || got[size_t(w)] || m.tag != kPushTag || m.bytes != pushes[0].bytes.size())
            throw unexpected(m, " where one push of " + std::to_string(pushes[0].bytes.size()) + " bytes from each worker was due");
        processes_.receive(pushes[size_t(w)].to(m.peer, kPushTag));
        got[size_t(w)] = true;
        --left;
    }
}

// Every worker's gradients of one step (in the order of the workers, so that every run sums them
// alike), their mean applied once, the new shard to every worker.
void ParameterServerTask::serveSync(const std::function<bool()>& afterStep) {
    const size_t count = layout_.count(shard_);
    const int first = layout_.tasks();
    std::vector<ShardMessage<PushHeader>> pushes(static_cast<size_t>(workers_));
    for (auto& p : pushes) p.resize(pushFloats());
    ShardMessage<ReplyHeader> reply;
    reply.resize(count);
    std::vector<ProcessGroup::Message> sends;
    for (int w = 0; w < workers_; ++w) sends.push_back(reply.to(first + w, kReplyTag));
    std::vector<const float*> grads;
    std::vector<WireSource> halves;
    for (auto& p : pushes) {
        grads.push_back(p.floats());
        halves.push_back({p.halves(), nullptr});
    }
    Holder& holder = *holder_;
    for (;;) {
        receivePushes(pushes);
        for (int w = 0; w < workers_; ++w)
            if (const PushHeader h = pushes[size_t(w)].header(); h.step != update_)
                throw Error("--ps-tasks: worker " + std::to_string(first + w) + " sent the gradients of step " +
                            std::to_string(h.step) + " where step " + std::to_string(update_) + " was due");
        if (gradients_ == CommPrecision::Bf16) reduceWire(halves, 0, count, holder.mean.data(), ReduceOp::Mean);
        else reduceChunk(*holder.backend, holder.stream, Range{0, count}, grads, holder.mean.data(), ReduceOp::Mean);
        const ReplyHeader r = apply(holder.mean.data(), pushes[0].header().total, false);  // a stop asked for is voted on after the step
        reply.setHeader(r);
        std::memcpy(reply.floats(), holder_->params.data(), count * sizeof(float));
        processes_.exchange(sends, {});
        const bool voted = afterStep();
        if (r.last || voted) return;
    }
}

// Pushes in the order they come; each answered alone. A worker told `last` pushes no more; one
// that ends because another server told it so says goodbye instead.
void ParameterServerTask::serveAsync() {
    const size_t count = layout_.count(shard_);
    const int first = layout_.tasks();
    ShardMessage<PushHeader> push;
    push.resize(pushFloats() + reportFloats_);
    ShardMessage<ReplyHeader> reply;
    reply.resize(replyFloats());
    std::vector<int64_t> answered(size_t(workers_), update_);  // the update each worker last received
    std::vector<bool> done(size_t(workers_), false);
    int running = workers_;
    while (running > 0) {
        const ProcessGroup::Message m = processes_.probe();
        if (m.tag == kStateTag) {
            answerStateRequest(m);
            continue;
        }
        if (m.tag == kFinalTag && m.peer == first && m.bytes == 0 && done[0]) {
            // The chief is done while others push on: its final state once they are done too.
            receiveEmpty(m);
            finalAsked_ = true;
            continue;
        }
        const int w = m.peer - first;
        if (w < 0 || w >= workers_ || done[size_t(w)])
            throw Error("--ps-tasks: server " + std::to_string(shard_) + " received a message from process " +
                        std::to_string(m.peer) + ", which is not a running worker");
        if (m.tag == kByeTag) {
            receiveEmpty(m);
            done[size_t(w)] = true;
            --running;
            continue;
        }
        if (m.tag != kPushTag || m.bytes != push.bytes.size())
            throw unexpected(m, " where a push of " + std::to_string(push.bytes.size()) + " bytes was due");
        processes_.receive(push.to(m.peer, kPushTag));
        const int64_t staleness = update_ - answered[size_t(w)];
        const PushHeader h = push.header();
        const float* grads = push.floats();
        if (gradients_ == CommPrecision::Bf16) {
            widenBf16(push.halves(), holder_->mean.data(), count);
            grads = holder_->mean.data();
        }
        ReplyHeader r = apply(grads, h.total, h.stop != 0);
        r.staleness = staleness;
        reply.setHeader(r);
        std::memcpy(reply.floats(), holder_->params.data(), count * sizeof(float));
        std::copy_n(push.floats() + pushFloats(), reportFloats_, reports_.begin() + std::ptrdiff_t(size_t(w) * reportFloats_));
        std::copy(reports_.begin(), reports_.end(), reply.floats() + count);
        processes_.exchange({reply.to(m.peer, kReplyTag)}, {});
        answered[size_t(w)] = update_;
        if (r.last) {
            done[size_t(w)] = true;
            --running;
        }
    }
}

void serveParameters(ProcessGroup& processes, int chief, const ParameterServerSettings& settings,
                     const std::function<bool(int towers)>& vote) {
    const int towers = towersOfPlan(processes.broadcast(std::string(), chief));
    const std::string resumed = processes.broadcast(std::string(), chief);
    const ModelSpec spec = findModel(settings.model);
    const std::shared_ptr<Backend> cpu = makeBackend(Device{}, BackendOptions{1});
    Network net(spec, *cpu, 1);  // the variables' layout and initial values, as every tower makes them
    const std::vector<float> init = settings.initFrom ? settings.initFrom(net) : net.initialParams(settings.seed);
    const ShardLayout layout(net, settings.tasks);
    ParameterServerTask task(processes, layout, init, settings.opt, settings.async, towers, settings.gradients);
    if (!resumed.empty()) task.restore(*settings.openSaved(resumed), net);
    if (!processes.any(false)) task.serve([&] { return vote(towers); });
    task.finish();
}

}  // namespace tb
