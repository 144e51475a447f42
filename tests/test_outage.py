"""A mount's incident over the in-memory Slurm that test_fakes_contract.py holds to both
real ones (decide/mount_incident.py through act/actuation.py): three nodes, each with
its own local state, mounting the same storage; the clock is the test's.

The storage's night, end to end: nothing irreversible before the scope is known; the
same mount named by another node is one outage, in which no node reboots or recovers
and the jobs wait; a reboot asked for before the outage was known is withdrawn; every
node back in service by itself once the storage answers, the jobs told how long they
waited; a dead mount remounted; only fresh words of nodes that stand by them count."""
from __future__ import annotations

import collections

import time

import pytest

from slurm_hooks.act.actuation import INCIDENTS, PAST_INCIDENTS, take_actions
from slurm_hooks.checks._config import default_config
from slurm_hooks.checks._stuck_diagnosis import Diagnosis, place_of
from slurm_hooks.checks._stuck_reads import Stuck
from slurm_hooks.core.model import FAIL, OK, Finding
from slurm_hooks.core.outcomes import Code, Outcome
from slurm_hooks.core.reason import read_cause
from slurm_hooks.core.state import StateStore
from slurm_hooks.decide import mount_incident as mi
from slurm_hooks.host.jobs import JobRef
from slurm_hooks.host.procfs import TaskSample, boot_id
from slurm_hooks.slurm.fake import FakeSlurm

NODES = ("n1", "n2", "n3")
SOURCE, FSTYPE, POINT = "gpfs:/fs1", "gpfs", "/gpfs"
INTERVAL = 30.0


class Clock:
    """time.time() as the test sets it: the scope waits one health-check interval."""

    def __init__(self, monkeypatch):
        self.now = 1_800_000_000.0
        monkeypatch.setattr(time, "time", lambda: self.now)

    def tick(self, seconds: float = 1.0) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    return Clock(monkeypatch)


def config(tmp_path, node: str, **policy):
    cfg = default_config(state_dir=str(tmp_path / node / "state"))
    cfg.policy.max_drained_nodes, cfg.policy.max_drained_fraction = 1, 0
    cfg.policy.resume_after = 2
    cfg.outage.interval = INTERVAL
    for k, v in policy.items():
        setattr(cfg.policy, k, v)
    return cfg


def state_of(tmp_path, node: str) -> StateStore:
    state = StateStore(str(tmp_path / node / "state" / node))
    state.save("boot", {"id": boot_id()})
    return state


def probe_hung(source=SOURCE, point=POINT) -> Finding:
    return Finding(check="filesystem", target=f"{point}/probe", status="hung", severity=FAIL,
                   summary=f"fs {point}/probe hung >10s (read, {FSTYPE})",
                   evidence={"mountpoint": point, "fstype": FSTYPE, "source": source, "network": True, "dev": "0:77"})


def probe_dead(source=SOURCE, point=POINT) -> Finding:
    return Finding(check="filesystem", target=f"{point}/probe", status="error", severity=FAIL,
                   summary=f"fs {point}/probe create failed ENOTCONN ({FSTYPE})",
                   evidence={"mountpoint": point, "fstype": FSTYPE, "source": source, "network": True, "dev": "0:77",
                             "step": "create", "errno": "ENOTCONN"})


def probe_ok(point=POINT) -> Finding:
    return Finding(check="filesystem", target=f"{point}/probe", status="ok", severity=OK, summary="ok")


def stuck(node: str, job: str, pid: int, source=SOURCE, killed=False, uid=1001) -> Finding:
    return Finding(check="stuck_tasks", target=f"job {job} pid {pid}", status="stuck", severity=FAIL,
                   summary=f"job {job} pid {pid} stuck in openat() on {POINT}/ckpt.pt ({FSTYPE} {POINT})",
                   reason=f"job {job} stuck in openat() on {POINT}/ckpt.pt ({FSTYPE}), pid {pid}", job=job,
                   incident=f"{node}:{pid}:100", needs_reboot=True, hard=True, resumable=False,
                   evidence={"uid": uid, "pid": pid, "start_ticks": 100, "cause": "shared_filesystem",
                             "mountpoint": POINT, "fstype": FSTYPE, "source": source, "network": True,
                             "mount_dev": "0:77", "sigkill_pending": killed})


class Cluster:
    def __init__(self, tmp_path, **policy):
        self.slurm = FakeSlurm(NODES, version="22.05")
        self.cfg = {n: config(tmp_path, n, **policy) for n in NODES}
        self.state = {n: state_of(tmp_path, n) for n in NODES}
        self.notes: dict[str, list[str]] = {}

    def run(self, node: str, findings: list[Finding], hook: str = "healthcheck"):
        self.notes[node] = []
        return take_actions(self.cfg[node], node, findings, False, self.state[node], hook=hook,
                            open_backend=self.slurm.open, notes=self.notes[node])

    def incidents(self, node: str) -> list[mi.Incident]:
        return mi.load(self.state[node].load(INCIDENTS))

    def answered(self, node: str) -> list[mi.Incident]:
        return mi.load(self.state[node].load(PAST_INCIDENTS))

    def named(self, node: str) -> list:
        return (read_cause(self.slurm.node_state(node)["Comment"]) or {}).get("mounts") or []


def kinds(results):
    return [(r.action.kind, str(r.outcome), str(r.code)) for r in results]


def test_nothing_irreversible_before_the_scope_is_known(tmp_path, clock):
    """The first node to see the storage hang drains at once (resumable) and asks for
    nothing else: no requeue, no reboot, even for a task killed and still in D, until
    another node names the mount or one interval passed with none doing so."""
    c = Cluster(tmp_path)
    job = c.slurm.add_job("n1,n2,n3")
    first = c.run("n1", [probe_hung(), stuck("n1", job, 100, killed=True)])
    assert ("drain", "done", "") in kinds(first)
    held = {(k, code) for k, outcome, code in kinds(first) if outcome == "held"}
    assert {("requeue", "scope_unknown"), ("comment", "scope_unknown")} <= held, held
    assert "reboot" not in c.slurm.calls and "requeue" not in c.slurm.calls
    assert c.state["n1"].load("drain")["resumable"] is True
    [i] = c.incidents("n1")
    assert (i.scope, i.kind, i.source) == (mi.UNKNOWN, mi.HUNG, SOURCE)
    # Named in its Comment for the others: the mount, its first sighting, what it is, when said.
    assert c.named("n1") == [[SOURCE, FSTYPE, POINT, i.since, "hung", str(int(clock.now))]]
    # Still alone with it one interval later: the node's own fault. The job is requeued;
    # killed and still in D, the task asks for the reboot once the job ended.
    clock.tick(INTERVAL)
    second = c.run("n1", [probe_hung(), stuck("n1", job, 100, killed=True)])
    assert ("requeue", "done", "") in kinds(second), kinds(second)
    assert c.incidents("n1")[0].scope == mi.NODE and c.named("n1") == []
    clock.tick(1)
    third = c.run("n1", [probe_hung(), stuck("n1", job, 100, killed=True)])
    assert ("reboot", "done", "") in kinds(third), kinds(third)
    assert c.state["n1"].load("drain")["resumable"] is False


def test_the_same_mount_hung_on_every_node_is_one_outage_the_jobs_wait_out(tmp_path, clock):
    c = Cluster(tmp_path)
    job = c.slurm.add_job("n1,n2,n3")
    frozen = {n: [probe_hung(), stuck(n, job, 100 + i, killed=True)] for i, n in enumerate(NODES)}
    first = {n: c.run(n, frozen[n]) for n in NODES}
    assert ("drain", "done", "") in kinds(first["n1"])
    for n in ("n2", "n3"):
        assert ("drain", "held", "breaker") in kinds(first[n]), first[n]
        # Held back, it names the mount all the same, saying it is held.
        cause = read_cause(c.slurm.node_state(n)["Comment"])
        assert cause["held"] is True and cause["mounts"][0][:3] == [SOURCE, FSTYPE, POINT], cause
        # The outage known from its first run (n1 named it already): no reboot, no requeue.
        assert c.incidents(n)[0].scope == mi.OUTAGE
        assert not [k for k in kinds(first[n]) if k[0] in ("reboot", "requeue") and k[1] != "held"], first[n]
    # `status` names it once, from every node's Comment, held ones included.
    from slurm_hooks.views.status import collect, render
    st = collect(c.slurm, c.cfg["n1"].reason_prefix, now=clock.now)
    [o] = st.outages
    assert o["nodes"] == list(NODES) and o["line"].startswith(f"outage of {SOURCE} ({POINT}) on 3 nodes since ")
    assert sum(o["line"] in line for line in render(st).splitlines()) == 1, render(st)
    # n1's next run: the outage. The jobs wait it out: no requeue, a word on the job.
    for _ in range(3):
        clock.tick(10)
        for n in NODES:
            results = c.run(n, frozen[n])
            assert not [r for r in results if r.action.kind in ("reboot", "requeue", "recover")
                        and r.outcome == Outcome.DONE], (n, kinds(results))
    assert c.slurm.jobs[job]["JobState"] == "RUNNING" and c.slurm.jobs[job]["Restarts"] == "0"
    waiting = c.slurm.jobs[job]["AdminComment"]
    assert waiting.count(f"waiting on the outage of {SOURCE} ({POINT}) since ") == 1, waiting
    assert [n for n in c.notes["n1"] if n.startswith(f"outage of {SOURCE} ({POINT}) on 3 nodes since ")]
    # The drain the outage made is the storage's: it says so first, and is resumable.
    assert c.slurm.node_state("n1")["Reason"].startswith(f"storage outage {SOURCE} ({POINT}); ")
    assert c.state["n1"].load("drain")["resumable"] is True
    # The storage answers: every node back in service by itself, its word taken out of
    # its Comment, the job told how long it waited; then nothing more is asked of Slurm.
    for _ in range(3):
        clock.tick(10)
        for n in NODES:
            c.run(n, [probe_ok()])
    for n in NODES:
        info = c.slurm.node_state(n)
        assert "DRAIN" not in info["State"] and read_cause(info["Comment"]) is None, (n, info)
        assert c.incidents(n) == [] and c.answered(n)[0].answered, n
    told = c.slurm.jobs[job]["AdminComment"]
    assert told.count(f"waited on the outage of {SOURCE} ({POINT}) ") == 1, told
    # Then the healthy path again: nothing asked of Slurm (the answered incidents, kept
    # an hour for `explain`, are no reason to leave it).
    c.slurm.calls.clear()
    for n in NODES:
        assert c.run(n, [probe_ok()]) == []
    assert c.slurm.calls == {}


def test_in_a_long_outage_each_run_costs_slurmctld_one_rpc(tmp_path, clock):
    """Steady state of an outage: a node's word on the mount is written again only every
    second run (refresh_after) and stays fresh for the others all along (the outage stays
    named on every node). A held node's run that writes it reads nothing (the run before
    read the table and held everything, or found its drain in place): one RPC per run, a
    read or a write."""
    from slurm_hooks.act.mounts import fresh_for, refresh_after
    assert INTERVAL < refresh_after(INTERVAL) < 2 * INTERVAL and 2 * INTERVAL + 10 < fresh_for(INTERVAL)
    c = Cluster(tmp_path)
    for n in NODES:
        c.run(n, [probe_hung()])
    clock.tick(INTERVAL)
    for n in NODES:
        c.run(n, [probe_hung()])
    calls = {n: collections.Counter() for n in NODES}
    for _ in range(8):
        clock.tick(INTERVAL)
        for n in NODES:
            c.slurm.calls.clear()
            results = c.run(n, [probe_hung()])
            assert not [r for r in results if r.outcome == Outcome.DONE and r.action.kind != "comment"], kinds(results)
            assert set(c.slurm.calls) <= {"list_nodes_alone", "set_node_comment"}, c.slurm.calls
            assert c.slurm.rpcs() == 1, (n, c.slurm.calls, kinds(results), c.state[n].load("last-read"))
            want = ("drain", "skipped", "already_drained") if n == "n1" else ("drain", "held", "breaker")
            assert kinds(results) == [want], kinds(results)
            calls[n].update(c.slurm.calls)
            assert [i.scope for i in c.incidents(n)] == [mi.OUTAGE], n
    for n in NODES:
        assert calls[n] == {"list_nodes_alone": 4, "set_node_comment": 4}, calls
    assert "DRAIN" in c.slurm.node_state("n1")["State"] and "DRAIN" not in c.slurm.node_state("n2")["State"]
    # Something new (another mount hangs too): the run reads the table again.
    clock.tick(INTERVAL)
    c.slurm.calls.clear()
    c.run("n2", [probe_hung(), probe_hung("gpfs:/fs2", "/gpfs2")])
    assert c.slurm.calls.get("list_nodes_alone") == 1, c.slurm.calls


def test_a_run_reads_the_table_when_the_last_read_is_old(tmp_path, clock):
    c = Cluster(tmp_path)
    for _ in range(3):
        for n in NODES:
            c.run(n, [probe_hung()])
        clock.tick(INTERVAL)
    # n2 missed a run (slurmd busy): its last read is two intervals old; it reads again.
    clock.tick(INTERVAL)
    for _ in range(2):
        c.slurm.calls.clear()
        c.run("n2", [probe_hung()])
        assert c.slurm.calls.get("list_nodes_alone") == 1, c.slurm.calls
        clock.tick(2 * INTERVAL)
    # A kept record of another shape (not what a run writes): read as usual.
    c.run("n2", [probe_hung()])
    kept = c.state["n2"].load("last-read")
    c.state["n2"].save("last-read", dict(kept, held=[h[:3] for h in kept["held"]]))
    clock.tick(INTERVAL + 10)
    c.slurm.calls.clear()
    results = c.run("n2", [probe_hung()])
    assert c.slurm.calls.get("list_nodes_alone") == 1 and ("drain", "held", "breaker") in kinds(results), c.slurm.calls


def test_a_job_waits_out_the_outage_for_requeue_after_then_is_requeued_once(tmp_path, clock):
    c = Cluster(tmp_path, max_drained_nodes=3)
    for n in NODES:
        c.cfg[n].outage.requeue_after = 30
    job = c.slurm.add_job("n1,n2")
    frozen = {n: [probe_hung(), stuck(n, job, 100 + i)] for i, n in enumerate(("n1", "n2"))}
    for _ in range(3):
        for n in ("n1", "n2"):
            c.run(n, frozen[n])
        clock.tick(10)
    assert c.slurm.jobs[job]["JobState"] == "RUNNING"
    clock.tick(10)
    results = {n: c.run(n, frozen[n]) for n in ("n1", "n2")}
    assert ("requeue", "done", "") in kinds(results["n1"]), kinds(results["n1"])
    assert c.slurm.jobs[job]["Restarts"] == "1"
    assert "requeued after waiting 1 min on the outage of" in c.slurm.jobs[job]["AdminComment"] or \
        [r.action.text for r in results["n1"] if r.action.kind == "requeue"][0].endswith(
            f"requeued after waiting 1 min on the outage of {SOURCE} ({POINT})")
    # Once: the next runs requeue nothing more.
    clock.tick(10)
    for n in ("n1", "n2"):
        assert not [r for r in c.run(n, frozen[n]) if r.action.kind == "requeue" and r.outcome == Outcome.DONE]
    assert c.slurm.jobs[job]["Restarts"] == "1"


def test_a_reboot_asked_before_the_outage_was_known_is_withdrawn(tmp_path, clock):
    """n1 alone for an interval: its fault, its reboot asked (the node busy: requested,
    not issued). Then n2 names the same mount: an outage after all. n1 withdraws its own
    reboot, stays drained (resumable), and `explain` tells it."""
    c = Cluster(tmp_path, max_drained_nodes=3)
    job = c.slurm.add_job("n1,n2,n3")
    other = c.slurm.add_job("n1")
    c.run("n1", [probe_hung(), stuck("n1", job, 100, killed=True)])
    clock.tick(INTERVAL)
    c.run("n1", [probe_hung(), stuck("n1", job, 100, killed=True)])
    clock.tick(1)
    asked = c.run("n1", [probe_hung(), stuck("n1", job, 100, killed=True)])
    assert ("reboot", "done", "") in kinds(asked) and c.slurm.jobs[other]["JobState"] == "RUNNING"
    assert "REBOOT_REQUESTED" in c.slurm.node_state("n1")["State"]
    clock.tick(5)
    c.run("n2", [probe_hung(), stuck("n2", job, 101)])
    clock.tick(1)
    out = c.run("n1", [probe_hung(), stuck("n1", job, 100, killed=True)])
    assert ("cancel_reboot", "done", "withdrawn") in kinds(out), kinds(out)
    info = c.slurm.node_state("n1")
    assert "REBOOT" not in info["State"] and "DRAIN" in info["State"], (info, kinds(out))
    assert c.state["n1"].load("drain")["resumable"] is True
    # Withdrawn once: the next runs ask nothing of the kind.
    clock.tick(1)
    again = c.run("n1", [probe_hung(), stuck("n1", job, 100, killed=True)])
    assert not [r for r in again if r.action.kind in ("cancel_reboot", "reboot") and r.outcome == Outcome.DONE]
    from slurm_hooks.views.explain import explain
    text = explain([], "n1", c.state["n1"].load("drain"), 0, c.incidents("n1"))
    assert f"mount: outage of {SOURCE} ({POINT}) on 2 nodes" in text and "cancel_reboot done" in text, text


def test_only_fresh_words_of_nodes_that_stand_by_them_count(tmp_path, clock):
    """n2 drained for its own hang, then resumed by an admin: its next run takes our word
    out of its Comment. Another node's own fault on that storage is then its own, not an
    outage; so it is beside a word too old or of a node DOWN."""
    c = Cluster(tmp_path, max_drained_nodes=3)
    job = c.slurm.add_job("n1,n3")
    c.run("n2", [probe_hung()])
    assert c.named("n2")
    c.slurm.undrain("n2")                      # an admin's `scontrol update state=resume`
    clock.tick(1)
    c.run("n2", [probe_ok()])
    assert read_cause(c.slurm.node_state("n2")["Comment"]) is None, c.slurm.node_state("n2")
    clock.tick(1)
    c.run("n1", [probe_hung(), stuck("n1", job, 100, killed=True)])
    clock.tick(INTERVAL)
    out = c.run("n1", [probe_hung(), stuck("n1", job, 100, killed=True)])
    assert ("requeue", "done", "") in kinds(out) and c.incidents("n1")[0].scope == mi.NODE, kinds(out)
    # A word the node stands by but that no run refreshed for two intervals: stale.
    from slurm_hooks.core.reason import cause_text
    stale = cause_text("filesystem", POINT, "x", "t", [[SOURCE, FSTYPE, POINT, "t", "hung", str(int(clock.now - 300))]])
    c.slurm.set_state("n3", flags=("DRAIN",), reason="fs hung [slurm-hooks]")
    c.slurm.set_node_comment("n3", stale)
    named = mi.witnesses({n: c.slurm.show_node(n) for n in NODES}, "n1", clock.now, 2 * INTERVAL + 15,
                         c.cfg["n1"].reason_prefix)
    assert named == {}
    # Fresh, but the node is DOWN (its slurmd gone): no word of its counts either.
    fresh = cause_text("filesystem", POINT, "x", "t", [[SOURCE, FSTYPE, POINT, "t", "hung", str(int(clock.now))]])
    c.slurm.set_node_comment("n3", fresh)
    c.slurm.set_state("n3", base="DOWN", reason="fs hung [slurm-hooks]")
    assert mi.witnesses({n: c.slurm.show_node(n) for n in NODES}, "n1", clock.now, 75,
                        c.cfg["n1"].reason_prefix) == {}


def test_a_storage_restart_every_node_finds_dead_is_remounted_never_rebooted(tmp_path, clock):
    """Dead (ENOTCONN at once) on every node: no reboot anywhere. With `recover.remount`
    set each drained node remounts; without it, none reboots either."""
    from slurm_hooks.checks.filesystem import FilesystemConfig, RecoverConfig
    c = Cluster(tmp_path, max_drained_nodes=3)
    for n in NODES:
        f = FilesystemConfig(path=f"{POINT}/probe", mountpoint=POINT)
        f.recover = RecoverConfig(remount=["/bin/true"])
        c.cfg[n].filesystems[:] = [f]
    for _ in range(3):
        results = {n: c.run(n, [probe_dead()]) for n in NODES}
        clock.tick(10)
    for n in NODES:
        [i] = c.incidents(n)
        assert (i.kind, i.scope) == (mi.DEAD, mi.RESTART), (n, i)
        assert not [r for r in results[n] if r.action.kind == "reboot" and r.outcome == Outcome.DONE], n
        # The remount was tried (nothing is mounted at /gpfs here: it says so).
        tried = [r for r in c.state[n].load("actions-done") if r.startswith(f"recover:{n}:{POINT} ")]
        assert tried, (n, c.state[n].load("actions-done"))
    line = [x for x in c.notes["n1"] if x.startswith("storage restart: ")]
    assert line and line[0].startswith(f"storage restart: {SOURCE} ({POINT}) dead on 3 nodes since "), c.notes["n1"]
    # The same on one node alone, without a remount: its fault, the reboot (after the interval).
    d = Cluster(tmp_path / "alone")
    first = d.run("n1", [probe_dead()])
    assert not [k for k in kinds(first) if k[0] == "reboot" and k[1] == "done"], kinds(first)
    clock.tick(INTERVAL)
    out = d.run("n1", [probe_dead()])
    assert ("reboot", "done", "") in kinds(out), kinds(out)
    assert d.incidents("n1")[0].scope == mi.NODE
    assert "(dead; no recover.remount set)" in d.slurm.node_state("n1")["Reason"]


def test_a_mount_the_site_marks_as_the_nodes_own_is_never_an_outage(tmp_path, clock, monkeypatch):
    """`scope: node`, matched by the mount's device: the same source hung on two nodes is
    two nodes' own faults (a per-node client under one name everywhere), known at once."""
    from slurm_hooks.act import actuation
    monkeypatch.setattr(actuation, "_incidents", _marked(actuation._incidents))
    c = Cluster(tmp_path, max_drained_nodes=3)
    job = c.slurm.add_job("n1,n2")
    for i, n in enumerate(("n1", "n2")):
        out = c.run(n, [probe_hung(), stuck(n, job, 100 + i)])
        assert c.named(n) == [] and c.incidents(n)[0].scope == mi.NODE, (n, kinds(out))
    second = c.run("n1", [probe_hung(), stuck("n1", job, 100, killed=True)])
    assert ("reboot", "done", "") in kinds(second), kinds(second)
    assert not any("outage" in n for n in c.notes["n1"])


def _marked(real):
    def incidents(cfg, run, doc, seen, now):
        from slurm_hooks.decide import mount_incident
        if run.tends_node:
            return mount_incident.advance(mount_incident.load(doc), seen, now, frozenset({"0:77"}))
        return real(cfg, run, doc, seen, now)
    return incidents


def test_an_epilog_goes_by_the_health_checks_word(tmp_path, clock):
    """An epilog reads no node list: in an outage the health check found lately it asks
    for no reboot; a mount only it sees has no known scope, and it asks for none either."""
    c = Cluster(tmp_path, max_drained_nodes=3)
    job = c.slurm.add_job("n1,n2,n3")
    for n in ("n2", "n1"):
        c.run(n, [probe_hung(), stuck(n, job, 100)])
    c.slurm.calls.clear()
    left = stuck("n1", job, 100, killed=True)
    left.job = None                       # left after its job ended: the reboot's, unless an outage
    epilog = c.run("n1", [probe_hung(), left], hook="epilog")
    held = [r for r in epilog if r.action.kind == "reboot"]
    assert held and all(r.code == Code.OUTAGE for r in held), kinds(epilog)
    assert "list_nodes_alone" not in c.slurm.calls and "reboot" not in c.slurm.calls, c.slurm.calls
    d = Cluster(tmp_path / "alone", max_drained_nodes=3)
    elsewhere = stuck("n1", job, 100, source="nfs:/x", killed=True)
    elsewhere.job = None
    other = d.run("n1", [probe_hung(source="nfs:/x"), elsewhere], hook="epilog")
    assert [r.code for r in other if r.action.kind == "reboot"] == [Code.SCOPE_UNKNOWN], kinds(other)


def test_a_killed_task_keeps_the_place_an_earlier_run_proved():
    """Killed, it waits in its exit path with no system call and its descriptors gone:
    nothing proves its place any more, yet it is the same task (pid and start time)."""
    proven = stuck("n1", "7", 4242)
    place = place_of(proven)
    assert place is not None and place["mountpoint"] == POINT
    diag = Diagnosis("stuck_tasks", default_config().stuck_tasks)
    diag.places = {"4242:100": place}
    later = Stuck(sample=TaskSample(pid=4242, tid=4242, start=100, comm="python", state="D", uid=1001),
                  tids=[4242], seconds=30, ref=JobRef(job="7"), syscall="", cause="unproven",
                  wchan="fuse_flush", stack=["fuse_flush", "filp_flush", "do_exit"])
    from types import SimpleNamespace
    f = diag.finding(SimpleNamespace(node="n1"), later)
    assert (later.cause, later.mountpoint, later.source, later.syscall) == ("shared_filesystem", POINT, SOURCE, "")
    assert any("earlier run" in h for h in later.how)
    # Still the node's stuck task of job 7 on the mount: it drains, and its drain
    # replaces Slurm's `Kill task failed`.
    assert (f.status, f.severity, f.job) == ("stuck", FAIL, "7") and "now in its exit path" in f.summary, f
    s = mi.place(f)
    assert (s.source, s.fstype, s.mountpoint, s.kind) == (SOURCE, FSTYPE, POINT, mi.HUNG)
    # Slurm moved the task it gave up killing out of the job's cgroup: the job the
    # cgroup named in the earlier run stays its job, and the finding still drains.
    moved = Stuck(sample=TaskSample(pid=4242, tid=4242, start=100, comm="python", state="D", uid=1001),
                  tids=[4242], seconds=30, ref=None, syscall="", cause="unproven", wchan="fuse_flush")
    g = diag.finding(SimpleNamespace(node="n1"), moved)
    assert (g.status, g.severity, g.job) == ("stuck", FAIL, "7") and g.reason.startswith("job 7 stuck in "), g
    # Another task that got the same pid (another start time) proves nothing.
    other = Stuck(sample=TaskSample(pid=4242, tid=4242, start=999, comm="python", state="D", uid=1001),
                  tids=[4242], seconds=30, ref=None, cause="unproven")
    diag._remembered(other)
    assert other.cause == "unproven" and not other.mountpoint
    # Only a place of the node's is kept: a user's mount never becomes one.
    theirs = stuck("n1", "7", 4243)
    theirs.evidence["cause"] = "user_mount"
    assert place_of(theirs) is None


def test_the_metrics_name_the_outage_and_a_lone_hang_is_none(tmp_path, clock):
    """The textfile's outage series come from the mount incidents: on each node of the
    outage, the mount and how many nodes it hangs on; nothing on a node whose hang is
    its own so far, nor once the storage answers."""
    from promseries import parse

    from slurm_hooks.core.model import CheckRun, RunRecord
    from slurm_hooks.sinks.metrics import render
    from slurm_hooks.sinks.record import _outages

    def series(node, findings):
        record = RunRecord(hook="healthcheck", node=node, config="-", started=time.time(),
                           checks=[CheckRun("filesystem", 0.1, findings)])
        text = render(record, {}, None, outages=_outages(record, c.state[node]))
        return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in parse(text)
                if s.name.startswith("slurm_hooks_storage_outage")}

    c = Cluster(tmp_path)
    c.run("n1", [probe_hung()])
    assert series("n1", [probe_hung()]) == {}          # named here alone: no outage
    c.run("n2", [probe_hung()])
    c.run("n1", [probe_hung()])
    where = (("fstype", FSTYPE), ("mountpoint", POINT), ("node", "n1"), ("source", SOURCE))
    got = series("n1", [probe_hung()])
    assert got[("slurm_hooks_storage_outage_nodes", where)] == 2, got
    assert abs(got[("slurm_hooks_storage_outage_since_timestamp_seconds", where)] - time.time()) < 60, got
    c.run("n1", [])
    assert series("n1", []) == {}
