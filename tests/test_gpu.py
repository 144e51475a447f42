"""The GPU check with NVML faked at the pynvml module boundary (tests/fake_nvml), the
kernel log as a file of /dev/kmsg records, and the hang-safe runner for real."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from helpers import ROOT, SLURM_HOOKS, KernelLog, gpu, proc_state

FAKE = ROOT / "tests" / "fake_nvml"


@pytest.fixture
def nvml(tmp_path):
    class N:
        scenario = {"gpus": [gpu(i) for i in range(8)]}
        config = tmp_path / "c.yaml"
        kernel = KernelLog(tmp_path / "kmsg")

        def configure(self, **gpu_cfg):
            doc = {"state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "j.jsonl"),
                   "node_name": "gpunode", "kernel_log": str(self.kernel), "gpu": {"enabled": "true", "timeout": 2, **gpu_cfg}}
            self.config.write_text(yaml.safe_dump(doc))

        def run(self, scenario=None):
            path = tmp_path / "scenario.json"
            path.write_text(json.dumps(scenario if scenario is not None else self.scenario))
            env = {"PYTHONPATH": str(FAKE), "FAKE_NVML_SCENARIO": str(path), "PATH": "/usr/bin:/bin"}
            t0 = time.monotonic()
            r = subprocess.run([str(SLURM_HOOKS), "-c", str(self.config), "check", "gpu", "--json"],
                               capture_output=True, text=True, timeout=60, env=env)
            assert r.returncode in (0, 1), r.stderr
            rec = json.loads(r.stdout)
            rec["rc"], rec["elapsed"] = r.returncode, time.monotonic() - t0
            rec["findings"] = [f for c in rec["checks"] for f in c["findings"]]
            rec["bad"] = [f for f in rec["findings"] if f["severity"] != "ok"]
            return rec
    n = N()
    n.configure(count=8)
    return n


def test_fake_matches_real_nvml_error_values():
    real = pytest.importorskip("pynvml")
    import importlib.util
    spec = importlib.util.spec_from_file_location("fake_pynvml", FAKE / "pynvml.py")
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    for name in dir(fake):
        if name.startswith("NVML_") and hasattr(real, name):
            assert getattr(fake, name) == getattr(real, name), name
    for value in (fake.NVML_ERROR_GPU_IS_LOST, fake.NVML_ERROR_RESET_REQUIRED, fake.NVML_ERROR_NOT_SUPPORTED):
        assert str(fake.NVMLError(value)) == str(real.NVMLError(value))


def test_healthy_gpus(nvml):
    rec = nvml.run()
    assert rec["rc"] == 0 and rec["bad"] == []
    assert rec["findings"][0]["summary"] == "gpu: 8 GPU(s) healthy (driver 550.54.15)"


def test_unsupported_queries_are_not_failures(nvml):
    sc = copy.deepcopy(nvml.scenario)
    for g in sc["gpus"]:
        g["errors"] = {q: "NOT_SUPPORTED" for q in ("nvmlDeviceGetTemperature", "nvmlDeviceGetRemappedRows",
                                                   "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetPcieReplayCounter",
                                                   "nvmlDeviceGetFieldValues", "nvmlDeviceGetTotalEccErrors")}
    assert nvml.run(sc)["bad"] == []


@pytest.mark.parametrize("change,summary", [
    ({"errors": {"*": "GPU_IS_LOST"}}, "gpu 3 (0000:3e:00.0) lost (NVML: GPU is lost)"),
    ({"errors": {"nvmlDeviceGetPowerUsage": "RESET_REQUIRED"}}, "gpu 3 (0000:3e:00.0) needs a reset (NVML: GPU requires restart)"),
    ({"ecc_uncorrected": 2}, "gpu 3 (0000:3e:00.0) 2 uncorrectable ECC errors since driver load"),
    ({"remapped_rows": [0, 1, 0, 1]}, "gpu 3 (0000:3e:00.0) row remapping failed"),
    ({"remapped_rows": [0, 1, 1, 0]}, "gpu 3 (0000:3e:00.0) row remapping pending (needs a GPU reset)"),
    ({"retired_pending": 1}, "gpu 3 (0000:3e:00.0) retired pages pending (needs a GPU reset)"),
    ({"recovery_action": 2}, "gpu 3 (0000:3e:00.0) driver asks for recovery: node_reboot"),
])
def test_gpu_failures_drain(nvml, change, summary):
    nvml.run()                                    # the inventory learns where gpu 3 sits
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][3].update(change)
    rec = nvml.run(sc)
    assert rec["rc"] == 1
    assert [f["summary"] for f in rec["bad"]] == [summary]
    assert rec["bad"][0]["reason"] == summary


@pytest.mark.parametrize("change,summary", [
    ({"temperature": 95}, "gpu 2 (0000:3d:00.0) temperature 95C > 87C"),
    ({"clock_events": 0x8 | 0x40 | 0x1}, "gpu 2 (0000:3d:00.0) clocks held down: hw_slowdown, hw_thermal_slowdown"),
])
def test_warnings_do_not_drain(nvml, change, summary):
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][2].update(change)
    rec = nvml.run(sc)
    assert rec["rc"] == 0 and [f["summary"] for f in rec["bad"]] == [summary]
    assert rec["bad"][0]["severity"] == "warn"


def test_counter_growth_between_runs_warns(nvml):
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][1].update(pcie_replays=10, nvlink_links=2, nvlink_errors=1)
    assert nvml.run(sc)["bad"] == []
    sc["gpus"][1].update(pcie_replays=510, nvlink_errors=200)
    got = sorted(f["summary"] for f in nvml.run(sc)["bad"])
    assert got == ["gpu 1 (0000:3c:00.0) NVLink errors +1592 since the last run",
                   "gpu 1 (0000:3c:00.0) PCIe replays +500 since the last run"]


def test_missing_gpu_is_named(nvml):
    assert nvml.run()["rc"] == 0                 # the inventory learns eight GPUs
    sc = copy.deepcopy(nvml.scenario)
    del sc["gpus"][5]
    rec = nvml.run(sc)
    assert rec["rc"] == 1
    assert [f["summary"] for f in rec["bad"]] == ["gpu count 7 < expected 8: missing 0000:40:00.0 (was gpu 5)"]


def test_library_not_found(nvml):
    rec = nvml.run({"init": "LIBRARY_NOT_FOUND", "gpus": []})
    assert rec["rc"] == 1 and rec["bad"][0]["summary"] == "gpu: NVML init failed: LIBRARY_NOT_FOUND"
    nvml.configure(enabled="auto")
    if not os.path.exists("/dev/nvidiactl") and not os.path.exists("/proc/driver/nvidia/version"):
        rec = nvml.run({"init": "LIBRARY_NOT_FOUND", "gpus": []})
        assert rec["rc"] == 0 and rec["findings"][0]["status"] == "not_applicable"


def test_driver_that_never_answers(nvml):
    sc = copy.deepcopy(nvml.scenario)
    sc["hang"] = {"call": "nvmlDeviceGetPowerUsage", "index": 1}
    rec = nvml.run(sc)
    assert rec["rc"] == 1 and rec["elapsed"] < 2 + 1.0
    assert [f["summary"] for f in rec["bad"]] == \
        ["gpu driver unresponsive: no answer to gpu 1: nvmlDeviceGetPowerUsage within 2s"]


def test_driver_stuck_in_the_kernel_is_remembered(nvml, swallow_mount):
    sc = copy.deepcopy(nvml.scenario)
    sc.update(hang={"call": "nvmlInit"}, hang_path=str(Path(swallow_mount.path) / "x"))
    first = nvml.run(sc)
    assert first["bad"][0]["summary"] == "gpu driver unresponsive: no answer to nvmlInit within 2s"
    pid = first["bad"][0]["evidence"]["pid"]
    assert proc_state(pid) == "D"
    second = nvml.run(sc)
    assert second["bad"][0]["detail"].startswith("still hung since ")
    assert second["bad"][0]["evidence"]["pid"] == pid and second["elapsed"] < 1.5


def test_xid_events_from_the_kernel_log(nvml):
    nvml.configure(count=8, xid_actions={43: "warn"})
    nvml.kernel.write("NVRM: Xid (PCI:0000:3e:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
               "NVRM: Xid (PCI:0000:3b:00): 13, pid=99, name=train, Graphics Exception: ESR 0x1",
               "NVRM: Xid (PCI:0000:3c:00): 43, pid=99, name=train, Ch 00000010",
               "NVRM: Xid (PCI:0000:3d:00): 4242, pid=1, something new")
    rec = nvml.run()
    xids = {f["evidence"]["xid"]: f for f in rec["findings"] if f["status"].startswith("xid_")}
    assert xids[79]["severity"] == "fail" and xids[79]["summary"] == "gpu 3 (0000:3e:00.0) Xid 79: GPU has fallen off the bus"
    assert xids[79]["reason"] == "gpu 3 (0000:3e:00.0) Xid 79"
    assert xids[13]["severity"] == "ok" and xids[13]["status"] == "xid_record"
    assert xids[43]["severity"] == "warn", "configured override"
    assert xids[4242]["severity"] == "warn" and "not in the table" in xids[4242]["summary"]
    assert rec["rc"] == 1
    again = nvml.run()
    assert not [f for f in again["findings"] if f["status"].startswith("xid_")], "each event counts once"


def test_lost_gpu_with_its_xid_is_one_line(nvml):
    nvml.run()
    nvml.kernel.write("NVRM: Xid (PCI:0000:3e:00): 79, pid=1234, GPU has fallen off the bus.")
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][3]["errors"] = {"*": "GPU_IS_LOST"}
    for _ in range(2):                      # the Xid is remembered for later runs
        rec = nvml.run(sc)
        assert [f["reason"] for f in rec["bad"]] == ["gpu 3 (0000:3e:00.0) lost: Xid 79"]


def test_readme_xid_table_is_the_code_table():
    from slurm_hooks import xid
    text = (ROOT / "README.md").read_text()
    for cls in (xid.DRAIN, xid.RECORD):
        row = next(line for line in text.splitlines() if line.startswith(f"| `{cls}` |"))
        listed = {int(n) for n in row.split("|")[2].split("(")[0].replace(",", " ").split()}
        assert listed == {n for n, (c, _) in xid.TABLE.items() if c == cls}, cls


def hook_run(nvml, hook, scenario, gpus="1,2"):
    path = nvml.config.parent / "scenario.json"
    path.write_text(json.dumps(scenario))
    env = {"PYTHONPATH": str(FAKE), "FAKE_NVML_SCENARIO": str(path), "SLURM_JOB_ID": "900",
           "SLURM_JOB_GPUS": gpus, "SLURMD_NODENAME": "gpunode"}
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(nvml.config), hook, "--dry-run", "--json"],
                       capture_output=True, text=True, timeout=60, env=env)
    rec = json.loads(r.stdout)
    rec["rc"] = r.returncode
    rec["bad"] = [f for c in rec["checks"] for f in c["findings"] if f["severity"] != "ok"]
    return rec


def test_prolog_refuses_gpus_still_used_or_holding_memory(nvml):
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][1]["processes"] = [[os.getpid(), 1 << 30]]          # a process from before
    sc["gpus"][2]["memory_used"] = 12 << 30                         # memory with no process
    sc["gpus"][5]["errors"] = {"*": "GPU_IS_LOST"}                  # not this job's GPU
    rec = hook_run(nvml, "prolog", sc)
    assert rec["rc"] == 1 and rec["job"] == "900"
    assert sorted(f["summary"] for f in rec["bad"]) == [
        f"gpu 1 (0000:3c:00.0) still in use by pid {os.getpid()} before job 900 starts",
        "gpu 2 (0000:3d:00.0) holds 12288 MiB with no process on it (left by an earlier job)"]
    assert [a["kind"] for a in rec["actions"]] == ["drain"] and rec["actions"][0]["outcome"] == "dry-run"
    healthy = hook_run(nvml, "prolog", nvml.scenario)
    assert healthy["rc"] == 0 and healthy["bad"] == []


def test_epilog_finds_gpu_memory_left_behind(nvml):
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][2]["memory_used"] = 3 << 30
    sc["gpus"][1]["processes"] = [[os.getpid(), 1 << 30]]     # someone else's process: fine after a job
    rec = hook_run(nvml, "epilog", sc)
    assert [f["summary"] for f in rec["bad"]] == \
        ["gpu 2 (0000:3d:00.0) holds 3072 MiB with no process on it (left by an earlier job)"]
