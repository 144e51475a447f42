"""The GPU part of `job-report` against a real NVIDIA GPU and driver (marker `gpu`):
a real process holding GPU memory is found by its pid, with its GPU's utilisation.
Skipped only where no NVIDIA driver exists."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from slurm_hooks.checks.gpu import driver_present
from slurm_hooks.host.runner import Runner, Task
from slurm_hooks.views.jobreport import NodeReport, TaskInfo, _gpus, _nvml

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not driver_present(), reason="no NVIDIA driver on this machine")]

# Holds 256 MiB of GPU memory through the driver API alone (no PyTorch needed).
HOLD = """
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), 256 << 20) == 0
print("ready", flush=True)
time.sleep(120)
"""


def gpus_held(pids: list[int], timeout: float) -> tuple[dict[int, list[dict]], list[str]]:
    """pid -> the GPUs it holds, and job-report's notes: its NVML child and its reading
    of the answer, as `collect` runs them for a job's tasks."""
    outcome = Runner().run([Task("jobreport:nvml", _nvml, (), timeout)])["jobreport:nvml"]
    report = NodeReport(node="", job="")
    infos = {p: TaskInfo(pid=p, ppid=0, comm="", uid=-1, step=None, local_task=None) for p in pids}
    _gpus(report, infos, outcome)
    return {p: i.gpus for p, i in infos.items()}, report.notes


def test_a_real_process_and_its_gpu(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 20
        while True:
            held, notes = gpus_held([p.pid], timeout=30)
            if held[p.pid] or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        print(f"\nGPUs held by pid {p.pid}: {held[p.pid]}; notes: {notes}")
        assert notes == []
        [g] = held[p.pid]
        assert g["index"] == 0 and g["status"] == "ok"
        assert isinstance(g["utilization"], int) and 0 <= g["utilization"] <= 100
        assert g["used_mib"] is None or g["used_mib"] >= 256
    finally:
        p.kill()
        p.wait()
