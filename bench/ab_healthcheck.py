"""A/B of the healthy health check between two installs, alternated in one run.

    .venv/bin/python bench/ab_healthcheck.py A_BIN B_BIN [runs]

Each round runs `slurm-hooks healthcheck --dry-run` once with each install (the order
swapped every round, so drift and caches hit both alike), on the same healthy machine:
every check at its defaults, two probed paths (a directory on local disk and one on
/dev/shm), state and journal in a temporary directory. Prints the median and the difference, which
is what a change of code costs every node on every interval.
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def once(binary: str, cfg: Path) -> tuple[float, float]:
    """(wall ms, CPU ms of the process and its probe children)."""
    t0 = time.perf_counter()
    p = subprocess.Popen([binary, "-c", str(cfg), "healthcheck", "--dry-run"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env={"SLURMD_NODENAME": "bench"})
    _, status, usage = os.wait4(p.pid, 0)
    took = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    assert p.returncode == 0, f"{binary}: exit {p.returncode}"
    return took * 1000, (usage.ru_utime + usage.ru_stime) * 1000


def main() -> None:
    a, b = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    with tempfile.TemporaryDirectory() as d:
        shm = Path("/dev/shm") / f"ab-{os.getpid()}"
        shm.mkdir(exist_ok=True)
        # One file each: the validated configuration is cached per file, and the two
        # versions would otherwise throw out each other's cache on every run.
        cfgs = {}
        for name, binary in (("a", a), ("b", b)):
            cfgs[binary] = Path(d) / f"{name}.yaml"
            cfgs[binary].write_text(f"state_dir: {d}/state-{name}\njournal: {d}/journal-{name}.jsonl\n"
                                    f"prometheus_textfile_dir: null\nfilesystems:\n  - path: {d}\n"
                                    f"  - path: {shm}\n")
        times: dict[str, list[float]] = {a: [], b: []}
        cpu: dict[str, list[float]] = {a: [], b: []}
        for i in range(runs + 2):
            order = (a, b) if i % 2 else (b, a)
            for binary in order:
                t, c = once(binary, cfgs[binary])
                if i >= 2:
                    times[binary].append(t)
                    cpu[binary].append(c)
        # The probes' own directory (.slurm-hooks) stays in what they probed.
        shutil.rmtree(shm)
    ma, mb = statistics.median(times[a]), statistics.median(times[b])
    print(f"A {a}: median {ma:.1f} ms (min {min(times[a]):.1f})")
    print(f"B {b}: median {mb:.1f} ms (min {min(times[b]):.1f})")
    print(f"B - A: {mb - ma:+.1f} ms wall over {runs} alternated rounds")
    ca, cb = statistics.median(cpu[a]), statistics.median(cpu[b])
    print(f"CPU (user+sys, probe children included): A {ca:.1f} ms, B {cb:.1f} ms, B - A {cb - ca:+.1f} ms")


if __name__ == "__main__":
    main()
