#!/usr/bin/env python3
"""Checks gpu_kernel_profile.py without a GPU: its reading of Nsight Compute's CSV, the per-step
difference of two runs, the roofline's arithmetic, and whole runs of the script on a CPU tower
through a stand-in `ncu` that runs the command and writes a CSV of made-up kernels (as the real
one does with --log-file), whose algorithm-like kernel is the same in both runs (figures and a
roofline come out), differs in every pair (refused, no record), or differs in the first pair only
(profiled again, then figures).

    test_gpu_kernel_profile.py TOWERBENCH_RUN
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_kernel_profile as kp  # noqa: E402

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')

# The stand-in: 40 set-up kernels, then per step conv (12.345 us), round (2 us) and an algorithm
# kernel: algo_0 in every run (FAKE_ALGO=same), named by the run's length in every long run
# (differ: a search that picked differently), or only in the first long run (once).
FAKE_NCU = r'''#!/usr/bin/env python3
import os, subprocess, sys
a = sys.argv[1:]
assert "--nvtx-exclude" in a and "gpu__time_duration.sum" in a, a
log = a[a.index("--log-file") + 1]
cmd = a[a.index("--log-file") + 2:]
steps = int(cmd[cmd.index("--steps") + 1])
subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
mode, algo = os.environ["FAKE_ALGO"], 0
if steps > 10 and mode != "same":
    seen = os.path.join(os.path.dirname(sys.argv[0]), "long_runs")
    n = int(open(seen).read()) if os.path.exists(seen) else 0
    open(seen, "w").write(str(n + 1))
    algo = 1 if mode == "differ" or n == 0 else 0
row = '"{i}","1","tb","h","{k}","1","7","(1,1,1)","(1,1,1)","0","9.0","s","gpu__time_duration.sum","{u}","{v}"\n'
with open(log, "w") as f:
    f.write("==PROF== Connected to process 1\n" + HEADER + "\n")
    i = 0
    for k in range(40):
        f.write(row.format(i=i, k="search_trial", u="nsecond", v=1000 + k)); i += 1
    for s in range(steps):
        for k, u, v in (("conv", "nsecond", "12,345"), ("round", "usecond", "2"), ("algo_%d" % algo, "nsecond", "5000")):
            f.write(row.format(i=i, k=k, u=u, v=v)); i += 1
'''.replace("HEADER", repr(HEADER))

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def main():
    binary = sys.argv[1]
    # 1. The CSV: units, thousands separators, messages skipped; nothing to read is an error.
    text = "\n".join(["==PROF== Connected", HEADER,
                      '"0","1","p","h","k1","1","7","b","g","0","9.0","s","gpu__time_duration.sum","usecond","1,500"',
                      '"1","1","p","h","k1","1","7","b","g","0","9.0","s","gpu__time_duration.sum","nsecond","500"',
                      '"2","1","p","h","k2","1","7","b","g","0","9.0","s","other__metric","nsecond","9"'])
    got = kp.parse_ncu_csv(text, "sample")
    check(got == {"k1": (2, 1_500_500.0)}, f"parse_ncu_csv: {got}")
    for bad in ("==PROF== nothing profiled", HEADER + '\n"0","1","p","h","k","1","7","b","g","0","9.0","s","x","nsecond","1"'):
        try:
            kp.parse_ncu_csv(bad, "bad")
            check(False, f"parse_ncu_csv accepted {bad[:40]!r}")
        except ValueError as e:
            check("bad:" in str(e), f"error names its origin: {e}")
    # 2. Set-up cancels; per-step launches and time.
    steps = kp.per_step({"setup": (40, 4e4), "conv": (5, 5e4)}, {"setup": (40, 4e4), "conv": (15, 15e4)}, 5, 15)
    check(steps == {"conv": (1.0, 1e4)}, f"per_step: {steps}")
    # 3. The roofline: 2e9 FLOPs a step in 1,000 us of wall time (800 in kernels) on an H100 SXM.
    r = kp.roofline(2e9, 1000.0, 800.0, kp.PEAKS_TFLOPS["h100-sxm"])
    check(abs(r["tflops_wall"] - 2.0) < 1e-12 and abs(r["tflops_kernels"] - 2.5) < 1e-12, f"roofline TFLOP/s: {r}")
    check(abs(r["share_of_fp32_peak"] - 2.0 / 66.9) < 1e-12 and abs(r["share_of_bf16_peak"] - 2.0 / 989.4) < 1e-12,
          f"roofline shares: {r}")
    check(kp.device_of("NVIDIA H100 80GB HBM3") == "h100-sxm" and kp.device_of("NVIDIA H100 PCIe") == "h100-pcie"
          and kp.device_of("NVIDIA H200") == "h200" and kp.device_of("NVIDIA A100-SXM4-80GB") is None, "device_of")
    # 4. Whole runs through the stand-in.
    for mode in ("same", "differ", "once"):
        with tempfile.TemporaryDirectory() as tmp:
            ncu = os.path.join(tmp, "ncu")
            with open(ncu, "w") as f:
                f.write(FAKE_NCU)
            os.chmod(ncu, 0o755)
            out = os.path.join(tmp, "kernels.json")
            p = subprocess.run([sys.executable, os.path.join(HERE, "gpu_kernel_profile.py"), "--binary", binary, "--ncu", ncu,
                                "--models", "tiny_mlp", "--precisions", "fp32", "--plan", "--towers cpu:0",
                                "--mnist-data", "synthetic:blobs", "--batch", "32", "--wall-steps", "20", "--device", "h100-sxm",
                                "--out-json", out], capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, FAKE_ALGO=mode))
            print(f"--- {mode}:", p.stdout[-1500:], p.stderr[-1500:])
            rec = json.loads(open(out).read().splitlines()[0]) if os.path.exists(out) and os.path.getsize(out) else {}
            if mode == "differ":
                check(p.returncode == 1, f"differ: exit status {p.returncode}")
                check("refused: the two profiled runs chose different algorithms in 3 attempts (2 kernels differ: algo_0, algo_1)"
                      in p.stdout, "differ: the refusal names the kernels")
                check(not rec, "differ: no record")
                continue
            check(p.returncode == 0, f"{mode}: exit status {p.returncode}")
            check(("attempt 1 of 3" in p.stdout) == (mode == "once"), f"{mode}: profiled again only where the first pair differed")
            k = rec.get("kernels", {})
            check(abs(k.get("conv", {}).get("us", 0) - 12.345) < 1e-9 and k.get("conv", {}).get("launches") == 1.0,
                  f"{mode}: conv per step: {k.get('conv')}")
            check(abs(k.get("round", {}).get("us", 0) - 2.0) < 1e-9, f"{mode}: round per step (us in the CSV): {k.get('round')}")
            check("search_trial" not in k, f"{mode}: set-up kernels cancel")
            check(rec.get("wall_step_us", 0) > 0, f"{mode}: the unprofiled run's step time")
            flops = rec.get("flops_per_step", 0)
            check(flops > 0 and abs(rec.get("tflops_wall", 0) - flops / (rec["wall_step_us"] * 1e-6) / 1e12) < 1e-9,
                  f"{mode}: TFLOP/s over the wall step")
            check("roofline (h100-sxm" in p.stdout and "share_of_bf16_peak" in rec, f"{mode}: the roofline table")
    print("gpu_kernel_profile checks:", "all passed" if not failures else f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
