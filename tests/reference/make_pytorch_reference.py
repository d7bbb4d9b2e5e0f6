#!/usr/bin/python3
"""Records the whole-model reference that tst_reference checks Towerbench against (as llm.c checks
itself against PyTorch): 10 steps of SGD with momentum on mnist_cnn, cifar10_cnn and resnet20 (a
graph, batch norm in training mode, weight decay on every weight) from fixed weights and inputs,
in an independent implementation (PyTorch, float32, on the CPU; bench_common.build_torch_model).

    /usr/bin/python3 tests/reference/make_pytorch_reference.py   # Debian's python3-torch

Weights and inputs are not stored: both sides compute them from the same counter-based generator
(SplitMix64, as core/backend/elementwise_math.hpp's uniformAt):
  u(seed, i)        = (splitmix64(seed + 0x9E3779B97F4A7C15 (i + 1)) >> 40) / 2^24, in [0, 1)
  parameter k, i    = (2 u(1000 + k, i) - 1) * b_k, b_k = float32(1 / sqrt(fan-in)) for weights,
                      0.1 for biases and batch norm's beta; batch norm's gamma 1 + that of 0.1;
                      k counts tensors in Towerbench's flat order (per layer: weights (out, in,
                      kh, kw) or (out, in), then biases; gamma, then beta)
  input of step s   = 2 u(7000 + s, j) - 1 over the batch's (n, h, w, c) elements
  label of step s   = floor(10 u(9000 + s, b)); resnet20's: 3 for every example (random labels make a
                      batch norm network's batch gradient the sum of large per-example gradients
                      that cancel, and its fp32 gradient 0.4% from the fp64 one, PyTorch's as
                      Towerbench's; one label keeps fp32 within 4e-4 of fp64 over 10 steps)
resnet20 is recorded in float64 (the exact answer, as far as a reference can give one), beside
PyTorch's own float32 run of the same steps, whose distance from it is stored as the measure of
what fp32 can do here: Towerbench (fp32) must come as close, within twice that (and 1e-4).
What is stored (tests/reference/pytorch_reference.json): the loss of every step (mean cross-entropy
plus the weight-decay terms, before the update), the norm of every final parameter tensor, the
norm of every batch norm's final moving mean and variance (in Towerbench's order), and a
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
from bench_common import build_torch_model, load_spec  # noqa: E402

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


def run(name, torch, dtype, one_label):
    spec = load_spec(os.path.join(REPO, "resources", "models"), name)
    model, decays, params = build_torch_model(spec, torch, flatten_hwc=True)
    model = model.to(dtype)
    model.train()
    with torch.no_grad():
        for k, (p, kind, fan_in) in enumerate(params):
            bound = np.float32(1.0 / math.sqrt(fan_in)) if kind == "weight" else np.float32(0.1)
            values = (np.float32(2) * uniform(1000 + k, p.numel()) - np.float32(1)) * bound
            if kind == "gamma":
                values = values + np.float32(1)
            p.copy_(torch.from_numpy(values.reshape(tuple(p.shape))).to(dtype))
    start = np.concatenate([p.detach().numpy().ravel() for p, _, _ in params]).astype(np.float64)
    c, h, w = spec["input"]
    opt = torch.optim.SGD([p for p, _, _ in params], lr=LR, momentum=MOMENTUM)
    losses = []
    for s in range(STEPS):
        x = (np.float32(2) * uniform(7000 + s, BATCH * h * w * c) - np.float32(1)).reshape(BATCH, h, w, c)
        y = np.floor(uniform(9000 + s, BATCH).astype(np.float64) * 10).astype(np.int64)
        if one_label:
            y[:] = 3
        xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).to(dtype)
        loss = torch.nn.functional.cross_entropy(model(xt), torch.from_numpy(y))
        for weight, wd in decays:
            if wd > 0:
                loss = loss + wd * (weight * weight).sum() / 2  # tf.nn.l2_loss(W) * wd
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    flat = np.concatenate([p.detach().double().numpy().ravel() for p, _, _ in params])
    statistics = []
    for bn in model.batch_norms:
        statistics += [float(np.linalg.norm(bn.running_mean.double().numpy())),
                       float(np.linalg.norm(bn.running_var.double().numpy()))]
    tensors = [float(np.linalg.norm(p.detach().double().numpy())) for p, _, _ in params]
    return losses, flat, start, tensors, statistics


def reference(name, torch, exact=False):
    """The model's steps in float32 (mnist_cnn, cifar10_cnn), or in float64 beside PyTorch's own
    float32 run (exact: resnet20)."""
    losses, flat, start, tensors, statistics = run(name, torch, torch.float64 if exact else torch.float32, exact)
    moved = float(np.linalg.norm(flat - start))
    out = {"model": name, "update_norm": moved, "losses": losses, "tensor_norms": tensors,
           "statistics_norms": statistics, "params": int(flat.size), "norm": float(np.linalg.norm(flat)),
           "sketch": sketch(flat), "precision": "float64" if exact else "float32", "one_label": exact}
    if exact:  # what float32 does on the same steps: the tolerance's measure
        l32, f32, _, t32, s32 = run(name, torch, torch.float32, exact)
        out["fp32_gap"] = {
            "loss": max(abs(a - b) / abs(b) for a, b in zip(l32, losses)),
            "weights": float(np.linalg.norm(f32 - flat) / np.linalg.norm(flat)),
            "tensor_norm": max(abs(a - b) / b for a, b in zip(t32, tensors)),
            "statistics_norm": max(abs(a - b) / max(b, 1e-3) for a, b in zip(s32, statistics))}
    return out


def main():
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    out = {"generator": __doc__.split("What is stored")[0].strip(), "torch": torch.__version__, "steps": STEPS,
           "batch": BATCH, "lr": LR, "momentum": MOMENTUM, "sketch_rows": SKETCH_ROWS,
           "models": [reference("mnist_cnn", torch), reference("cifar10_cnn", torch),
                      reference("resnet20", torch, exact=True)]}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pytorch_reference.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    for m in out["models"]:
        print(f"{m['model']} ({m['precision']}): losses {m['losses'][0]:.5f} -> {m['losses'][-1]:.5f}, "
              f"|w| {m['norm']:.4f}, moved by {m['update_norm']:.4f} ({m['update_norm'] / m['norm']:.2%})"
              + (f"; PyTorch's float32 {m['fp32_gap']}" if "fp32_gap" in m else ""))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
