"""The GPU check against a real NVIDIA GPU and driver (marker `gpu`).

Skipped only where no NVIDIA driver exists; run where one does (the project's GPU
machine runs them as `pytest -m gpu -s tests/test_gpu_real.py` and prints what the
driver said)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest
import yaml

from helpers import SLURM_HOOKS
from slurm_hooks.checks.gpu import driver_present

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not driver_present(), reason="no NVIDIA driver on this machine")]


def check(tmp_path, **gpu_cfg):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "j"),
                                   "node_name": "gpunode", "gpu": {"timeout": 30, **gpu_cfg}}))
    t0 = time.monotonic()
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(cfg), "check", "gpu", "--json"],
                       capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    assert r.returncode in (0, 1), r.stderr
    rec = json.loads(r.stdout)
    return rec, [f for c in rec["checks"] for f in c["findings"]], elapsed


def test_real_gpus_are_read_and_healthy(tmp_path):
    rec, findings, elapsed = check(tmp_path)
    bad = [f for f in findings if f["severity"] != "ok"]
    print(f"\ngpu check: {elapsed * 1000:.0f} ms whole process; findings: {[f['summary'] for f in findings]}")
    ok = next(f for f in findings if f["status"] == "ok")
    gpus = ok["evidence"]["gpus"]
    for g in gpus:
        print("  " + json.dumps({k: g.get(k) for k in ("index", "name", "pci", "temperature", "utilization",
                                                       "power_w", "sm_clock_mhz", "clock_events", "ecc_uncorrected_volatile",
                                                       "remapped_rows", "retired_pages_pending", "pcie_replays",
                                                       "nvlink_errors", "recovery_action", "processes")}))
        assert g["status"] == "ok"
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", g["pci"])
        assert g["uuid"].startswith("GPU-") and "NVIDIA" in g["name"]
        assert 5 <= g["temperature"] <= 110 and g["power_w"] > 0
    assert bad == [] and rec["status"] == "healthy"
    assert ok["summary"].startswith(f"gpu: {len(gpus)} GPU(s) healthy (driver ")


def test_a_process_using_the_gpu_is_listed(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    code = ("import torch, time, sys; x = torch.ones(1 << 28, device='cuda'); torch.cuda.synchronize(); "
            "print('ready', flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        _, findings, _ = check(tmp_path)
        ok = next(f for f in findings if f["status"] == "ok")
        pids = [q["pid"] for g in ok["evidence"]["gpus"] for q in g.get("processes") or []]
        print(f"\nprocess {p.pid} on the GPU; NVML lists pids {pids}")
        assert p.pid in pids
    finally:
        p.kill()
        p.wait(timeout=30)


def test_fewer_gpus_than_expected_is_named(tmp_path):
    _, findings, _ = check(tmp_path)
    n = len(next(f for f in findings if f["status"] == "ok")["evidence"]["gpus"])
    rec, findings, _ = check(tmp_path, count=n + 1)
    bad = [f for f in findings if f["severity"] == "fail"]
    assert [f["summary"].split(":")[0] for f in bad] == [f"gpu count {n} < expected {n + 1}"]
