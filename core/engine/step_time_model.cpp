#include "engine/step_time_model.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include <oneapi/dnnl/dnnl.h>
#include <nlohmann/json.hpp>

#include "engine/prediction_text.hpp"
#include "engine/scaling_sweep.hpp"
#include "util/error.hpp"
#include "util/compute_thread.hpp"
#include "util/elapsed.hpp"

namespace tb {

bool variablesReplicated(const std::string& s) { return s == "allreduce" || s.starts_with("average:"); }

namespace {

double amdahl(double serial, int threads) { return serial + (1 - serial) / std::max(1, threads); }
int averageEvery(const std::string& s) { return s.starts_with("average:") ? std::stoi(s.substr(8)) : 0; }
bool holderApplies(const std::string& s) { return s == "mean"; }  // each tower its chunk of the holder's update

using text::megabytes;
using text::ms;
using text::percent;

double parseNumber(const std::string& text, const std::string& what) {
    try {
        size_t used = 0;
        const double v = std::stod(text, &used);
        if (used == text.size() && std::isfinite(v) && v > 0 && v < 1e18) return v;
    } catch (const std::exception&) {
    }
    throw Error(what + ": '" + text + "' is not a positive number");
}

std::vector<std::string> splitColons(const std::string& s) {
    std::vector<std::string> out(1);
    for (char c : s) {
        if (c == ':') out.emplace_back();
        else out.back().push_back(c);
    }
    return out;
}

void checkScenario(const Scenario& s) {
    if (s.towers < 1 || s.towers > 100000) throw Error("towers: give 1 to 100000");
    if (s.threadsPerTower < 1 || s.cores < 1) throw Error("threads and cores: give at least 1");
    if (s.batchPerTower < 1) throw Error("batch per tower: give at least 1");
    if (s.psShards < 1) throw Error("--ps-shards: give at least 1");
    if (s.machines < 1 || s.machines > s.towers) throw Error("--machines: give 1 to the number of towers");
    if (!s.slowdown.empty() && int(s.slowdown.size()) != s.towers) throw Error("slowdown: one factor per tower");
    for (double f : s.slowdown)
        if (!(f >= 1)) throw Error("slowdown: factors must be at least 1");
    RunConfig probe;
    applyStrategy(probe, s.strategy);
    if (s.device && (s.link.bandwidth <= 0 || (s.machines > 1 && s.network.bandwidth <= 0)))
        throw Error("--link/--network: GPU towers need the links that join them");
}

// The bytes one tower moves per step and the seconds they take; `where` names the link.
struct Transfer {
    double seconds = 0, bytes = 0;
    std::string where;
    std::string parts;  // where the seconds go when more than one thing takes them
};

Transfer transferOf(const Calibration& cal, const Assumptions& a, const Scenario& s, double hostBandwidth) {
    const int n = s.towers;
    const double B = 4.0 * double(cal.params);
    const int k = averageEvery(s.strategy);
    Transfer t;
    if (!s.device) {  // CPU towers: reductions in shared memory, each tower's thread its chunk
        t.where = "the shared-memory reduction";
        if (n == 1 || s.strategy == "async") return t;  // read in place
        if (s.strategy == "mean") {
            t.bytes = B * (1 + 1.0 / n);
            t.seconds = a.hostLatency + t.bytes / hostBandwidth;
        } else {  // all-reduce of gradients, or of parameters every K steps
            t.bytes = B * (2 + 1.0 / n);
            t.seconds = 2 * a.hostLatency + t.bytes / hostBandwidth;
            if (k > 0) t.seconds /= k, t.bytes /= k;
        }
        return t;
    }
    const int perMachine = (n + s.machines - 1) / s.machines;
    const int remote = n - perMachine;  // towers on machines other than the holder's
    if (!variablesReplicated(s.strategy)) {  // mean, async: variables down and gradients up over each tower's link
        t.where = "the CPU holder's " + s.link.name + " link";
        t.bytes = 2 * B;
        t.seconds = 2 * (s.link.latency + B / s.link.bandwidth);
        t.parts = s.link.name + " " + ms(t.seconds);
        if (s.strategy == "mean" && n > 1) {  // the holder's mean, each tower's thread its chunk
            const double mean = B * (1 + 1.0 / n) / hostBandwidth;
            t.seconds += mean;
            t.parts += ", the holder's mean on the CPU " + ms(mean);
        }
        if (s.machines > 1) {  // the holder's network links carry every remote tower's traffic, split over S shards
            t.where = "the parameter servers' " + s.network.name + " links";
            const double net = s.network.latency + remote * 2 * B / (s.psShards * s.network.bandwidth);
            t.seconds += net;
            t.parts += ", " + s.network.name + " " + ms(net);
        }
        return t;
    }
    t.where = "the " + s.link.name + " ring";
    if (perMachine > 1) {
        const double g = perMachine;
        t.bytes += 2 * (g - 1) / g * B;
        t.seconds += 2 * (g - 1) * s.link.latency + 2 * (g - 1) / g * B / s.link.bandwidth;
    }
    if (s.machines > 1) {
        const double m = s.machines;
        t.where = "the " + s.network.name + " ring between machines";
        t.bytes += 2 * (m - 1) / m * B;
        t.seconds += 2 * (m - 1) * s.network.latency + 2 * (m - 1) / m * B / s.network.bandwidth;
    }
    if (k > 0) t.seconds /= k, t.bytes /= k;
    return t;
}

// The effective bandwidth of this machine's reductions: from the calibration run where it had
// several towers reducing, else the measured copy rate (or the stated one).
double hostBandwidthOf(const Calibration& cal, const Assumptions& a) {
    if (a.hostBandwidth > 0) return a.hostBandwidth;
    const int n = cal.towers;
    const double B = 4.0 * double(cal.params);
    if (n > 1 && (cal.strategy == "mean" || variablesReplicated(cal.strategy))) {
        const int k = std::max(1, averageEvery(cal.strategy));
        const double bytes = cal.strategy == "mean" ? B * (1 + 1.0 / n) : B * (2 + 1.0 / n);
        const double latency = (cal.strategy == "mean" ? 1 : 2) * a.hostLatency;
        // Measured with threads sharing cores, the reduction took `share` times its own time.
        const double share = std::max(1.0, double(n * cal.threadsPerTower) / cal.cores);
        const double spent = cal.measured.reduce * k / share - latency;
        if (spent > 0) return bytes / spent;
    }
    return cal.host.bandwidth > 0 ? cal.host.bandwidth : 5e9;
}

// One tower's step in parts, before the strategy puts them together.
struct Terms {
    double compute = 0, apply = 0, data = 0, other = 0;
    double wait = 0;  // at the sync point beyond the stragglers' (measured: towers sharing a GPU finish apart)
    double holderApply = 0;  // one push's update at the holder when nothing competes for its core
    Transfer transfer;
};

Terms termsOnCpuOrPreset(const Calibration& cal, const Assumptions& a, const Scenario& s) {
    // Under a microsecond of compute per step is no measurement (and would make every rate infinite).
    if (cal.measured.compute < 1e-6 || cal.batchPerTower < 1 || cal.params < 1)
        throw Error("calibration: the measured run has no compute time (under 1 us per step), batch or parameters");
    const int n = s.towers, n0 = cal.towers;
    const double P = double(cal.params);
    // One thread's seconds per example, and per parameter updated, in the calibration run.
    const double share0 = std::max(1.0, double(n0 * cal.threadsPerTower) / cal.cores);
    const double speed0 = amdahl(a.serialShare, cal.threadsPerTower) * share0;
    const double perExample = cal.measured.compute / (cal.batchPerTower * speed0);
    const double units0 = holderApplies(cal.strategy) ? P / n0 : P;
    const double perParam = cal.measured.apply / (units0 * speed0);
    const double units = holderApplies(s.strategy) ? P / n : P;

    Terms t;
    if (!s.device) {
        const double threads = amdahl(a.serialShare, s.threadsPerTower);
        const double speed = threads * std::max(1.0, double(n * s.threadsPerTower) / s.cores);
        t.compute = perExample * s.batchPerTower * speed;
        t.apply = perParam * units * speed;
        t.holderApply = perParam * units * threads;
    } else {
        if (cal.host.flops <= 0) throw Error("calibration: this machine's FLOP/s were not measured");
        t.compute = perExample * s.batchPerTower * cal.host.flops / s.device->flops;
        // Replicas update on their device (about 5 floats read or written per parameter); the
        // CPU holder as measured here, one thread per tower.
        t.apply = variablesReplicated(s.strategy) ? 20.0 * P / s.device->memoryBandwidth : perParam * units;
        t.holderApply = t.apply;
    }
    // CPU towers whose threads outnumber the cores share them in every phase their threads run,
    // not only in compute and apply: the reductions and the step's other cost take `share` times
    // their own time too (a sweep of 4 towers on 2 cores measured no gain over 2 towers, which
    // the model had put at +12% with only compute and apply shared).
    const double share = s.device ? 1.0 : std::max(1.0, double(n * s.threadsPerTower) / s.cores);
    t.transfer = transferOf(cal, a, s, hostBandwidthOf(cal, a));
    t.transfer.seconds *= share;
    // The input pipeline as it kept up in the calibration run: its measured wait per step.
    t.data = cal.measured.dataWait * a.dataScale;
    // What the calibration's wall clock saw beyond what the model makes of its own configuration
    // (the step loop, handing batches and reports over, the noise of a barrier): a fixed cost per
    // step of the towers' own time, measured, so that the model reproduces its calibration run.
    if (cal.strategy != "async" && cal.measured.examplesPerSec > 0) {
        Scenario own;
        own.towers = n0;
        own.threadsPerTower = cal.threadsPerTower;
        own.cores = cal.cores;
        own.batchPerTower = cal.batchPerTower;
        own.strategy = cal.strategy;
        const double modelled = cal.measured.dataWait + cal.measured.compute + cal.measured.apply +
                                transferOf(cal, a, own, hostBandwidthOf(cal, a)).seconds * share0;
        t.other = std::max(0.0, double(n0) * cal.batchPerTower / cal.measured.examplesPerSec - modelled) / share0 * share;
    }
    return t;
}

// Towers sharing the one GPU a sweep measured (see DeviceCalibration), each phase from the
// one-tower point of the variables' place (host: mean, async; GPU: all-reduce, averaging) and,
// where the sweep has one, its point of S towers (the model then reproduces both):
//   compute   f + N b c: the fixed part f (launches, kernels too small to fill the GPU) overlaps
//             across the towers' streams, the per-example part c serialises on the GPU (two
//             points give both; one gives c alone)
//   the rest  data wait, reduce (the host: pulls and pushes over the GPU's one link, which the towers
//             share, and the holder's mean; the GPU: the all-reduce in its memory), waiting at
//             the sync point (towers sharing a GPU finish apart), apply and the step's other
//             cost, each as measured at 1 and S towers, straight between them in N (one point:
//             as measured there, and an all-reduce of B(2 + 1/N) at the assumed device_gbps);
//             averaging every K divides the reduce by K
Terms termsOnMeasuredDevice(const Calibration& cal, const Assumptions& a, const Scenario& s) {
    const DeviceCalibration& d = *cal.device;
    if (s.device) throw Error("--device: this sweep measured towers sharing " + d.gpu + "; it predicts towers on that GPU, "
                              "not other hardware (calibrate from a sweep of CPU towers for that)");
    if (s.machines > 1) throw Error("--machines: this sweep measured towers sharing " + d.gpu + " on one machine");
    const bool onGpu = variablesReplicated(s.strategy);
    const StepProfile& one = onGpu ? d.oneOnGpu : d.oneOnHost;
    const StepProfile& shared = onGpu ? d.sharedOnGpu : d.sharedOnHost;
    if (one.steps < 1 || one.examplesPerSec <= 0)
        throw Error(std::string("calibration: the sweep measured no tower with the variables on ") +
                    (onGpu ? "the GPU (add allreduce to --sweep-strategies)" : "the host (add mean to --sweep-strategies)"));
    if (one.compute < 1e-6 || cal.params < 1 || cal.batchPerTower < 1)
        throw Error("calibration: the measured run has no compute time (under 1 us per step), batch or parameters");
    const int n = s.towers, S = d.sharedTowers;
    const bool two = S > 1 && shared.steps > 0 && shared.examplesPerSec > 0;
    const double b0 = cal.batchPerTower, B = 4.0 * double(cal.params);
    double perExample = one.compute / b0, fixed = 0;
    if (two && shared.compute > one.compute) {
        perExample = (shared.compute - one.compute) / ((S - 1) * b0);
        fixed = std::max(0.0, one.compute - b0 * perExample);
        if (fixed == 0) perExample = one.compute / b0;
    }
    // A phase at N towers: straight between its value at 1 and at S towers (never below 0).
    auto between = [&](double atOne, double atS) {
        return two ? std::max(0.0, atOne + (n - 1) * (atS - atOne) / (S - 1)) : atOne;
    };
    auto otherOf = [b0](const StepProfile& m, int towers) {
        return std::max(0.0, towers * b0 / m.examplesPerSec - (m.dataWait + m.compute + m.wait + m.reduce + m.apply));
    };
    Terms t;
    t.compute = fixed + n * s.batchPerTower * perExample;
    t.data = between(one.dataWait, shared.dataWait) * a.dataScale;
    t.wait = between(one.wait, shared.wait);
    t.apply = between(one.apply, shared.apply);
    t.holderApply = one.apply;
    t.other = between(otherOf(one, 1), two ? otherOf(shared, S) : 0);
    Transfer& tr = t.transfer;
    if (!onGpu) {
        tr.where = d.gpu + "'s host link and the holder";
        tr.bytes = 2 * B;
        tr.seconds = between(one.reduce, shared.reduce);
        tr.parts = std::to_string(n) + (n == 1 ? " tower" : " towers") + " pulling and pushing " + megabytes(B) + " each";
    } else {
        tr.where = "the all-reduce in " + d.gpu + "'s memory";
        if (n > 1) {
            tr.bytes = B * (2 + 1.0 / n);
            tr.seconds = two ? between(one.reduce, shared.reduce) : tr.bytes / a.deviceBandwidth;
            if (const int k = averageEvery(s.strategy); k > 0) tr.seconds /= k, tr.bytes /= k;
        }
    }
    return t;
}

// `transfer`, where given, receives the transfer's parts (for the bottleneck's sentence).
Prediction predictSteps(const Calibration& cal, const Assumptions& a, const Scenario& s, Transfer* transfer = nullptr) {
    checkScenario(s);
    const Terms terms = cal.device ? termsOnMeasuredDevice(cal, a, s) : termsOnCpuOrPreset(cal, a, s);
    if (transfer) *transfer = terms.transfer;
    const int n = s.towers;
    const double compute = terms.compute, apply = terms.apply, holderApply = terms.holderApply, data = terms.data,
                 other = terms.other, sharedWait = terms.wait;
    const Transfer& t = terms.transfer;

    Prediction p;
    p.bytesPerTower = t.bytes;
    StepProfile& ph = p.phases;
    std::vector<double> factor(size_t(n), 1.0);
    if (!s.slowdown.empty()) factor = s.slowdown;
    if (s.strategy != "async") {
        double slowest = 0;
        for (double f : factor) slowest = std::max(slowest, data + compute * f);
        for (double f : factor) {
            ph.straggle += compute * (f - 1) / n;
            ph.wait += std::max(0.0, slowest - data - compute * f) / n;
            ph.wait += sharedWait / n;
        }
        ph.dataWait = data;
        ph.compute = compute;
        ph.reduce = t.seconds;
        ph.apply = apply;
        p.stepSeconds = slowest + sharedWait + t.seconds + apply + other;
        p.examplesPerSec = double(n) * s.batchPerTower / p.stepSeconds;
    } else {
        // Each tower cycles alone; pushes queue at the holder, one at a time per shard (M/D/1),
        // which can take at most S / holderApply pushes a second.
        double rate = 0;  // pushes per second, before queueing
        for (double f : factor) rate += 1.0 / (data + compute * f + t.seconds + apply + other);
        const double limit = holderApply > 0 ? s.psShards / holderApply : 1e300;
        const double load = std::min(0.9, rate / limit);
        const double queue = holderApply * load / (2 * (1 - load));
        double examples = 0;
        for (double f : factor) {
            const double cycle = data + compute * f + t.seconds + apply + other + queue;
            examples += s.batchPerTower / cycle;
            ph.straggle += compute * (f - 1) / n;
        }
        examples = std::min(examples, s.batchPerTower * limit);  // the holder's limit
        ph.dataWait = data;
        ph.compute = compute;
        ph.wait = queue;
        ph.reduce = t.seconds;
        ph.apply = apply;
        p.examplesPerSec = examples;
        p.stepSeconds = double(n) * s.batchPerTower / examples;  // per n pushes: a "step" of every tower
        p.meanStaleness = n - 1;
    }
    p.otherSeconds = other;
    ph.steps = 1;
    ph.examplesPerSec = p.examplesPerSec;
    ph.bytesPerStep = t.bytes * n;
    return p;
}

// CPU towers whose threads outnumber the cores: what the towers beyond the cores add over the
// most towers that have a core per thread, by the model's own numbers; empty otherwise.
std::string beyondTheCores(const Calibration& cal, const Assumptions& a, const Scenario& s, const Prediction& p) {
    const int threads = s.towers * s.threadsPerTower;
    if (s.device || cal.device || threads <= s.cores) return {};
    std::string text = " " + std::to_string(threads) + " threads share " + std::to_string(s.cores) +
                       (s.cores == 1 ? " core" : " cores");
    Scenario fit = s;
    fit.towers = std::max(1, s.cores / s.threadsPerTower);
    if (fit.towers >= s.towers) return text + ".";
    if (!fit.slowdown.empty()) fit.slowdown.resize(size_t(fit.towers));
    if (fit.towers == 1) fit.strategy = "mean";
    const double fewer = predictSteps(cal, a, fit).examplesPerSec, gain = p.examplesPerSec / fewer - 1;
    return text + ": the towers beyond " + std::to_string(fit.towers) + (fit.towers == 1 ? " tower " : " towers ") +
           (std::abs(gain) < 0.005 ? std::string("add no examples/sec")
                                   : (gain > 0 ? "add " : "cost ") + percent(std::abs(gain)) + " examples/sec") +
           " (" + std::to_string(int(std::lround(p.examplesPerSec))) + " against " +
           std::to_string(int(std::lround(fewer))) + ").";
}

std::string limitOf(const Calibration& cal, const Assumptions& a, const Scenario& s, const Prediction& p,
                    const Transfer& t) {
    const StepProfile& ph = p.phases;
    const double step = ph.stepSeconds() + p.otherSeconds;
    struct Term {
        double seconds;
        const char* name;
    };
    // Async: a straggler holds no one (its own updates are fewer); waiting is the holder's queue.
    const bool async = s.strategy == "async";
    const Term terms[] = {{ph.reduce, "reduce"}, {ph.wait + (async ? 0 : ph.straggle), "wait"}, {ph.apply, "apply"},
                          {ph.dataWait, "data"}, {p.otherSeconds, "other"}};
    const Term worst = *std::max_element(std::begin(terms), std::end(terms),
                                         [](const Term& x, const Term& y) { return x.seconds < y.seconds; });
    const std::string who = s.describe() + ": ";
    if (step <= 0 || worst.seconds < 0.1 * step) {
        std::string text = who + "compute bound: forward and backward take " + percent(ph.compute / step) + " of the step";
        if (async && ph.straggle > 0.1 * step)
            return text + "; the straggler trains fewer examples but holds no one (mean staleness " +
                   std::to_string(int(std::lround(p.meanStaleness))) + ").";
        return text + "; towers on more devices would add examples/sec almost in proportion.";
    }
    auto better = [&](const std::vector<std::string>& options) {  // the best other strategy, in words
        std::string best;
        double gain = 0;
        for (const std::string& o : options) {
            if (o == s.strategy) continue;
            Scenario alt = s;
            alt.strategy = o;
            try {
                const double g = predictSteps(cal, a, alt).examplesPerSec / p.examplesPerSec - 1;
                if (g > gain) gain = g, best = o;
            } catch (const Error&) {  // an alternative the calibration cannot predict (no point measured it)
            }
        }
        if (best.empty()) return std::string("no other strategy would be faster");
        const std::string name = best == "mean" ? "the CPU holder"
                                 : best == "allreduce" ? (s.towers == 1 ? "the variables on the device" : "all-reduce")
                                 : best == "async" ? "async updates" : "averaging every " + best.substr(8) + " steps";
        return name + " would raise examples/sec by " + percent(gain);
    };
    if (worst.name == std::string("reduce")) {
        const int n = s.towers;
        return who + t.where + " carries " + std::to_string(n) + " x " + megabytes(p.bytesPerTower) + " per step (" +
               ms(ph.reduce) + " of the " + ms(step) + " step" + (t.parts.empty() ? "" : ": " + t.parts) + "); " +
               better({"mean", "allreduce", "average:" + std::to_string(std::clamp(2 * averageEvery(s.strategy), 4, 9999))}) + ".";
    }
    if (worst.name == std::string("wait") && async) {
        Scenario more = s;
        more.psShards = 2 * s.psShards;
        const double gain = predictSteps(cal, a, more).examplesPerSec / p.examplesPerSec - 1;
        return who + "pushes queue at the holder: " + ms(ph.wait) + " of each " + ms(step) +
               " cycle waits for a shard's lock; " + std::to_string(more.psShards) + " shards would raise examples/sec by " +
               percent(gain) + ".";
    }
    if (worst.name == std::string("wait"))
        return who + "the slowest tower holds the others: " + ms(ph.wait + ph.straggle) + " of the " + ms(step) +
               " step is waiting or straggling; " + better({"async"}) + " (at the price of stale gradients).";
    if (worst.name == std::string("apply"))
        return who + "applying the update takes " + ms(ph.apply) + " of the " + ms(step) + " step; " +
               better({"mean", "allreduce"}) + ".";
    if (worst.name == std::string("data"))
        return who + "the input pipeline: towers wait " + ms(ph.dataWait) + " of the " + ms(step) + " step for data.";
    return who + "the step's fixed cost measured in the calibration run (the step loop, handing batches and reports "
                 "over) is " + ms(p.otherSeconds) + " of the " + ms(step) + " step: more work per step (a larger batch "
                 "per tower) would hide it.";
}

}  // namespace

const std::vector<ProcessorSpec>& processorPresets() {
    // fp32 (CUDA cores, no tensor cores) peak and memory bandwidth from the makers' data sheets.
    static const std::vector<ProcessorSpec> presets = {
        {"h100", 67e12, 3.35e12}, {"a100", 19.5e12, 2.04e12}, {"v100", 15.7e12, 0.9e12},
        {"l4", 30.3e12, 0.3e12},  {"rtx4090", 82.6e12, 1.01e12}};
    return presets;
}

const std::vector<LinkSpec>& linkPresets() {
    // Bandwidth one way as transfers reach it (not the signalling rate), latency per transfer.
    static const std::vector<LinkSpec> presets = {
        {"pcie4", 10e-6, 25e9},      {"pcie5", 10e-6, 50e9},   {"nvlink", 5e-6, 400e9},
        {"10gbe", 50e-6, 1.1e9},     {"100gbe", 20e-6, 11e9},  {"infiniband", 3e-6, 24e9}};
    return presets;
}

namespace {

// A preset by name, else the three fields NAME:A:B of one described by hand.
template <class Spec>
const Spec* presetOrFields(const std::vector<Spec>& presets, const std::string& text, const std::string& flag,
                           const char* what, const char* form, std::vector<std::string>& fields) {
    for (const Spec& p : presets)
        if (p.name == text) return &p;
    fields = splitColons(text);
    if (fields.size() == 3 && !fields[0].empty()) return nullptr;
    std::string names;
    for (const Spec& p : presets) names += (names.empty() ? "" : ", ") + p.name;
    throw Error(flag + ": unknown " + what + " '" + text + "' (" + names + ", or " + form + ")");
}

}  // namespace

ProcessorSpec parseProcessor(const std::string& text, const std::string& flag) {
    std::vector<std::string> f;
    if (const ProcessorSpec* p = presetOrFields(processorPresets(), text, flag, "device", "NAME:TFLOPS:GBPS", f)) return *p;
    return {f[0], 1e12 * parseNumber(f[1], flag + " TFLOPS"), 1e9 * parseNumber(f[2], flag + " GBPS")};
}

LinkSpec parseLink(const std::string& text, const std::string& flag) {
    std::vector<std::string> f;
    if (const LinkSpec* l = presetOrFields(linkPresets(), text, flag, "link", "NAME:LATENCY_US:GBPS", f)) return *l;
    return {f[0], 1e-6 * parseNumber(f[1], flag + " LATENCY_US"), 1e9 * parseNumber(f[2], flag + " GBPS")};
}

HostCore measureHostCore() {
    HostCore h;
    // On a thread of its own, whose OpenMP team is one thread: one core's rates.
    std::thread([&h] {
        omp_set_num_threads(1);
        enterComputeTeam(1);  // dnnl_sgemm below (util/compute_thread.hpp)
        using Clock = std::chrono::steady_clock;
        const dnnl_dim_t n = 512;
        std::vector<float> x(size_t(n * n), 1.f), y(size_t(n * n), 0.5f), z(size_t(n * n));
        dnnl_sgemm('N', 'N', n, n, n, 1.f, x.data(), n, y.data(), n, 0.f, z.data(), n);  // warm up
        int reps = 0;
        const auto t0 = Clock::now();
        do {
            dnnl_sgemm('N', 'N', n, n, n, 1.f, x.data(), n, y.data(), n, 0.f, z.data(), n);
            ++reps;
        } while (secondsSince(t0) < 0.2);
        h.flops = 2.0 * double(n * n * n) * reps / secondsSince(t0);
        std::vector<float> from(size_t(16) << 20, 1.f), to(size_t(16) << 20, 0.f);  // 64 MiB each
        std::memcpy(to.data(), from.data(), from.size() * sizeof(float));
        const auto t1 = Clock::now();
        for (int i = 0; i < 4; ++i) std::memcpy(to.data(), from.data(), from.size() * sizeof(float));
        h.bandwidth = 4.0 * double(from.size() * sizeof(float)) / secondsSince(t1);
    }).join();
    return h;
}

Calibration Calibration::fromDeviceSweep(const SweepFile& f) {
    DeviceCalibration d;
    for (const SweepResult& r : f.points) d.sharedTowers = std::max(d.sharedTowers, r.point.towers);
    if (d.sharedTowers == 1) d.sharedTowers = 0;
    const SweepResult* anyOne = nullptr;
    for (const SweepResult& r : f.points) {
        const int n = r.point.towers;
        const bool onGpu = variablesReplicated(r.point.strategy);
        if (n == 1) {
            (onGpu ? d.oneOnGpu : d.oneOnHost) = r.measured;
            if (!anyOne) anyOne = &r;
        } else if (n == d.sharedTowers && (r.point.strategy == "mean" || r.point.strategy == "allreduce")) {
            (onGpu ? d.sharedOnGpu : d.sharedOnHost) = r.measured;
        }
    }
    if (!anyOne) throw Error("calibration: the sweep measured no single tower");
    const std::string& towers = anyOne->point.config.towers;
    d.gpu = towers.substr(0, towers.find('*'));
    Calibration c = fromSweepPoint(*anyOne, f.params, f.host, f.cores);
    c.device = d;
    return c;
}

std::optional<double> fitSerialShare(const SweepFile& f, std::string* from) {
    struct Observation {
        double inverseThreads, perExample;
    };
    std::vector<Observation> obs;
    std::vector<int> threadCounts;
    for (const SweepResult& r : f.points) {
        if (!r.point.config.towers.starts_with("cpu") || r.measured.steps < 1 || r.measured.compute <= 0 ||
            pipelineStrategy(r.point.strategy))  // a stage's compute is part of a tower's
            continue;
        const Calibration c = Calibration::fromSweepPoint(r, f.params, f.host, f.cores);
        if (c.towers * c.threadsPerTower > c.cores || c.batchPerTower < 1) continue;  // threads shared a core
        obs.push_back({1.0 / c.threadsPerTower, r.measured.compute / c.batchPerTower});
        if (std::find(threadCounts.begin(), threadCounts.end(), c.threadsPerTower) == threadCounts.end())
            threadCounts.push_back(c.threadsPerTower);
    }
    if (threadCounts.size() < 2) return std::nullopt;
    // perExample = x + y * inverseThreads, least squares.
    double mu = 0, mv = 0;
    for (const Observation& o : obs) mu += o.inverseThreads, mv += o.perExample;
    mu /= double(obs.size()), mv /= double(obs.size());
    double suu = 0, suv = 0;
    for (const Observation& o : obs)
        suu += (o.inverseThreads - mu) * (o.inverseThreads - mu), suv += (o.inverseThreads - mu) * (o.perExample - mv);
    const double y = suv / suu, x = mv - y * mu;
    if (from) {
        std::sort(threadCounts.begin(), threadCounts.end());
        *from = std::to_string(obs.size()) + " points of ";
        for (size_t i = 0; i < threadCounts.size(); ++i)
            *from += (i == 0 ? "" : i + 1 == threadCounts.size() ? " and " : ", ") + std::to_string(threadCounts[i]);
        *from += " threads per tower";
    }
    if (y <= 0) return 1.0;   // more threads were no faster
    if (x <= 0) return 0.0;   // they were as fast as ideal, or faster (caches)
    return x / (x + y);
}

Calibration Calibration::fromSweepPoint(const SweepResult& r, int64_t params, HostCore host, int machineCores) {
    Calibration c;
    c.measured = r.measured;
    c.towers = r.point.towers;
    c.cores = r.point.config.threads > 0 ? r.point.config.threads : std::max(1, machineCores);
    c.threadsPerTower = std::max(1, c.cores / c.towers);
    // A pipeline's stages share one tower's batch.
    c.batchPerTower = r.point.config.batchPerTower > 0 ? r.point.config.batchPerTower
                      : pipelineStrategy(r.point.strategy) ? r.point.config.batch
                                                            : r.point.config.batch / c.towers;
    c.strategy = r.point.strategy;
    c.params = params;
    c.host = host;
    return c;
}

void Assumptions::set(const std::string& key, double value) {
    auto check = [&](double lo, double hi) {
        if (!(value >= lo && value <= hi))
            throw Error("--assume: " + key + " must be from " + std::to_string(lo) + " to " + std::to_string(hi));
    };
    if (key == "serial_share") check(0, 1), serialShare = value;
    else if (key == "host_latency_us") check(0, 1e6), hostLatency = value * 1e-6;
    else if (key == "host_gbps") check(0.001, 1e4), hostBandwidth = value * 1e9;
    else if (key == "data_scale") check(0, 1e3), dataScale = value;
    else if (key == "device_gbps") check(0.001, 1e5), deviceBandwidth = value * 1e9;
    else throw Error("--assume: unknown assumption '" + key + "' (serial_share, host_latency_us, host_gbps, data_scale, device_gbps)");
}

nlohmann::json Assumptions::toJson() const {
    return {{"serial_share", serialShare}, {"host_latency_us", hostLatency * 1e6},
            {"host_gbps", hostBandwidth / 1e9}, {"data_scale", dataScale}, {"device_gbps", deviceBandwidth / 1e9}};
}

std::string Scenario::describe() const {
    if (pipelineStrategy(strategy))
        return std::to_string(towers) + " stages x " + std::to_string(threadsPerTower) +
               (threadsPerTower == 1 ? " thread, " : " threads, ") + strategy;
    std::string d = std::to_string(towers) + " " + (device ? device->name + " " : std::string()) +
                    (towers == 1 ? "tower" : "towers");
    if (machines > 1) d += " on " + std::to_string(machines) + " machines";
    if (!measuredGpu.empty()) d += " on " + measuredGpu;
    else if (!device) d += " x " + std::to_string(threadsPerTower) + (threadsPerTower == 1 ? " thread" : " threads");
    if (towers > 1) d += ", " + strategy;
    else if (device || !measuredGpu.empty()) d += variablesReplicated(strategy) ? ", variables on it" : ", variables on the CPU";
    if (psShards > 1 && (strategy == "mean" || strategy == "async")) d += ", " + std::to_string(psShards) + " shards";
    return d;
}

nlohmann::json Prediction::toJson() const {
    nlohmann::json j = {{"step_ms", 1e3 * stepSeconds},     {"examples_per_sec", examplesPerSec}, {"other_ms", 1e3 * otherSeconds},
                        {"phases", phases.toJson()},         {"bytes_per_tower", bytesPerTower},
                        {"bottleneck", bottleneck}};
    if (meanStaleness >= 0) j["mean_staleness"] = meanStaleness;
    if (bubbleFraction >= 0) j["bubble_fraction"] = bubbleFraction;
    return j;
}

Prediction predict(const Calibration& cal, const Assumptions& a, const Scenario& s) {
    if (pipelineStrategy(s.strategy))
        throw Error(s.strategy + ": a pipeline's step needs its stages' measured costs (predictPipeline)");
    if (pipelineStrategy(cal.strategy))
        throw Error("calibration: a pipeline's point (" + cal.strategy + ") does not calibrate towers; calibrate from a "
                    "point of towers (--from)");
    Transfer t;
    Prediction p = predictSteps(cal, a, s, &t);
    p.bottleneck = limitOf(cal, a, s, p, t) + beyondTheCores(cal, a, s, p);
    return p;
}

}  // namespace tb
