#!/usr/bin/env python3
"""Checks gpu_kernel_profile.py without a GPU: its reading of Nsight Compute's CSV, the per-step
difference of two runs, and a whole run of the script on a CPU tower through a stand-in `ncu`
that runs the command and writes a CSV of made-up kernels (as the real one does with
--log-file), whose algorithm-like kernel differs between the short and the long run.

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
# kernel named by the run's length (a search that picked differently).
FAKE_NCU = r'''#!/usr/bin/env python3
import subprocess, sys
a = sys.argv[1:]
assert "--nvtx-exclude" in a and "gpu__time_duration.sum" in a, a
log = a[a.index("--log-file") + 1]
cmd = a[a.index("--log-file") + 2:]
steps = int(cmd[cmd.index("--steps") + 1])
subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
row = '"{i}","1","tb","h","{k}","1","7","(1,1,1)","(1,1,1)","0","9.0","s","gpu__time_duration.sum","{u}","{v}"\n'
with open(log, "w") as f:
    f.write("==PROF== Connected to process 1\n" + HEADER + "\n")
    i = 0
    for k in range(40):
        f.write(row.format(i=i, k="search_trial", u="nsecond", v=1000 + k)); i += 1
    for s in range(steps):
        for k, u, v in (("conv", "nsecond", "12,345"), ("round", "usecond", "2"), ("algo_%d" % (steps > 10), "nsecond", "5000")):
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
    # 3. A whole run through the stand-in.
    with tempfile.TemporaryDirectory() as tmp:
        ncu = os.path.join(tmp, "ncu")
        with open(ncu, "w") as f:
            f.write(FAKE_NCU)
        os.chmod(ncu, 0o755)
        out = os.path.join(tmp, "kernels.json")
        p = subprocess.run([sys.executable, os.path.join(HERE, "gpu_kernel_profile.py"), "--binary", binary, "--ncu", ncu,
                            "--models", "tiny_mlp", "--precisions", "fp32", "--plan", "--towers cpu:0",
                            "--mnist-data", "synthetic:blobs", "--batch", "32", "--wall-steps", "20", "--out-json", out],
                           capture_output=True, text=True, timeout=300)
        print(p.stdout[-2000:], p.stderr[-2000:])
        check(p.returncode == 0, f"exit status {p.returncode}")
        check("WARNING: the two profiled runs ran different kernels (2: algo_0, algo_1)" in p.stdout,
              "the differing kernels are named")
        rec = json.loads(open(out).read().splitlines()[0]) if os.path.exists(out) else {}
        k = rec.get("kernels", {})
        check(abs(k.get("conv", {}).get("us", 0) - 12.345) < 1e-9 and k.get("conv", {}).get("launches") == 1.0,
              f"conv per step: {k.get('conv')}")
        check(abs(k.get("round", {}).get("us", 0) - 2.0) < 1e-9, f"round per step (us in the CSV): {k.get('round')}")
        check("search_trial" not in k, "set-up kernels cancel")
        check(rec.get("kernels_differing_between_runs") == ["algo_0", "algo_1"], f"differing: {rec.get('kernels_differing_between_runs')}")
        check(rec.get("wall_step_us", 0) > 0, "the unprofiled run's step time")
    print("gpu_kernel_profile checks:", "all passed" if not failures else f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
