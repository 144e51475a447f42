"""A mount's incident, one rule at a time (decide/mount_incident.py): what a finding says
of a mount, how the record moves from run to run, whose word counts, the scope, what
each scope lets through, and what the jobs and the node are told."""
from __future__ import annotations

import time

from slurm_hooks.core.model import FAIL, OK, WARN, Action, Finding, Recovery
from slurm_hooks.core.reason import cause_text
from slurm_hooks.decide import mount_incident as mi

SOURCE, FSTYPE, POINT = "gpfs:/fs1", "gpfs", "/gpfs"
T0 = 1_800_000_000.0
P = "[slurm-hooks]"


def probe(status="hung", errno=None, network=True, source=SOURCE, severity=FAIL, check="filesystem") -> Finding:
    ev = {"mountpoint": POINT, "fstype": FSTYPE, "source": source, "network": network, "dev": "0:77"}
    if errno:
        ev["errno"] = errno
    return Finding(check=check, target=f"{POINT}/probe", status=status, severity=severity, summary="x", evidence=ev)


def task(job="7", pid=300, cause="shared_filesystem", status="stuck", uid=1001, source=SOURCE) -> Finding:
    return Finding(check="stuck_tasks", target=f"job {job} pid {pid}", status=status, severity=FAIL, summary="x",
                   job=job, incident=f"n1:{pid}:100", needs_reboot=True, resumable=False,
                   evidence={"cause": cause, "source": source, "fstype": FSTYPE, "mountpoint": POINT,
                             "network": True, "mount_dev": "0:77", "uid": uid, "pid": pid})


def incident(scope=mi.UNKNOWN, kind=mi.HUNG, **kw) -> mi.Incident:
    base = dict(source=SOURCE, fstype=FSTYPE, mountpoint=POINT, dev="0:77", kind=kind, since=mi.utc(T0), first=T0,
                seen=T0, runs=1, scope=scope, alone_since=T0)
    return mi.Incident(**{**base, **kw})


def comment(mounts, held=False) -> str:
    return cause_text("filesystem", POINT, "x", "t", mounts, held)


# --- sighted -----------------------------------------------------------------------------
def test_what_a_finding_says_of_a_mount():
    s = mi.place(probe())
    assert (s.source, s.fstype, s.mountpoint, s.dev, s.kind, s.job) == (SOURCE, FSTYPE, POINT, "0:77", mi.HUNG, None)
    for errno in mi.DEAD_ERRNOS:
        assert mi.place(probe("error", errno)).kind == mi.DEAD
    # Another error is no dead client (a full disk, a permission), nor is a mount that is missing.
    assert mi.place(probe("error", "ENOSPC")) is None and mi.place(probe("missing")) is None
    # A local filesystem, a mount of no source, another check's finding: nothing.
    assert mi.place(probe(network=False)) is None and mi.place(probe(source="")) is None
    assert mi.place(probe(check="site")) is None
    t = mi.place(task())
    assert (t.kind, t.job, t.uid, t.dev) == (mi.HUNG, "7", 1001, "0:77")
    # A task on its user's mount, or not proven on the node's: not the storage's trouble.
    assert mi.place(task(cause="user_mount")) is None and mi.place(task(cause="unproven")) is None
    assert mi.place(task(status="stuck_own_mount")) is None
    # The severity is the caller's to judge: sightings() takes failures only.
    assert mi.sightings([probe(severity=WARN), probe(severity=OK)]) == []
    assert [s.kind for s in mi.sightings([probe(), task()])] == [mi.HUNG, mi.HUNG]


def test_the_record_from_run_to_run():
    seen = mi.sightings([probe(), task(job="7"), task(job="8", pid=301)])
    live, answered = mi.advance([], seen, T0)
    [i] = live
    assert (i.runs, i.first, i.since, i.scope, i.alone_since) == (1, T0, mi.utc(T0), mi.UNKNOWN, 0.0)
    assert i.jobs == {"7": [T0, 1001], "8": [T0, 1001]} and answered == []
    assert i.steps == [[T0, "sighted: hung"]]
    # The next run: one more run, the jobs' first sighting kept, the record the same one.
    live, _ = mi.advance(live, mi.sightings([task(job="7")]), T0 + 10)
    [i] = live
    assert (i.runs, i.seen, i.first, i.jobs["7"][0]) == (2, T0 + 10, T0, T0)
    # Dead probes and a hang: the hang wins (a task waits on it).
    live, _ = mi.advance([], mi.sightings([probe("error", "ENOTCONN"), task()]), T0)
    assert live[0].kind == mi.HUNG
    live, _ = mi.advance([], mi.sightings([probe("error", "ENOTCONN")]), T0)
    assert live[0].kind == mi.DEAD
    # Marked the node's own by its device (`scope: node`).
    live, _ = mi.advance([], seen, T0, frozenset({"0:77"}))
    assert live[0].marked
    live, _ = mi.advance([], seen, T0, frozenset({"0:99"}))
    assert not live[0].marked
    # Not sighted in a run: answered, and said so.
    before, _ = mi.advance([], seen, T0)
    live, answered = mi.advance(before, [], T0 + 60)
    assert live == [] and answered[0].answered == T0 + 60 and answered[0].steps[-1] == [T0 + 60, "answered"]


def test_whose_word_counts():
    now = T0 + 100
    fresh = [SOURCE, FSTYPE, POINT, "2027-01-15T08:00:00", "hung", str(int(now - 10))]
    old = [SOURCE, FSTYPE, POINT, "2027-01-15T08:00:00", "hung", str(int(now - 100))]
    drained = {"NodeName": "n2", "State": "IDLE+DRAIN", "Reason": f"fs hung {P} [root@2027-01-15T08:00:00]",
               "Comment": comment([fresh])}
    named = mi.witnesses({"n2": drained}, "n1", now, 75, P)
    [w] = named[(SOURCE, FSTYPE)]
    assert (w.node, w.kind, w.seen, w.mountpoint) == ("n2", mi.HUNG, now - 10, POINT)
    # This node's own word is not a witness of itself.
    assert mi.witnesses({"n2": drained}, "n2", now, 75, P) == {}
    # Older than fresh_for: stale. A word from the future beyond the clocks' slack: not trusted.
    assert mi.witnesses({"n2": dict(drained, Comment=comment([old]))}, "n1", now, 75, P) == {}
    ahead = [*fresh[:5], str(int(now + 60))]
    assert mi.witnesses({"n2": dict(drained, Comment=comment([ahead]))}, "n1", now, 75, P) == {}
    # Words of older releases carry no time: not fresh.
    assert mi.witnesses({"n2": dict(drained, Comment=comment([fresh[:4]]))}, "n1", now, 75, P) == {}
    # A node that does not stand by its word: resumed by an admin (its cause not held),
    # drained by someone else, DOWN, waiting for a reboot.
    resumed = dict(drained, State="IDLE", Reason="")
    assert mi.witnesses({"n2": resumed}, "n1", now, 75, P) == {}
    held = dict(resumed, Comment=comment([fresh], held=True))
    assert list(mi.witnesses({"n2": held}, "n1", now, 75, P)) == [(SOURCE, FSTYPE)]
    admin = dict(drained, Reason="disk swap [root@2027-01-15T08:00:00]")
    assert mi.witnesses({"n2": admin}, "n1", now, 75, P) == {}
    # Slurm's own `Kill task failed` over our drain (a task the storage holds): still ours.
    killed = dict(drained, Reason="Kill task failed (JobId=7 StepId=0) [slurm@2027-01-15T08:00:00]")
    assert list(mi.witnesses({"n2": killed}, "n1", now, 75, P)) == [(SOURCE, FSTYPE)]
    for state in ("DOWN+DRAIN", "IDLE+DRAIN+REBOOT_REQUESTED", "DOWN"):
        assert mi.witnesses({"n2": dict(held, State=state)}, "n1", now, 75, P) == {}, state
    # Dead, as its word says.
    dead = [*fresh[:4], "dead", fresh[5]]
    assert mi.witnesses({"n2": dict(drained, Comment=comment([dead]))}, "n1", now, 75, P)[(SOURCE, FSTYPE)][0].kind \
        == mi.DEAD


def test_the_scope():
    w = mi.Witness(node="n2", source=SOURCE, fstype=FSTYPE, mountpoint="/mnt/gpfs", since="2027-01-15T07:59:00")
    # The wait starts with the first word from the cluster (slurmctld may not have answered
    # since the first sighting: nobody could name the mount then).
    i = incident(alone_since=0.0)
    mi.judge([i], None, T0 + 100, 30)
    assert (i.scope, i.alone_since) == (mi.UNKNOWN, 0.0)
    mi.judge([i], {}, T0 + 100, 30)
    assert (i.scope, i.alone_since) == (mi.UNKNOWN, T0 + 100)
    i = incident()
    mi.judge([i], {}, T0 + 29, 30)
    assert i.scope == mi.UNKNOWN                     # not yet an interval alone
    mi.judge([i], None, T0 + 60, 30)
    assert i.scope == mi.UNKNOWN                     # no word from the cluster: as it was
    mi.judge([i], {}, T0 + 30, 30)
    assert i.scope == mi.NODE and i.steps[-1][1].startswith("scope: hung gpfs:/fs1 (/gpfs) on this node alone")
    # Another node names it: an outage, dated by its earliest sighting, whatever the scope was.
    mi.judge([i], {(SOURCE, FSTYPE): [w]}, T0 + 40, 30)
    assert (i.scope, i.nodes, i.outage_since, i.alone_since) == (mi.OUTAGE, ["n2"], w.since, T0 + 40)
    # The others answered, this node still sees it: its own after one interval alone.
    mi.judge([i], {}, T0 + 69, 30)
    assert i.scope == mi.OUTAGE
    mi.judge([i], {}, T0 + 70, 30)
    assert i.scope == mi.NODE and i.nodes == []
    # Dead here and there: the storage restarted. Dead here, hung there: an outage.
    d = incident(kind=mi.DEAD)
    mi.judge([d], {(SOURCE, FSTYPE): [mi.Witness(node="n2", source=SOURCE, fstype=FSTYPE, mountpoint=POINT,
                                                 kind=mi.DEAD)]}, T0, 30)
    assert (d.scope, d.dead_seen) == (mi.RESTART, ["n2"])
    e = incident(kind=mi.DEAD)
    mi.judge([e], {(SOURCE, FSTYPE): [w]}, T0, 30)
    assert e.scope == mi.OUTAGE
    # Marked the node's own: its scope at once, whatever the others say.
    m = incident(marked=True)
    mi.judge([m], {(SOURCE, FSTYPE): [w]}, T0, 30)
    assert m.scope == mi.NODE


def test_what_a_node_names_and_when_it_says_it_again():
    live = [incident(), incident(source="nfs:/home", fstype="nfs4", mountpoint="/home", scope=mi.NODE),
            incident(source="b:/x", scope=mi.RESTART, kind=mi.DEAD), incident(source="c:/y", marked=True)]
    got = mi.entries(live, T0 + 5)
    assert got == [["b:/x", FSTYPE, POINT, mi.utc(T0), "dead", str(int(T0 + 5))],
                   [SOURCE, FSTYPE, POINT, mi.utc(T0), "hung", str(int(T0 + 5))]], got
    said = [mi.Witness(node="n1", source=e[0], fstype=e[1], mountpoint=e[2], kind=e[4], seen=float(e[5])) for e in got]
    assert not mi.needs_refresh(said, got, T0 + 10, 20)
    assert mi.needs_refresh(said, got, T0 + 25, 20)                        # getting old
    assert mi.needs_refresh(said[:1], got, T0 + 10, 20)                    # another set
    assert mi.needs_refresh(said, [], T0 + 10, 20)                         # nothing to name any more
    assert not mi.needs_refresh([], [], T0 + 10, 20)


def test_what_each_scope_lets_through():
    drain = Action("drain", node="n1", reason="r")
    requeue = Action("requeue", node="n1", job="7", incident="n1:300:100", text="t", uid=1001)
    note = Action("comment", node="n1", job="7", incident="n1:300:100", text="t", uid=1001)
    reboot = Action("reboot", node="n1", reason="r", incident="n1:300:100")
    elsewhere = Action("reboot", node="n1", reason="r", incident="n1:300:100+n1:999:1")
    findings = [task()]
    jobs = {"7": [T0, 1001]}

    def govern(scope, acts, now=T0 + 10, after=1800.0, **kw):
        return mi.govern(acts, findings, [incident(scope=scope, jobs=jobs, **kw)], "n1", P, after, now)

    # Not yet known: the drain alone. A reboot asked for a place of the node's own as well
    # (no network mount's: a GPU, a local disk) goes ahead: that place is reason enough.
    kept, held = govern(mi.UNKNOWN, [drain, requeue, note, reboot, elsewhere])
    assert kept == [drain, elsewhere] and [(a.kind, code) for a, _, code in held] == \
        [("requeue", "scope_unknown"), ("comment", "scope_unknown"), ("reboot", "scope_unknown")]
    assert held[0][1].startswith("hung gpfs:/fs1 (/gpfs) since ") and "no requeue before the scope is known" in held[0][1]
    kept, held = govern(mi.NODE, [drain, requeue, note, reboot])
    assert kept == [drain, requeue, note, reboot] and held == []
    # An outage: no reboot; a reboot for a place of the node's too stays.
    kept, held = govern(mi.OUTAGE, [drain, requeue, note, reboot, elsewhere])
    assert [a.kind for a in kept] == ["drain", "comment", "reboot"] and kept[2] is elsewhere
    said = kept[1]
    assert (said.job, said.uid, said.incident) == ("7", 1001, f"waits:{SOURCE}")
    assert said.text.startswith(f"{P} waiting on the outage of {SOURCE} ({POINT}) since ")
    assert [(a.kind, code) for a, _, code in held] == [("requeue", "waits_out"), ("comment", "waits_out"),
                                                       ("reboot", "outage")]
    # Past outage.requeue_after the job is requeued, saying why; 0: never.
    kept, _ = govern(mi.OUTAGE, [requeue], now=T0 + 1800)
    assert kept == [requeue] and requeue.text.endswith(f"requeued after waiting 30 min on the outage of {SOURCE} ({POINT})")
    kept, held = govern(mi.OUTAGE, [Action("requeue", node="n1", job="7", incident="n1:300:100")], now=T0 + 10**6,
                        after=0)
    assert kept == [] and held[0][1].endswith("the job waits it out, never requeued for it (outage.requeue_after: 0)")
    assert held[0][2] == "waits_out"
    # A dead mount's remount goes whatever the scope; a hung mount's recovery waits.
    dead = Action("recover", node="n1", incident="/gpfs x", recovery=Recovery(mountpoint=POINT, dead=True))
    hung = Action("recover", node="n1", incident="/gpfs", recovery=Recovery(mountpoint=POINT, dev="0:77"))
    kept, held = govern(mi.UNKNOWN, [dead, hung])
    assert kept == [dead] and held[0][0] is hung
    # A reboot asked for before the outage was known: withdrawn, first of all.
    kept, _ = govern(mi.OUTAGE, [drain], reboot=T0)
    assert [a.kind for a in kept] == ["cancel_reboot", "drain"]
    assert govern(mi.OUTAGE, [drain], reboot=T0, withdrawn=T0 + 5)[0] == [drain]
    assert govern(mi.NODE, [drain], reboot=T0)[0] == [drain]
    # A job's own problem (job_only) and anything about no mount in trouble: as asked.
    own = Action("comment", node="n1", job="8", job_only=True)
    gpu = Action("reboot", node="n1", incident="n1:gpu0")
    assert govern(mi.UNKNOWN, [own, gpu])[0] == [own, gpu]


def test_the_jobs_told_and_the_node_resumable():
    i = incident(scope=mi.OUTAGE, outage_since=mi.utc(T0 - 60), jobs={"7": [T0, 1001]}, answered=T0 + 120)
    [a] = mi.told([i], "n1", P, T0 + 120)
    start, end = time.strftime("%H:%M", time.localtime(T0 - 60)), time.strftime("%H:%M", time.localtime(T0 + 120))
    assert (a.kind, a.job, a.uid, a.ran_here) == ("comment", "7", 1001, True)
    assert a.text == f"{P} waited on the outage of {SOURCE} ({POINT}) {start}-{end}"
    assert mi.told([incident(scope=mi.NODE, jobs={"7": [T0, 1001]})], "n1", P, T0) == []
    # Resumable while the trouble is not known to be the node's.
    gpu = Finding(check="gpu", target="0", status="lost", severity=FAIL, summary="x", resumable=False)
    for scope, want in ((mi.UNKNOWN, True), (mi.OUTAGE, True), (mi.RESTART, True), (mi.NODE, False)):
        assert mi.resumable([task()], [incident(scope=scope)]) is want, scope
    assert mi.resumable([task(), gpu], [incident(scope=mi.OUTAGE)]) is False
    assert mi.resumable([], []) is False
    assert mi.drain_words([incident(scope=mi.OUTAGE)]) == f"storage outage {SOURCE} ({POINT})"
    assert mi.drain_words([incident(scope=mi.RESTART)]) == f"storage restart {SOURCE} ({POINT})"
    assert mi.drain_words([incident()]) == ""


def test_the_lines_that_name_it(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        since = "2027-01-15T03:12:00"
        assert incident(scope=mi.OUTAGE, nodes=["n2", "n3"], outage_since=since).line() == \
            f"outage of {SOURCE} ({POINT}) on 3 nodes since 03:12"
        r = incident(scope=mi.RESTART, kind=mi.DEAD, nodes=["n2"], dead_seen=["n2", "n3", "n4"], outage_since=since)
        assert r.line() == f"storage restart: {SOURCE} ({POINT}) dead on 4 nodes since 03:12, 2 remounted"
        assert mi.hhmm("garbled") == "garbled" and mi.hhmm("") == "?"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_across_the_cluster():
    now = T0
    def node(name, *mounts, held=False, state="IDLE+DRAIN"):
        return {"NodeName": name, "State": state, "Reason": f"x {P}", "Comment": comment(list(mounts), held)}
    said = str(int(now))
    infos = {"n1": node("n1", [SOURCE, FSTYPE, POINT, "2027-01-15T03:12:00", "hung", said]),
             "n2": node("n2", [SOURCE, FSTYPE, "/mnt/gpfs", "2027-01-15T03:11:00", "hung", said]),
             "n3": node("n3", ["nfs:/home", "nfs4", "/home", "2027-01-15T03:00:00", "dead", said]),
             "n4": node("n4", ["nfs:/home", "nfs4", "/home", "2027-01-15T03:01:00", "dead", said], held=True,
                        state="IDLE")}
    got = mi.across(infos, P, now, 75)
    assert [(o["source"], o["nodes"], o["since"], o["scope"]) for o in got] == \
        [(SOURCE, ["n1", "n2"], "2027-01-15T03:11:00", mi.OUTAGE),
         ("nfs:/home", ["n3", "n4"], "2027-01-15T03:00:00", mi.RESTART)]
    assert got[1]["line"].startswith("storage restart: nfs:/home (/home) dead on 2 nodes since ")


def test_the_record_kept_in_state():
    live = [incident()]
    doc = mi.dump(live, T0)
    assert [i.source for i in mi.load(doc)] == [SOURCE] and doc["at"] == T0
    assert mi.fresh(doc, 600, T0 + 600) == mi.load(doc)
    assert mi.fresh(doc, 600, T0 + 601) == []
    assert mi.load({"incidents": ["junk", {"source": "x", "fstype": "y", "mountpoint": "/z", "nope": 1}]})[0].source \
        == "x"
    # The answered ones: an hour, for `explain`; the same answer is kept once.
    gone = incident(source="b:/x", answered=T0)
    older = incident(source="c:/y", answered=T0 - 4000)
    recent = incident(source="d:/z", answered=T0 - 10)
    assert [i.source for i in mi.past([gone], [older, recent, gone], T0)] == ["b:/x", "d:/z"]


def test_each_step_is_told_once():
    from slurm_hooks.core.model import ActionResult
    from slurm_hooks.core.outcomes import Code, Outcome
    i = incident(scope=mi.NODE)
    t = task()
    requeue = Action("requeue", node="n1", job="7", incident=t.incident)
    reboot = Action("reboot", node="n1", incident=t.incident)
    drain = Action("drain", node="n1", reason="r")
    for now in (T0, T0 + 10):
        mi.record([i], [ActionResult(requeue, Outcome.HELD, f"held {now}", code=Code.SCOPE_UNKNOWN),
                        ActionResult(drain, Outcome.SKIPPED, "already", code=Code.ALREADY_DRAINED)], [t], now)
    assert [w for _, w in i.steps] == ["requeue job 7 held (scope_unknown)"]
    mi.record([i], [ActionResult(drain, Outcome.DONE, ""), ActionResult(reboot, Outcome.DONE, "asked")], [t], T0 + 20)
    assert [w for _, w in i.steps][1:] == ["drain done", "reboot done: asked"] and i.reboot == T0 + 20
    withdraw = Action("cancel_reboot", node="n1", incident=f"withdraw:{SOURCE}")
    mi.record([i], [ActionResult(withdraw, Outcome.DONE, "withdrawn", code=Code.WITHDRAWN)], [], T0 + 30)
    assert i.withdrawn == T0 + 30 and i.steps[-1][1] == "cancel_reboot done (withdrawn): withdrawn"
    told = Action("comment", node="n1", job="7", incident=f"waited:{SOURCE}:{int(T0)}")
    mi.record([i], [ActionResult(told, Outcome.DONE, "")], [], T0 + 40)
    assert i.steps[-1][1] == "comment job 7 done"
