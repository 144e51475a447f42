"""The GPU part of the prolog and epilog: the job's GPUs found by minor number, UUID or
PCI id (never NVML's index), none checked for a job given none, memory left behind
measured without what the driver reserves, GPUs shared on purpose. NVML faked at the
pynvml boundary; processes are real."""
from __future__ import annotations

import copy
import os
import shutil
import subprocess
import time

import pytest
from helpers import poll
from test_gpu import hook_run, nvml  # noqa: F401 (a fixture)

from slurm_hooks.core.model import JobInfo


def summaries(rec):
    return sorted(f["summary"] for f in rec["bad"])


def reversed_minors(nvml):
    """NVML's index order is not the minor-number order: here it is the reverse."""
    sc = copy.deepcopy(nvml.scenario)
    for i, g in enumerate(sc["gpus"]):
        g["minor"] = 7 - i
    return sc


# --- 11. the job's GPUs by minor number ------------------------------------------------------
def test_prolog_checks_the_gpus_slurm_gave_by_minor_number(nvml):
    sc = reversed_minors(nvml)
    sc["gpus"][1]["processes"] = [[os.getpid(), 1 << 30]]      # minor 6: not the job's
    sc["gpus"][6]["memory_used"] = 12 << 30                     # minor 1: the job's
    rec = hook_run(nvml, "prolog", sc, gpus="1,2")
    assert rec["rc"] == 1
    assert summaries(rec) == ["gpu 6 (0000:41:00.0) holds 12288 MiB with no process on it (left by an earlier job)"]
    ok = next(f for c in rec["checks"] for f in c["findings"] if f["status"] == "memory_held")
    assert ok["evidence"]["minor"] == 1


def test_prolog_finds_gpus_by_uuid_and_pci_id(nvml):
    sc = reversed_minors(nvml)
    sc["gpus"][4]["processes"] = [[os.getpid(), 1 << 30]]
    by_uuid = hook_run(nvml, "prolog", sc, gpus=None, CUDA_VISIBLE_DEVICES="GPU-00000004")
    assert summaries(by_uuid) == [f"gpu 4 (0000:3f:00.0) still in use by pid {os.getpid()} before job 900 starts"]
    by_pci = hook_run(nvml, "prolog", sc, gpus="0000:3f:00.0")
    assert summaries(by_pci) == summaries(by_uuid)


def test_a_gpu_slurm_names_that_nvml_does_not_show_is_a_warning(nvml):
    rec = hook_run(nvml, "prolog", nvml.scenario, gpus="1,9")
    assert rec["rc"] == 0
    assert [(f["severity"], f["status"]) for f in rec["bad"]] == [("warn", "unmatched")]


def test_a_job_given_no_gpu_checks_none(nvml):
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][5]["errors"] = {"*": "GPU_IS_LOST"}              # not this job's concern
    sc["gpus"][2]["processes"] = [[os.getpid(), 1 << 30]]
    rec = hook_run(nvml, "prolog", sc, gpus=None)
    assert rec["rc"] == 0 and rec["bad"] == []
    [f] = [f for c in rec["checks"] if c["name"] == "gpu" for f in c["findings"]]
    assert f["summary"] == "gpu: job 900 was given no GPU: none checked"


def test_job_info_says_when_gpus_are_shared():
    assert JobInfo.from_env({"SLURM_JOB_ID": "1", "SLURM_JOB_GPUS": "0"}).shared is None
    assert JobInfo.from_env({"SLURM_JOB_ID": "1", "SLURM_SHARDS_ON_NODE": "2"}).shared == "SLURM_SHARDS_ON_NODE"
    assert JobInfo.from_env({"SLURM_JOB_ID": "1", "CUDA_VISIBLE_DEVICES": "0",
                             "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"}).shared == "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"


@pytest.fixture
def mps_server(tmp_path):
    """A process that is NVIDIA's MPS server by name (a copy of sleep named so)."""
    exe = tmp_path / "nvidia-cuda-mps-server"
    shutil.copy("/bin/sleep", exe)
    p = subprocess.Popen([str(exe), "60"])
    poll(lambda: open(f"/proc/{p.pid}/comm").read().strip() == "nvidia-cuda-mps", 5, what="the server")
    yield p.pid
    p.kill()
    p.wait(timeout=10)


def test_the_mps_server_on_a_shared_gpu_is_not_a_leftover(nvml, mps_server):
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][1]["processes"] = [[mps_server, 64 << 20]]
    sc["gpus"][1]["mps_processes"] = [[mps_server, 64 << 20]]
    shared = hook_run(nvml, "prolog", sc, gpus="1", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50")
    assert shared["rc"] == 0 and shared["bad"] == []
    whole = hook_run(nvml, "prolog", sc, gpus="1")
    assert summaries(whole) == [f"gpu 1 (0000:3c:00.0) still in use by pid {mps_server} (MPS server) "
                                "before job 900 starts"]


# --- 9. memory held with no process -----------------------------------------------------------
def test_memory_the_driver_reserves_is_not_a_leftover(nvml):
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][1]["memory_reserved"] = 1536 << 20               # NVML v1 counts it as used
    sc["gpus"][2].update(memory_reserved=1536 << 20, memory_used=3 << 30)
    rec = hook_run(nvml, "epilog", sc)
    assert summaries(rec) == ["gpu 2 (0000:3d:00.0) holds 3072 MiB with no process on it (left by an earlier job)"]


def test_memory_of_a_gpu_that_is_a_numa_node_is_not_a_leftover(nvml):
    sc = copy.deepcopy(nvml.scenario)
    for i in (1, 2):
        sc["gpus"][i].update(memory_used=20 << 30, numa_node=4 + i)   # GH200: pages stay after exit
    rec = hook_run(nvml, "epilog", sc)
    assert rec["rc"] == 0 and rec["bad"] == []


def test_the_prolog_is_fast_for_a_job_without_gpus(nvml):
    sc = copy.deepcopy(nvml.scenario)
    sc["hang"] = {"call": "nvmlInit"}           # asking NVML would take the whole deadline
    t0 = time.monotonic()
    rec = hook_run(nvml, "prolog", sc, gpus=None)
    assert rec["rc"] == 0 and time.monotonic() - t0 < 2

