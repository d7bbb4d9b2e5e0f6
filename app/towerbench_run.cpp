// towerbench-run: the headless program. Parses flags into a RunConfig (after --config FILE,
// so flags override the file), trains, and prints one JSON summary as the last line of stdout.
// Progress and errors go to stderr; any bad input is one line there and exit status 2.
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "data/dataset.hpp"
#include "engine/metrics_file.hpp"
#include "engine/pipeline_time_model.hpp"
#include "engine/checkpoint.hpp"
#include "engine/inference.hpp"
#ifdef TB_HAVE_PROTOBUF
#include "engine/onnx_export.hpp"
#endif
#include "engine/run_folder.hpp"
#ifdef TB_HAVE_IMAGES
#include "data/image_folder.hpp"
#endif
#include "engine/scaling_sweep.hpp"
#include "engine/selftest.hpp"
#include "engine/step_time_model.hpp"
#include "stop_signals.hpp"
#include "io/run_index.hpp"
#include "engine/trainer.hpp"
#include "command_line.hpp"
#include "headless_run.hpp"
#include "io/run_config.hpp"
#include "util/error.hpp"
#ifdef TB_HAVE_PROTOBUF
#include "data/tfrecord_dataset.hpp"
#endif

namespace {

const char* kUsage = R"(usage: towerbench-run selftest
       towerbench-run models [--json]
       towerbench-run eval RUN_DIR|CHECKPOINT [--data SPEC] [--batch N] [--threads N]
       towerbench-run classify RUN_DIR|CHECKPOINT IMAGE... [--top K] [--threads N]
       towerbench-run export RUN_DIR|CHECKPOINT --onnx FILE
       towerbench-run convert SPEC tfrecord:DIR [--shards N] [--repeat R]
       towerbench-run convert SPEC folder:DIR [--jpeg-quality Q]
       towerbench-run runs [--filter TEXT] [--sort COLUMN] [--ascending] [--json]
       towerbench-run scale [--sweep-towers 1,2,4] [--sweep-strategies mean,allreduce,async,average:4]
                      [--sweep-warmup N] [--sweep-steps N] [--run-dir DIR] [training flags]
       towerbench-run predict SWEEP_DIR [--from N] [--towers 1,2,4,8] [--strategies LIST]
                      [--threads-per-tower T] [--cores C] [--batch-per-tower N] [--slow T=F,...]
                      [--device NAME] [--link NAME] [--machines M] [--network NAME] [--ps-shards S]
                      [--assume KEY=VALUE,...] [--json]
       towerbench-run --resume RUN_DIR [--steps N | --epochs N] [--eval-every N] [--quiet]
       towerbench-run [--run-dir DIR] [--config FILE.json] [--model NAME|FILE] [--data SPEC]
                      [--batch N] [--steps N | --epochs N] [--optimizer sgd|momentum|nesterov|adam]
                      [--lr X] [--seed N] [--eval-every N] [--metrics FILE.jsonl] [--threads N] [--quiet]
                      [--towers LIST --variables WHERE --reduce mean|allreduce --update sync|async
                       --average-every K --ps-shards S --ps-tasks P --batch-per-tower N --slow TOWER=FACTOR]
                      [--stages SPEC|auto --pipeline naive|gpipe|1f1b --micro-batches M --stage-replicas R
                       --stage-per-process true|false]

Trains a model on one or more towers and prints a JSON summary as the last line of stdout.
Under `mpirun -np N` the N processes train one run: --batch is the global batch, each process
trains its slice with its own towers (holder mean, all-reduce or averaging every K), they reduce
over MPI (GPU replicas with GPUs of their own: one NCCL group over all processes), and process 0
keeps the folder, metrics and summary (docs/processes.md).
With --ps-tasks P the first P processes hold the variables as parameter servers (sync or async)
and the others are workers, the first of which (process P) keeps the folder.
`selftest` lists the devices, checks every op of every backend against a double-precision
reference, and trains a GPU tower beside a CPU tower; exit status 1 if any check fails.
  --config FILE       run config (JSON object); its keys are the flags' names with '_' for '-'
  --model NAME|FILE   a model by name (`towerbench-run models` lists them with their parameters and
                      FLOPs: mnist_cnn, mnist_seed, cifar10_cnn, resnet20, resnet56, resnet20_mnist,
                      vgg_bn, mlp, ...) or a model .json file (default mnist_cnn)
  --data SPEC         fashion-mnist | idx:DIR | cifar10:DIR | tfrecord:DIR | folder:DIR |
                      synthetic:blobs | synthetic:spirals. folder:DIR: PNG and JPEG images, one
                      subfolder per class (DIR/train and DIR/test, or a tenth of each class for
                      testing by a hash of its name), fitted to the model's input (docs/user-guide.md:
                      "Your own images"); --skip-bad-images true leaves unreadable images out,
                      counted and named, instead of stopping at the first
  --batch N           examples per step (default 128)
  --steps N           training steps; wins over --epochs
  --epochs X          passes over the training set (default 1)
  --optimizer NAME    sgd, momentum (default), nesterov, adam;  --momentum X (default 0.9)
  --lr X              learning rate (default 0.01); --lr-decay-steps N --lr-decay-rate X
                      --lr-staircase true|false for exponential decay; --lr-decay cosine
                      --lr-decay-steps N: a half cosine from lr to 0 over N steps;
                      --warmup-steps N: lr ramps up linearly over the first N steps
  --lr-scaling linear --lr-reference-batch B   the linear scaling rule (Goyal et al. 2017): lr x
                      the update's batch (--batch x --accumulate) / B (default B 256); with
                      --warmup-steps, their gradual warm-up
  --accumulate K      K micro-steps of --batch examples per update, their gradients summed: one
                      step on K x --batch examples in the memory of one (default 1); batch norm's
                      statistics are each micro-step's (as a K-times batch they are not)
  --sync-bn true|false   batch norm's statistics summed over every tower and process each step
                      (PyTorch's SyncBatchNorm; CPU towers, synchronous updates); with stages,
                      over each stage's replicas (--stage-replicas) and processes, micro-batch by
                      micro-batch; default false: each tower normalises by its own batch, as
                      TensorFlow's towers do, and the moving statistics evaluation uses are tower 0's
  --ema-decay X       evaluate with an exponential moving average of the weights (e.g. 0.9999)
  --seed N            seed of initialisation, shuffling, augmentation and dropout (default 1)
  --eval-every N      validation pass every N steps (default: only at the end)
  --validation N      training samples held out for validation (default 10%, at most 5000)
  --shuffle-buffer N  --prefetch N   input pipeline (defaults: whole set, streamed 10,000
                      records; automatic: 2 batches ahead on a loader thread, or none with one CPU
                      tower on every core of a machine of up to 4; 0: each batch made by the
                      training thread)
  --stream auto|true|false   tfrecord:DIR: read the training shards as they are used instead of
                      into memory (interleaved 16 at a time, a shuffle buffer, decoded by loader
                      threads); auto (default): when they hold more than a quarter of the memory
  --loader-threads N  threads decoding a streamed set's batches (default 0, automatic: the
                      process's --threads where no batch is prefetched, as batches are then made
                      while the towers wait; else the cores the towers leave, at least one)
  --augment auto|none|LIST   training augmentation of image sets: a comma list of crop:P (a random
                      window of the image padded by P zero pixels a side), flip, brightness:D
                      (+-D/255), contrast:LOW:HIGH; auto (default): CIFAR-10's distorted_inputs
                      (24x24 window, flip, brightness:63, contrast:0.2:1.8), none for other sets
  --normalise auto|none|standardize|mean-std   the input's normalisation: per-image standardisation
                      (auto: CIFAR-10 only), or each channel by the training split's mean and
                      deviation (kept in checkpoints and exports)
  --metrics FILE      write JSON-lines metrics (schema in docs/user-guide.md)
  --threads N         compute threads (default: all cores), shared evenly by the towers
  --quiet             no progress output
  Ctrl-C (SIGINT) or SIGTERM stops after the step in progress, with the final evaluation, a
  checkpoint and the summary, and exits 130 or 143; a second signal ends it at once.

Run folders (docs/user-guide.md: "Runs that last"):
  --run-dir DIR       keep this run in DIR (default: a new folder under $TOWERBENCH_RUNS_DIR or
                      ~/.local/share/towerbench/runs): settings, model, metrics, log, summary,
                      checkpoints
  --checkpoint-every N  --checkpoint-minutes M (default 10)  --keep-checkpoints K (default 3)
                      checkpoints (safetensors) every N steps or M minutes and at the end; the last
                      K are kept, and the best by validation accuracy
  --resume RUN_DIR    continue a stopped or crashed run from its newest checkpoint, exactly as if
                      it had not stopped (synchronous updates); may give more --steps or --epochs
  --init-from CKPT    start from a checkpoint's weights, with any plan (e.g. 1 tower -> 4)
  convert SPEC tfrecord:DIR   writes an image set (fashion-mnist, idx:DIR, cifar10:DIR,
                      folder:DIR) as DIR/train.tfrecords and DIR/test.tfrecords of tf.train.Example
                      records, as TensorFlow's MNIST article does; --data tfrecord:DIR reads them
                      back (--tfrecord-features image=KEY,label=KEY for other feature names);
                      --shards N splits the training set over N files train-0000i-of-0000N, and
                      --repeat R writes it R times, each pass after the first shifted by up to 2
                      pixels and mirrored half the time (a larger set, e.g. for streaming)
  convert SPEC folder:DIR [--jpeg-quality Q]   writes it as image files, DIR/train/<k>-<class>/
                      <index>.png (or .jpg of quality Q, 1-100) and DIR/test/...; --data folder:DIR
                      reads them back in the same order
  runs                the run folders (SQLite index kept beside them, rebuilt from the folders
                      when missing or stale), newest first: --filter matches model, data, plan,
                      state or name; --sort created|name|model|data|state|steps|test_accuracy|
                      validation_accuracy|examples_per_sec; --json: one object per line
  eval RUN_DIR|CKPT   test accuracy of a run's newest checkpoint (or of one file) on --data
                      (default: the run's data); prints one JSON line
  classify RUN_DIR|CKPT IMAGE...   each PNG or JPEG file's class probabilities under the
                      checkpoint's model (fitted to its input as the run's evaluation saw its data),
                      one JSON line per image: image, class, label, top (the K most probable, 5 by
                      default, with their names) and probabilities
  export RUN_DIR|CKPT --onnx FILE   the model as an ONNX file (opset 13) that takes raw pixels
                      (batch, c, h, w) as floats 0-255, holds the run's input scaling (and a CIFAR-10
                      run's crop and standardisation) and gives class probabilities (docs/user-guide.md:
                      "Taking a model out")
  models [--json]     every model of the models folders: input, layers, parameters and forward
                      FLOPs per example (conv and dense layers; a multiply-add counts 2)

The scaling lab (docs/scaling-lab.md):
  scale               short runs of the model over tower counts x strategies (batch per tower
                      fixed), each measured after --sweep-warmup steps (default 5) for
                      --sweep-steps (default 30): examples/sec, speedup over one tower, scaling
                      efficiency, and where a step's time goes; kept as a run folder.
                      --towers names the kind swept: cpu:0 (default), gpu:0 (one GPU per
                      tower) or gpu:0*2 (towers sharing gpu:0). Pipelines in
                      --sweep-strategies: naive, gpipe:M, 1f1b:M (N towers: N CPU stages
                      over the one-tower batch, --stages N)
  predict SWEEP_DIR   the step-time model calibrated from one point of a sweep (--from, default
                      1: one tower) predicts examples/sec and the step's breakdown for each
                      tower count x strategy, beside the sweep's measurement where it made one.
                      Other hardware: --device h100|a100|v100|l4|rtx4090|NAME:TFLOPS:GBPS, --link
                      pcie4|pcie5|nvlink|10gbe|100gbe|infiniband|NAME:LATENCY_US:GBPS (towers to
                      the holder and to each other), --machines M --network LINK. Assumptions:
                      --assume serial_share=0.1,host_latency_us=20,host_gbps=G,data_scale=1,
                      device_gbps=1000. A sweep of towers sharing one GPU (scale --towers
                      gpu:0*2) calibrates from all its points and predicts towers on that GPU.
                      Pipelines (--strategies naive,gpipe:M,1f1b:M; --towers: stages) are
                      predicted from the one-tower point and each stage's cost, measured here

Data parallelism (the seeds' tower pattern; docs/user-guide.md):
  --towers LIST       cpu:0,cpu:1,... (virtual CPU towers, each its own thread), gpu:0,gpu:1,...,
                      gpu:0*2 (two towers sharing gpu:0, each its own stream), or auto (every
                      GPU, else one CPU tower per core); default cpu:0
  --tf32 true|false   GPU towers: tensor-core TF32 math (default false: plain FP32)
  --report-lag N      GPU towers: the host reads each step's loss, accuracy and phase times N steps
                      after launching it and waits for no stream within a step, so the GPU never
                      idles while the host reports; evaluations, checkpoints, pauses and the end
                      see every step (default -1, automatic: 2 for one GPU tower with its
                      variables on that GPU, else 0; explicit values also on one CPU tower)
  --deterministic true|false
                      GPU towers: cuDNN's deterministic algorithms only, so two runs give the
                      same losses bit for bit (default true); false: the fastest, atomics
                      included (CPU towers are deterministic either way). What cuDNN's search
                      chose is kept for the next run in $TOWERBENCH_ALGORITHM_CACHE (default
                      ~/.cache/towerbench/cudnn-algorithms.json; off: search in every run)
  --precision P       fp32 (default) or bf16: the towers' convolutions and inner products read
                      bf16 and return fp32 (mixed precision; the variables, the optimiser and
                      every other op stay fp32); CPU towers need AVX512-BF16 or AMX, GPU
                      towers compute capability 8.0 (Ampere) or later
  --batch-per-tower N examples per tower per step; the global batch is towers x N
                      (default: --batch split evenly over the towers)
  --variables WHERE   cpu (default: variables on the CPU, gradients averaged there), a tower's
                      device, or replicated (every tower holds a copy)
  --reduce MODE       mean (on the variables' holder) or allreduce (among replicated towers)
  --update MODE       sync (every step waits for the slowest tower) or async (parameter server)
  --average-every K   replicated towers take local steps; parameters averaged every K steps
  --ps-shards S       variables dealt round-robin over S parameter-server shards
  --ps-tasks P        under mpirun: processes 0..P-1 serve the variables (dealt round-robin by
                      variable); the other processes are workers that push gradients to them
  --slow T=F,...      straggler injection: tower T runs F times slower (teaching)
  --transfers MODE    auto (towers in one memory read it in place; NCCL between GPUs where it
                      applies), copies (every transfer an explicit copy through staging buffers,
                      as between separate devices; pipeline stages copy activations and their
                      gradients into buffers of their own) or nccl (NCCL collectives, one tower
                      per GPU)
  --comm-precision P  fp32 (default) or bf16: the gradients cross between towers, the holder
                      and processes in bf16 (2 bytes an element, rounded on the tower's
                      device; summed in fp32 on the host, each partial sum rounded to bf16 by
                      NCCL and between processes); the variables always move in fp32. Not
                      with averaging every K steps; a GPU holder takes them through NCCL only

Model parallelism (synchronous; CPU stages, or GPU stages: gpu:0*2 two sharing one GPU, a
stream each, or one per GPU, NCCL send/recv between them; under mpirun every process runs CPU
stages on its share of the batch, each stage's gradient averaged over the processes; not yet
combined with --towers, --update async, --average-every, --ps-* or --slow):
  --stages SPEC       the model's layers split into consecutive stages, each on its own device
                      and thread team or stream: N (cpu:0 .. cpu:N-1), DEV,DEV,... or DEV*K,
                      split to balance each layer's measured time; or explicit DEV=FROM..TO,...
                      by layer name or 0-based index (mnist_cnn: cpu:0=conv1..pool2,
                      cpu:1=fc1..logits). A layer's name is the model file's, else its type and
                      index (relu1, flatten6). The split is kept in config.json and plan.json.
                      auto: the fewest stages the memory estimate fits, one per GPU; one device
                      (gpu:0, or without GPUs the CPU) where the model fits there, as CPU
                      stages share host memory
  --pipeline S        naive (default: the whole batch through the stages in turn), gpipe (every
                      micro-batch forward, then every backward) or 1f1b (one forward, one
                      backward; at most S - s micro-batches' activations on stage s)
  --micro-batches M   gpipe and 1f1b: each replica's share of the batch cut into M; the summary
                      adds bubble_fraction, the stages' idle share of the steps
  --stage-replicas R  hybrid: R copies of the pipeline, each on 1/R of the batch, each stage's
                      copies summing their gradients before its update (S x R CPU devices)
  --stage-per-process true|false
                      under mpirun -np S: process s runs stage s alone, on every global batch,
                      the activations and their gradients sent between the processes as MPI
                      messages (model parallelism across processes; default false: every process
                      runs every stage on its share of the batch, data parallel across them);
                      with --stage-replicas R, mpirun -np S x R: process r S + s runs stage s of
                      replica r, each stage's R processes summing their gradients as messages
)";

int fail(const std::string& message) { return failWith("towerbench-run", message); }

// models: every model findModel finds, with what it is (a file that does not parse says why).
int runModels(const CommandLine& c) {
    int bad = 0;
    if (!c.json)
        std::printf("%-16s %-12s %6s %12s %14s  %s\n", "model", "input", "layers", "parameters", "MFLOPs/example",
                    "file");
    for (const std::string& name : tb::modelNames()) {
        try {
            const tb::ModelSpec spec = tb::findModel(name);
            const tb::ModelShape shape = tb::shapeOf(spec);
            int64_t flops = 0;
            bool graph = false;
            for (const tb::LayerSummary& l : tb::summarizeLayers(spec)) {
                flops += l.forwardFlops;
                graph = graph || l.inputs.size() > 1;
            }
            if (c.json) {
                std::cout << nlohmann::json{{"name", spec.name}, {"file", spec.source},
                                            {"input", {spec.inC, spec.inH, spec.inW}}, {"layers", spec.layers.size()},
                                            {"parameters", shape.params}, {"forward_flops_per_example", flops},
                                            {"classes", shape.outputs}, {"graph", graph},
                                            {"description", spec.description}}
                                 .dump()
                          << "\n";
            } else {
                std::printf("%-16s %-12s %6zu %12lld %14.1f  %s\n", spec.name.c_str(), shape.input.str().c_str(),
                            spec.layers.size(), static_cast<long long>(shape.params), double(flops) / 1e6,
                            spec.source.c_str());
            }
        } catch (const tb::Error& e) {
            std::fprintf(stderr, "towerbench-run models: %s\n", e.what());
            ++bad;
        }
    }
    return bad ? 1 : 0;
}

// runs: the history, from the index.
int runList(const CommandLine& c) {
    tb::RunIndex index(tb::RunFolder::runsRoot());
    const std::vector<tb::RunRecord> runs = index.list(c.filter, c.sort, c.ascending);
    for (const tb::RunRecord& r : runs) {
        if (c.json) {
            std::cout << nlohmann::json{{"path", r.path},   {"created", r.created}, {"state", r.state},
                                        {"model", r.model}, {"data", r.data},       {"plan", r.plan},
                                        {"steps", r.steps}, {"test_accuracy", r.testAccuracy},
                                        {"validation_accuracy", r.validationAccuracy},
                                        {"examples_per_sec", r.examplesPerSec}, {"processes", r.processes},
                                        {"error", r.error}}
                             .dump()
                      << "\n";
        } else {
            char acc[16] = "-";
            if (r.testAccuracy >= 0) std::snprintf(acc, sizeof acc, "%.2f%%", 100 * r.testAccuracy);
            std::printf("%-44s %-9s %-12s %-18s %8lld  %7s  %8.0f ex/s  %s\n", r.name.c_str(), r.state.c_str(),
                        r.model.c_str(), r.data.substr(0, 18).c_str(), static_cast<long long>(r.steps), acc,
                        r.examplesPerSec, r.plan.c_str());
            if (!r.error.empty()) std::printf("    %s\n", r.error.c_str());  // why it failed, under its row
        }
    }
    if (!c.json) std::fprintf(stderr, "%zu runs in %s%s\n", runs.size(), tb::RunFolder::runsRoot().c_str(),
                            index.rebuilt() ? " (index rebuilt from the folders)" : "");
    return 0;
}

// convert SPEC tfrecord:DIR|folder:DIR: the set's train and test splits as TFRecord or image files.
int runConvert(const std::string& spec, const std::string& target, int jpegQuality, int shards, int repeat) {
    const bool toFolder = target.starts_with("folder:");
    const std::string dir = target.substr(toFolder ? 7 : 9);
    if (toFolder) {
#ifdef TB_HAVE_IMAGES
        const tb::DataSplits data = tb::loadData(spec, 0, 1);
        tb::writeImageFolder(data.train, data.test, dir, jpegQuality);
        std::cout << nlohmann::json{{"train", dir + "/train"}, {"train_images", data.train.size()},
                                    {"test", dir + "/test"}, {"test_images", data.test.size()},
                                    {"format", jpegQuality > 0 ? "jpeg" : "png"}}
                         .dump()
                  << std::endl;
        return 0;
#else
        return fail("convert: this build of Towerbench has no libpng and libjpeg, which image files need");
#endif
    }
#ifdef TB_HAVE_PROTOBUF
    // The inputs first: a set that cannot be read leaves no empty folder behind.
    const tb::DataSplits data = tb::loadData(spec, 0, 1);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return fail("convert: cannot create " + dir + " (" + ec.message() + ")");
    const std::vector<std::string> train = tb::writeTFRecordShards(data.train, dir, "train", shards, repeat, 1);
    tb::writeTFRecordExamples(data.test, dir + "/test.tfrecords");  // the test set as it is, once
    uintmax_t bytes = 0;
    for (const std::string& f : train) bytes += std::filesystem::file_size(f, ec);
    std::cout << nlohmann::json{{"train", shards == 1 ? train.front() : dir + "/train-*-of-*.tfrecords"},
                                {"train_records", data.train.size() * size_t(repeat)}, {"train_shards", shards},
                                {"train_bytes", bytes}, {"test", dir + "/test.tfrecords"}, {"test_records", data.test.size()}}
                     .dump()
              << std::endl;
    return 0;
#else
    return fail("convert: this build of Towerbench has no protobuf, which TFRecord files need");
#endif
}

// The checkpoint `target` names, opened (a damaged one refused naming its tensor), its note (one
// written before checksums) on stderr.
tb::Checkpoint openCheckpoint(const std::string& target) {
    tb::Checkpoint c = tb::Checkpoint::open(tb::checkpointOf(target));
    if (!c.note().empty()) std::cerr << "note: " << c.note() << "\n";
    return c;
}

// export RUN_DIR|CHECKPOINT --onnx FILE: the model as an ONNX inference graph; one JSON line.
int runExport(const std::string& target, const std::string& file) {
#ifdef TB_HAVE_PROTOBUF
    const tb::OnnxExportResult r = tb::exportOnnx(openCheckpoint(target).path(), file);
    std::cout << nlohmann::json{{"onnx", r.path},       {"checkpoint", r.checkpoint}, {"opset", r.opset},
                                {"nodes", r.nodes},     {"bytes", r.bytes},           {"classes", r.classes},
                                {"input", {"batch", r.channels, r.height, r.width}}, {"output", {"batch", r.classes}}}
                     .dump()
              << std::endl;
    return 0;
#else
    (void)target, (void)file;
    return fail("export: this build of Towerbench has no protobuf, which ONNX files need");
#endif
}

// classify RUN_DIR|CHECKPOINT IMAGE...: one JSON line per image, its probabilities and top classes.
int runClassify(const std::string& target, const std::vector<std::string>& images, int top, int threads) {
    const std::string checkpoint = openCheckpoint(target).path();
    const tb::Classifications r = tb::classifyImages(checkpoint, images, threads);
    for (const tb::ImageClassification& c : r.images) {
        const std::vector<int> order = c.ranked();
        nlohmann::json best = nlohmann::json::array();
        for (int k = 0; k < std::min(top, int(order.size())); ++k) {
            const int label = order[size_t(k)];
            best.push_back({{"label", label},
                            {"class", label < int(r.classNames.size()) ? r.classNames[size_t(label)] : std::to_string(label)},
                            {"probability", c.probabilities[size_t(label)]}});
        }
        std::cout << nlohmann::json{{"image", c.image}, {"class", best[0]["class"]}, {"label", best[0]["label"]},
                                    {"top", best}, {"probabilities", c.probabilities}}
                         .dump()
                  << "\n";
    }
    std::cout.flush();
    return 0;
}

// eval RUN_DIR|CHECKPOINT: one JSON line with the test accuracy of the checkpoint's weights.
int runEval(const std::string& target, tb::RunConfig config, bool dataGiven) {
    const tb::Checkpoint opened = openCheckpoint(target);
    const std::string checkpoint = opened.path();
    if (!dataGiven) config.data = opened.meta().config.value("data", config.data);
    config.validate();
    const tb::EvalResult r = tb::evaluateCheckpoint(checkpoint, config);
    std::cout << nlohmann::json{{"checkpoint", checkpoint}, {"step", r.step},         {"data", config.data},
                                {"test_accuracy", r.accuracy}, {"test_loss", r.loss}, {"examples", r.examples},
                                {"ema", r.averagedWeights}, {"confusion", tb::confusionRows(r)}}
                     .dump()
              << std::endl;
    return 0;
}

// scale: the sweep, a line per point on stderr as it is measured, one JSON line on stdout.
int runScale(const CommandLine& c) {
    const tb::RunConfig& base = c.config;
    (void)tb::sweepPoints(base, c.sweep);  // refused before a folder is made
    const std::string dir = c.storage.runDir.empty() ? tb::newSweepFolder(base) : c.storage.runDir;
    tb::ScalingSweep sweep(base, c.sweep, dir);
    StopSignals signals("towerbench-run", [&](int sig) {
        std::fprintf(stderr, "towerbench-run: %s: stopping the sweep after this point's step\n", StopSignals::name(sig));
        sweep.stop();
    });
    const auto results = sweep.run([&](const tb::SweepResult& r) {
        if (base.quiet) return;
        if (r.point.towers == 1)  // the first point: the header, once the sweep is under way
            std::fprintf(stderr, "%-28s %12s %8s %8s %9s %9s %9s %9s %9s %9s\n", "point", "examples/s", "speedup",
                         "effic.", "step ms", "compute", "wait", "reduce", "apply", "data");
        const tb::StepProfile& m = r.measured;
        std::fprintf(stderr, "%-28s %12.0f %7.2fx %7.0f%% %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", r.point.label().c_str(),
                     m.examplesPerSec, r.speedup, 100 * r.efficiency, 1e3 * m.stepSeconds(), 1e3 * m.compute,
                     1e3 * (m.wait + m.straggle), 1e3 * m.reduce, 1e3 * m.apply, 1e3 * m.dataWait);
    });
    nlohmann::json points = nlohmann::json::array();
    for (const tb::SweepResult& r : results) points.push_back(r.toJson());
    std::cout << nlohmann::json{{"run_dir", dir}, {"stopped", signals.received() != 0}, {"points", points}}.dump() << std::endl;
    return signals.received() ? signals.exitStatus() : 0;
}

// predict SWEEP_DIR: the model calibrated from one point of a sweep, for every scenario asked.
int runPredict(const CommandLine& c) {
    const tb::SweepFile sweepFile = tb::ScalingSweep::readResults(c.predictFrom);
    const auto& results = sweepFile.points;
    if (c.calibrationPoint > int(results.size()))
        return fail("--from: the sweep has " + std::to_string(results.size()) + " points, not " + std::to_string(c.calibrationPoint));
    const tb::SweepResult& from = results[size_t(c.calibrationPoint - 1)];
    // A sweep of towers sharing one GPU calibrates from its points on that GPU (one tower in each
    // place, the most towers), and predicts towers on it.
    const std::string& sweptTowers = from.point.config.towers;
    if (sweptTowers.starts_with("gpu") && sweptTowers.find('*') == std::string::npos)
        return fail("predict: " + c.predictFrom + " swept one GPU per tower, which the model does not calibrate from; "
                    "sweep towers sharing one GPU (--towers gpu:0*2) or CPU towers");
    const bool onGpu = sweptTowers.starts_with("gpu");
    const tb::Calibration cal = onGpu ? tb::Calibration::fromDeviceSweep(sweepFile)
                                      : tb::Calibration::fromSweepPoint(from, sweepFile.params, sweepFile.host, sweepFile.cores);
    // A sweep of CPU towers over several thread counts per tower measured its serial share.
    tb::Assumptions assumptions = c.assumptions;
    std::string fittedFrom;
    const double fitted = onGpu ? -1 : tb::fitSerialShare(sweepFile, &fittedFrom).value_or(-1);  // -1: no fit
    if (fitted >= 0 && !c.serialShareGiven) assumptions.serialShare = fitted;
    tb::Scenario scenario = c.scenario;
    if (onGpu) scenario.measuredGpu = cal.device->gpu;
    if (!c.coresGiven) scenario.cores = cal.cores;
    if (!c.batchGiven) scenario.batchPerTower = cal.batchPerTower;
    std::vector<int> towers = c.predictTowers;
    if (towers.empty())
        for (const tb::SweepResult& r : results)
            if (std::find(towers.begin(), towers.end(), r.point.towers) == towers.end()) towers.push_back(r.point.towers);
    std::vector<std::string> strategies = c.predictStrategies;
    if (strategies.empty()) strategies = sweepFile.settings.strategies;
    if (!c.json) {
        std::printf("calibrated from %s: %s, point %d (%s): %.0f examples/sec\n", c.predictFrom.c_str(),
                    from.point.config.model.c_str(), c.calibrationPoint, from.point.label().c_str(), from.measured.examplesPerSec);
        std::printf("assumptions: %s; host core %.1f GFLOP/s, %.1f GB/s copies (measured)\n", assumptions.toJson().dump().c_str(),
                    cal.host.flops / 1e9, cal.host.bandwidth / 1e9);
        if (fitted >= 0)
            std::printf("serial share %.3f fitted to the sweep's %s%s\n", fitted, fittedFrom.c_str(),
                        c.serialShareGiven ? " (--assume serial_share wins)" : "");
        std::printf("%-44s %12s %12s %9s %9s %9s %9s %9s\n", "scenario", "predicted", "measured", "step ms", "compute",
                    "wait", "reduce", "apply");
    }
    tb::PipelineCostCache pipelineCosts(tb::findModel(from.point.config.model));
    // One tower has no strategy, only a place for its variables: on CPU towers the same place
    // (one prediction, "mean"); a device's tower reads them from the CPU holder over its link
    // ("mean") or holds them itself ("allreduce": no transfer, the update on the device).
    const std::vector<std::string> single =
        scenario.device || onGpu ? tb::oneTowerStrategies(strategies) : std::vector<std::string>{"mean"};
    for (int n : towers) {
        for (const std::string& strategy : n == 1 ? single : strategies) {
            tb::Scenario s = scenario;
            s.towers = n;
            s.strategy = strategy;
            s.machines = std::min(scenario.machines, n);  // one tower is on one machine
            if (!c.threadsGiven) s.threadsPerTower = s.device || onGpu ? 1 : std::max(1, s.cores / n);
            if (!c.slow.empty()) {  // the stragglers among these towers
                s.slowdown.assign(size_t(n), 1.0);
                for (const auto& [tower, factor] : c.slow)
                    if (tower < n) s.slowdown[size_t(tower)] = factor;
            }
            const tb::Prediction p = tb::predictStep(cal, assumptions, s, pipelineCosts);
            // The sweep's measurement of the same point, where it made one (same towers, strategy, threads, batch).
            double measured = -1;
            for (const tb::SweepResult& r : results) {
                if (s.device || !c.slow.empty() || r.point.towers != n || r.point.strategy != strategy) continue;
                const tb::Calibration point = tb::Calibration::fromSweepPoint(r, sweepFile.params, sweepFile.host, sweepFile.cores);
                if ((onGpu || point.threadsPerTower == s.threadsPerTower) && point.batchPerTower == s.batchPerTower)
                    measured = r.measured.examplesPerSec;
            }
            if (c.json) {
                nlohmann::json j = p.toJson();
                j["scenario"] = s.describe();
                j["towers"] = n;
                j["strategy"] = strategy;
                j["measured_examples_per_sec"] = measured >= 0 ? nlohmann::json(measured) : nlohmann::json(nullptr);
                j["assumptions"] = assumptions.toJson();
                if (fitted >= 0 && !c.serialShareGiven) j["serial_share_fitted_to"] = fittedFrom;
                std::cout << j.dump() << "\n";
                continue;
            }
            char m[32] = "-";
            if (measured >= 0) std::snprintf(m, sizeof m, "%.0f", measured);
            const tb::StepProfile& ph = p.phases;
            std::printf("%-44s %12.0f %12s %9.2f %9.2f %9.2f %9.2f %9.2f\n", s.describe().c_str(), p.examplesPerSec, m,
                        1e3 * p.stepSeconds, 1e3 * ph.compute, 1e3 * (ph.wait + ph.straggle), 1e3 * ph.reduce, 1e3 * ph.apply);
            std::printf("    %s\n", p.bottleneck.c_str());
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        CommandLine c = parseCommandLine({argv + 1, argv + argc});
        switch (c.command) {
        case CommandLine::Command::Help: std::fputs(kUsage, stdout); return 0;
        case CommandLine::Command::SelfTest: return tb::runSelfTest(std::cout);
        case CommandLine::Command::Runs: return runList(c);
        case CommandLine::Command::Models: return runModels(c);
        case CommandLine::Command::Export: return runExport(c.evalTarget, c.onnxFile);
        case CommandLine::Command::Classify: return runClassify(c.evalTarget, c.images, c.top, c.config.threads);
        case CommandLine::Command::Convert: return runConvert(c.convertSpec, c.convertTarget, c.jpegQuality, c.shards, c.repeat);
        case CommandLine::Command::Eval: return runEval(c.evalTarget, c.config, c.dataGiven);
        case CommandLine::Command::Scale: return runScale(c);
        case CommandLine::Command::Predict: return runPredict(c);
        case CommandLine::Command::Train: return runHeadless(c.config, c.storage);
        }
        return fail("internal error: unknown command");
    } catch (const tb::Error& e) {
        return fail(e.what());
    } catch (const std::bad_alloc&) {
        return fail("out of memory");
    } catch (const std::exception& e) {
        return fail(std::string("internal error: ") + e.what());
    }
}
