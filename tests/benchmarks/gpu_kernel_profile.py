#!/usr/bin/env python3
"""Where a GPU training step's time goes, kernel by kernel, per precision (Nsight Compute).

    gpu_kernel_profile.py --binary build-device/app/towerbench-run [--ncu PATH] [--models mnist_cnn,cifar10_cnn]
        [--precisions fp32,bf16] [--plan "--towers gpu:0 --variables gpu:0"] [--batch 128] [--steps 5,15] [--out-json FILE] [-- EXTRA RUN FLAGS]

For each model and precision, towerbench-run trains twice under `ncu --metrics gpu__time_duration.sum`
(default plan: one GPU tower, variables on it), once for a few steps and once for more. Each kernel name's total
time in the longer run less its total in the shorter, over the difference in steps, is that
kernel's time per training step: plan set-up (cuDNN's algorithm search), the first steps' and the
final evaluation's kernels cancel out; the cuDNN algorithm search runs unprofiled (an NVTX range
excluded). Beside it, an unprofiled run of 300 steps gives the step's
wall time; GPU time per step well under it means the step waits on the host (launches, syncs),
not on kernels. ncu serialises kernels and runs them at the GPU's own clocks (--clock-control none).
"""
import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import REPO, load_spec, make_cifar_dir  # noqa: E402

UNIT_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}


def parse_ncu_csv(text, origin):
    """{kernel name: (launches, total ns)} from ncu's --csv output (its 'details' page: one row per
    kernel and metric). Lines that are not CSV rows (ncu's ==PROF== messages) are skipped."""
    rows = [line for line in text.splitlines() if line.startswith('"')]
    if not rows:
        raise ValueError(f"{origin}: no CSV rows in ncu's output")
    totals = defaultdict(lambda: [0, 0.0])
    for r in csv.DictReader(io.StringIO("\n".join(rows))):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = r.get("Metric Unit", "nsecond")
        if unit not in UNIT_NS:
            raise ValueError(f"{origin}: unknown time unit {unit!r}")
        t = totals[r["Kernel Name"]]
        t[0] += 1
        t[1] += float(r["Metric Value"].replace(",", "")) * UNIT_NS[unit]
    if not totals:
        raise ValueError(f"{origin}: no gpu__time_duration.sum rows in ncu's output")
    return {k: (v[0], v[1]) for k, v in totals.items()}


def per_step(short, long, steps_short, steps_long):
    """Per-step launches and ns of each kernel name: the longer run's totals less the shorter's."""
    d = steps_long - steps_short
    out = {}
    for name in set(short) | set(long):
        n0, t0 = short.get(name, (0, 0.0))
        n1, t1 = long.get(name, (0, 0.0))
        if n1 != n0:
            out[name] = ((n1 - n0) / d, (t1 - t0) / d)
    return out


def run_cmd(binary, model, data, precision, plan, batch, steps, extra, run_dir):
    return [binary, "--model", model, "--data", data] + plan + [
            "--batch", str(batch), "--steps", str(steps), "--validation", "0", "--quiet",
            "--precision", precision, "--run-dir", run_dir, "--checkpoint-every", "0"] + extra


def profile(ncu, cmd, log, timeout):
    # The backend's cuDNN algorithm search runs unprofiled: its trials, slowed by the profiler,
    # would make it pick other algorithms than an unprofiled run does.
    full = [ncu, "--nvtx", "--nvtx-exclude", "tb: cuDNN algorithm search/",
            "--metrics", "gpu__time_duration.sum", "--csv", "--print-units", "base",
            "--clock-control", "none", "--print-kernel-base", "function", "--log-file", log] + cmd
    p = subprocess.run(full, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"ncu exit {p.returncode}: {(p.stderr or p.stdout).strip()[-400:]}")
    with open(log) as f:
        return parse_ncu_csv(f.read(), log)


def wall_step_ms(cmd, batch, timeout):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"towerbench-run exit {p.returncode}: {p.stderr.strip()[-400:]}")
    s = json.loads(p.stdout.strip().splitlines()[-1])
    return 1e3 * batch / s["steady_examples_per_sec"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--ncu", default=shutil.which("ncu") or "ncu")
    ap.add_argument("--models", default="mnist_cnn,cifar10_cnn")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--plan", default="--towers gpu:0 --variables gpu:0", help="towerbench-run's placement flags")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", default="5,15", help="the shorter and the longer profiled run's steps")
    ap.add_argument("--wall-steps", type=int, default=300)
    ap.add_argument("--mnist-data", default=f"idx:{REPO}/samples/fashion-mnist-slice")
    ap.add_argument("--cifar-dir", default=None, help="CIFAR-10 binary directory (made with random files where missing; default: in a temp dir)")
    ap.add_argument("--top", type=int, default=14, help="kernels listed per run")
    ap.add_argument("--timeout", type=int, default=150, help="seconds per profiled run")
    ap.add_argument("--out-json", default=None)
    ap.add_argument("extra", nargs="*", help="more towerbench-run flags (after --)")
    args = ap.parse_args()
    try:
        s0, s1 = (int(x) for x in args.steps.split(","))
        if not 0 < s0 < s1:
            raise ValueError
    except ValueError:
        sys.exit(f"--steps: {args.steps!r} is not two step counts, the shorter first (e.g. 5,15)")
    models = [m for m in args.models.split(",") if m]
    precisions = [p for p in args.precisions.split(",") if p]

    tmp = tempfile.mkdtemp(prefix="tb_kernels_")
    records, failures = [], []
    for model in models:
        spec = load_spec(os.path.join(REPO, "resources", "models"), model)
        if spec["input"][0] == 3:
            if args.cifar_dir is None:
                args.cifar_dir = os.path.join(tmp, "cifar10")
            if not os.path.isdir(args.cifar_dir):
                os.makedirs(args.cifar_dir)
                make_cifar_dir(args.cifar_dir)
            data = f"cifar10:{args.cifar_dir}"
        else:
            data = args.mnist_data
        for precision in precisions:
            def cmd(steps, tag):
                return run_cmd(args.binary, model, data, precision, args.plan.split(), args.batch, steps, args.extra,
                               os.path.join(tmp, f"{model}-{precision}-{tag}"))
            try:
                wall = wall_step_ms(cmd(args.wall_steps, "wall"), args.batch, args.timeout)
                short = profile(args.ncu, cmd(s0, "short"), os.path.join(tmp, f"{model}-{precision}-short.csv"), args.timeout)
                long = profile(args.ncu, cmd(s1, "long"), os.path.join(tmp, f"{model}-{precision}-long.csv"), args.timeout)
            except (RuntimeError, ValueError, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError) as e:
                failures.append(f"{model} {precision}: {type(e).__name__}: {e}")
                print(f"# {model} {precision}: {e}", flush=True)
                continue
            steps = per_step(short, long, s0, s1)
            gpu_us = sum(t for _, t in steps.values()) / 1e3
            launches = sum(n for n, _ in steps.values())
            # Each run makes its own algorithm choices: where the two profiled runs differ, a
            # kernel's launches per step come out fractional or negative, and the difference mixes
            # two configurations.
            mixed = sorted(k for k, (n, t) in steps.items() if n < 0 or t < 0 or abs(n - round(n)) > 1e-6)
            print(f"\n{model} {precision}: wall {wall * 1e3:,.0f} us per step (unprofiled, {args.wall_steps} steps); "
                  f"kernels {gpu_us:,.0f} us per step ({gpu_us / (wall * 1e3):.0%} of it) in {launches:.1f} launches")
            if mixed:
                print(f"  WARNING: the two profiled runs ran different kernels ({len(mixed)}: {', '.join(mixed)[:200]}): "
                      "their algorithm choices differed, and the per-step figures mix two configurations")
            print(f"  {'kernel':<72} {'per step':>8} {'us/step':>9} {'share':>6}")
            for name, (n, t) in sorted(steps.items(), key=lambda kv: -kv[1][1])[:args.top]:
                print(f"  {name[:72]:<72} {n:8.1f} {t / 1e3:9.1f} {t / 1e3 / gpu_us:6.1%}")
            records.append({"kind": "kernel_profile", "model": model, "precision": precision, "batch": args.batch,
                            "wall_step_us": wall * 1e3, "kernel_us_per_step": gpu_us, "launches_per_step": launches,
                            "kernels_differing_between_runs": mixed,
                            "kernels": {k: {"launches": n, "us": t / 1e3} for k, (n, t) in steps.items()}})
    if args.out_json:
        with open(args.out_json, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAILED:", f)
    return 1 if failures or not records else 0


if __name__ == "__main__":
    sys.exit(main())
