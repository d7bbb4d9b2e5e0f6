#!/usr/bin/python3
"""CPU training throughput: Towerbench (towerbench-run) against the same networks in PyTorch, in fp32
and in bf16 mixed precision.

Run with Debian's interpreter, which has python3-torch (1.13):

    /usr/bin/python3 tests/benchmarks/bench_cpu_vs_pytorch.py --binary build/app/towerbench-run \
        [--gemm-peak-binary build/tests/benchmarks/tb_gemm_peak] [--models mlp,mnist_cnn,cifar10_cnn] \
        [--precisions fp32,bf16] [--pytorch-threads 1,2]

It first states the machine: the processor and its ISA, what oneDNN uses of it, cores, memory and
the GEMM peak per precision (tb_gemm_peak). Then for each model and precision it
  1. runs towerbench-run (a subprocess) for warmup+steps steps on real data (fashion-mnist) or on
     generated CIFAR-10 binary files, and measures examples/sec over the last `steps` steps from the
     per-step metrics file (the first `warmup` steps, which create oneDNN primitives, are excluded);
     bf16 is `--precision bf16` (oneDNN's bf16 convolutions and inner products, fp32 master weights);
     a 2-step run with ONEDNN_VERBOSE=1 names the kernels oneDNN picked;
  2. builds the same network in PyTorch from the same model JSON (NCHW, TF "SAME" paddings, LRN with
     alpha scaled by the window size), trains it with cross-entropy and SGD(momentum 0.9) on one batch
     of random tensors made before timing, `warmup` untimed steps, then times `steps` full steps, with
     each thread count of --pytorch-threads (PyTorch's best is the comparison); bf16 runs the forward
     pass under torch.autocast("cpu", dtype=torch.bfloat16).
     This favours PyTorch: it has no input pipeline, while Towerbench reads, shuffles, augments and
     converts its batches on the same cores inside the timed loop.
  3. repeats 1. and 2. --rounds times (default 3), alternating: each round runs every precision of
     the model on both sides back to back, so a ratio is taken between runs seconds apart. A shared
     machine's speed drifts by up to 2x within minutes (mlp bf16 ran at 160-170k ex/s, then 114k, in
     runs two minutes apart on one 2-core EPYC): a ratio of two runs minutes apart measures the
     drift. Reported: each side's median over the rounds, and the median of the per-round ratios.
Goals (issue 16): fp32 at least 1.5x PyTorch's best on the CNNs and 1.25x on mlp (one tower); bf16 at
least 1.5x Towerbench's fp32 on the CNNs and 1.25x PyTorch's autocast on every model.
bf16 runs only where the processor has AVX512-BF16 or AMX (the line says so otherwise).
It prints the tables, then one JSON object per model and precision (lines starting with '{'). The
exit status is 0 when every run completed (whatever the ratios); non-zero only when something failed
to run or a PyTorch network does not have the parameter count Towerbench reports.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench_common import (DEFAULT_STEPS, EXPECTED_PARAMS, REPO, add_common_args, bench_pytorch, bench_towerbench,
                          gemm_peak, gemm_peak_binary, machine_line, parse_steps_overrides, prepare_model,
                          print_table, report, spec_stats, steps_for)

DEFAULT_MODELS = ["mlp", "mnist_cnn", "cifar10_cnn"]
FP32_GOAL = {"mlp": 1.25}           # against PyTorch's best fp32; 1.5 for the others
BF16_OVER_FP32_GOAL = {"mlp": None}  # Towerbench bf16 / fp32; 1.5 for the CNNs, none for mlp
BF16_GOAL = 1.25                    # against PyTorch's best autocast, every model


def onednn_kernels(binary, model, data, precision, threads, workdir):
    """The kernels oneDNN runs for the model's convolutions and inner products ("convolution
    brgconv:avx512_core_bf16 forward_training", ...), from a 2-step run with ONEDNN_VERBOSE=1."""
    folder = os.path.join(workdir, "kernels")
    cmd = [binary, "--model", model, "--data", data, "--batch", "16", "--steps", "2", "--threads", str(threads),
           "--validation", "0", "--quiet", "--precision", precision, "--run-dir", folder]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=dict(os.environ, ONEDNN_VERBOSE="1"))
    shutil.rmtree(folder, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}: {proc.stderr.strip()[-500:]}")
    kernels = set()
    for line in proc.stdout.splitlines():
        f = line.split(",")
        if len(f) > 5 and f[:2] == ["onednn_verbose", "exec"] and f[3] in ("convolution", "inner_product", "matmul"):
            kernels.add(f"{f[3]} {f[4]} {f[5]}")
    return sorted(kernels)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", required=True, help="path of towerbench-run")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="Towerbench's threads (default: all cores)")
    ap.add_argument("--pytorch-threads", default=None,
                    help="PyTorch's thread counts to try, its best compared (default: 1 and --threads)")
    ap.add_argument("--precisions", default="fp32,bf16", help="fp32, bf16 or both (bf16 where the processor has it)")
    ap.add_argument("--batch", type=int, default=128)
    add_common_args(ap, DEFAULT_STEPS, DEFAULT_MODELS, REPO)
    ap.add_argument("--gemm-peak-binary", default=None, help="path of tb_gemm_peak (default: beside the binary's build)")
    ap.add_argument("--pytorch-formats", default="nchw,channels_last",
                    help="PyTorch's memory formats to try, its best compared (default both)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating rounds of every run; medians and the median per-round ratio (default 3)")
    args = ap.parse_args()

    import torch  # Debian's python3-torch; imported here so --help works without it

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    if not precisions or any(p not in ("fp32", "bf16") for p in precisions):
        ap.error(f"--precisions: {args.precisions!r} is not a list of fp32 and bf16")
    pt_threads = sorted({int(t) for t in (args.pytorch_threads or f"1,{args.threads}").split(",")})
    # PyTorch's configurations: each thread count, with its default (n, c, h, w) memory and with
    # channels_last (n, h, w, c), where oneDNN's convolutions may run faster; its best is compared.
    formats = [f.strip() for f in args.pytorch_formats.split(",") if f.strip()]
    if any(f not in ("nchw", "channels_last") for f in formats) or not formats:
        ap.error(f"--pytorch-formats: {args.pytorch_formats!r} is not a list of nchw and channels_last")
    configs = [f"{t}" + (" cl" if f == "channels_last" else "") for t in pt_threads for f in formats]
    overrides = parse_steps_overrides(args.model_steps)
    binary = os.path.abspath(args.binary)
    failures = []

    peak = None
    try:
        peak = gemm_peak(os.path.abspath(args.gemm_peak_binary or gemm_peak_binary(binary)), args.threads)
    except Exception as e:  # noqa: BLE001 - reported, then the rest still runs
        failures.append(f"gemm peak: {e}")
    if "bf16" in precisions and peak and peak.get("bf16_missing"):
        print(f"# bf16 not run: {peak['bf16_missing']}")
        precisions.remove("bf16")

    print(f"# {machine_line(peak)}")
    print(f"# threads {args.threads} (PyTorch: best of {', '.join(c + ' threads' for c in configs)}; cl: channels_last); batch {args.batch}; "
          f"warm-up {args.warmup} steps; load average before: {os.getloadavg()[0]:.2f} "
          "(anything else running skews every number)")
    print(f"# pytorch {torch.__version__} ({torch.__config__.parallel_info().splitlines()[-1].strip()}); "
          f"towerbench {binary}")
    print("# PyTorch trains on one pre-made random batch (no input pipeline); Towerbench's timing "
          "includes its input pipeline on the same cores.", flush=True)

    results = []
    autocast = {"fp32": None, "bf16": torch.bfloat16}
    with tempfile.TemporaryDirectory(prefix="tb_bench_") as tmp:
        cifar_dir = args.cifar_dir
        for name in models:
            steps = steps_for(name, args.steps, overrides)
            rows = {p: {"model": name, "precision": p, "batch": args.batch, "steps": steps, "warmup": args.warmup,
                        "threads": args.threads, "rounds": args.rounds} for p in precisions}
            try:
                spec, data, cifar_dir = prepare_model(args.models_dir, name, tmp, cifar_dir)
                spec_params, flops = spec_stats(spec)
                tb_eps = {p: [] for p in precisions}
                pt_eps = {p: {t: [] for t in configs} for p in precisions}
                for _ in range(args.rounds):
                    for precision in precisions:
                        row = rows[precision]
                        tb = bench_towerbench(binary, name, data, args.batch, steps, args.warmup, args.threads, tmp,
                                              extra_args=("--precision", precision), tag=precision)
                        s = tb["summary"]
                        tb_eps[precision].append(tb["examples_per_sec"])
                        row.update(data=data, backend=s.get("backend"), flops_per_example=s.get("flops_per_example", flops),
                                   towerbench_params=s.get("params"))
                        for t in configs:
                            r = bench_pytorch(spec, args.batch, steps, args.warmup, int(t.split()[0]), args.lr, torch,
                                              autocast=autocast[precision], channels_last=t.endswith(" cl"))
                            pt_eps[precision][t].append(r["examples_per_sec"])
                            # The two networks must be the same size, or the comparison means nothing.
                            expected = EXPECTED_PARAMS.get(name, s.get("params"))
                            assert r["params"] == expected == s.get("params") == spec_params, (
                                f"parameter counts differ: pytorch {r['params']}, towerbench {s.get('params')}, "
                                f"model json {spec_params}, expected {expected}")
                for precision in precisions:
                    row = rows[precision]
                    pt_median = {t: statistics.median(v) for t, v in pt_eps[precision].items()}
                    best = max(pt_median, key=pt_median.get)
                    # Each round's Towerbench against that round's best PyTorch, seconds apart.
                    per_round = [tb_eps[precision][i] / max(pt_eps[precision][t][i] for t in configs)
                                 for i in range(args.rounds)]
                    eps = statistics.median(tb_eps[precision])
                    ratio = statistics.median(per_round)
                    goal = FP32_GOAL.get(name, 1.5) if precision == "fp32" else BF16_GOAL
                    gflops = eps * row["flops_per_example"] / 1e9
                    ceiling = (peak or {}).get("gemm_gflops" if precision == "fp32" else "bf16_gemm_gflops")
                    row.update(towerbench_examples_per_sec=eps, towerbench_rounds_examples_per_sec=tb_eps[precision],
                               pytorch_examples_per_sec={str(t): v for t, v in pt_median.items()},
                               pytorch_rounds_examples_per_sec={str(t): v for t, v in pt_eps[precision].items()},
                               pytorch_best_threads=best, pytorch_best_examples_per_sec=pt_median[best],
                               ratio=ratio, ratios_per_round=per_round, goal_ratio=goal, goal_met=ratio >= goal,
                               towerbench_gflops=gflops, gemm_peak_gflops=ceiling,
                               percent_of_gemm_peak=100.0 * gflops / ceiling if ceiling else None,
                               kernels=onednn_kernels(binary, name, data, precision, args.threads, tmp))
                if "fp32" in tb_eps and "bf16" in tb_eps:
                    rows["bf16"]["bf16_over_fp32_per_round"] = [b / f for b, f in zip(tb_eps["bf16"], tb_eps["fp32"])]
            except Exception as e:  # noqa: BLE001 - one model failing must not hide the others
                for precision in precisions:
                    rows[precision]["error"] = f"{type(e).__name__}: {e}"
                failures.append(f"{name}: {type(e).__name__}: {e}")
            results += [rows[p] for p in precisions]

    header = ["model", "precision", "towerbench ex/s"] + [f"pytorch {t} thr" for t in configs] + \
             ["tb / best pt", "goal", "towerbench GFLOP/s", "% of peak"]
    table = []
    for r in results:
        if "error" in r:
            table.append([r["model"], r["precision"], "error"] + [""] * (len(header) - 3))
            continue
        pct = f"{r['percent_of_gemm_peak']:.1f}%" if r["percent_of_gemm_peak"] is not None else "n/a"
        table.append([r["model"], r["precision"], f"{r['towerbench_examples_per_sec']:.0f}"] +
                     [f"{r['pytorch_examples_per_sec'][str(t)]:.0f}" for t in configs] +
                     [f"{r['ratio']:.2f}", f"{r['goal_ratio']}x {'met' if r['goal_met'] else 'NOT met'}",
                      f"{r['towerbench_gflops']:.1f}", pct])
    print()
    print_table(header, table)
    by = {(r["model"], r["precision"]): r for r in results if "error" not in r}
    rows = []
    for name in models:
        if (name, "fp32") in by and (name, "bf16") in by:
            gain = statistics.median(by[name, "bf16"]["bf16_over_fp32_per_round"])  # runs seconds apart
            goal = BF16_OVER_FP32_GOAL.get(name, 1.5)
            by[name, "bf16"].update(bf16_over_fp32=gain, bf16_over_fp32_goal=goal)
            rows.append([name, f"{gain:.2f}", f"{goal}x {'met' if gain >= goal else 'NOT met'}" if goal else "none"])
    if rows:
        print()
        print_table(["model", "towerbench bf16 / fp32 (median of rounds)", "goal"], rows)
    print()
    for r in results:
        if r.get("kernels"):
            print(f"# oneDNN kernels, {r['model']} {r['precision']}: {'; '.join(r['kernels'])}")
    if any((r.get("percent_of_gemm_peak") or 0) > 100 for r in results):
        print("# WARNING: above 100% of the GEMM peak: the peak was measured while the cores were busy; "
              "rerun on an idle machine")
    return report(results, failures)


if __name__ == "__main__":
    sys.exit(main())
