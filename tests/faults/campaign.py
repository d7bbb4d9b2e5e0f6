#!/usr/bin/python3
"""Fault campaign: runs of 2-4 processes on this machine (mpirun, shared memory and loopback),
each hit by one fault at a random moment drawn from a seed, then resumed to its end.

    python3 tests/faults/campaign.py BUILD/app/towerbench-run [--seed N] [--cases N] [--out FILE.json]

Strategies: the variables on the host (2 processes), replicated under Adam (2), averaging every 5
under Adam (2), one parameter-server process under Adam (3: a server, 2 workers), an asynchronous
parameter-server process with one worker (2), a stage per process, 1f1b under Adam with a moving
average of the weights (2), 2 stages inside each of 2 processes, gpipe (2: the hybrid), and
2 stages x 2 replicas, a process each, 1f1b under Adam (4: the hybrid with a stage per process).
Faults, each at a random time while the run trains (a checkpoint every 25 steps, 1 per step for
the checkpoint-write faults):
  kill-rank        SIGKILL of a random process
  kill-chief-ckpt  SIGKILL of the chief while checkpoints are written every step (the case
                   counts as "mid-write" where a temporary checkpoint file is left behind)
  kill-mpirun      SIGKILL of mpirun itself
  stop-rank        SIGSTOP of a random process (a hang: the others must end the run)
  kill-in-resume   SIGKILL of a random process in the first half second of a resume (loading,
                   restoring) of a run killed before
For each: the seconds from the fault until every process has ended, mpirun's exit status, the
newest checkpoint (it must load: the resume verifies every tensor's CRC-32C), and the resumed run's
final loss and test accuracy (measured with the moving average where the run keeps one) against
the same strategy trained without a fault: equal where the strategy is deterministic (all here:
the asynchronous server has one worker). Goal: no process left after
10 s, no lost or unloadable checkpoint, no fault that ends with exit status 0.
Open MPI refuses root without OMPI_ALLOW_RUN_AS_ROOT*; this script sets them for its own runs.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = "idx:" + os.path.join(REPO, "samples", "fashion-mnist-slice")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl="self,vader", OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")
MPIRUN = ["mpirun", "--bind-to", "none", "-np"]
STEPS = 400
# Adam at the SGD runs' --lr 0.05 kills the mlp (every run ends at loss 2.308, chance accuracy, and
# a resume that lost its state would end there too): Adam strategies train at 0.001.
ADAM = ["--optimizer", "adam", "--lr", "0.001"]
STRATEGIES = {
    "host": (2, []),
    "replicated-adam": (2, ["--variables", "replicated", "--reduce", "allreduce", *ADAM]),
    "averaging-adam": (2, ["--variables", "replicated", "--reduce", "allreduce", "--average-every", "5", *ADAM]),
    "ps-sync-adam": (3, ["--ps-tasks", "1", *ADAM]),
    "ps-async-1worker": (2, ["--ps-tasks", "1", "--update", "async", *ADAM]),
    "stages-1f1b-adam-ema": (2, ["--stages", "2", "--stage-per-process", "true", "--pipeline", "1f1b",
                                 "--micro-batches", "2", *ADAM, "--ema-decay", "0.9"]),
    "hybrid-gpipe": (2, ["--stages", "2", "--pipeline", "gpipe", "--micro-batches", "2"]),
    "stage-grid-1f1b-adam": (4, ["--stages", "2", "--stage-per-process", "true", "--stage-replicas", "2",
                                 "--pipeline", "1f1b", "--micro-batches", "2", *ADAM]),
}
FAULTS = ["kill-rank", "kill-chief-ckpt", "kill-mpirun", "stop-rank", "kill-in-resume"]


def command(binary, processes, extra, folder, every):
    return [*MPIRUN, str(processes), binary, "--model", "mlp", "--data", DATA, "--validation", "0",
            "--threads", "1", "--quiet", "--towers", "cpu:0", "--batch", "64", "--lr", "0.05",
            "--steps", str(STEPS), "--checkpoint-every", str(every), "--run-dir", folder, *extra]


def resume_command(binary, processes, folder):
    return [*MPIRUN, str(processes), binary, "--resume", folder, "--steps", str(STEPS), "--quiet"]


def ranks_of(folder):
    """pid by rank of the processes training `folder` (Open MPI gives each its rank in the environment)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            if folder.encode() not in cmdline or b"mpirun" in cmdline.split(b"\0")[0]:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        rank = [e for e in env if e.startswith(b"OMPI_COMM_WORLD_RANK=")]
        if rank:
            out[int(rank[0].split(b"=")[1])] = int(entry)
    return out


def alive(pids):
    left = []
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                if f.read().split()[2] not in ("Z", "X"):
                    left.append(p)
        except OSError:
            pass
    return left


def last_loss(folder):
    """The last step, its loss and the run's test accuracy (its summary's)."""
    loss, step = None, None
    with open(os.path.join(folder, "metrics.jsonl")) as f:
        for line in f:
            if '"type":"step"' in line:
                m = json.loads(line)
                loss, step = m["loss"], m["step"]
    with open(os.path.join(folder, "summary.json")) as f:
        accuracy = json.load(f).get("test_accuracy")
    return step, loss, accuracy


def checkpoints(folder):
    d = os.path.join(folder, "checkpoints")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def wait_for_step(folder, step, limit):
    """Until the run's metrics reach `step` (the chief writes them), at most `limit` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with open(os.path.join(folder, "metrics.jsonl"), "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - 4000))
                tail = f.read().decode(errors="replace")
            steps = [int(x.split(",")[0]) for x in tail.split('"step":')[1:] if x.split(",")[0].isdigit()]
            if steps and max(steps) >= step:
                return True
        except (OSError, ValueError):
            pass
        time.sleep(0.01)
    return False


def strike(binary, processes, cmd, folder, fault, rng, at_start=False):
    """Starts cmd, waits for a random step (at_start: a random moment in its first half second,
    once every process exists: loading, restoring), strikes; returns (seconds to stop, exit
    status, note)."""
    mpirun = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    at = rng.randrange(30, STEPS - 60)
    delay = rng.uniform(0, 0.5)
    note = f"{delay:.2f} s after the start" if at_start else f"at step {at}"
    if not at_start and not wait_for_step(folder, at, 60):
        mpirun.kill()
        return None, mpirun.wait(), "never reached step %d: %s" % (at, mpirun.stderr.read()[-300:])
    deadline = time.monotonic() + 20
    while len(ranks_of(folder)) < processes and time.monotonic() < deadline and mpirun.poll() is None:
        time.sleep(0.005)
    time.sleep(delay if at_start else 0)
    ranks = ranks_of(folder)
    if len(ranks) != processes:
        mpirun.kill()
        return None, mpirun.wait(), f"found ranks {sorted(ranks)} of {processes}"
    chief = 1 if "--ps-tasks" in cmd else 0
    victim = chief if fault == "kill-chief-ckpt" else rng.randrange(processes)
    t0 = time.monotonic()
    if fault == "kill-mpirun":
        os.kill(mpirun.pid, signal.SIGKILL)
        note += ", mpirun"
    elif fault == "stop-rank":
        os.kill(ranks[victim], signal.SIGSTOP)
        note += f", rank {victim} stopped"
    else:
        os.kill(ranks[victim], signal.SIGKILL)
        note += f", rank {victim}"
    try:
        code = mpirun.wait(timeout=30)
    except subprocess.TimeoutExpired:
        code = None
    pids = list(ranks.values())
    left, deadline = alive(pids), time.monotonic() + 30
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = alive(pids)
    took = time.monotonic() - t0
    for p in alive(pids):  # a hang: end it so that the campaign goes on
        os.kill(p, signal.SIGKILL)
        note += f", pid {p} LEFT RUNNING"
    if code is None:
        mpirun.kill()
        code = mpirun.wait()
    if fault == "stop-rank":
        try:
            os.kill(ranks[victim], signal.SIGCONT)
        except OSError:
            pass
    err = mpirun.stderr.read()
    lines = err.splitlines()  # the cause first: mpirun's or the watchdog's, then the others' stops
    said = [ln for ln in lines if "noticed" in ln or "not been heard" in ln or "launcher" in ln] + \
        [ln for ln in lines if ln.startswith("towerbench-run")]
    note += "; " + (said[0][:200] if said else "nothing said")
    return took, code, note


def resume(binary, processes, folder, timeout=120):
    p = subprocess.run(resume_command(binary, processes, folder), env=ENV, capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    tmp = tempfile.mkdtemp(prefix="tb-faults-")
    results, reference = [], {}
    with open("/proc/cpuinfo") as f:
        model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    print(f"processor: {model}; seed {args.seed}, {args.cases} cases")
    try:
        for name, (processes, extra) in STRATEGIES.items():
            folder = os.path.join(tmp, "ref-" + name)
            p = subprocess.run(command(args.binary, processes, extra, folder, 25), env=ENV, capture_output=True,
                               text=True, timeout=300)
            if p.returncode:
                print(f"reference {name} failed ({p.returncode}): {p.stderr[-400:]}")
                sys.exit(2)
            reference[name] = last_loss(folder)
            print(f"reference {name}: step {reference[name][0]} loss {reference[name][1]:.9g} "
                  f"test accuracy {reference[name][2]}")
        names = list(STRATEGIES)
        for k in range(args.cases):
            name, fault = names[k % len(names)], FAULTS[(k // len(names)) % len(FAULTS)]
            processes, extra = STRATEGIES[name]
            folder = os.path.join(tmp, f"case{k:03d}")
            every = 1 if fault == "kill-chief-ckpt" else 25
            case = {"case": k, "strategy": name, "fault": fault}
            took, code, note = strike(args.binary, processes, command(args.binary, processes, extra, folder, every),
                                      folder, "kill-rank" if fault == "kill-in-resume" else fault, rng)
            case.update(seconds_to_stop=took, exit=code, note=note)
            if fault == "kill-chief-ckpt":
                case["mid_write"] = any(not n.endswith(".safetensors") or ".tmp" in n for n in checkpoints(folder))
            if fault == "kill-in-resume" and took is not None:
                # A resume killed before it ends: another fault, then the resume that finishes.
                t2, c2, n2 = strike(args.binary, processes, resume_command(args.binary, processes, folder), folder,
                                    "kill-rank", rng, at_start=True)
                case.update(struck_resume_seconds_to_stop=t2, struck_resume_exit=c2, struck_resume_note=n2)
            case["checkpoints"] = len([n for n in checkpoints(folder) if n.startswith("step-")])
            rc, err = resume(args.binary, processes, folder) if took is not None else (None, "")
            case["resume_exit"] = rc
            if rc:
                case["resume_error"] = err.strip().splitlines()[-1][:300] if err.strip() else ""
            step, loss, accuracy = last_loss(folder) if rc == 0 else (None, None, None)
            case["final_step"], case["final_loss"], case["test_accuracy"] = step, loss, accuracy
            case["equal"] = rc == 0 and (step, loss, accuracy) == reference[name]
            bad = []
            if took is None or took > 10 or "LEFT RUNNING" in note:
                bad.append("hang")
            if code == 0:
                bad.append("silent success")
            if fault == "kill-in-resume" and (case.get("struck_resume_seconds_to_stop") or 99) > 10:
                bad.append("hang in resume")
            if fault == "kill-in-resume" and case.get("struck_resume_exit") == 0:
                bad.append("silent success of the struck resume")
            if rc != 0:
                bad.append("no loadable checkpoint")
            elif not case["equal"]:
                bad.append("final loss or test accuracy differs")
            case["bad"] = bad
            results.append(case)
            print(f"{k:3d} {name:20s} {fault:16s} stop {took if took is None else round(took, 2)} s, exit {code}, "
                  f"resume {rc}, final {loss} {'EQUAL' if case['equal'] else 'DIFFERENT'}"
                  f"{' BAD: ' + ', '.join(bad) if bad else ''} ({note})", flush=True)
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    stops = sorted(c["seconds_to_stop"] for c in results if c["seconds_to_stop"] is not None)
    summary = {
        "processor": model, "seed": args.seed, "cases": len(results),
        "bad": sum(1 for c in results if c["bad"]),
        "hangs": sum(1 for c in results if "hang" in c["bad"] or "hang in resume" in c["bad"]),
        "silent_successes": sum(1 for c in results if any(b.startswith("silent success") for b in c["bad"])),
        "unloadable": sum(1 for c in results if "no loadable checkpoint" in c["bad"]),
        "different": sum(1 for c in results if "final loss or test accuracy differs" in c["bad"]),
        "mid_write": sum(1 for c in results if c.get("mid_write")),
        "seconds_to_stop_median": stops[len(stops) // 2] if stops else None,
        "seconds_to_stop_max": stops[-1] if stops else None,
    }
    by_fault = {}
    for fault in FAULTS + ["struck-resume"]:
        key, code = ("struck_resume_seconds_to_stop", "struck_resume_exit") if fault == "struck-resume" else \
            ("seconds_to_stop", "exit")
        cases = [c for c in results if c["fault"] == ("kill-in-resume" if fault == "struck-resume" else fault)]
        times = sorted(c[key] for c in cases if c.get(key) is not None)
        if times:
            by_fault[fault] = {"cases": len(cases), "seconds_median": round(times[len(times) // 2], 2),
                               "seconds_max": round(times[-1], 2), "exits": sorted({c.get(code) for c in cases})}
    summary["by_fault"] = by_fault
    print(json.dumps(summary))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": summary, "cases": results}, f, indent=1)
    sys.exit(1 if summary["bad"] else 0)


if __name__ == "__main__":
    main()
