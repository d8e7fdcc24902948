#!/usr/bin/python3
"""Time lost per failure: fault-tolerant training beside today's restart path.

Runs, interleaved, `runs` times each (3 ranks under lockstep-run, one thread
each, the same steps):
  plain         the trainer, no checkpoints, no fault tolerance;
  ft            lockstep-run --fault_tolerant, trainer --fault_tolerant;
  ft_kill       the same, worker rank 2 SIGKILLed (from outside) once rank 0
                has printed step `kill_at`; the launcher restarts it alone and
                it heals from a live peer;
  restart       lockstep-run --max_restarts=1, trainer with --checkpoint_dir,
                --checkpoint_every=100 and --resume (today's path);
  restart_kill  the same, worker rank 2 SIGKILLed once rank 0 has printed
                step `kill_at`: the whole group restarts from the newest
                checkpoint.
Every run prints rank 0's step line every step (--log_every=1).
Prints each scenario's median wall time, the time lost per failure (kill
minus no kill, the medians of the paired differences) and the overhead of
fault tolerance without a failure (ft over plain).

    /usr/bin/python3 tools/bench/compare_fault_tolerance.py --trainer PATH --launcher PATH \\
        --model mlp --steps 400 --kill_at 150 --runs 3

Standard library only.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def find_worker(trainer, rank):
    """The pid of the trainer process with RANK=rank (not the guard)."""
    name = os.path.basename(trainer)
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.path.basename(os.readlink(f"/proc/{pid}/exe")) != name:
                continue
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env and b"LOCKSTEP_ELASTIC_JOIN=1" not in env:
            return int(pid)
    return None


def run(args, scenario, tmp):
    work = tempfile.mkdtemp(dir=tmp)
    ft = scenario.startswith("ft")
    cmd = [args.launcher, "--standalone", "--nproc_per_node=3", "--monitor_interval=0.1"]
    if ft:
        cmd += ["--fault_tolerant", "--max_restarts=1"]
    elif scenario.startswith("restart"):
        cmd += ["--max_restarts=1"]
    # Every scenario prints rank 0's step line every step (the progress the
    # kill waits for), so they print alike.
    cmd += [args.trainer, f"--max_steps={args.steps}", "--dataset=synthetic", f"--batch_size={args.batch}",
            "--synthetic_train_size=60000", "--synthetic_test_size=200", "--epochs=100", "--log_every=1"]
    cmd += args.trainer_args
    if ft:
        cmd += ["--fault_tolerant"]
    elif scenario.startswith("restart"):
        cmd += [f"--checkpoint_dir={work}/ckpt", "--checkpoint_every=100", "--resume"]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, bufsize=1)
    killed = False
    said, tail = [], []
    step_line = re.compile(r"step (\d+)  loss")
    for line in p.stdout:
        tail = (tail + [line])[-40:]
        if "worker 2 lost" in line or "rejoined" in line or "restarting the group" in line:
            said.append(line.strip())
        m = step_line.search(line)
        if scenario.endswith("_kill") and not killed and m and int(m.group(1)) >= args.kill_at:
            pid = find_worker(args.trainer, 2)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                killed = True
    p.wait()
    wall = time.monotonic() - start
    if p.returncode != 0 or (scenario.endswith("_kill") and not killed):
        sys.exit(f"{scenario}: exit {p.returncode}, killed {killed}\n{''.join(tail)}")
    return wall, said


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--launcher", required=True)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--kill_at", type=int, default=150)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("trainer_args", nargs="*")
    args = ap.parse_args()
    scenarios = ["plain", "ft", "ft_kill", "restart", "restart_kill"]
    walls = {s: [] for s in scenarios}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.runs):
            for s in scenarios:
                wall, said = run(args, s, tmp)
                walls[s].append(wall)
                print(json.dumps({"run": r, "scenario": s, "wall_s": round(wall, 3), "said": said}), flush=True)
    med = {s: statistics.median(v) for s, v in walls.items()}
    lost_ft = statistics.median(k - n for k, n in zip(walls["ft_kill"], walls["ft"]))
    lost_restart = statistics.median(k - n for k, n in zip(walls["restart_kill"], walls["restart"]))
    overhead = statistics.median(f / p - 1 for f, p in zip(walls["ft"], walls["plain"]))
    print(json.dumps({"median_wall_s": {s: round(v, 3) for s, v in med.items()},
                      "lost_per_failure_s": {"fault_tolerant": round(lost_ft, 3), "restart": round(lost_restart, 3)},
                      "ft_overhead_of_run": round(overhead, 4), "steps": args.steps, "kill_at": args.kill_at,
                      "load": open("/proc/loadavg").read().split()[0]}))


if __name__ == "__main__":
    main()
