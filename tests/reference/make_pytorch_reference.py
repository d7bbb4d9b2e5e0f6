#!/usr/bin/python3
"""Records the whole-model reference that tst_reference checks Towerbench against (as llm.c checks
itself against PyTorch): 10 steps of SGD with momentum on mnist_cnn and cifar10_cnn from fixed
weights and inputs, in an independent implementation (PyTorch, float32, on the CPU).

    /usr/bin/python3 tests/reference/make_pytorch_reference.py   # Debian's python3-torch

Weights and inputs are not stored: both sides compute them from the same counter-based generator
(SplitMix64, as core/backend/elementwise_math.hpp's uniformAt):
  u(seed, i)        = (splitmix64(seed + 0x9E3779B97F4A7C15 (i + 1)) >> 40) / 2^24, in [0, 1)
  parameter k, i    = (2 u(1000 + k, i) - 1) * b_k, b_k = float32(1 / sqrt(fan-in)) for weights,
                      0.1 for biases; k counts tensors in Towerbench's flat order (per layer:
                      weights (out, in, kh, kw) or (out, in), then biases)
  input of step s   = 2 u(7000 + s, j) - 1 over the batch's (n, h, w, c) elements
  label of step s   = floor(10 u(9000 + s, b))
What is stored (tests/reference/pytorch_reference.json): the loss of every step (mean cross-entropy
plus the weight-decay terms, before the update), the norm of every final parameter tensor, and a
sketch of the final parameters: 128 sums s_r = sum_i sign_r(i) w_i, sign_r(i) = +1 or -1 from bit
(r mod 64) of splitmix64((5000 + r div 64) + 0x9E3779B97F4A7C15 (i + 1)). For any difference d
between two parameter vectors, ||S d|| / sqrt(128) estimates ||d|| (Johnson-Lindenstrauss; about
+-13%), so the test bounds the distance of its final weights from these without storing 4.3 M floats.
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
from bench_common import load_spec, walk_spec  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
STEPS, BATCH, LR, MOMENTUM, SKETCH_ROWS = 10, 16, 0.05, 0.9, 128


def splitmix(seed, i):
    """SplitMix64's finaliser of seed + GOLDEN (i + 1), for a uint64 array i (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + GOLDEN * (i + np.uint64(1))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def uniform(seed, n):
    """u(seed, i) for i < n, as float32 (exact: a 24-bit integer over 2^24)."""
    return ((splitmix(seed, np.arange(n, dtype=np.uint64)) >> np.uint64(40)).astype(np.float64) / 2.0**24).astype(np.float32)


def sketch(flat):
    """The 128 signed sums of a flat float parameter vector, in float64."""
    i = np.arange(flat.size, dtype=np.uint64)
    w = flat.astype(np.float64)
    out = []
    for block in range(SKETCH_ROWS // 64):
        z = splitmix(5000 + block, i)
        for bit in range(64):
            signs = ((z >> np.uint64(bit)) & np.uint64(1)).astype(np.float64) * 2 - 1
            out.append(float(signs @ w))
    return out


def build(spec, torch):
    """The model in PyTorch (NCHW inside), flattening in Towerbench's (h, w, c) order; returns the
    module, its parameters in Towerbench's flat order with their fan-ins, and the weight decays."""
    nn = torch.nn
    layers, params, decays = [], [], []
    for layer, ins, out, pads in walk_spec(spec):
        t = layer["type"]
        if t == "conv2d":
            k = layer["kernel"]
            pl, pr, pt, pb = pads
            assert pl == pr and pt == pb, "the reference models pad symmetrically"
            m = nn.Conv2d(ins[0], out[0], k, stride=layer.get("stride", 1), padding=(pt, pl))
            fan_in = ins[0] * k * k
        elif t == "dense":
            m = nn.Linear(math.prod(ins), out[0])
            fan_in = math.prod(ins)
        elif t == "maxpool":
            k = layer.get("size", 2)
            if any(pads):
                layers.append(nn.ConstantPad2d(pads, float("-inf")))  # padding never wins the max
            layers.append(nn.MaxPool2d(k, stride=layer.get("stride", k)))
            continue
        elif t == "relu":
            layers.append(nn.ReLU())
            continue
        elif t == "lrn":
            size = 2 * layer.get("depth_radius", 5) + 1  # PyTorch divides alpha by the window
            layers.append(nn.LocalResponseNorm(size, alpha=layer.get("alpha", 1.0) * size,
                                               beta=layer.get("beta", 0.5), k=layer.get("bias", 1.0)))
            continue
        elif t == "flatten":
            class ChannelsLastFlatten(nn.Module):
                def forward(self, x):
                    return x.permute(0, 2, 3, 1).flatten(1)
            layers.append(ChannelsLastFlatten())
            continue
        else:
            raise ValueError(f"the reference does not cover layer type {t!r}")
        layers.append(m)
        params += [(m.weight, fan_in, True), (m.bias, fan_in, False)]
        decays.append((m.weight, float(layer.get("weight_decay", 0.0))))
    return nn.Sequential(*layers), params, decays


def reference(name, torch):
    spec = load_spec(os.path.join(REPO, "resources", "models"), name)
    model, params, decays = build(spec, torch)
    with torch.no_grad():
        for k, (p, fan_in, is_weight) in enumerate(params):
            bound = np.float32(1.0 / math.sqrt(fan_in)) if is_weight else np.float32(0.1)
            values = (np.float32(2) * uniform(1000 + k, p.numel()) - np.float32(1)) * bound
            p.copy_(torch.from_numpy(values.reshape(tuple(p.shape))))
    start = np.concatenate([p.detach().numpy().ravel() for p, _, _ in params]).astype(np.float64)
    c, h, w = spec["input"]
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for s in range(STEPS):
        x = (np.float32(2) * uniform(7000 + s, BATCH * h * w * c) - np.float32(1)).reshape(BATCH, h, w, c)
        y = np.floor(uniform(9000 + s, BATCH).astype(np.float64) * 10).astype(np.int64)
        xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
        loss = torch.nn.functional.cross_entropy(model(xt), torch.from_numpy(y))
        for weight, wd in decays:
            if wd > 0:
                loss = loss + wd * (weight * weight).sum() / 2  # tf.nn.l2_loss(W) * wd
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    flat = np.concatenate([p.detach().numpy().ravel() for p, _, _ in params])
    moved = float(np.linalg.norm(flat.astype(np.float64) - start))
    return {"model": name, "update_norm": moved, "losses": losses, "tensor_norms": [float(np.linalg.norm(p.detach().numpy().astype(np.float64)))
                                                             for p, _, _ in params],
            "params": int(flat.size), "norm": float(np.linalg.norm(flat.astype(np.float64))), "sketch": sketch(flat)}


def main():
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    out = {"generator": __doc__.split("What is stored")[0].strip(), "torch": torch.__version__, "steps": STEPS,
           "batch": BATCH, "lr": LR, "momentum": MOMENTUM, "sketch_rows": SKETCH_ROWS,
           "models": [reference(m, torch) for m in ("mnist_cnn", "cifar10_cnn")]}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pytorch_reference.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    for m in out["models"]:
        print(f"{m['model']}: losses {m['losses'][0]:.5f} -> {m['losses'][-1]:.5f}, |w| {m['norm']:.4f}, "
              f"moved by {m['update_norm']:.4f} ({m['update_norm'] / m['norm']:.2%})")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
