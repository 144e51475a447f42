"""`slurm-hooks status` against the real cluster, several nodes drained for different causes."""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml
from helpers import SLURM_HOOKS

pytestmark = pytest.mark.cluster


def test_status_groups_by_cause_and_names_the_requeued_jobs(clean_cluster, tmp_path):
    cluster = clean_cluster
    from slurm_hooks.core.reason import cause_text
    job = cluster.sbatch("-N1", "--hold", "-o", "/dev/null", script="#!/bin/sh\ntrue\n")
    # Grouped by the cause recorded in the Comment (the words of n2's reason differ); the
    # shared mount each names makes it the storage's outage.
    mounts = [["srv:/shared", "nfs4", "/shared", "2026-12-02T03:50:00", "hung", "2026-12-02T03:50:00"]]
    for n, words in (("n1", "fs /shared fsync hung >10s (nfs4)"), ("n2", f"job {job} stuck in write() on /shared (nfs4)")):
        cluster.scontrol("update", f"nodename={n}", "state=drain", f"reason={words} [slurm-hooks]",
                         "comment=" + cause_text("filesystem", "/shared", "/shared", "2026-12-02T03:50:00", mounts))
    cluster.scontrol("update", "nodename=n3", "state=drain", "reason=admin: firmware update")
    cluster.scontrol("update", f"jobid={job}",
                     f"admincomment=slurm-hooks: node n2: job {job} rank 0 pid 5 stuck 600s in write() on /shared/log")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"slurm": cluster.hooks_slurm()}))
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(cfg), "status"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "slurm-hooks status: 2 of 3 nodes drained by slurm-hooks"
    assert lines[1] == "  filesystem /shared: OUTAGE on 2 nodes"
    assert lines[2].startswith("    n1 ") and lines[2].endswith("ago  fs /shared fsync hung >10s (nfs4)")
    assert any(f"job {job} diagnosed by slurm-hooks (Slurm's record: PENDING, restarts 0)" in ln for ln in lines)
    assert lines[-1] == "  out of service by others (left alone): n3 IDLE+DRAIN (admin: firmware update)"
    j = json.loads(subprocess.run([str(SLURM_HOOKS), "-c", str(cfg), "status", "--json"], capture_output=True,
                                  text=True, timeout=60).stdout)
    assert j["drained_by_us"] == 2 and j["total_nodes"] == 3
    [g] = j["groups"]
    assert g["cause"] == "filesystem /shared" and g["outage"] and [n["node"] for n in g["nodes"]] == ["n1", "n2"]
    # Jobs of earlier tests that ran on n2 stay visible (MinJobAge): look at this one.
    assert [j for j in g["nodes"][1]["jobs"] if j["job"] == str(job)] == \
        [{"job": str(job), "state": "PENDING", "restarts": "0", "restarted": False}]
    assert all(n["age_seconds"] is not None and n["age_seconds"] < 120 for n in g["nodes"])


def test_status_claims_no_requeue_it_did_not_do(clean_cluster, tmp_path):
    """A job Slurm (or an admin) requeued, which slurm-hooks only diagnosed: status says
    the diagnosis is slurm-hooks' and the restarts are Slurm's record, never that
    slurm-hooks requeued it (it cannot know from Slurm: the journal on the node can)."""
    from slurm_hooks.core.reason import cause_text
    cluster = clean_cluster
    job = cluster.sbatch("-N1", "-w", "n2", "-o", "/dev/null", script="#!/bin/sh\nsleep 300\n")
    cluster.wait_for(lambda: cluster.job_state(job) == "RUNNING", 30, what="the job to run")
    cluster.scontrol("update", "nodename=n1", "state=drain", f"reason=job {job} stuck in write() on /shared (nfs4) "
                     "[slurm-hooks]", "comment=" + cause_text("stuck_tasks", "/shared", "/shared", "2026-12-02T03:50:00"))
    cluster.scontrol("requeue", str(job))              # Slurm's (here an admin's) requeue, not ours
    cluster.wait_for(lambda: int(cluster.show_job(job)["Restarts"]) >= 1, 30, what="the requeue")
    cluster.scontrol("update", f"jobid={job}", "admincomment=slurm-hooks: node n1: job stuck 600s in write() on /shared/log")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"slurm": cluster.hooks_slurm()}))
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(cfg), "status"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    [line] = [ln for ln in r.stdout.splitlines() if ln.strip().startswith(f"job {job} ")]   # not the reason
    assert "requeued" not in line, line
    assert f"job {job} diagnosed by slurm-hooks (Slurm's record: " in line and "restarts 1)" in line, line
    cluster.run("scancel", str(job))
