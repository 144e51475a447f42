"""Policy on data alone: which actions follow from which findings."""
from __future__ import annotations

import pytest

from slurm_hooks.core.config import ActionsConfig
from slurm_hooks.core.model import FAIL, OK, WARN, Action, Finding
from slurm_hooks.decide.policy import decide


def fs(path, severity=FAIL):
    return Finding(check="filesystem", target=path, status="hung", severity=severity,
                   summary=f"fs {path} write hung >10s (nfs4)")


def stuck(job, pid, start=100):
    return Finding(check="stuck_tasks", target=f"job {job} pid {pid}", status="stuck", severity=FAIL,
                   summary=f"job {job} rank 0 pid {pid} stuck 612s in write() on /gpfs/log (gpfs /gpfs)",
                   reason=f"job {job} pid {pid} stuck in write() on /gpfs/log (gpfs)", job=job,
                   incident=f"n1:{pid}:{start}", needs_reboot=True, hard=True, resumable=False)


def kinds(actions):
    return [(a.kind, a.job) for a in actions]


def test_healthy_and_warnings_do_nothing():
    assert decide([fs("/a", OK), fs("/b", WARN)], "n1", "slurm-hooks:", ActionsConfig()) == []


def test_filesystem_failure_drains_only():
    acts = decide([fs("/scratch")], "n1", "slurm-hooks:", ActionsConfig(), now=1764647400.0)
    assert acts == [Action("drain", node="n1", reason="fs /scratch write hung >10s (nfs4) [slurm-hooks]",
                           cause=acts[0].cause)]
    # The machine-readable cause, for the node's Comment: check, place, incident, since.
    from slurm_hooks.core.reason import read_cause
    assert read_cause(acts[0].cause) == {"check": "filesystem", "where": "/scratch",
                                         "incident": "/scratch",
                                         "since": "2025-12-02T03:50:00"}


def test_stuck_job_drains_comments_and_requeues_then_reboots_next_time():
    f = stuck("12", 345)
    first = decide([fs("/gpfs"), f], "n1", "slurm-hooks:", ActionsConfig())
    assert kinds(first) == [("drain", None), ("comment", "12"), ("requeue", "12")]
    # The job finding comes first in the reason, with the stable text (no duration).
    assert first[0].reason == ("job 12 pid 345 stuck in write() on /gpfs/log (gpfs); "
                               "fs /gpfs write hung >10s (nfs4) [slurm-hooks]")
    # The cause is the job finding's: stuck tasks, grouped by the mount they are stuck on.
    from slurm_hooks.core.reason import read_cause
    assert read_cause(first[0].cause)["check"] == "stuck_tasks"
    assert first[1].text.startswith("slurm-hooks: node n1: job 12 rank 0 pid 345 stuck 612s")
    # A later run: the requeue ended the job long enough ago and the task is still there.
    ledger = {k: {"done": 1.0, "seen": 1.0, "ended": True} for k in first[2].keys}
    second = decide([f], "n1", "slurm-hooks:", ActionsConfig(), ledger, kill_grace=60, now=100.0)
    assert kinds(second) == [("drain", None), ("comment", "12"), ("requeue", "12"), ("reboot", None)]
    assert second[-1].after_job is None


def test_a_reboot_waits_for_the_job_to_be_really_ended_and_the_task_to_outlive_it():
    f = stuck("12", 345)
    key = "requeue:12:n1:345:100"
    reboots = lambda ledger, now: [a for a in decide([f], "n1", "p:", ActionsConfig(), ledger,  # noqa: E731
                                                      kill_grace=60, now=now) if a.kind == "reboot"]
    assert reboots({}, 100.0) == []                                  # not requeued yet
    # Requeued 30 s ago: the task has not outlived the job's end by its grace yet.
    assert reboots({key: {"done": 70.0, "seen": 70.0, "ended": True}}, 100.0) == []
    [r] = reboots({key: {"done": 30.0, "seen": 30.0, "ended": True}}, 100.0)
    assert r.after_job is None
    # Killed and still in D (SIGKILL pending): the kernel says it will not die; no need
    # to wait out the grace.
    f.evidence["sigkill_pending"] = True
    [r] = reboots({key: {"done": 70.0, "seen": 70.0, "ended": True}}, 100.0)
    assert r.after_job is None
    f.evidence["sigkill_pending"] = False
    # The requeue was skipped (--no-requeue, an srun job): that ended nothing. The reboot
    # is asked only once Slurm says the job no longer runs here (actions._reboot).
    [r] = reboots({key: {"done": 30.0, "seen": 30.0, "ended": False}}, 100.0)
    assert r.after_job == "12"
    # A ledger of an older version, without the word: not known to have ended anything.
    [r] = reboots({key: {"done": 30.0, "seen": 30.0}}, 100.0)
    assert r.after_job == "12"


def test_a_reboot_for_a_running_job_is_not_asked_and_not_remembered():
    from slurm_hooks.act.actions import execute
    from slurm_hooks.core.outcomes import Code

    class Slurm:
        name = "fake"
        asked: list = []

        def show_job(self, job):
            return {"JobId": job, "JobState": self.state, "NodeList": "n[1-2]", "UserId": "u(1000)"}

        def node_state(self, node):
            return {"NodeName": node, "State": "IDLE+DRAIN", "Reason": "p: job 12 pid 345 stuck"}

        def reboot(self, node, reason):
            self.asked.append(node)

    slurm = Slurm()
    slurm.state = "RUNNING"
    action = Action("reboot", node="n1", reason="p: job 12 pid 345 stuck", incident="n1:345:100", after_job="12")
    ledger: dict = {}
    [r] = execute([action], slurm, "p:", False, ledger)
    assert (r.outcome, r.code) == ("skipped", Code.JOB_RUNNING) and ledger == {} and slurm.asked == []
    slurm.state = "CANCELLED"
    [r] = execute([action], slurm, "p:", False, ledger)
    assert r.outcome == "done" and slurm.asked == ["n1"] and list(ledger) == action.keys


def test_switches():
    off = ActionsConfig(drain=False, comment_job=False, requeue_job=False, reboot=False)
    assert decide([stuck("1", 2)], "n1", "p:", off) == []
    no_requeue = ActionsConfig(requeue_job=False)
    acts = decide([stuck("1", 2)], "n1", "p:", no_requeue)
    assert kinds(acts) == [("drain", None), ("comment", "1"), ("reboot", None)]
    assert acts[-1].after_job == "1"          # nothing of ours ends the job: Slurm must say it ended


def test_one_comment_and_requeue_per_job_with_several_stuck_processes():
    acts = decide([stuck("7", 10), stuck("7", 11), stuck("8", 12)], "n1", "p:", ActionsConfig())
    assert kinds(acts) == [("drain", None), ("comment", "7"), ("requeue", "7"), ("comment", "8"), ("requeue", "8")]
    assert acts[1].incident == "n1:10:100+n1:11:100"


def test_ledger_survives_an_incident_missing_for_a_while():
    import time

    from slurm_hooks.act.ledger import LEDGER_KEEP
    from slurm_hooks.act.ledger import refresh as refresh_ledger
    now = time.time()
    ledger = {"requeue:12:n1:345:100": {"done": now - 60, "seen": now - 60},
              "requeue:13:n1:346:100": {"done": now - LEDGER_KEEP - 5, "seen": now - LEDGER_KEEP - 5},
              "reboot:n1:n1:347:100": {"done": now - LEDGER_KEEP - 5, "seen": now - LEDGER_KEEP - 5},
              "garbage": 1.5}
    out = refresh_ledger(ledger, [stuck("14", 347)])
    assert set(out) == {"requeue:12:n1:345:100", "reboot:n1:n1:347:100"}
    assert out["reboot:n1:n1:347:100"]["seen"] >= now      # still named: refreshed


def test_execute_skips_what_the_ledger_holds():
    from slurm_hooks.act.actions import execute
    a = Action("requeue", node="n1", job="12", incident="n1:345:100+n1:346:100")
    ledger = {"requeue:12:n1:346:100": {"done": 5.0, "seen": 5.0}}
    [r] = execute([a], None, "p:", dry_run=False, ledger=ledger)
    assert r.outcome == "skipped" and "already done for this incident" in r.message


def test_hysteresis_needs_k_failures_except_hard_ones():
    from slurm_hooks.decide.policy import hold_back, hysteresis
    a = fs("/scratch")
    counts, waiting = hysteresis([a], {}, {"filesystem": 2})
    assert waiting == [(a, 1, 2)] and a.severity == FAIL, "the decision reads its inputs only"
    hold_back(waiting)
    assert a.severity == WARN and a.detail.startswith("failure 1 of 2 before draining")
    b = fs("/scratch")
    counts, waiting = hysteresis([b], counts, {"filesystem": 2})
    assert not waiting and b.severity == FAIL and counts == {"filesystem:/scratch": 2}
    # A pass in between starts the count again.
    assert hysteresis([fs("/scratch", OK)], counts, {"filesystem": 2}) == ({}, [])
    s = stuck("9", 10)
    assert hysteresis([s], {}, {"stuck_tasks": 5})[1] == [], "hard failures drain at once"


def test_resume_after_m_passes_only_for_resumable_drains():
    from slurm_hooks.decide.policy import resume_decision
    rec = {"reason": "fs /x hung [slurm-hooks]", "resumable": True, "passes": 0}
    a, rec = resume_decision([], rec, "n1", 2)
    assert a is None and rec["passes"] == 1
    a, rec = resume_decision([fs("/x")], rec, "n1", 2)
    assert a is None and rec["passes"] == 0, "a failure starts the count again"
    resume_decision([], rec, "n1", 2)
    a, rec = resume_decision([], dict(rec, passes=1), "n1", 2)
    assert a == Action("resume", node="n1", reason="fs /x hung [slurm-hooks]")
    a, _ = resume_decision([], {"reason": "r", "resumable": False, "passes": 9}, "n1", 2)
    assert a is None, "a drain that needs a reboot or a human is never resumed"
    assert resume_decision([], {}, "n1", 2) == (None, {}), "not drained by us: nothing to resume"
    a, _ = resume_decision([], dict(rec, passes=50), "n1", 0)
    assert a is None, "resume_after 0 switches it off"


def test_breaker_limits_and_names_a_global_outage():
    from slurm_hooks.core.config import PolicyConfig
    from slurm_hooks.decide.breaker import ClusterView, verdict
    # Grouped by the cause each drain recorded, never by its words (which differ here).
    view = ClusterView(total=100, ours={f"n{i}": f"fs /scratch fsync hung >{i}s (lustre)" for i in range(1, 10)},
                       causes={f"n{i}": "filesystem /scratch" for i in range(1, 8)})
    view.causes.update({"n8": "unknown cause", "n9": "gpu_health 0000:17:00.0"})
    assert verdict(view, "n50", PolicyConfig(max_drained_nodes=10, max_drained_fraction=0.05)) is None
    why = verdict(view, "n50", PolicyConfig(max_drained_nodes=9, max_drained_fraction=0.05))
    assert why.startswith("drain-storm breaker open: 9 nodes already drained by slurm-hooks (limit 9 of 100)")
    assert "; 7 of them for filesystem /scratch (n1, n2, n3, n4, n5, n6, n7): looks like one outage" in why
    # Drains with no recorded cause (older releases') are one group, never an outage.
    legacy = ClusterView(total=100, ours={f"n{i}": "fs /scratch hung" for i in range(1, 10)})
    why = verdict(legacy, "n50", PolicyConfig(max_drained_nodes=9, max_drained_fraction=0.05))
    assert why.endswith("(limit 9 of 100)") and "outage" not in why
    # The share wins when larger: 20 % of 100 = 20 nodes.
    assert verdict(view, "n50", PolicyConfig(max_drained_nodes=5, max_drained_fraction=0.2)) is None
    assert verdict(view, "n50", PolicyConfig(max_drained_nodes=0, max_drained_fraction=0)) is None


def storm_round(starts: dict, limit: int, wait_for_the_second: bool, total: int = 40) -> set:
    """One round of simultaneous health checks against a model of slurmctld: reads see
    the updates applied before them, a drain's reason is stamped to the second. Each
    node reads, drains when the breaker allows, re-reads (after `settle` or at once)
    and steps back when beyond the limit. Returns the nodes left drained."""
    import heapq
    import time as _time

    from slurm_hooks.core.config import PolicyConfig
    from slurm_hooks.decide.breaker import ClusterView, settle, step_back, verdict
    policy = PolicyConfig(max_drained_nodes=limit, max_drained_fraction=0)
    drained: dict[str, str] = {}              # node -> stamp

    def view():
        v = ClusterView(total=total)
        for n, stamp in drained.items():
            v.ours[n], v.stamps[n] = "fs /gpfs read hung", stamp
        return v

    def stamp(t):
        return _time.strftime("%Y-%m-%dT%H:%M:%S", _time.gmtime(int(t)))

    events = [(t, node, "read") for node, t in starts.items()]
    heapq.heapify(events)
    while events:
        t, node, step = heapq.heappop(events)
        if step == "read":
            if verdict(view(), node, policy) is None:
                heapq.heappush(events, (t + 0.05, node, "drain"))
        elif step == "drain":
            drained[node] = stamp(t)
            wait = settle(t + 0.01, now=t + 0.01, skew=0.0) if wait_for_the_second else 0.0
            heapq.heappush(events, (t + 0.02 + wait, node, "reread"))
        elif step == "reread" and step_back(view(), node, policy):
            heapq.heappush(events, (t + 0.03, node, "undrain"))
        elif step == "undrain":
            del drained[node]
    return set(drained)


def test_breaker_round_of_simultaneous_runs_ends_within_the_limit():
    """Re-reading after the second of one's own drain has passed leaves exactly the
    limit drained whatever the interleaving; re-reading at once can leave more (a node
    that re-read before a later drain sorted ahead of it by name in the same second)."""
    import random
    rng = random.Random(14)
    over = 0
    for _ in range(300):
        starts = {f"n{i}": 1000.0 + rng.random() * rng.choice((0.05, 0.3, 2.0)) for i in range(1, 41)}
        left = storm_round(starts, 3, wait_for_the_second=True)
        assert len(left) == 3, left
        over += len(storm_round(starts, 3, wait_for_the_second=False)) > 3
    assert over > 0, "the model reproduces the race the wait closes"


def claim_round(starts: dict, limit: int, rng, total: int = 40, slow: float = 0.0,
                skew: float = 0.3) -> tuple[int, set]:
    """One round of simultaneous health checks claiming their place before draining
    (decide/breaker.py), against a model of slurmctld whose reads see the updates applied
    before them. Each node has its own clock (off by up to half the skew either way), and
    each update its own delay (a share `slow` of the claims take longer than CLAIM_TRIP).
    Returns (the most nodes drained at any moment, the nodes drained at the end)."""
    import heapq

    from slurm_hooks.core.config import PolicyConfig
    from slurm_hooks.decide.breaker import (CLAIM_TRIP, ClusterView, claim_late, claim_verdict, claim_wait,
                                            verdict)
    policy = PolicyConfig(max_drained_nodes=limit, max_drained_fraction=0)
    offset = {n: rng.uniform(-skew / 2, skew / 2) for n in starts}
    drained: set[str] = set()
    claims: dict[str, float] = {}
    stamps: dict[str, float] = {}
    most = 0

    def view():
        v = ClusterView(total=total)
        for n in drained:
            v.ours[n], v.stamps[n] = "fs /gpfs read hung", "2026-12-06T03:00:00"
        v.claims = dict(claims)
        return v

    def delay():
        return rng.uniform(0.002, 0.3)

    events = [(t, node, "read") for node, t in starts.items()]
    heapq.heapify(events)
    while events:
        t, node, step = heapq.heappop(events)
        now = t + offset[node]                      # what this node's clock says
        if step == "read":
            if verdict(view(), node, policy) is None:
                stamps[node] = now
                lands = t + (rng.uniform(CLAIM_TRIP + 0.2, CLAIM_TRIP + 1) if rng.random() < slow else delay())
                heapq.heappush(events, (lands, node, "claim lands"))
        elif step == "claim lands":
            claims[node] = stamps[node]
            heapq.heappush(events, (t + 0.001, node, "claim returns"))
        elif step == "claim returns":
            if now - stamps[node] <= CLAIM_TRIP:
                heapq.heappush(events, (t + claim_wait(stamps[node], now, skew), node, "re-read"))
        elif step == "re-read":
            if claim_verdict(view(), node, stamps[node], policy, now, skew) is None \
                    and not claim_late(stamps[node], now, skew):
                heapq.heappush(events, (t + delay(), node, "drain lands"))
        elif step == "drain lands":
            claims.pop(node, None)
            drained.add(node)
            most = max(most, len(drained))
    return most, drained


def test_claims_keep_every_moment_of_a_storm_within_the_limit():
    """40 health checks at once, their starts within 50 ms to 2 s, clocks 0.3 s apart,
    updates of up to 0.3 s, a share of claims slower than CLAIM_TRIP: never more than
    the limit drained at any moment; with no slow claim, exactly the limit drains (the
    earliest claims). A slow claim still counts for the claims behind it until it
    expires: a round may then drain fewer (the next run's claims fill the limit)."""
    import random
    rng = random.Random(6)
    drained_with_slow = 0
    for _ in range(300):
        spread = rng.choice((0.05, 0.3, 2.0))
        starts = {f"n{i}": 1000.0 + rng.random() * spread for i in range(1, 41)}
        limit = rng.choice((1, 3, 10))
        most, left = claim_round(starts, limit, rng)
        assert most <= limit and len(left) == limit, (most, left)
        most, left = claim_round(starts, limit, rng, slow=0.3)
        assert most <= limit, (most, left)
        drained_with_slow += len(left)
    assert drained_with_slow > 300


def test_a_claim_counts_only_ahead_of_ours_and_while_it_lives():
    from slurm_hooks.core.config import PolicyConfig
    from slurm_hooks.decide.breaker import CLAIM_LIFE, CLAIM_TRIP, ClusterView, claim_late, claim_verdict, claim_wait
    policy = PolicyConfig(max_drained_nodes=2, max_drained_fraction=0)
    view = ClusterView(total=10, ours={"n9": "fs /gpfs hung"}, claims={"n2": 100.0, "n3": 100.5, "n10": 100.0})
    # n5 at 100.0: n2 ahead (same stamp, then the name), n10 behind: 1 + 1 = the limit.
    assert "1 nodes drained by slurm-hooks and 1 claiming ahead of n5" in claim_verdict(view, "n5", 100.0, policy, 101.0)
    # n1 at 100.0: nothing ahead; the drained one alone leaves room.
    assert claim_verdict(view, "n1", 100.0, policy, 101.0) is None
    # A claim past its life no longer counts.
    assert claim_verdict(view, "n4", 101.0, policy, 100.0 + CLAIM_LIFE + 0.1) is not None      # n3 still lives
    assert claim_verdict(view, "n4", 101.0, policy, 100.5 + CLAIM_LIFE + 0.1) is None
    assert claim_verdict(view, "n1", 100.0, PolicyConfig(max_drained_nodes=0, max_drained_fraction=0)) is None
    assert claim_wait(100.0, now=100.0) == pytest.approx(CLAIM_TRIP + 0.6) and claim_wait(100.0, now=200.0) == 0.0
    assert not claim_late(100.0, 100.0 + CLAIM_LIFE - CLAIM_TRIP - 0.7) and \
        claim_late(100.0, 100.0 + CLAIM_LIFE - CLAIM_TRIP - 0.5)


def test_a_claims_verdict_names_the_outage_the_limit_and_clocks_a_little_ahead():
    import time as _time

    from slurm_hooks.core.config import PolicyConfig
    from slurm_hooks.decide.breaker import ClusterView, claim_verdict, settle
    three = PolicyConfig(max_drained_nodes=3, max_drained_fraction=0)
    # Nothing drained, three claims ahead: the message ends at the limit, no outage named.
    view = ClusterView(total=10, claims={"n1": 100.0, "n2": 100.0, "n3": 100.0})
    assert claim_verdict(view, "n9", 100.5, three, 101.0).endswith("claiming ahead of n9 (limit 3 of 10)")
    # A claim stamped by a clock a little ahead of ours still counts.
    ahead = ClusterView(total=10, claims={"n1": 101.1, "n2": 100.0, "n3": 100.0})
    assert claim_verdict(ahead, "n9", 101.2, three, 101.0) is not None
    # Two drained for one cause: named as one outage.
    drained = ClusterView(total=10, ours={"n1": "fs /gpfs hung", "n2": "fs /gpfs hung"},
                          causes={"n1": "filesystem /gpfs", "n2": "filesystem /gpfs"}, claims={"n3": 100.0})
    why = claim_verdict(drained, "n9", 100.5, three, 101.0)
    assert "2 of them for filesystem /gpfs" in why and "looks like one outage" in why
    # The share of the cluster as the limit: 20 % of 10 = 2.
    share = PolicyConfig(max_drained_nodes=0, max_drained_fraction=0.2)
    assert claim_verdict(ClusterView(total=10, claims={"n1": 100.0}), "n9", 100.5, share, 101.0) is None
    assert claim_verdict(ClusterView(total=10, claims={"n1": 100.0, "n2": 100.1}), "n9", 100.5, share, 101.0)
    # settle() on our own clock: at most a second and twice the skew away.
    assert 0.0 <= settle(_time.time()) <= 1.0 + 2 * 0.3


def test_the_cluster_view_reads_a_claim_only_of_a_node_in_service():
    from slurm_hooks.core.reason import cause_text
    from slurm_hooks.decide.breaker import cluster_view
    from slurm_hooks.slurm.fake import FakeSlurm
    slurm = FakeSlurm(("n1", "n2", "n3", "n4"))
    claim = cause_text("filesystem", "/gpfs", "i", "t", held=True, claim=1765000000.25)
    for n in ("n1", "n2", "n3"):
        slurm.nodes[n].comment = claim
    slurm.set_state("n2", flags=("DRAIN",), reason="an admin's words")
    slurm.nodes["n3"].comment = claim.replace("1765000000.25", "\"soon\"")
    slurm.nodes["n4"].comment = "ticket 4711 \"claim\": 5"
    assert cluster_view(slurm, "slurm-hooks:").claims == {"n1": 1765000000.25}
    # A stamp that is no time at all (not finite, a truth value, a list) is no claim.
    slurm.nodes["n3"].comment = claim.replace("1765000000.25", "\"inf\"")
    assert cluster_view(slurm, "slurm-hooks:").claims == {"n1": 1765000000.25}
    from slurm_hooks.decide.breaker import claim_of
    assert [claim_of({"claim": v}) for v in (True, [1], None, "7.5")] == [None, None, None, 7.5]


def test_spool_merge_keeps_order_and_does_each_action_once():
    import time
    from dataclasses import asdict

    from slurm_hooks.act.spool import merge as merge_spool
    old_drain = Action("drain", node="n1", reason="fs /x hung [slurm-hooks]")
    comment = Action("comment", node="n1", job="7", text="t", incident="n1:5:6")
    spooled = [{"action": asdict(old_drain), "at": time.time() - 10},
               {"action": asdict(comment), "at": time.time() - 10},
               {"action": asdict(Action("requeue", job="8", incident="i")), "at": time.time() - 10 ** 6}]
    new_drain = Action("drain", node="n1", reason="job 7 pid 5 stuck [slurm-hooks]")
    merged = merge_spool(spooled, [new_drain, Action(**asdict(comment))], max_age=86400)
    assert merged == [comment, new_drain], "the newer drain wins, duplicates and expired ones go"


class _Recorder:
    """Just enough of a backend to see which node update a handler sends."""
    name = "recorder"

    def __init__(self, state: str, reason: str, comment: str):
        self.info = {"NodeName": "n1", "State": state, "Reason": reason, "Comment": comment}
        self.calls: list[tuple] = []

    def node_state(self, node):
        return dict(self.info)

    def __getattr__(self, op):
        return lambda *args: self.calls.append((op, *args))


def test_the_cause_goes_only_where_the_comment_is_empty_or_ours():
    from slurm_hooks.act.actions import execute
    from slurm_hooks.core.reason import cause_text
    ours_cause = cause_text("filesystem", "/x", "/x", "2026-12-02T03:50:00")
    drain = Action("drain", node="n1", reason="fs /x hung >1s (read, nfs4) [slurm-hooks]", cause=ours_cause)
    for comment, want in (("", "drain_with_cause"), (ours_cause, "drain_with_cause"), ("ticket 4711", "drain")):
        slurm = _Recorder("IDLE", "", comment)
        [r] = execute([drain], slurm, "slurm-hooks:", dry_run=False)
        assert r.outcome == "done" and [c[0] for c in slurm.calls] == [want], (comment, slurm.calls)
    # Our resume empties our cause in the same update (the Comment left: nothing else was
    # in it); an admin's Comment stays.
    for comment, want in ((ours_cause, ("release", "n1", "UNDRAIN", "")), ("ticket 4711", ("undrain", "n1"))):
        slurm = _Recorder("IDLE+DRAIN", drain.reason, comment)
        [r] = execute([Action("resume", node="n1")], slurm, "slurm-hooks:", dry_run=False)
        assert r.outcome == "done" and slurm.calls == [want], (comment, slurm.calls)
    # An admin's drain: nothing is sent, whatever its Comment says.
    slurm = _Recorder("IDLE+DRAIN", "disk swap", ours_cause)
    results = execute([Action("resume", node="n1"), drain], slurm, "slurm-hooks:", dry_run=False)
    assert [r.outcome for r in results] == ["skipped", "skipped"] and slurm.calls == []


# --- the drain-storm breaker's pieces (decide/breaker.py), one promise each ---------------

def test_the_breaker_re_reads_only_where_drains_could_pass_the_limit():
    from slurm_hooks.core.config import PolicyConfig
    from slurm_hooks.decide.breaker import ClusterView, can_overflow
    three = PolicyConfig(max_drained_nodes=3, max_drained_fraction=0)
    assert can_overflow(ClusterView(total=10), three)
    assert not can_overflow(ClusterView(total=3), three)            # the limit is the whole cluster
    assert not can_overflow(ClusterView(total=10), PolicyConfig(max_drained_nodes=0, max_drained_fraction=0))


def test_the_cluster_view_reads_our_drains_with_the_sites_prefix():
    from slurm_hooks.core.reason import cause_text
    from slurm_hooks.decide.breaker import cluster_view
    from slurm_hooks.slurm.fake import FakeSlurm
    slurm = FakeSlurm(("n1", "n2", "n3"))
    # A drain of an older release that started its reasons with the site's prefix.
    slurm.set_state("n1", flags=("DRAIN",), reason="site-hooks: fs /scratch hung")
    slurm.nodes["n1"].comment = cause_text("filesystem", "/scratch", "i", "t")
    slurm.set_state("n2", flags=("DRAIN",), reason="an admin's words")
    view = cluster_view(slurm, "site-hooks:")
    assert view.total == 3 and view.ours == {"n1": "fs /scratch hung"}, view.ours
    assert view.causes == {"n1": "filesystem /scratch"} and view.stamps["n1"], view
    assert cluster_view(slurm, "slurm-hooks:").ours == {}
    # The node asking, drained by an admin with no Comment: read whole, counted, not ours.
    view = cluster_view(slurm, "site-hooks:", "n2")
    assert view.total == 3 and "Reason" in view.infos["n2"] and "n2" not in view.ours and not view.claims, view


def test_the_keepers_are_the_earliest_drains_and_none_within_the_limit():
    from slurm_hooks.core.config import PolicyConfig
    from slurm_hooks.decide.breaker import ClusterView, keepers
    two = PolicyConfig(max_drained_nodes=2, max_drained_fraction=0)
    view = ClusterView(total=10, ours={"n3": "x", "n10": "x", "n2": "x"},
                       stamps={"n3": "2026-12-04T03:00:01", "n10": "2026-12-04T03:00:00"})
    # A drain whose stamp is unknown counts as the earliest; then by name, naturally.
    assert keepers(view, two) == ["n2", "n10"]
    assert keepers(ClusterView(total=10, ours={"n1": "x", "n2": "x"}), two) is None     # at the limit
    assert keepers(view, PolicyConfig(max_drained_nodes=0, max_drained_fraction=0)) is None


def test_the_wait_for_slurmctld_to_leave_the_drains_second():
    from slurm_hooks.decide.breaker import settle
    assert abs(settle(100.9, now=100.9, skew=0.3) - 1.4) < 1e-9     # stamped in second 101
    assert abs(settle(100.5, now=100.5, skew=0.3) - 0.8) < 1e-9
    assert abs(settle(100.1, now=100.1, skew=0.0) - 0.9) < 1e-9
    assert settle(100.0, now=200.0) == 0.0


def test_a_node_that_steps_back_names_the_keepers():
    from slurm_hooks.core.config import PolicyConfig
    from slurm_hooks.decide.breaker import ClusterView, step_back

    def why(kept: int, policy=None):
        names = [f"n{i:02d}" for i in range(kept + 1)]
        view = ClusterView(total=100, ours={n: "x" for n in names}, stamps={n: n for n in names})
        return step_back(view, names[-1], policy or PolicyConfig(max_drained_nodes=kept, max_drained_fraction=0))
    assert why(8).endswith("over the limit 8 of 100; n08 stepped back (kept: n00, n01, n02, n03, n04, n05, "
                           "n06, n07)"), why(8)
    assert why(9).endswith("(kept: n00, n01, n02, n03, n04, n05, n06, n07, ...)"), why(9)
    assert why(10).endswith("(kept: n00, n01, n02, n03, n04, n05, n06, n07, ...)"), why(10)
    # A limit by share of the cluster is named as the count it comes to.
    assert "over the limit 5 of 100; n05 stepped back" in why(5, PolicyConfig(max_drained_nodes=0,
                                                                              max_drained_fraction=0.05))


def test_the_breaker_names_the_largest_known_cause_as_one_outage():
    from slurm_hooks.core.config import PolicyConfig
    from slurm_hooks.core.reason import UNKNOWN_CAUSE
    from slurm_hooks.decide.breaker import ClusterView, verdict

    def view(groups: dict) -> ClusterView:
        v = ClusterView(total=100)
        for cause, nodes in groups.items():
            for n in nodes:
                v.ours[n], v.causes[n] = "x", cause
        return v
    policy = PolicyConfig(max_drained_nodes=2, max_drained_fraction=0)
    # Three drains of no recorded cause and two of one cause: the two are the outage.
    why = verdict(view({UNKNOWN_CAUSE: ["u1", "u2", "u3"], "filesystem /gpfs": ["g1", "g2"]}), "n0", policy)
    assert why.endswith("; 2 of them for filesystem /gpfs (g1, g2): looks like one outage, not 2 sick nodes"), why
    nine = [f"g{i}" for i in range(1, 10)]
    why = verdict(view({"filesystem /gpfs": nine}), "n0", policy)
    assert "(g1, g2, g3, g4, g5, g6, g7, g8, ...): " in why, why
    eight = nine[:8]
    why = verdict(view({"filesystem /gpfs": eight}), "n0", policy)
    assert "(g1, g2, g3, g4, g5, g6, g7, g8): " in why, why


# --- decide(), whole: every field of every action ---------------------------------------------

def own(job, action, uid=1001, incident=None, severity=WARN, summary=None):
    return Finding(check="stuck_tasks", target=f"job {job} pid 5", status="stuck_own_mount", severity=severity,
                   summary=summary or f"job {job} pid 5 stuck on its own FUSE mount", job=job,
                   incident=incident, job_action=action, evidence={"uid": uid})


def test_a_jobs_own_problem_is_told_to_that_job_alone():
    P = "[slurm-hooks]"
    findings = [own("7", "comment", incident="n1:5:1"), own("8", "cancel", uid=0), own("9", "requeue"),
                own("10", ""), own(None, "cancel"),
                Finding(check="gpu", target="0", status="ok", severity=OK, summary="ok")]
    text = {j: f"{P} node n1: job {j} pid 5 stuck on its own FUSE mount" for j in ("7", "8", "9")}

    def a(kind, job, incident, uid=1001, fallback=""):
        return Action(kind, node="n1", job=job, text=text[job], incident=incident, uid=uid, job_only=True,
                      fallback=fallback)
    assert decide(findings, "n1", P, ActionsConfig()) == [
        a("comment", "7", "n1:5:1"),
        a("comment", "8", "job 8 pid 5", uid=0), a("cancel", "8", "job 8 pid 5", uid=0),
        a("comment", "9", "job 9 pid 5"), a("requeue", "9", "job 9 pid 5", fallback="leave")]
    assert decide(findings, "n1", P, ActionsConfig(comment_job=False, requeue_job=False)) == [
        a("cancel", "8", "job 8 pid 5", uid=0)]
    cancel = ActionsConfig(requeue_fallback="cancel")
    assert decide([own("9", "requeue")], "n1", P, cancel)[-1].fallback == "cancel"
    # A long diagnosis is cut to what a job's comment holds.
    [c] = decide([own("7", "comment", summary="x" * 2000)], "n1", P, ActionsConfig(requeue_job=False))
    assert len(c.text) == 1000 and c.text.startswith(f"{P} node n1: xxx")
    # Failing, it is the node's: not a job-only action.
    assert all(not x.job_only for x in decide([own("7", "comment", severity=FAIL)], "n1", P, ActionsConfig()))


def test_a_stuck_job_gets_one_comment_one_requeue_and_then_one_reboot_for_all_its_tasks():
    P = "[slurm-hooks]"
    first, second = stuck("7", 300), stuck("7", 200)
    first.evidence = {"uid": 1001, "mountpoint": "/gpfs"}
    acts = decide([first, second], "n1", P, ActionsConfig(), now=0.0)
    text = f"{P} node n1: {first.summary}; {second.summary}"
    assert acts[1:] == [
        Action("comment", node="n1", job="7", text=text, incident="n1:200:100+n1:300:100", uid=1001),
        Action("requeue", node="n1", job="7", text=text, incident="n1:200:100+n1:300:100", uid=1001,
               fallback="leave")]
    from slurm_hooks.core.reason import read_cause
    assert read_cause(acts[0].cause)["where"] == "/gpfs"      # the mount the task waits on
    # Requeued at t=100: the reboot waits out the grace, then names both tasks.
    ledger = {"requeue:7:n1:300:100": {"done": 100.0, "ended": True}}
    assert [x.kind for x in decide([first, second], "n1", P, ActionsConfig(), ledger, 30.0, now=129.0)] == \
        ["drain", "comment", "requeue"]
    [reboot] = [x for x in decide([first, second], "n1", P, ActionsConfig(), ledger, 30.0, now=130.0)
                if x.kind == "reboot"]
    assert reboot == Action("reboot", node="n1", reason=acts[0].reason, incident="n1:300:100")
    # Cancelled instead: the same.
    cancelled = {"cancel:7:n1:300:100": {"done": 100.0, "ended": True}}
    assert any(x.kind == "reboot" for x in decide([first], "n1", P, ActionsConfig(), cancelled, 30.0, now=131.0))
    # Killed and still in D: at once.
    first.evidence["sigkill_pending"] = True
    assert any(x.kind == "reboot" for x in decide([first], "n1", P, ActionsConfig(), ledger, 30.0, now=101.0))


def test_a_reboot_waits_for_a_job_nothing_of_ours_ended():
    P = "[slurm-hooks]"
    a, b = stuck("7", 300), stuck("8", 200)
    off = ActionsConfig(requeue_job=False)
    acts = decide([a, b], "n1", P, off, {}, 30.0, now=0.0)
    reboots = [x for x in acts if x.kind == "reboot"]
    # One reboot, after the first job the node still runs, not one per task.
    assert reboots == [Action("reboot", node="n1", reason=acts[0].reason, incident="n1:300:100", after_job="7")]
    # A requeue asked this run, not yet done: no reboot at all yet.
    assert [x.kind for x in decide([a], "n1", P, ActionsConfig(), {}, 30.0, now=0.0)] == ["drain", "comment", "requeue"]
    # A requeue that was refused (its ledger entry, not ended): the job is not ended by us.
    refused = {"requeue:7:n1:300:100": {"done": 0.0, "ended": False}}
    [r] = [x for x in decide([a], "n1", P, ActionsConfig(), refused, 30.0, now=100.0) if x.kind == "reboot"]
    assert r.after_job == "7"
    # A task outside any job: nothing to end first.
    loose = stuck("7", 300)
    loose.job = None
    [r] = [x for x in decide([loose], "n1", P, ActionsConfig(), {}, 30.0, now=0.0) if x.kind == "reboot"]
    assert (r.after_job, r.incident) == (None, "n1:300:100")


# --- recoveries() (decide/mount_incident.py): a reboot made a recovery, field by field ------------


def recoveries(actions, findings, ledger, rec, counts, drained):
    """The mount's recovery with no incident of a network mount in this run (what these
    tests' findings are not): the rules of the recovery alone."""
    from slurm_hooks.decide.mount_incident import recoveries as of_mounts
    return of_mounts(actions, findings, [], ledger, rec, counts, drained)


R = "job 7 pid 300 stuck in write() on /gpfs/log (gpfs) [slurm-hooks]"


def on_gpfs(pid=300, job="7", dev="0:77", severity=FAIL, start=100, needs_reboot=True):
    f = stuck(job, pid, start)
    f.severity, f.needs_reboot = severity, needs_reboot
    f.evidence = {"pid": pid, "start_ticks": start, "mount_dev": dev}
    return f


def gpfs_probe(status="hung"):
    return Finding(check="filesystem", target="/gpfs/probe", status=status, severity=FAIL,
                   summary="fs /gpfs/probe hung >10s (read, fuse)")


def recoverable():
    from slurm_hooks.core.model import Recovery
    return {"/gpfs": Recovery(mountpoint="/gpfs", dev="0:77", method="fuse-abort", probe="/gpfs/probe")}


def test_a_reboot_for_tasks_on_one_recoverable_mount_becomes_its_recovery():
    from slurm_hooks.core.model import Recovery
    from slurm_hooks.core.reason import with_note
    drain = Action("drain", node="n1", reason=R)
    reboot = Action("reboot", node="n1", reason=R, incident="n1:300:100+n1:301:0")
    tasks = [on_gpfs(), on_gpfs(pid=301, start=0)]
    tasks[1].evidence.pop("start_ticks")
    tasks[1].incident = "n1:301:0"
    out = recoveries([drain, reboot], tasks + [gpfs_probe()], {}, recoverable(), {"filesystem:/gpfs/probe": 2}, True)
    want = Recovery(mountpoint="/gpfs", dev="0:77", method="fuse-abort", probe="/gpfs/probe",
                    tasks=[[300, 100], [301, 0]], jobs=["7"])
    assert out == [drain, Action("recover", node="n1", reason=R, incident="n1:300:100+n1:301:0", recovery=want)]
    # Tried once already: the reboot goes ahead, saying so.
    tried = {"recover:n1:n1:300:100": {"recovered": False}}
    out = recoveries([drain, reboot], tasks, tried, recoverable(), {}, True)
    assert out == [drain, Action("reboot", node="n1", reason=with_note(R, "(recovery tried: fuse-abort /gpfs)"),
                                 incident="n1:300:100+n1:301:0")]
    # Tasks on two places, a reboot that waits for a job, a node we did not drain: as asked.
    two = [on_gpfs(), on_gpfs(pid=301, dev="0:88")]
    two[1].incident = "n1:301:0"
    assert recoveries([reboot], two, {}, recoverable(), {}, True) == [reboot]
    # A reboot that waits for a job nothing could end: the recovery stands in for it
    # all the same, and waits for that job itself (act/mounts.py asks Slurm).
    later = Action("reboot", node="n1", reason=R, incident="n1:300:100", after_job="7")
    [x] = recoveries([later], tasks, {}, recoverable(), {}, True)
    assert (x.kind, x.recovery.jobs) == ("recover", ["7"])
    assert recoveries([reboot], tasks, {}, recoverable(), {}, False) == [reboot]
    assert recoveries([reboot], tasks, {}, {}, {}, True) == [reboot]


def test_a_probe_that_hung_twice_on_a_drained_node_has_its_mount_recovered():
    from slurm_hooks.core.model import Recovery
    drain = Action("drain", node="n1", reason=R)
    probe = gpfs_probe()
    on_it = on_gpfs(needs_reboot=False)
    elsewhere = on_gpfs(pid=400, job="8", dev="0:88")
    warned = on_gpfs(pid=500, job="9", severity=WARN)
    found = [probe, on_it, elsewhere, warned]
    out = recoveries([drain], found, {}, recoverable(), {"filesystem:/gpfs/probe": 2}, True)
    want = Recovery(mountpoint="/gpfs", dev="0:77", method="fuse-abort", probe="/gpfs/probe",
                    tasks=[[300, 100]], jobs=["7"], unplaced=["9"])
    # Job 9's task waits on the mount too, not (yet) found the node's fault: waited for,
    # never told; job 8's waits elsewhere.
    assert out == [drain, Action("recover", node="n1", reason=probe.summary, incident="/gpfs", recovery=want)]
    still = gpfs_probe("still_hung")
    assert [a.kind for a in recoveries([drain], [still], {}, recoverable(), {"filesystem:/gpfs/probe": 3}, True)] \
        == ["drain", "recover"]
    # A mount the site keeps from any recovery (method none) is left as it is.
    kept = {"/gpfs": Recovery(mountpoint="/gpfs", dev="0:77", method="none", probe="/gpfs/probe")}
    assert recoveries([drain], found, {}, kept, {"filesystem:/gpfs/probe": 2}, True) == [drain]
    # One hung run is not yet a pattern; another status is not a hang.
    assert recoveries([drain], found, {}, recoverable(), {"filesystem:/gpfs/probe": 1}, True) == [drain]
    assert recoveries([drain], [gpfs_probe("error")], {}, recoverable(), {"filesystem:/gpfs/probe": 2}, True) \
        == [drain]
    # Recovered before and hung again: that is for the next incident, not this one's retry.
    done = {"recover:n1:/gpfs": {"recovered": True}}
    assert recoveries([drain], found, done, recoverable(), {"filesystem:/gpfs/probe": 2}, True) == [drain]


def test_the_jobs_of_tasks_not_placed_on_a_mount_are_waited_for_too():
    """Every job with a task the stuck-task check did not place (no device proven:
    unproven, watched, left for a later run) counts as one the recovery waits for; one
    placed on another device, or on the user's own mount, does not."""
    from slurm_hooks.core.model import OK
    from slurm_hooks.decide.mount_incident import unplaced
    drain = Action("drain", node="n1", reason=R)
    unproven = on_gpfs(pid=500, job="9", dev="", severity=WARN)
    unproven.status = "stuck_not_node"
    watched = Finding(check="stuck_tasks", target="pid 600", status="watching", severity=OK, summary="",
                      evidence={"pid": 600, "tid": 600, "seconds": 1.0}, job="10")
    own = on_gpfs(pid=700, job="11", dev="0:99", severity=WARN)
    own.status = "stuck_own_mount"
    unplaced_own = on_gpfs(pid=701, job="12", dev="", severity=WARN)
    unplaced_own.status = "stuck_own_mount"
    elsewhere = on_gpfs(pid=400, job="8", dev="0:88")
    ok_probe = Finding(check="filesystem", target="/x", status="ok", severity=OK, summary="", job="13")
    found = [gpfs_probe(), on_gpfs(needs_reboot=False), unproven, watched, own, unplaced_own, elsewhere, ok_probe]
    [_, rec] = recoveries([drain], found, {}, recoverable(), {"filesystem:/gpfs/probe": 2}, True)
    assert (rec.recovery.jobs, rec.recovery.unplaced) == (["7"], ["10", "9"])
    assert unplaced(found, "0:77", ["7", "9"]) == ["10"]
    # The reboot a proven task asked for becomes the recovery, waiting for the same jobs.
    reboot = Action("reboot", node="n1", reason=R, incident="n1:300:100")
    [x] = recoveries([reboot], [on_gpfs()] + found[2:], {}, recoverable(), {}, True)
    assert (x.kind, x.recovery.jobs, x.recovery.unplaced) == ("recover", ["7"], ["10", "9"])


def test_a_recovery_that_left_the_mount_hung_is_followed_by_the_reboot():
    from slurm_hooks.core.reason import with_note
    failed = {"recover:n1:/gpfs": {"recovered": False}}
    drain = Action("drain", node="n1", reason=R)
    out = recoveries([drain], [gpfs_probe()], failed, recoverable(), {}, True)
    assert out == [drain, Action("reboot", node="n1", reason=with_note(R, "(recovery tried: fuse-abort /gpfs)"),
                                 incident="/gpfs")]
    # Without a drain in this run's actions the probe's own words make the reason.
    comment = Action("comment", node="n1", job="7", text="x")
    probe = gpfs_probe()
    assert recoveries([comment], [probe], failed, recoverable(), {}, True)[-1].reason == \
        with_note(probe.summary, "(recovery tried: fuse-abort /gpfs)")
    # One reboot: none more when one is already asked.
    reboot = Action("reboot", node="n1", reason=R, incident="n1:9:9")
    assert recoveries([drain, reboot], [gpfs_probe()], failed, recoverable(), {}, True) == [drain, reboot]


def test_resuming_counts_passing_runs_from_the_record():
    from slurm_hooks.decide.policy import hold_back, hysteresis, resume_decision
    assert resume_decision([], {"resumable": True}, "n1", 1) == (Action("resume", node="n1", reason=""),
                                                                 {"resumable": True, "passes": 1})
    assert resume_decision([], {"resumable": True, "reason": R}, "n1", 2) == (None, {"resumable": True, "reason": R,
                                                                                    "passes": 1})
    f = fs("/a")
    f.detail = ""
    new, waiting = hysteresis([f, fs("/b")], {"filesystem:/a": 1}, {"filesystem": 3})
    assert new == {"filesystem:/a": 2, "filesystem:/b": 1} and [(w[1], w[2]) for w in waiting] == [(2, 3), (1, 3)]
    hold_back(waiting)
    assert f.severity == WARN and f.detail == "failure 2 of 3 before draining"


def test_the_edges_of_the_policys_loops_and_defaults():
    """Each case is a line a mutation changed unnoticed: a skipped item never ends the
    loop, the defaults are the documented ones."""
    from slurm_hooks.core.model import Recovery
    from slurm_hooks.decide.policy import hold_back, hysteresis
    P = "[slurm-hooks]"
    # A finding skipped first does not end the job-only loop, nor the count.
    assert [(a.kind, a.job) for a in decide([own("10", ""), own("7", "comment")], "n1", P, ActionsConfig())] == \
        [("comment", "7")]
    new, _ = hysteresis([fs("/ok", OK), fs("/a")], {}, {})
    assert new == {"filesystem:/a": 1}
    f = fs("/a")
    f.detail = "code X"
    hold_back([(f, 1, 2)])
    assert f.detail == "failure 1 of 2 before draining; code X"
    # kill_grace defaults to none at all: a requeued job's task still there is the reboot's.
    a, b = stuck("7", 300), stuck("7", 200)
    ended = {"requeue:7:n1:300:100": {"done": 100.0, "ended": True},
             "requeue:7:n1:200:100": {"done": 100.0, "ended": True}}
    [r] = [x for x in decide([a, b], "n1", P, ActionsConfig(), ended, now=100.5) if x.kind == "reboot"]
    assert r.incident == "n1:200:100+n1:300:100"

    rec = recoverable()
    drain = Action("drain", node="n1", reason=R)
    comment = Action("comment", node="n1", job="7", text="x")
    # A reboot left as asked, or made "tried", and the actions after it: all kept.
    two = [on_gpfs(), on_gpfs(pid=301, dev="0:88")]
    two[1].incident = "n1:301:100"
    both = Action("reboot", node="n1", reason=R, incident="n1:300:100+n1:301:100")
    assert recoveries([both, comment], two, {}, rec, {}, True) == [both, comment]
    tried = {"recover:n1:n1:300:100": {"recovered": False}}
    one_ = Action("reboot", node="n1", reason=R, incident="n1:300:100")
    assert recoveries([one_, comment], [on_gpfs()], tried, rec, {}, True)[1:] == [comment]
    # Only the reboot's own tasks say where it waits: another task's device does not count.
    other = on_gpfs(pid=302, dev="0:88")
    other.incident = "n1:302:100"
    assert [x.kind for x in recoveries([one_], [on_gpfs(), other], {}, rec, {}, True)] == ["recover"]
    # A probe found after other findings; a task on it without a start time; no node in
    # this run's actions.
    nostart = on_gpfs(needs_reboot=False)
    nostart.evidence.pop("start_ticks")
    [x] = recoveries([], [nostart, gpfs_probe()], {}, rec, {"filesystem:/gpfs/probe": 2}, True)
    assert (x.kind, x.node, x.recovery.tasks) == ("recover", "", [[300, 0]])
    # Not a probe of a recoverable mount, not a mount probe, not failing, never counted: nothing.
    elsewhere = Finding(check="filesystem", target="/other/probe", status="hung", severity=FAIL, summary="x")
    site = Finding(check="site", target="/gpfs/probe", status="hung", severity=FAIL, summary="x")
    warned = gpfs_probe()
    warned.severity = WARN
    counts = {"filesystem:/other/probe": 2, "site:/gpfs/probe": 2, "filesystem:/gpfs/probe": 2}
    assert recoveries([drain], [elsewhere, site, warned], {}, rec, counts, True) == [drain]
    assert recoveries([drain], [gpfs_probe()], {}, rec, {}, True) == [drain]
    # A recovery asked this run (for the tasks' reboot) is not followed by the reboot of a
    # recovery that failed before.
    failed = {"recover:n1:/gpfs": {"recovered": False}}
    assert [x.kind for x in recoveries([drain, one_], [on_gpfs(), gpfs_probe()], failed, rec, {}, True)] == \
        ["drain", "recover"]
    # Each mount on its own: one whose recovery failed gets the reboot, another hung twice
    # still gets its recovery.
    rec["/home"] = Recovery(mountpoint="/home", dev="0:99", method="nfs-force-unmount", probe="/home/probe")
    home = Finding(check="filesystem", target="/home/probe", status="hung", severity=FAIL, summary="fs /home hung")
    out = recoveries([drain], [gpfs_probe(), home], failed, rec, {"filesystem:/home/probe": 2}, True)
    assert [(x.kind, x.incident) for x in out] == [("drain", None), ("reboot", "/gpfs"), ("recover", "/home")]
