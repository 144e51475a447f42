"""GPU findings on the real cluster: a GPU idle while its job's others are busy (a
warning, never a drain), the incident's combined diagnosis (the idle GPU's process is
stuck in D), a lost GPU whose job is requeued, a pending row remap that drains and lets
the job finish, DRAIN_P2P resumed once cleared, and a GPU shared on purpose with another
job. NVML is faked at the pynvml boundary; the job, its processes, their cgroups, the
hung filesystem and Slurm are real."""
from __future__ import annotations

import json
import sys
import time

import pytest
import yaml
from helpers import ROOT, SLURM_HOOKS, KernelLog, gpu, ours, run_record

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
               "filesystems": [{"path": str(tmp_path)}], "kernel_log": str(KernelLog(tmp_path / "kmsg")), "slurm": cluster.hooks_slurm(),
               "stuck_tasks": {"grace": 0.5, "sample_window": 0.3}, "outage": {"interval": 1},
               "gpu": {"enabled": "true", "count": 4, "timeout": 5, "idle": {"window": 1}}}
        doc.update(cfg)
        self.config.write_text(yaml.safe_dump(doc))

    def run(self, gpus, hook="healthcheck", **env):
        sc = self.tmp / "scenario.json"
        sc.write_text(json.dumps({"gpus": gpus}))
        args = ["--dry-run"] if hook == "prolog" else []
        rec = run_record(self.config, hook, *args,
                         env={"SLURMD_NODENAME": "n1", "PYTHONPATH": str(ROOT / "tests" / "fake_nvml"),
                              "FAKE_NVML_SCENARIO": str(sc), **env})
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
    assert first["bad"] == []                       # the rank is not stuck for 0.5 s yet
    [idle] = [f for c in first["checks"] for f in c["findings"] if f["status"] == "idle_while_busy"]
    assert idle["severity"] == "ok" and idle["summary"].endswith("(a warning after 1s)")
    time.sleep(0.6)
    second = node.run(busy_gpus(pids, idle=0))
    [f] = second["bad"]
    assert f["check"] == "stuck_tasks" and f["job"] == str(job) and f["evidence"]["rank"] == "0"
    assert f["summary"].startswith(f"job {job} rank 0 pid {pids[0]} stuck ")
    assert f["summary"].endswith(f"; gpu 0 (0000:3b:00.0) idles because of it while 3 other GPU(s) of job {job} "
                                 "are busy (the GPU is not the fault)")
    assert f["evidence"]["idle_gpu"]["index"] == 0
    reason = cluster.show_node("n1")["Reason"]
    assert ours(reason, f"job {job} stuck in openat() on {hung_mount.path} (")
    # The rank waits on a network mount: the job is requeued once the mount's scope is
    # known (one interval, no other node naming it).
    time.sleep(1.1)
    node.run(busy_gpus(pids, idle=0))
    cluster.wait_for(lambda: cluster.show_job(job).get("Restarts") == "1", 10, what="job requeued")
    assert "idles because of it" in cluster.show_job(job)["AdminComment"]


def test_idle_gpu_alone_only_warns_after_its_window(clean_cluster, tmp_path):
    """Rank 2 writing a checkpoint while the others wait in a barrier looks exactly like
    this: a warning once it lasted the window, never a drain or a requeue."""
    cluster = clean_cluster
    job, pids = start_job(cluster, tmp_path, tmp_path, stuck_rank=-1)
    node = Node(cluster, tmp_path)
    first = node.run(busy_gpus(pids, idle=2))
    assert first["bad"] == [] and first["status"] == "healthy"
    time.sleep(1.2)
    second = node.run(busy_gpus(pids, idle=2))
    [f] = second["bad"]
    assert f["severity"] == "warn" and second["actions"] == []
    assert f["summary"].startswith("gpu 2 (0000:3d:00.0) idle (0%, 70W) for ")
    assert f["summary"].endswith(f"s while 3 other GPU(s) of job {job} are busy; its process: pid {pids[2]}")
    assert "DRAIN" not in cluster.node_state("n1")
    info = cluster.show_job(job)
    assert info["JobState"] == "RUNNING" and info.get("Restarts") == "0"


def test_remap_pending_drains_and_lets_the_job_finish(clean_cluster, tmp_path):
    """NVIDIA: with a row remap pending, running work may continue; no new work until
    the reset that activates the remap."""
    cluster = clean_cluster
    job, pids = start_job(cluster, tmp_path, tmp_path, stuck_rank=-1)
    node = Node(cluster, tmp_path)
    gpus = busy_gpus(pids, idle=-1)
    gpus[1]["remapped_rows"] = [0, 1, 1, 0]
    rec = node.run(gpus)
    assert [f["reason"] for f in rec["bad"]] == ["gpu 1 (0000:3c:00.0) row remapping pending (needs a GPU reset)"]
    assert [a["kind"] for a in rec["actions"]] == ["drain", "reboot"]
    assert ours(cluster.show_node("n1")["Reason"], "gpu 1 (0000:3c:00.0) row remapping pending")
    time.sleep(2)
    info = cluster.show_job(job)
    assert info["JobState"] == "RUNNING" and info.get("Restarts") == "0"
    assert "slurm-hooks" not in info.get("AdminComment", "")


def test_drain_p2p_is_resumed_once_the_driver_clears_it(clean_cluster, tmp_path):
    cluster = clean_cluster
    node = Node(cluster, tmp_path, policy={"resume_after": 1})
    gpus = [gpu(i) for i in range(4)]
    gpus[3]["recovery_action"] = 3
    rec = node.run(gpus)
    assert [f["status"] for f in rec["bad"]] == ["recovery_action"]
    assert "DRAIN" in cluster.node_state("n1")
    gpus[3]["recovery_action"] = 0
    rec = node.run(gpus)
    assert rec["bad"] == [] and [a["kind"] for a in rec["actions"]] == ["resume"]
    cluster.wait_for(lambda: "DRAIN" not in cluster.node_state("n1"), 10, what="n1 resumed")


def test_a_gpu_shared_on_purpose_holds_another_jobs_process(clean_cluster, tmp_path):
    """A job given a shard of a GPU lands where another job's process runs: by design."""
    cluster = clean_cluster
    job, pids = start_job(cluster, tmp_path, tmp_path, stuck_rank=-1)
    node = Node(cluster, tmp_path)
    gpus = busy_gpus(pids, idle=-1)
    env = {"SLURM_JOB_ID": "99999", "SLURM_JOB_GPUS": "2"}
    shared = node.run(gpus, hook="prolog", SLURM_SHARDS_ON_NODE="1", **env)
    assert shared["bad"] == [] and shared["status"] == "healthy"
    whole = node.run(gpus, hook="prolog", **env)
    assert [f["summary"] for f in whole["bad"]] == \
        [f"gpu 2 (0000:3d:00.0) still in use by pid {pids[2]} (job {job}) before job 99999 starts"]


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
    assert ours(cluster.show_node("n1")["Reason"], "gpu 1 (0000:3c:00.0) lost")
    cluster.wait_for(lambda: cluster.show_job(job).get("Restarts") == "1", 10, what="job requeued")
    assert "gpu 1 (0000:3c:00.0) lost" in cluster.show_job(job)["AdminComment"]
