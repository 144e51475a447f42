"""Killed, and still waiting: a task proven stuck on a node-owned mount keeps its
diagnosis through its exit path, on the real cluster.

An unprivileged user's `--requeue` job fsyncs a shard on root's FUSE mount (allow_other,
not listed for the probe: nothing but the task's own wait names the mount). The mount's
server stops reading its requests: the task waits killably, in D, its request never read.
The health check proves the place by the kernel's ids and requeues the job; the site
reports drains only at first (`actions.drain: false`), so the node stays in service.
Slurm's SIGKILL ends the wait (the request was never read) and the task goes into its
exit path, where closing the shard sends FUSE a FLUSH it waits on for good, with no
system call of its own left. Slurm gives up (UnkillableStepTimeout) and drains the node
with its generic `Kill task failed`. With drains on again, the next health check puts
the diagnosis proven before the kill in its place: the job, the file, the mount."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from attacker import PY
from helpers import journal, ours, write_node_configs
from mounts_fixtures import start_fuse
from test_security import mallory, mallory_session, sbatch_as  # noqa: F401 (fixtures)

pytestmark = pytest.mark.cluster
INTERVAL = 3
GRACE = 2

FSYNCER = """
import os, sys, time
fd = os.open(sys.argv[1] + "/shard", os.O_RDONLY)
open(sys.argv[2], "w").write(str(os.getpid()))
while True:
    os.fsync(fd)
    time.sleep(0.05)
"""


def stuck_findings(root: Path, node: str) -> list[dict]:
    return [f for r in journal(root, node) if r["hook"] == "healthcheck" for c in r["checks"]
            if c["name"] == "stuck_tasks" for f in c["findings"] if f["status"] == "stuck"]


def test_a_killed_task_keeps_its_diagnosis_and_rewords_kill_task_failed(clean_cluster, mallory, mallory_session,  # noqa: F811
                                                                       tmp_path):
    cluster = clean_cluster
    m = start_fuse(mallory_session.base / f"ckpt-{time.monotonic_ns()}", "ok", no_interrupt=True)
    stopped = False
    try:
        Path(m.path, "shard").write_bytes(b"x" * 8192)
        common = {"filesystems": [{"path": str(tmp_path)}], "stuck_tasks": {"grace": GRACE, "sample_window": 0.5},
                  "actions": {"reboot": False, "drain": False}}
        wrapper = write_node_configs(tmp_path, cluster, {}, common)
        # Before the job starts: slurmstepd reads UnkillableStepTimeout when it launches,
        # and 25.11's slurmd takes no reconfigure while it holds a step it cannot kill.
        cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL}\n"
                            f"HealthCheckNodeState=ANY\nUnkillableStepTimeout=5\n")
        started = mallory.home / "fsyncer.pid"
        script = mallory.write("fsyncer.py", FSYNCER, 0o644)
        job = sbatch_as(mallory, cluster, f"exec {PY} {script} {m.path} {started}\n", "--requeue")
        cluster.wait_for(lambda: started.exists() and started.read_text().strip(), 30, what="the job's task started")
        pid = int(started.read_text())
        os.kill(m.proc.pid, signal.SIGSTOP)        # the server reads no more requests
        stopped = True

        # Proven on the node's mount and requeued; the node is not drained (drains off).
        found = cluster.wait_for(lambda: stuck_findings(tmp_path, "n1"), GRACE + 4 * INTERVAL + 10,
                                 what="the task diagnosed")
        first = found[0]
        assert first["job"] == str(job) and first["evidence"]["pid"] == pid, first
        assert first["evidence"]["syscall"] == "fsync" and first["evidence"]["file"] == f"{m.path}/shard", first
        assert first["evidence"]["cause"] == "shared_filesystem", first
        requeued = cluster.wait_for(lambda: [a for r in journal(tmp_path, "n1") for a in r["actions"]
                                             if a["kind"] == "requeue" and a["outcome"] == "done"], 10,
                                    what="the job requeued")
        assert requeued[0]["job"] == str(job), requeued

        # Slurm's SIGKILL: the task leaves fsync() for its exit path and waits there on
        # the FLUSH of the shard; Slurm gives up on it and drains with its own words.
        cluster.wait_for(lambda: cluster.out_of_service_reason("n1").startswith("Kill task failed"), 60,
                         what="Slurm's Kill task failed")
        # Killed (its SIGKILL taken: no longer pending) and still there, in D.
        status = dict(ln.split(":\t", 1) for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in ln)
        assert status["State"].startswith("D"), status
        later = cluster.wait_for(lambda: [f for f in stuck_findings(tmp_path, "n1")
                                          if f["evidence"].get("placed_earlier")], 3 * INTERVAL + 10,
                                 what="the killed task diagnosed in its exit path")
        f = later[0]
        assert f["job"] == str(job) and f["evidence"]["pid"] == pid, f
        assert f["evidence"]["placed_earlier"] == "fsync()" and f["evidence"]["mountpoint"] == str(m.path), f
        assert "now in its exit path" in f["summary"], f

        # Drains on: the next run replaces Slurm's generic reason with the diagnosis.
        write_node_configs(tmp_path, cluster, {}, dict(common, actions={"reboot": False}))
        cluster.wait_for(lambda: ours(cluster.out_of_service_reason("n1")), 3 * INTERVAL + 10,
                         what="the diagnosis in place of Kill task failed")
        reason = cluster.show_node("n1")["Reason"]
        assert ours(reason, f"job {job} stuck in fsync() on {m.path} (fuse.fusefs), pid {pid}"), reason
        drains = cluster.wait_for(lambda: [a for r in journal(tmp_path, "n1") for a in r["actions"]
                                           if a["kind"] == "drain" and a["outcome"] == "done"], 10,
                                  what="the drain in n1's journal")
        assert "replaced Slurm's generic reason 'Kill task failed" in drains[0]["message"], drains
        # The mount is suspect on this node alone: `explain` names the node's fault.
        from helpers import SLURM_HOOKS
        out = subprocess.run([str(SLURM_HOOKS), "-c", str(tmp_path / "conf" / "n1.yaml"), "explain"],
                             capture_output=True, text=True, timeout=60, env={"SLURMD_NODENAME": "n1"}).stdout
        assert "scope: this node" in out and "outage of" not in out, out
    finally:
        if stopped:
            os.kill(m.proc.pid, signal.SIGCONT)
        m.close()
