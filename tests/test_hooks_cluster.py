"""Prolog, epilog and policy on the real cluster, with real hangs."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from helpers import (
    STUCK_WRITER,
    hook_wrapper,
    journal,
    node_rpcs_spent,
    ours,
    problems,
    sdiag_counts,
    stuck_writer_job,
    write_node_configs,
)
from helpers import manual_healthcheck as healthcheck

pytestmark = pytest.mark.cluster


def test_prolog_failure_drains_with_the_precise_reason_and_requeues(clean_cluster, hung_mount, tmp_path):
    cluster = clean_cluster
    write_node_configs(tmp_path, cluster, {"n1": {"filesystems": [{"path": str(hung_mount.path)}]}},
                       {"filesystems": [{"path": str(tmp_path)}], "prolog": {"fs_timeout": 1}})
    cluster.reconfigure(f"Prolog={hook_wrapper(tmp_path, 'prolog')}\n")
    ok_job = cluster.sbatch("-N1", "-w", "n2", "-o", "/dev/null", script="#!/bin/sh\ntrue\n")
    job = cluster.sbatch("-N1", "-w", "n1", "-o", "/dev/null", script="#!/bin/sh\ntrue\n")
    cluster.wait_for(lambda: ours(cluster.out_of_service_reason("n1")), 30,
                     what="the precise reason in place of 'Prolog error'")
    reason = cluster.show_node("n1")["Reason"]
    assert ours(reason, f"fs {hung_mount.path} hung >1s (create, fuse.fusefs)"), reason
    assert "DRAIN" in cluster.node_state("n1")
    info = cluster.show_job(job)
    assert info["JobState"] == "PENDING" and int(info["Restarts"]) >= 1, "Slurm requeued the job"
    cluster.wait_for(lambda: cluster.job_state(ok_job) == "COMPLETED", 30, what="the healthy node's job to run")
    assert "DRAIN" not in cluster.node_state("n2")
    # explain: the drain is Slurm's; the re-wording is slurm-hooks' (its detached helper).
    from helpers import SLURM_HOOKS
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(tmp_path / "conf" / "n1.yaml"), "explain", "--node", "n1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[1].startswith("drained by Slurm (its own `Prolog error`"), r.stdout
    assert "re-word node n1's reason (prolog's detached helper): done (replaced Slurm's generic reason" in r.stdout, \
        r.stdout


def test_epilog_drains_a_node_left_with_a_stuck_task(clean_cluster, stuck_mount, tmp_path):
    cluster = clean_cluster
    write_node_configs(tmp_path, cluster, {}, {"filesystems": [{"path": str(tmp_path)}]})
    (tmp_path / "writer.py").write_text(STUCK_WRITER)
    cluster.reconfigure(f"Epilog={hook_wrapper(tmp_path, 'epilog')}\nUnkillableStepTimeout=5\n")
    job = cluster.sbatch("-N1", "-w", "n2", "-o", "/dev/null", script=(
        f"#!/bin/sh\nsrun {sys.executable} {tmp_path}/writer.py {stuck_mount.path} {tmp_path}\n"))
    cluster.wait_for(lambda: (tmp_path / "started").exists(), 30, what="the job's task started")
    time.sleep(0.5)
    cluster.scontrol("update", f"jobid={job}", "timelimit=0:01", check=False)   # let the job end
    subprocess.run(["scancel", str(job)], env=cluster.env, check=True)
    if not cluster.version.startswith("22."):
        # 25.11 keeps the step's slurmstepd alive for as long as the task lives: it runs
        # no epilog, and its own `Kill task failed` drain keeps the next job off the node.
        # The health check is what names the task there (README; the test of the health
        # check replacing Kill task failed after the job ended).
        cluster.wait_for(lambda: cluster.out_of_service_reason("n2").startswith("Kill task failed"), 60,
                         what="Slurm's Kill task failed")
        nxt = cluster.sbatch("-N1", "-w", "n2", "-o", "/dev/null", script="#!/bin/sh\ntrue\n")
        time.sleep(3)
        assert cluster.job_state(nxt) == "PENDING"
        assert [r for r in journal(tmp_path, "n2") if r["hook"] == "epilog"] == [], "no epilog ran"
        return
    cluster.wait_for(lambda: ours(cluster.out_of_service_reason("n2")), 60,
                     what="n2 drained by the epilog with the precise reason")
    reason = cluster.show_node("n2")["Reason"]
    assert ours(reason, f"job {job} stuck in "), reason
    assert f"stuck in openat() on {stuck_mount.path} (fuse.fusefs)" in reason and "main_log" not in reason
    # No other job lands there.
    nxt = cluster.sbatch("-N1", "-w", "n2", "-o", "/dev/null", script="#!/bin/sh\ntrue\n")
    time.sleep(3)
    assert cluster.job_state(nxt) == "PENDING"
    epilog_runs = [r for r in journal(tmp_path, "n2") if r["hook"] == "epilog"]
    assert epilog_runs and epilog_runs[-1]["job"] == str(job)


def test_epilog_that_drained_exits_0_and_slurm_adds_no_epilog_error(clean_cluster, hung_mount, tmp_path):
    """README: the epilog drains a sick node itself and exits non-zero only when slurmctld
    cannot be reached. Once slurmctld took the drain, a failing exit would make Slurm drain
    the node again with its own `Epilog error` over the precise reason."""
    cluster = clean_cluster
    write_node_configs(tmp_path, cluster, {"n1": {"filesystems": [{"path": str(hung_mount.path)}]}},
                       {"filesystems": [{"path": str(tmp_path)}], "epilog": {"fs_timeout": 1}})
    hook_wrapper(tmp_path, "epilog")
    # The epilog as slurmd runs it, its exit status kept beside it.
    wrapper = tmp_path / "epilog-status"
    wrapper.write_text(f"#!/bin/sh\n{tmp_path}/epilog\nrc=$?\necho $rc >> {tmp_path}/epilog-$SLURMD_NODENAME.rc\nexit $rc\n")
    wrapper.chmod(0o755)
    cluster.reconfigure(f"Epilog={wrapper}\n")
    job = cluster.sbatch("-N1", "-w", "n1", "-o", "/dev/null", script="#!/bin/sh\ntrue\n")
    rc_file = tmp_path / "epilog-n1.rc"
    cluster.wait_for(rc_file.exists, 60, what="the epilog to run on n1")
    assert rc_file.read_text().split() == ["0"], "the epilog drained the node itself: it exits 0"
    time.sleep(3)     # what Slurm makes of the epilog's exit status
    reason = cluster.show_node("n1")["Reason"]
    assert ours(reason, f"fs {hung_mount.path} hung >1s"), reason
    [run] = [r for r in journal(tmp_path, "n1") if r["hook"] == "epilog"]
    assert run["job"] == str(job)
    [drain] = [a for a in run["actions"] if a["kind"] == "drain"]
    assert drain["outcome"] == "done", drain


def test_epilog_after_a_failed_prolog_exits_0_on_slurms_drain(clean_cluster, hung_mount, tmp_path):
    """After a failing prolog Slurm has drained the node (`Prolog error`) and requeued the
    job; the epilog that follows finds the node drained already: slurmctld answered and no
    job can land there, so it exits 0 (a failing exit would add Slurm's `Epilog error`)."""
    cluster = clean_cluster
    write_node_configs(tmp_path, cluster, {"n1": {"filesystems": [{"path": str(hung_mount.path)}]}},
                       {"filesystems": [{"path": str(tmp_path)}], "prolog": {"fs_timeout": 1, "reason_delay": 30},
                        "epilog": {"fs_timeout": 1}})
    hook_wrapper(tmp_path, "epilog")
    wrapper = tmp_path / "epilog-status"
    wrapper.write_text(f"#!/bin/sh\n{tmp_path}/epilog\nrc=$?\necho $rc >> {tmp_path}/epilog-$SLURMD_NODENAME.rc\nexit $rc\n")
    wrapper.chmod(0o755)
    cluster.reconfigure(f"Prolog={hook_wrapper(tmp_path, 'prolog')}\nEpilog={wrapper}\n")
    job = cluster.sbatch("-N1", "-w", "n1", "-o", "/dev/null", script="#!/bin/sh\ntrue\n")
    rc_file = tmp_path / "epilog-n1.rc"
    cluster.wait_for(rc_file.exists, 60, what="the epilog to run on n1 after the failed prolog")
    time.sleep(3)     # what Slurm makes of the epilog's exit status
    assert rc_file.read_text().split() == ["0"], "n1 was drained already (by Slurm): the epilog exits 0"
    assert cluster.show_node("n1")["Reason"].startswith("Prolog error"), cluster.show_node("n1")["Reason"]
    [run] = [r for r in journal(tmp_path, "n1") if r["hook"] == "epilog"]
    assert run["job"] == str(job)


def test_auto_resume_only_of_our_own_resumable_drain(clean_cluster, hung_mount, stuck_mount, tmp_path):
    cluster = clean_cluster
    # n3's task is stuck on another storage than n1's hung mount: n3's own fault, not
    # an outage of one storage both see (that would make n3's drain resumable).
    stuck = subprocess.Popen([sys.executable, "-c", STUCK_WRITER, str(stuck_mount.path), str(tmp_path)],
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wrapper = write_node_configs(tmp_path, cluster, {
            "n1": {"filesystems": [{"path": str(hung_mount.path)}]},          # recovers later
            "n3": {"stuck_tasks": {"grace": 1, "sample_window": 0.3, "non_job_tasks": "drain"}},  # needs a reboot
        }, {"filesystems": [{"path": str(tmp_path)}], "filesystem_defaults": {"timeout": 1, "warn_after": 0.5},
            "stuck_tasks": {"non_job_tasks": "ignore"}, "policy": {"resume_after": 2}, "actions": {"reboot": False}})
        cluster.scontrol("update", "nodename=n2", "state=drain", "reason=admin: bad DIMM")
        cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval=2\nHealthCheckNodeState=ANY\n")
        cluster.wait_for(lambda: ours(cluster.out_of_service_reason("n1"), "fs ")
                         and ours(cluster.show_node("n3").get("Reason", ""), "stuck in "),
                         20, what="n1 and n3 drained by slurm-hooks")
        # n3's drain is for good once its mount's trouble is known to be n3's own (one
        # interval alone with it): before that, a hang that ends is resumed like any.
        drain = tmp_path / "state" / "n3" / "drain.json"
        cluster.wait_for(lambda: json.loads(drain.read_text()).get("resumable") is False, 20,
                         what="n3's drain known to need a reboot")
        hung_mount.close()              # n1's filesystem comes back
        stuck_mount.close()             # and n3's (the stuck writer dies)
        stuck.wait(timeout=10)
        cluster.wait_for(lambda: "DRAIN" not in cluster.node_state("n1"), 30, what="n1 resumed")
        # The run that resumed writes its journal line after the resume.
        resumed = cluster.wait_for(lambda: [a for r in journal(tmp_path, "n1") for a in r["actions"]
                                            if a["kind"] == "resume"], 10, what="the resuming run's journal line")
        assert resumed[-1]["outcome"] == "done"
        runs = len(journal(tmp_path, "n3"))
        cluster.wait_for(lambda: len(journal(tmp_path, "n3")) >= runs + 3, 20, what="three more runs on n3")
        assert ours(cluster.show_node("n3")["Reason"], "stuck in "), "needs a reboot: left drained"
        assert cluster.show_node("n2")["Reason"].startswith("admin: bad DIMM"), "an admin's drain is left alone"
        assert problems(journal(tmp_path, "n3")[-2:], slow_ok=[tmp_path]) == []
    finally:
        stuck.kill()


def test_a_drain_spooled_while_slurmctld_was_down_is_dropped_once_its_fault_is_gone(clean_cluster, hung_mount,
                                                                                      tmp_path):
    """Slurm unreachable, the check fails: the drain waits in the spool. The fault goes
    before slurmctld answers: the next run, which could drain, drops it and says so;
    the node stays in service."""
    cluster = clean_cluster
    cfg = {"filesystems": [{"path": str(hung_mount.path), "timeout": 1}], "policy": {"failures_to_drain": {}},
           "outage": {"interval": 1}}
    cluster.stop_controller()
    try:
        rec = healthcheck(cluster, tmp_path, "n1", **cfg)
        assert [(a["kind"], a["code"]) for a in rec["actions"]] == [("drain", "slurm_unreachable")], rec["actions"]
    finally:
        hung_mount.close()                    # the fault goes while Slurm does not answer
        cluster.start_controller()
    rec = healthcheck(cluster, tmp_path, "n1", **cfg)
    assert rec["status"] == "healthy", rec
    [a] = rec["actions"]
    assert (a["kind"], a["outcome"], a["code"]) == ("drain", "skipped", "fault_gone"), a
    assert "DRAIN" not in cluster.node_state("n1")
    assert json.loads((tmp_path / "state" / "n1" / "spool.json").read_text()) == []
    assert healthcheck(cluster, tmp_path, "n1", **cfg)["actions"] == []


def test_explain_after_a_resume_by_hand_says_the_node_is_in_service(clean_cluster, hung_mount, tmp_path,
                                                                     root_only_dir):
    """Drained by slurm-hooks, resumed by an admin's `scontrol update state=resume`, then
    only report-only runs (which ask Slurm nothing): explain asks Slurm, and says the
    node is in service, not "drained by slurm-hooks". Later, a new drain of a new
    cause is dated by its own time, not the first one's."""
    from helpers import SLURM_HOOKS
    cluster = clean_cluster
    cfg = {"filesystems": [{"path": str(hung_mount.path), "timeout": 1}], "policy": {"failures_to_drain": {}},
           "outage": {"interval": 1}}
    rec = healthcheck(cluster, tmp_path, "n1", **cfg)
    assert [(a["kind"], a["outcome"]) for a in rec["actions"]] == [("drain", "done")], rec["actions"]
    cluster.scontrol("update", "nodename=n1", "state=resume")
    for _ in range(2):
        healthcheck(cluster, tmp_path, "n1", **dict(cfg, actions={"report_only": True}))

    def explain() -> list[str]:
        r = subprocess.run([str(SLURM_HOOKS), "-c", str(tmp_path / "n1-manual.yaml"), "explain", "--node", "n1"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout.splitlines()
    out = explain()
    assert out[1].startswith("not drained: Slurm has the node in service (IDLE"), out
    assert not any("auto-resume" in line for line in out), out
    first_at = json.loads((tmp_path / "state" / "n1" / "drain.json").read_text())["at"]
    time.sleep(1.1)
    # A new drain of another cause, by an acting run: its own time.
    hung_mount.close()
    site = root_only_dir / "checks"          # a site check's directory is root's alone
    site.mkdir(mode=0o755)
    (site / "drill").write_text("#!/bin/sh\necho taken out by hand\nexit 2\n")
    (site / "drill").chmod(0o755)
    rec = healthcheck(cluster, tmp_path, "n1", **dict(cfg, filesystems=[{"path": str(tmp_path)}],
                                                      site_checks={"dir": str(site)}))
    assert [a["outcome"] for a in rec["actions"] if a["kind"] == "drain"] == ["done"], rec["actions"]
    at = json.loads((tmp_path / "state" / "n1" / "drain.json").read_text())["at"]
    assert at > first_at + 1, (at, first_at)
    out = explain()
    assert out[1].startswith("drained by slurm-hooks since ") and "site drill" in out[1], out


def test_actions_wait_for_slurmctld_and_happen_exactly_once(clean_cluster, hung_mount, tmp_path):
    cluster = clean_cluster
    job = stuck_writer_job(cluster, tmp_path, hung_mount.path, "n1")
    cfg = {"filesystems": [{"path": str(tmp_path)}], "stuck_tasks": {"grace": 0.5, "sample_window": 0.3},
           "actions": {"reboot": False}, "outage": {"interval": 1}}
    cluster.stop_controller()
    try:
        healthcheck(cluster, tmp_path, "n1", **cfg)
        time.sleep(0.6)
        for _ in range(2):
            # The drain waits for slurmctld; the job's actions wait for the mount's scope,
            # which no word from the cluster can tell while slurmctld does not answer.
            rec = healthcheck(cluster, tmp_path, "n1", **cfg)
            assert {a["kind"]: (a["outcome"], a["code"]) for a in rec["actions"]} == \
                {"drain": ("failed", "slurm_unreachable"), "comment": ("held", "scope_unknown"),
                 "requeue": ("held", "scope_unknown")}
            assert "Slurm unreachable" in rec["actions"][-1]["message"]
            spool = json.loads((tmp_path / "state" / "n1" / "spool.json").read_text())
            assert sorted(e["action"]["kind"] for e in spool) == ["drain"]
            time.sleep(1.1)
    finally:
        cluster.start_controller()
    rec = healthcheck(cluster, tmp_path, "n1", **cfg)
    assert {a["kind"]: a["outcome"] for a in rec["actions"]} == {"drain": "done", "comment": "held", "requeue": "held"}
    assert json.loads((tmp_path / "state" / "n1" / "spool.json").read_text()) == []
    # One interval after the first word from the cluster, no other node naming the mount.
    time.sleep(1.1)
    rec = healthcheck(cluster, tmp_path, "n1", **cfg)
    assert {a["kind"]: a["outcome"] for a in rec["actions"]} == \
        {"drain": "skipped", "comment": "done", "requeue": "done"}
    cluster.wait_for(lambda: cluster.show_job(job).get("Restarts") == "1", 10, what="requeued once")
    healthcheck(cluster, tmp_path, "n1", **cfg)
    info = cluster.show_job(job)
    assert info["Restarts"] == "1" and info["AdminComment"].count("slurm-hooks: node n1:") == 1
    assert ours(cluster.show_node("n1")["Reason"], f"job {job} stuck in ")


def test_drain_storm_breaker(clean_cluster, hung_mount, tmp_path):
    """An outage is grouped by the cause each drain recorded in the node's Comment, not
    by the words of its reason (which differ here, and could be alike for two causes)."""
    from slurm_hooks.core.reason import cause_text
    cluster = clean_cluster
    for n, words in (("n1", "fs /shared write hung >10s (nfs4)"), ("n3", "fs /shared fsync hung >12s (nfs4)")):
        cluster.scontrol("update", f"nodename={n}", "state=drain", f"reason={words} [slurm-hooks]",
                         "comment=" + cause_text("filesystem", "/shared", "/shared", "2026-12-02T03:50:00"))
    cfg = {"filesystems": [{"path": str(hung_mount.path)}], "filesystem_defaults": {"timeout": 1, "warn_after": 0.5},
           "policy": {"max_drained_nodes": 2, "max_drained_fraction": 0}}
    rec = healthcheck(cluster, tmp_path, "n2", **cfg)
    [held] = rec["actions"]
    assert held["kind"] == "drain" and held["outcome"] == "held"
    assert held["message"] == ("drain-storm breaker open: 2 nodes already drained by slurm-hooks (limit 2 of 3); "
                               "2 of them for filesystem /shared (n1, n3): looks like one outage, not 2 sick nodes")
    assert rec["status"] == "unhealthy" and "DRAIN" not in cluster.node_state("n2")
    # Drains of an older release (its prefix, no cause recorded): still ours, still
    # counted, but one "unknown cause" group, never named an outage.
    for n in ("n1", "n3"):
        cluster.scontrol("update", f"nodename={n}", "state=drain", "reason=slurm-hooks: fs /shared write hung >10s (nfs4)",
                         "comment=")
    [held] = healthcheck(cluster, tmp_path, "n2", **cfg)["actions"]
    assert held["outcome"] == "held" and held["message"] == (
        "drain-storm breaker open: 2 nodes already drained by slurm-hooks (limit 2 of 3)")
    # Below the limit, the drain goes ahead.
    cfg["policy"]["max_drained_nodes"] = 3
    rec = healthcheck(cluster, tmp_path, "n2", **cfg)
    assert [a["outcome"] for a in rec["actions"]] == ["done"] and "DRAIN" in cluster.node_state("n2")


def _comment(cluster, node: str) -> str:
    value = cluster.show_node(node).get("Comment", "")
    return "" if value == "(null)" else value


def test_a_drain_records_its_cause_in_the_comment_and_our_resume_empties_it(clean_cluster, hung_mount, tmp_path):
    """The reason for people (its key words first, `sinfo -R`'s 20 columns), the cause
    for tools in the node's Comment; an admin's Comment is never overwritten nor emptied."""
    from slurm_hooks.core.reason import read_cause
    cluster = clean_cluster
    cluster.scontrol("update", "nodename=n2", "comment=ticket 4711: PSU swapped")
    failing = {"filesystems": [{"path": str(hung_mount.path)}], "filesystem_defaults": {"timeout": 1},
               "policy": {"resume_after": 1}}
    for node in ("n1", "n2"):
        [drain] = healthcheck(cluster, tmp_path, node, **failing)["actions"]
        assert drain["kind"] == "drain" and drain["outcome"] == "done", drain
    reason = cluster.show_node("n1")["Reason"]
    assert ours(reason, f"fs {hung_mount.path} ") and reason.startswith(f"fs {hung_mount.path} ")
    # `sinfo -R` as admins read it: the reason's first 20 characters, then who and when.
    [line] = cluster.run("sinfo", "-R", "-h", "-n", "n1").stdout.splitlines()
    assert line.startswith(reason[:20] + " root ") and line.endswith(" n1"), (line, reason)
    cause = read_cause(_comment(cluster, "n1"))
    assert cause is not None and (cause["check"], cause["where"]) == ("filesystem", str(hung_mount.path))
    assert cause["incident"] and cause["since"].startswith(time.strftime("%Y-", time.gmtime()))
    assert _comment(cluster, "n2") == "ticket 4711: PSU swapped"
    # Healthy again: our drains are undone; our cause goes with n1's, the admin's stays.
    healthy = {"filesystems": [{"path": str(tmp_path)}], "policy": {"resume_after": 1}}
    for node in ("n1", "n2"):
        [resume] = healthcheck(cluster, tmp_path, node, **healthy)["actions"]
        assert resume["kind"] == "resume" and resume["outcome"] == "done", resume
        assert "DRAIN" not in cluster.node_state(node)
    assert _comment(cluster, "n1") == "" and _comment(cluster, "n2") == "ticket 4711: PSU swapped"



def test_undo_resumes_our_drains_and_takes_our_cause_out_of_the_comment(clean_cluster, hung_mount, tmp_path):
    """README, Undo: `slurm-hooks resume --all` gives back the nodes slurm-hooks drained and
    takes its cause out of their Comment; what an admin wrote there stays, and an admin's
    own drain is left alone. A node resumed by hand loses our stale cause too."""
    from helpers import SLURM_HOOKS, write_config

    from slurm_hooks.core.reason import is_our_cause
    cluster = clean_cluster
    failing = {"filesystems": [{"path": str(hung_mount.path)}], "filesystem_defaults": {"timeout": 1}}
    for node in ("n1", "n3"):
        [drain] = healthcheck(cluster, tmp_path, node, **failing)["actions"]
        assert drain["kind"] == "drain" and drain["outcome"] == "done", drain
    cause = _comment(cluster, "n1")
    assert is_our_cause(cause), cause
    cluster.scontrol("update", "nodename=n1", f"comment={cause} ticket 4711")      # an admin adds a note
    cluster.scontrol("update", "nodename=n3", "state=resume")                      # resumed by hand
    assert is_our_cause(_comment(cluster, "n3"))
    cluster.scontrol("update", "nodename=n2", "state=drain", "reason=disk swap", "comment=PSU swapped")
    conf = write_config(tmp_path / "undo.yaml", tmp_path, slurm=cluster.hooks_slurm(timeout=10))
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(conf), "resume", "--all"], capture_output=True, text=True,
                       timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "DRAIN" not in cluster.node_state("n1"), r.stdout
    assert _comment(cluster, "n1") == "ticket 4711", r.stdout
    assert _comment(cluster, "n3") == "", r.stdout
    state, reason = cluster.node_state("n2"), cluster.show_node("n2")["Reason"]
    assert "DRAIN" in state and reason.startswith("disk swap") and _comment(cluster, "n2") == "PSU swapped"
    assert "n2" not in r.stdout, r.stdout


def test_each_failing_run_costs_slurmctld_at_most_four_rpcs(clean_cluster, hung_mount, tmp_path):
    """The breaker reads the node list alone (REQUEST_NODE_INFO, no partitions): a run
    that drains where simultaneous drains could pass the limit costs the read, its claim,
    the re-read and the drain; a held run one read, and the first time one update naming
    its suspect mount in its Comment (the others tell the storage's outage by it)."""
    cluster = clean_cluster
    cfg = {"filesystems": [{"path": str(hung_mount.path)}], "filesystem_defaults": {"timeout": 1, "warn_after": 0.5},
           "policy": {"max_drained_nodes": 1, "max_drained_fraction": 0}}

    def run(node):
        cluster.run("sdiag", "-r")
        before = sdiag_counts(cluster)
        rec = healthcheck(cluster, tmp_path, node, **cfg)
        return rec, node_rpcs_spent(before, sdiag_counts(cluster))

    rec, spent = run("n1")
    assert [a["outcome"] for a in rec["actions"]] == ["done"] and "DRAIN" in cluster.node_state("n1")
    assert spent == {"REQUEST_NODE_INFO": 2, "REQUEST_UPDATE_NODE": 2}, spent
    # The next failing run of the drained node: the read shows the drain is in place.
    rec, spent = run("n1")
    assert [a["outcome"] for a in rec["actions"]] == ["skipped"] and spent == {"REQUEST_NODE_INFO": 1}, spent
    # At the limit: held after one read, naming the suspect mount once.
    for node in ("n2", "n3"):
        rec, spent = run(node)
        assert [a["outcome"] for a in rec["actions"]] == ["held"], rec["actions"]
        assert spent == {"REQUEST_NODE_INFO": 1, "REQUEST_UPDATE_NODE": 1}, spent
        assert "DRAIN" not in cluster.node_state(node)
        assert '"mounts":' in cluster.show_node(node).get("Comment", ""), cluster.show_node(node)
    rec, spent = run("n2")
    assert [a["outcome"] for a in rec["actions"]] == ["held"] and spent == {"REQUEST_NODE_INFO": 1}, spent
    # A node drained beyond the limit (a storm's run that read too early) steps back:
    # the read and its undrain.
    cluster.scontrol("update", "nodename=n3", "state=drain", f"reason=fs {hung_mount.path} read hung [slurm-hooks]")
    rec, spent = run("n3")
    assert [a["outcome"] for a in rec["actions"]] == ["held"] and "stepped back" in rec["actions"][0]["message"]
    assert spent == {"REQUEST_NODE_INFO": 1, "REQUEST_UPDATE_NODE": 1}, spent
    assert "DRAIN" not in cluster.node_state("n3") and "DRAIN" in cluster.node_state("n1")
    # A limit no storm can pass (3 of 3 nodes): no re-read after the drain.
    cfg["policy"]["max_drained_nodes"] = 3
    rec, spent = run("n2")
    assert [a["outcome"] for a in rec["actions"]] == ["done"] and "DRAIN" in cluster.node_state("n2")
    assert spent == {"REQUEST_NODE_INFO": 1, "REQUEST_UPDATE_NODE": 1}, spent


def test_the_node_list_through_slurms_library_matches_scontrol(clean_cluster, tmp_path):
    """One RPC through the library next to scontrol; two through scontrol where there is
    no library (a scontrol alone in its directory), and the same nodes either way."""
    from slurm_hooks.core.config import SlurmConfig
    from slurm_hooks.slurm.scontrol import Slurm, parse_oneliner
    cluster = clean_cluster
    cluster.scontrol("update", "nodename=n2", "state=drain", "reason=ops: fan a=b [x] broken")
    lone = tmp_path / "bin"
    lone.mkdir()
    here = cluster.bin_dir          # the scontrol (and library) of the Slurm under test
    (lone / "scontrol").symlink_to(f"{here}/scontrol" if here else "/usr/bin/scontrol")

    def nodes(bin_dir):
        slurm = Slurm(SlurmConfig(conf=str(cluster.conf_path), bin_dir=bin_dir))
        cluster.run("sdiag", "-r")
        before = sdiag_counts(cluster)
        lines = [parse_oneliner(ln) for ln in slurm.node_lines().splitlines() if ln.startswith("NodeName=")]
        return ({i["NodeName"]: (i["State"], i.get("Reason")) for i in lines},
                node_rpcs_spent(before, sdiag_counts(cluster)), slurm.library)

    via_lib, spent_lib, used_lib = nodes(here)
    via_scontrol, spent_scontrol, used_scontrol = nodes(str(lone))
    assert used_lib and not used_scontrol
    assert spent_lib == {"REQUEST_NODE_INFO": 1}, spent_lib
    assert spent_scontrol == {"REQUEST_NODE_INFO": 1, "REQUEST_PARTITION_INFO": 1}, spent_scontrol
    assert via_lib == via_scontrol and sorted(via_lib) == ["n1", "n2", "n3"]
    assert via_lib["n2"][0].startswith("IDLE+DRAIN") and via_lib["n2"][1].startswith("ops: fan a=b [x] broken [root@")


HOSTILE = r"""
import os, sys
with open("/proc/self/comm", "wb") as f:
    f.write(b"a\nb'\"$(x);\xff")
open(os.path.join(sys.argv[2], "started"), "w").close()
name = b"run\n'\";$(reboot)`id`\xff\xfe" + b"x" * 200
deep = b"/".join([name] * 15)          # about 3.5 KiB of path
open(os.path.join(os.fsencode(sys.argv[1]), deep, b"log"), "ab")
"""


def test_hostile_names_stay_one_clean_line(clean_cluster, hung_mount, tmp_path):
    cluster = clean_cluster
    (tmp_path / "hostile.py").write_text(HOSTILE)
    job = cluster.sbatch("-N1", "-w", "n3", "--requeue", "-o", "/dev/null", script=(
        f"#!/bin/sh\nsrun {sys.executable} {tmp_path}/hostile.py {hung_mount.path} {tmp_path}\n"))
    cluster.wait_for(lambda: (tmp_path / "started").exists(), 30, what="the job's task started")
    cluster.scontrol("update", f"jobid={job}", "admincomment=ops: keep\n'x';$(rm -rf /) ok")
    cfg = {"filesystems": [{"path": str(tmp_path)}], "stuck_tasks": {"grace": 0.3, "sample_window": 0.2},
           "actions": {"reboot": False}, "outage": {"interval": 1}}
    healthcheck(cluster, tmp_path, "n3", **cfg)
    time.sleep(0.4)
    healthcheck(cluster, tmp_path, "n3", **cfg)
    time.sleep(1.1)                 # the mount's scope known: the job's actions go ahead
    rec = healthcheck(cluster, tmp_path, "n3", **cfg)
    [f] = [f for c in rec["checks"] for f in c["findings"] if f["status"] == "stuck"]
    assert f["evidence"]["file"].startswith(f"{hung_mount.path}/run")
    reason = cluster.show_node("n3")["Reason"]
    plain = reason.split(" [root@")[0]
    assert ours(plain, f"job {job} stuck in ") and len(plain.encode()) <= 255
    assert not any(c in plain for c in "\n\r\t'\"`") and "\x1b" not in plain
    comment = cluster.show_job(job)["AdminComment"]
    assert comment.startswith("ops: keep")       # the admin's words are kept
    assert comment.count("slurm-hooks: node n3:") == 1
    for line in (tmp_path / "journal-n3.jsonl").read_bytes().splitlines():
        json.loads(line.decode("utf-8"))          # valid UTF-8 and valid JSON, every line


def test_health_check_replaces_a_generic_prolog_error(clean_cluster, tmp_path):
    """When the prolog's detached helper could not set the precise reason, the next
    health check does; it never re-drains a node an admin resumed since."""
    cluster = clean_cluster
    precise = "fs /scratch create hung >3s (lustre) [slurm-hooks]"
    for node in ("n1", "n2"):
        state = tmp_path / "state" / node
        state.mkdir(parents=True)
        (state / "hook-failure.json").write_text(json.dumps(
            {"hook": "prolog", "reason": precise, "at": time.time(), "job": "1", "replaces": "Prolog error"}))
    cluster.scontrol("update", "nodename=n1", "state=drain", "reason=Prolog error")
    cfg = {"filesystems": [{"path": str(tmp_path)}]}
    rec = healthcheck(cluster, tmp_path, "n1", **cfg)
    assert [(a["kind"], a["outcome"]) for a in rec["actions"]] == [("drain", "done")]
    assert cluster.show_node("n1")["Reason"].startswith(precise)
    rec = healthcheck(cluster, tmp_path, "n2", **cfg)           # n2 was resumed meanwhile
    assert [(a["outcome"], a["message"]) for a in rec["actions"]] == \
        [("skipped", "not drained (resumed since): nothing to replace")]
    assert "DRAIN" not in cluster.node_state("n2")
    assert not (tmp_path / "state" / "n1" / "hook-failure.json").exists()
    # explain: the drain is Slurm's, only its reason slurm-hooks'.
    from helpers import SLURM_HOOKS
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(tmp_path / "n1-manual.yaml"), "explain", "--node", "n1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    head = r.stdout.splitlines()[1]
    assert head.startswith("drained by Slurm, its reason re-worded by slurm-hooks (replaced Slurm's generic reason "
                           "'Prolog error')"), r.stdout
