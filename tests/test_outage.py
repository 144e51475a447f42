"""A node's fault or the storage's outage (decide/outage.py), decided over the in-memory
Slurm that test_fakes_contract.py holds to both real ones: three nodes, each with its
own local state, mounting the same storage.

The same mount suspect on several nodes is one outage: no reboot and no recovery for
it anywhere, the drains it caused resumable, every node back in service by itself once
the storage answers. Suspect on one node alone, it is that node's fault, handled as
before."""
from __future__ import annotations

import time

from slurm_hooks.act.actuation import take_actions
from slurm_hooks.checks._config import default_config
from slurm_hooks.checks._stuck_diagnosis import Diagnosis, Stuck, place_of
from slurm_hooks.core.model import FAIL, OK, Finding
from slurm_hooks.core.outcomes import Code, Outcome
from slurm_hooks.core.reason import read_cause
from slurm_hooks.core.state import StateStore
from slurm_hooks.decide import outage
from slurm_hooks.host.jobs import JobRef
from slurm_hooks.host.procfs import TaskSample, boot_id
from slurm_hooks.slurm.fake import FakeSlurm

NODES = ("n1", "n2", "n3")
SOURCE, FSTYPE, POINT = "gpfs:/fs1", "gpfs", "/gpfs"


def config(tmp_path, node: str, **policy):
    cfg = default_config(state_dir=str(tmp_path / node / "state"))
    cfg.policy.max_drained_nodes, cfg.policy.max_drained_fraction = 1, 0
    cfg.policy.resume_after = 2
    for k, v in policy.items():
        setattr(cfg.policy, k, v)
    return cfg


def state_of(tmp_path, node: str) -> StateStore:
    state = StateStore(str(tmp_path / node / "state" / node))
    state.save("boot", {"id": boot_id()})
    return state


def probe_hung(source=SOURCE) -> Finding:
    return Finding(check="filesystem", target=f"{POINT}/probe", status="hung", severity=FAIL,
                   summary=f"fs {POINT}/probe hung >10s (read, {FSTYPE})",
                   evidence={"mountpoint": POINT, "fstype": FSTYPE, "source": source, "network": True})


def stuck(node: str, job: str, pid: int, source=SOURCE, killed=False) -> Finding:
    return Finding(check="stuck_tasks", target=f"job {job} pid {pid}", status="stuck", severity=FAIL,
                   summary=f"job {job} pid {pid} stuck in openat() on {POINT}/ckpt.pt ({FSTYPE} {POINT})",
                   reason=f"job {job} stuck in openat() on {POINT}/ckpt.pt ({FSTYPE}), pid {pid}", job=job,
                   incident=f"{node}:{pid}:100", needs_reboot=True, hard=True, resumable=False,
                   evidence={"uid": 1001, "pid": pid, "start_ticks": 100, "cause": "shared_filesystem",
                             "mountpoint": POINT, "fstype": FSTYPE, "source": source, "network": True,
                             "mount_dev": "0:77", "sigkill_pending": killed})


class Cluster:
    def __init__(self, tmp_path, **policy):
        self.slurm = FakeSlurm(NODES, version="22.05")
        self.cfg = {n: config(tmp_path, n, **policy) for n in NODES}
        self.state = {n: state_of(tmp_path, n) for n in NODES}
        self.notes: dict[str, list[str]] = {}

    def run(self, node: str, findings: list[Finding]):
        self.notes[node] = []
        return take_actions(self.cfg[node], node, findings, False, self.state[node],
                            open_backend=self.slurm.open, notes=self.notes[node])


def kinds(results):
    return [(r.action.kind, str(r.outcome), str(r.code)) for r in results]


def test_the_same_mount_hung_on_every_node_is_one_outage_that_ends_by_itself(tmp_path):
    c = Cluster(tmp_path)
    job = c.slurm.add_job("n1,n2,n3")
    frozen = {n: [probe_hung(), stuck(n, job, 100 + i)] for i, n in enumerate(NODES)}
    # The first run of each: n1 drains (limit 1), requeues the job; the others are held
    # back by the breaker and make their suspect mount visible all the same.
    first = {n: c.run(n, frozen[n]) for n in NODES}
    assert ("drain", "done", "") in kinds(first["n1"]) and ("requeue", "done", "") in kinds(first["n1"])
    for n in ("n2", "n3"):
        assert ("drain", "held", "breaker") in kinds(first[n]), first[n]
        cause = read_cause(c.slurm.node_state(n)["Comment"])
        assert cause["mounts"][0][:3] == [SOURCE, FSTYPE, POINT], cause
        assert c.slurm.node_state(n)["State"] == "MIXED" or "DRAIN" not in c.slurm.node_state(n)["State"]
    assert read_cause(c.slurm.node_state("n1")["Comment"])["mounts"][0][:3] == [SOURCE, FSTYPE, POINT]
    # `status` names it once, from every node's Comment, held ones included.
    from slurm_hooks.views.status import collect, render
    st = collect(c.slurm, c.cfg["n1"].reason_prefix)
    [o] = st.outages
    assert o["nodes"] == list(NODES) and o["line"].startswith(f"outage of {SOURCE} ({POINT}) on 3 nodes since ")
    assert sum(o["line"] in line for line in render(st).splitlines()) == 1, render(st)
    # Killed by the requeue and still in D: on a node-local fault the reboot; here the
    # same mount hangs on three nodes: no reboot, named once as one outage.
    c.slurm.calls.clear()
    frozen["n1"][1] = stuck("n1", job, 100, killed=True)
    second = c.run("n1", frozen["n1"])
    reboots = [r for r in second if r.action.kind == "reboot"]
    assert reboots and all((r.outcome, r.code) == (Outcome.HELD, Code.OUTAGE) for r in reboots), kinds(second)
    assert "reboot" not in c.slurm.calls
    since = time.strftime("%H:%M")
    line = f"outage of {SOURCE} ({POINT}) on 3 nodes since "
    assert [n for n in c.notes["n1"] if n.startswith(line)] and since[:2] in c.notes["n1"][0], c.notes["n1"]
    assert reboots[0].message.startswith(line), reboots[0].message
    # At most one node-table read per failing run, no partition read, no update.
    assert c.slurm.calls == {"list_nodes_alone": 1}, c.slurm.calls
    assert c.state["n1"].load("drain")["resumable"] is True
    # An epilog reads no node list: it honours the health check's last finding, and asks
    # for no reboot in the outage either.
    c.slurm.calls.clear()
    epilog = take_actions(c.cfg["n1"], "n1", frozen["n1"], False, c.state["n1"], hook="epilog",
                          open_backend=c.slurm.open)
    held = [r for r in epilog if r.action.kind == "reboot"]
    assert held and all(r.code == Code.OUTAGE for r in held), kinds(epilog)
    assert "list_nodes_alone" not in c.slurm.calls and "reboot" not in c.slurm.calls, c.slurm.calls
    # Held nodes publish once, not run after run.
    c.slurm.calls.clear()
    c.run("n2", frozen["n2"])
    assert c.slurm.calls == {"list_nodes_alone": 1}, c.slurm.calls
    # The storage answers: every node is back in service after its passing runs, with
    # nothing left of ours in its Comment, and then asks Slurm nothing.
    for _ in range(2):
        for n in NODES:
            c.run(n, [])
    for n in NODES:
        info = c.slurm.node_state(n)
        assert "DRAIN" not in info["State"] and read_cause(info["Comment"]) is None, (n, info)
    c.slurm.calls.clear()
    for n in NODES:
        assert c.run(n, []) == []
    assert c.slurm.calls == {}


def test_no_recovery_of_a_mount_in_an_outage(tmp_path):
    from slurm_hooks.checks.filesystem import FilesystemConfig, RecoverConfig
    c = Cluster(tmp_path, max_drained_nodes=3)
    for n in NODES:
        fs = c.cfg[n].filesystems
        fs.clear()
        f = FilesystemConfig(path=f"{POINT}/probe", mountpoint=POINT)
        f.recover = RecoverConfig(method="fuse-abort")
        fs.append(f)
    for _ in range(3):
        results = {n: c.run(n, [probe_hung()]) for n in NODES}
    for n in NODES:
        recover = [r for r in results[n] if r.action.kind == "recover"]
        assert recover and all((r.outcome, r.code) == (Outcome.HELD, Code.OUTAGE) for r in recover), kinds(results[n])
    assert "recover" not in str(c.state["n1"].load("actions-done"))


def test_a_mount_hung_on_one_node_alone_is_its_fault_and_reboots_as_before(tmp_path):
    c = Cluster(tmp_path)
    job = c.slurm.add_job("n1,n2,n3")
    assert ("requeue", "done", "") in kinds(c.run("n1", [probe_hung(), stuck("n1", job, 100)]))
    for n in ("n2", "n3"):
        assert c.run(n, [Finding(check="filesystem", target=f"{POINT}/probe", status="ok", severity=OK,
                                 summary="ok")]) == []
    second = c.run("n1", [probe_hung(), stuck("n1", job, 100, killed=True)])
    assert ("reboot", "done", "") in kinds(second), kinds(second)
    assert not any("outage" in n for n in c.notes["n1"])
    assert c.state["n1"].load("drain")["resumable"] is False


def test_another_storage_by_the_same_mountpoint_is_not_the_same_outage(tmp_path):
    c = Cluster(tmp_path)
    job = c.slurm.add_job("n1,n2,n3")
    c.run("n1", [probe_hung(), stuck("n1", job, 100)])
    c.run("n2", [probe_hung(source="gpfs:/other"), stuck("n2", job, 101, source="gpfs:/other")])
    second = c.run("n1", [probe_hung(), stuck("n1", job, 100, killed=True)])
    assert ("reboot", "done", "") in kinds(second), kinds(second)


def test_outages_are_told_from_every_nodes_comment():
    def info(mounts):
        from slurm_hooks.core.reason import cause_text
        return {"Comment": cause_text("filesystem", POINT, "x", "t", mounts)}
    infos = {"n1": info([[SOURCE, FSTYPE, POINT, "2026-12-04T03:12:00"]]),
             "n2": info([[SOURCE, FSTYPE, "/mnt/gpfs", "2026-12-04T03:11:00"]]),
             "n3": info([["nfs:/home", "nfs4", "/home", "2026-12-04T03:00:00"]]),
             "n4": {"Comment": "an admin's words"}}
    [o] = outage.outages(infos, None)
    assert (o.source, o.nodes, o.since) == (SOURCE, ["n1", "n2"], "2026-12-04T03:11:00")
    # A user's mount, a local filesystem, a task not proven on the node's storage: never suspect.
    f = stuck("n1", "7", 5)
    f.evidence["network"] = False
    assert outage.mount_of(f) is None
    g = stuck("n1", "7", 5)
    g.evidence["cause"] = "user_mount"
    assert outage.mount_of(g) is None


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
    assert outage.mount_of(f) == (SOURCE, FSTYPE, POINT)
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


def test_the_metrics_name_the_outage_and_a_lone_hang_is_none(tmp_path):
    """The textfile's outage series come from what the run's actions found: on each node
    of the outage, the mount and how many nodes it hangs on; nothing on a node whose
    hang is its own, nor once the storage answers."""
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
    assert series("n1", [probe_hung()]) == {}          # suspect here alone: no outage
    c.run("n2", [probe_hung()])
    c.run("n1", [probe_hung()])
    where = (("fstype", FSTYPE), ("mountpoint", POINT), ("node", "n1"), ("source", SOURCE))
    got = series("n1", [probe_hung()])
    assert got[("slurm_hooks_storage_outage_nodes", where)] == 2, got
    assert abs(got[("slurm_hooks_storage_outage_since_timestamp_seconds", where)] - time.time()) < 60, got
    c.run("n1", [])
    assert series("n1", []) == {}


def test_a_mount_the_site_marks_as_the_nodes_own_is_never_an_outage(tmp_path):
    """`scope: node`: the same source hung on two nodes is two nodes' own faults (a
    per-node client under one name everywhere): each still gets its reboot."""
    from slurm_hooks.checks.filesystem import FilesystemConfig
    c = Cluster(tmp_path, max_drained_nodes=3)
    for n in NODES:
        c.cfg[n].filesystems[:] = [FilesystemConfig(path=f"{POINT}/probe", mountpoint=POINT, scope="node")]
    job = c.slurm.add_job("n1,n2")
    for i, n in enumerate(("n1", "n2")):
        c.run(n, [probe_hung(), stuck(n, job, 100 + i)])
        assert read_cause(c.slurm.node_state(n)["Comment"]).get("mounts") in (None, []), c.slurm.node_state(n)
    second = c.run("n1", [probe_hung(), stuck("n1", job, 100, killed=True)])
    assert ("reboot", "done", "") in kinds(second), kinds(second)
    assert not any("outage" in n for n in c.notes["n1"])


# --- the pieces of decide/outage.py, one promise each --------------------------------------

def fs(point=POINT, source=SOURCE, status="hung", severity=FAIL, incident=None, **ev) -> Finding:
    evidence = {"mountpoint": point, "fstype": FSTYPE, "source": source, "network": True, **ev}
    return Finding(check="filesystem", target=f"{point}/probe", status=status, severity=severity,
                   summary="x", evidence=evidence, incident=incident)


def an_outage(source=SOURCE, point=POINT) -> outage.Outage:
    return outage.Outage(source=source, fstype=FSTYPE, mountpoint=point, nodes=["n1", "n2"],
                         since="2026-12-04T03:12:00")


def test_what_a_mount_is_known_by():
    assert outage.mount_of(fs()) == (SOURCE, FSTYPE, POINT)
    # A probe that failed otherwise (an error, not a hang) names no suspect mount.
    assert outage.mount_of(fs(status="error")) is None
    assert outage.mount_of(fs(severity=OK)) is None
    bare = fs()
    del bare.evidence["fstype"], bare.evidence["mountpoint"]
    assert outage.mount_of(bare) == (SOURCE, "", "")


def test_the_suspects_a_run_names():
    ok = Finding(check="filesystem", target="/tmp", status="ok", severity=OK, summary="ok")
    other = fs(point="/mnt/gpfs")                      # the same storage by another mountpoint
    got = outage.suspects([ok, fs(), other], {}, now=0)
    assert got == [[SOURCE, FSTYPE, POINT, "1970-01-01T00:00:00"]], got
    # The first sighting an earlier run kept stays the mount's.
    kept = outage.suspects([fs()], {f"{SOURCE} {FSTYPE}": "2026-12-04T03:00:00"}, now=0)
    assert kept == [[SOURCE, FSTYPE, POINT, "2026-12-04T03:00:00"]]
    # Marked as the node's own storage (`scope: node`): never a suspect of an outage.
    assert outage.suspects([fs()], {}, now=0, node_points=frozenset({POINT})) == []
    assert outage.suspects([fs()], {}, now=0, node_points=frozenset({"/gpfs2"})) != []


def test_a_nodes_published_mounts_are_read_as_written():
    import json

    from slurm_hooks.core.reason import CAUSE_TAG
    # As another node's Comment may say it (another release, a hand edit): only lists of
    # three or four fields are mounts.
    mounts = [[SOURCE, FSTYPE, POINT, "2026-12-04T03:12:00", "extra"], ["nfs:/home", "nfs4", "/home"],
              "abc", ["too", "short"]]
    doc = {"check": "filesystem", "where": POINT, "incident": "x", "since": "t", "mounts": mounts}
    info = {"Comment": f"{CAUSE_TAG} {json.dumps(doc, separators=(',', ':'))}"}
    assert outage.published(info) == [[SOURCE, FSTYPE, POINT, "2026-12-04T03:12:00"], ["nfs:/home", "nfs4", "/home"]]
    assert outage.published({}) == [] and outage.published({"Comment": "an admin's words"}) == []


def test_an_outage_is_dated_by_its_earliest_witness_and_names_only_this_nodes_mounts():
    from slurm_hooks.core.reason import cause_text

    def info(*mounts):
        return {"Comment": cause_text("filesystem", POINT, "x", "t", list(mounts))}
    # n3's word carries no date: the outage keeps n2's.
    infos = {"n2": info([SOURCE, FSTYPE, POINT, "2026-12-04T03:11:00"]), "n3": info([SOURCE, FSTYPE, POINT]),
             "n4": info(["nfs:/home", "nfs4", "/home", "2026-12-04T01:00:00"]),
             "n5": info(["nfs:/home", "nfs4", "/home", "2026-12-04T01:00:00"])}
    [o] = outage.outages(infos, "n1", [[SOURCE, FSTYPE, POINT, "2026-12-04T03:12:00"]])
    assert (o.nodes, o.since) == (["n1", "n2", "n3"], "2026-12-04T03:11:00"), o
    # Witnesses that give no date leave the outage undated.
    [o] = outage.outages({"n2": info([SOURCE, FSTYPE, POINT]), "n3": info([SOURCE, FSTYPE, POINT])}, None)
    assert o.since == "" and o.line().endswith(" since ?"), o
    # The others' outage of /home is not this node's to name.
    assert [x.source for x in outage.outages(infos, None)] == ["gpfs:/fs1", "nfs:/home"]


def test_the_outage_line_names_the_time_of_day(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        assert outage.hhmm("2026-12-04T03:12:00") == "03:12" and outage.hhmm("2026-12-04T17:47:00") == "17:47"
        assert an_outage().line() == f"outage of {SOURCE} ({POINT}) on 2 nodes since 03:12"
        assert outage.hhmm("") == "?" and outage.hhmm("garbled") == "garbled"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_what_the_record_keeps_for_a_hook_that_reads_no_node_list(monkeypatch):
    before = {"mounts": [], "outages": [{"source": SOURCE}], "at": 5.0}
    assert outage.cache([], before, fresh=False) == {"outages": [{"source": SOURCE}], "at": 5.0}
    assert outage.cache([], {}, fresh=False) == {}
    mine = [[SOURCE, FSTYPE, POINT, "x"]]
    monkeypatch.setattr(outage.time, "time", lambda: 1000.0)
    record = {"outages": ["junk", {"source": SOURCE, "fstype": FSTYPE, "nodes": ["n1", "n2"]},
                          {"source": "nfs:/home", "fstype": "nfs4"}], "at": 400.0}
    [o] = outage.cached(record, mine, 600)           # exactly max_age old: still fresh
    assert (o.source, o.fstype, o.mountpoint, o.nodes, o.since) == (SOURCE, FSTYPE, "", ["n1", "n2"], "")
    assert outage.cached(record, mine, 599) == []
    # A record with no time is as old as can be.
    assert outage.cached({"outages": record["outages"]}, mine, 999.5) == []


def test_what_an_outage_spares_and_what_it_does_not():
    from slurm_hooks.core.model import Action, Recovery
    found = [an_outage()]
    here = fs(incident="n1:1:1")
    also = fs(incident="n1:2:2")
    own = fs(point="/local", source="nfs:/local", incident="n1:3:3")
    drain = Action("drain", node="n1", reason="r")
    both = Action("reboot", node="n1", reason="r", incident="n1:1:1+n1:2:2")
    mixed = Action("reboot", node="n1", reason="r", incident="n1:1:1+n1:3:3")
    unknown = Action("reboot", node="n1", reason="r", incident="n1:9:9")
    kept, dropped = outage.spared([drain, both, mixed, unknown], [here, also, own], found)
    assert kept == [drain, mixed, unknown], kept
    [(a, why)] = dropped
    assert a is both and why == (f"{found[0].line()}: no reboot of n1 for it (its tasks end when the storage "
                                 "answers)"), why
    # A recovery named by its mountpoint alone: the mount found at that point decides.
    rec = Action("recover", node="n1", incident="n1:8:8", recovery=Recovery(mountpoint=POINT))
    kept, dropped = outage.spared([rec], [own, here], found)
    assert kept == [] and dropped[0][1].startswith(f"{found[0].line()}: no recovery of n1 for it"), dropped
    # Its incident's own place comes first; at a point with two storages, the first found.
    elsewhere = Action("recover", node="n1", incident="n1:3:3", recovery=Recovery(mountpoint=POINT))
    assert outage.spared([elsewhere], [own, here], found)[0] == [elsewhere]
    two = [fs(source="nfs:/other", incident="n1:4:4"), here]
    assert outage.spared([rec], two, found)[0] == [rec]
    assert outage.spared([rec], two[::-1], found)[0] == []


def test_a_drain_is_the_storages_only_when_every_failure_is_in_the_outage():
    found = [an_outage()]
    assert outage.covers([fs()], found)
    assert not outage.covers([fs(), fs(point="/local", source="nfs:/local")], found)
    assert not outage.covers([fs(source="nfs:/local")], found)
    assert not outage.covers([], found)
    gpu = Finding(check="gpu", target="0", status="lost", severity=FAIL, summary="x")
    assert not outage.covers([fs(), gpu], found)


def test_the_nodes_own_storage_is_the_mount_that_holds_its_path(tmp_path):
    """`scope: node` names a path; the mount it marks is the one that holds that path in
    the mount table, the innermost one: a node-local mount below a shared one marks the
    node-local one alone."""
    from mounts_fixtures import require_mount_privileges, start_tmpfs

    from slurm_hooks.act.actuation import _node_points
    from slurm_hooks.checks.filesystem import FilesystemConfig
    require_mount_privileges()
    outer = start_tmpfs(tmp_path / "shared", files={"local/": None})
    try:
        inner = start_tmpfs(tmp_path / "shared" / "local", files={"probe/": None})
        try:
            cfg = default_config()
            cfg.filesystems[:] = [FilesystemConfig(path=f"{inner.path}/probe", scope="node"),
                                  FilesystemConfig(path=f"{outer.path}/x")]
            assert _node_points(cfg) == frozenset({str(inner.path)})
            cfg.filesystems[:] = [FilesystemConfig(path="/anywhere/probe", mountpoint="/gpfs/", scope="node")]
            assert _node_points(cfg) == frozenset({"/gpfs"})
            cfg.filesystems[:] = [FilesystemConfig(path=f"{outer.path}/x")]
            assert _node_points(cfg) == frozenset()
        finally:
            inner.close()
    finally:
        outer.close()
