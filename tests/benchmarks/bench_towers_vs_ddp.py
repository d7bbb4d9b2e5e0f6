#!/usr/bin/python3
"""Data-parallel CPU training: Towerbench's CPU towers against PyTorch DistributedDataParallel (gloo).

Run with Debian's interpreter, which has python3-torch (1.13):

    /usr/bin/python3 tests/benchmarks/bench_towers_vs_ddp.py --binary build/app/towerbench-run \
        [--models mnist_cnn,cifar10_cnn] [--towers 1,2,4] [--threads 2] [--steps N] [--warmup N]

For each model, with one global batch (default 128) and one thread budget T (default 2) it
  1. runs towerbench-run with 1, 2 and 4 virtual CPU towers (--towers cpu:0 / cpu:0,cpu:1 /
     cpu:0,...,cpu:3; --batch is the global batch, split evenly; each tower gets max(1, T/N) compute
     threads, so 4 towers on T=2 oversubscribe: 4 threads), for warmup+steps steps, and measures
     examples/sec over the last `steps` steps from the metrics file's elapsed_s, as
     bench_cpu_vs_pytorch.py does. Scaling efficiency = ex/s(N towers) / ex/s(1 tower). Every run
     uses the same T threads on the same cores, so the ideal is 1.00x, not N x;
  2. runs the same network in PyTorch DistributedDataParallel, backend gloo: P processes (default 2)
     x T/P threads each (torch.set_num_threads), batch/P examples per process, started with
     torch.multiprocessing.spawn, rendezvous at 127.0.0.1 on a free local port. Each process trains on
     one pre-made random batch (no input pipeline): `warmup` untimed steps, a barrier, `steps` timed
     steps, a barrier; rank 0 reports global examples/sec = steps x batch / seconds. A single-process
     PyTorch run with T threads is the reference for DDP's scaling efficiency.
  3. runs towerbench-run as P processes through mpirun (--mpi-procs, default 2 where mpirun is
     installed; shared memory and loopback only: --mca btl self,vader), each one tower with T/P
     threads on its slice of the same global batch, the processes meeting over MPI;
It prints one table per model, the line "2 CPU towers vs PyTorch DDP gloo 2x1: ratio X (goal >= 1.25)"
and "2 processes (mpirun) vs PyTorch DDP gloo 2x1: ratio X (goal >= 1.25)",
then one JSON object per run and per comparison (lines starting with '{'). The exit status is 0 when
every run completed (whatever the ratios); non-zero only when something failed to run or a PyTorch
network does not have the parameter count Towerbench reports.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import socket
import sys
import tempfile
from contextlib import contextmanager

from bench_common import (DEFAULT_STEPS, EXPECTED_PARAMS, GOAL_RATIO, REPO, add_common_args, bench_pytorch, prepare_model, report, bench_towerbench,
                          make_torch_step, parse_steps_overrides,
                          print_table, spec_stats, steps_for, time_steps, machine_line, machine_peak)

DEFAULT_MODELS = ["mnist_cnn", "cifar10_cnn"]
DEFAULT_TOWERS = [1, 2, 4]
COMPARE_TOWERS = 2  # the tower count compared against DDP (with the default 2 DDP processes)


# ----------------------------------------------------------------------------------------------
# Towerbench towers.

def tower_list(n):
    return ",".join(f"cpu:{i}" for i in range(n))


def timed_tower_busy(step_records, warmup, steps):
    """Per-tower busy fraction over the timed steps only, from a per-step "towers" array when the
    metrics file has one whose entries carry a busy fraction; None otherwise (then the summary's
    whole-run tower_busy is reported)."""
    timed = [step_records.get(s) for s in range(warmup + 1, warmup + steps + 1)]
    if not timed or any(r is None or not isinstance(r.get("towers"), list) or not r["towers"] for r in timed):
        return None
    sums = None
    for r in timed:
        values = []
        for t in r["towers"]:
            v = t.get("busy_fraction", t.get("busy")) if isinstance(t, dict) else None
            if not isinstance(v, (int, float)):
                return None
            values.append(float(v))
        if sums is None:
            sums = [0.0] * len(values)
        if len(values) != len(sums):
            return None
        sums = [a + b for a, b in zip(sums, values)]
    return [s / len(timed) for s in sums]


# Open MPI refuses root unless told; set for this benchmark's own runs only.
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_btl": "self,vader"}


def bench_towers(binary, model, data, batch, n, steps, warmup, threads, workdir, processes=0):
    launcher, towers = (), tower_list(n)
    if processes:  # n towers in each of `processes` processes, `threads` each
        launcher = ("mpirun", "--bind-to", "none", "-np", str(processes))
    tb = bench_towerbench(binary, model, data, batch, steps, warmup, threads, workdir,
                          extra_args=["--towers", towers], tag=f"{n}towers{processes}procs", launcher=launcher)
    s = tb["summary"]
    busy = timed_tower_busy(tb["step_records"], warmup, steps)
    return {"examples_per_sec": tb["examples_per_sec"], "seconds": tb["seconds"],
            "examples_per_sec_all_steps": s.get("examples_per_sec"),
            "steady_examples_per_sec": s.get("steady_examples_per_sec"),
            "tower_busy": busy if busy is not None else s.get("tower_busy"),
            "tower_busy_window": "timed steps" if busy is not None else "whole run",
            "reduce_apply_fraction": s.get("reduce_apply_fraction"),
            "tower_devices": s.get("towers"), "backend": s.get("backend"), "plan": s.get("plan"),
            "params": s.get("params"), "flops_per_example": s.get("flops_per_example"),
            "command": " ".join(tb["command"])}


# ----------------------------------------------------------------------------------------------
# PyTorch DistributedDataParallel (gloo) on one machine.

def free_local_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def environment(**values):
    """Sets environment variables for the spawned processes, then restores the parent's."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update({k: str(v) for k, v in values.items()})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _ddp_worker(rank, world, spec, batch_per_proc, steps, warmup, threads, lr, result_path, channels_last):
    """One DDP process (a top-level function so that torch.multiprocessing.spawn can start it)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(minutes=10))
    try:
        torch.manual_seed(1)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)
        step, params = make_torch_step(spec, batch_per_proc, lr, torch, wrap=DistributedDataParallel,
                                       data_seed=1000 + rank,  # each rank its own random batch
                                       channels_last=channels_last)
        seconds = time_steps(step, steps, warmup, sync=dist.barrier)
        if rank == 0:
            with open(result_path, "w") as f:
                json.dump({"seconds": seconds, "params": params, "rank0_torch_threads": torch.get_num_threads()}, f)
    finally:
        dist.destroy_process_group()


def bench_ddp(spec, batch, procs, steps, warmup, threads, lr, workdir, tag, channels_last=False):
    import torch.multiprocessing as mp

    if batch % procs:
        raise ValueError(f"--batch {batch} does not split evenly over {procs} DDP processes")
    result_path = os.path.join(workdir, f"ddp_{tag}.json")
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": free_local_port(),
           # one thread per process, whatever the libraries read at start-up
           "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    if os.path.isdir("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's own connections on loopback too, not the host's address
    with environment(**env):
        mp.spawn(_ddp_worker, args=(procs, spec, batch // procs, steps, warmup, threads, lr, result_path, channels_last),
                 nprocs=procs, join=True)
    with open(result_path) as f:
        r = json.load(f)
    r["examples_per_sec"] = steps * batch / r["seconds"]
    return r


# ----------------------------------------------------------------------------------------------

def plural(n):
    return "s" if n != 1 else ""


def fmt_busy(busy):
    return "/".join(f"{b:.2f}" for b in busy) if busy else "n/a"


def fmt_pct(x):
    return f"{100.0 * x:.1f}%" if isinstance(x, (int, float)) else "n/a"


def fmt_eff(x):
    return f"{x:.2f}x" if isinstance(x, (int, float)) else "n/a"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", required=True, help="path of towerbench-run")
    ap.add_argument("--threads", type=int, default=2,
                    help="compute threads of every run, split over the towers / DDP processes (default 2)")
    ap.add_argument("--batch", type=int, default=128, help="global batch, split over towers / processes")
    ap.add_argument("--towers", default=",".join(map(str, DEFAULT_TOWERS)),
                    help="tower counts to run; the first is the scaling baseline (default 1,2,4)")
    ap.add_argument("--ddp-procs", type=int, default=2, help="PyTorch DDP processes (default 2)")
    ap.add_argument("--mpi-procs", type=int, default=2 if shutil.which("mpirun") else 0,
                    help="towerbench processes through mpirun, one tower each (default 2; 0: none)")
    add_common_args(ap, DEFAULT_STEPS, DEFAULT_MODELS, REPO)
    ap.add_argument("--no-pytorch-single", action="store_true",
                    help="skip the single-process PyTorch reference (DDP's scaling efficiency then reads n/a)")
    args = ap.parse_args()

    import torch  # Debian's python3-torch; imported here so --help works without it
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        print("FAILED: this PyTorch has no torch.distributed gloo backend", file=sys.stderr)
        return 1

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    tower_counts = [int(t) for t in args.towers.split(",") if t.strip()]
    overrides = parse_steps_overrides(args.model_steps)
    binary = os.path.abspath(args.binary)
    procs = args.ddp_procs
    ddp_threads = max(1, args.threads // procs)
    cores = os.cpu_count()
    base_n = tower_counts[0]
    failures = []

    print(f"# {machine_line(machine_peak(binary, args.threads))}")
    print(f"# threads {args.threads} in every run; global batch {args.batch}; warm-up {args.warmup} steps; "
          f"load average before: {os.getloadavg()[0]:.2f} (anything else running skews every number)")
    print(f"# pytorch {torch.__version__} ({torch.__config__.parallel_info().splitlines()[-1].strip()}); "
          f"towerbench {binary}")
    print(f"# scaling eff. = ex/s with N towers / ex/s with {base_n} tower{plural(base_n)} ({args.threads} threads). Every "
          f"towerbench run uses the same {args.threads} threads on the same {cores} cores (N towers x "
          f"max(1, {args.threads}/N) threads; more towers than threads oversubscribe), so the ideal is 1.00x "
          f"for every N, not N x.")
    print(f"# PyTorch DDP: {procs} processes x {ddp_threads} thread{plural(ddp_threads)}, gloo over 127.0.0.1, "
          f"{args.batch // procs if procs else 0} examples per process, one pre-made random batch (no input "
          f"pipeline); its scaling eff. is against one PyTorch process with {args.threads} threads. "
          f"Towerbench's timing includes its input pipeline on the same cores.", flush=True)

    results = []      # one JSON object per run
    comparisons = []  # one per model
    with tempfile.TemporaryDirectory(prefix="tb_bench_towers_") as tmp:
        cifar_dir = args.cifar_dir
        for name in models:
            steps = steps_for(name, args.steps, overrides)
            common = {"model": name, "batch": args.batch, "steps": steps, "warmup": args.warmup,
                      "threads": args.threads}
            rows = []
            try:
                spec, data, cifar_dir = prepare_model(args.models_dir, name, tmp, cifar_dir)
                spec_params, _ = spec_stats(spec)
            except Exception as e:  # noqa: BLE001 - one model failing must not hide the others
                err = f"{type(e).__name__}: {e}"
                failures.append(f"{name}: {err}")
                results.append(dict(common, error=err))
                continue

            tb_params = None
            for n in tower_counts:
                tpt = max(1, args.threads // n)
                row = dict(common, config=f"towerbench {n} tower{plural(n)} x {tpt} thread{plural(tpt)}",
                           kind="towerbench", tower_count=n, threads_per_tower=tpt, data=data)
                try:
                    row.update(bench_towers(binary, name, data, args.batch, n, steps, args.warmup, args.threads, tmp))
                    tb_params = row.get("params")
                except Exception as e:  # noqa: BLE001
                    row["error"] = f"{type(e).__name__}: {e}"
                    failures.append(f"{name} {n} towers: {row['error']}")
                rows.append(row)

            if args.mpi_procs:
                os.environ.update(MPI_ENV)
                mt = max(1, args.threads // args.mpi_procs)
                row = dict(common, config=f"towerbench mpirun {args.mpi_procs} processes x 1 tower x {mt} thread{plural(mt)}",
                           kind="towerbench_mpi", processes=args.mpi_procs, threads_per_process=mt, data=data)
                try:
                    row.update(bench_towers(binary, name, data, args.batch, 1, steps, args.warmup, mt, tmp,
                                            processes=args.mpi_procs))
                except Exception as e:  # noqa: BLE001
                    row["error"] = f"{type(e).__name__}: {e}"
                    failures.append(f"{name} mpirun: {row['error']}")
                rows.append(row)

            expected = EXPECTED_PARAMS.get(name, tb_params if tb_params is not None else spec_params)
            # PyTorch in each memory format ((n, c, h, w), and channels_last where it has images): its
            # best is compared.
            formats = [False, True] if len(spec["input"]) == 3 and spec["input"][1] > 1 else [False]
            for cl in formats:
                suffix = ", channels_last" if cl else ""
                if not args.no_pytorch_single:
                    row = dict(common, config=f"pytorch 1 process x {args.threads} thread{plural(args.threads)}{suffix}",
                               kind="pytorch", processes=1, threads_per_process=args.threads, channels_last=cl)
                    try:
                        row.update(bench_pytorch(spec, args.batch, steps, args.warmup, args.threads, args.lr, torch,
                                                 channels_last=cl))
                        assert row["params"] == expected == spec_params, (
                            f"parameter counts differ: pytorch {row['params']}, model json {spec_params}, "
                            f"expected {expected}")
                    except Exception as e:  # noqa: BLE001
                        row["error"] = f"{type(e).__name__}: {e}"
                        failures.append(f"{name} pytorch: {row['error']}")
                    rows.append(row)

                row = dict(common, config=f"pytorch DDP gloo {procs} x {ddp_threads} thread{plural(ddp_threads)}{suffix}",
                           kind="pytorch_ddp", processes=procs, threads_per_process=ddp_threads,
                           batch_per_process=args.batch // procs if procs else None, channels_last=cl)
                try:
                    row.update(bench_ddp(spec, args.batch, procs, steps, args.warmup, ddp_threads, args.lr, tmp,
                                         name + suffix.replace(", ", "_"), channels_last=cl))
                    assert row["params"] == expected == spec_params, (
                        f"parameter counts differ: pytorch DDP {row['params']}, model json {spec_params}, "
                        f"expected {expected}")
                except Exception as e:  # noqa: BLE001
                    row["error"] = f"{type(e).__name__}: {e}"
                    failures.append(f"{name} DDP: {row['error']}")
                rows.append(row)

            if tb_params is not None and tb_params != expected:
                failures.append(f"{name}: towerbench reports {tb_params} parameters, expected {expected}")

            # Scaling efficiencies: towers against the first tower count, DDP against one PyTorch process.
            def eps(kind, **match):
                found = []
                for r in rows:
                    if r.get("kind") == kind and "error" not in r and all(r.get(k) == v for k, v in match.items()):
                        found.append(r["examples_per_sec"])
                return max(found) if found else None  # (PyTorch: its best memory format)

            tb_base = eps("towerbench", tower_count=base_n)
            pt_base = eps("pytorch")
            for r in rows:
                if "error" in r:
                    continue
                base = tb_base if r["kind"] in ("towerbench", "towerbench_mpi") else pt_base if r["kind"] == "pytorch_ddp" else None
                if r["kind"] == "pytorch":
                    base = r["examples_per_sec"]
                r["scaling_efficiency"] = r["examples_per_sec"] / base if base else None
                r["scaling_ideal"] = 1.0

            tb2, ddp = eps("towerbench", tower_count=COMPARE_TOWERS), eps("pytorch_ddp")
            comparison = dict(common, comparison=f"towerbench {COMPARE_TOWERS} CPU towers vs PyTorch DDP gloo "
                                                 f"{procs}x{ddp_threads}",
                              towerbench_examples_per_sec=tb2, ddp_examples_per_sec=ddp, goal_ratio=GOAL_RATIO)
            if tb2 and ddp:
                comparison.update(ratio=tb2 / ddp, goal_met=tb2 / ddp >= GOAL_RATIO)
            else:
                comparison.update(ratio=None, goal_met=None)
            comparisons.append(comparison)
            mpi = eps("towerbench_mpi")
            if args.mpi_procs:
                c2 = dict(common, comparison=f"towerbench {args.mpi_procs} processes (mpirun) vs PyTorch DDP gloo "
                                             f"{procs}x{ddp_threads}",
                          towerbench_examples_per_sec=mpi, ddp_examples_per_sec=ddp, goal_ratio=GOAL_RATIO)
                c2.update(ratio=mpi / ddp if mpi and ddp else None, goal_met=mpi / ddp >= GOAL_RATIO if mpi and ddp else None)
                comparisons.append(c2)

            header = ["config", "ex/s", "scaling eff.", "busy", "reduce+apply %"]
            table = []
            for r in rows:
                if "error" in r:
                    table.append([r["config"], "error", "", "", ""])
                    continue
                table.append([r["config"], f"{r['examples_per_sec']:.0f}", fmt_eff(r.get("scaling_efficiency")),
                              fmt_busy(r.get("tower_busy")), fmt_pct(r.get("reduce_apply_fraction"))])
            print()
            print(f"## {name} (global batch {args.batch}, {steps} timed steps after {args.warmup} warm-up; "
                  f"ideal scaling eff. 1.00x: same {args.threads} threads on {cores} cores)")
            print_table(header, table)
            ratio = f"{comparison['ratio']:.2f}" if comparison["ratio"] is not None else "n/a"
            print(f"{COMPARE_TOWERS} CPU towers vs PyTorch DDP gloo {procs}x{ddp_threads}: ratio {ratio} "
                  f"(goal >= {GOAL_RATIO})", flush=True)
            if args.mpi_procs:
                r2 = comparisons[-1]["ratio"]
                print(f"{args.mpi_procs} processes (mpirun) vs PyTorch DDP gloo {procs}x{ddp_threads}: ratio "
                      f"{r2:.2f} (goal >= {GOAL_RATIO})" if r2 else "mpirun vs DDP: n/a", flush=True)
            results.extend(rows)

    print()
    print("# busy: per-tower busy fraction (forward+backward+reduce+apply time / train time; from the summary, "
          "whole run including warm-up, unless the metrics file has per-step tower data); reduce+apply %: "
          "reduce+apply time of the slowest tower / step time")
    return report(results + comparisons, failures)


if __name__ == "__main__":
    sys.exit(main())
