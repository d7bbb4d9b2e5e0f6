#!/usr/bin/env python3
"""The Python `safetensors` package on a Towerbench checkpoint (issue 12: "readable by the Python
safetensors package as it is"; Debian has no such package, the GPU machines do).

RUN_DIR is a run of the `mlp` model (784-512-512-10) on the Fashion-MNIST slice with a weights'
moving average, and RUN_DIR/eval.json the line `towerbench-run eval RUN_DIR` printed. For every
checkpoint in RUN_DIR/checkpoints: safetensors opens it; each tensor equals the bytes the header
names (read here with the standard library, from the published format); the metadata says
format, version, step and model. Then PyTorch runs the newest checkpoint's moving average (the
weights eval uses) on the slice's test images: its test accuracy must be Towerbench's, and its mean
loss within 1e-4 relative. Exit 0 when all holds; one line per finding otherwise.

usage: read_checkpoint_with_safetensors.py RUN_DIR IDX_DIR   (IDX_DIR: the slice, samples/fashion-mnist-slice)
"""
import glob
import gzip
import json
import struct
import sys

import numpy as np
import safetensors
import torch
from safetensors import safe_open


def raw_tensors(path):
    """name -> numpy array, straight from the file: 8-byte little-endian header length, JSON
    header, then the data with offsets relative to its start."""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        assert t["dtype"] == "F32", f"{name}: dtype {t['dtype']}"
        out[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(t["shape"])
    return out, header.get("__metadata__", {})


def idx(path):
    with gzip.open(path, "rb") as f:
        blob = f.read()
    dims = blob[3]
    shape = struct.unpack(">" + "I" * dims, blob[4:4 + 4 * dims])
    return np.frombuffer(blob[4 + 4 * dims:], dtype=np.uint8).reshape(shape)


def main(run_dir, data_dir):
    problems = []
    files = sorted(glob.glob(run_dir + "/checkpoints/*.safetensors"))
    if not files:
        print(f"{run_dir}: no checkpoints")
        return 1
    for path in files:
        raw, meta = raw_tensors(path)
        with safe_open(path, framework="np") as f:
            names = set(f.keys())
            if names != set(raw):
                problems.append(f"{path}: safetensors lists {sorted(names ^ set(raw))} differently")
            for name in names & set(raw):
                if not np.array_equal(f.get_tensor(name), raw[name]):
                    problems.append(f"{path}: {name} differs from its bytes")
            m = f.metadata() or {}
        for key, want in (("format", "towerbench-checkpoint"), ("version", "1"), ("model", "mlp")):
            if m.get(key) != want:
                problems.append(f"{path}: metadata {key} = {m.get(key)!r}, expected {want!r}")
        if m != meta:
            problems.append(f"{path}: safetensors' metadata differs from the header's")
    newest = max((p for p in files if "step-" in p), default=files[-1])
    expected = json.loads(open(run_dir + "/eval.json").read())
    with safe_open(newest, framework="pt") as f:
        w = {n: f.get_tensor(n) for n in f.keys()}
    prefix = "ema/" if expected.get("ema") else "params/"
    x = torch.from_numpy(idx(data_dir + "/t10k-images-idx3-ubyte.gz").astype(np.float32) / 255.0).reshape(-1, 784)
    y = torch.from_numpy(idx(data_dir + "/t10k-labels-idx1-ubyte.gz").astype(np.int64))
    h = x
    for layer in ("hidden1", "hidden2", "logits"):
        h = h @ w[prefix + layer + "/weights"].T + w[prefix + layer + "/biases"]
        if layer != "logits":
            h = torch.relu(h)
    accuracy = float((h.argmax(1) == y).float().mean())
    loss = float(torch.nn.functional.cross_entropy(h, y))
    if abs(accuracy - expected["test_accuracy"]) > 0.5 / len(y):
        problems.append(f"PyTorch on {prefix}: test accuracy {accuracy}, Towerbench {expected['test_accuracy']}")
    if abs(loss - expected["test_loss"]) > 1e-4 * abs(expected["test_loss"]):
        problems.append(f"PyTorch on {prefix}: test loss {loss}, Towerbench {expected['test_loss']}")
    print(f"safetensors {safetensors.__version__}, torch {torch.__version__}: {len(files)} checkpoint(s) of "
          f"{run_dir}; PyTorch on {newest.split('/')[-1]}'s {prefix} weights: test accuracy {accuracy:.4f} "
          f"(Towerbench {expected['test_accuracy']:.4f}), loss {loss:.6f} (Towerbench {expected['test_loss']:.6f}): "
          + ("agrees" if not problems else f"{len(problems)} findings"))
    for p in problems[:20]:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
