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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def once(binary: str, cfg: Path) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([binary, "-c", str(cfg), "healthcheck", "--dry-run"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, env={"SLURMD_NODENAME": "bench"})
    took = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    return took * 1000


def main() -> None:
    a, b = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "ab.yaml"
        shm = Path("/dev/shm") / f"ab-{os.getpid()}"
        shm.mkdir(exist_ok=True)
        cfg.write_text(f"state_dir: {d}/state\njournal: {d}/journal.jsonl\nprometheus_textfile_dir: null\n"
                       f"filesystems:\n  - path: {d}\n  - path: {shm}\n")
        times: dict[str, list[float]] = {a: [], b: []}
        for i in range(runs + 2):
            order = (a, b) if i % 2 else (b, a)
            for binary in order:
                t = once(binary, cfg)
                if i >= 2:
                    times[binary].append(t)
        shm.rmdir()
    ma, mb = statistics.median(times[a]), statistics.median(times[b])
    print(f"A {a}: median {ma:.1f} ms (min {min(times[a]):.1f})")
    print(f"B {b}: median {mb:.1f} ms (min {min(times[b]):.1f})")
    print(f"B - A: {mb - ma:+.1f} ms over {runs} alternated rounds")


if __name__ == "__main__":
    main()
