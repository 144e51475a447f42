"""The GPU check with NVML faked at the pynvml module boundary (tests/fake_nvml), the
kernel log as a file of /dev/kmsg records, and the hang-safe runner for real."""
from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import ROOT, SLURM_HOOKS, KernelLog, gpu, proc_state, run_record

FAKE = ROOT / "tests" / "fake_nvml"


@pytest.fixture
def nvml(tmp_path):
    class N:
        scenario = {"gpus": [gpu(i) for i in range(8)]}
        config = tmp_path / "c.yaml"
        kernel = KernelLog(tmp_path / "kmsg")

        def configure(self, **gpu_cfg):
            # Real health checks that only report: a look (`check`) keeps no state, and
            # these scenarios span runs (counters, the inventory, the kernel-log cursor).
            doc = {"state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "j.jsonl"),
                   "node_name": "gpunode", "kernel_log": str(self.kernel), "actions": {"report_only": True},
                   "filesystems": [{"path": str(tmp_path)}], "stuck_tasks": {"enabled": False},
                   "gpu": {"enabled": "true", "timeout": 2, **gpu_cfg}}
            self.config.write_text(yaml.safe_dump(doc))

        def run(self, scenario=None):
            path = tmp_path / "scenario.json"
            path.write_text(json.dumps(scenario if scenario is not None else self.scenario))
            env = {"PYTHONPATH": str(FAKE), "FAKE_NVML_SCENARIO": str(path), "PATH": "/usr/bin:/bin"}
            rec = run_record(self.config, "healthcheck", env=env, check="gpu")
            rec["bad"] = [f for f in rec["findings"] if f["severity"] != "ok"]
            return rec
    n = N()
    n.configure(count=8)
    return n


def _fake_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("fake_pynvml", FAKE / "pynvml.py")
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    return fake


def test_fake_matches_real_nvml_error_values():
    real = pytest.importorskip("pynvml")
    fake = _fake_module()
    for name in dir(fake):
        if name.startswith("NVML_") or name == "nvmlMemory_v2":
            assert hasattr(real, name), name
            assert getattr(fake, name) == getattr(real, name), name
    # Every error the fake can raise has the real name, value, message and class.
    for name in [n for n in dir(fake) if n.startswith("NVML_ERROR_")]:
        value = getattr(fake, name)
        if value in real.NVMLError._errcode_to_string:
            assert str(fake.NVMLError(value)) == str(real.NVMLError(value)), name
        assert type(fake.NVMLError(value)).__name__ == type(real.NVMLError(value)).__name__, name
        assert isinstance(fake.NVMLError(value), fake.NVMLError)
    for code in (8, 11, 14, 17, 18, 999):
        assert type(fake.NVMLError(code)).__name__ == type(real.NVMLError(code)).__name__
    assert issubclass(real.NVMLLibraryMismatchError, Exception)
    assert not issubclass(real.NVMLLibraryMismatchError, real.NVMLError)
    assert not issubclass(fake.NVMLLibraryMismatchError, fake.NVMLError)


def test_fake_functions_are_real_functions():
    """Every NVML function the fake offers exists in the real module, with the same
    parameters, so code that works on the fake calls real NVML the same way."""
    import inspect
    real = pytest.importorskip("pynvml")
    fake = _fake_module()
    for name in [n for n in dir(fake) if n.startswith("nvml") and callable(getattr(fake, n))]:
        assert hasattr(real, name), name
        fake_params = [p.kind for p in inspect.signature(getattr(fake, name)).parameters.values()]
        real_params = [p.kind for p in inspect.signature(getattr(real, name)).parameters.values()]
        assert len(fake_params) == len(real_params), name


def test_nvml_tables_are_nvmls_own():
    """The numbers nvml.py decodes are the real module's: field-value union members by
    value type, recovery actions, NVLink error counters."""
    real = pytest.importorskip("pynvml")
    from slurm_hooks.host import nvml
    members = [f[0] for f in real.c_nvmlValue_t._fields_]
    for vtype, member in nvml.VALUE_MEMBERS.items():
        name = next(n for n in dir(real) if n.startswith("NVML_VALUE_TYPE_") and getattr(real, n) == vtype
                    and n != "NVML_VALUE_TYPE_COUNT")
        assert member in members, (name, member)
    assert [nvml.VALUE_MEMBERS[i] for i in range(7)] == members
    for value, action in nvml.RECOVERY_ACTIONS.items():
        assert getattr(real, f"NVML_GPU_RECOVERY_ACTION_{action.upper()}") == value
    names = {"replay": "REPLAY", "recovery": "RECOVERY", "crc_flit": "CRC_FLIT", "crc_data": "CRC_DATA"}
    for value, counter in nvml.NVLINK_COUNTERS.items():
        assert getattr(real, f"NVML_NVLINK_ERROR_DL_{names[counter]}") == value


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
    crc = {"crc_flit": 1, "crc_data": 1}
    sc["gpus"][1].update(pcie_replays=10, nvlink_links=2, nvlink_errors=crc)
    assert nvml.run(sc)["bad"] == []
    sc["gpus"][1].update(pcie_replays=510, nvlink_errors={"crc_flit": 200, "crc_data": 200})
    rec = nvml.run(sc)
    assert sorted(f["summary"] for f in rec["bad"]) == [
        "gpu 1 (0000:3c:00.0) NVLink CRC errors +796 since the last run",
        "gpu 1 (0000:3c:00.0) PCIe replays +500 since the last run"]
    assert rec["rc"] == 0 and {f["severity"] for f in rec["bad"]} == {"warn"}


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
    from slurm_hooks.host import xid
    text = (ROOT / "docs" / "gpu.md").read_text()
    for cls in (xid.DRAIN, xid.RECORD, xid.WARN):
        row = next(line for line in text.splitlines() if line.startswith(f"| `{cls}` |"))
        listed = {int(n) for n in row.split("|")[2].split("(")[0].replace(",", " ").split()}
        assert listed == {n for n, entry in xid.TABLE.items() if entry.cls == cls}, cls
    # The source of the classes is named, in docs/gpu.md and in the code that holds them.
    source = "docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
    assert source in text.replace("\n", " ") and source in xid.__doc__.replace("\n", " ")


def hook_run(nvml, hook, scenario, gpus="1,2", **more_env):
    path = nvml.config.parent / "scenario.json"
    path.write_text(json.dumps(scenario))
    env = {"PYTHONPATH": str(FAKE), "FAKE_NVML_SCENARIO": str(path), "SLURM_JOB_ID": "900",
           "SLURMD_NODENAME": "gpunode", **more_env}
    if gpus is not None:
        env["SLURM_JOB_GPUS"] = gpus
    doc = yaml.safe_load(nvml.config.read_text())
    doc.pop("actions")                  # a hook's dry run: what it would do, not report-only
    config = nvml.config.parent / "hook.yaml"
    config.write_text(yaml.safe_dump(doc))
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(config), hook, "--dry-run", "--json"],
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
