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

The two profiled runs must have made the same algorithm choices: where they ran different kernels
(a kernel's launches per step fractional or negative), the pair is profiled again (--retries), and
refused if it still differs: no figures come from a difference of two configurations.

Last, a roofline table: the step's training FLOPs (2 per multiply-add of forward, weight and input
gradients, as towerbench-run counts them) over the unprofiled wall time and over the kernel time,
as TFLOP/s and as shares of the device's dense fp32, TF32 and bf16 peaks (--device, else the GPU's
name from nvidia-smi).
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
from bench_common import REPO, load_spec, make_cifar_dir, spec_stats  # noqa: E402

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


# Dense (no sparsity) peaks in TFLOP/s from NVIDIA's data sheets: FP32 on CUDA cores, TF32 and BF16
# on tensor cores. The H200 computes as the H100 SXM does; only its memory differs.
PEAKS_TFLOPS = {"h100-sxm": {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4},
                "h100-pcie": {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0},
                "h200": {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4}}


def device_of(gpu_name):
    """PEAKS_TFLOPS' key for an nvidia-smi GPU name, or None ("NVIDIA H100 80GB HBM3" is the SXM part)."""
    n = gpu_name.upper()
    if "H200" in n:
        return "h200"
    if "H100" in n:
        return "h100-pcie" if "PCIE" in n else "h100-sxm"
    return None


def roofline(flops_per_step, wall_us, kernel_us, peaks):
    """Achieved TFLOP/s over the wall step and over the kernels' time, and the wall figure's share of
    each peak."""
    wall_tflops = flops_per_step / (wall_us * 1e-6) / 1e12
    row = {"tflops_wall": wall_tflops, "tflops_kernels": flops_per_step / (kernel_us * 1e-6) / 1e12}
    for k, v in (peaks or {}).items():
        row[f"share_of_{k}_peak"] = wall_tflops / v
    return row


def mixed_kernels(steps):
    """Kernel names whose per-step launches are fractional or negative: the two runs differed."""
    return sorted(k for k, (n, t) in steps.items() if n < 0 or t < 0 or abs(n - round(n)) > 1e-6)


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
    ap.add_argument("--retries", type=int, default=2, help="profiled pairs tried again when their kernels differ")
    ap.add_argument("--device", choices=sorted(PEAKS_TFLOPS), default=None,
                    help="the roofline's peaks (default: from nvidia-smi's GPU name)")
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

    device = args.device
    if device is None and shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
        device = device_of(smi.stdout.splitlines()[0]) if smi.returncode == 0 and smi.stdout.strip() else None
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
                for attempt in range(1 + args.retries):
                    short = profile(args.ncu, cmd(s0, f"short{attempt}"),
                                    os.path.join(tmp, f"{model}-{precision}-short{attempt}.csv"), args.timeout)
                    long = profile(args.ncu, cmd(s1, f"long{attempt}"),
                                   os.path.join(tmp, f"{model}-{precision}-long{attempt}.csv"), args.timeout)
                    steps = per_step(short, long, s0, s1)
                    mixed = mixed_kernels(steps)
                    if not mixed:
                        break
                    print(f"# {model} {precision}: the two profiled runs ran different kernels ({len(mixed)}: "
                          f"{', '.join(mixed)[:200]}), attempt {attempt + 1} of {1 + args.retries}", flush=True)
            except (RuntimeError, ValueError, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError) as e:
                failures.append(f"{model} {precision}: {type(e).__name__}: {e}")
                print(f"# {model} {precision}: {e}", flush=True)
                continue
            if mixed:
                # Each run makes its own algorithm choices: a difference of two configurations is
                # no step's profile.
                failures.append(f"{model} {precision}: refused: the two profiled runs chose different algorithms in "
                                f"{1 + args.retries} attempts ({len(mixed)} kernels differ: {', '.join(mixed)[:200]})")
                continue
            gpu_us = sum(t for _, t in steps.values()) / 1e3
            launches = sum(n for n, _ in steps.values())
            flops_step = spec_stats(spec)[1] * args.batch
            roof = roofline(flops_step, wall * 1e3, gpu_us, PEAKS_TFLOPS.get(device))
            print(f"\n{model} {precision}: wall {wall * 1e3:,.0f} us per step (unprofiled, {args.wall_steps} steps); "
                  f"kernels {gpu_us:,.0f} us per step ({gpu_us / (wall * 1e3):.0%} of it) in {launches:.1f} launches")
            print(f"  {'kernel':<72} {'per step':>8} {'us/step':>9} {'share':>6}")
            for name, (n, t) in sorted(steps.items(), key=lambda kv: -kv[1][1])[:args.top]:
                print(f"  {name[:72]:<72} {n:8.1f} {t / 1e3:9.1f} {t / 1e3 / gpu_us:6.1%}")
            records.append({"kind": "kernel_profile", "model": model, "precision": precision, "batch": args.batch,
                            "device": device, "wall_step_us": wall * 1e3, "kernel_us_per_step": gpu_us,
                            "launches_per_step": launches, "flops_per_step": flops_step, **roof,
                            "kernels": {k: {"launches": n, "us": t / 1e3} for k, (n, t) in steps.items()}})
    if records:
        print(f"\nroofline ({device or 'device unknown: no peaks'}; TFLOP/s of the step's training FLOPs)")
        print(f"  {'model':<12} {'precision':<9} {'kernels share':>13} {'TFLOP/s wall':>12} {'TFLOP/s kernels':>15} "
              f"{'fp32 peak':>9} {'TF32 peak':>9} {'bf16 peak':>9}")
        for r in records:
            share = lambda k: f"{r[k]:9.1%}" if k in r else f"{'-':>9}"  # noqa: E731
            print(f"  {r['model']:<12} {r['precision']:<9} {r['kernel_us_per_step'] / r['wall_step_us']:13.0%} "
                  f"{r['tflops_wall']:12.2f} {r['tflops_kernels']:15.2f} {share('share_of_fp32_peak')} "
                  f"{share('share_of_tf32_peak')} {share('share_of_bf16_peak')}")
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
