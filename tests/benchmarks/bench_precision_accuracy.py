#!/usr/bin/python3
"""Accuracy and time of bf16 mixed precision against fp32: Fashion-MNIST, 2 epochs, 3 seeds.

    /usr/bin/python3 tests/benchmarks/bench_precision_accuracy.py --binary build/app/towerbench-run \
        [--models mnist_cnn,mlp] [--seeds 1,2,3] [--epochs 2] [--flag precision|comm-precision] [--towers cpu:0]

--flag comm-precision compares the gradients' format on the wire instead (fp32 matrix work), with
--towers cpu:0,cpu:1 say: bf16 gradients between the towers against fp32 ones.

For each model, seed and precision it trains `epochs` epochs of the installed Fashion-MNIST
(dataset-fashion-mnist; 5,000 training images held out for validation) with the same settings,
then reads the summary: test accuracy (the 10,000 test images), training seconds and steady
examples/sec. It prints the machine line, one row per run, the means, and whether the mean bf16
accuracy is within `--tolerance` points of fp32's (issue 16: 0.5). The runs alternate fp32 and bf16
so that a slower stretch of a shared machine falls on both. Exit status 0 when every run completed.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench_common import REPO, machine_line, machine_peak, print_table, report


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", required=True, help="path of towerbench-run")
    ap.add_argument("--models", default="mnist_cnn,mlp")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--tolerance", type=float, default=0.5, help="points of accuracy bf16 may lose or gain")
    ap.add_argument("--flag", choices=["precision", "comm-precision"], default="precision",
                    help="what bf16 applies to: the matrix work, or the gradients the towers exchange")
    ap.add_argument("--towers", default="cpu:0")
    args = ap.parse_args()
    binary = os.path.abspath(args.binary)
    failures, records = [], []
    peak = machine_peak(binary, args.threads)
    print(f"# {machine_line(peak)}")
    if peak and peak.get("bf16_missing") and args.flag == "precision":
        print(f"# bf16 not run: {peak['bf16_missing']}")
        return report(records, failures + ["bf16: the processor has no bf16 instructions"])
    print(f"# --{args.flag} fp32 vs bf16; towers {args.towers}; Fashion-MNIST, {args.epochs} epochs, batch {args.batch}, "
          f"{args.threads} threads, momentum 0.9, lr 0.01; validation 5,000 held out; test accuracy on the 10,000 test "
          "images", flush=True)
    rows, means = [], []
    with tempfile.TemporaryDirectory(prefix="tb_precision_") as tmp:
        for model in [m for m in args.models.split(",") if m]:
            acc = {"fp32": [], "bf16": []}
            secs = {"fp32": [], "bf16": []}
            for seed in [s for s in args.seeds.split(",") if s]:
                for precision in ("fp32", "bf16"):
                    cmd = [binary, "--model", model, "--data", "fashion-mnist", "--epochs", str(args.epochs),
                           "--batch", str(args.batch), "--threads", str(args.threads), "--seed", seed,
                           "--towers", args.towers, f"--{args.flag}", precision, "--quiet", "--run-dir", os.path.join(tmp, f"{model}-{seed}-{precision}")]
                    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
                    if p.returncode != 0:
                        failures.append(f"{' '.join(cmd)} exited with {p.returncode}: {p.stderr.strip()[-300:]}")
                        continue
                    s = json.loads(p.stdout.strip().splitlines()[-1])
                    acc[precision].append(s["test_accuracy"])
                    secs[precision].append(s["train_seconds"])
                    records.append({"model": model, "seed": int(seed), "precision": precision,
                                    "test_accuracy": s["test_accuracy"], "train_seconds": s["train_seconds"],
                                    "steady_examples_per_sec": s["steady_examples_per_sec"], "backend": s["backend"]})
                    rows.append([model, seed, precision, f"{100 * s['test_accuracy']:.2f}", f"{s['train_seconds']:.1f}",
                                 f"{s['steady_examples_per_sec']:.0f}"])
            if acc["fp32"] and len(acc["fp32"]) == len(acc["bf16"]):
                a32, a16 = statistics.mean(acc["fp32"]), statistics.mean(acc["bf16"])
                t32, t16 = statistics.mean(secs["fp32"]), statistics.mean(secs["bf16"])
                gap = 100 * (a16 - a32)
                means.append([model, f"{100 * a32:.2f}", f"{100 * a16:.2f}", f"{gap:+.2f}",
                              "met" if abs(gap) <= args.tolerance else "NOT met", f"{t32:.1f}", f"{t16:.1f}",
                              f"{t32 / t16:.2f}"])
                records.append({"model": model, "kind": "mean", "fp32_accuracy": a32, "bf16_accuracy": a16,
                                "points": gap, "tolerance_points": args.tolerance, "within": abs(gap) <= args.tolerance,
                                "fp32_seconds": t32, "bf16_seconds": t16})
    print()
    print_table(["model", "seed", "precision", "test accuracy %", "train s", "steady ex/s"], rows)
    print()
    print_table(["model", "fp32 mean %", "bf16 mean %", "bf16 - fp32 points", f"within {args.tolerance}",
                 "fp32 train s", "bf16 train s", "time fp32 / bf16"], means)
    print()
    return report(records, failures)


if __name__ == "__main__":
    sys.exit(main())
