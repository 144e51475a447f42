"""The fake NVML (tests/fake_nvml) answers with the types NVIDIA's nvidia-ml-py gives a
caller: each fake answer is compared with what the real module's own structures and
conversions make of the same values (no GPU needed: the structures are ctypes, the
conversions pure Python). And what slurm-hooks does with an answer only the real module
gives: a process whose used memory the driver cannot tell (None)."""
from __future__ import annotations

import copy
import ctypes
import importlib.util
import json
import os
from pathlib import Path

import pynvml as real
import pytest
from helpers import gpu
from test_gpu import hook_run, nvml  # noqa: F401  (the fixture)

FAKE = Path(__file__).resolve().parent / "fake_nvml" / "pynvml.py"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The fake module, loaded afresh over a scenario of two GPUs."""
    scenario = {"gpus": [gpu(0, processes=[[101, 1 << 30], [102, None]], memory_used=1 << 30),
                         gpu(1, memory_used=2 << 30, memory_reserved=1 << 20)]}
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    monkeypatch.setenv("FAKE_NVML_SCENARIO", str(path))
    spec = importlib.util.spec_from_file_location("fake_pynvml", FAKE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.nvmlInit()
    return mod


def struct_answer(cls, **values):
    """What a caller of nvidia-ml-py reads from a structure the driver filled."""
    s = cls()
    for k, v in values.items():
        setattr(s, k, v)
    return {name: getattr(s, name) for name, _ in cls._fields_}


def friendly_answer(cls, **values):
    """The process lists: a structure turned into a plain object (nvmlStructToFriendlyObject),
    usedGpuMemory None where the driver says NVML_VALUE_NOT_AVAILABLE (as the real
    nvmlDeviceGetComputeRunningProcesses_v3 does)."""
    s = cls()
    for k, v in values.items():
        setattr(s, k, v)
    obj = real.nvmlStructToFriendlyObject(s)
    if obj.usedGpuMemory == real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
        obj.usedGpuMemory = None
    return {name: getattr(obj, name) for name, _ in cls._fields_}


def types(answer: dict) -> dict:
    return {k: type(v).__name__ for k, v in answer.items()}


def test_pci_info_bus_id_is_text_as_the_real_structure_gives_it(fake):
    want = struct_answer(real.nvmlPciInfo_t, busId=b"00000000:3B:00.0")
    assert type(want["busId"]) is str                   # _PrintableStructure decodes it
    got = fake.nvmlDeviceGetPciInfo(fake.nvmlDeviceGetHandleByIndex(0))
    assert (type(got.busId), got.busId) == (str, want["busId"])


def test_memory_info_v1_and_v2_have_the_real_fields_and_types(fake):
    h = fake.nvmlDeviceGetHandleByIndex(1)
    v1 = fake.nvmlDeviceGetMemoryInfo(h)
    want = struct_answer(real.c_nvmlMemory_t, total=80 << 30, free=1, used=2)
    assert types({k: getattr(v1, k) for k in want}) == types(want)
    v2 = fake.nvmlDeviceGetMemoryInfo(h, version=fake.nvmlMemory_v2)
    want = struct_answer(real.c_nvmlMemory_v2_t, version=real.nvmlMemory_v2, total=80 << 30, reserved=1,
                         free=1, used=2)
    assert types({k: getattr(v2, k) for k in want}) == types(want)
    assert fake.nvmlMemory_v2 == real.nvmlMemory_v2


def test_running_processes_have_the_real_fields_and_a_memory_the_driver_cannot_tell_is_none(fake):
    procs = fake.nvmlDeviceGetComputeRunningProcesses_v3(fake.nvmlDeviceGetHandleByIndex(0))
    fields = [name for name, _ in real.c_nvmlProcessInfo_v3_t._fields_]
    known = friendly_answer(real.c_nvmlProcessInfo_v3_t, pid=101, usedGpuMemory=1 << 30)
    unknown = friendly_answer(real.c_nvmlProcessInfo_v3_t, pid=102,
                              usedGpuMemory=real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value)
    assert unknown["usedGpuMemory"] is None
    assert [types({k: getattr(p, k) for k in fields}) for p in procs] == [types(known), types(unknown)]
    assert [(p.pid, p.usedGpuMemory) for p in procs] == [(101, 1 << 30), (102, None)]


def test_the_fakes_constants_are_the_real_ones(fake):
    names = [n for n in dir(fake) if n.startswith("NVML_") and isinstance(getattr(fake, n), int)]
    assert len(names) > 20
    differ = {n: (getattr(fake, n), getattr(real, n, None)) for n in names if getattr(real, n, None) != getattr(fake, n)}
    assert differ == {}
    assert issubclass(fake.NVMLError, Exception) and ctypes.sizeof(real.c_nvmlMemory_t) == 24


def test_a_process_whose_memory_the_driver_cannot_tell_still_holds_the_gpu(nvml):  # noqa: F811
    """usedGpuMemory None (as nvidia-ml-py answers under WDDM, or when the driver does not
    say): the prolog still names the process and drains, and reads no memory from it."""
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][1]["processes"] = [[os.getpid(), None]]
    rec = hook_run(nvml, "prolog", sc)
    assert rec["rc"] == 1
    assert [f["summary"] for f in rec["bad"]] == [
        f"gpu 1 (0000:3c:00.0) still in use by pid {os.getpid()} before job 900 starts"]
    [f] = rec["bad"]
    assert [p for p in f["evidence"]["processes"] if p["pid"] == os.getpid()] == [{"pid": os.getpid(), "used_mib": None}]
