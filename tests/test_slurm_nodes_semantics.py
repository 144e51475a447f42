"""Node states the way Slurm means them, on the real cluster: states slurm-hooks did
not set are left alone, our drains are undone with UNDRAIN, a reboot keeps the node
out of service until a health check after the boot passes (and never loops), and
Slurm's generic reasons are matched by prefix, also after the job has ended."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml
from helpers import SLURM_HOOKS, STUCK_WRITER, journal, ours, write_node_configs
from helpers import manual_healthcheck as healthcheck

# The backends' own reading of node states and reasons runs once per backend; the
# reboot's course and Slurm's generic reasons after a job are decisions, run once per
# Slurm version (the calls they make are the contract's, tests/test_slurm_contract.py,
# which runs each against both backends).
pytestmark = [pytest.mark.cluster]
INTERVAL, GRACE = 3, 2


def actions(rec):
    return {a["kind"]: (a["outcome"], a["message"]) for a in rec["actions"]}


def our_drain_record(tmp_path, node, reason):
    d = tmp_path / "state" / node
    d.mkdir(parents=True, exist_ok=True)
    (d / "drain.json").write_text(json.dumps({"reason": reason, "resumable": True, "passes": 0,
                                              "at": time.time()}))


def status_text(cluster, tmp_path):
    cfg = tmp_path / "status.yaml"
    cfg.write_text(yaml.safe_dump({"slurm": cluster.hooks_slurm()}))
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(cfg), "status"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def reboot_program(tmp_path):
    marker = tmp_path / "rebooted"
    prog = tmp_path / "reboot-program"
    prog.write_text(f"#!/bin/sh\necho rebooted >> {marker}\n")
    prog.chmod(0o755)
    return prog, marker


@pytest.mark.per_backend
def test_node_states_not_ours_are_left_alone(clean_cluster, hung_mount, tmp_path):
    cluster = clean_cluster
    failing = {"filesystems": [{"path": str(hung_mount.path)}],
               "filesystem_defaults": {"timeout": 1, "warn_after": 0.5}}
    prog, _ = reboot_program(tmp_path)
    # ReturnToService=2 (the fixture's) would put a DOWN node back as soon as it answers.
    cluster.reconfigure(f"RebootProgram={prog}\nReturnToService=1\n")
    cluster.scontrol("update", "nodename=n1", "state=down", "reason=admin: PSU swap")
    cluster.scontrol("create", "reservation", "reservationname=hooks_maint", "starttime=now", "duration=10",
                     "nodes=n2", "flags=maint", "users=root")
    busy = cluster.sbatch("-N1", "-w", "n3", "-o", "/dev/null", script="#!/bin/sh\nsleep 300\n")
    cluster.wait_for(lambda: cluster.job_state(busy) == "RUNNING", 30, what="a job on n3")
    cluster.scontrol("reboot", "n3")          # an admin's reboot, once n3 is idle
    try:
        for node, state in (("n1", "DOWN"), ("n2", "MAINT"), ("n3", "REBOOT_REQUESTED")):
            cluster.wait_for(lambda: state in cluster.node_state(node), 10, what=f"{node} {state}")
            rec = healthcheck(cluster, tmp_path, node, **failing)
            assert rec["status"] == "unhealthy"
            outcome, message = actions(rec)["drain"]
            assert outcome == "skipped" and "not by slurm-hooks: left alone, report only" in message, message
            assert "DRAIN" not in cluster.node_state(node), node
        assert cluster.show_node("n1")["Reason"].startswith("admin: PSU swap")
    finally:
        cluster.scontrol("delete", "reservationname=hooks_maint", check=False)
        cluster.scontrol("cancel_reboot", "n3", check=False)

    # A DOWN node whose reason merely carries our mark (slurm-hooks drained it, then
    # someone set it DOWN): RESUME would bring it up, so our drain is left in place.
    reason = "fs /scratch write hung >1s (nfs4) [slurm-hooks]"
    cluster.scontrol("update", "nodename=n1", "state=down", f"reason={reason}")
    our_drain_record(tmp_path, "n1", reason)
    ok = {"filesystems": [{"path": str(tmp_path)}], "policy": {"resume_after": 1}}
    outcome, message = actions(healthcheck(cluster, tmp_path, "n1", **ok))["resume"]
    assert outcome == "skipped" and "not by slurm-hooks: our drain is left in place" in message
    assert cluster.node_state("n1").startswith("DOWN")
    # Our own drain on an otherwise healthy node is undone (UNDRAIN).
    cluster.scontrol("update", "nodename=n2", "state=drain", f"reason={reason}")
    our_drain_record(tmp_path, "n2", reason)
    assert actions(healthcheck(cluster, tmp_path, "n2", **ok))["resume"] == ("done", "")
    cluster.wait_for(lambda: cluster.node_state("n2") == "IDLE", 20, what="n2 back in service")


def test_reboot_keeps_the_node_down_until_a_check_after_the_boot_passes(clean_cluster, stuck_mount, tmp_path):
    """Like GPFS in the incident: the task is in D and SIGKILL does not end it. The
    requeue cannot clear it, so slurm-hooks asks for `reboot ASAP nextstate=DOWN` with
    its reason. After the boot the node stays DOWN (ReturnToService=1) until the
    health check passes; then slurm-hooks resumes the node it took out."""
    cluster = clean_cluster
    (tmp_path / "writer.py").write_text(STUCK_WRITER)
    prog, marker = reboot_program(tmp_path)
    wrapper = write_node_configs(tmp_path, cluster, {}, {
        "filesystems": [{"path": str(tmp_path)}], "stuck_tasks": {"grace": GRACE, "sample_window": 0.5},
        # Two passing runs to resume: a health check may run as soon as the new slurmd
        # is up, so with one the node could be DOWN and back before this test looks.
        "policy": {"resume_after": 2}, "actions": {"release_after": 8}})
    cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL}\nHealthCheckNodeState=ANY\n"
                        f"RebootProgram={prog}\nUnkillableStepTimeout=5\nReturnToService=1\nResumeTimeout=300\n")
    job = cluster.sbatch("-N1", "-w", "n3", "--requeue", "-o", "/dev/null", script=(
        f"#!/bin/sh\nsrun {sys.executable} {tmp_path}/writer.py {stuck_mount.path} {tmp_path}\n"))
    cluster.wait_for(lambda: (tmp_path / "started").exists(), 30, what="the job's task started")

    def reboot_asked():
        # (Not one held while the mount's scope was not known yet.)
        return next((a for r in journal(tmp_path, "n3") for a in r["actions"] if a["kind"] == "reboot"
                     and a["outcome"] != "held"), None)
    asked = cluster.wait_for(reboot_asked, GRACE + 5 * INTERVAL + 10, what="a reboot asked for")
    assert asked["outcome"] == "done", asked
    assert ours(asked["reason"], f"job {job} stuck in ")
    info = cluster.show_node("n3")
    assert info["NextState"] == "DOWN" and "REBOOT" in info["State"], info
    cluster.wait_for(marker.exists, 60, what="RebootProgram run by slurmd")

    # The boot: the dead mount goes with the old kernel, slurmd starts afresh.
    stuck_mount.close()
    cluster.boot_slurmd("n3")
    seen = []

    def back():
        info = cluster.show_node("n3")
        seen.append((info["State"], info.get("Reason", "")))
        return info["State"] == "IDLE"
    cluster.wait_for(back, 4 * INTERVAL + 10, interval=0.1, what="n3 resumed after a passing check")
    # Slurm's "Kill task failed" (the task it could not kill) may stand in our reason's
    # place: slurmstepd drains with it in the instant the reboot is issued.
    down = [r for s, r in seen if s.startswith("DOWN")]
    assert down and "reboot complete" in down[0], seen[:3]
    # The run that resumed writes its journal line after the resume.
    resumed = cluster.wait_for(lambda: [a for r in journal(tmp_path, "n3") for a in r["actions"]
                                        if a["kind"] == "resume"], 10, what="the resuming run's journal line")
    assert resumed[-1]["outcome"] == "done" and "after its reboot" in resumed[-1]["message"]
    assert [a["outcome"] for r in journal(tmp_path, "n3") for a in r["actions"]
            if a["kind"] == "reboot"].count("done") == 1


def test_a_fault_that_survives_the_reboot_leaves_the_node_down(clean_cluster, hung_mount, tmp_path):
    """No boot loop: a node that comes back from our reboot with the fault still there
    stays DOWN with our reason, and no second reboot is asked for. A diskless node
    (state gone with the reboot) still finds out from Slurm."""
    from slurm_hooks.core.config import SlurmConfig
    from slurm_hooks.slurm.connect import open_backend
    cluster = clean_cluster
    prog, marker = reboot_program(tmp_path)
    cluster.reconfigure(f"RebootProgram={prog}\nReturnToService=1\nResumeTimeout=300\n")
    reason = "pid 1234 stuck in write() on /gpfs/log (gpfs) [slurm-hooks]"
    cluster.scontrol("update", "nodename=n2", "state=drain", f"reason={reason}")
    open_backend(SlurmConfig(**cluster.hooks_slurm(timeout=10))).reboot("n2", reason)
    cluster.wait_for(marker.exists, 30, what="RebootProgram run")
    cluster.boot_slurmd("n2")
    assert cluster.show_node("n2")["Reason"].startswith(reason)
    assert "DOWN: rebooted: DOWN until a health check passes" in status_text(cluster, tmp_path)

    stuck = subprocess.Popen([sys.executable, "-c", STUCK_WRITER, str(hung_mount.path), str(tmp_path)],
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Two passing runs to resume: the first run only sights the task (its grace).
        cfg = {"filesystems": [{"path": str(tmp_path)}], "policy": {"resume_after": 2}, "outage": {"interval": 1},
               "stuck_tasks": {"grace": 0.5, "sample_window": 0.3, "non_job_tasks": "drain"}}
        healthcheck(cluster, tmp_path, "n2", **cfg)
        time.sleep(0.6)
        healthcheck(cluster, tmp_path, "n2", **cfg)      # the mount's scope not known yet: held
        time.sleep(1.1)
        rec = healthcheck(cluster, tmp_path, "n2", **cfg)
        acts = actions(rec)
        assert acts["reboot"][0] == "skipped" and "survived a reboot" in acts["reboot"][1], acts
        assert acts["drain"][0] == "skipped", acts
        info = cluster.show_node("n2")
        assert info["State"] == "DOWN" and info["Reason"].startswith(reason), info
    finally:
        hung_mount.close()
        stuck.kill()
        stuck.wait(10)
    # The fault gone, passing checks bring the node back (RESUME: DOWN by our reboot).
    assert "resume" not in actions(healthcheck(cluster, tmp_path, "n2", **cfg))
    rec = healthcheck(cluster, tmp_path, "n2", **cfg)
    assert actions(rec)["resume"][0] == "done", rec["actions"]
    cluster.wait_for(lambda: cluster.node_state("n2") == "IDLE", 20, what="n2 back in service")


@pytest.mark.per_backend
def test_kill_task_failed_is_matched_by_prefix(clean_cluster, hung_mount, tmp_path):
    """Slurm 25.05 and later write `Kill task failed (JobId=N StepId=S)`."""
    cluster = clean_cluster
    cluster.scontrol("update", "nodename=n1", "state=drain", "reason=Kill task failed (JobId=4242 StepId=0)")
    rec = healthcheck(cluster, tmp_path, "n1", filesystems=[{"path": str(hung_mount.path)}],
                      filesystem_defaults={"timeout": 1, "warn_after": 0.5})
    outcome, message = actions(rec)["drain"]
    assert outcome == "done" and "Kill task failed (JobId=4242 StepId=0)" in message
    assert ours(cluster.show_node("n1")["Reason"], f"fs {hung_mount.path} ")


def test_health_check_names_the_task_slurm_could_not_kill_after_the_job_ended(clean_cluster, stuck_mount, tmp_path):
    """Slurm drains with `Kill task failed` and runs no epilog while a step cannot be
    killed: the health check puts the precise reason there, though the job has ended."""
    cluster = clean_cluster
    (tmp_path / "writer.py").write_text(STUCK_WRITER)
    epilog = tmp_path / "epilog"
    epilog.write_text("#!/bin/sh\nexit 0\n")
    epilog.chmod(0o755)
    common = {"filesystems": [{"path": str(tmp_path)}], "actions": {"reboot": False}}
    # The health check runs from the start but looks at no task until Slurm gave up
    # (slurm-hooks reads its file at every run): 25.11's slurmd does not take a
    # reconfigure while it holds a step it could not kill.
    wrapper = write_node_configs(tmp_path, cluster, {}, dict(common, stuck_tasks={"enabled": False}))
    cluster.reconfigure(f"Epilog={epilog}\nUnkillableStepTimeout=5\nHealthCheckProgram={wrapper}\n"
                        f"HealthCheckInterval={INTERVAL}\nHealthCheckNodeState=ANY\n")
    job = cluster.sbatch("-N1", "-w", "n2", "-o", "/dev/null", script=(
        f"#!/bin/sh\nsrun {sys.executable} {tmp_path}/writer.py {stuck_mount.path} {tmp_path}\n"))
    cluster.wait_for(lambda: (tmp_path / "started").exists(), 30, what="the job's task started")
    time.sleep(0.5)
    cluster.run("scancel", str(job))
    cluster.wait_for(lambda: cluster.out_of_service_reason("n2").startswith("Kill task failed"), 60,
                     what="Slurm's Kill task failed")
    write_node_configs(tmp_path, cluster, {}, dict(common, stuck_tasks={"grace": GRACE, "sample_window": 0.5}))
    cluster.wait_for(lambda: ours(cluster.out_of_service_reason("n2")),
                     GRACE + 3 * INTERVAL + 10, what="the precise reason in place of Kill task failed")
    reason = cluster.show_node("n2")["Reason"]
    assert ours(reason, f"job {job} stuck in ") and f"on {stuck_mount.path} (" in reason
    assert cluster.job_state(job) in ("CANCELLED", "COMPLETING")
    # Slurm shows the reason a moment before the run that set it has written its journal line.
    drains = cluster.wait_for(lambda: [a for r in journal(tmp_path, "n2") for a in r["actions"]
                                       if a["kind"] == "drain" and a["outcome"] == "done"], 10,
                              what="the drain in n2's journal")
    assert "replaced Slurm's generic reason 'Kill task failed" in drains[0]["message"]
