#!/usr/bin/python3
"""Validation of the what-if predictor (towerbench-run predict) on what this machine can measure.

    python3 tests/benchmarks/bench_predictor.py --binary build/app/towerbench-run \
        [--model mnist_cnn] [--batch 64] [--steps 30] [--warmup 5] [--out DIR]

1. Calibration: ONE measured run, `towerbench-run scale --sweep-towers 1` (one tower, both cores).
2. Predictions, all made and saved (OUT/predictions.json) before any held-out run starts: for a
   held-out set of configurations that differ a lot (threads per tower; 1 vs 2 towers on 1 vs 2
   cores, pinned with taskset; stragglers x2 and x3 in sync and async; averaging every K; batch
   sizes; holder mean vs all-reduce; oversubscribed towers), `towerbench-run predict` with the
   matching flags. The naive prediction is "nothing changes": the calibration's examples/sec.
3. Measurements: each configuration trained for warmup+steps steps with --metrics; examples/sec
   over the steps after the warm-up, from the metrics file (the examples of each report over the
   elapsed_s between the warm-up's last report and the last one), independent of the sweep code.
   Averaging every K = 4 trains in rounds whose 4 reports share one clock reading, so warm-up and
   steps are multiples of 4 (else the stretch counts steps done before its clock started).
   Runs on this machine spread by up to 20% (docs/measurements.md): each configuration is measured --repeats
   times (default 3), the rounds interleaved, and the median is the measurement. The calibration
   run measures twice as many steps as the others.
With --pipeline, the held-out set is model parallelism instead: 2 and 3 stages of CPU devices
(one thread each) over the calibration's batch, naive, gpipe and 1f1b with 2 to 8 micro-batches,
batch x2, two stages sharing one core; `predict --strategies gpipe:4 --towers 2` measures each
stage's step first (engine/pipeline_time_model.hpp).
With --gpu-shared (a GPU machine), the calibration is one sweep of towers sharing gpu:0 (1 and 4
towers, variables on the host and on the GPU, batch --batch per tower) and the held-out set other
tower counts (2, 3), batch sizes (32, 64, 512), averaging every 4 and async on the same GPU; the
naive prediction is the one-tower rate of the same place.
With --gpu DEVICE:LINK (a GPU machine), the held-out set is one GPU tower on gpu:0, variables in
host memory and on the GPU, batch 32/128/512, predicted from the same CPU calibration as the preset
DEVICE joined by LINK; there the naive column (the CPU's own rate) is no contender.
Prints the processor, then one row per configuration: predicted, measured, error; the mean
absolute error of the model and of the naive prediction (goal: model at most 15% and clearly
below naive). JSON lines follow (lines starting with '{').
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import cpu_isa, cpu_model, machine_line, machine_peak, print_table  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def towers(n):
    return ",".join(f"cpu:{i}" for i in range(n))


# label, predict flags, run flags, cores (taskset), towers
def held_out(batch):
    b2 = str(2 * batch)
    return [
        ("1 tower x 1 thread", ["--towers", "1", "--threads-per-tower", "1", "--cores", "1"],
         ["--threads", "1", "--batch", str(batch)], "0", 1),
        ("1 tower x 1 thread, batch x4", ["--towers", "1", "--threads-per-tower", "1", "--cores", "1",
                                          "--batch-per-tower", str(4 * batch)],
         ["--threads", "1", "--batch", str(4 * batch)], "0", 1),
        ("1 tower x 2 threads, batch /2", ["--towers", "1", "--batch-per-tower", str(batch // 2)],
         ["--threads", "2", "--batch", str(batch // 2)], "0,1", 1),
        ("2 towers x 1 thread, 2 cores, mean", ["--towers", "2", "--strategies", "mean"],
         ["--threads", "2", "--batch", b2, "--towers", towers(2)], "0,1", 2),
        ("2 towers on 1 core, mean", ["--towers", "2", "--strategies", "mean", "--cores", "1", "--threads-per-tower", "1"],
         ["--threads", "1", "--batch", b2, "--towers", towers(2)], "0", 2),
        ("2 towers, allreduce", ["--towers", "2", "--strategies", "allreduce"],
         ["--threads", "2", "--batch", b2, "--towers", towers(2), "--variables", "replicated", "--reduce", "allreduce"], "0,1", 2),
        ("2 towers, average every 4", ["--towers", "2", "--strategies", "average:4"],
         ["--threads", "2", "--batch", b2, "--towers", towers(2), "--variables", "replicated", "--reduce", "allreduce", "--average-every", "4"], "0,1", 2),
        ("2 towers, mean, straggler x2", ["--towers", "2", "--strategies", "mean", "--slow", "1=2"],
         ["--threads", "2", "--batch", b2, "--towers", towers(2), "--slow", "1=2"], "0,1", 2),
        ("2 towers, mean, straggler x3", ["--towers", "2", "--strategies", "mean", "--slow", "1=3"],
         ["--threads", "2", "--batch", b2, "--towers", towers(2), "--slow", "1=3"], "0,1", 2),
        ("2 towers, async, straggler x2", ["--towers", "2", "--strategies", "async", "--slow", "1=2"],
         ["--threads", "2", "--batch", b2, "--towers", towers(2), "--update", "async", "--slow", "1=2"], "0,1", 2),
        ("2 towers, async, straggler x3", ["--towers", "2", "--strategies", "async", "--slow", "1=3"],
         ["--threads", "2", "--batch", b2, "--towers", towers(2), "--update", "async", "--slow", "1=3"], "0,1", 2),
        ("2 towers x 1 thread, batch x4 each", ["--towers", "2", "--strategies", "mean", "--batch-per-tower", str(4 * batch)],
         ["--threads", "2", "--batch", str(8 * batch), "--towers", towers(2)], "0,1", 2),
        ("4 towers on 2 cores, mean", ["--towers", "4", "--strategies", "mean"],
         ["--threads", "2", "--batch", str(4 * batch), "--towers", towers(4)], "0,1", 4),
    ]


# Model parallelism (--pipeline): the same one-tower calibration; held out, S stages of CPU
# devices (--stages S, one thread each on 2 cores) over the one-tower batch, every schedule, two
# batch sizes, two stages sharing one core and three stages on two. The predictor measures each
# stage's step (a fraction of a second) before any held-out run; the run is never measured.
def held_out_pipeline(batch):
    configs = []
    for stages, schedule, m, b, cores in ((2, "naive", 1, batch, "0,1"), (2, "gpipe", 2, batch, "0,1"),
                                          (2, "gpipe", 4, batch, "0,1"), (2, "gpipe", 8, batch, "0,1"),
                                          (2, "1f1b", 4, batch, "0,1"), (2, "1f1b", 8, batch, "0,1"),
                                          (2, "naive", 1, 2 * batch, "0,1"), (2, "1f1b", 4, 2 * batch, "0,1"),
                                          (2, "gpipe", 4, batch, "0"), (3, "gpipe", 4, batch, "0,1")):
        strategy = schedule if schedule == "naive" else f"{schedule}:{m}"
        threads = len(cores.split(","))
        where = "1 core" if threads == 1 else "2 cores"
        label = f"{stages} stages, {strategy}, batch {b}, {where}"
        configs.append((label, ["--towers", str(stages), "--strategies", strategy, "--batch-per-tower", str(b),
                                "--cores", str(threads), "--threads-per-tower", str(max(1, threads // stages))],
                        ["--threads", str(threads), "--batch", str(b), "--stages", str(stages), "--pipeline", schedule,
                         "--micro-batches", str(m)], cores, stages))
    return configs


# On a GPU machine (--gpu DEVICE:LINK): the same CPU calibration, predictions for one GPU tower
# of the preset DEVICE joined by LINK (the predictor's "other hardware": compute scaled by the
# FLOP/s ratio to this machine's measured core, transfers alpha-beta over the link), measured on
# gpu:0 with the variables in host memory (the CPU holder) and on the GPU, over batch sizes.
def held_out_gpu(device, link, cores):
    configs = []
    for b in ("32", "128", "512"):
        hw = ["--towers", "1", "--device", device, "--link", link, "--batch-per-tower", b]
        configs.append((f"1 {device} tower, variables on the CPU, batch {b}", [*hw, "--strategies", "mean"],
                        ["--towers", "gpu:0", "--variables", "cpu", "--batch", b], cores, 1))
        configs.append((f"1 {device} tower, variables on the GPU, batch {b}", [*hw, "--strategies", "allreduce"],
                        ["--towers", "gpu:0", "--variables", "gpu:0", "--batch", b], cores, 1))
    return configs


# Towers sharing gpu:0 (--gpu-shared): calibrated from one sweep on the GPU (1 and 4 towers, the
# variables on the host and on the GPU, batch 128 per tower), predictions for other tower counts,
# batch sizes and strategies on the same GPU. (label, predict flags, run flags, cores, towers)
def held_out_gpu_shared(cores):
    place = {"mean": ["--variables", "cpu"], "async": ["--variables", "cpu", "--update", "async"],
             "allreduce": ["--variables", "replicated", "--reduce", "allreduce"],
             "average:4": ["--variables", "replicated", "--reduce", "allreduce", "--average-every", "4"]}
    configs = []
    for n, strategy, b in ((1, "mean", 32), (1, "mean", 512), (1, "allreduce", 32), (1, "allreduce", 512),
                           (2, "mean", 128), (2, "allreduce", 128), (2, "average:4", 128), (4, "average:4", 128),
                           (2, "allreduce", 512), (4, "mean", 32), (2, "async", 128), (3, "allreduce", 64)):
        where = ("variables on the GPU" if strategy == "allreduce" else "variables on the host") if n == 1 else strategy
        label = f"{n} tower{'s' if n > 1 else ''} on gpu:0, {where}, batch {b}"
        configs.append((label, ["--towers", str(n), "--strategies", strategy, "--batch-per-tower", str(b)],
                        ["--towers", f"gpu:0*{n}", "--batch", str(n * b), *place[strategy]], cores, n))
    return configs


def measured_rate(binary, model, data, flags, cores, warmup, steps, metrics):
    cmd = ["taskset", "-c", cores, binary, "--model", model, "--data", data, "--steps", str(warmup + steps),
           "--validation", "0", "--quiet", "--metrics", metrics, *flags]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
    reports = [json.loads(ln) for ln in open(metrics) if '"type":"step"' in ln]
    start = reports[warmup - 1]["elapsed_s"]
    timed = reports[warmup:]
    return sum(r["examples"] for r in timed) / (timed[-1]["elapsed_s"] - start), cmd


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(REPO, "build", "app", "towerbench-run"))
    ap.add_argument("--model", default="mnist_cnn")
    ap.add_argument("--data", default="fashion-mnist")
    ap.add_argument("--batch", type=int, default=64, help="examples per tower per step (calibration)")
    # Multiples of the averaging configuration's K = 4: its steps come in rounds of 4 that share one
    # clock reading, so a stretch must start and end at a round's end.
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3, help="measurements of each held-out configuration (median)")
    ap.add_argument("--out", default=None, help="folder for the sweep, predictions and metrics (default: a temp dir)")
    ap.add_argument("--gpu", default=None, metavar="DEVICE:LINK",
                    help="held-out runs on gpu:0 predicted as this preset device and link (h100:pcie5)")
    ap.add_argument("--gpu-shared", action="store_true",
                    help="calibrate from a sweep of towers sharing gpu:0 and predict others on it")
    ap.add_argument("--pipeline", action="store_true",
                    help="held-out pipelines of CPU stages (naive, gpipe, 1f1b) instead of towers")
    args = ap.parse_args()
    if args.steps % 4 or args.warmup % 4 or args.warmup < 4:
        sys.exit("--steps and --warmup: multiples of 4 (the averaging configuration's rounds), warm-up at least 4")
    out = args.out or tempfile.mkdtemp(prefix="bench_predictor_")
    os.makedirs(out, exist_ok=True)
    print(f"{machine_line(machine_peak(args.binary, os.cpu_count()))}; model {args.model}, data {args.data}")

    sweep = os.path.join(out, "calibration")
    if args.gpu_shared:
        how = ["--towers", "gpu:0*2", "--sweep-towers", "1,4", "--sweep-strategies", "mean,allreduce"]
    else:
        how = ["--threads", "2", "--sweep-towers", "1"]
    cal = subprocess.run(["taskset", "-c", f"0-{os.cpu_count() - 1}" if args.gpu_shared else "0,1", args.binary, "scale", "--model", args.model, "--data", args.data,
                          "--batch", str(args.batch), "--validation", "0", "--quiet", *how,
                          "--sweep-warmup", str(args.warmup), "--sweep-steps", str(2 * args.steps),
                          "--run-dir", sweep], cwd=REPO, capture_output=True, text=True)
    if cal.returncode != 0:
        sys.exit(f"calibration failed: {cal.stderr.strip()}")
    points = json.loads(cal.stdout.strip().splitlines()[-1])["points"]
    for p in points:
        print(f"calibration: {p['label']}, batch {args.batch} per tower: {p['measured']['examples_per_sec']:.0f} examples/sec")
    naive = points[0]["measured"]["examples_per_sec"]
    # The naive prediction, "nothing changes": the one-tower rate (of the same place, on a GPU).
    naive_of = {}
    for p in points:
        if p["towers"] == 1:
            naive_of[p["strategy"]] = p["measured"]["examples_per_sec"]

    if args.gpu_shared:
        configs = held_out_gpu_shared(f"0-{os.cpu_count() - 1}")
    elif args.gpu:
        device, _, link = args.gpu.partition(":")
        configs = held_out_gpu(device, link, f"0-{os.cpu_count() - 1}")
    elif args.pipeline:
        configs = held_out_pipeline(args.batch)
    else:
        configs = held_out(args.batch)
    predictions = []
    for label, pflags, _, _, _ in configs:
        p = subprocess.run([args.binary, "predict", sweep, "--json", *pflags], cwd=REPO, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"predict {label}: {p.stderr.strip()}")
        predictions.append(json.loads(p.stdout.strip().splitlines()[-1]))
    with open(os.path.join(out, "predictions.json"), "w") as f:  # saved before any held-out run
        json.dump([{"label": c[0], "prediction": p} for c, p in zip(configs, predictions)], f, indent=1)

    rates = [[] for _ in configs]
    for rep in range(args.repeats):  # rounds interleaved: slow spells of the machine hit every configuration
        for i, (label, _, rflags, cores, _) in enumerate(configs):
            rate, cmd = measured_rate(args.binary, args.model, args.data, rflags, cores, args.warmup, args.steps,
                                      os.path.join(out, f"held-out-{i + 1:02d}-{rep + 1}.jsonl"))
            rates[i].append((rate, cmd))
    rows, records, errors, naive_errors = [], [], [], []
    for i, ((label, _, rflags, cores, _), p) in enumerate(zip(configs, predictions)):
        ordered = sorted(r for r, _ in rates[i])
        measured, cmd = ordered[len(ordered) // 2], rates[i][0][1]
        predicted = p["examples_per_sec"]
        err = (predicted - measured) / measured
        pflags = configs[i][1]
        strategy = pflags[pflags.index("--strategies") + 1] if "--strategies" in pflags else "mean"
        base = naive_of.get("allreduce" if strategy.startswith(("allreduce", "average")) else "mean", naive)
        nerr = (base - measured) / measured
        errors.append(abs(err))
        naive_errors.append(abs(nerr))
        rows.append([label, f"{predicted:.0f}", f"{measured:.0f}", f"{100 * err:+.1f}%", f"{100 * nerr:+.1f}%"])
        records.append({"label": label, "predicted": predicted, "measured": measured, "runs": ordered, "error": err,
                        "naive_error": nerr, "command": " ".join(cmd), "bottleneck": p["bottleneck"]})
    print_table(["held-out configuration", "predicted ex/s", "measured ex/s", "model error", "naive error"], rows)
    mae, naive_mae = sum(errors) / len(errors), sum(naive_errors) / len(naive_errors)
    print(f"mean absolute error: model {100 * mae:.1f}% (goal <= 15%), naive {100 * naive_mae:.1f}%")
    for r in records:
        print(json.dumps(r))
    print(json.dumps({"mae": mae, "naive_mae": naive_mae, "processor": cpu_model(), "isa": cpu_isa(), "model": args.model,
                      "calibration_examples_per_sec": naive, "out": out}))


if __name__ == "__main__":
    main()
