#!/usr/bin/python3
"""A stage per mpirun process against the same stages as threads of one process (issue 32).

    python3 tests/benchmarks/bench_stage_processes.py BUILD/app/towerbench-run [--rounds 3] [--steps 60]

deep_mlp at batch 128, split 0-8 | 9-17 (its two equal halves), one thread per stage, on the
shipped Fashion-MNIST slice: one device of 2 threads; then each schedule (naive, gpipe and 1f1b at
M = 4 and 8) with the two stages as threads of one process and as two processes
(`mpirun -np 2 ... --stage-per-process true`, activations and gradients as MPI messages). Prints
the machine, then per configuration the median over the rounds of the summary's steady
examples/sec and bubble_fraction, beside (S-1)/(M+S-1). Open MPI's root and oversubscription
variables are set for its own runs.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPLIT = "cpu:0=flatten0..relu8,cpu:1=fc5..logits"
SCHEDULES = [("naive", []), ("gpipe M=4", ["--pipeline", "gpipe", "--micro-batches", "4"]),
             ("gpipe M=8", ["--pipeline", "gpipe", "--micro-batches", "8"]),
             ("1f1b M=4", ["--pipeline", "1f1b", "--micro-batches", "4"]),
             ("1f1b M=8", ["--pipeline", "1f1b", "--micro-batches", "8"])]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")


def summary(cmd):
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    if p.returncode:
        sys.exit(f"{' '.join(cmd[:6])}... exited with {p.returncode}: {p.stderr.strip()[-500:]}")
    s = json.loads(p.stdout.strip().splitlines()[-1])
    return s["steady_examples_per_sec"], s.get("bubble_fraction", -1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    a = ap.parse_args()
    binary = os.path.abspath(a.binary)
    print(bench_common.machine_line(bench_common.machine_peak(binary, 2)), flush=True)
    base = [binary, "--model", "deep_mlp", "--data", "idx:" + os.path.join(REPO, "samples", "fashion-mnist-slice"),
            "--batch", "128", "--steps", str(a.steps), "--validation", "0", "--quiet", "--lr", "0.01"]
    runs = {"one device, 2 threads": lambda: summary([*base, "--threads", "2"])}
    for name, args in SCHEDULES:
        staged = [*base, "--stages", SPLIT, *args]
        runs[f"{name}, threads"] = lambda staged=staged: summary([*staged, "--threads", "2"])
        runs[f"{name}, processes"] = lambda staged=staged: summary(
            ["mpirun", "--bind-to", "none", "-np", "2", *staged, "--threads", "1", "--stage-per-process", "true"])
    results = {k: [] for k in runs}
    for _ in range(a.rounds):  # rounds interleaved, so a slow spell of the machine touches every configuration
        for k, f in runs.items():
            results[k].append(f())
    print(f"{'configuration':<24} {'ex/s':>7} {'bubble':>7} {'theory':>7}")
    for k, values in results.items():
        speed = statistics.median(v[0] for v in values)
        bubble = statistics.median(v[1] for v in values)
        m = int(k.split("M=")[1].split(",")[0]) if "M=" in k else 1
        theory = "" if k.startswith("one") else f"{100 / (m + 1):6.1f}%"
        shown = "" if bubble < 0 else f"{100 * bubble:6.1f}%"
        print(f"{k:<24} {speed:7.0f} {shown:>7} {theory:>7}", flush=True)


if __name__ == "__main__":
    main()
