#!/usr/bin/env python3
"""GPU training throughput: Towerbench's CUDA towers against PyTorch (eager and torch.compile) on one GPU.

Run on a machine with one NVIDIA GPU and a CUDA build of PyTorch:

    python3 tests/benchmarks/bench_gpu_vs_pytorch.py --binary build/app/towerbench-run \
        [--models mnist_cnn,cifar10_cnn,resnet20,resnet56] [--steps 100] [--warmup 20] [--repeats 3] [--no-compile]

For each model (batch 128, fp32 with TF32 off on both sides) it measures
  1. PyTorch eager on cuda:0: the network built from the same model JSON (bench_common), cross-entropy,
     SGD(lr 0.01, momentum 0.9, per-layer weight decay) on one pre-made batch on the GPU, cuDNN's
     autotuner on; `warmup` untimed steps, then `repeats` timings of `steps` steps, each between two
     torch.cuda.synchronize() calls; the median examples/sec;
  2. the same with torch.compile (default mode) in a subprocess that is killed after --compile-timeout
     seconds; a failure or timeout reads "n/a" with its reason and does not fail the script;
  3. towerbench-run with one GPU tower (--towers gpu:0 --variables gpu:0, momentum 0.9, lr 0.01) for
     warmup + repeats x steps steps; examples/sec over the timed steps from the metrics file; the
     summary's peak_device_bytes and model_bytes when present;
  4. two towers on the same GPU (--towers gpu:0*2, 64 examples each, global batch 128) against the
     one-tower run of 3.; overhead = 1 - ex/s(2 towers) / ex/s(1 tower);
  5. mixed precision (unless --no-bf16): PyTorch eager under torch.autocast("cuda", dtype=torch.bfloat16)
     and towerbench-run --precision bf16 (one tower), each beside its own fp32 of 1. and 3.: bf16 / fp32
     for both, and Towerbench bf16 / autocast (the CPU goals of issue 16, 1.5 and 1.25, shown for
     reference).
Then it runs towerbench-run for about --nvml-seconds of training while nvidia-smi samples the GPU every
250 ms, and compares the engine's mean NVML utilisation (the metrics file's "device" lines) with
nvidia-smi's over the same wall-clock seconds of training (goal: within 5 points).
It prints the machine, a throughput table, a two-tower table, the NVML line, then one JSON object per
record (lines starting with '{'). The exit status is 0 when everything ran (whatever the ratios);
non-zero only when something failed to run (torch.compile excepted), parameter counts disagree, or
the NVML comparison could not be made (e.g. no device lines).
"""
import argparse
import datetime
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from bench_common import (EXPECTED_PARAMS, REPO, bench_towerbench, cpu_model, load_spec, make_torch_step,
                          prepare_model, print_table, report, spec_stats, time_steps, machine_line, machine_peak)

DEFAULT_MODELS = ["mnist_cnn", "cifar10_cnn", "resnet20", "resnet56"]  # the ResNets: issue 34
GOAL_VS_EAGER = 1.5     # towerbench ex/s / PyTorch eager ex/s
GOAL_BF16_VS_FP32 = 1.5       # issue 16's CPU goals, printed beside the GPU's figures for reference
GOAL_BF16_VS_AUTOCAST = 1.25
# Issue 33's goals at batch 128, one tower, variables on the GPU (examples/sec), and the ratio to PyTorch's
# best configuration of the same precision (pytorch_gpu_baseline.py's file, --pytorch-baseline).
GOALS_EPS = {"mnist_cnn": {"fp32": 200_000, "bf16": 400_000}, "cifar10_cnn": {"fp32": 130_000, "bf16": 250_000}}
GOAL_VS_BEST = 1.5
NVML_GOAL_POINTS = 5.0  # |engine mean util - nvidia-smi mean util|, percentage points
NVML_MIN_HZ = 4.0       # the engine's promised device-sample rate
GPU_INDEX = 0           # the one GPU: cuda:0, towerbench's gpu:0, NVML / nvidia-smi index 0
DEVICE = f"cuda:{GPU_INDEX}"
SMI_PERIOD_MS = 250
SMI_FIELDS = "timestamp,utilization.gpu,memory.used"
SMI_TIME_FORMAT = "%Y/%m/%d %H:%M:%S.%f"  # nvidia-smi's timestamp column, local time
MNIST_SLICE = os.path.join(REPO, "samples", "fashion-mnist-slice")  # GPU machines lack Debian's package


# ----------------------------------------------------------------------------------------------
# PyTorch on the GPU (torch is passed in or imported inside functions, so --help works without it).

def setup_torch(torch):
    """Plain fp32 like Towerbench: TF32 off for cuDNN convolutions and cuBLAS matmuls (the legacy flags
    only; mixing them with the newer fp32_precision API is refused by some PyTorch versions), and cuDNN's
    autotuner on, so each convolution shape gets its fastest algorithm during warm-up."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True


def bench_torch_gpu(spec, args, torch, wrap=None, autocast=None, batch=None, device=DEVICE, fused=False):
    """One training setup on `device` (cuda:0; "cpu" only to try a script without a GPU): the first
    step timed alone (cuDNN autotuning, or compilation when wrap is torch.compile), `warmup` more untimed
    steps, then `repeats` timings of `steps` steps of `batch` (default args.batch); the median
    examples/sec, each repeat's, and on a GPU the peak memory PyTorch's allocator handed out. autocast
    (torch.bfloat16): the forward pass and the loss under torch.autocast with that type; fused: SGD's
    one-kernel update."""
    batch = batch or args.batch
    gpu = device.startswith("cuda")
    torch.manual_seed(1)
    if gpu:
        torch.zeros(1, device=device)  # a fresh process (a worker) must initialise CUDA first
        torch.cuda.reset_peak_memory_stats(device)
    step, params = make_torch_step(spec, batch, args.lr, torch, wrap=wrap, device=device, autocast=autocast,
                                   fused=fused)
    sync = torch.cuda.synchronize if gpu else None
    t0 = time.perf_counter()
    step()
    if sync:
        sync()
    first = time.perf_counter() - t0
    eps = [args.steps * batch / time_steps(step, args.steps, args.warmup if i == 0 else 0, sync=sync)
           for i in range(args.repeats)]
    out = {"params": params, "examples_per_sec": statistics.median(eps), "repeats_examples_per_sec": eps,
           "first_step_seconds": first}
    if gpu:
        out["peak_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
    return out


def compile_worker(args):
    """The body of the torch.compile subprocess: prints its result as one JSON line."""
    import torch

    setup_torch(torch)
    r = bench_torch_gpu(load_spec(args.models_dir, args.compile_worker), args, torch, wrap=torch.compile)
    print(json.dumps(r), flush=True)
    return 0


def run_worker(cmd, timeout, label):
    """A measuring subprocess (`cmd`), so that one that fails, hangs or crashes costs at most `timeout`
    seconds and never its caller; it prints its result as one JSON object with "examples_per_sec".
    Returns (result, None); (None, the reason it failed), the end of its stderr going to stderr under
    `label`; or (None, None) where it ran past `timeout` (the caller says why)."""
    # A session of its own: on timeout the whole group goes, inductor's compile workers included.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, None
    results = []
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                results.append(json.loads(line))
            except ValueError:
                pass  # a stray line that only looks like JSON
    if proc.returncode != 0 or not results or "examples_per_sec" not in results[-1]:
        lines = err.strip().splitlines() or ["no output"]
        # The whole traceback's end goes to the log (stderr); the reason keeps its last line.
        print(f"# {label} failed; the end of its stderr:", file=sys.stderr)
        for line in lines[-25:]:
            print(f"#   {line}", file=sys.stderr)
        return None, f"exit status {proc.returncode}: {lines[-1][:300]}"
    return results[-1], None


def bench_compile(name, args):
    """torch.compile of one model in a subprocess of this script (run_worker), at most --compile-timeout
    seconds. Returns (result, None) or (None, the reason it is n/a)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--compile-worker", name, "--models-dir", args.models_dir,
           "--batch", str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--repeats", str(args.repeats), "--lr", repr(args.lr)]
    res, why = run_worker(cmd, args.compile_timeout, f"torch.compile worker for {name}")
    if res is None and why is None:
        why = f"compilation and timing took longer than --compile-timeout {args.compile_timeout:g} s"
    return res, why


# ----------------------------------------------------------------------------------------------
# Towerbench on the GPU.

def towerbench_gpu_args(towers, lr):
    """The plan and optimizer of every GPU run: variables on the GPU, SGD momentum 0.9 as PyTorch's."""
    return ["--towers", towers, "--variables", f"gpu:{GPU_INDEX}", "--optimizer", "momentum",
            "--momentum", "0.9", "--lr", repr(lr)]


def run_towerbench(name, data, towers, tag, args, tmp, steps=None, timeout=None, precision="fp32"):
    """towerbench-run with `towers` (and --precision): warmup + (steps, default repeats x steps) steps;
    timed ex/s as bench_towerbench measures it (the timed steps equal PyTorch's repeats together).
    Killed after timeout seconds (default --run-timeout), so a hung run cannot eat the machine's time."""
    tb = bench_towerbench(args.binary, name, data, args.batch, steps or args.repeats * args.steps, args.warmup,
                          args.threads, tmp,
                          extra_args=towerbench_gpu_args(towers, args.lr) + ["--precision", precision], tag=tag,
                          timeout=timeout or args.run_timeout)
    s = tb["summary"]
    return {"examples_per_sec": tb["examples_per_sec"], "seconds": tb["seconds"], "params": s.get("params"),
            "backend": s.get("backend"), "peak_device_bytes": s.get("peak_device_bytes"),
            "model_bytes": s.get("model_bytes"), "tower_busy": s.get("tower_busy"),
            "reduce_apply_fraction": s.get("reduce_apply_fraction"), "command": " ".join(tb["command"]),
            "metrics": tb["metrics"]}


# ----------------------------------------------------------------------------------------------
# NVML (the engine's device lines) against nvidia-smi. Pure functions first: they are what can be
# checked without a GPU.

def parse_smi_csv(text):
    """nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits
    output -> [(unix seconds, util %, MiB used)]. The timestamp is local time, which datetime's
    timestamp() reads as local too, so it compares with time.time(). Lines that cannot be read (the
    last one when nvidia-smi is killed mid-write, [N/A] readings) are skipped."""
    samples = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        try:
            when = datetime.datetime.strptime(parts[0], SMI_TIME_FORMAT).timestamp()
            samples.append((when, float(parts[1]), float(parts[2])))
        except ValueError:
            continue
    return samples


def read_device_metrics(path):
    """(device lines of GPU_INDEX, elapsed_s of every step line) of a towerbench metrics file."""
    devices, elapsed = [], []
    with open(path) as f:
        for ln in f:
            rec = json.loads(ln)
            if rec.get("type") == "device" and rec.get("index") == GPU_INDEX:
                devices.append(rec)
            elif rec.get("type") == "step":
                elapsed.append(rec["elapsed_s"])
    return devices, elapsed


def compare_utilisation(devices, elapsed, smi, launch_wall, trim):
    """Mean GPU utilisation from the engine's device lines and from nvidia-smi over the same seconds of
    training. The window is [first step's elapsed_s + trim, last step's - trim] on the engine's clock
    (device "t" counts from training start, as elapsed_s does); trim drops the edges, where the two
    samplers, reading at different instants, straddle a change of load. The window is mapped to the
    wall clock with the device lines' time_unix (median of time_unix - t), or, for lines without it,
    with the wall time at which towerbench-run was started (then off by the run's set-up time).
    Returns a dict; its "error" says why no comparison was possible."""
    if not devices:
        return {"error": "no device lines in the metrics file"}
    if not elapsed:
        return {"error": "no step lines in the metrics file"}
    t0, t1 = min(elapsed) + trim, max(elapsed) - trim
    if t1 <= t0:
        return {"error": f"training lasted {max(elapsed) - min(elapsed):.2f} s, not more than 2 x trim ({trim:g} s)"}
    if all(isinstance(d.get("time_unix"), (int, float)) for d in devices):
        offset, alignment = statistics.median(d["time_unix"] - d["t"] for d in devices), "time_unix"
    else:
        offset, alignment = launch_wall, "launch time + t"
    engine = [d for d in devices if t0 <= d["t"] <= t1]
    engine_util = [d["util_gpu"] for d in engine if d.get("util_gpu") is not None]
    engine_mem = [d["mem_used_bytes"] / 2**20 for d in engine if d.get("mem_used_bytes") is not None]
    window = [s for s in smi if t0 + offset <= s[0] <= t1 + offset]
    r = {"window_s": t1 - t0, "trim_s": trim, "alignment": alignment, "engine_samples": len(engine_util),
         "engine_samples_per_sec": len(engine) / (t1 - t0), "smi_samples": len(window),
         "engine_util_mean": statistics.fmean(engine_util) if engine_util else None,
         "smi_util_mean": statistics.fmean(s[1] for s in window) if window else None,
         "engine_mem_used_mib_mean": statistics.fmean(engine_mem) if engine_mem else None,
         "smi_mem_used_mib_mean": statistics.fmean(s[2] for s in window) if window else None}
    if not engine_util:
        r["error"] = "no device line with util_gpu inside the training window"
    elif not window:
        r["error"] = "no nvidia-smi sample inside the training window"
    else:
        r["diff_points"] = abs(r["engine_util_mean"] - r["smi_util_mean"])
        r["goal_met"] = r["diff_points"] <= NVML_GOAL_POINTS
    return r


def wait_for_output(path, proc, seconds):
    """Waits until nvidia-smi has written its first sample, so the run's start is covered."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nvidia-smi exited with {proc.returncode} before its first sample")
        if os.path.getsize(path) > 0:
            return
        time.sleep(0.05)
    raise RuntimeError(f"nvidia-smi wrote nothing in {seconds} s")


def nvml_check(name, data, steps, args, tmp):
    """towerbench-run for `steps` timed steps (about --nvml-seconds) while nvidia-smi samples the GPU."""
    smi_log = os.path.join(tmp, "nvidia-smi.csv")
    cmd = ["nvidia-smi", "-i", str(GPU_INDEX), f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits",
           "-lms", str(SMI_PERIOD_MS)]
    with open(smi_log, "w") as log:
        smi = subprocess.Popen(cmd, stdout=log, stderr=subprocess.DEVNULL)
        try:
            wait_for_output(smi_log, smi, 10)
            launch = time.time()
            run = run_towerbench(name, data, f"gpu:{GPU_INDEX}", "nvml", args, tmp, steps=steps,
                                 timeout=args.run_timeout + args.nvml_seconds)
        finally:
            smi.terminate()
            try:
                smi.wait(timeout=5)
            except subprocess.TimeoutExpired:
                smi.kill()
                smi.wait()
    with open(smi_log) as f:
        smi_samples = parse_smi_csv(f.read())
    devices, elapsed = read_device_metrics(run["metrics"])
    r = compare_utilisation(devices, elapsed, smi_samples, launch, args.nvml_trim)
    r.update(kind="nvml", model=name, steps=steps, warmup=args.warmup, examples_per_sec=run["examples_per_sec"],
             device_lines=len(devices), smi_command=" ".join(cmd), command=run["command"])
    return r


# ----------------------------------------------------------------------------------------------
# One model's runs. Each records into its row and appends to failures; nothing here raises.

def pytorch_part(row, spec, expected, args, torch, failures):
    """PyTorch eager in this process, then torch.compile in a subprocess (n/a, not a failure, if it fails)."""
    name = row["model"]
    try:
        pt = bench_torch_gpu(spec, args, torch)
        torch.cuda.empty_cache()  # hand the memory back before towerbench and the compile process
        row.update(eager_examples_per_sec=pt["examples_per_sec"],
                   eager_repeats_examples_per_sec=pt["repeats_examples_per_sec"],
                   eager_first_step_seconds=pt["first_step_seconds"],
                   eager_peak_allocated_bytes=pt["peak_allocated_bytes"], pytorch_params=pt["params"])
        print(f"# {name}: pytorch eager {fmt_eps(pt['examples_per_sec'])} ex/s", flush=True)
        if pt["params"] != expected:
            failures.append(f"{name}: pytorch has {pt['params']} parameters, expected {expected}")
    except Exception as e:  # noqa: BLE001 - reported, then the rest still runs
        failures.append(f"{name} pytorch eager: {type(e).__name__}: {e}")
    if args.no_compile:
        row["compile_na_reason"] = "--no-compile"
        return
    print(f"# {name}: torch.compile (at most {args.compile_timeout:g} s) ...", flush=True)
    res, reason = bench_compile(name, args)
    if res is None:
        row["compile_na_reason"] = reason
        print(f"# {name}: torch.compile n/a: {reason}", flush=True)
        return
    row.update(compile_examples_per_sec=res["examples_per_sec"],
               compile_repeats_examples_per_sec=res["repeats_examples_per_sec"],
               compile_first_step_seconds=res["first_step_seconds"],
               compile_peak_allocated_bytes=res["peak_allocated_bytes"])
    print(f"# {name}: torch.compile {fmt_eps(res['examples_per_sec'])} ex/s (first step, compiling, "
          f"{res['first_step_seconds']:.1f} s)", flush=True)


def towerbench_part(row, pair, data, expected, args, tmp, failures):
    """One GPU tower (the throughput row and the pair's baseline), then two towers on the same GPU."""
    name = row["model"]
    try:
        one = run_towerbench(name, data, f"gpu:{GPU_INDEX}", "1gpu", args, tmp)
        row.update(towerbench_examples_per_sec=one["examples_per_sec"], towerbench_seconds=one["seconds"],
                   towerbench_params=one["params"], backend=one["backend"], peak_device_bytes=one["peak_device_bytes"],
                   model_bytes=one["model_bytes"], towerbench_command=one["command"])
        pair["one_tower_examples_per_sec"] = one["examples_per_sec"]
        print(f"# {name}: towerbench 1 tower {fmt_eps(one['examples_per_sec'])} ex/s", flush=True)
        if one["params"] != expected:
            failures.append(f"{name}: towerbench reports {one['params']} parameters, expected {expected}")
    except Exception as e:  # noqa: BLE001
        failures.append(f"{name} towerbench gpu:{GPU_INDEX}: {type(e).__name__}: {e}")
    try:
        two = run_towerbench(name, data, f"gpu:{GPU_INDEX}*2", "2gpu", args, tmp)
        pair.update(two_towers_examples_per_sec=two["examples_per_sec"], two_towers_busy=two["tower_busy"],
                    two_towers_reduce_apply_fraction=two["reduce_apply_fraction"],
                    two_towers_peak_device_bytes=two["peak_device_bytes"], two_towers_command=two["command"])
        print(f"# {name}: towerbench 2 towers {fmt_eps(two['examples_per_sec'])} ex/s", flush=True)
    except Exception as e:  # noqa: BLE001
        failures.append(f"{name} towerbench gpu:{GPU_INDEX}*2: {type(e).__name__}: {e}")
    two_vs_one = ratio(pair.get("two_towers_examples_per_sec"), pair.get("one_tower_examples_per_sec"))
    pair["overhead"] = 1 - two_vs_one if two_vs_one is not None else None


def bf16_part(prec, spec, data, expected, args, torch, tmp, failures):
    """PyTorch eager under bf16 autocast, then one Towerbench tower with --precision bf16."""
    name = prec["model"]
    if torch is not None:
        try:
            pt = bench_torch_gpu(spec, args, torch, autocast=torch.bfloat16)
            torch.cuda.empty_cache()
            prec.update(autocast_examples_per_sec=pt["examples_per_sec"],
                        autocast_repeats_examples_per_sec=pt["repeats_examples_per_sec"],
                        autocast_peak_allocated_bytes=pt["peak_allocated_bytes"])
            print(f"# {name}: pytorch eager bf16 autocast {fmt_eps(pt['examples_per_sec'])} ex/s", flush=True)
        except Exception as e:  # noqa: BLE001
            failures.append(f"{name} pytorch autocast bf16: {type(e).__name__}: {e}")
    if args.skip_towerbench:
        return
    try:
        r = run_towerbench(name, data, f"gpu:{GPU_INDEX}", "1gpu_bf16", args, tmp, precision="bf16")
        prec.update(towerbench_bf16_examples_per_sec=r["examples_per_sec"], bf16_backend=r["backend"],
                    bf16_peak_device_bytes=r["peak_device_bytes"], bf16_command=r["command"])
        print(f"# {name}: towerbench 1 tower bf16 {fmt_eps(r['examples_per_sec'])} ex/s", flush=True)
        if r["params"] != expected:
            failures.append(f"{name}: towerbench bf16 reports {r['params']} parameters, expected {expected}")
        if "bf16" not in (r["backend"] or ""):
            failures.append(f"{name}: the bf16 run's backend does not say bf16: {r['backend']}")
    except Exception as e:  # noqa: BLE001
        failures.append(f"{name} towerbench gpu:{GPU_INDEX} bf16: {type(e).__name__}: {e}")


def nvml_part(measured, cifar_dir, args, tmp, failures):
    """The NVML vs nvidia-smi run of --nvml-model, sized from its measured ex/s (a short run measures it
    when the model was not in --models or its run failed). Returns its record."""
    name = args.nvml_model
    try:
        data, eps = measured.get(name, (None, None))
        if data is None:
            _, data, _ = prepare_model(args.models_dir, name, tmp, cifar_dir, mnist_data=args.mnist_data)
        if eps is None:
            eps = run_towerbench(name, data, f"gpu:{GPU_INDEX}", "calibrate", args, tmp)["examples_per_sec"]
        steps = max(50, math.ceil(args.nvml_seconds * eps / args.batch))
        r = nvml_check(name, data, steps, args, tmp)
    except Exception as e:  # noqa: BLE001
        r = {"kind": "nvml", "model": name, "error": f"{type(e).__name__}: {e}"}
    if "error" in r:
        failures.append(f"NVML vs nvidia-smi: {r['error']}")
    return r


# ----------------------------------------------------------------------------------------------
# The machine.

def smi_query(fields):
    """One nvidia-smi --query-gpu row for GPU_INDEX as a dict, or {} where nvidia-smi is absent or fails."""
    try:
        proc = subprocess.run(["nvidia-smi", "-i", str(GPU_INDEX), f"--query-gpu={fields}",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if proc.returncode != 0 or not proc.stdout.strip():
        return {}
    return dict(zip(fields.split(","), (v.strip() for v in proc.stdout.strip().splitlines()[0].split(","))))


def machine_info(torch):
    smi = smi_query("name,driver_version,memory.total,compute_cap")
    info = {"kind": "machine", "cpu": cpu_model(), "cpu_cores": os.cpu_count(),
            "gpu": smi.get("name", "n/a"), "capability": smi.get("compute_cap", "n/a"),
            "driver": smi.get("driver_version", "n/a"), "gpu_memory_mib": smi.get("memory.total", "n/a"),
            "torch": "n/a", "torch_cuda": "n/a", "cudnn": "n/a"}
    if torch is not None:
        major, minor = torch.cuda.get_device_capability(GPU_INDEX)
        info.update(gpu=torch.cuda.get_device_name(GPU_INDEX), capability=f"{major}.{minor}",
                    torch=torch.__version__, torch_cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                    cudnn_allow_tf32=torch.backends.cudnn.allow_tf32,
                    matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32,
                    cudnn_benchmark=torch.backends.cudnn.benchmark)
    return info


# ----------------------------------------------------------------------------------------------
# Output.

def fmt_eps(x):
    return f"{x:,.0f}" if isinstance(x, (int, float)) else "n/a"


def ratio(num, den):
    """num / den, or None when either is missing (a run that failed or was skipped)."""
    return num / den if isinstance(num, (int, float)) and isinstance(den, (int, float)) and den > 0 else None


def fmt_ratio(x, goal=None):
    if x is None:
        return "n/a"
    return f"{x:.2f}" + ("" if goal is None else " (met)" if x >= goal else " (not met)")


def fmt_bytes(v):
    """Bytes as MiB; a dict (model_bytes' breakdown) as 'key MiB, ...'; anything else n/a."""
    if isinstance(v, dict):
        return ", ".join(f"{k} {fmt_bytes(x)}" for k, x in v.items()) or "n/a"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{v / 2**20:.1f} MiB"
    return "n/a"


def nvml_line(r):
    if r is None:
        return "NVML vs nvidia-smi: not run"
    if "diff_points" not in r:  # every record without a comparison says why in "error"
        return f"NVML vs nvidia-smi ({r['model']}): FAILED ({r['error']})"
    return (f"NVML vs nvidia-smi ({r['model']}, {r['window_s']:.1f} s of training, aligned by {r['alignment']}): "
            f"engine {r['engine_util_mean']:.1f}% ({r['engine_samples']} samples, "
            f"{r['engine_samples_per_sec']:.1f}/s, goal >= {NVML_MIN_HZ:g}/s) vs nvidia-smi {r['smi_util_mean']:.1f}% "
            f"({r['smi_samples']} samples): difference {r['diff_points']:.1f} points "
            f"(goal <= {NVML_GOAL_POINTS:g}): {'met' if r['goal_met'] else 'not met'}")


def goals_against(baseline, machine, throughput, precision, batch, failures):
    """Issue 33's goal rows: per model and precision, Towerbench's ex/s against PyTorch's best of the same
    precision and batch from the baseline file (its mode named), and the absolute goal at batch 128."""
    import pytorch_gpu_baseline

    doc = pytorch_gpu_baseline.read_file(baseline)
    if doc is None:
        failures.append(f"--pytorch-baseline {baseline}: no such file")
        return []
    kept = doc["machine"]
    for k in ("gpu", "driver"):
        if machine.get(k) not in ("n/a", kept.get(k)):
            failures.append(f"--pytorch-baseline {baseline} was measured with {k} {kept.get(k)}, this machine has "
                            f"{machine.get(k)}: measure PyTorch here (pytorch_gpu_baseline.py)")
            return []
    ours = {(r["model"], "fp32"): r.get("towerbench_examples_per_sec") for r in throughput}
    ours.update({(p["model"], "bf16"): p.get("towerbench_bf16_examples_per_sec") for p in precision})
    rows = []
    for (model, prec), eps in ours.items():
        b = pytorch_gpu_baseline.best(doc, model, prec, batch)
        missing = pytorch_gpu_baseline.missing_modes(doc, model, prec, batch)
        goal = GOALS_EPS.get(model, {}).get(prec) if batch == 128 else None
        r = ratio(eps, b[0] if b else None)
        # Against fewer than all of PyTorch's modes the ratio is shown but no goal is called met.
        rows.append({"kind": "goal", "model": model, "precision": prec, "batch": batch, "towerbench_examples_per_sec": eps,
                     "pytorch_best_examples_per_sec": b[0] if b else None, "pytorch_best_mode": b[1] if b else None,
                     "pytorch_modes_missing": missing, "pytorch_torch": kept.get("torch"), "ratio_vs_best": r,
                     "goal_vs_best": GOAL_VS_BEST, "goal_examples_per_sec": goal,
                     "goal_met": None if r is None or missing
                     else r >= GOAL_VS_BEST and (goal is None or (eps or 0) >= goal)})
    return rows


def print_goals(goals):
    if not goals:
        return
    print()
    print_table(["model", "precision", "batch", "towerbench ex/s", "PyTorch's best ex/s (mode)",
                 f"ratio (goal >= {GOAL_VS_BEST})", "goal ex/s (batch 128)", "met"],
                [[g["model"], g["precision"], str(g["batch"]), fmt_eps(g["towerbench_examples_per_sec"]),
                  f"{fmt_eps(g['pytorch_best_examples_per_sec'])} ({g['pytorch_best_mode'] or 'none'})",
                  fmt_ratio(g["ratio_vs_best"], GOAL_VS_BEST) if not g["pytorch_modes_missing"]
                  else fmt_ratio(g["ratio_vs_best"]), fmt_eps(g["goal_examples_per_sec"]),
                  {True: "yes", False: "no", None: "n/a"}[g["goal_met"]] if not g["pytorch_modes_missing"]
                  else "incomplete: no " + ", ".join(g["pytorch_modes_missing"])] for g in goals])
    print(f"# PyTorch {goals[0]['pytorch_torch']}'s best of eager, reduce-overhead and max-autotune as kept in the "
          "baseline file (pytorch_gpu_baseline.py --report shows every mode)")


def print_results(throughput, towers, precision, nvml):
    """The throughput table with the memory lines, the two-tower table, the bf16 table, the NVML line."""
    print()
    print_table(["model", "pytorch eager ex/s", "torch.compile ex/s", "towerbench ex/s",
                 f"ratio vs eager (goal >= {GOAL_VS_EAGER})", "ratio vs compile"],
                [[r["model"], fmt_eps(r.get("eager_examples_per_sec")), fmt_eps(r.get("compile_examples_per_sec")),
                  fmt_eps(r.get("towerbench_examples_per_sec")), fmt_ratio(r["ratio_vs_eager"], GOAL_VS_EAGER),
                  fmt_ratio(r["ratio_vs_compile"])] for r in throughput])
    for r in throughput:
        if "compile_na_reason" in r:
            print(f"# torch.compile n/a for {r['model']}: {r['compile_na_reason']}")
        if "towerbench_examples_per_sec" in r:
            print(f"# {r['model']} towerbench memory: peak device {fmt_bytes(r.get('peak_device_bytes'))}; "
                  f"model_bytes {fmt_bytes(r.get('model_bytes'))}; PyTorch eager peak allocated "
                  f"{fmt_bytes(r.get('eager_peak_allocated_bytes'))}")
    if towers:
        print()
        print_table(["model", "1 tower ex/s", f"2 towers gpu:{GPU_INDEX}*2 ex/s", "overhead (1 - eps2/eps1)"],
                    [[p["model"], fmt_eps(p.get("one_tower_examples_per_sec")),
                      fmt_eps(p.get("two_towers_examples_per_sec")),
                      f"{100 * p['overhead']:.1f}%" if p["overhead"] is not None else "n/a"] for p in towers])
    if precision:
        print()
        print_table(["model", "towerbench fp32", "towerbench bf16", f"bf16/fp32 (CPU goal {GOAL_BF16_VS_FP32})",
                     "pytorch fp32", "pytorch bf16 autocast", "autocast/fp32",
                     f"towerbench bf16 vs autocast (CPU goal {GOAL_BF16_VS_AUTOCAST})"],
                    [[p["model"], fmt_eps(p.get("towerbench_fp32_examples_per_sec")),
                      fmt_eps(p.get("towerbench_bf16_examples_per_sec")), fmt_ratio(p["bf16_vs_fp32"]),
                      fmt_eps(p.get("eager_fp32_examples_per_sec")), fmt_eps(p.get("autocast_examples_per_sec")),
                      fmt_ratio(p["autocast_vs_fp32"]), fmt_ratio(p["bf16_vs_autocast"])] for p in precision])
        for p in precision:
            if "bf16_backend" in p:
                print(f"# {p['model']} bf16: {p['bf16_backend']}; peak device {fmt_bytes(p.get('bf16_peak_device_bytes'))}"
                      f"; PyTorch autocast peak allocated {fmt_bytes(p.get('autocast_peak_allocated_bytes'))}")
    print()
    print(nvml_line(nvml))
    print()


# ----------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", help="path of towerbench-run (needed unless --skip-towerbench)")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated model names")
    ap.add_argument("--models-dir", default=os.path.join(REPO, "resources", "models"))
    ap.add_argument("--batch", type=int, default=128, help="global batch of every run (default 128)")
    ap.add_argument("--steps", type=int, default=100, help="timed steps per repeat (default 100)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps before timing, every run (default 20)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="PyTorch: timings of --steps steps, median reported; towerbench times repeats x steps "
                         "steps in one run (default 3)")
    ap.add_argument("--lr", type=float, default=0.01, help="learning rate of every run (default 0.01)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="towerbench-run --threads (default: all cores)")
    ap.add_argument("--mnist-data", default=f"idx:{MNIST_SLICE}",
                    help="--data of the 1x28x28 models (default: the shipped 2,000-image Fashion-MNIST slice)")
    ap.add_argument("--cifar-dir", default=None, help="CIFAR-10 binary directory (default: random files in a temp dir)")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--compile-timeout", type=float, default=60,
                    help="seconds for each model's torch.compile subprocess, compilation and timing (default 60)")
    ap.add_argument("--run-timeout", type=float, default=30,
                    help="seconds before a towerbench-run is killed; the NVML run gets --nvml-seconds more (default 30)")
    ap.add_argument("--nvml-model", default="cifar10_cnn", help="model of the NVML vs nvidia-smi run")
    ap.add_argument("--nvml-seconds", type=float, default=8,
                    help="training seconds of the NVML run; its steps come from the model's measured ex/s (default 8)")
    ap.add_argument("--nvml-trim", type=float, default=0.5,
                    help="seconds left out at each end of the training window in the comparison (default 0.5)")
    ap.add_argument("--no-nvml", action="store_true", help="skip the NVML vs nvidia-smi run")
    ap.add_argument("--no-bf16", action="store_true", help="skip the mixed-precision (bf16) runs")
    ap.add_argument("--skip-pytorch", action="store_true", help="no PyTorch runs (torch is then not imported)")
    ap.add_argument("--pytorch-baseline", metavar="FILE", default=None,
                    help="PyTorch's side from pytorch_gpu_baseline.py's file (implies --skip-pytorch): Towerbench "
                         "against PyTorch's best of the same precision and batch, and issue 33's goals")
    ap.add_argument("--skip-towerbench", action="store_true", help="no towerbench-run runs (nor the NVML run)")
    ap.add_argument("--out-json", default=None, help="also write every record and failure to this JSON file")
    ap.add_argument("--compile-worker", default=None, help=argparse.SUPPRESS)  # the torch.compile subprocess
    args = ap.parse_args()
    if args.compile_worker:
        return compile_worker(args)
    if not args.skip_towerbench and not args.binary:
        ap.error("--binary is required unless --skip-towerbench")
    if args.binary:
        args.binary = os.path.abspath(args.binary)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    failures = []
    if args.pytorch_baseline:
        args.skip_pytorch = True

    torch = None
    if not args.skip_pytorch:
        import torch  # imported here so that --help works without it

        if torch.cuda.is_available():
            setup_torch(torch)
        else:
            failures.append(f"pytorch: torch {torch.__version__} sees no CUDA device; PyTorch runs skipped")
            torch = None
    machine = machine_info(torch)
    print(f"# gpu: {machine['gpu']} (capability {machine['capability']}, {machine['gpu_memory_mib']} MiB), "
          f"driver {machine['driver']}")
    print(f"# {machine_line(machine_peak(args.binary, os.cpu_count()))}")
    print(f"# torch {machine['torch']} (CUDA {machine['torch_cuda']}, cuDNN {machine['cudnn']}); fp32, TF32 off, "
          f"cudnn.benchmark on (bf16: autocast); batch {args.batch}; {args.warmup} warm-up + {args.repeats} x {args.steps} timed steps")
    print(f"# towerbench {args.binary}; PyTorch trains on one pre-made batch on the GPU (no input pipeline), "
          f"Towerbench's timing includes its input pipeline", flush=True)

    records = [machine]
    throughput, towers, precision = [], [], []
    measured = {}  # model -> (data, one-tower towerbench ex/s): the NVML run reuses them
    with tempfile.TemporaryDirectory(prefix="tb_bench_gpu_") as tmp:
        cifar_dir = args.cifar_dir
        for name in models:
            row = {"kind": "throughput", "model": name, "batch": args.batch, "steps": args.steps,
                   "warmup": args.warmup, "repeats": args.repeats}
            throughput.append(row)
            try:
                spec, data, cifar_dir = prepare_model(args.models_dir, name, tmp, cifar_dir, mnist_data=args.mnist_data)
            except Exception as e:  # noqa: BLE001 - one model failing must not hide the others
                row["error"] = f"{type(e).__name__}: {e}"
                failures.append(f"{name}: {row['error']}")
                continue
            row["data"] = data
            expected = EXPECTED_PARAMS.get(name, spec_stats(spec)[0])
            if torch is not None:
                pytorch_part(row, spec, expected, args, torch, failures)
            if not args.skip_towerbench:
                pair = {"kind": "towers", "model": name, "batch": args.batch, "steps": args.repeats * args.steps,
                        "warmup": args.warmup}
                towers.append(pair)
                towerbench_part(row, pair, data, expected, args, tmp, failures)
                measured[name] = (data, row.get("towerbench_examples_per_sec"))
            if not args.no_bf16:
                prec = {"kind": "precision", "model": name, "batch": args.batch, "steps": args.steps,
                        "warmup": args.warmup, "repeats": args.repeats}
                precision.append(prec)
                bf16_part(prec, spec, data, expected, args, torch, tmp, failures)
                prec.update(towerbench_fp32_examples_per_sec=row.get("towerbench_examples_per_sec"),
                            eager_fp32_examples_per_sec=row.get("eager_examples_per_sec"))
        nvml = None
        if not args.skip_towerbench and not args.no_nvml:
            nvml = nvml_part(measured, cifar_dir, args, tmp, failures)

    for row in throughput:
        tb = row.get("towerbench_examples_per_sec")
        row.update(ratio_vs_eager=ratio(tb, row.get("eager_examples_per_sec")),
                   ratio_vs_compile=ratio(tb, row.get("compile_examples_per_sec")), goal_vs_eager=GOAL_VS_EAGER)
        row["goal_met"] = row["ratio_vs_eager"] >= GOAL_VS_EAGER if row["ratio_vs_eager"] is not None else None
    for p in precision:
        p.update(bf16_vs_fp32=ratio(p.get("towerbench_bf16_examples_per_sec"), p.get("towerbench_fp32_examples_per_sec")),
                 autocast_vs_fp32=ratio(p.get("autocast_examples_per_sec"), p.get("eager_fp32_examples_per_sec")),
                 bf16_vs_autocast=ratio(p.get("towerbench_bf16_examples_per_sec"), p.get("autocast_examples_per_sec")))
    print_results(throughput, towers, precision, nvml)
    goals = goals_against(args.pytorch_baseline, machine, throughput, precision, args.batch, failures) \
        if args.pytorch_baseline else []
    print_goals(goals)
    records += throughput + towers + precision + ([nvml] if nvml else []) + goals
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump({"records": records, "failures": failures}, f, indent=1, sort_keys=True, default=str)
    return report(records, failures)


if __name__ == "__main__":
    sys.exit(main())
