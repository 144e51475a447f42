"""A mount's incident, from its first sighting to the storage answering again.

A hang belongs to a mount, not a task. This module keeps one record per network mount
in trouble (state `mount-incidents`, written by the health check alone) and is the one
place that says what the node does about it, in the order jobs -> mount -> node:

  sighted   this run's word (`sightings`): a probe of the mount hung, a probe failed at
            once with ENOTCONN, ESTALE or EIO (its client died: `dead`), or a task is
            proven stuck there (the kernel's ids: host/waits.py). A mount is known by
            its source and fstype (`gpfs:/fs1`, `gpfs`), never by where it is mounted.
  scope     whose fault (`judge`): `unknown` on the first sight; `outage` when another
            node names the same mount (the storage is down for everybody), `restart`
            when it is dead there too (a storage restart killed every client), `node`
            once one health-check interval passed with no other node naming it, or
            at once where the site marks it the node's own (`scope: node`, by its
            device number). Each node names its live incidents of unknown, outage and
            restart scope in its node Comment (`entries`), refreshed by its failing
            runs; another node counts them only while they are fresh and that node is
            drained by us or held back by the breaker for it (`witnesses`).
  acts      (`govern`) a drain comes at once: it is resumable. Nothing irreversible
            (requeue, recovery, reboot) before the scope is known. In an outage no
            reboot and no recovery; the jobs wait it out (their AdminComment says so)
            unless they wait longer than `outage.requeue_after`; a reboot asked for
            before the outage was known is withdrawn (`cancel_reboot`, ours only,
            never once issued). A dead mount is remounted where `recover.remount` is
            set (no job has to end first: its files there are dead already); on this
            node alone without a remount, the reboot. The node's own fault: jobs
            requeued, then the mount's recovery (`recoveries`), then the reboot.
  answered  the mount passes again: the jobs that waited out an outage are told how
            long (`told`), and the record ends.

Every step this node took is kept on the incident (`steps`), so `explain` tells a
mount's whole story from one record.
"""
from __future__ import annotations

import time

from ..checks import has_role
from ..core.model import FAIL, MOUNT_PROBE, STUCK_TASK, Action, Finding
from ..core.reason import one_line, read_cause, with_note
from ..core.records import asdict, dataclass, field, fields

SINCE_FORMAT = "%Y-%m-%dT%H:%M:%S"
# A probe that fails at once with one of these has no client behind it: the FUSE daemon
# died with its server (ENOTCONN), an NFS handle went stale with the server's restart.
DEAD_ERRNOS = ("ENOTCONN", "ESTALE", "EIO")
HUNG, DEAD = "hung", "dead"
UNKNOWN, NODE, OUTAGE, RESTART = "unknown", "node", "outage", "restart"
# Scopes in which this node is a witness of the storage's trouble, and names the mount.
SHARED = (UNKNOWN, OUTAGE, RESTART)
STEPS_KEPT = 16
ANSWERED_KEPT = 3600.0       # an answered incident stays this long for `explain`
# How far another node's clock (its `seen`) may be ahead of ours.
CLOCK_SLACK = 5.0


@dataclass
class Sighting:
    """This run's word on a mount (from one failing finding)."""
    source: str
    fstype: str
    mountpoint: str
    dev: str = ""
    kind: str = HUNG
    job: str | None = None
    uid: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.source, self.fstype)


@dataclass
class Witness:
    """Another node's published word on a mount, as its Comment holds it."""
    node: str
    source: str
    fstype: str
    mountpoint: str
    since: str = ""
    kind: str = HUNG
    seen: float = 0.0

    @property
    def key(self) -> tuple[str, str]:
        return (self.source, self.fstype)


@dataclass
class Incident:
    source: str
    fstype: str
    mountpoint: str
    dev: str = ""
    kind: str = HUNG
    since: str = ""               # first sighting here (UTC, SINCE_FORMAT): what others compare
    first: float = 0.0            # the same, as an epoch
    seen: float = 0.0             # the last sighting
    runs: int = 0                 # consecutive runs it was sighted
    scope: str = UNKNOWN
    marked: bool = False          # the site's `scope: node`
    alone_since: float = 0.0      # since when no other node named it (0: the cluster not read yet)
    nodes: list = field(default_factory=list)        # the other nodes naming it, last read
    outage_since: str = ""        # the earliest sighting among them all
    dead_seen: list = field(default_factory=list)    # nodes ever seen dead with it (a restart)
    jobs: dict = field(default_factory=dict)         # job -> [first seen waiting, uid]
    reboot: float = 0.0           # when a reboot of ours was asked for it (0: none)
    withdrawn: float = 0.0        # when that reboot was withdrawn
    answered: float = 0.0         # when it passed again (0: live)
    steps: list = field(default_factory=list)        # [[epoch, what]] this node did or decided

    @property
    def key(self) -> tuple[str, str]:
        return (self.source, self.fstype)

    def step(self, now: float, what: str, once: bool = False) -> None:
        """Add a step to the story; `once`: not when it is told already (what is held
        run after run is one step)."""
        what = one_line(what)[:200]
        if self.steps and self.steps[-1][1] == what or once and any(w == what for _, w in self.steps):
            return
        self.steps = (self.steps + [[now, what]])[-STEPS_KEPT:]

    def line(self) -> str:
        """How notes, `status` and `explain` name it: once per storage."""
        when = hhmm(self.outage_since or self.since)
        others = len(self.nodes)
        if self.scope == RESTART:
            dead = sorted(set(self.dead_seen) - set(self.nodes))
            return (f"storage restart: {self.source} ({self.mountpoint}) dead on {others + 1 + len(dead)} nodes "
                    f"since {when}, {len(dead)} remounted")
        if self.scope == OUTAGE:
            return f"outage of {self.source} ({self.mountpoint}) on {others + 1} nodes since {when}"
        if self.scope == NODE:
            return f"{self.kind} {self.source} ({self.mountpoint}) on this node alone since {hhmm(self.since)}"
        return f"{self.kind} {self.source} ({self.mountpoint}) since {hhmm(self.since)}: scope not known yet"


def hhmm(since: str) -> str:
    t = epoch(since)
    return time.strftime("%H:%M", time.localtime(t)) if t is not None else (since or "?")


def epoch(since: str) -> float | None:
    import calendar
    try:
        return float(calendar.timegm(time.strptime(since, SINCE_FORMAT)))
    except ValueError:
        return None


def utc(t: float) -> str:
    return time.strftime(SINCE_FORMAT, time.gmtime(t))


# --- sighted -------------------------------------------------------------------------
def place(f: Finding) -> Sighting | None:
    """The network mount a finding is about and how it is in trouble; None for a finding
    about anything else. The caller judges its severity (the raw one: a failure
    hysteresis holds back is a sighting all the same)."""
    ev = f.evidence
    if not ev.get("network") or not ev.get("source"):
        return None
    if has_role(f.check, MOUNT_PROBE) and f.status == "hung":
        kind = HUNG
    elif has_role(f.check, MOUNT_PROBE) and f.status == "error" and ev.get("errno") in DEAD_ERRNOS:
        kind = DEAD
    elif has_role(f.check, STUCK_TASK) and f.status == "stuck" and ev.get("cause") == "shared_filesystem":
        kind = HUNG
    else:
        return None
    uid = ev.get("uid")
    return Sighting(source=str(ev["source"]), fstype=str(ev.get("fstype") or ""),
                    mountpoint=str(ev.get("mountpoint") or ""), dev=str(ev.get("dev") or ev.get("mount_dev") or ""),
                    kind=kind, job=f.job, uid=uid if isinstance(uid, int) else None)


def sightings(findings: list[Finding]) -> list[Sighting]:
    """This run's failing findings about network mounts (before hysteresis)."""
    return [s for s in (place(f) for f in findings if f.severity == FAIL) if s is not None]


def advance(before: list[Incident], seen: list[Sighting], now: float,
            node_devs: frozenset[str] = frozenset()) -> tuple[list[Incident], list[Incident]]:
    """(the live incidents after this run's sightings, those answered in this run).
    `node_devs`: the devices of the mounts the site marks as this node's own."""
    old = {i.key: i for i in before if not i.answered}
    live: dict[tuple[str, str], Incident] = {}
    for s in seen:
        i = live.get(s.key) or old.get(s.key)
        if i is None:
            i = Incident(source=s.source, fstype=s.fstype, mountpoint=s.mountpoint, dev=s.dev, kind=s.kind,
                         since=utc(now), first=now)
            i.step(now, f"sighted: {s.kind}")
        if s.key not in live:
            i.runs, i.seen = i.runs + 1, now
            if i.kind != s.kind:
                i.step(now, f"now {s.kind}")
            i.kind = s.kind
            live[s.key] = i
        elif s.kind == HUNG:
            i.kind = HUNG         # a hang anywhere on it outweighs a dead probe
        i.dev = i.dev or s.dev
        i.mountpoint = i.mountpoint or s.mountpoint
        i.marked = i.marked or bool(s.dev and s.dev in node_devs)
        if s.job and s.job not in i.jobs:
            i.jobs[s.job] = [now, s.uid]
    answered = [i for k, i in old.items() if k not in live]
    for i in answered:
        i.answered = now
        i.step(now, "answered")
    return list(live.values()), answered


# --- scope -----------------------------------------------------------------------------
def published(info: dict) -> list[Witness]:
    """What a node's Comment names, as read from its `scontrol show node` fields."""
    from ..slurm.api import CAUSE_FIELD
    cause = read_cause(info.get(CAUSE_FIELD, "")) or {}
    out = []
    for m in cause.get("mounts") or []:
        if not isinstance(m, list) or len(m) < 3:
            continue
        m = [str(x) for x in m]
        try:
            seen = float(m[5]) if len(m) > 5 else 0.0
        except ValueError:
            seen = 0.0
        out.append(Witness(node=str(info.get("NodeName", "")), source=m[0], fstype=m[1], mountpoint=m[2],
                           since=m[3] if len(m) > 3 else "", kind=m[4] if len(m) > 4 and m[4] == DEAD else HUNG,
                           seen=seen))
    return out


def stands(info: dict, prefix: str) -> bool:
    """Does the node stand by what its Comment names? Drained by us, or held back by the
    breaker (not drained, no state of anybody else's, its cause saying `held`). A node
    an admin resumed, one DOWN or waiting for a reboot, one drained by someone else
    does not: its Comment is an old word."""
    from ..core.reason import KILL_TASK_FAILED, is_generic, is_ours
    from ..slurm.api import CAUSE_FIELD, foreign_states, node_is_drained, reason_is_current
    if node_is_drained(info):
        # Slurm's own `Kill task failed` over ours (a task the storage holds): still ours.
        reason = info.get("Reason", "")
        return not foreign_states(info) and reason_is_current(info) and \
            (is_ours(reason, prefix) or is_generic(reason, KILL_TASK_FAILED))
    cause = read_cause(info.get(CAUSE_FIELD, "")) or {}
    return not foreign_states(info) and cause.get("held") is True


def witnesses(infos: dict, node: str | None, now: float, fresh_for: float, prefix: str) -> dict:
    """(source, fstype) -> the other nodes' fresh words on it, from the node table
    (`infos`: node -> `scontrol show node` fields, as the breaker read them). A word is
    fresh while its `seen` is at most `fresh_for` old; a node's words count only while
    it stands by them (`stands`)."""
    from ..slurm.api import strip_reason_stamp
    out: dict[tuple[str, str], list[Witness]] = {}
    for n in sorted(infos):
        info = infos[n]
        if n == node:
            continue
        words = published(info)
        if not words or not stands(dict(info, Reason=strip_reason_stamp(info.get("Reason", ""))), prefix):
            continue
        for w in words:
            if -CLOCK_SLACK <= now - w.seen <= fresh_for:
                out.setdefault(w.key, []).append(w)
    return out


def across(infos: dict, prefix: str, now: float, fresh_for: float) -> list[dict]:
    """Every mount at least two nodes name, freshly and standing by it (what `status`
    shows, from the node table alone): one storage's outage, or its restart where every
    one of them finds it dead."""
    out = []
    for key, ws in sorted(witnesses(infos, None, now, fresh_for, prefix).items()):
        nodes = sorted({w.node for w in ws})
        if len(nodes) < 2:
            continue
        since = min((w.since for w in ws if w.since), default="")
        dead = all(w.kind == DEAD for w in ws)
        what = (f"storage restart: {key[0]} ({ws[0].mountpoint}) dead on {len(nodes)} nodes since {hhmm(since)}"
                if dead else f"outage of {key[0]} ({ws[0].mountpoint}) on {len(nodes)} nodes since {hhmm(since)}")
        out.append({"source": key[0], "fstype": key[1], "mountpoint": ws[0].mountpoint, "nodes": nodes,
                    "since": since, "scope": RESTART if dead else OUTAGE, "line": what})
    return out


def judge(incidents: list[Incident], named: dict | None, now: float, wait: float) -> None:
    """Each live incident's scope, from the other nodes' words (`named`, from
    `witnesses`; None: no word from the cluster this run, the scope stays as it was)
    and how long this node has been alone with it (`wait`: one health-check interval)."""
    for i in incidents:
        if named is not None and not i.alone_since:
            # The wait starts with the first word from the cluster: while slurmctld did
            # not answer, no other node could name the mount either.
            i.alone_since = now
        if i.marked:
            new = NODE
        elif named is None:
            continue
        elif named.get(i.key):
            ws = named[i.key]
            i.nodes = sorted({w.node for w in ws})
            i.alone_since = now
            i.outage_since = min([i.since] + [w.since for w in ws if w.since])
            dead = [w.node for w in ws if w.kind == DEAD]
            i.dead_seen = sorted(set(i.dead_seen) | set(dead))
            new = RESTART if i.kind == DEAD and len(dead) == len(ws) else OUTAGE
        else:
            i.nodes = []
            new = NODE if now - i.alone_since >= wait else i.scope
        if new != i.scope:
            i.scope = new
            i.step(now, f"scope: {i.line()}")


def entries(incidents: list[Incident], now: float) -> list[list[str]]:
    """What this node names in its Comment: its live incidents the storage may share
    (unknown, outage, restart scope; never the site's node-own mounts), each with its
    first sighting, its kind and when this was said."""
    out = [[i.source, i.fstype, i.mountpoint, i.since, i.kind, str(int(now))] for i in incidents
           if i.scope in SHARED and not i.marked]
    return sorted(out)


def needs_refresh(current: list[Witness], wanted: list[list[str]], now: float, refresh: float) -> bool:
    """Must the node's Comment be written again: another set of mounts (or kinds), or
    what it says is older than `refresh`?"""
    have = sorted([w.source, w.fstype, w.mountpoint, w.kind] for w in current)
    if have != sorted([e[0], e[1], e[2], e[4]] for e in wanted):
        return True
    return bool(wanted) and any(now - w.seen >= refresh for w in current)


# --- acts ----------------------------------------------------------------------------
def _by_finding(findings: list[Finding]) -> dict[str, Sighting]:
    out = {}
    for f in findings:
        s = place(f)
        if s is not None:
            out[f.incident or f.target] = s
    return out


def govern(actions: list[Action], findings: list[Finding], incidents: list[Incident], node: str, prefix: str,
           requeue_after: float, now: float) -> tuple[list[Action], list[tuple[Action, str, str]]]:
    """(the actions that go ahead, [(action, why, code)] held: outcomes.Code's values):
    what the scope allows. Adds what the incidents ask for themselves (a job's wait
    told, a reboot withdrawn)."""
    by_key = {i.key: i for i in incidents}
    where = _by_finding(findings)

    def incidents_of(a: Action) -> list:
        return [by_key.get(where[i].key) if i in where else None for i in (a.incident or "").split("+")]

    kept: list[Action] = []
    held: list[tuple[Action, str, str]] = []
    told: set[str] = set()
    for a in actions:
        if a.kind in ("drain", "resume", "start") or a.job_only:
            kept.append(a)
            continue
        if a.kind == "recover" and a.recovery is not None and a.recovery.dead:
            kept.append(a)        # a dead mount: its remount touches no process, whatever the scope
            continue
        places = incidents_of(a)
        if a.kind == "recover" and a.recovery is not None and not any(places):
            r = a.recovery
            places = [x for x in incidents if x.mountpoint == r.mountpoint or (x.dev and x.dev == r.dev)][:1] or places
        known = [i for i in places if i is not None]
        if not known or (a.kind in ("reboot", "recover", "release") and len(known) < len(places)):
            kept.append(a)        # about no mount in trouble (or a reboot for a node-local cause too)
            continue
        if any(i.scope == UNKNOWN for i in known):
            first = next(i for i in known if i.scope == UNKNOWN)
            held.append((a, f"{first.line()}: no {_noun(a)} before the scope is known (another node naming "
                            f"{first.source}, or {_left(first, now)} alone with it)", "scope_unknown"))
            continue
        shared = [i for i in known if i.scope in (OUTAGE, RESTART)]
        if a.kind in ("reboot", "recover", "release") and len(shared) == len(known):
            held.append((a, f"{shared[0].line()}: no {_noun(a)} of {node} for it (its tasks go on when the "
                            "storage answers)", "outage"))
            continue
        if a.kind in ("requeue", "cancel", "comment") and shared and a.job:
            i = shared[0]
            waited = now - float((i.jobs.get(a.job) or [now])[0])
            if a.kind == "comment":
                if a.job not in told:
                    told.add(a.job)
                    kept.append(Action("comment", node=node, job=a.job, uid=a.uid, incident=f"waits:{i.source}",
                                       text=f"{prefix} waiting on the {_storage(i)} since {hhmm(i.outage_since)}"))
                held.append((a, f"{i.line()}: the job waits it out (its AdminComment says so)", "waits_out"))
            elif requeue_after and waited >= requeue_after:
                a.text = one_line(f"{a.text}; requeued after waiting {waited / 60:.0f} min on the {_storage(i)}")
                kept.append(a)
            else:
                limit = (f"requeued only after {requeue_after / 60:g} min (outage.requeue_after)" if requeue_after
                         else "never requeued for it (outage.requeue_after: 0)")
                held.append((a, f"{i.line()}: the job waits it out, {limit}", "waits_out"))
            continue
        kept.append(a)
    # First of all: a drain that re-words the node's reason waits for no pending reboot.
    withdraw = [Action("cancel_reboot", node=node, incident=f"withdraw:{i.source}",
                       reason=f"{i.line()}: the reboot asked for before it was known is withdrawn")
                for i in incidents if i.scope in (OUTAGE, RESTART) and i.reboot and not i.withdrawn]
    return withdraw + kept, held


def _noun(a: Action) -> str:
    return {"reboot": "reboot", "recover": "recovery", "requeue": "requeue", "cancel": "cancel",
            "comment": "record on the job", "release": "DOWN"}.get(a.kind, a.kind)


def _left(i: Incident, now: float) -> str:
    if not i.alone_since:
        return "an interval, from the first word from the cluster,"
    return f"{max(0.0, now - i.alone_since):.0f}s of the interval"


def _storage(i: Incident) -> str:
    """The storage's trouble as a job's AdminComment names it: one clean line (a mount's
    source and point are the site's, but a job's record is no place for a control
    character either)."""
    what = "restart" if i.scope == RESTART else "outage"
    return one_line(f"{what} of {i.source} ({i.mountpoint})")


def told(answered: list[Incident], node: str, prefix: str, now: float) -> list[Action]:
    """The jobs that waited out an outage, told for how long, once each."""
    out = []
    for i in answered:
        if i.scope not in (OUTAGE, RESTART):
            continue
        for job, (first, uid) in sorted(i.jobs.items()):
            start = min(first, epoch(i.outage_since) or first)
            out.append(Action("comment", node=node, job=job, uid=uid if isinstance(uid, int) else None,
                              ran_here=True, incident=f"waited:{i.source}:{int(start)}",
                              text=f"{prefix} waited on the {_storage(i)} "
                                   f"{time.strftime('%H:%M', time.localtime(start))}-"
                                   f"{time.strftime('%H:%M', time.localtime(now))}"))
    return out


def record(incidents: list[Incident], results, findings: list[Finding], now: float) -> None:
    """Each incident's steps: what was done (or held) about it in this run."""
    from ..core.outcomes import Outcome
    by_key = {i.key: i for i in incidents}
    where = _by_finding(findings)
    for r in results:
        a = r.action
        if r.outcome == Outcome.SKIPPED and a.kind != "cancel_reboot":
            continue                         # nothing happened (done before, not needed)
        for i in _about(a, incidents, by_key, where, r.outcome == Outcome.DONE):
            if a.kind == "reboot" and r.outcome == Outcome.DONE:
                i.reboot = now
            if a.kind == "cancel_reboot":
                i.withdrawn = now            # withdrawn, or nothing left to withdraw
            what = f"{a.kind}{' job ' + a.job if a.job else ''} {r.outcome}" + (f" ({r.code})" if r.code else "")
            if r.outcome in (Outcome.DONE, Outcome.FAILED) and r.message:
                what += f": {r.message}"
            i.step(now, what, once=r.outcome == Outcome.HELD)


def _about(a: Action, incidents: list[Incident], by_key: dict, where: dict, done: bool) -> list[Incident]:
    """The incidents an action is about: its findings' mounts; a drain that went through
    is about every live one; what the incidents asked for themselves names theirs."""
    found = [by_key[where[x].key] for x in (a.incident or "").split("+") if x in where and where[x].key in by_key]
    for i in incidents:
        if a.kind == "drain" and done or a.incident in (f"withdraw:{i.source}", f"waits:{i.source}") or \
                (a.incident or "").startswith(f"waited:{i.source}:") or \
                (a.recovery is not None and (a.recovery.mountpoint == i.mountpoint or a.recovery.dev == i.dev)):
            found.append(i)
    return list({id(i): i for i in found}.values())


def resumable(findings: list[Finding], incidents: list[Incident]) -> bool:
    """May the node's drain be lifted by passing runs? Yes where every failing finding
    allows it by itself, or is about a mount whose trouble is not (known to be) this
    node's: the storage answers for everybody, or the hang was too short to tell."""
    by_key = {i.key: i for i in incidents}
    failing = [f for f in findings if f.severity == FAIL]
    ok = []
    for f in failing:
        s = place(f)
        i = by_key.get(s.key) if s is not None else None
        ok.append(f.resumable or (i is not None and i.scope in SHARED))
    return bool(failing) and all(ok)


def notes(incidents: list[Incident]) -> list[str]:
    """One line per storage the cluster shares trouble with."""
    return [i.line() for i in incidents if i.scope in (OUTAGE, RESTART)]


def drain_words(incidents: list[Incident]) -> str:
    """What the node reason says first when the storage is down for everybody."""
    shared = [i for i in incidents if i.scope in (OUTAGE, RESTART)]
    if not shared:
        return ""
    i = shared[0]
    return f"storage {'restart' if i.scope == RESTART else 'outage'} {i.source} ({i.mountpoint})"


# --- the record in state ---------------------------------------------------------------
_NAMES = frozenset(f.name for f in fields(Incident))


def load(doc: dict) -> list[Incident]:
    out = []
    for d in doc.get("incidents") or []:
        if not isinstance(d, dict):
            continue
        try:
            out.append(Incident(**{k: v for k, v in d.items() if k in _NAMES}))
        except TypeError:
            continue
    return out


def dump(live: list[Incident], now: float) -> dict:
    """What the state keeps of the live incidents."""
    return {"incidents": [asdict(i) for i in live], "at": now}


def past(answered: list[Incident], before: list[Incident], now: float) -> list[Incident]:
    """The answered incidents of the last hour, for `explain` (kept apart from the live
    ones: a healthy run reads none of them)."""
    old = [i for i in before if now - i.answered < ANSWERED_KEPT
           and all(i.key != a.key or i.answered != a.answered for a in answered)]
    return answered + old


def fresh(doc: dict, max_age: float, now: float) -> list[Incident]:
    """The live incidents a health check kept lately: what a prolog or an epilog, which
    read no node list, go by."""
    if now - float(doc.get("at") or 0) > max_age:
        return []
    return [i for i in load(doc) if not i.answered]


# --- the mount's recovery: after the jobs, before the node -----------------------------
def recoveries(actions: list[Action], findings: list[Finding], incidents: list[Incident], ledger: dict,
               recoverable: dict, counts: dict, drained: bool) -> list[Action]:
    """Put a recovery in place of a reboot where the kernel allows another way out.

    `recoverable`: mountpoint -> Recovery (without tasks) for every configured mount
    with `recover` on, as mounted now in the host's table (its `dev`, from one reading).
    A reboot asked for tasks stuck on one such mount becomes a `recover` of it, once
    per incident (one that waits for a job nothing could end too: the recovery waits
    for that job, act/actuation.py asks Slurm); once tried, the reboot goes ahead,
    saying so. The mount is the one whose device is the proven one (the findings'
    `mount_dev`), never the one at the path the task's own namespace shows: a task can
    bind the node's /home at /scratch in a namespace of its own. A mount whose probe
    hung on consecutive runs of a node we drained is recovered too, and a mount dead on
    consecutive runs is remounted (`recover.remount`; without it, or when the remount
    did not bring it back, the reboot: `govern` holds it where the storage restarted
    for everybody). Never a user's mount (their findings do not fail), never where we
    did not drain (the drain-storm breaker bounds recoveries as it bounds drains).
    """
    from ..core.model import Recovery
    if not drained:
        return actions
    by_dev: dict[str, str] = {}
    for p, r in recoverable.items():
        if r.dev and r.method != "none":
            by_dev.setdefault(r.dev, p)
    out: list[Action] = []
    for a in actions:
        if a.kind != "reboot":
            out.append(a)
            continue
        ids = (a.incident or "").split("+")
        stuck = [f for f in findings if f.needs_reboot and (f.incident or f.target) in ids]
        devs = {str(f.evidence.get("mount_dev") or "") for f in stuck}
        if len(devs) != 1 or next(iter(devs)) not in by_dev:
            out.append(a)            # several places, or one without recovery: the reboot
            continue
        point = by_dev[next(iter(devs))]
        tried = [ledger[k] for k in (f"recover:{a.node}:{i}" for i in ids) if k in ledger]
        if tried:
            how = recoverable[point].method
            out.append(Action("reboot", node=a.node, reason=_tried(a.reason, how, point),
                              incident=a.incident, after_job=a.after_job))
            continue
        base = recoverable[point]
        tasks = [[int(f.evidence["pid"]), int(f.evidence.get("start_ticks") or 0)] for f in stuck
                 if isinstance(f.evidence.get("pid"), int)]
        jobs = sorted({f.job for f in stuck if f.job})
        out.append(Action("recover", node=a.node, reason=a.reason, incident=a.incident,
                          recovery=Recovery(**{**asdict(base), "tasks": tasks, "jobs": jobs,
                                               "unplaced": unplaced(findings, base.dev, jobs)})))
    node = next((a.node for a in actions if a.node), "")
    by_key = {i.key: i for i in incidents}
    for f in findings:
        if f.severity != FAIL or not has_role(f.check, MOUNT_PROBE):
            continue
        point = next((p for p, r in recoverable.items() if r.probe == f.target), "")
        s = place(f)
        if s is not None and s.kind == DEAD:
            _dead(out, f, recoverable.get(point), by_key.get(s.key), ledger, counts, node)
            continue
        if not point or recoverable[point].method == "none":
            continue
        before = ledger.get(f"recover:{node}:{point}")
        if isinstance(before, dict) and not before.get("recovered"):
            # Recovery was tried and the mount did not come back healthy: the reboot.
            if not any(x.kind in ("reboot", "recover") for x in out):
                drain = next((x for x in out if x.kind == "drain"), None)
                reason = drain.reason if drain is not None else f.reason_text
                out.append(Action("reboot", node=node, reason=_tried(reason, recoverable[point].method, point),
                                  incident=point))
            continue
        if (f.status in ("hung", "still_hung") and int(counts.get(f"{f.check}:{f.target}", 0)) >= 2
                and before is None and not any(x.kind == "recover" for x in out)):
            dev = recoverable[point].dev
            on_it = [g for g in findings if g.severity == FAIL and dev and g.evidence.get("mount_dev") == dev
                     and isinstance(g.evidence.get("pid"), int) and has_role(g.check, STUCK_TASK)]
            jobs = sorted({g.job for g in on_it if g.job})
            out.append(Action("recover", node=node, reason=f.reason_text, incident=point,
                              recovery=Recovery(**{**asdict(recoverable[point]),
                                                   "tasks": [[g.evidence["pid"], int(g.evidence.get("start_ticks") or 0)]
                                                             for g in on_it],
                                                   "jobs": jobs, "unplaced": unplaced(findings, dev, jobs)})))
    return out


def unplaced(findings: list[Finding], dev: str, placed: list) -> list[str]:
    """The jobs besides `placed` with a task the stuck-task check saw waiting but did not
    place on a mount this run (no device proven: a look that timed out under load, a
    task still within its grace, one left for a later run): any of them may wait on the
    mount of device `dev`, and aborting it would fail the job's calls. A task placed on
    another device does not count, nor one on the user's own mount."""
    out = set()
    for f in findings:
        if not f.job or f.job in placed or not has_role(f.check, STUCK_TASK) \
                or f.status not in ("stuck", "stuck_not_node", "watching"):
            continue
        on = str(f.evidence.get("mount_dev") or "")
        if not on or on == dev:
            out.add(f.job)
    return sorted(out)


def _dead(out: list[Action], f: Finding, base, i: Incident | None, ledger: dict, counts: dict, node: str) -> None:
    """A mount that answers every call at once with ENOTCONN, ESTALE or EIO, on
    consecutive runs: detached and mounted again (`recover.remount`), once per incident;
    without a remount, or once it failed, the reboot (held by `govern` in a restart of
    the storage, when every node sees it dead)."""
    from ..core.model import Recovery
    if int(counts.get(f"{f.check}:{f.target}", 0)) < 2 or any(x.kind in ("reboot", "recover") for x in out):
        return
    remount = base is not None and bool(base.remount)
    key = f"{base.mountpoint if base is not None else f.target} {i.since if i is not None else ''}".strip()
    before = ledger.get(f"recover:{node}:{key}")
    drain = next((x for x in out if x.kind == "drain"), None)
    reason = drain.reason if drain is not None else f.reason_text
    if remount and before is None:
        out.append(Action("recover", node=node, reason=reason, incident=key,
                          recovery=Recovery(**{**asdict(base), "dead": True, "method": "remount"})))
    elif not remount or (isinstance(before, dict) and not before.get("recovered")):
        note = f"(remount tried: {one_line(base.mountpoint)})" if remount else "(dead; no recover.remount set)"
        out.append(Action("reboot", node=node, reason=with_note(reason, note), incident=f.incident or f.target))


def _tried(reason: str, method: str, point: str) -> str:
    return with_note(reason, f"(recovery tried: {one_line(method)} {one_line(point)})")
