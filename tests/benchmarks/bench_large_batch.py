#!/usr/bin/python3
"""Accuracy as towers multiply the batch, and batch norm across towers: the runs of lessons 5 and 7
(ui/lessons/lessons.cpp), headless, with their measured test accuracy.

    /usr/bin/python3 tests/benchmarks/bench_large_batch.py --binary build/app/towerbench-run [--epochs 1]

Lesson 5: vgg_bn (a small VGG with batch norm) on Fashion-MNIST for --epochs, 1, 2, 4 and 8 CPU
towers of 32 examples each (global batches 32 to 256), momentum 0.9, each three ways: the learning
rate 0.025 as given (for a batch of 32), scaled linearly with the global batch (--lr-scaling linear
--lr-reference-batch 32), and scaled with a gradual warm-up over a quarter of the first epoch's
steps; the rate falls along a half cosine to 0 over the run in every case. Lesson 7: one tower of
32 against 8 towers of 4, each tower's batch norm by its own 4 examples, and with --sync-bn. Every
run: 2,000 training images held out for validation, the test set at the end, seeds 1 to --seeds
(the tables give the mean test accuracy and, in brackets, the lowest and highest). It prints the
machine, a table per lesson and one JSON line per run.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from bench_common import REPO, machine_line, machine_peak, print_table

BASE = ["--model", "vgg_bn", "--data", "fashion-mnist", "--optimizer", "momentum", "--lr", "0.025",
        "--validation", "2000", "--quiet"]
TRAIN = 58000  # Fashion-MNIST's 60,000 less the 2,000 held out


def towers(n):
    return ",".join(f"cpu:{i}" for i in range(n))


def run(binary, args, workdir, tag, seed, batch, epochs):
    folder = os.path.join(workdir, f"{tag}_{seed}")
    decay = ["--lr-decay", "cosine", "--lr-decay-steps", str(-(-int(TRAIN * epochs) // batch))]
    cmd = [binary, *BASE, *args, *decay, "--seed", str(seed), "--run-dir", folder]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}: {proc.stderr.strip()[-400:]}")
    s = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"command": " ".join(cmd), "test_accuracy": s["test_accuracy"],
            "validation_accuracy": s.get("validation_accuracy"), "train_seconds": s["train_seconds"],
            "examples_per_sec": s.get("steady_examples_per_sec", s["examples_per_sec"]), "steps": s["steps"]}


def summary(accs):
    return f"{100 * sum(accs) / len(accs):.2f}% ({100 * min(accs):.2f}-{100 * max(accs):.2f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    binary = os.path.abspath(args.binary)
    print(f"# {machine_line(machine_peak(binary, args.threads))}")
    print(f"# vgg_bn on Fashion-MNIST, {args.epochs:g} epoch(s) a run, {args.threads} threads", flush=True)
    records = []
    with tempfile.TemporaryDirectory(prefix="tb_large_batch_") as tmp:
        rows = []
        for n in (1, 2, 4, 8):
            cells = [f"{n} x 32 = {32 * n}"]
            for way in ("as given", "scaled", "scaled + warm-up"):
                extra = ["--towers", towers(n), "--batch", str(32 * n), "--epochs", str(args.epochs),
                         "--threads", str(args.threads), "--eval-every", str(max(50, 400 // n))]
                if way != "as given":
                    extra += ["--lr-scaling", "linear", "--lr-reference-batch", "32"]
                if way == "scaled + warm-up":
                    extra += ["--warmup-steps", str(TRAIN // (32 * n) // 4)]
                accs = []
                for seed in range(1, args.seeds + 1):
                    r = run(binary, extra, tmp, f"l5_{n}_{way.replace(' ', '')}", seed, 32 * n, args.epochs)
                    r.update(lesson=5, towers=n, way=way, seed=seed)
                    records.append(r)
                    accs.append(r["test_accuracy"])
                cells.append(summary(accs))
                print(f"  {n} towers, lr {way}: test {summary(accs)}", flush=True)
            rows.append(cells)
        print()
        print_table(["towers x batch = global", "lr 0.025 as given", "scaled linearly", "scaled + warm-up"], rows)
        rows = []
        for name, extra in (("1 tower x 32", ["--towers", "cpu:0", "--batch", "32"]),
                            ("8 towers x 4, own statistics", ["--towers", towers(8), "--batch", "32"]),
                            ("8 towers x 4, --sync-bn", ["--towers", towers(8), "--batch", "32", "--sync-bn", "true"])):
            accs, speeds = [], []
            for seed in range(1, args.seeds + 1):
                r = run(binary, [*extra, "--epochs", str(args.epochs), "--threads", str(args.threads),
                                 "--eval-every", "400"], tmp, "l7_" + name.replace(" ", "_").replace(",", ""), seed, 32,
                        args.epochs)
                r.update(lesson=7, run=name, seed=seed)
                records.append(r)
                accs.append(r["test_accuracy"])
                speeds.append(r["examples_per_sec"])
            rows.append([name, summary(accs), f"{sum(speeds) / len(speeds):.0f}"])
            print(f"  {name}: test {summary(accs)}", flush=True)
        print()
        print_table(["lesson 7", "test accuracy", "examples/sec"], rows)
    print()
    for r in records:
        print(json.dumps(r, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
