"""What the prolog adds to a healthy job start (target < 200 ms).

1. The prolog alone: whole-process wall time of `slurm-hooks-prolog` with the
   environment slurmd gives it, healthy node, 2 probed paths, median of 20.
2. End to end on a real Slurm cluster on loopback (tests/slurmcluster.py): wall time of
   `srun -w n1 true` with and without Prolog=slurm-hooks-prolog, alternated, median of
   15 each; the difference is what a user's job start pays.

Run as root: .venv/bin/python bench/prolog.py
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
BIN = Path(os.environ.get("SLURM_HOOKS_BIN") or Path(sys.executable).parent / "slurm-hooks").parent


def prolog_alone(tmp: Path, runs: int = 20) -> Path:
    (tmp / "scratch").mkdir()
    cfg = tmp / "n1.yaml"
    cfg.write_text(f"state_dir: {tmp}/state\njournal: {tmp}/journal.jsonl\nfilesystems:\n"
                   f"  - path: {tmp}/scratch\n  - path: /dev/shm\n")
    env = {"SLURM_HOOKS_CONFIG": str(cfg), "SLURMD_NODENAME": "n1", "SLURM_JOB_ID": "1",
           "SLURM_JOB_UID": "0", "SLURM_SCRIPT_CONTEXT": "prolog_slurmd"}
    times = []
    for i in range(runs + 2):
        t0 = time.perf_counter()
        subprocess.run([str(BIN / "slurm-hooks-prolog")], env=env, stdout=subprocess.DEVNULL, check=True)
        if i >= 2:
            times.append((time.perf_counter() - t0) * 1000)
    print(f"slurm-hooks-prolog alone, healthy, 2 paths: median {statistics.median(times):.1f} ms, "
          f"min {min(times):.1f}, max {max(times):.1f} over {runs} runs")
    return cfg


def end_to_end(tmp: Path, runs: int = 15) -> None:
    from slurmcluster import SlurmCluster
    cluster = SlurmCluster(tmp / "cluster").start()
    try:
        conf = tmp / "conf"
        conf.mkdir()
        (conf / "n1.yaml").write_text((tmp / "n1.yaml").read_text())
        wrapper = tmp / "prolog"
        wrapper.write_text(f'#!/bin/sh\nSLURM_HOOKS_CONFIG="{conf}/$SLURMD_NODENAME.yaml" exec {BIN}/slurm-hooks-prolog\n')
        wrapper.chmod(0o755)
        times = {"with": [], "without": []}
        for i in range(runs + 1):
            for mode in ("without", "with"):
                cluster.reconfigure(f"Prolog={wrapper}\n" if mode == "with" else "")
                t0 = time.perf_counter()
                subprocess.run(["srun", "-w", "n1", "-N1", "true"], env=cluster.env, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                if i >= 1:
                    times[mode].append((time.perf_counter() - t0) * 1000)
        a, b = statistics.median(times["with"]), statistics.median(times["without"])
        print(f"srun -w n1 true on the test cluster: median {a:.0f} ms with the prolog, {b:.0f} ms without: "
              f"{a - b:+.0f} ms (target < 200 ms)")
    finally:
        cluster.stop()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        prolog_alone(Path(d))
        end_to_end(Path(d))
