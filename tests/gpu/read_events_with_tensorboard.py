#!/usr/bin/env python3
"""TensorBoard's own reader on a Towerbench run folder (issue 12: "readable by the tools they
already use"). Loads every events.out.tfevents.* file of RUN_DIR with TensorBoard's
EventAccumulator, as `tensorboard --logdir` does, and checks it against the run's metrics.jsonl:
every step line's loss, accuracy and learning rate is there once at its step (a resumed run's two
files together), every evaluation's accuracy too, and the per-tower phase tags exist.
Exit 0 when all holds; one line per finding otherwise.

usage: read_events_with_tensorboard.py RUN_DIR
"""
import glob
import json
import math
import sys

import tensorboard
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def close(a, b):
    # The events hold float32; metrics.jsonl the double the engine computed.
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7) or (math.isnan(a) and math.isnan(b))


def main(run_dir):
    files = sorted(glob.glob(run_dir + "/events.out.tfevents.*"))
    if not files:
        print(f"{run_dir}: no events.out.tfevents.* file")
        return 1
    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})  # 0: keep every point
    acc.Reload()
    tags = acc.Tags()["scalars"]
    lines = [json.loads(l) for l in open(run_dir + "/metrics.jsonl") if l.strip()]
    steps = [l for l in lines if l.get("type") == "step"]
    evals = [l for l in lines if l.get("type") == "eval"]
    problems = []
    for tag, key in (("loss", "loss"), ("accuracy", "accuracy"), ("learning_rate", "lr")):
        if tag not in tags:
            problems.append(f"tag {tag} missing (tags: {sorted(tags)})")
            continue
        points = acc.Scalars(tag)
        by_step = {}
        for p in points:
            if p.step in by_step:
                problems.append(f"{tag}: step {p.step} twice")
            by_step[p.step] = p.value
        for s in steps:
            v = by_step.get(s["step"])
            if v is None:
                problems.append(f"{tag}: step {s['step']} missing")
            elif not close(v, s[key]):
                problems.append(f"{tag}: step {s['step']} is {v} in the events, {s[key]} in metrics.jsonl")
        if len(by_step) != len(steps):
            problems.append(f"{tag}: {len(by_step)} points for {len(steps)} step lines")
    for e in evals:
        tag = e["split"] + "/accuracy"
        found = [p.value for p in acc.Scalars(tag) if p.step == e["step"]] if tag in tags else []
        if not found or not close(found[-1], e["accuracy"]):
            problems.append(f"{tag} at step {e['step']}: {found} in the events, {e['accuracy']} in metrics.jsonl")
    for t in ("tower0/forward_ms", "tower0/backward_ms", "tower0/wait_ms"):
        if t not in tags:
            problems.append(f"tag {t} missing")
    print(f"TensorBoard {tensorboard.__version__} on {run_dir}: {len(files)} events file(s), {len(tags)} scalar tags, {len(steps)} steps and "
          f"{len(evals)} evaluations in metrics.jsonl; TensorBoard's reader "
          + ("agrees on every one" if not problems else f"disagrees ({len(problems)} findings)"))
    for p in problems[:20]:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
