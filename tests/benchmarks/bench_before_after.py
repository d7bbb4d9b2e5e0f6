#!/usr/bin/env python3
"""Speed of two builds of towerbench-run on the same machine in the same run (before and after a
change), the way to show a refactoring costs nothing:

    python3 tests/benchmarks/bench_before_after.py --before /tmp/before/build/app/towerbench-run \
        --after build/app/towerbench-run [--models mlp,mnist_cnn,cifar10_cnn] [--towers 1,2] [--repeats 5]

For every model and tower count it runs the two binaries alternately, `repeats` times each
(before, after, before, after, ...), so that drift in the machine's speed hits both alike; each
run trains warmup + steps steps at global batch 128 on all cores and is timed over its last
`steps` steps from the metrics file. It prints the processor, a table of the median examples/sec
of each build and their ratio (after / before), and one JSON line per configuration. The exit
status is non-zero only when a run fails.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

from bench_common import REPO, bench_towerbench, machine_line, machine_peak, prepare_model, print_table, report


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="towerbench-run built before the change")
    ap.add_argument("--after", required=True, help="towerbench-run built after the change")
    ap.add_argument("--models", default="mlp,mnist_cnn,cifar10_cnn")
    ap.add_argument("--towers", default="1,2", help="tower counts (CPU towers), comma-separated")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()

    records, failures, rows = [], [], []
    print(f"# {machine_line(machine_peak(args.after, args.threads))}")
    print(f"# batch {args.batch}; {args.warmup} + {args.steps} steps per run; "
          f"{args.repeats} alternating repeats per build; load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        cifar_dir = None
        for model in [m for m in args.models.split(",") if m]:
            _, data, cifar_dir = prepare_model(os.path.join(REPO, "resources", "models"), model, tmp, cifar_dir)
            for n in [int(t) for t in args.towers.split(",") if t]:
                towers = ",".join(f"cpu:{i}" for i in range(n))
                runs = {"before": [], "after": []}
                try:
                    for r in range(args.repeats):
                        for which in ("before", "after"):
                            res = bench_towerbench(os.path.abspath(getattr(args, which)), model, data, args.batch,
                                                   args.steps, args.warmup, args.threads, tmp,
                                                   extra_args=["--towers", towers], tag=f"{which}{n}")
                            runs[which].append(res["examples_per_sec"])
                except Exception as e:  # noqa: BLE001 - reported; the other configurations still run
                    failures.append(f"{model} x {n}: {e}")
                    continue
                before, after = statistics.median(runs["before"]), statistics.median(runs["after"])
                rows.append([model, str(n), f"{before:,.0f}", f"{after:,.0f}", f"{after / before:.3f}"])
                records.append({"model": model, "towers": n, "before": runs["before"], "after": runs["after"],
                                "median_before": before, "median_after": after, "ratio": after / before})
                print(f"# {model} x {n}: before {before:,.0f}, after {after:,.0f} ex/s", flush=True)
    print()
    print_table(["model", "towers", "before ex/s", "after ex/s", "after / before"], rows)
    return report(records, failures)


if __name__ == "__main__":
    sys.exit(main())
