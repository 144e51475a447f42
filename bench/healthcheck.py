"""Benchmarks for the health check (figures go to BENCHMARKS.md).

1. Whole-process wall time of `slurm-hooks healthcheck --dry-run` on a healthy machine,
   3 probed paths, median of 20 runs (Python start-up included). Target: < 100 ms.
2. Time to verdict with 5 hung mounts and a 5 s deadline. Target: < 5.5 s.

Run as root from the repository:
    SLURM_HOOKS_BIN=/opt/slurm-hooks/bin/slurm-hooks .venv/bin/python bench/healthcheck.py
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
# The installed command to measure (a non-editable install, as on a node).
BIN = Path(os.environ.get("SLURM_HOOKS_BIN") or Path(sys.executable).parent / "slurm-hooks")


def timed(argv, env):
    t0 = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    return time.perf_counter() - t0, r.returncode


def healthy(tmp: Path, runs: int = 20) -> None:
    dirs = [tmp / "scratch", Path("/dev/shm") / f"bench-{os.getpid()}", tmp / "home"]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    cfg = tmp / "bench.yaml"
    cfg.write_text(f"state_dir: {tmp}/state\njournal: {tmp}/journal.jsonl\nfilesystems:\n"
                   + "".join(f"  - path: {d}\n" for d in dirs))
    env = {"SLURMD_NODENAME": "bench"}   # what slurmd gives HealthCheckProgram
    cases = [
        ("healthcheck --dry-run, 3 paths, YAML config", [str(BIN), "-c", str(cfg), "healthcheck", "--dry-run"]),
        ("healthcheck --dry-run, shipped default config", [str(BIN), "-c", str(ROOT / "conf" / "slurm-hooks.yaml"),
                                                          "healthcheck", "--dry-run"]),
    ]
    for label, argv in cases:
        times = []
        for i in range(runs + 2):
            t, rc = timed(argv, env)
            assert rc == 0, f"{label}: exit {rc}"
            if i >= 2:                      # two warm-up runs
                times.append(t * 1000)
        print(f"{label}: median {statistics.median(times):.1f} ms, "
              f"min {min(times):.1f}, max {max(times):.1f} over {runs} runs (target < 100 ms)")
    os.rmdir(dirs[1])


def hung(tmp: Path, n: int = 5, deadline: float = 5.0) -> None:
    from mounts_fixtures import start_fuse
    mounts = [start_fuse(tmp / f"hung{i}", "unanswered" if i % 2 else "swallow") for i in range(n)]
    try:
        cfg = tmp / "hung.yaml"
        cfg.write_text(f"state_dir: {tmp}/state-hung\njournal: {tmp}/journal.jsonl\n"
                       f"filesystem_defaults:\n  timeout: {deadline}\n  warn_after: 1\nfilesystems:\n"
                       + "".join(f"  - path: {m.path}\n" for m in mounts))
        t, rc = timed([str(BIN), "-c", str(cfg), "healthcheck", "--dry-run"], {"SLURMD_NODENAME": "bench"})
        assert rc == 1
        print(f"time to verdict, {n} hung mounts, {deadline:g} s deadline: {t:.2f} s (target < {deadline + 0.5:g} s)")
    finally:
        for m in mounts:
            m.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        healthy(Path(d))
        hung(Path(d))
