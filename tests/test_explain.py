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
    drain = {"kind": "drain", "node": "n1", "reason": "r", "outcome": "done", "result": "done"}
    wait = {"kind": "start", "job": "7", "outcome": "skipped", "result": "skipped",
            "message": "COMPLETING: a task on n1 cannot die"}
    runs = [{"time": "T1", "actions": [drain]}, {"time": "T2", "actions": [wait]}, {"time": "T3", "actions": [wait]},
            {"time": "T4", "actions": [wait]}, {"time": "T5", "actions": [dict(wait, message="hold until 03:14:20")]}]
    assert _actions_since(runs, runs[0]) == [
        "T1 drain node n1: done",
        "T2 start job 7: skipped (COMPLETING: a task on n1 cannot die) [3 runs, until T4]",
        "T5 start job 7: skipped (hold until 03:14:20)"]


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
