"""After the requeue (issue: the job runs again): a node whose task of the requeued job
cannot die is set DOWN when that job is alone on it, so Slurm lets the job go; a job
in Slurm's requeue hold is told so, or started at once (`actions.restart_now`); a
begin time its user set is never touched. Decisions over slurm/fake.py, which
tests/test_slurm_contract.py holds to both real backends; tests/test_requeue_clock.py
runs the same on the real clusters."""
from __future__ import annotations

import time

import pytest
from test_decisions import OURS, P, config, one, state_of, stuck

from slurm_hooks.act.actuation import take_actions
from slurm_hooks.core.model import Action
from slurm_hooks.core.outcomes import Code, Outcome
from slurm_hooks.decide import policy
from slurm_hooks.slurm.fake import FakeSlurm

HOLD = 10


def actuate(cfg, state, slurm, findings):
    return take_actions(cfg, "n1", findings, False, state, open_backend=slurm.open)


def by_kind(results) -> dict:
    return {r.action.kind: (str(r.outcome), str(r.code)) for r in results}


def setup(tmp_path, restart_now=False, release_node=True, **actions):
    cfg = config(tmp_path)
    cfg.actions.restart_now, cfg.actions.release_node = restart_now, release_node
    cfg.actions.reboot = False
    for k, v in actions.items():
        setattr(cfg.actions, k, v)
    state = state_of(tmp_path)
    # slurm.conf as the health check read it: AuthInfo=cred_expire=10.
    state.save("slurm-config", {"at": time.time(), "health_check_interval": 5, "requeue_holds": [HOLD]})
    return cfg, state


def killed(f):
    f.evidence["sigkill_pending"] = True
    return f


def requeued_and_held(tmp_path, slurm, job, **kw):
    """The first run: drain, record, requeue. The job's task cannot die: Slurm holds it
    COMPLETING on n1."""
    cfg, state = setup(tmp_path, **kw)
    first = by_kind(actuate(cfg, state, slurm, [stuck(job)]))
    assert first["requeue"] == ("done", ""), first
    assert slurm.show_job(job)["JobState"] == "COMPLETING"
    return cfg, state


def test_the_node_is_released_when_the_job_is_alone_and_its_hold_told(tmp_path):
    slurm = FakeSlurm(requeue_hold=HOLD)
    job = slurm.add_job("n1,n2", unkillable=True)
    cfg, state = requeued_and_held(tmp_path, slurm, job)
    # Killed, still in D: the next run sets n1 DOWN, and Slurm lets the job go.
    second = by_kind(actuate(cfg, state, slurm, [killed(stuck(job))]))
    assert second["release"] == ("done", "released"), second
    info = slurm.node_state("n1")
    assert info["State"].startswith("DOWN") and info["Reason"].startswith("job ")
    assert slurm.show_job(job)["JobState"] == "PENDING"
    comment = slurm.show_job(job)["AdminComment"]
    assert f"{P} node n1 set DOWN: a task of the job on it cannot die" in comment
    # The same run followed the job: it left COMPLETING and waits in Slurm's hold,
    # which restart_now (off) leaves to run: said on the job, once.
    assert second["start"] == ("skipped", "hold_kept"), second
    hold = slurm.job_hold(job)
    assert "hold until " + hold["EligibleTime"].partition("T")[2] in slurm.show_job(job)["AdminComment"]
    third = by_kind(actuate(cfg, state, slurm, [killed(stuck(job))]))
    assert "start" not in third and third["release"] == ("skipped", "already_done"), third
    assert slurm.calls.get("start_now") is None and slurm.calls["set_down"] == 1
    # Back in service once the fault is gone, as after any drain of ours: the mount's
    # recovery makes the drain resumable, and the resume of a node DOWN by us is RESUME.
    drain = state.load("drain")
    assert drain["released"] is True
    r = one(slurm, Action("resume", node="n1", reason=drain["reason"], down_ours=True))
    assert (r.outcome, slurm.node_state("n1")["State"]) == (Outcome.DONE, "IDLE")


def test_restart_now_ends_slurms_hold_once(tmp_path):
    slurm = FakeSlurm(requeue_hold=HOLD)
    job = slurm.add_job("n1,n2", unkillable=True)
    cfg, state = requeued_and_held(tmp_path, slurm, job, restart_now=True)
    # Still COMPLETING: said, and asked again by the next run (no ledger entry).
    slurm.add_job("n3")
    cfg.actions.release_node = False
    second = by_kind(actuate(cfg, state, slurm, [killed(stuck(job))]))
    assert "release" not in second and second["start"] == ("skipped", "completing"), second
    # What Slurm waits for, on the job once.
    by_kind(actuate(cfg, state, slurm, [killed(stuck(job))]))
    held = f"{P} COMPLETING: a task on n1 cannot die; Slurm holds the job until it does"
    assert slurm.show_job(job)["AdminComment"].count(held) == 1, slurm.show_job(job)["AdminComment"]
    cfg.actions.release_node = True
    third = by_kind(actuate(cfg, state, slurm, [killed(stuck(job))]))
    assert third["release"] == ("done", "released") and third["start"] == ("done", "start_asked"), third
    hold = slurm.job_hold(job)
    assert hold["Reason"] == "None" and hold["EligibleTime"] <= time.strftime("%Y-%m-%dT%H:%M:%S")
    assert "start asked at " in slurm.show_job(job)["AdminComment"]
    fourth = by_kind(actuate(cfg, state, slurm, [killed(stuck(job))]))
    assert "start" not in fourth and slurm.calls["start_now"] == 1


def test_another_job_on_the_node_keeps_it_up_and_the_job_waits(tmp_path):
    slurm = FakeSlurm(requeue_hold=HOLD)
    job = slurm.add_job("n1,n2", unkillable=True)
    other = slurm.add_job("n1", user="bob", uid=1002)
    cfg, state = requeued_and_held(tmp_path, slurm, job, restart_now=True)
    for _ in range(2):
        r = by_kind(actuate(cfg, state, slurm, [killed(stuck(job))]))
        assert r["release"] == ("skipped", "other_jobs") and r["start"] == ("skipped", "completing"), r
    assert "DOWN" not in slurm.node_state("n1")["State"] and slurm.calls.get("set_down") is None
    assert slurm.show_job(other)["JobState"] == "RUNNING"
    comment = slurm.show_job(job)["AdminComment"]
    said = f"{P} COMPLETING: a task on n1 cannot die; n1 not set DOWN (job {other} (RUNNING) runs there)"
    assert comment.count(said) == 1, comment
    # The other job ends: the next run lets the requeued one go.
    slurm.end_job(other)
    r = by_kind(actuate(cfg, state, slurm, [killed(stuck(job))]))
    assert r["release"] == ("done", "released"), r


def test_a_begin_time_its_user_set_is_never_started_early(tmp_path):
    slurm = FakeSlurm(requeue_hold=HOLD)
    job = slurm.add_job("n1", state="PENDING", begin=time.time() + 3600)
    cfg, state = setup(tmp_path, restart_now=True)
    state.save("actions-done", {f"requeue:{job}:n1:345:100": {"done": time.time(), "seen": time.time(),
                                                              "ended": True}})
    r = by_kind(actuate(cfg, state, slurm, []))
    assert r == {"start": ("skipped", "users_begin")}
    assert slurm.calls.get("start_now") is None
    assert by_kind(actuate(cfg, state, slurm, [])) == {}       # once


def test_no_release_for_a_task_that_can_die_for_a_job_not_ended_or_when_off():
    f = stuck("12")
    ledger = {"requeue:12:n1:345:100": {"done": 1.0, "seen": 1.0, "ended": True}}
    kinds = lambda fs, ledger, **kw: [a.kind for a in policy.decide(  # noqa: E731
        fs, "n1", P, _actions(**kw), ledger, kill_grace=60, now=2.0)]
    assert "release" not in kinds([f], ledger)                     # no SIGKILL pending yet
    assert "release" in kinds([killed(stuck("12"))], ledger)
    assert "release" not in kinds([killed(stuck("12"))], {})       # not ended by us
    skipped = {"requeue:12:n1:345:100": {"done": 1.0, "seen": 1.0, "ended": False}}
    assert "release" not in kinds([killed(stuck("12"))], skipped)  # --no-requeue: nothing ended
    assert "release" not in kinds([killed(stuck("12"))], ledger, release_node=False)
    asleep = killed(stuck("12"))
    asleep.needs_reboot = False                                    # in S: it wakes for the kill
    assert "release" not in kinds([asleep], ledger)


def _actions(**kw):
    from slurm_hooks.core.config import ActionsConfig
    cfg = ActionsConfig()
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


def test_a_job_is_followed_once_per_requeue_and_not_for_ever():
    now = 10_000.0
    ledger = {"requeue:12:a": {"done": now - 10, "ended": True}, "requeue:12:b": {"done": now - 10, "ended": True},
              "requeue:13:a": {"done": now - 10, "ended": False},          # left running
              "requeue:14:a": {"done": now - policy.FOLLOW_FOR, "ended": True},
              "requeue:15:a": {"done": now - 10, "ended": True}, "start:15:a": {"done": now}}
    assert [(a.job, a.incident) for a in policy.follow_requeues(ledger, "n1", now)] == [("12", "a+b")]


@pytest.mark.parametrize("state", ["RUNNING", "SUSPENDED"])
def test_the_reboot_release_never_downs_a_node_with_another_job(state):
    slurm = FakeSlurm()
    job = slurm.add_job("n1", unkillable=True)
    slurm.requeue(job)
    slurm.reboot("n1", OURS)
    other = slurm.add_job("n1", user="bob", uid=1002, state=state)
    r = one(slurm, Action("down", node="n1", reason=OURS))
    assert (r.outcome, r.code) == (Outcome.SKIPPED, Code.OTHER_JOBS) and other in r.message
    slurm.end_job(other)
    assert one(slurm, Action("down", node="n1", reason=OURS)).code == Code.RELEASED


def test_a_node_down_by_another_is_not_resumed_for_our_release():
    slurm = FakeSlurm()
    slurm.set_state("n1", base="DOWN", reason=OURS)
    # No record of our release: a DOWN node with our words is left alone.
    assert one(slurm, Action("resume", node="n1", reason=OURS)).code == Code.FOREIGN_STATE
    slurm.set_state("n1", base="DOWN", reason="admin: PSU")
    assert one(slurm, Action("resume", node="n1", reason=OURS, down_ours=True)).code == Code.NOT_OURS


def test_our_reason_survives_kill_task_failed_on_a_node_we_released(tmp_path):
    slurm = FakeSlurm(requeue_hold=HOLD)
    job = slurm.add_job("n1,n2", unkillable=True)
    cfg, state = requeued_and_held(tmp_path, slurm, job)
    actuate(cfg, state, slurm, [killed(stuck(job))])
    assert slurm.node_state("n1")["State"].startswith("DOWN")
    # Slurm gives up on the task: its generic drain goes over our reason.
    slurm.set_state("n1", base="DOWN", flags=("DRAIN",), reason="Kill task failed")
    r = by_kind(actuate(cfg, state, slurm, [killed(stuck(job))]))
    assert r["drain"] == ("done", "replaced_generic"), r
    assert slurm.node_state("n1")["Reason"].startswith("job ") and slurm.node_state("n1")["State"] == "DOWN+DRAIN"
    # Not on a node DOWN by another's hand.
    other = one(slurm, Action("drain", node="n2", reason=OURS, replaces="Kill task failed"))
    slurm.set_state("n3", base="DOWN", reason="Kill task failed")
    assert one(slurm, Action("drain", node="n3", reason=OURS, replaces="Kill task failed")).code == \
        Code.FOREIGN_STATE
    assert other.outcome == Outcome.DONE
