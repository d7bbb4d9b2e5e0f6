#!/usr/bin/env python3
"""Two runs of one configuration, step by step (issue 33: deterministic algorithms by default, so
two runs give bit-equal losses). Reads each run folder's metrics.jsonl and compares every step's
loss and every tower's loss bit for bit (the engine writes doubles to 17 significant digits, which
read back to the same double). Prints one line: how many steps agree, the first that does not, and each run's
steady examples per second from its summary. Exit 0 when every step agrees (or, with --differ-ok,
always: the nondeterministic configuration is measured, not required to differ).

usage: same_losses.py RUN_A RUN_B [--differ-ok]
"""
import json
import sys


def losses(run):
    out = {}
    with open(f"{run}/metrics.jsonl") as f:
        for line in f:
            if '"type":"step"' not in line.replace(" ", ""):
                continue
            rec = json.loads(line)
            out[rec["step"]] = (repr(rec["loss"]), tuple(repr(t.get("loss")) for t in rec.get("towers", [])))
    return out


def speed(run):
    with open(f"{run}/summary.json") as f:
        s = json.load(f)
    return s.get("steady_examples_per_sec") or s.get("examples_per_sec")


def main(a, b, differ_ok):
    la, lb = losses(a), losses(b)
    steps = sorted(set(la) | set(lb))
    differing = [s for s in steps if la.get(s) != lb.get(s)]
    first = f"; first at step {differing[0]}: {la.get(differing[0])} vs {lb.get(differing[0])}" if differing else ""
    print(f"{len(steps) - len(differing)} of {len(steps)} steps' losses bit-equal{first}; "
          f"{speed(a):,.0f} and {speed(b):,.0f} examples/s")
    return 0 if differ_ok or (steps and not differing) else 1


if __name__ == "__main__":
    args = [x for x in sys.argv[1:] if x != "--differ-ok"]
    if len(args) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(args[0], args[1], "--differ-ok" in sys.argv))
