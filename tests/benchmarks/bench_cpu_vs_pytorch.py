#!/usr/bin/python3
"""CPU training throughput: Towerbench (towerbench-run) against the same networks in PyTorch.

Run with Debian's interpreter, which has python3-torch (1.13):

    /usr/bin/python3 tests/benchmarks/bench_cpu_vs_pytorch.py --binary build/app/towerbench-run \
        [--gemm-peak-binary build/tests/benchmarks/tb_gemm_peak] [--models mlp,mnist_cnn,cifar10_cnn]

For each model it
  1. runs towerbench-run (a subprocess) for warmup+steps steps on real data (fashion-mnist) or on
     generated CIFAR-10 binary files, and measures examples/sec over the last `steps` steps from the
     per-step metrics file (the first `warmup` steps, which create oneDNN primitives, are excluded);
  2. builds the same network in PyTorch from the same model JSON (NCHW, TF "SAME" paddings, LRN with
     alpha scaled by the window size), trains it with cross-entropy and SGD(momentum 0.9) on one batch
     of random tensors made before timing, `warmup` untimed steps, then times `steps` full steps.
     This favours PyTorch: it has no input pipeline, while Towerbench reads, shuffles, augments and
     converts its batches on the same cores inside the timed loop.
It prints one table, then one JSON object per model (lines starting with '{'). The exit status is 0
when every run completed (whatever the ratios); non-zero only when something failed to run or a
PyTorch network does not have the parameter count Towerbench reports.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

from bench_common import (DEFAULT_STEPS, EXPECTED_PARAMS, GOAL_RATIO, REPO, add_common_args, bench_pytorch, prepare_model, report, bench_towerbench,
                          parse_steps_overrides, print_table, spec_stats,
                          steps_for)

DEFAULT_MODELS = ["mlp", "mnist_cnn", "cifar10_cnn"]


# ----------------------------------------------------------------------------------------------
# The machine's sgemm ceiling (the model, PyTorch and Towerbench runs are in bench_common.py).

def gemm_peak(binary, threads):
    proc = subprocess.run([binary, "--threads", str(threads)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{binary} exited with {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", required=True, help="path of towerbench-run")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for both (default: all cores)")
    ap.add_argument("--batch", type=int, default=128)
    add_common_args(ap, DEFAULT_STEPS, DEFAULT_MODELS, REPO)
    ap.add_argument("--gemm-peak-binary", default=None, help="path of tb_gemm_peak (optional)")
    args = ap.parse_args()

    import torch  # Debian's python3-torch; imported here so --help works without it

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    overrides = parse_steps_overrides(args.model_steps)
    binary = os.path.abspath(args.binary)
    failures = []

    peak = None
    if args.gemm_peak_binary:
        try:
            peak = gemm_peak(os.path.abspath(args.gemm_peak_binary), args.threads)
        except Exception as e:  # noqa: BLE001 - reported, then the rest still runs
            failures.append(f"gemm peak: {e}")
    peak_gflops = peak["gemm_gflops"] if peak else None

    print(f"# machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"threads {args.threads}; batch {args.batch}; warm-up {args.warmup} steps; "
          f"load average before: {os.getloadavg()[0]:.2f} (anything else running skews every number)")
    print(f"# pytorch {torch.__version__} ({torch.__config__.parallel_info().splitlines()[-1].strip()}); "
          f"towerbench {binary}")
    if peak:
        print(f"# sgemm peak (oneDNN, n={peak['n']}, {peak['threads']} threads): {peak_gflops:.1f} GFLOP/s")
    print("# PyTorch trains on one pre-made random batch (no input pipeline); Towerbench's timing "
          "includes its input pipeline on the same cores.", flush=True)

    results = []
    with tempfile.TemporaryDirectory(prefix="tb_bench_") as tmp:
        cifar_dir = args.cifar_dir
        for name in models:
            steps = steps_for(name, args.steps, overrides)
            row = {"model": name, "batch": args.batch, "steps": steps, "warmup": args.warmup,
                   "threads": args.threads}
            try:
                spec, data, cifar_dir = prepare_model(args.models_dir, name, tmp, cifar_dir)
                spec_params, flops = spec_stats(spec)
                tb = bench_towerbench(binary, name, data, args.batch, steps, args.warmup, args.threads, tmp)
                s = tb["summary"]
                flops = s.get("flops_per_example", flops)
                row.update(data=data, backend=s.get("backend"), flops_per_example=flops,
                           flops_source="towerbench" if "flops_per_example" in s else "model json",
                           towerbench_params=s.get("params"),
                           towerbench_examples_per_sec=tb["examples_per_sec"],
                           towerbench_examples_per_sec_all_steps=s.get("examples_per_sec"),
                           towerbench_seconds=tb["seconds"])
                pt = bench_pytorch(spec, args.batch, steps, args.warmup, args.threads, args.lr, torch)
                row.update(pytorch_params=pt["params"], pytorch_examples_per_sec=pt["examples_per_sec"],
                           pytorch_seconds=pt["seconds"])
                # The two networks must be the same size, or the comparison means nothing.
                expected = EXPECTED_PARAMS.get(name, s.get("params"))
                assert pt["params"] == expected == s.get("params") == spec_params, (
                    f"parameter counts differ: pytorch {pt['params']}, towerbench {s.get('params')}, "
                    f"model json {spec_params}, expected {expected}")
                ratio = tb["examples_per_sec"] / pt["examples_per_sec"]
                gflops = tb["examples_per_sec"] * flops / 1e9
                row.update(ratio=ratio, goal_ratio=GOAL_RATIO, goal_met=ratio >= GOAL_RATIO,
                           towerbench_gflops=gflops,
                           pytorch_gflops=pt["examples_per_sec"] * flops / 1e9,
                           gemm_peak_gflops=peak_gflops,
                           percent_of_gemm_peak=100.0 * gflops / peak_gflops if peak_gflops else None)
            except Exception as e:  # noqa: BLE001 - one model failing must not hide the others
                row["error"] = f"{type(e).__name__}: {e}"
                failures.append(f"{name}: {row['error']}")
            results.append(row)

    header = ["model", "towerbench ex/s", "pytorch ex/s", "ratio (tb/pt)", f"goal {GOAL_RATIO}x met?",
              "towerbench GFLOP/s", "% of GEMM peak"]
    table = []
    for r in results:
        if "error" in r:
            table.append([r["model"], "error", "", "", "", "", ""])
            continue
        pct = f"{r['percent_of_gemm_peak']:.1f}%" if r["percent_of_gemm_peak"] is not None else "n/a"
        table.append([r["model"], f"{r['towerbench_examples_per_sec']:.0f}", f"{r['pytorch_examples_per_sec']:.0f}",
                      f"{r['ratio']:.2f}", "yes" if r["goal_met"] else "no", f"{r['towerbench_gflops']:.1f}", pct])
    print()
    print_table(header, table)
    print()
    if any((r.get("percent_of_gemm_peak") or 0) > 100 for r in results):
        print("# WARNING: above 100% of the GEMM peak: the peak was measured while the cores were busy; "
              "rerun on an idle machine")
    return report(results, failures)


if __name__ == "__main__":
    sys.exit(main())
