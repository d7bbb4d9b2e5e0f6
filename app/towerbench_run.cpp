// towerbench-run: the headless program. Parses flags into a RunConfig (after --config FILE,
// so flags override the file), trains, and prints one JSON summary as the last line of stdout.
// Progress and errors go to stderr; any bad input is one line there and exit status 2.
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "engine/selftest.hpp"
#include "headless_run.hpp"
#include "io/run_config.hpp"
#include "util/error.hpp"

namespace {

const char* kUsage = R"(usage: towerbench-run selftest
       towerbench-run [--config FILE.json] [--model NAME|FILE] [--data SPEC]
                      [--batch N] [--steps N | --epochs N] [--optimizer sgd|momentum|nesterov|adam]
                      [--lr X] [--seed N] [--eval-every N] [--metrics FILE.jsonl] [--threads N] [--quiet]
                      [--towers LIST --variables WHERE --reduce mean|allreduce --update sync|async
                       --average-every K --ps-shards S --batch-per-tower N --slow TOWER=FACTOR]

Trains a model on one or more towers and prints a JSON summary as the last line of stdout.
`selftest` lists the devices, checks every op of every backend against a double-precision
reference, and trains a GPU tower beside a CPU tower; exit status 1 if any check fails.
  --config FILE       run config (JSON object); its keys are the flags' names with '_' for '-'
  --model NAME|FILE   mlp, mnist_cnn, cifar10_cnn, tiny_mlp, or a model .json file (default mnist_cnn)
  --data SPEC         fashion-mnist | idx:DIR | cifar10:DIR | synthetic:blobs | synthetic:spirals
  --batch N           examples per step (default 128)
  --steps N           training steps; wins over --epochs
  --epochs X          passes over the training set (default 1)
  --optimizer NAME    sgd, momentum (default), nesterov, adam;  --momentum X (default 0.9)
  --lr X              learning rate (default 0.01); --lr-decay-steps N --lr-decay-rate X
                      --lr-staircase true|false for exponential decay
  --ema-decay X       evaluate with an exponential moving average of the weights (e.g. 0.9999)
  --seed N            seed of initialisation, shuffling, augmentation and dropout (default 1)
  --eval-every N      validation pass every N steps (default: only at the end)
  --validation N      training samples held out for validation (default 10%, at most 5000)
  --shuffle-buffer N  --prefetch N   input pipeline (defaults: whole set, 2 batches)
  --metrics FILE      write JSON-lines metrics (schema in README)
  --threads N         compute threads (default: all cores), shared evenly by the towers
  --quiet             no progress output

Data parallelism (the seeds' tower pattern; see README):
  --towers LIST       cpu:0,cpu:1,... (virtual CPU towers, each its own thread), gpu:0,gpu:1,...,
                      gpu:0*2 (two towers sharing gpu:0, each its own stream), or auto (every
                      GPU, else one CPU tower per core); default cpu:0
  --tf32 true|false   GPU towers: tensor-core TF32 math (default false: plain FP32)
  --batch-per-tower N examples per tower per step; the global batch is towers x N
                      (default: --batch split evenly over the towers)
  --variables WHERE   cpu (default: variables on the CPU, gradients averaged there), a tower's
                      device, or replicated (every tower holds a copy)
  --reduce MODE       mean (on the variables' holder) or allreduce (among replicated towers)
  --update MODE       sync (every step waits for the slowest tower) or async (parameter server)
  --average-every K   replicated towers take local steps; parameters averaged every K steps
  --ps-shards S       variables dealt round-robin over S parameter-server shards
  --slow T=F,...      straggler injection: tower T runs F times slower (teaching)
  --transfers MODE    auto (towers in one memory read it in place; NCCL between GPUs where it
                      applies), copies (every transfer an explicit copy through staging buffers,
                      as between separate devices) or nccl (NCCL collectives, one tower per GPU)
)";

int fail(const std::string& message) { return failWith("towerbench-run", message); }

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    tb::RunConfig config;
    try {
        if (!args.empty() && args[0] == "selftest") {
            if (args.size() > 1) return fail("selftest takes no arguments, got '" + args[1] + "'");
            return tb::runSelfTest(std::cout);
        }
        // The file first, wherever --config stands, so every flag overrides it.
        for (size_t i = 0; i < args.size(); ++i) {
            if (args[i] == "--config") {
                if (i + 1 >= args.size() || args[i + 1].starts_with("--")) return fail("--config: needs a file name");
                config.loadFile(args[i + 1]);
            }
        }
        for (size_t i = 0; i < args.size(); ++i) {
            const std::string& a = args[i];
            if (a == "--help" || a == "-h") {
                std::fputs(kUsage, stdout);
                return 0;
            }
            if (a == "--config") {
                ++i;
                continue;
            }
            if (a == "--quiet") {
                config.quiet = true;
                continue;
            }
            const std::string key = tb::RunConfig::flagToKey(a);
            if (!a.starts_with("--") || key == "quiet" ||
                std::find(tb::RunConfig::keys().begin(), tb::RunConfig::keys().end(), key) ==
                    tb::RunConfig::keys().end())
                return fail("unknown argument '" + a + "' (see --help)");
            if (i + 1 >= args.size() || args[i + 1].starts_with("--")) return fail(a + ": needs a value");
            config.setFromText(key, args[++i], a);
        }
        config.validate();
        return runHeadless(config);
    } catch (const tb::Error& e) {
        return fail(e.what());
    } catch (const std::bad_alloc&) {
        return fail("out of memory");
    } catch (const std::exception& e) {
        return fail(std::string("internal error: ") + e.what());
    }
}
