#!/usr/bin/env python3
"""The window's GPU readings against nvidia-smi (issue 33: every number the window shows is true).
The devices panel shows the engine's NVML samples, which the run's metrics file keeps as device
lines; nvidia-smi, sampling beside the window, is the independent measurement. Compares their mean
GPU utilisation and memory used over the same seconds of training (bench_gpu_vs_pytorch's
compare_utilisation: the edges trimmed, aligned by the lines' wall clock). Exit 0 when the
utilisation agrees within 5 points and the memory within 5%; one line of figures either way.

usage: compare_nvml.py METRICS.jsonl NVIDIA_SMI.csv [TRIM_SECONDS]
  NVIDIA_SMI.csv: nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 250
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
from bench_gpu_vs_pytorch import compare_utilisation, parse_smi_csv, read_device_metrics  # noqa: E402

MEMORY_GOAL = 0.05  # |window - nvidia-smi| / nvidia-smi, memory used


def main(metrics, smi_csv, trim=2.0):
    devices, elapsed = read_device_metrics(metrics)
    with open(smi_csv) as f:
        smi = parse_smi_csv(f.read())
    r = compare_utilisation(devices, elapsed, smi, launch_wall=None, trim=trim)
    if "error" in r:
        print(f"{metrics}: {r['error']}")
        return 1
    mem_diff = abs(r["engine_mem_used_mib_mean"] - r["smi_mem_used_mib_mean"]) / r["smi_mem_used_mib_mean"]
    r["mem_diff_fraction"] = mem_diff
    ok = r["goal_met"] and mem_diff <= MEMORY_GOAL
    print(json.dumps(r))
    print(f"GPU utilisation: window (NVML) {r['engine_util_mean']:.1f}% vs nvidia-smi {r['smi_util_mean']:.1f}% "
          f"({r['diff_points']:.1f} points, goal 5); memory used {r['engine_mem_used_mib_mean']:.0f} vs "
          f"{r['smi_mem_used_mib_mean']:.0f} MiB ({100 * mem_diff:.1f}%, goal 5%) over {r['window_s']:.1f} s: "
          f"{'agree' if ok else 'DISAGREE'}")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2], *(float(a) for a in sys.argv[3:])))
