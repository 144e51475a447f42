"""Job actions the way Slurm means them, on the real cluster: an array element is
addressed as ArrayJobId_ArrayTaskId, a finished job is never requeued, and all the
Slurm calls of one run share one deadline."""
from __future__ import annotations

import json
import sys
import time

import pytest
from helpers import journal, manual_healthcheck, ours, stuck_writer_job, write_node_configs

pytestmark = [pytest.mark.cluster, pytest.mark.per_backend]
INTERVAL, GRACE = 3, 2

# One element of an array gets stuck on the dead mount: the one whose JobId is the
# array's own id (what `scontrol requeue <ArrayJobId>` reads as the whole array).
ELEMENT = """
import os, sys, time
hung, marks = sys.argv[1], sys.argv[2]
job, array = os.environ["SLURM_JOB_ID"], os.environ["SLURM_ARRAY_JOB_ID"]
open(os.path.join(marks, "started." + job), "w").close()
if job == array:
    open(os.path.join(hung, "log"), "a")          # never returns
time.sleep(600)
"""


def test_array_element_is_requeued_and_commented_alone(clean_cluster, hung_mount, tmp_path):
    cluster = clean_cluster
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "element.py").write_text(ELEMENT)
    out = cluster.run("sbatch", "--parsable", "--requeue", "-a", "0-3", "-N1", "-o", "/dev/null",
                      input=f"#!/bin/sh\nsrun {sys.executable} {tmp_path}/element.py {hung_mount.path} {marks}\n")
    array = out.stdout.strip().split(";")[0]
    cluster.wait_for(lambda: len(list(marks.glob("started.*"))) == 4, 30, what="all four elements started")
    elements = {cluster.show_job(f"{array}_{i}")["JobId"]: f"{array}_{i}" for i in range(4)}
    assert array in elements, elements        # one element carries the array's own id
    stuck = elements[array]
    node = cluster.show_job(stuck)["NodeList"]
    wrapper = write_node_configs(tmp_path, cluster, {}, {
        "filesystems": [{"path": str(tmp_path)}], "stuck_tasks": {"grace": GRACE, "sample_window": 0.5},
        "actions": {"reboot": False}})
    cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL}\nHealthCheckNodeState=ANY\n")

    cluster.wait_for(lambda: cluster.show_job(stuck)["Restarts"] == "1", GRACE + 3 * INTERVAL + 10,
                     what=f"element {stuck} requeued")
    assert "DRAIN" in cluster.node_state(node)
    info = cluster.show_job(stuck)
    assert info["AdminComment"].startswith(f"slurm-hooks: node {node}: job {array} rank 0 pid ")
    for job_id, element in elements.items():
        if element == stuck:
            continue
        other = cluster.show_job(element)
        assert (other["Restarts"], other["JobState"]) == ("0", "RUNNING"), (element, other["JobState"])
        assert other.get("AdminComment", "(null)") in ("", "(null)"), element
    # The run that requeued writes its journal line after its last Slurm call: poll for it.
    acts = cluster.wait_for(lambda: (lambda a: a if "requeue" in a and "comment" in a else None)(
        {a["kind"]: a for r in journal(tmp_path, node) for a in r["actions"] if a["outcome"] == "done"}),
        10, what="the requeueing run's journal line")
    assert acts["requeue"]["message"] == f"requeued {stuck}"
    assert acts["comment"]["message"] == f"on {stuck}"


def test_a_finished_job_is_never_requeued(clean_cluster, tmp_path):
    """`requeue Incomplete`: a job that ended between the diagnosis and the requeue
    stays ended (a plain `scontrol requeue` puts a COMPLETED batch job back)."""
    from slurm_hooks.core.config import SlurmConfig
    from slurm_hooks.slurm.connect import open_backend
    cluster = clean_cluster
    job = cluster.sbatch("-N1", "--requeue", "-o", "/dev/null", script="#!/bin/sh\ntrue\n")
    cluster.wait_for(lambda: cluster.job_state(job) == "COMPLETED", 30, what="the job to complete")
    open_backend(SlurmConfig(**cluster.hooks_slurm(timeout=10))).requeue(str(job))
    time.sleep(1)
    info = cluster.show_job(job)
    assert (info["JobState"], info["Restarts"]) == ("COMPLETED", "0")


def slow_scontrol(cluster, tmp_path, delay: float):
    """A bin_dir whose Slurm commands answer `delay` seconds late, like a loaded slurmctld."""
    d = tmp_path / "slow-bin"
    d.mkdir()
    for tool in ("scontrol", "squeue", "sinfo"):
        (d / tool).write_text(f"#!/bin/sh\nsleep {delay}\nexec {cluster.binary(tool)} \"$@\"\n")
        (d / tool).chmod(0o755)
    return str(d)


def healthcheck(cluster, tmp_path, node, **cfg):
    return manual_healthcheck(cluster, tmp_path, node, timed=True, **cfg)


def test_all_actions_of_a_run_share_one_deadline(clean_cluster, hung_mount, tmp_path):
    cluster = clean_cluster
    job = stuck_writer_job(cluster, tmp_path, hung_mount.path, "n1")
    cfg = {"filesystems": [{"path": str(tmp_path)}], "stuck_tasks": {"grace": 0.5, "sample_window": 0.3},
           "actions": {"reboot": False, "deadline": 5}, "outage": {"interval": 1}}
    healthcheck(cluster, tmp_path, "n1", **cfg)          # first sighting of the task
    time.sleep(0.6)
    healthcheck(cluster, tmp_path, "n1", **cfg)          # stuck: drained; the mount's scope not known yet
    time.sleep(1.1)                                      # known (one interval alone): the job's actions go
    slow = dict(cfg, slurm=cluster.hooks_slurm(timeout=10, bin_dir=slow_scontrol(cluster, tmp_path, 1.5), backend="scontrol"))
    rec, took = healthcheck(cluster, tmp_path, "n1", **slow)
    # Six calls (the breaker's look, then each action's look and update), 1.5 s each:
    # without one deadline this run would take more than 9 s.
    assert took < 5 + 1.5, (took, rec["actions"])
    left = [a for a in rec["actions"] if a.get("retry")]
    assert left and all("left for the next run" in a["message"] for a in left), rec["actions"]
    spool = json.loads((tmp_path / "state" / "n1" / "spool.json").read_text())
    assert sorted(e["action"]["kind"] for e in spool) == sorted(a["kind"] for a in left)
    # The next run, with slurmctld answering again, takes what was left, once.
    rec, _ = healthcheck(cluster, tmp_path, "n1", **cfg)
    assert {a["kind"] for a in rec["actions"] if a["outcome"] == "done"} >= {a["kind"] for a in left}
    cluster.wait_for(lambda: cluster.show_job(job)["Restarts"] == "1", 10, what="the job requeued once")
    assert ours(cluster.show_node("n1")["Reason"], f"job {job} stuck in ")
    assert cluster.show_job(job)["AdminComment"].count("slurm-hooks: node n1:") == 1
