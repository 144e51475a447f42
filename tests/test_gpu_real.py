"""The GPU check against a real NVIDIA GPU and driver (marker `gpu`).

Skipped only where no NVIDIA driver exists; run where one does (the project's GPU
machine runs them as `pytest -m gpu -s tests/test_gpu_real.py` and prints what the
driver said). They prove on real NVML what the fake can only model: every GPU read
cleanly, enumeration without MIG agreeing with the PCI bus and the driver's own minor
numbers, a process found on the GPU it was started on by PCI id (and by the prolog, by
minor number), and how long the healthy verdict takes."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from helpers import SLURM_HOOKS, run_record, write_config

from slurm_hooks.checks.gpu import driver_present
from slurm_hooks.checks._gpu_count import pci_gpus

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not driver_present(), reason="no NVIDIA driver on this machine")]


def config(tmp_path, **gpu_cfg):
    return write_config(tmp_path / "c.yaml", tmp_path, node_name="gpunode", filesystems=[{"path": str(tmp_path)}],
                        gpu={"timeout": 30, **gpu_cfg})


def check(tmp_path, **gpu_cfg):
    cfg = config(tmp_path, **gpu_cfg)
    rec = run_record(cfg, "check", "gpu", timeout=120)
    return rec, rec["findings"], rec["elapsed"]


def healthy_gpus(findings) -> list[dict]:
    return next(f for f in findings if f["status"] == "ok")["evidence"]["gpus"]


def test_real_gpus_are_read_and_healthy(tmp_path):
    rec, findings, elapsed = check(tmp_path)
    bad = [f for f in findings if f["severity"] != "ok"]
    print(f"\ngpu check: {elapsed * 1000:.0f} ms whole process; findings: {[f['summary'] for f in findings]}")
    gpus = healthy_gpus(findings)
    for g in gpus:
        print("  " + json.dumps({k: g.get(k) for k in ("index", "minor", "name", "pci", "mig", "numa_node",
                                                       "temperature", "utilization", "power_w", "sm_clock_mhz",
                                                       "memory_used_mib", "memory_reserved_mib", "clock_events",
                                                       "ecc_uncorrected_volatile", "remapped_rows",
                                                       "retired_pages_pending", "pcie_replays", "nvlink_up",
                                                       "nvlink_down", "nvlink_errors", "recovery_action",
                                                       "processes", "errors")}))
        assert g["status"] == "ok" and g["errors"] == []
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", g["pci"])
        assert g["uuid"].startswith("GPU-") and "NVIDIA" in g["name"]
        assert 5 <= g["temperature"] <= 110 and g["power_w"] > 0
        assert isinstance(g["minor"], int)
        # v2 memory: what is allocated, apart from what the driver reserves
        assert g.get("memory_reserved_mib") is not None and g["memory_used_mib"] >= 0
    assert bad == [] and rec["status"] == "healthy"
    assert next(f for f in findings if f["status"] == "ok")["summary"].startswith(
        f"gpu: {len(gpus)} GPU(s) healthy (driver ")


def test_enumeration_without_mig_agrees_with_the_bus_and_the_driver(tmp_path):
    """NVML lists every NVIDIA GPU on the PCI bus once, each with the minor number the
    driver gave it (/proc/driver/nvidia/gpus/PCI/information), whatever NVML's order."""
    _, findings, _ = check(tmp_path)
    gpus = healthy_gpus(findings)
    whole = [g for g in gpus if not g.get("mig")]
    print(f"\n{len(gpus)} GPU(s), {len(gpus) - len(whole)} in MIG mode; on the bus: {sorted(pci_gpus())}")
    assert {g["pci"] for g in gpus} == pci_gpus()
    assert len({g["minor"] for g in gpus}) == len(gpus)
    from slurm_hooks.host.nvml import _proc_minors
    driver = _proc_minors()
    if driver:
        assert {g["pci"]: g["minor"] for g in gpus} == driver
    if len(whole) < len(gpus):
        print("MIG enabled on: " + ", ".join(g["pci"] for g in gpus if g.get("mig")))


CUDA_PROCESS = r"""
import ctypes, sys, time
pci = sys.argv[1]
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0, "cuInit"
dev = ctypes.c_int()
assert cuda.cuDeviceGetByPCIBusId(ctypes.byref(dev), pci.encode()) == 0, "cuDeviceGetByPCIBusId"
ctx = ctypes.c_void_p()
assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0, "cuCtxCreate"
mem = ctypes.c_uint64()
assert cuda.cuMemAlloc_v2(ctypes.byref(mem), ctypes.c_size_t(256 << 20)) == 0, "cuMemAlloc"
print("ready", flush=True)
time.sleep(120)
"""


def test_a_process_is_found_on_the_gpu_it_runs_on_by_pci_id(tmp_path):
    """A process that opened the last GPU by PCI id (CUDA's own lookup) is listed on that
    GPU and no other; the prolog of a job given that GPU's minor number finds it."""
    _, findings, _ = check(tmp_path)
    gpus = healthy_gpus(findings)
    target = sorted(gpus, key=lambda g: g["pci"])[-1]
    (tmp_path / "cuda.py").write_text(CUDA_PROCESS)
    p = subprocess.Popen([sys.executable, str(tmp_path / "cuda.py"), target["pci"]], stdout=subprocess.PIPE,
                         text=True)
    try:
        line = p.stdout.readline().strip()
        if line != "ready":
            pytest.skip(f"no CUDA context could be made here: {p.wait(timeout=30)}")
        _, findings, _ = check(tmp_path)
        where = {g["pci"]: [q["pid"] for q in g.get("processes") or []] for g in healthy_gpus(findings)}
        print(f"\nprocess {p.pid} opened {target['pci']} (minor {target['minor']}); NVML lists: {where}")
        assert p.pid in where[target["pci"]]
        assert not [pci for pci, pids in where.items() if p.pid in pids and pci != target["pci"]]
        env = {"SLURM_JOB_ID": "900", "SLURM_JOB_GPUS": str(target["minor"]), "SLURMD_NODENAME": "gpunode",
               "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        r = subprocess.run([str(SLURM_HOOKS), "-c", str(config(tmp_path)), "prolog", "--dry-run", "--json"],
                           capture_output=True, text=True, timeout=120, env=env)
        rec = json.loads(r.stdout)
        bad = [f["summary"] for c in rec["checks"] for f in c["findings"] if f["severity"] != "ok"]
        print(f"prolog of a job given minor {target['minor']}: {bad}")
        assert r.returncode == 1
        assert bad == [f"gpu {target['index']} ({target['pci']}) still in use by pid {p.pid} before job 900 starts"]
    finally:
        p.kill()
        p.wait(timeout=30)


def test_the_healthy_verdict_time(tmp_path):
    """How long `check gpu` takes on a healthy GPU node, whole process (median of 5)."""
    check(tmp_path)
    times = []
    for _ in range(5):
        rec, findings, elapsed = check(tmp_path)
        assert (rec["rc"], rec["status"]) == (0, "healthy"), rec
        assert [f["severity"] for f in findings] == ["ok"] * len(findings) and findings, findings
        times.append(elapsed)
    times.sort()
    gpu_run = next(c for c in rec["checks"] if c["name"] == "gpu")
    print(f"\nhealthy verdict: median {times[2] * 1000:.0f} ms whole process "
          f"(min {times[0] * 1000:.0f}, max {times[-1] * 1000:.0f}); the GPU check itself {gpu_run['seconds'] * 1000:.0f} ms")
    assert gpu_run["error"] is None, gpu_run
    # 245 ms measured on an H200 (BENCHMARKS.md): 2 s is far from it and far below the
    # 60 s slurmd gives a health check; a driver that takes longer is a finding in itself.
    assert times[2] < 2.0, times


def test_fewer_gpus_than_expected_is_named(tmp_path):
    _, findings, _ = check(tmp_path)
    n = len(healthy_gpus(findings))
    rec, findings, _ = check(tmp_path, count=n + 1)
    bad = [f for f in findings if f["severity"] == "fail"]
    assert [f["summary"].split(":")[0] for f in bad] == [f"gpu count {n} < expected {n + 1}"]
