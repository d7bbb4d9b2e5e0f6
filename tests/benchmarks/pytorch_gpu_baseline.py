#!/usr/bin/env python3
"""PyTorch's strongest configuration of each network on this GPU, measured once per GPU kind and kept.

Issue 33 holds Towerbench's GPU towers against PyTorch's best of eager, torch.compile(mode=
"reduce-overhead") (CUDA graphs) and torch.compile(mode="max-autotune"), in fp32 (TF32 off) and in
bf16 autocast, at batch 128 and 512. That side changes only with the GPU kind, its driver or PyTorch,
so it is measured once and kept in a file (docs/gpu-runs/pytorch-baseline/), and the device time of
later sessions goes to Towerbench's side (bench_gpu_vs_pytorch.py --pytorch-baseline FILE).

    python3 tests/benchmarks/pytorch_gpu_baseline.py --file F [--models mnist_cnn,cifar10_cnn]
        [--modes eager,reduce-overhead,max-autotune] [--precisions fp32,bf16] [--batches 128,512]
        [--budget SECONDS] [--retry-na]
    python3 tests/benchmarks/pytorch_gpu_baseline.py --report F
    python3 tests/benchmarks/pytorch_gpu_baseline.py --print-file DIR   (this machine's file in DIR)

Each configuration runs in a subprocess of its own (a compiler that hangs or crashes costs at most its
time limit: --eager-timeout, --compile-timeout), builds the network from the same model JSON as
Towerbench (bench_common), trains on one pre-made batch on the GPU (cross-entropy, SGD momentum 0.9 with
per-layer weight decay, fused: PyTorch's fastest SGD; cuDNN's autotuner on), and times --repeats runs of
--steps steps after --warmup (default 3 x 300 after 30; the median examples/sec). Configurations run
eager first, then reduce-overhead, then max-autotune, and the file is rewritten after each. --budget is
a deadline for the whole call: no configuration runs past it (one cut off by it is not recorded), so a
call with little device time measures what fits and the next call goes on where it stopped: those
already in the file are skipped (and those recorded n/a too, unless --retry-na). A configuration slower
than its own limit is recorded n/a with the reason (max-autotune "where it compiles within a few
minutes"). A file made on another GPU kind, driver or PyTorch is refused: re-measure into a new file.
"""
import argparse
import json
import os
import re
import sys
import tempfile
import time

from bench_common import REPO, load_spec

FORMAT = "towerbench PyTorch GPU baseline"
MODES = ["eager", "reduce-overhead", "max-autotune"]
PRECISIONS = ["fp32", "bf16"]
IDENTITY = ("gpu", "driver", "torch")  # what a file is kept for: another of them, another file


def config_key(model, mode, precision, batch):
    return f"{model} {mode} {precision} batch {batch}"


def slug(machine):
    """A file name for this GPU kind, driver and PyTorch: nvidia-h100-80gb-hbm3_580.159.04_torch-2.11.0-cu130."""
    text = f"{machine['gpu']}_{machine['driver']}_torch-{machine['torch']}"
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-")


def machine_of(torch, device):
    info = {"torch": torch.__version__, "device": device}
    if device.startswith("cuda"):
        from bench_gpu_vs_pytorch import smi_query

        smi = smi_query("name,driver_version")
        major, minor = torch.cuda.get_device_capability(device)
        # The GPU as nvidia-smi names it: bench_gpu_vs_pytorch.py --pytorch-baseline compares that
        # name without importing torch (CUDA's own name differs under MIG).
        info.update(gpu=smi.get("name", torch.cuda.get_device_name(device)), cuda_name=torch.cuda.get_device_name(device),
                    capability=f"{major}.{minor}", driver=smi.get("driver_version", "n/a"),
                    torch_cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
    else:  # a dry run of the script itself on a machine without a GPU
        info.update(gpu="cpu", driver="n/a")
    return info


# ----------------------------------------------------------------------------------------------
# One configuration, in its own process.

def worker(args):
    import torch

    from bench_gpu_vs_pytorch import bench_torch_gpu, setup_torch

    model, mode, precision, batch = args.worker
    gpu = args.device.startswith("cuda")
    if gpu:
        setup_torch(torch)  # plain fp32 (TF32 off), as Towerbench's default; cuDNN's autotuner on
    wrap = None if mode == "eager" else (lambda m: torch.compile(m, mode=mode))
    out = bench_torch_gpu(load_spec(args.models_dir, model), args, torch, wrap=wrap,
                          autocast=torch.bfloat16 if precision == "bf16" else None, batch=int(batch),
                          device=args.device, fused=gpu)
    out.update(steps=args.steps, warmup=args.warmup, repeats=args.repeats)
    print(json.dumps(out), flush=True)
    return 0


def run_config(args, model, mode, precision, batch, seconds_left):
    """The worker for one configuration under its time limit, or under what is left of the call's
    budget where that is shorter: (result, None), (None, why it is n/a), or (None, None) where the
    budget cut it off (nothing to record: a later call measures it)."""
    from bench_gpu_vs_pytorch import run_worker

    own = args.eager_timeout if mode == "eager" else args.compile_timeout
    limit = min(own, seconds_left)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", model, mode, precision, str(batch),
           "--device", args.device, "--models-dir", args.models_dir, "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--repeats", str(args.repeats), "--lr", repr(args.lr)]
    res, why = run_worker(cmd, limit, config_key(model, mode, precision, batch))
    if res is None and why is None and limit >= own:
        why = (f"took longer than its limit of {limit:g} s (" +
               ("--eager-timeout" if mode == "eager" else "--compile-timeout, compilation included") + ")")
    return res, why


# ----------------------------------------------------------------------------------------------
# The file.

def read_file(path):
    """The file's document, or None where it does not exist; SystemExit with one sentence where it is not one."""
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: not a PyTorch baseline file ({e})")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("configs"), dict) \
            or not isinstance(doc.get("machine"), dict):
        raise SystemExit(f"{path}: not a PyTorch baseline file (its \"format\" is not \"{FORMAT}\", or it has no "
                         "\"machine\" and \"configs\" objects)")
    return doc


def write_file(path, doc):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".baseline-")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def best(doc, model, precision, batch):
    """PyTorch's fastest measured mode for one network, precision and batch: (examples/sec, mode), or None."""
    found = [(c["examples_per_sec"], c["mode"]) for c in doc["configs"].values()
             if c.get("model") == model and c.get("precision") == precision and c.get("batch") == batch
             and isinstance(c.get("examples_per_sec"), (int, float))]
    return max(found) if found else None


def missing_modes(doc, model, precision, batch):
    """The modes not yet in the file for one network, precision and batch (measured or n/a both count):
    a best over fewer than all of them is not PyTorch's best yet."""
    have = {c.get("mode") for c in doc["configs"].values()
            if c.get("model") == model and c.get("precision") == precision and c.get("batch") == batch}
    return [m for m in MODES if m not in have]


def report(doc):
    m = doc["machine"]
    print(f"PyTorch {m.get('torch')} on {m.get('gpu')} (driver {m.get('driver')}, CUDA {m.get('torch_cuda', 'n/a')}, "
          f"cuDNN {m.get('cudnn', 'n/a')}); examples/sec, median of the repeats")
    rows = {}
    for c in doc["configs"].values():
        rows.setdefault((c["model"], c["precision"], c["batch"]), {})[c["mode"]] = c
    print(f"{'model':<12} {'precision':<9} {'batch':>5} " + " ".join(f"{m:>16}" for m in MODES) + "   best")
    for (model, precision, batch), by_mode in sorted(rows.items()):
        cells = []
        for mode in MODES:
            c = by_mode.get(mode)
            cells.append(f"{'':>16}" if c is None else f"{c['examples_per_sec']:>16,.0f}"
                         if "examples_per_sec" in c else f"{'n/a':>16}")
        b = best(doc, model, precision, batch)
        print(f"{model:<12} {precision:<9} {batch:>5} " + " ".join(cells) +
              (f"   {b[0]:,.0f} ({b[1]})" if b else "   none"))
    for key, c in sorted(doc["configs"].items()):
        if "na_reason" in c:
            print(f"# n/a: {key}: {c['na_reason']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--file", help="the baseline file to fill (made if missing)")
    ap.add_argument("--report", metavar="FILE", help="print the table of FILE and exit")
    ap.add_argument("--print-file", metavar="DIR", help="print the path of this machine's file in DIR and exit")
    ap.add_argument("--models", default="mnist_cnn,cifar10_cnn")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--precisions", default=",".join(PRECISIONS))
    ap.add_argument("--batches", default="128,512")
    ap.add_argument("--steps", type=int, default=300, help="timed steps per repeat (default 300)")
    ap.add_argument("--warmup", type=int, default=30, help="untimed steps after the first (default 30)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of --steps, median kept (default 3)")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--budget", type=float, default=300,
                    help="seconds this call may take: no configuration runs past them (default 300)")
    ap.add_argument("--eager-timeout", type=float, default=120, help="seconds for one eager configuration")
    ap.add_argument("--compile-timeout", type=float, default=180,
                    help="seconds for one compiled configuration, compilation and timing (default 180)")
    ap.add_argument("--retry-na", action="store_true", help="measure again the configurations recorded n/a")
    ap.add_argument("--device", default="cuda:0", help="cuda:0; cpu only to try the script itself")
    ap.add_argument("--models-dir", default=os.path.join(REPO, "resources", "models"))
    ap.add_argument("--worker", nargs=4, default=None, help=argparse.SUPPRESS)  # MODEL MODE PRECISION BATCH
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.report:
        doc = read_file(args.report)
        if doc is None:
            raise SystemExit(f"{args.report}: no such file")
        report(doc)
        return 0
    if args.print_file:
        import torch

        print(os.path.join(args.print_file, slug(machine_of(torch, args.device)) + ".json"))
        return 0
    if not args.file:
        ap.error("--file, --report or --print-file is required")
    lists = {}
    for name, allowed in (("modes", MODES), ("precisions", PRECISIONS)):
        lists[name] = [v.strip() for v in getattr(args, name).split(",") if v.strip()]
        bad = [v for v in lists[name] if v not in allowed]
        if bad or not lists[name]:
            ap.error(f"--{name}: {', '.join(bad) or 'nothing'} is not one of {', '.join(allowed)}")
    try:
        batches = [int(b) for b in args.batches.split(",") if b.strip()]
    except ValueError:
        ap.error(f"--batches {args.batches}: expected whole numbers separated by commas")
    if not batches or min(batches) < 1:
        ap.error(f"--batches {args.batches}: expected positive batch sizes")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        if not os.path.exists(os.path.join(args.models_dir, m + ".json")):
            ap.error(f"--models: no model {m} in {args.models_dir}")

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"torch {torch.__version__} sees no CUDA device (--device cpu tries the script alone)")
    machine = machine_of(torch, args.device)
    doc = read_file(args.file) or {"format": FORMAT, "machine": machine, "configs": {}}
    differs = [k for k in IDENTITY if doc["machine"].get(k) != machine.get(k)]
    if differs:
        raise SystemExit(f"{args.file} was measured with " +
                         ", ".join(f"{k} {doc['machine'].get(k)}" for k in differs) + "; this machine has " +
                         ", ".join(f"{k} {machine.get(k)}" for k in differs) + ": measure into a new file "
                         f"(e.g. docs/gpu-runs/pytorch-baseline/{slug(machine)}.json)")

    started = time.monotonic()
    todo = [(model, mode, precision, batch) for mode in lists["modes"] for model in models
            for precision in lists["precisions"] for batch in batches]
    left = 0
    for model, mode, precision, batch in todo:
        key = config_key(model, mode, precision, batch)
        done = doc["configs"].get(key)
        if done and ("examples_per_sec" in done or not args.retry_na):
            continue
        seconds_left = args.budget - (time.monotonic() - started)
        if seconds_left < 10:
            left += 1
            continue
        t0 = time.monotonic()
        res, why = run_config(args, model, mode, precision, batch, seconds_left)
        if res is None and why is None:
            print(f"# {key}: cut off by --budget {args.budget:g} s; a later call measures it", flush=True)
            left += 1
            continue
        entry = {"model": model, "mode": mode, "precision": precision, "batch": batch,
                 "seconds": round(time.monotonic() - t0, 1), "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        entry.update(res if res else {"na_reason": why})
        doc["configs"][key] = entry
        write_file(args.file, doc)
        print(f"# {key}: " + (f"{res['examples_per_sec']:,.0f} ex/s" if res else f"n/a ({why})") +
              f" in {entry['seconds']} s", flush=True)
    if left:
        print(f"# {left} configurations left for a later call (--budget {args.budget:g} s spent)")
    report(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
