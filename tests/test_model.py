"""The data that flows through slurm-hooks (core/model.py), in process: what the journal
and --json hold of a run, an action and its result, and what a job's environment says.
Most tests reach these through the installed program in a child; these hold each field
where a one-line change would go unnoticed (tools/mutation.sh)."""
from __future__ import annotations

import time

import pytest

from slurm_hooks import __version__
from slurm_hooks.core.model import FAIL, OK, WARN, Action, ActionResult, CheckRun, Finding, JobInfo, Recovery, RunRecord, worst


def test_worst_is_the_highest_severity():
    assert worst([]) == OK
    assert worst([OK, WARN, OK]) == WARN
    assert worst([WARN, FAIL, OK]) == FAIL
    assert worst([FAIL, WARN]) == FAIL


def test_a_findings_text_is_printable_everywhere():
    f = Finding("c", "t\x1b", "s", WARN, "a\x1b", detail="d\x1b", reason="r\x1b", evidence={"k": "v\x1b"})
    assert (f.target, f.summary, f.detail, f.reason, f.evidence) == ("t\\x1b", "a\\x1b", "d\\x1b", "r\\x1b",
                                                                      {"k": "v\\x1b"})
    assert Finding("c", "t", "s", OK, "sum").reason_text == "sum"


def test_an_action_describes_itself():
    assert Action("drain", node="n1", reason="fs hung").describe() == "drain node n1: fs hung"
    assert Action("resume", node="n1").describe() == "resume node n1"
    assert Action("reboot", node="n2", reason="x").describe() == "reboot node n2: x"
    assert Action("down", node="n3").describe() == "down node n3"
    assert Action("cancel_reboot", node="n3", reason="storage back").describe() == \
        "cancel_reboot node n3: storage back"
    assert Action("release", node="n3", job="7").describe() == "release node n3 (DOWN) for job 7"
    r = Recovery(mountpoint="/scratch", method="fuse-abort")
    assert Action("recover", node="n1", recovery=r).describe() == "recover /scratch on node n1 (fuse-abort)"
    assert Action("recover", node="n1").describe() == "recover job None"
    assert Action("comment", job="7", text="stuck").describe() == "record on job 7: stuck"
    assert Action("requeue", job="7").describe() == "requeue job 7"
    assert Action("drain", node="n1", incident="a+b").keys == ["drain:n1:a", "drain:n1:b"]
    assert Action("comment", node="n1", job="7", incident="a").keys == ["comment:7:a"]
    assert Action("drain", node="n1").keys == []


def test_an_action_results_json():
    a = Action("drain", node="n1", reason="r")
    d = ActionResult(a, "failed", message="said \x1b", retry=True, code="slurm_unreachable").to_json()
    assert (d["kind"], d["node"], d["outcome"], d["code"], d["message"], d["result"], d["retry"]) == (
        "drain", "n1", "failed", "slurm_unreachable", "said \\x1b", "spooled", True)
    d = ActionResult(a, "failed", message="no").to_json()
    assert (d["result"], "retry" in d, d["message"]) == ("failed", False, "no")
    d = ActionResult(a, "done").to_json()
    assert (d["outcome"], d["code"], d["message"], d["result"]) == ("done", "", "", "done")


def test_a_check_run_and_a_run_record_in_json():
    f = Finding("filesystem", "/scratch", "hung", FAIL, "fs /scratch hung")
    c = CheckRun("filesystem", 0.12345678, [f], error=None)
    assert c.to_json() == {"name": "filesystem", "seconds": 0.123457, "error": None, "findings": [f.to_json()]}
    started = 1_700_000_000.0          # not now: the time written is the run's start
    rec = RunRecord("healthcheck", "n1", "/etc/c.yaml", started, duration=1.23456789, checks=[c],
                    actions=[ActionResult(Action("drain", node="n1"), "done")], notes=["n"], warnings=["w"],
                    dry_run=True, report_only=True, job="9", local_errors=["e"])
    d = rec.to_json()
    assert d == {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)), "hook": "healthcheck",
                 "node": "n1", "status": "unhealthy", "duration": 1.234568, "version": __version__,
                 "config": "/etc/c.yaml", "dry_run": True, "report_only": True, "job": "9",
                 "checks": [c.to_json()], "actions": [rec.actions[0].to_json()], "notes": ["n"],
                 "warnings": ["w"], "local_errors": ["e"]}
    assert rec.findings == [f] and rec.exit_code() == 1


@pytest.mark.parametrize("severities,local,status,code", [
    ([], [], "healthy", 0), ([OK], ["state unwritable"], "warning", 0), ([WARN], [], "warning", 0),
    ([FAIL, OK], [], "unhealthy", 1), ([FAIL], ["x"], "unhealthy", 1)])
def test_a_runs_status_and_exit_code(severities, local, status, code):
    rec = RunRecord("healthcheck", "n1", "c", 0.0, checks=[
        CheckRun("x", 0.0, [Finding("x", "t", "s", sev, "s") for sev in severities])], local_errors=local)
    assert (rec.status, rec.exit_code()) == (status, code)


def test_a_jobs_gpus_and_sharing_from_its_environment():
    assert JobInfo.from_env({}) is None
    assert JobInfo.from_env({"SLURM_JOBID": "5"}) == JobInfo(id="5")
    j = JobInfo.from_env({"SLURM_JOB_ID": "7", "SLURM_JOB_UID": "1000", "SLURM_JOB_GPUS": " 0, 2 ,,",
                          "CUDA_VISIBLE_DEVICES": "5"})
    assert j == JobInfo(id="7", uid="1000", gpus=["0", "2"], shared=None)
    assert JobInfo.from_env({"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "GPU-a"}).gpus == ["GPU-a"]
    assert JobInfo.from_env({"SLURM_JOB_ID": "7", "GPU_DEVICE_ORDINAL": "3"}).gpus == ["3"]
    assert JobInfo.from_env({"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": ""}).gpus is None
    assert JobInfo.from_env({"SLURM_JOB_ID": "7", "SLURM_SHARDS_ON_NODE": "2"}).shared == "SLURM_SHARDS_ON_NODE"
    assert JobInfo.from_env({"SLURM_JOB_ID": "7", "SLURM_SHARDS_ON_NODE": " ",
                             "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"}).shared == "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
    assert JobInfo.from_env({"SLURM_JOB_ID": "7", "SLURM_JOB_ID_X": "1"}).shared is None
