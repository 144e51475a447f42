"""Stuck children over a soak of a hung mount (figures go to BENCHMARKS.md).

One FUSE mount whose server reads every request and answers none, with its connection
set to wait uninterruptibly (`stuck` mode: callers in D, still in D after SIGKILL, as on
a dead GPFS), probed by the health check (deadline 1 s), and one task stuck in D on it
(a reader outside any job, so the diagnosis looks at it every run: its /proc files, its
descriptors, the walk of its path). `slurm-hooks healthcheck` runs N times back to back,
each as slurmd would start it (no PATH, only SLURMD_NODENAME); no Slurm is reachable,
so its actions are spooled.

Every child a run leaves behind is re-parented to this process (a child subreaper), so
after each run its children, less the FUSE server and the victim, are exactly the
slurm-hooks children still alive: the probe killed in D, and anything else stuck. The
promise: at most one stuck child per suspect mount, however many runs go by.

Run as root from the repository:
    .venv/bin/python bench/soak.py [--runs 400]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
BIN = Path(os.environ.get("SLURM_HOOKS_BIN") or Path(sys.executable).parent / "slurm-hooks")
PR_SET_CHILD_SUBREAPER = 36

VICTIM = """
import os, sys
fd = os.open(sys.argv[1] + "/ckpt.pt", os.O_RDONLY)      # never returns
"""


def children() -> list[int]:
    out = []
    for tid in os.listdir("/proc/self/task"):
        try:
            out += [int(p) for p in Path(f"/proc/self/task/{tid}/children").read_text().split()]
        except OSError:
            pass
    return out


def state_of(pid: int) -> str:
    # `status`, never `stat`: the one file of another process shown not to block.
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                return line.split()[1]
    except (OSError, IndexError):
        pass
    return "?"


def comm_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=400)
    args = ap.parse_args()
    from mounts_fixtures import start_fuse
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit("prctl(PR_SET_CHILD_SUBREAPER) failed")
    tmp = Path(tempfile.mkdtemp(prefix="soak-"))
    m = start_fuse(tmp / "gpfs", "stuck")
    victim = subprocess.Popen([sys.executable, "-c", VICTIM, m.path], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while state_of(victim.pid) != "D":
            if time.monotonic() > deadline:
                raise SystemExit("the victim never got stuck")
            time.sleep(0.05)
        cfg = tmp / "soak.yaml"
        cfg.write_text(f"node_name: soak\nstate_dir: {tmp}/state\njournal: {tmp}/journal.jsonl\nsyslog: false\n"
                       f"slurm: {{bin_dir: {tmp}/no-slurm-here}}\ngpu: {{enabled: 'false'}}\n"
                       f"filesystems:\n  - path: {m.path}\n    timeout: 1\n"
                       "stuck_tasks: {grace: 1, sample_window: 0.3}\n")
        keep = {m.proc.pid, victim.pid}
        counts, durations, kinds = [], [], {}
        worst_at = 0
        for i in range(args.runs):
            t0 = time.perf_counter()
            r = subprocess.run([str(BIN), "-c", str(cfg), "healthcheck"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={"SLURMD_NODENAME": "soak"}, timeout=60)
            durations.append(time.perf_counter() - t0)
            assert r.returncode == 1, f"run {i}: exit {r.returncode} (expected unhealthy)\n{r.stderr}"
            reap()
            left = [p for p in children() if p not in keep and state_of(p) not in ("Z", "?")]
            for p in left:
                kinds[(comm_of(p), state_of(p))] = kinds.get((comm_of(p), state_of(p)), 0) + 1
            counts.append(len(left))
            if len(left) > counts[worst_at]:
                worst_at = i
            if (i + 1) % 50 == 0:
                print(f"  {i + 1} runs: {len(left)} stuck children now, at most {max(counts)}", flush=True)
        print(f"{args.runs} health-check runs against one hung mount with one task stuck on it:")
        print(f"  stuck children of slurm-hooks after a run: at most {max(counts)} (first at run {worst_at + 1}), "
              f"last {counts[-1]}, mean {statistics.mean(counts):.2f}")
        print(f"  what they were (comm, state: run-count): {kinds}")
        import json
        last = [r for r in map(json.loads, (tmp / "journal.jsonl").read_text().splitlines())
                if r.get("event") == "run"][-1]
        seen = [f["status"] for c in last["checks"] for f in c["findings"]
                if c["name"] == "stuck_tasks" and f.get("evidence", {}).get("pid") == victim.pid]
        print(f"  the last run's finding on the stuck task: {seen}")
        print(f"  run wall time: median {statistics.median(durations):.2f} s, max {max(durations):.2f} s")
    finally:
        os.killpg(victim.pid, signal.SIGKILL)
        m.close()              # aborts the connection: every caller leaves D and dies
        deadline = time.monotonic() + 10
        while [p for p in children() if state_of(p) not in ("Z", "?")] and time.monotonic() < deadline:
            reap()
            time.sleep(0.1)
        reap()


if __name__ == "__main__":
    main()
