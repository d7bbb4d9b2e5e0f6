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
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import time

GOAL_RATIO = 1.25
DEFAULT_MODELS = ["mlp", "mnist_cnn", "cifar10_cnn"]
DEFAULT_STEPS = {"mlp": 200, "mnist_cnn": 60, "cifar10_cnn": 60}
DEFAULT_STEPS_OTHER = 60
# Parameter counts Towerbench reports for the shipped models; the PyTorch copies must match exactly.
EXPECTED_PARAMS = {"mlp": 669_706, "mnist_cnn": 3_274_634, "cifar10_cnn": 1_068_298}

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


# ----------------------------------------------------------------------------------------------
# Model description: shapes, parameters and FLOPs straight from the model JSON (no torch needed).

def same_pads(size, kernel, stride):
    """TensorFlow SAME padding along one axis: (output size, pad before, pad after)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, total // 2, total - total // 2


def valid_out(size, kernel, stride):
    return (size - kernel) // stride + 1


def walk_spec(spec):
    """Yields (layer, in_shape, out_shape, pads) for each layer; shapes are (C, H, W) or (N,)."""
    shape = tuple(spec["input"])
    for layer in spec["layers"]:
        t = layer["type"]
        pads = (0, 0, 0, 0)  # left, right, top, bottom
        if t in ("conv2d", "maxpool"):
            c, h, w = shape
            k = layer["kernel"] if t == "conv2d" else layer.get("size", 2)
            s = layer.get("stride", 1 if t == "conv2d" else k)
            if layer.get("padding", "same") == "same":
                oh, pt, pb = same_pads(h, k, s)
                ow, pl, pr = same_pads(w, k, s)
                pads = (pl, pr, pt, pb)
            else:
                oh, ow = valid_out(h, k, s), valid_out(w, k, s)
            out = (layer["filters"] if t == "conv2d" else c, oh, ow)
        elif t in ("flatten", "dense"):
            flat = (math.prod(shape),)
            out = (layer["units"],) if t == "dense" else flat
        elif t in ("relu", "lrn", "dropout"):
            out = shape
        else:
            raise ValueError(f"unknown layer type {t!r}")
        yield layer, shape, out, pads
        shape = out


def spec_stats(spec):
    """(parameter count, training FLOPs per example = 3 x 2 x forward multiply-adds of conv/dense)."""
    params = 0
    macs = 0
    for layer, ins, out, _ in walk_spec(spec):
        if layer["type"] == "conv2d":
            k = layer["kernel"]
            params += k * k * ins[0] * out[0] + out[0]
            macs += out[1] * out[2] * out[0] * k * k * ins[0]
        elif layer["type"] == "dense":
            n_in = math.prod(ins)
            params += n_in * out[0] + out[0]
            macs += n_in * out[0]
    return params, 3 * 2 * macs


def load_spec(models_dir, name):
    path = name if name.endswith(".json") else os.path.join(models_dir, name + ".json")
    with open(path) as f:
        return json.load(f)


# ----------------------------------------------------------------------------------------------
# PyTorch copy of a model JSON.

def build_torch_model(spec, torch):
    nn = torch.nn
    modules = []
    decay_groups = []  # (weight parameter, weight_decay)

    def init_tensor(t, init, default_kind):
        if isinstance(init, (int, float)):
            nn.init.constant_(t, float(init))
            return
        kind = (init or {}).get("type", default_kind)
        if kind == "truncated_normal":
            sd = init["stddev"]
            nn.init.trunc_normal_(t, std=sd, a=-2 * sd, b=2 * sd)
        elif kind == "constant":
            nn.init.constant_(t, float(init.get("value", 0.0)))
        else:  # glorot (and anything else): only speed is measured here
            nn.init.xavier_uniform_(t)

    for layer, ins, out, pads in walk_spec(spec):
        t = layer["type"]
        if t == "conv2d":
            k = layer["kernel"]
            s = layer.get("stride", 1)
            pl, pr, pt, pb = pads
            if pl == pr and pt == pb:
                conv = nn.Conv2d(ins[0], out[0], k, stride=s, padding=(pt, pl))
            else:
                modules.append(nn.ZeroPad2d(pads))
                conv = nn.Conv2d(ins[0], out[0], k, stride=s, padding=0)
            layer_module = conv
        elif t == "dense":
            if len(ins) == 3:
                modules.append(nn.Flatten())
            layer_module = nn.Linear(math.prod(ins), out[0])
        elif t == "maxpool":
            k = layer.get("size", 2)
            s = layer.get("stride", k)
            if any(pads):
                # TF SAME pads after (bottom/right) first; PyTorch's padding= is symmetric and would
                # shift the windows, so pad explicitly with -inf (never the maximum).
                modules.append(nn.ConstantPad2d(pads, float("-inf")))
            modules.append(nn.MaxPool2d(k, stride=s))
            continue
        elif t == "relu":
            modules.append(nn.ReLU())
            continue
        elif t == "lrn":
            r = layer.get("depth_radius", 5)
            size = 2 * r + 1
            # TF: x / (bias + alpha * sum_{window} x^2)^beta;  PyTorch divides alpha by size.
            modules.append(nn.LocalResponseNorm(size, alpha=layer.get("alpha", 1.0) * size,
                                                beta=layer.get("beta", 0.5), k=layer.get("bias", 1.0)))
            continue
        elif t == "flatten":
            modules.append(nn.Flatten())
            continue
        elif t == "dropout":
            modules.append(nn.Dropout(p=1.0 - layer.get("keep", 0.5)))
            continue
        with torch.no_grad():
            init_tensor(layer_module.weight, layer.get("init"), "glorot")
            init_tensor(layer_module.bias, layer.get("bias", 0.0), "constant")
        decay_groups.append((layer_module.weight, float(layer.get("weight_decay", 0.0))))
        modules.append(layer_module)
    return nn.Sequential(*modules), decay_groups


def bench_pytorch(spec, batch, steps, warmup, threads, lr, torch):
    torch.manual_seed(1)
    torch.set_num_threads(threads)
    model, decay = build_torch_model(spec, torch)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    decayed = {id(w) for w, wd in decay if wd > 0}
    groups = [{"params": [w], "weight_decay": wd} for w, wd in decay if wd > 0]
    groups.append({"params": [p for p in model.parameters() if id(p) not in decayed], "weight_decay": 0.0})
    opt = torch.optim.SGD(groups, lr=lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    classes = list(walk_spec(spec))[-1][2][0]
    # One batch made once, before timing: no input pipeline on the PyTorch side.
    x = torch.randn(batch, *spec["input"])
    y = torch.randint(0, classes, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    seconds = time.perf_counter() - t0
    if not math.isfinite(float(loss)):
        raise RuntimeError(f"PyTorch loss is {float(loss)}")
    return {"params": params, "seconds": seconds, "examples_per_sec": steps * batch / seconds}


# ----------------------------------------------------------------------------------------------
# Towerbench.

def make_cifar_dir(root, train_records=2000, test_records=1000, seed=1):
    """CIFAR-10 binary files of random bytes in the real format: records of 1 label byte (0..9)
    followed by 3072 pixel bytes (R, G, B planes of 32x32)."""
    rng = random.Random(seed)
    record = 3073

    def write(name, n):
        data = bytearray(rng.randbytes(n * record))
        data[0::record] = bytes(rng.randrange(10) for _ in range(n))
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)

    for i in range(1, 6):
        write(f"data_batch_{i}.bin", train_records)
    write("test_batch.bin", test_records)
    return root


def data_spec_for(spec, cifar_dir):
    c, h, w = spec["input"]
    if c == 3:
        return f"cifar10:{cifar_dir}"
    if (c, h, w) == (1, 28, 28):
        return "fashion-mnist"
    raise ValueError(f"no benchmark data for input {spec['input']}")


def bench_towerbench(binary, model, data, batch, steps, warmup, threads, workdir):
    metrics = os.path.join(workdir, f"metrics_{os.path.basename(model)}.jsonl")
    cmd = [binary, "--model", model, "--data", data, "--batch", str(batch), "--steps", str(warmup + steps),
           "--threads", str(threads), "--validation", "0", "--quiet", "--metrics", metrics]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{proc.stderr.strip()[-2000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if not lines:
        raise RuntimeError(f"{' '.join(cmd)} printed nothing")
    summary = json.loads(lines[-1])
    elapsed = {}
    with open(metrics) as f:
        for ln in f:
            rec = json.loads(ln)
            if rec.get("type") == "step":
                elapsed[rec["step"]] = rec["elapsed_s"]
    last = warmup + steps
    if warmup > 0 and warmup in elapsed and last in elapsed and elapsed[last] > elapsed[warmup]:
        seconds = elapsed[last] - elapsed[warmup]
        eps = steps * batch / seconds
    else:  # no warm-up requested: the whole run, first step included
        seconds = summary["train_seconds"]
        eps = summary["examples_per_sec"]
    return {"summary": summary, "seconds": seconds, "examples_per_sec": eps, "command": cmd}


def gemm_peak(binary, threads):
    proc = subprocess.run([binary, "--threads", str(threads)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{binary} exited with {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------------------

def parse_steps_overrides(text):
    out = {}
    for item in filter(None, (text or "").split(",")):
        name, _, value = item.partition("=")
        out[name.strip()] = int(value)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", required=True, help="path of towerbench-run")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for both (default: all cores)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=None,
                    help=f"timed steps for every model (default per model: {DEFAULT_STEPS})")
    ap.add_argument("--model-steps", default="", help="per-model override, e.g. mlp=400,cifar10_cnn=30")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps before timing (both sides)")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated model names")
    ap.add_argument("--models-dir", default=os.path.join(REPO, "resources", "models"))
    ap.add_argument("--lr", type=float, default=0.01, help="learning rate of both (towerbench's default)")
    ap.add_argument("--cifar-dir", default=None, help="CIFAR-10 binary directory (default: random files in a temp dir)")
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
            steps = overrides.get(name, args.steps if args.steps is not None
                                  else DEFAULT_STEPS.get(name, DEFAULT_STEPS_OTHER))
            row = {"model": name, "batch": args.batch, "steps": steps, "warmup": args.warmup,
                   "threads": args.threads}
            try:
                spec = load_spec(args.models_dir, name)
                spec_params, flops = spec_stats(spec)
                if spec["input"][0] == 3 and cifar_dir is None:
                    cifar_dir = os.path.join(tmp, "cifar10")
                    os.makedirs(cifar_dir)
                    make_cifar_dir(cifar_dir)
                data = data_spec_for(spec, cifar_dir)
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
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(header)]
    print()
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-|-".join("-" * w for w in widths))
    for row in table:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths)))
    print()
    if any((r.get("percent_of_gemm_peak") or 0) > 100 for r in results):
        print("# WARNING: above 100% of the GEMM peak: the peak was measured while the cores were busy; "
              "rerun on an idle machine")
    for r in results:
        print(json.dumps(r, sort_keys=True, default=str))
    for f in failures:
        print(f"FAILED: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
