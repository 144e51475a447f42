"""GPU findings on the real cluster: a GPU idle while its job's others are busy, the
incident's combined diagnosis (the idle GPU's process is stuck in D), and a lost GPU
whose job is requeued. NVML is faked at the pynvml boundary; the job, its processes,
their cgroups, the hung filesystem and Slurm are real."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml

from helpers import ROOT, SLURM_HOOKS, KernelLog, gpu

pytestmark = pytest.mark.cluster

RANKS = """
import os, sys, time
hung, barrier, stuck_rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
rank = int(os.environ["SLURM_PROCID"])
with open(os.path.join(barrier, f"rank.{rank}"), "w") as f:
    f.write(str(os.getpid()))
if rank == stuck_rank:
    open(os.path.join(hung, "main_log.txt"), "a")        # never returns
time.sleep(3600)                                          # the others spin in a barrier
"""


def start_job(cluster, tmp_path, hung_path, stuck_rank):
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    (tmp_path / "ranks.py").write_text(RANKS)
    job = cluster.sbatch("-N1", "-w", "n1", "-n4", "-O", "--requeue", "-o", "/dev/null", script=(
        "#!/bin/sh\n"
        f"srun -n4 -O {sys.executable} {tmp_path}/ranks.py {hung_path} {barrier} {stuck_rank}\n"))
    cluster.wait_for(lambda: len(list(barrier.glob("rank.*"))) == 4 and
                     all(p.read_text() for p in barrier.glob("rank.*")), 30, what="four ranks")
    pids = {int(p.name.split(".")[1]): int(p.read_text()) for p in barrier.glob("rank.*")}
    return job, pids


class Node:
    """slurm-hooks healthcheck run by hand on n1 with a fake NVML scenario."""

    def __init__(self, cluster, tmp_path, **cfg):
        self.tmp = tmp_path
        self.config = tmp_path / "n1.yaml"
        doc = {"state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "journal.jsonl"),
               "filesystems": [{"path": str(tmp_path)}], "kernel_log": str(KernelLog(tmp_path / "kmsg")), "slurm": {"conf": str(cluster.conf_path)},
               "stuck_tasks": {"grace": 0.5, "sample_window": 0.3},
               "gpu": {"enabled": "true", "count": 4, "timeout": 5, "idle": {"samples": 2}}}
        doc.update(cfg)
        self.config.write_text(yaml.safe_dump(doc))

    def run(self, gpus):
        sc = self.tmp / "scenario.json"
        sc.write_text(json.dumps({"gpus": gpus}))
        r = subprocess.run([str(SLURM_HOOKS), "-c", str(self.config), "healthcheck", "--json"],
                           capture_output=True, text=True, timeout=60,
                           env={"SLURMD_NODENAME": "n1", "PYTHONPATH": str(ROOT / "tests" / "fake_nvml"),
                                "FAKE_NVML_SCENARIO": str(sc)})
        assert r.returncode in (0, 1), r.stderr
        rec = json.loads(r.stdout)
        rec["bad"] = [f for c in rec["checks"] for f in c["findings"] if f["severity"] != "ok"]
        return rec


def busy_gpus(pids, idle):
    return [gpu(i, utilization=0 if i == idle else 100, power_mw=70000 if i == idle else 650000,
                processes=[[pids[i], 2 << 30]]) for i in range(4)]


def test_the_incident_one_diagnosis_for_the_idle_gpu_and_its_stuck_rank(clean_cluster, hung_mount, tmp_path):
    cluster = clean_cluster
    job, pids = start_job(cluster, tmp_path, hung_mount.path, stuck_rank=0)
    node = Node(cluster, tmp_path)
    first = node.run(busy_gpus(pids, idle=0))
    assert [f["status"] for f in first["bad"]] == ["idle_while_busy"]     # the rank is not stuck for 0.5 s yet
    assert first["bad"][0]["severity"] == "warn"
    time.sleep(0.6)
    second = node.run(busy_gpus(pids, idle=0))
    [f] = second["bad"]
    assert f["check"] == "stuck_tasks" and f["job"] == str(job) and f["evidence"]["rank"] == "0"
    assert f["summary"].startswith(f"job {job} rank 0 pid {pids[0]} stuck ")
    assert f["summary"].endswith(f"; gpu 0 (0000:3b:00.0) idles because of it while 3 other GPU(s) of job {job} "
                                 "are busy (the GPU is not the fault)")
    assert f["evidence"]["idle_gpu"]["index"] == 0
    reason = cluster.show_node("n1")["Reason"]
    assert reason.startswith(f"slurm-hooks: job {job} pid {pids[0]} stuck in openat() on {hung_mount.path}/main_log.txt")
    cluster.wait_for(lambda: cluster.show_job(job).get("Restarts") == "1", 10, what="job requeued")
    assert "idles because of it" in cluster.show_job(job)["AdminComment"]


def test_idle_gpu_alone_fails_after_its_samples(clean_cluster, tmp_path):
    cluster = clean_cluster
    job, pids = start_job(cluster, tmp_path, tmp_path, stuck_rank=-1)
    node = Node(cluster, tmp_path)
    first = node.run(busy_gpus(pids, idle=2))
    [f] = first["bad"]
    assert f["severity"] == "warn" and f["summary"].endswith("(seen 1 of 2 runs)")
    assert "DRAIN" not in cluster.node_state("n1")
    second = node.run(busy_gpus(pids, idle=2))
    [f] = second["bad"]
    assert f["severity"] == "fail"
    assert f["summary"] == (f"gpu 2 (0000:3d:00.0) idle (0%, 70W) while 3 other GPU(s) of job {job} are busy; "
                            f"its process: pid {pids[2]}")
    assert cluster.show_node("n1")["Reason"].startswith(
        f"slurm-hooks: gpu 2 (0000:3d:00.0) idle while job {job} busy (pid {pids[2]})")
    cluster.wait_for(lambda: cluster.show_job(job).get("Restarts") == "1", 10, what="job requeued")


def test_lost_gpu_requeues_the_job_that_used_it(clean_cluster, tmp_path):
    cluster = clean_cluster
    job, pids = start_job(cluster, tmp_path, tmp_path, stuck_rank=-1)
    node = Node(cluster, tmp_path)
    gpus = busy_gpus(pids, idle=-1)
    assert node.run(gpus)["bad"] == []
    gpus[1]["errors"] = {"*": "GPU_IS_LOST"}
    rec = node.run(gpus)
    assert [f["reason"] for f in rec["bad"]] == ["gpu 1 (0000:3c:00.0) lost (NVML: GPU is lost)"]
    assert rec["bad"][0]["job"] == str(job)
    assert cluster.show_node("n1")["Reason"].startswith("slurm-hooks: gpu 1 (0000:3c:00.0) lost")
    cluster.wait_for(lambda: cluster.show_job(job).get("Restarts") == "1", 10, what="job requeued")
    assert "gpu 1 (0000:3c:00.0) lost" in cluster.show_job(job)["AdminComment"]
