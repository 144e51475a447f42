"""What the GPU check adds to a healthy run on a machine without GPUs (target < 10 ms).

Two measurements:
1. in process: the GPU check's own work when no NVIDIA driver is present (two stat()
   calls, no import of pynvml), median of 1000;
2. whole process: `slurm-hooks healthcheck --dry-run` with `gpu.enabled: auto` against
   `gpu.enabled: false`, runs alternated, median of 30 each.

Run: SLURM_HOOKS_BIN=/opt/slurm-hooks/bin/slurm-hooks .venv/bin/python bench/gpu_absent.py
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
sys.path.insert(0, str(ROOT))
BIN = Path(os.environ.get("SLURM_HOOKS_BIN") or Path(sys.executable).parent / "slurm-hooks")


def in_process() -> None:
    from slurm_hooks.checks import Context
    from slurm_hooks.checks.gpu import GpuCheck, driver_present
    from slurm_hooks.checks._config import default_config as Config
    assert not driver_present(), "this benchmark is for machines without an NVIDIA driver"
    ctx = Context(Config(), "bench", None, None)
    times = []
    for _ in range(1000):
        t0 = time.perf_counter()
        check = GpuCheck()
        check.findings(ctx, {}) if not check.tasks(ctx) else None
        times.append((time.perf_counter() - t0) * 1e6)
    print(f"GPU check in process, no driver: median {statistics.median(times):.1f} us")


def whole_process(runs: int = 30) -> None:
    with tempfile.TemporaryDirectory() as d:
        for mode in ("auto", "false"):
            Path(d, f"{mode}.yaml").write_text(f"state_dir: {d}/s\njournal: {d}/j\nfilesystems:\n  - path: {d}\n"
                                               f"gpu:\n  enabled: '{mode}'\n")
        times = {"auto": [], "false": []}
        for i in range(runs + 2):
            for mode in ("auto", "false"):
                t0 = time.perf_counter()
                subprocess.run([str(BIN), "-c", f"{d}/{mode}.yaml", "healthcheck", "--dry-run"],
                               stdout=subprocess.DEVNULL, check=True)
                if i >= 2:
                    times[mode].append((time.perf_counter() - t0) * 1000)
        a, b = statistics.median(times["auto"]), statistics.median(times["false"])
        print(f"healthcheck --dry-run, gpu auto (no driver): median {a:.1f} ms; gpu off: {b:.1f} ms; "
              f"difference {a - b:+.1f} ms (target < 10 ms)")


if __name__ == "__main__":
    in_process()
    whole_process()
