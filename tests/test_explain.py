"""`slurm-hooks explain` after real runs: it says what the journal shows slurm-hooks did,
and names what Slurm did as Slurm's."""
from __future__ import annotations

import subprocess

from helpers import BIN, SLURM_HOOKS, write_config


def _prolog_failed(tmp_path, hung_mount):
    """A real prolog failing on a hung mount (no Slurm here: the prolog asks it nothing)."""
    cfg = write_config(tmp_path / "c.yaml", tmp_path, filesystems=[{"path": str(hung_mount.path)}],
                       prolog={"fs_timeout": 1, "reason_delay": 0.1})
    env = {"SLURM_HOOKS_CONFIG": str(cfg), "SLURMD_NODENAME": "hooknode", "SLURM_JOB_ID": "77"}
    r = subprocess.run([str(BIN / "slurm-hooks-prolog")], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 1, r.stdout + r.stderr
    return cfg, env


def _explain(cfg, env, *args):
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(cfg), "explain", *args], capture_output=True, text=True,
                       env=env, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_a_failed_prologs_drain_is_said_to_be_slurms(tmp_path, hung_mount):
    cfg, env = _prolog_failed(tmp_path, hung_mount)
    out = _explain(cfg, env)
    head = out.splitlines()[1]
    assert "drained by slurm-hooks" not in out, out
    assert head.startswith("drained by Slurm (its own `Prolog error` when slurm-hooks' prolog failed"), out


def test_explain_after_failed_prologs_reads_plainly(tmp_path, hung_mount):
    """The drain's time stays from run to run, the helper's re-wording is among the
    actions, no result is said twice, no time is a raw epoch."""
    import json
    import re
    import time

    from helpers import poll
    cfg, env = _prolog_failed(tmp_path, hung_mount)
    first = _explain(cfg, env)
    # The detached helper (no Slurm here: it fails) journals what became of its re-wording.
    journal = tmp_path / "journal.jsonl"
    poll(lambda: any(json.loads(x).get("followup") for x in journal.read_text().splitlines()), 20,
         what="the helper's journal line")
    time.sleep(1.1)
    _prolog_failed(tmp_path, hung_mount)
    poll(lambda: sum(bool(json.loads(x).get("followup")) for x in journal.read_text().splitlines()) == 2, 20,
         what="the second helper's journal line")
    again = _explain(cfg, env)
    assert first.splitlines()[1] == again.splitlines()[1], (first, again)
    assert "re-word node hooknode's reason (prolog's detached helper): failed" in again, again
    assert "left to Slurm (left to Slurm" not in again, again
    assert "drain node hooknode: left to Slurm (Slurm drains the node when the prolog fails" in again, again
    assert not re.search(r"since: \d{9,}", again), again
    assert re.search(r"since: 20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d", again), again


def test_the_same_word_run_after_run_is_said_once_with_how_often():
    """A requeued job waiting on Slurm is followed each run: `explain` says it once."""
    from slurm_hooks.views.explain import _actions_since
    drain = {"kind": "drain", "node": "n1", "reason": "r", "outcome": "done", "result": "done", "incident": "i1"}
    requeue = {"kind": "requeue", "job": "7", "outcome": "done", "result": "done", "incident": "i1"}
    wait = {"kind": "start", "job": "7", "outcome": "skipped", "result": "skipped", "incident": "i1",
            "message": "COMPLETING: a task on n1 cannot die"}
    runs = [{"time": "T1", "actions": [drain, requeue]}, {"time": "T2", "actions": [wait]},
            {"time": "T3", "actions": [wait]}, {"time": "T4", "actions": [wait]},
            {"time": "T5", "actions": [dict(wait, message="hold until 03:14:20")]}]
    assert _actions_since(runs, runs[0], reason="r") == [
        "T1 drain node n1: done", "T1 requeue job 7: done",
        "T2 start job 7: skipped (COMPLETING: a task on n1 cannot die) [3 runs, until T4]",
        "T5 start job 7: skipped (hold until 03:14:20)"]


def test_actions_for_a_drain_are_that_drains_own():
    """A later run's actions about another incident (a drill's drain, another job) are
    not the drain's; `not done` is said once."""
    from slurm_hooks.views.explain import _actions_since
    drain = {"kind": "drain", "node": "n1", "reason": "r", "outcome": "report-only", "result": "not done",
             "incident": "i1", "message": "report only (actions.report_only): not done"}
    other = [{"kind": "drain", "node": "n1", "reason": "site drill [slurm-hooks]", "outcome": "done", "result": "done",
              "incident": "site:drill:2"},
             {"kind": "comment", "job": "9", "outcome": "done", "result": "done", "incident": "stuck:9"}]
    resume = {"kind": "resume", "node": "n1", "reason": "r", "outcome": "done", "result": "done"}
    runs = [{"time": "T1", "actions": [drain]}, {"time": "T2", "actions": other}, {"time": "T3", "actions": [resume]}]
    assert _actions_since(runs, runs[0], reason="r") == [
        "T1 drain node n1: not done (report only (actions.report_only))", "T3 resume node n1: done"]


def test_before_the_first_run_explain_says_the_health_check_may_not_have_run():
    from slurm_hooks.views.explain import explain
    out = explain([], "n1", {})
    assert "no run of slurm-hooks on this node in the journal yet: the health check may not have run" in out
    ran = [{"event": "run", "node": "n1", "time": "T", "hook": "healthcheck", "status": "healthy", "checks": [],
            "actions": []}]
    assert "no run of slurm-hooks" not in explain(ran, "n1", {})


def test_resume_dry_run_says_what_it_would_do():
    from slurm_hooks.act.undo import undo
    from slurm_hooks.slurm.fake import FakeSlurm
    slurm = FakeSlurm()
    slurm.drain("n1", "fs /scratch hung [slurm-hooks]")
    lines, ok = undo(slurm, ["n1"], "slurm-hooks:", dry_run=True)
    assert lines == ["n1: would resume"] and ok
    assert "DRAIN" in slurm.node_state("n1")["State"]


def test_scope_and_auto_resume_are_said_only_where_they_apply():
    from slurm_hooks.views.explain import explain
    reason = "site drill2 critical [slurm-hooks]"
    run = {"event": "run", "node": "n1", "time": "T1", "hook": "healthcheck", "status": "unhealthy", "notes": [],
           "checks": [{"name": "site", "findings": [{"check": "site", "severity": "fail", "summary": "site drill2"}]}],
           "actions": [{"kind": "drain", "node": "n1", "reason": reason, "outcome": "done", "result": "done"}]}
    drain = {"reason": reason, "resumable": True, "passes": 0, "at": 1.7e9}
    out = explain([run], "n1", drain)
    assert "scope: this node (site: no mount behind it)" in out and "mount's recovery" not in out, out
    assert "auto-resume: yes" in out
    out = explain([run], "n1", drain, report_only=True)
    assert "auto-resume: no: report-only (actions.report_only) resumes nothing" in out, out


def test_status_calls_an_outage_only_a_shared_mounts_and_lists_only_the_drains_jobs():
    """A site check failing on three nodes is three nodes' fault, not an outage; a job
    diagnosed on a node in an earlier incident is not listed under the node's new drain."""
    from slurm_hooks.core.reason import cause_text
    from slurm_hooks.slurm.fake import FakeSlurm
    from slurm_hooks.views.status import collect, render
    slurm = FakeSlurm()
    old = slurm.add_job("n1", state="PENDING")
    slurm.set_admin_comment(old, f"slurm-hooks: node n1: job {old} stuck in openat() on /shared")
    for n in ("n1", "n2", "n3"):
        slurm.drain_with_cause(n, "site drill2: taken out by hand [slurm-hooks]",
                               cause_text("site", "drill2", "site:drill2:2", "2026-12-02T03:50:00"))
    out = render(collect(slurm, "slurm-hooks:"))
    assert "site drill2: 3 node(s)" in out and "OUTAGE" not in out, out
    assert f"job {old}" not in out, out
    # The storage's: a mount check's drains naming the shared mount they suspect.
    mounts = [["srv:/shared", "nfs4", "/shared", "2026-12-02T03:50:00", "hung", "2026-12-02T03:50:00"]]
    for n in ("n1", "n2"):
        slurm.drain_with_cause(n, f"job {old} stuck in openat() on /shared (nfs4) [slurm-hooks]",
                               cause_text("stuck_tasks", "/shared", "/shared", "2026-12-02T03:50:00", mounts))
    out = render(collect(slurm, "slurm-hooks:"))
    assert "stuck_tasks /shared: OUTAGE on 2 nodes" in out, out
    assert f"job {old} diagnosed by slurm-hooks" in out, out


def test_explain_checks_the_recorded_drain_against_slurm():
    """A drain recorded locally, undone since by another hand: explain says the node is in
    service (Slurm's word), not "drained by slurm-hooks"; where Slurm does not answer,
    it says its word is the local record's."""
    from slurm_hooks.views.explain import explain
    drain = {"reason": "site drill: taken out by hand [slurm-hooks]", "resumable": False, "passes": 3, "at": 1.0e9}
    run = {"event": "run", "node": "n1", "time": "T", "hook": "healthcheck", "status": "unhealthy", "checks": [],
           "actions": [{"kind": "drain", "node": "n1", "reason": drain["reason"], "outcome": "done"}]}
    out = explain([run], "n1", drain, slurm_now={"NodeName": "n1", "State": "IDLE", "Reason": ""})
    head = out.splitlines()[1]
    assert head.startswith("not drained: Slurm has the node in service (IDLE); slurm-hooks drained it at "), out
    assert "auto-resume" not in out and "drained by slurm-hooks since" not in out, out
    # Slurm 25.11 keeps the last reason of a node an admin resumed: the state decides.
    out = explain([run], "n1", drain, slurm_now={"NodeName": "n1", "State": "MIXED", "Reason": drain["reason"]})
    assert out.splitlines()[1].startswith("not drained: Slurm has the node in service (MIXED)"), out
    out = explain([run], "n1", drain, slurm_now={"NodeName": "n1", "State": "IDLE+DRAIN", "Reason": drain["reason"]})
    assert out.splitlines()[1].startswith("drained by slurm-hooks since "), out
    out = explain([run], "n1", drain, slurm_now={"error": "scontrol gave no answer within 5s"})
    assert out.splitlines()[1].startswith("drained by slurm-hooks since "), out
    assert "(the local record: Slurm did not answer: scontrol gave no answer within 5s)" in out, out
