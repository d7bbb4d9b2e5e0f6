"""Shared pieces of the benchmarks (bench_cpu_vs_pytorch.py, bench_towers_vs_ddp.py, bench_gpu_vs_pytorch.py).

Model description from the model JSON (shapes, parameters, FLOPs), the PyTorch copy of a model JSON
and its training step, fake CIFAR-10 files, running towerbench-run and reading its summary/metrics,
and the plain-text table. Nothing here imports torch at module level: callers pass the module in.
"""
import json
import math
import os
import random
import subprocess
import sys
import time

GOAL_RATIO = 1.25
# mlp: 1,000 steps (about 1 s): 200 (0.15 s) left a round at the mercy of a moment's noise
DEFAULT_STEPS = {"mlp": 1000, "mnist_cnn": 60, "cifar10_cnn": 60, "resnet20_mnist": 30, "resnet20": 30, "resnet56": 10}
DEFAULT_STEPS_OTHER = 60
# Parameter counts Towerbench reports for the shipped models; the PyTorch copies must match exactly.
EXPECTED_PARAMS = {"mlp": 669_706, "mnist_cnn": 3_274_634, "cifar10_cnn": 1_068_298, "resnet20": 272_474,
                   "resnet56": 855_770, "resnet20_mnist": 272_186, "vgg_bn": 72_666}

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


def layer_names(spec):
    """Each layer's name as Towerbench gives it: its own, or type + index in the file."""
    return [l.get("name", f"{l['type']}{i}") for i, l in enumerate(spec["layers"])]


def walk_spec(spec):
    """Yields (layer, in_shape, out_shape, pads, name, inputs) for each layer in the file's order (a
    graph's files are in a topological order): shapes are (C, H, W), or (N,) after flatten and
    dense; in_shape is the first input's; inputs are the names of the layers read ("input": the
    model's), by default the layer before."""
    shapes = {"input": tuple(spec["input"])}
    names = layer_names(spec)
    for i, layer in enumerate(spec["layers"]):
        t = layer["type"]
        inputs = layer.get("inputs", [names[i - 1] if i else "input"])
        ins = [shapes[n] for n in inputs]
        shape = ins[0]
        pads = (0, 0, 0, 0)  # left, right, top, bottom
        if t in ("conv2d", "maxpool", "avgpool"):
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
        elif t in ("relu", "lrn", "dropout", "batch_norm", "add"):
            out = shape
        elif t == "global_avgpool":
            out = (shape[0], 1, 1)
        elif t == "concat":
            out = (sum(x[0] for x in ins),) + tuple(shape[1:])
        else:
            raise ValueError(f"unknown layer type {t!r}")
        yield layer, shape, out, pads, names[i], inputs
        shapes[names[i]] = out


def spec_stats(spec):
    """(parameter count, training FLOPs per example): 2 FLOPs per multiply-add of conv/dense layers in
    forward, weight gradient and input gradient, except the input gradient of layers that read the
    model's input alone (through flatten), which is not computed (as towerbench-run's
    flops_per_example)."""
    params = 0
    macs = 0
    input_only = {"input"}  # tensors whose gradient nothing needs: the input and flattens of it
    no_dx_macs = 0
    for layer, ins, out, _, name, inputs in walk_spec(spec):
        layer_macs = 0
        t = layer["type"]
        if t == "conv2d":
            k = layer["kernel"]
            params += k * k * ins[0] * out[0] + (0 if layer.get("bias") is False else out[0])
            layer_macs = out[1] * out[2] * out[0] * k * k * ins[0]
        elif t == "dense":
            n_in = math.prod(ins)
            params += n_in * out[0] + out[0]
            layer_macs = n_in * out[0]
        elif t == "batch_norm":
            params += 2 * ins[0]
        if all(i in input_only for i in inputs):
            no_dx_macs += layer_macs
            if t == "flatten":
                input_only.add(name)
        macs += layer_macs
    return params, 2 * (3 * macs - no_dx_macs)


def load_spec(models_dir, name):
    path = name if name.endswith(".json") else os.path.join(models_dir, name + ".json")
    with open(path) as f:
        return json.load(f)


# ----------------------------------------------------------------------------------------------
# PyTorch copy of a model JSON.

def build_torch_model(spec, torch, flatten_hwc=False):
    """The model in PyTorch (NCHW), layer by layer as the JSON has it, a graph where it is one (add,
    concat, inputs): TF's SAME paddings (padded explicitly where asymmetric), LRN with alpha scaled
    by the window, batch norm with PyTorch's momentum = 1 - Towerbench's. flatten_hwc: flatten in
    Towerbench's (h, w, c) order (needed where weights are copied from Towerbench's layout).
    Returns (module, decay, params): decay lists (tensor, weight_decay) of the decayed tensors;
    params lists (tensor, kind, fan_in) in Towerbench's flat order, kind "weight", "bias", "gamma"
    or "beta"; the module's .batch_norms are its BatchNorm modules in order."""
    nn = torch.nn
    decay, params, steps = [], [], []
    mods = nn.ModuleDict()

    def init_tensor(t, init, default_kind):
        if isinstance(init, bool):
            return
        if isinstance(init, (int, float)):
            nn.init.constant_(t, float(init))
            return
        kind = (init or {}).get("type", default_kind)
        if kind == "truncated_normal":
            sd = init["stddev"]
            nn.init.trunc_normal_(t, std=sd, a=-2 * sd, b=2 * sd)
        elif kind == "constant":
            nn.init.constant_(t, float(init.get("value", 0.0)))
        elif kind == "he_normal":
            nn.init.kaiming_normal_(t, nonlinearity="relu")
        else:  # glorot
            nn.init.xavier_uniform_(t)

    class ChannelsLastFlatten(nn.Module):
        def forward(self, x):
            return x.permute(0, 2, 3, 1).flatten(1) if x.dim() == 4 else x.flatten(1)

    norms = []
    for layer, ins, out, pads, name, inputs in walk_spec(spec):
        t = layer["type"]
        wd = float(layer.get("weight_decay", 0.0))
        key = "m" + str(len(steps))
        m = None
        if t == "conv2d":
            k = layer["kernel"]
            s = layer.get("stride", 1)
            pl, pr, pt, pb = pads
            bias = layer.get("bias") is not False
            symmetric = pl == pr and pt == pb
            conv = nn.Conv2d(ins[0], out[0], k, stride=s, padding=(pt, pl) if symmetric else 0, bias=bias)
            m = conv if symmetric else nn.Sequential(nn.ZeroPad2d(pads), conv)
            with torch.no_grad():
                init_tensor(conv.weight, layer.get("init"), "glorot")
                if bias:
                    init_tensor(conv.bias, layer.get("bias", 0.0), "constant")
            params.append((conv.weight, "weight", ins[0] * k * k))
            if bias:
                params.append((conv.bias, "bias", ins[0] * k * k))
            decay.append((conv.weight, wd))
        elif t == "dense":
            lin = nn.Linear(math.prod(ins), out[0])
            m = nn.Sequential(ChannelsLastFlatten() if flatten_hwc else nn.Flatten(), lin) if len(ins) == 3 else lin
            with torch.no_grad():
                init_tensor(lin.weight, layer.get("init"), "glorot")
                init_tensor(lin.bias, layer.get("bias", 0.0), "constant")
            params += [(lin.weight, "weight", math.prod(ins)), (lin.bias, "bias", math.prod(ins))]
            decay.append((lin.weight, wd))
        elif t == "batch_norm":
            bn = (nn.BatchNorm2d if len(ins) == 3 else nn.BatchNorm1d)(
                ins[0], eps=layer.get("epsilon", 1e-5), momentum=1.0 - layer.get("momentum", 0.9))
            m = bn
            params += [(bn.weight, "gamma", 0), (bn.bias, "beta", 0)]
            decay += [(bn.weight, wd), (bn.bias, wd)]
            norms.append(bn)
        elif t in ("maxpool", "avgpool"):
            k = layer.get("size", 2)
            s = layer.get("stride", k)
            if t == "maxpool":
                # TF SAME pads after (bottom/right) first; PyTorch's padding= is symmetric and would
                # shift the windows, so pad explicitly with -inf (never the maximum).
                pool = nn.MaxPool2d(k, stride=s)
                m = nn.Sequential(nn.ConstantPad2d(pads, float("-inf")), pool) if any(pads) else pool
            else:
                pl, pr, pt, pb = pads
                if not (pl == pr and pt == pb):
                    raise ValueError(f"{name}: an average pool with asymmetric SAME padding has no PyTorch copy here")
                m = nn.AvgPool2d(k, stride=s, padding=(pt, pl), count_include_pad=False)
        elif t == "global_avgpool":
            m = nn.AdaptiveAvgPool2d(1)
        elif t == "relu":
            m = nn.ReLU()
        elif t == "lrn":
            r = layer.get("depth_radius", 5)
            size = 2 * r + 1
            # TF: x / (bias + alpha * sum_{window} x^2)^beta;  PyTorch divides alpha by size.
            m = nn.LocalResponseNorm(size, alpha=layer.get("alpha", 1.0) * size, beta=layer.get("beta", 0.5),
                                     k=layer.get("bias", 1.0))
        elif t == "flatten":
            m = ChannelsLastFlatten() if flatten_hwc else nn.Flatten()
        elif t == "dropout":
            m = nn.Dropout(p=1.0 - layer.get("keep", 0.5))
        if m is not None:
            mods[key] = m
        steps.append((name, t, key if m is not None else None, inputs))

    class Graph(nn.Module):
        def __init__(self):
            super().__init__()
            self.mods = mods
            self.steps = steps
            self.batch_norms = norms

        def forward(self, x):
            out = {"input": x}
            y = x
            for name, t, key, inputs in self.steps:
                xs = [out[i] for i in inputs]
                if t == "add":
                    y = xs[0]
                    for z in xs[1:]:
                        y = y + z
                elif t == "concat":
                    y = torch.cat(xs, dim=1)
                else:
                    y = self.mods[key](xs[0])
                out[name] = y
            return y

    return Graph(), decay, params


def make_torch_step(spec, batch, lr, torch, wrap=None, data_seed=None, device=None, autocast=None,
                    channels_last=False, fused=False):
    """Builds the PyTorch copy of `spec` with cross-entropy and SGD(momentum 0.9, per-layer weight decay)
    on one batch of random tensors made here, before any timing (no input pipeline).
    wrap(model) may return a wrapper to run the steps through (DistributedDataParallel, torch.compile);
    data_seed, when given, reseeds torch before the batch is drawn; device (e.g. "cuda:0") holds the
    model, its optimizer state and the batch (default: the CPU); autocast (e.g. torch.bfloat16) runs
    the forward pass and the loss under torch.autocast with that type (mixed precision: fp32 weights
    and optimizer); fused: SGD's one-kernel CUDA update (PyTorch's fastest). Returns (step function,
    parameter count)."""
    model, decay, _ = build_torch_model(spec, torch)
    model.train()
    if device is not None:
        model.to(device)  # before the wrapper and the optimizer, which must see the device's parameters
    if channels_last:  # (n, h, w, c) in memory: oneDNN's preferred layout, as Towerbench's
        model.to(memory_format=torch.channels_last)
    params = sum(p.numel() for p in model.parameters())
    net = wrap(model) if wrap is not None else model
    decayed = {id(w) for w, wd in decay if wd > 0}
    groups = [{"params": [w], "weight_decay": wd} for w, wd in decay if wd > 0]
    groups.append({"params": [p for p in model.parameters() if id(p) not in decayed], "weight_decay": 0.0})
    opt = torch.optim.SGD(groups, lr=lr, momentum=0.9, **({"fused": True} if fused else {}))
    loss_fn = torch.nn.CrossEntropyLoss()
    classes = list(walk_spec(spec))[-1][2][0]
    if data_seed is not None:
        torch.manual_seed(data_seed)
    # One batch made once, before timing: no input pipeline on the PyTorch side.
    x = torch.randn(batch, *spec["input"], device=device)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, classes, (batch,), device=device)

    kind = "cuda" if device is not None and str(device).startswith("cuda") else "cpu"

    def step():
        opt.zero_grad(set_to_none=True)
        if autocast is not None:
            with torch.autocast(kind, dtype=autocast):
                loss = loss_fn(net(x), y)
        else:
            loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        return loss

    return step, params


def time_steps(step, steps, warmup, sync=None):
    """`warmup` untimed steps, then the seconds `steps` steps take. sync (e.g. a barrier) is called
    before the clock starts and before it stops. Raises when the last loss is not finite."""
    for _ in range(warmup):
        step()
    if sync is not None:
        sync()
    t0 = time.perf_counter()
    loss = None
    for _ in range(steps):
        loss = step()
    if sync is not None:
        sync()
    seconds = time.perf_counter() - t0
    if loss is not None and not math.isfinite(float(loss)):
        raise RuntimeError(f"PyTorch loss is {float(loss)}")
    return seconds


def bench_pytorch(spec, batch, steps, warmup, threads, lr, torch, autocast=None, channels_last=False):
    """One PyTorch process with `threads` threads: examples/sec over `steps` steps after `warmup`
    (autocast: that type under torch.autocast; channels_last: model and batch in (n, h, w, c); as
    make_torch_step)."""
    torch.manual_seed(1)
    torch.set_num_threads(threads)
    step, params = make_torch_step(spec, batch, lr, torch, autocast=autocast, channels_last=channels_last)
    seconds = time_steps(step, steps, warmup)
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


def prepare_model(models_dir, name, tmp, cifar_dir, mnist_data="fashion-mnist"):
    """Loads a model's spec and its --data spec, writing fake CIFAR-10 files into tmp the first
    time a 3-channel model needs them. mnist_data is the --data of 1x28x28 models (the installed
    package by default; an idx:DIR where it is not installed). Returns (spec, data, cifar_dir)."""
    spec = load_spec(models_dir, name)
    if spec["input"][0] == 3 and cifar_dir is None:
        cifar_dir = os.path.join(tmp, "cifar10")
        os.makedirs(cifar_dir)
        make_cifar_dir(cifar_dir)
    return spec, data_spec_for(spec, cifar_dir, mnist_data), cifar_dir


def data_spec_for(spec, cifar_dir, mnist_data="fashion-mnist"):
    c, h, w = spec["input"]
    if c == 3:
        return f"cifar10:{cifar_dir}"
    if (c, h, w) == (1, 28, 28):
        return mnist_data
    raise ValueError(f"no benchmark data for input {spec['input']}")


def bench_towerbench(binary, model, data, batch, steps, warmup, threads, workdir, extra_args=(), tag="",
                     timeout=None, launcher=()):
    """Runs towerbench-run for warmup+steps steps of `batch` examples (the global batch) and measures
    examples/sec over the last `steps` steps from the metrics file's elapsed_s. extra_args are appended
    to the command line (e.g. --towers); tag keeps the metrics files of several runs of one model apart;
    timeout (seconds) ends a run that hangs (subprocess.TimeoutExpired); launcher goes before the
    command (mpirun -np 2 ...; threads are then each process's). The result names the metrics
    file, for callers that read more of it."""
    metrics = os.path.join(workdir, f"metrics_{os.path.basename(model)}{'_' + tag if tag else ''}.jsonl")
    cmd = [*launcher, binary, "--model", model, "--data", data, "--batch", str(batch), "--steps", str(warmup + steps),
           "--threads", str(threads), "--validation", "0", "--quiet", "--metrics", metrics, *extra_args]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{proc.stderr.strip()[-2000:]}")
    # What a run that succeeded said on the way (a fused GEMM not to be had, a step that could not be
    # recorded as a graph and ran unrecorded): the measured speed is that configuration's.
    if proc.stderr.strip():
        sys.stderr.write(proc.stderr if proc.stderr.endswith("\n") else proc.stderr + "\n")
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if not lines:
        raise RuntimeError(f"{' '.join(cmd)} printed nothing")
    summary = json.loads(lines[-1])
    elapsed = {}
    step_records = {}
    with open(metrics) as f:
        for ln in f:
            rec = json.loads(ln)
            if rec.get("type") == "step":
                elapsed[rec["step"]] = rec["elapsed_s"]
                step_records[rec["step"]] = rec
    last = warmup + steps
    if warmup > 0 and warmup in elapsed and last in elapsed and elapsed[last] > elapsed[warmup]:
        seconds = elapsed[last] - elapsed[warmup]
        eps = steps * batch / seconds
    else:  # no warm-up requested: the whole run, first step included
        seconds = summary["train_seconds"]
        eps = summary["examples_per_sec"]
    return {"summary": summary, "seconds": seconds, "examples_per_sec": eps, "command": cmd,
            "step_records": step_records, "metrics": metrics}


# ----------------------------------------------------------------------------------------------
# Command line and output.

def cpu_model():
    """The processor's name from /proc/cpuinfo ("n/a" where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "n/a"


def cpu_isa():
    """The vector and matrix extensions oneDNN can use here, from /proc/cpuinfo's flags."""
    wanted = ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile"]
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return " ".join(w for w in wanted if w in have) or "none of " + " ".join(wanted)
    except OSError:
        pass
    return "n/a"


def memory_gib():
    """MemTotal from /proc/meminfo in GiB (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / (1024 * 1024)
    except OSError:
        pass
    return None


def gemm_peak_binary(towerbench_binary):
    """tb_gemm_peak of the build towerbench-run is in (BUILD/app/towerbench-run)."""
    build = os.path.dirname(os.path.dirname(os.path.abspath(towerbench_binary)))
    return os.path.join(build, "tests", "benchmarks", "tb_gemm_peak")


def gemm_peak(binary, threads, sizes="1024,2048,4096", repeats=5):
    """tb_gemm_peak's JSON (gemm_peak.hpp): the GEMM peak per precision, oneDNN's instruction set."""
    proc = subprocess.run([binary, "--threads", str(threads), "--sizes", sizes, "--repeats", str(repeats)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{binary} exited with {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def machine_line(peak):
    """What every benchmark prints first (as bench_machine.hpp's machineLine): the processor, its
    ISA, what oneDNN uses of it, cores, memory and the GEMM peak per precision (peak: gemm_peak's
    JSON, or None where tb_gemm_peak could not run)."""
    mem = memory_gib()
    text = (f"processor: {cpu_model()} ({cpu_isa()}); oneDNN: {peak['isa'] if peak else 'n/a'}; "
            f"{os.cpu_count()} cores, {f'{mem:.1f}' if mem else '?'} GiB")
    if not peak:
        return text + "; GEMM peak: not measured (tb_gemm_peak not built)"
    bf16 = (f"{peak['bf16_gemm_gflops']:.0f} GFLOP/s ({peak['bf16_kernel']})" if peak.get("bf16_gemm_gflops")
            else "none (no AVX512-BF16 or AMX)")
    threads = peak["threads"]
    return (text + f"; GEMM peak on {threads} thread{'s' if threads != 1 else ''}: "
            f"fp32 {peak['gemm_gflops']:.0f} GFLOP/s, bf16 {bf16}")


def machine_peak(towerbench_binary, threads):
    """gemm_peak's JSON from the build's tb_gemm_peak, quick (sizes 1024 and 2048, best of 3); None
    where it cannot run (the benchmark still runs; its machine line says the peak is missing, and
    why goes to stderr)."""
    try:
        return gemm_peak(gemm_peak_binary(towerbench_binary), threads, "1024,2048", 3)
    except Exception as e:  # noqa: BLE001
        print(f"gemm peak not measured: {e}", file=sys.stderr)
        return None


def add_common_args(ap, default_steps, default_models, repo):
    """The options both benchmarks share (steps, warm-up, models, learning rate, data)."""
    ap.add_argument("--steps", type=int, default=None,
                    help=f"timed steps for every model (default per model: {default_steps})")
    ap.add_argument("--model-steps", default="", help="per-model override, e.g. mlp=400,cifar10_cnn=30")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps before timing (every run)")
    ap.add_argument("--models", default=",".join(default_models), help="comma-separated model names")
    ap.add_argument("--models-dir", default=os.path.join(repo, "resources", "models"))
    ap.add_argument("--lr", type=float, default=0.01, help="learning rate of every run (towerbench's default)")
    ap.add_argument("--cifar-dir", default=None, help="CIFAR-10 binary directory (default: random files in a temp dir)")


def report(records, failures):
    """Prints one JSON line per record and one FAILED line per failure; the exit status."""
    for r in records:
        print(json.dumps(r, sort_keys=True, default=str))
    for f in failures:
        print(f"FAILED: {f}", file=sys.stderr)
    return 1 if failures else 0


def parse_steps_overrides(text):
    out = {}
    for item in filter(None, (text or "").split(",")):
        name, _, value = item.partition("=")
        out[name.strip()] = int(value)
    return out


def steps_for(name, steps, overrides):
    """Timed steps of one model: --model-steps override, else --steps, else the per-model default."""
    return overrides.get(name, steps if steps is not None else DEFAULT_STEPS.get(name, DEFAULT_STEPS_OTHER))


def print_table(header, rows):
    """Column-aligned table: header, a dashed rule, then the rows (lists of strings)."""
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-|-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths)))
