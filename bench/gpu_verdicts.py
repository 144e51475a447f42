"""What the GPU check costs on an 8-GPU node, with NVML faked at the pynvml boundary
(tests/fake_nvml), so the figure is slurm-hooks' own work: the NVML child, the verdicts,
the state. Real NVML adds the driver's time (bench/gpu_device_check.sh on a GPU machine).

1. `slurm-hooks check gpu`, whole process, 8 healthy GPUs without NVLink, and with 18
   NVLinks each (every link's state and four counters are asked);
2. the prolog for a job given 2 GPUs, and for a job given none (no NVML call at all).
Median of 20 runs each, after 2 warm-up runs.

Run: .venv/bin/python bench/gpu_verdicts.py
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("SLURM_HOOKS_BIN") or Path(sys.executable).parent / "slurm-hooks")


def gpus(links: int) -> list[dict]:
    return [{"pci": f"00000000:{0x3b + i:02X}:00.0", "uuid": f"GPU-{i:08x}", "minor": i, "utilization": 0,
             "power_mw": 70000, "nvlink_links": links} for i in range(8)]


def timed(args: list[str], env: dict, runs: int = 20) -> float:
    times = []
    for i in range(runs + 2):
        t0 = time.perf_counter()
        subprocess.run([str(BIN), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        if i >= 2:
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d, "c.yaml")
        cfg.write_text(f"state_dir: {d}/s\njournal: {d}/j\nkernel_log: {d}/kmsg\nfilesystems:\n  - path: {d}\n"
                       "gpu:\n  enabled: 'true'\n  count: 8\n")
        Path(d, "kmsg").touch()
        base = {"PYTHONPATH": str(ROOT / "tests" / "fake_nvml"), "PATH": "/usr/bin:/bin",
                "SLURMD_NODENAME": "bench"}
        for links in (0, 18):
            sc = Path(d, f"sc{links}.json")
            sc.write_text(json.dumps({"gpus": gpus(links)}))
            ms = timed(["-c", str(cfg), "check", "gpu"], dict(base, FAKE_NVML_SCENARIO=str(sc)))
            print(f"check gpu, 8 healthy GPUs, {links} NVLinks each: median {ms:.1f} ms")
        env = dict(base, FAKE_NVML_SCENARIO=str(Path(d, "sc0.json")), SLURM_JOB_ID="1")
        ms = timed(["-c", str(cfg), "prolog", "--dry-run"], dict(env, SLURM_JOB_GPUS="1,2"))
        none = timed(["-c", str(cfg), "prolog", "--dry-run"], env)
        print(f"prolog --dry-run, job given 2 GPUs: median {ms:.1f} ms; given none: {none:.1f} ms")


if __name__ == "__main__":
    main()
