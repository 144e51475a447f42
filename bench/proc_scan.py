"""Cost of one scan of /proc for stuck tasks with 10,000 threads present.

Spawns 100 processes of 100 threads each (idle, in S), then times the stuck-task
check's scan (the part every health check pays, in a child of its own): listing
every /proc/PID/task and reading each thread's stat. Target on the 2-core machine: < 100 ms.

Run as root: .venv/bin/python bench/proc_scan.py
"""
from __future__ import annotations

import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from slurm_hooks.checks import Context  # noqa: E402
from slurm_hooks.checks.stuck_tasks import StuckTasksCheck  # noqa: E402
from slurm_hooks.checks._config import default_config as Config  # noqa: E402
from slurm_hooks.core.state import StateStore  # noqa: E402
from slurm_hooks.host import procfs  # noqa: E402
from slurm_hooks.host.runner import Runner  # noqa: E402


def spawn(processes: int, threads: int) -> list[int]:
    pids = []
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:
            threading.stack_size(64 * 1024)
            ev = threading.Event()
            for _ in range(threads - 1):
                threading.Thread(target=ev.wait, daemon=True).start()
            signal.pause()
            os._exit(0)
        pids.append(pid)
    return pids


def main(runs: int = 15) -> None:
    base = procfs.thread_count()
    pids = spawn(100, 100)
    try:
        while procfs.thread_count() < base + 10000:
            time.sleep(0.1)
        print(f"threads on the system: {procfs.thread_count()}")
        with tempfile.TemporaryDirectory() as d:
            cfg = Config(state_dir=d)
            times = []
            for i in range(runs + 2):
                state = StateStore(d)
                ctx = Context(cfg, "bench", state, Runner(state))
                check = StuckTasksCheck()
                t0 = time.perf_counter()
                # The scan runs in its own child (procfs.scan_child): fork, scan, answer.
                ctx.runner.run(check.tasks(ctx))
                t = (time.perf_counter() - t0) * 1000
                if i >= 2:
                    times.append(t)
            print(f"stuck-task scan (parallel over {os.cpu_count()} CPUs): median {statistics.median(times):.1f} ms, "
                  f"min {min(times):.1f}, max {max(times):.1f} over {runs} runs (target < 100 ms)")
            serial = []
            for _ in range(5):
                t0 = time.perf_counter()
                procfs.scan_pids(procfs.list_pids())
                serial.append((time.perf_counter() - t0) * 1000)
            print(f"the same scan in one process: median {statistics.median(serial):.1f} ms")
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        for pid in pids:
            os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
