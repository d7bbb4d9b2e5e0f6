#!/usr/bin/env python3
"""The price of checkpoints, timed inside one run: towerbench-run trains the default experiment
(samples/configs/default.json) with a checkpoint every N steps, and its summary says how
many checkpoints it wrote and how long their snapshots and atomic writes (fsync included) took,
beside its training time. Prints the processor, the checkpoint's size and the share.

usage: bench_checkpoint.py --binary build/app/towerbench-run [--steps 300] [--every 100]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import machine_line, machine_peak  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--config", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                     "samples", "configs", "default.json"),
                    help="the run config (default: the README's default experiment)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")
        cmd = [a.binary, "--config", a.config, "--steps", str(a.steps),
               "--checkpoint-every", str(a.every), "--checkpoint-minutes", "0", "--quiet", "--run-dir", run_dir]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        s = json.loads(out.strip().splitlines()[-1])
        ckpts = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
        size = os.path.getsize(os.path.join(run_dir, "checkpoints", ckpts[-1]))
    n = s["checkpoints"]
    per = s["checkpoint_seconds"] / n if n else 0
    share = s["checkpoint_seconds"] / s["train_seconds"] if s["train_seconds"] else 0
    print(machine_line(machine_peak(a.binary, os.cpu_count())))
    with open(a.config) as f:
        c = json.load(f)
    print(f"{c.get('model', 'mnist_cnn')}, {c.get('optimizer', 'momentum')}"
          f"{', EMA' if c.get('ema_decay', 0) else ''}: {s['steps']} steps in {s['train_seconds']:.1f} s of training, "
          f"{s['examples_per_sec']:.0f} examples/s")
    write = s["checkpoint_write_seconds"] / n if n else 0
    print(f"checkpoints: {n} of {size / 1e6:.1f} MB (one every {a.every} steps and the last); "
          f"each written in {write * 1e3:.0f} ms (fsync included) on the run folder's thread while "
          f"training went on, training held {per * 1e3:.0f} ms for its snapshot: "
          f"{share * 100:.2f}% of the training time")
    print(json.dumps({"checkpoints": n, "bytes": size, "held_seconds_each": per, "write_seconds_each": write,
                      "share": share, "train_seconds": s["train_seconds"]}))


if __name__ == "__main__":
    main()
