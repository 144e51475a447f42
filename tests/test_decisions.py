"""What slurm-hooks decides, against the in-memory Slurm (slurm_hooks/slurm/fake.py):
the action handlers, actuation around them (spool, ledger, breaker, the way back after
a reboot), policy and the breaker. No cluster is started; tests/test_slurm_contract.py
keeps the fake's answers those of the real backends."""
from __future__ import annotations

import time

import pytest

from slurm_hooks.act.actions import execute
from slurm_hooks.act.actuation import take_actions
from slurm_hooks.checks._config import default_config
from slurm_hooks.core.config import ActionsConfig, Config
from slurm_hooks.core.model import FAIL, OK, Action, Finding
from slurm_hooks.core.outcomes import Code, Outcome
from slurm_hooks.core.reason import cause_text, read_cause
from slurm_hooks.core.state import StateStore
from slurm_hooks.decide import breaker, policy
from slurm_hooks.host.procfs import boot_id
from slurm_hooks.slurm.api import OutOfTime
from slurm_hooks.slurm.fake import FakeSlurm

P = "slurm-hooks:"
OURS = "fs /scratch write hung >10s (nfs4) [slurm-hooks]"


def drain(node="n1", reason=OURS, **kw):
    return Action("drain", node=node, reason=reason, **kw)


def run(slurm, *actions, ledger=None):
    return execute(list(actions), slurm, P, dry_run=False, ledger=ledger)


def one(slurm, action, ledger=None):
    [r] = run(slurm, action, ledger=ledger)
    return r


def fs_failing(path="/scratch"):
    return Finding(check="filesystem", target=path, status="hung", severity=FAIL,
                   summary=f"fs {path} write hung >10s (nfs4)")


def stuck(job, pid=345, uid=1001, start=100):
    return Finding(check="stuck_tasks", target=f"job {job} pid {pid}", status="stuck", severity=FAIL,
                   summary=f"job {job} rank 0 pid {pid} stuck 612s in write() on /gpfs/log (gpfs /gpfs)",
                   reason=f"job {job} pid {pid} stuck in write() on /gpfs/log (gpfs)", job=job,
                   incident=f"n1:{pid}:{start}", needs_reboot=True, hard=True, resumable=False,
                   evidence={"uid": uid})


# --- the handlers (act/actions.py) ------------------------------------------------------------
def test_drain_of_an_idle_node_reads_its_state_then_drains_it():
    slurm = FakeSlurm()
    r = one(slurm, drain())
    assert (r.outcome, r.code) == (Outcome.DONE, Code.NONE)
    assert slurm.node_state("n1") == {"NodeName": "n1", "State": "IDLE+DRAIN", "Reason": OURS, "Comment": ""}
    assert slurm.show_node("n1")["Reason"].startswith(OURS + " [root@")
    assert slurm.calls == {"node_state": 2, "drain": 1, "show_node": 1}


def test_a_drain_again_with_the_same_reason_is_not_sent_and_a_new_reason_of_ours_replaces():
    slurm = FakeSlurm()
    one(slurm, drain())
    assert one(slurm, drain()).code == Code.ALREADY_DRAINED
    assert slurm.calls["drain"] == 1
    newer = f"{P} fs /scratch gone"
    assert one(slurm, drain(reason=newer)).outcome == Outcome.DONE
    assert slurm.node_state("n1")["Reason"] == newer


def test_an_admins_drain_is_never_overwritten_nor_undone():
    slurm = FakeSlurm()
    slurm.set_state("n1", flags=("DRAIN",), reason="admin: PSU swap", user="alice")
    r = one(slurm, drain())
    assert (r.outcome, r.code) == (Outcome.SKIPPED, Code.FOREIGN_DRAIN)
    assert one(slurm, Action("resume", node="n1", reason=OURS)).code == Code.NOT_OURS
    assert slurm.node_state("n1") == {"NodeName": "n1", "State": "IDLE+DRAIN", "Reason": "admin: PSU swap", "Comment": ""}
    assert slurm.show_node("n1")["Reason"].startswith("admin: PSU swap [alice@")
    assert "drain" not in slurm.calls and "undrain" not in slurm.calls


@pytest.mark.parametrize("base, flags", [("DOWN", ()), ("IDLE", ("MAINT",)), ("MIXED", ("DRAIN", "REBOOT_REQUESTED"))])
def test_states_of_others_are_left_alone(base, flags):
    slurm = FakeSlurm()
    slurm.set_state("n1", base=base, flags=flags, reason="admin: firmware")
    before = slurm.node_state("n1")
    r = one(slurm, drain())
    assert (r.outcome, r.code) == (Outcome.SKIPPED, Code.FOREIGN_STATE), r.message
    assert one(slurm, Action("resume", node="n1", reason=OURS)).code == Code.NOT_OURS
    assert slurm.node_state("n1") == before
    assert not {"drain", "undrain", "resume", "set_down", "reboot"} & set(slurm.calls)


def test_only_our_own_drain_is_resumed_with_undrain():
    slurm = FakeSlurm(version="22.05")
    assert one(slurm, Action("resume", node="n1", reason=OURS)).code == Code.NOT_DRAINED
    one(slurm, drain())
    r = one(slurm, Action("resume", node="n1", reason=OURS))
    assert (r.outcome, r.code) == (Outcome.DONE, Code.NONE)
    assert slurm.calls["undrain"] == 1 and "resume" not in slurm.calls
    assert slurm.node_state("n1") == {"NodeName": "n1", "State": "IDLE", "Reason": "", "Comment": ""}


def test_our_drain_on_a_node_someone_set_down_is_left_in_place():
    slurm = FakeSlurm()
    slurm.set_state("n1", base="DOWN", flags=("DRAIN",), reason=OURS)
    assert one(slurm, Action("resume", node="n1", reason=OURS)).code == Code.FOREIGN_STATE
    assert slurm.node_state("n1")["State"] == "DOWN+DRAIN"


def test_reboot_then_resume_only_after_the_boot_and_never_a_second_reboot():
    slurm = FakeSlurm()
    job = slurm.add_job("n1")
    one(slurm, drain())
    reboot = Action("reboot", node="n1", reason=OURS, incident="n1:345:100")
    assert one(slurm, reboot).outcome == Outcome.DONE
    assert slurm.node_state("n1")["State"] == "MIXED+DRAIN+REBOOT_REQUESTED"
    assert one(slurm, Action("reboot", node="n1", reason=OURS)).code == Code.REBOOT_PENDING
    assert one(slurm, Action("resume", node="n1", reason=OURS)).code == Code.REBOOT_PENDING
    slurm.end_job(job)
    # Issued (as the contract shows Slurm does): DOWN until slurmd is back, and neither
    # a second reboot nor a resume while it is.
    assert slurm.node_state("n1")["State"] == "DOWN+DRAIN+REBOOT_ISSUED"
    assert one(slurm, Action("reboot", node="n1", reason=OURS)).code == Code.REBOOT_PENDING
    assert one(slurm, Action("resume", node="n1", reason=OURS)).code == Code.REBOOT_PENDING
    slurm.complete_reboot("n1")
    assert slurm.node_state("n1") == {"NodeName": "n1", "State": "DOWN", "Comment": "",
                                      "Reason": f"{OURS} : reboot issued : reboot complete"}
    assert one(slurm, Action("reboot", node="n1", reason=OURS)).code == Code.FAULT_SURVIVED_REBOOT
    assert slurm.calls["reboot"] == 1
    r = one(slurm, Action("resume", node="n1", reason=OURS))
    assert (r.outcome, r.code) == (Outcome.DONE, Code.AFTER_REBOOT)
    assert slurm.calls["resume"] == 1 and slurm.node_state("n1")["State"] == "IDLE"


@pytest.mark.parametrize("version", ["22.05", "25.11"])
def test_our_drain_outlives_a_slurmd_that_stopped_answering(version):
    """25.11 adds `Not responding` to the reason of a node whose slurmd stops answering
    (the contract shows it), ours included: once slurmd is back, the drain is still ours
    and is resumed; while the node is DOWN it is left alone."""
    slurm = FakeSlurm(version=version)
    one(slurm, drain())
    slurm.slurmd_lost("n1")
    assert slurm.node_state("n1")["Reason"] == (f"{OURS} : Not responding" if version == "25.11" else OURS)
    assert one(slurm, Action("resume", node="n1", reason=OURS)).code == Code.FOREIGN_STATE
    slurm.slurmd_back("n1")
    r = one(slurm, Action("resume", node="n1", reason=OURS))
    assert (r.outcome, r.code) == (Outcome.DONE, Code.NONE), r
    assert slurm.node_state("n1")["State"] == "IDLE"


def test_no_reboot_program_is_said_so():
    slurm = FakeSlurm(reboot_program=False)
    one(slurm, drain())
    r = one(slurm, Action("reboot", node="n1", reason=OURS))
    assert (r.outcome, r.code) == (Outcome.FAILED, Code.NO_REBOOT_PROGRAM)


def test_an_array_element_is_acted_on_as_array_task():
    slurm = FakeSlurm()
    array = "2000"
    others = [slurm.add_job("n2", job=str(2001 + t), array=array, task=t) for t in range(3)]
    stuck_one = slurm.add_job("n1", job=array, array=array, task=3)   # the last element carries the array's id
    comment = Action("comment", node="n1", job=stuck_one, text=f"{P} node n1: stuck", uid=1001)
    requeue = Action("requeue", node="n1", job=stuck_one, text="x", uid=1001)
    c, r = run(slurm, comment, requeue)
    assert (c.outcome, c.message) == (Outcome.DONE, f"on {array}_3")
    assert (r.outcome, r.message) == (Outcome.DONE, f"requeued {array}_3")
    element = slurm.show_job(f"{array}_3")
    assert (element["JobState"], element["Restarts"], element["AdminComment"]) == \
        ("PENDING", "1", f"{P} node n1: stuck")
    for job in others:
        info = slurm.show_job(job)
        assert (info["JobState"], info["Restarts"], info["AdminComment"]) == ("RUNNING", "0", "(null)")


def test_a_comment_keeps_the_admins_words_and_is_added_once():
    slurm = FakeSlurm()
    job = slurm.add_job("n1", admin_comment="admin: watch this one")
    text = f"{P} node n1: job stuck"
    comment = Action("comment", node="n1", job=job, text=text, uid=1001, incident="n1:1:1")
    assert one(slurm, comment).outcome == Outcome.DONE
    assert slurm.show_job(job)["AdminComment"] == f"admin: watch this one | {text}"
    assert one(slurm, comment).code == Code.COMMENT_PRESENT
    assert slurm.calls["set_admin_comment"] == 1


def test_job_actions_need_slurms_word_on_node_and_user():
    slurm = FakeSlurm()
    job = slurm.add_job("n2", uid=1001)
    assert one(slurm, Action("requeue", node="n1", job=job, uid=1001)).code == Code.NOT_ON_NODE
    job = slurm.add_job("n1", user="bob", uid=1002)
    assert one(slurm, Action("requeue", node="n1", job=job, uid=1001)).code == Code.UID_MISMATCH
    assert "requeue" not in slurm.calls
    assert one(slurm, Action("requeue", node="n1", job="424242", uid=1001)).code == Code.UNKNOWN_JOB
    assert one(slurm, drain(node="nx")).code == Code.UNKNOWN_NODE


def test_a_job_that_cannot_be_requeued_is_noted_and_left_running_or_cancelled():
    slurm = FakeSlurm()
    srun = slurm.add_job("n1", batch=False)
    r = one(slurm, Action("requeue", node="n1", job=srun, uid=1001))
    assert r.code == Code.NOT_REQUEUED and slurm.show_job(srun)["JobState"] == "RUNNING"
    assert "not requeued (not a batch job" in slurm.show_job(srun)["AdminComment"]
    norequeue = slurm.add_job("n1", requeue=False)
    r = one(slurm, Action("requeue", node="n1", job=norequeue, uid=1001, fallback="cancel"))
    assert r.code == Code.CANCELLED_INSTEAD and slurm.show_job(norequeue)["JobState"] == "CANCELLED"
    assert "requeue" not in slurm.calls


def test_a_job_requeued_or_ended_already_is_not_requeued_again():
    slurm = FakeSlurm()
    job = slurm.add_job("n1")
    requeue = Action("requeue", node="n1", job=job, uid=1001, ran_here=True)
    assert one(slurm, requeue).outcome == Outcome.DONE
    assert one(slurm, requeue).code == Code.JOB_QUEUED
    slurm.end_job(job, "CANCELLED")
    assert one(slurm, requeue).code == Code.JOB_ENDED
    assert slurm.calls["requeue"] == 1


def test_unreachable_and_out_of_time_are_retried_by_a_later_run():
    slurm = FakeSlurm()
    slurm.reachable = False
    first, second = run(slurm, drain(), Action("requeue", node="n1", job="1", uid=1001))
    assert (first.code, first.retry, second.code, second.retry) == \
        (Code.SLURM_UNREACHABLE, True, Code.SLURM_UNREACHABLE, True)
    assert slurm.calls == {"node_state": 1}      # nothing is tried again once no slurmctld answered
    import time
    slurm = FakeSlurm()
    slurm.deadline = time.monotonic() + 0.5
    r = one(slurm, drain())
    assert (r.code, r.retry) == (Code.OUT_OF_TIME, True) and slurm.calls == {}
    with pytest.raises(OutOfTime):
        slurm.list_nodes()


# --- actuation (act/actuation.py) ---------------------------------------------------------------
def config(tmp_path, **policy_cfg) -> Config:
    cfg = default_config(state_dir=str(tmp_path / "state"))
    for k, v in policy_cfg.items():
        setattr(cfg.policy, k, v)
    return cfg


def state_of(tmp_path) -> StateStore:
    state = StateStore(str(tmp_path / "state" / "n1"))
    state.save("boot", {"id": boot_id()})           # not the first run since the boot
    return state


def actuate(cfg, state, slurm, findings, **kw):
    return take_actions(cfg, "n1", findings, False, state, open_backend=slurm.open, **kw)


def outcomes(results):
    return [(r.action.kind, str(r.outcome), str(r.code)) for r in results]


def test_the_healthy_path_asks_slurm_nothing(tmp_path):
    slurm = FakeSlurm()
    assert actuate(config(tmp_path), state_of(tmp_path), slurm, []) == []
    assert slurm.opened == 0 and slurm.calls == {}


def test_a_drain_costs_the_view_and_the_drain(tmp_path):
    slurm = FakeSlurm()
    results = actuate(config(tmp_path), state_of(tmp_path), slurm, [fs_failing()])
    assert outcomes(results) == [("drain", "done", "")]
    # The breaker's view primes the node lookup; no re-read below the limit.
    assert slurm.calls == {"list_nodes_alone": 1, "drain_with_cause": 1}


def test_unreachable_slurm_spools_the_drain_and_the_next_run_replays_it(tmp_path):
    cfg, state, slurm = config(tmp_path), state_of(tmp_path), FakeSlurm()
    slurm.reachable = False
    [r] = actuate(cfg, state, slurm, [fs_failing()])
    assert (r.code, r.retry) == (Code.SLURM_UNREACHABLE, True)
    [entry] = state.load("spool", list)
    assert entry["action"]["kind"] == "drain" and entry["action"]["reason"] == OURS
    assert "drain_with_cause" not in slurm.calls
    slurm.reachable = True
    [r] = actuate(cfg, state, slurm, [fs_failing()])       # the fault still there
    assert (r.action.kind, r.outcome) == ("drain", Outcome.DONE)
    assert slurm.node_state("n1")["Reason"] == OURS
    assert state.load("spool", list) == []
    assert slurm.calls["drain_with_cause"] == 1
    # The cause for tools went in with it: the check and the place, in the node's Comment.
    assert read_cause(slurm.node_state("n1")["Comment"])["where"] == "/scratch"


def test_job_actions_are_taken_once_per_incident(tmp_path):
    cfg, state, slurm = config(tmp_path), state_of(tmp_path), FakeSlurm()
    job = slurm.add_job("n1")
    first = actuate(cfg, state, slurm, [stuck(job)])
    assert outcomes(first) == [("drain", "done", ""), ("comment", "done", ""), ("requeue", "done", "")]
    slurm.start_job(job)                              # Slurm starts it again; the task is still stuck
    second = actuate(cfg, state, slurm, [stuck(job)])
    # The requeued job is followed until it leaves Slurm's hold: running again, nothing to do.
    assert [(k, c) for k, _, c in outcomes(second)] == \
        [("drain", "already_drained"), ("comment", "already_done"), ("requeue", "already_done"),
         ("start", "not_waiting")]
    assert (slurm.calls["requeue"], slurm.calls["set_admin_comment"]) == (1, 1)
    third = actuate(cfg, state, slurm, [stuck(job)])
    assert [k for k, _, _ in outcomes(third)] == ["drain", "comment", "requeue"]
    assert slurm.show_job(job)["Restarts"] == "1"


def test_the_breaker_holds_a_drain_at_the_cost_of_one_cluster_view(tmp_path):
    nodes = [f"n{i}" for i in range(1, 21)]
    slurm = FakeSlurm(nodes)
    for n in nodes[1:11]:
        slurm.drain_with_cause(n, OURS, cause_text("filesystem", "/scratch", "/scratch", "2026-12-02T03:50:00"))
    slurm.calls.clear()
    cfg, state = config(tmp_path, max_drained_nodes=10, max_drained_fraction=0), state_of(tmp_path)
    [r] = actuate(cfg, state, slurm, [fs_failing()])
    assert (r.outcome, r.code) == (Outcome.HELD, Code.BREAKER)
    assert "10 of them for filesystem /scratch" in r.message and "looks like one outage" in r.message
    assert slurm.calls == {"list_nodes_alone": 1} and slurm.rpcs() == 1
    assert slurm.node_state("n1")["State"] == "IDLE"
    assert state.load("breaker")["open"] is True


def test_a_drain_that_could_pass_the_limit_claims_its_place_first(tmp_path):
    """20 nodes, limit 3: the drain is preceded by a claim in the node's Comment and a
    second read after the claim wait; the drain replaces the claim in its own update."""
    slurm = FakeSlurm([f"n{i}" for i in range(1, 21)])
    cfg, state = config(tmp_path, max_drained_nodes=3, max_drained_fraction=0), state_of(tmp_path)
    started = time.monotonic()
    [r] = actuate(cfg, state, slurm, [fs_failing()])
    assert (r.action.kind, r.outcome) == ("drain", Outcome.DONE)
    assert slurm.calls == {"list_nodes_alone": 2, "set_node_comment": 1, "drain_with_cause": 1}
    assert time.monotonic() - started >= breaker.CLAIM_TRIP       # it waited for the claims before its own
    cause = read_cause(slurm.node_state("n1")["Comment"])
    assert "claim" not in cause and "held" not in cause and "DRAIN" in slurm.node_state("n1")["State"]


def test_a_claim_behind_others_holds_the_drain_and_stays_the_nodes_word(tmp_path):
    """Two nodes drained and one claiming ahead fill the limit of 3: n5's claim loses, its
    drain is held by the breaker, nothing more is sent, and its Comment (the claim, held)
    is what the others read."""
    slurm = FakeSlurm([f"n{i}" for i in range(1, 21)])
    for n in ("n2", "n3"):
        slurm.drain_with_cause(n, OURS, cause_text("filesystem", "/scratch", "/scratch", "2026-12-02T03:50:00"))
    slurm.nodes["n4"].comment = cause_text("filesystem", "/scratch", "i", "t", held=True, claim=time.time() - 1)
    slurm.calls.clear()
    cfg = config(tmp_path, max_drained_nodes=3, max_drained_fraction=0)
    state = StateStore(str(tmp_path / "state" / "n5"))
    state.save("boot", {"id": boot_id()})
    results = take_actions(cfg, "n5", [fs_failing()], False, state, open_backend=slurm.open)
    assert [(r.action.kind, r.outcome, r.code) for r in results] == [("drain", Outcome.HELD, Code.BREAKER)]
    assert "2 nodes drained by slurm-hooks and 1 claiming ahead of n5" in results[0].message
    assert slurm.calls == {"list_nodes_alone": 2, "set_node_comment": 1}
    info = slurm.node_state("n5")
    cause = read_cause(info["Comment"])
    assert cause["held"] is True and cause["claim"] > 0 and "DRAIN" not in info["State"]
    assert state.load("breaker")["open"] is True
    # An expired claim no longer counts: n6 drains.
    slurm.nodes["n4"].comment = cause_text("filesystem", "/scratch", "i", "t", held=True,
                                           claim=time.time() - breaker.CLAIM_LIFE - 1)
    slurm.nodes["n5"].comment = ""
    state6 = StateStore(str(tmp_path / "state" / "n6"))
    state6.save("boot", {"id": boot_id()})
    [r] = take_actions(cfg, "n6", [fs_failing()], False, state6, open_backend=slurm.open)
    assert (r.action.kind, r.outcome) == ("drain", Outcome.DONE)


def test_a_claim_that_slurm_took_too_long_to_take_holds_the_drain(tmp_path, monkeypatch):
    slurm = FakeSlurm([f"n{i}" for i in range(1, 21)])
    cfg, state = config(tmp_path, max_drained_nodes=3, max_drained_fraction=0), state_of(tmp_path)
    slow = slurm.set_node_comment

    def set_node_comment(node, text):
        time.sleep(breaker.CLAIM_TRIP + 0.1)
        slow(node, text)
    monkeypatch.setattr(slurm, "set_node_comment", set_node_comment)
    [r] = actuate(cfg, state, slurm, [fs_failing()])
    assert (r.outcome, r.code) == (Outcome.HELD, Code.BREAKER) and "to take this node's claim" in r.message
    assert "drain_with_cause" not in slurm.calls and "DRAIN" not in slurm.node_state("n1")["State"]


def after_our_reboot(tmp_path, resume_after: int):
    """n1 drained and rebooted by us (our record of the request kept), back from the boot."""
    cfg, state, slurm = config(tmp_path, resume_after=resume_after), state_of(tmp_path), FakeSlurm()
    one(slurm, drain())
    one(slurm, Action("reboot", node="n1", reason=OURS))
    state.save("reboot", {"reason": OURS, "at": 0.0, "passes": 0})
    slurm.complete_reboot("n1")
    return cfg, state, slurm


def test_after_our_reboot_passing_checks_resume_the_node(tmp_path):
    cfg, state, slurm = after_our_reboot(tmp_path, resume_after=2)
    # The first passing run counts, the second resumes (RESUME: DOWN by our nextstate).
    assert actuate(cfg, state, slurm, [Finding("filesystem", "/scratch", "ok", OK, "fs ok")]) == []
    [r] = actuate(cfg, state, slurm, [])
    assert (r.action.kind, r.outcome, r.code) == ("resume", Outcome.DONE, Code.AFTER_REBOOT)
    assert slurm.node_state("n1")["State"] == "IDLE" and state.load("reboot") == {}


def test_a_failing_check_after_the_reboot_keeps_the_node_down(tmp_path):
    cfg, state, slurm = after_our_reboot(tmp_path, resume_after=1)
    results = actuate(cfg, state, slurm, [fs_failing()])
    assert ("drain", "skipped", "already_ours") in outcomes(results)
    assert slurm.node_state("n1")["State"] == "DOWN" and "resume" not in slurm.calls


# --- policy and breaker (decide/) -------------------------------------------------------------
def test_policy_drains_comments_and_requeues_for_a_stuck_job():
    acts = policy.decide([stuck("12"), fs_failing()], "n1", P, ActionsConfig())
    assert [(a.kind, a.job, a.uid) for a in acts] == [("drain", None, None), ("comment", "12", 1001),
                                                       ("requeue", "12", 1001)]


def test_the_breakers_order_is_the_reason_stamps_then_the_names():
    slurm = FakeSlurm([f"n{i}" for i in range(1, 13)])
    for i, n in enumerate(["n12", "n3", "n1"]):
        slurm.drain(n, f"{P} gpu {i} lost")
        slurm.nodes[n].reason_time = 1_000_000 + i         # drained one second apart
    slurm.set_state("n5", flags=("DRAIN",), reason="admin: not ours")
    view = breaker.cluster_view(slurm, P)
    assert (view.total, sorted(view.ours)) == (12, ["n1", "n12", "n3"])
    cfg = Config().policy
    cfg.max_drained_nodes, cfg.max_drained_fraction = 2, 0
    assert breaker.keepers(view, cfg) == ["n12", "n3"]
    assert breaker.step_back(view, "n1", cfg).startswith("drain-storm breaker: 3 nodes drained")
    assert breaker.step_back(view, "n3", cfg) is None
    assert breaker.verdict(view, "n7", cfg).startswith("drain-storm breaker open: 3 nodes already drained")


def test_a_spooled_drain_whose_fault_is_gone_is_dropped_and_said_so(tmp_path):
    """slurmctld was down when the check failed; by the time it answers, the fault is
    gone: the drain would keep the node out for nothing (and for good, with no failing
    finding to say it may be resumed)."""
    cfg, state, slurm = config(tmp_path), state_of(tmp_path), FakeSlurm()
    job = slurm.add_job("n1")
    slurm.reachable = False
    actuate(cfg, state, slurm, [fs_failing()])
    assert [e["action"]["kind"] for e in state.load("spool", list)] == ["drain"]
    slurm.reachable = True
    [r] = actuate(cfg, state, slurm, [])
    assert (r.action.kind, r.outcome, r.code) == ("drain", Outcome.SKIPPED, Code.FAULT_GONE)
    assert "fault is gone" in r.message
    assert slurm.node_state("n1")["State"] == "MIXED" and "drain_with_cause" not in slurm.calls
    assert state.load("spool", list) == [] and not state.load("drain")
    assert actuate(cfg, state, slurm, []) == []
    # A job's action for an incident no finding names any more goes the same way; one
    # still named is carried out.
    from slurm_hooks.act.spool import due
    from slurm_hooks.core.records import asdict
    spooled = [{"action": asdict(Action("requeue", node="n1", job=job, incident="n1:345:100")), "at": time.time()},
               {"action": asdict(Action("resume", node="n1", reason=OURS)), "at": time.time()}]
    assert [a.kind for a in due(spooled, [], 3600, [stuck(job)])[0]] == ["requeue"]
    assert [a.kind for a in due(spooled, [], 3600, [])[0]] == ["resume"]
