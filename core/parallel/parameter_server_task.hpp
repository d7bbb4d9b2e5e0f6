// Parameter servers as processes (--ps-tasks P under mpirun): processes 0 .. P-1 hold the
// variables, dealt round-robin by variable (as model_deploy deals them over ps tasks); processes
// P .. N-1 are workers, each with its own towers on its slice of every global batch; process P is
// the chief (writes the run's folder, evaluates). Per step a worker sends each server its towers'
// mean gradient of that server's shard (fp32, or bf16) and gets the shard's variables back in fp32:
//   sync   the server applies the mean of every worker's gradients and sends all the same shard
//          (equal to the holder mean over every worker's towers)
//   async  the server applies each push as it comes and answers that worker alone
// Optimiser slots live on the servers. Async workers' tower reports ride each push to server 0,
// which sends every worker's latest after the shard of each answer.
// Checkpoints: the chief asks every server for its state between steps (kStateTag, no bytes; a
// server answers between pushes, and after serving), and at the end for the final one (kFinalTag,
// no bytes; answered in kind, after which the server ends): a state
// message is a reply header (its update count), the shard's variables, then each optimiser slot
// of the shard (Optimizer::slotBuffers' order). A resumed server reads its shard, slots and count
// from the chief's checkpoint itself (state/server<k>/...: the processes share the run's folder).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/process_group.hpp"
#include "nn/model_spec.hpp"
#include "nn/network.hpp"
#include "parallel/strategy.hpp"
#include "util/error.hpp"

namespace tb {

// Which elements of the flat variables each server holds.
class ShardLayout {
public:
    ShardLayout(const Network& net, int tasks);
    int tasks() const { return int(ranges_.size()); }
    size_t count(int shard) const { return counts_[size_t(shard)]; }
    // shard's elements of `flat` (paramCount floats) into `packed` (count(shard) floats), and back.
    void pack(int shard, const float* flat, float* packed) const;
    void unpack(int shard, const float* packed, float* flat) const;

private:
    std::vector<std::vector<std::pair<size_t, size_t>>> ranges_;  // per shard: (offset, count)
    std::vector<size_t> counts_;
};

// What travels with each message, before the shard's floats.
struct PushHeader {
    int64_t step = 0;    // sync: the step these gradients are of (the workers' count)
    int64_t total = 0;   // the run's updates, as the workers worked it out
    int32_t stop = 0;    // the worker was asked to stop (its user, a signal)
    int32_t unused = 0;
};
struct ReplyHeader {
    int64_t update = 0;      // updates this server has applied, this push's included
    int64_t staleness = 0;   // async: updates others applied since the worker's previous answer
    float lr = 0;            // the learning rate of this push's update
    int32_t applied = 0;     // 0: the push came after the last update and was not applied
    int32_t last = 0;        // the server takes no more updates: the worker ends here
    int32_t unused = 0;
};
enum MessageTag : int { kPushTag = 101, kReplyTag = 102, kByeTag = 103, kFinalTag = 104, kStateTag = 105, kStateReplyTag = 106 };

// Optimiser slots an update rule keeps per variable (Optimizer::slotBuffers' count).
int slotsOf(UpdateRule rule);
// A server's state message's floats: its shard and its slots.
inline size_t stateFloats(size_t count, UpdateRule rule) { return count * size_t(1 + slotsOf(rule)); }
// Where a checkpoint keeps server `shard`'s state (after "state/"): "server<k>/optimizer/m", and
// "server<k>/updates", its update count as two floats (hi, lo: 24 bits each, exact to 2^48).
std::string serverStateName(int shard, const std::string& name);
void updatesToFloats(int64_t updates, float* two);
int64_t updatesFromFloats(const float* two);

// Message buffers: a header, then a shard's floats (aligned: the header is a whole number of
// floats, and the vector's storage is aligned for any scalar).
template <class Header>
struct ShardMessage {
    static_assert(std::is_trivially_copyable_v<Header> && sizeof(Header) % alignof(float) == 0);
    std::vector<unsigned char> bytes;
    void resize(size_t floats) { bytes.assign(sizeof(Header) + floats * sizeof(float), 0); }
    Header header() const {
        Header h;
        std::memcpy(&h, bytes.data(), sizeof h);
        return h;
    }
    void setHeader(const Header& h) { std::memcpy(bytes.data(), &h, sizeof h); }
    float* floats() { return reinterpret_cast<float*>(bytes.data() + sizeof(Header)); }
    uint16_t* halves() { return reinterpret_cast<uint16_t*>(bytes.data() + sizeof(Header)); }  // bf16 gradients
    ProcessGroup::Message to(int peer, int tag) { return {peer, tag, bytes.data(), bytes.size()}; }
};

// Floats a shard's `count` gradients take in a push: bf16 packs two to a float (rounded up), so
// what follows them stays aligned.
inline size_t pushGradientFloats(size_t count, CommPrecision p) {
    return p == CommPrecision::Bf16 ? (count + 1) / 2 : count;
}

// A checkpoint as a resumed server reads it (engine/checkpoint.hpp's, opened by the caller).
class SavedRun {
public:
    virtual ~SavedRun() = default;
    virtual std::vector<float> weights(const Network& layout) const = 0;  // the variables in its layout
    virtual void readState(const std::string& name, float* dst, size_t count) const = 0;  // state/NAME
};

class ParameterServerTask {
public:
    // Server `shard` (= its process's rank) of the layout's; `init` is the whole flat variables.
    // Every worker runs `towersPerWorker` towers and pushes its gradients in `gradients`' format.
    ParameterServerTask(ProcessGroup& processes, const ShardLayout& layout, const std::vector<float>& init,
                        const OptimizerSettings& opt, bool async, int towersPerWorker, CommPrecision gradients);
    ~ParameterServerTask();
    // Serves until every worker is done. Sync: `afterStep` runs after each step's answers (the
    // run's vote, a collective every process makes) and returns true where the run stops there;
    // a stop asked of a worker waits for that vote (async: it travels in the worker's next push).
    void serve(const std::function<bool()>& afterStep);
    // A resumed run: the shard, its optimiser slots and the update count from the chief's checkpoint.
    void restore(const SavedRun& from, const Network& layout);
    // Answers the chief's requests for the state until it asks for the final one (its evaluation
    // and last checkpoint need every shard and its slots).
    void finish();
    int64_t updates() const { return update_; }

private:
    void serveSync(const std::function<bool()>& afterStep);
    void serveAsync();
    // Sync: every worker's push of the step into pushes (by worker), answering the chief's state
    // requests that come first.
    void receivePushes(std::vector<ShardMessage<PushHeader>>& pushes);
    // The state message (kStateTag's answer, or the final one) to `peer`.
    void sendState(int peer, int tag);
    void answerStateRequest(const ProcessGroup::Message& m);
    void receiveEmpty(const ProcessGroup::Message& m);  // a message of no bytes (a request, a goodbye)
    // The refusal of message m: "... received B bytes tagged T from process P" + `due`.
    Error unexpected(const ProcessGroup::Message& m, const std::string& due) const;
    ReplyHeader apply(const float* grads, int64_t total, bool stopAsked);
    size_t pushFloats() const { return pushGradientFloats(layout_.count(shard_), gradients_); }
    size_t replyFloats() const { return layout_.count(shard_) + reports_.size(); }

    ProcessGroup& processes_;
    const ShardLayout& layout_;
    int shard_, workers_;
    bool async_;
    CommPrecision gradients_;
    size_t reportFloats_;         // per worker's push: its towers' report (async server 0), else 0
    std::vector<float> reports_;  // (workers x reportFloats_) every worker's latest report
    struct Holder;
    std::unique_ptr<Holder> holder_;  // the shard's variables and optimiser, on a CPU backend
    int64_t update_ = 0;
    bool stopAsked_ = false;
    bool finalAsked_ = false;  // the chief has asked for the final state (async: while others pushed on)
};

// A parameter-server process from start to end.
struct ParameterServerSettings {
    std::string model;      // --model
    uint64_t seed = 0;      // the variables' initial values, as every tower makes them
    int tasks = 1;          // --ps-tasks
    OptimizerSettings opt;
    bool async = false;
    CommPrecision gradients = CommPrecision::Fp32;
    // --init-from: the variables' starting values in this network's layout; empty: the seed's.
    std::function<std::vector<float>(const Network&)> initFrom;
    // A resumed run: the checkpoint at the path the chief sends, opened.
    std::function<std::unique_ptr<SavedRun>(const std::string& path)> openSaved;
};
// Makes every collective the workers make, in the same order: the plan's check (checkSamePlan,
// whose text says how many towers each worker runs), the resumed checkpoint's path (RunPlan::of;
// empty: a new run), the vote before the first step and (sync) each step's vote, which `vote`
// makes given the towers per worker (a server counts no examples).
void serveParameters(ProcessGroup& processes, int chief, const ParameterServerSettings& settings,
                     const std::function<bool(int towers)>& vote);

}  // namespace tb
