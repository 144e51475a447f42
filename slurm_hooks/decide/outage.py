"""A node's fault or the storage's outage.

A hang belongs to a mount. When the storage behind a network mount stops answering,
every node that mounts it sees the same hang at once: that is one outage of the
storage, not many sick nodes, and no reboot or forced recovery of the mount cures it
(the tasks waiting on it end when the storage answers; an abort would only fail the
jobs' calls).

Each node names its suspect network mounts (a probe that hangs, a task proven stuck
there) in the cause it keeps in its node Comment, with its drain or, for a node the
drain-storm breaker holds back, by itself (one update when the set changes): the others
read them in the node list the breaker loads anyway, so telling an outage costs no RPC
of its own. A mount is known by its source and fstype (`gpfs:/fs1`, `gpfs`), never by
where it is mounted.

The same mount suspect on another node: an outage. This node then asks for no reboot
and no recovery for it, and its drain for it is resumable: once the storage answers,
its passing runs put it back in service. A mount suspect here alone is the node's own
fault, handled as before (recovery, then a reboot).
"""
from __future__ import annotations

import time

from ..checks import has_role
from ..core.model import FAIL, MOUNT_PROBE, STUCK_TASK, Action, Finding
from ..core.reason import read_cause
from ..core.records import dataclass, field
from ..slurm.api import CAUSE_FIELD

SINCE_FORMAT = "%Y-%m-%dT%H:%M:%S"


@dataclass
class Outage:
    source: str
    fstype: str
    mountpoint: str
    nodes: list[str] = field(default_factory=list)
    since: str = ""              # the earliest node's first sighting (UTC, SINCE_FORMAT)

    @property
    def key(self) -> tuple[str, str]:
        return (self.source, self.fstype)

    def epoch(self) -> float | None:
        return _epoch(self.since)

    def line(self) -> str:
        return f"outage of {self.source} ({self.mountpoint}) on {len(self.nodes)} nodes since {hhmm(self.since)}"


def hhmm(since: str) -> str:
    t = _epoch(since)
    return time.strftime("%H:%M", time.localtime(t)) if t is not None else (since or "?")


def _epoch(since: str) -> float | None:
    import calendar
    try:
        return calendar.timegm(time.strptime(since, SINCE_FORMAT))
    except ValueError:
        return None


def mount_of(f: Finding) -> tuple[str, str, str] | None:
    """(source, fstype, mountpoint) of the network mount a failing finding is about: a
    probe that hangs, or a task proven stuck there; None for anything else."""
    ev = f.evidence
    if f.severity != FAIL or not ev.get("network") or not ev.get("source"):
        return None
    probe = has_role(f.check, MOUNT_PROBE) and f.status == "hung"
    task = has_role(f.check, STUCK_TASK) and f.status == "stuck" and ev.get("cause") == "shared_filesystem"
    if not probe and not task:
        return None
    return (str(ev["source"]), str(ev.get("fstype") or ""), str(ev.get("mountpoint") or ""))


def suspects(findings: list[Finding], first_seen: dict, now: float | None = None,
             node_points: frozenset[str] = frozenset()) -> list[list[str]]:
    """[[source, fstype, mountpoint, since]] of this run's suspect mounts, sorted;
    `first_seen`: "source fstype" -> since, from the runs before (kept in state);
    `node_points`: the mountpoints of the storage the site marks as this node's own
    (`scope: node`), never suspect of an outage."""
    now = time.time() if now is None else now
    out: dict[tuple[str, str], list[str]] = {}
    for f in findings:
        m = mount_of(f)
        if m is None or m[:2] in out or m[2] in node_points:
            continue
        since = first_seen.get(f"{m[0]} {m[1]}") or time.strftime(SINCE_FORMAT, time.gmtime(now))
        out[m[:2]] = [m[0], m[1], m[2], since]
    return [out[k] for k in sorted(out)]


def published(info: dict) -> list[list[str]]:
    """The suspect mounts a node's Comment names (its cause's `mounts`)."""
    cause = read_cause(info.get(CAUSE_FIELD, "")) or {}
    mounts = cause.get("mounts")
    if not isinstance(mounts, list):
        return []
    return [[str(x) for x in m][:4] for m in mounts if isinstance(m, list) and len(m) >= 3]


def outages(infos: dict, node: str | None, mine: list[list[str]] | None = None) -> list[Outage]:
    """Every mount suspect on at least two nodes (`infos`: node -> its `scontrol show
    node` fields), or, with `node`, those of `mine` (its suspects this run) suspect on
    at least one other node."""
    seen: dict[tuple[str, str], Outage] = {}
    entries = [(n, published(info)) for n, info in sorted(infos.items()) if n != node]
    if node is not None:
        entries.append((node, mine or []))
    for n, mounts in entries:
        for m in mounts:
            o = seen.setdefault((m[0], m[1]), Outage(source=m[0], fstype=m[1], mountpoint=m[2]))
            if n not in o.nodes:
                o.nodes.append(n)
            since = m[3] if len(m) > 3 else ""
            if since and (not o.since or since < o.since):
                o.since = since
    wanted = {(m[0], m[1]) for m in mine or []} if node is not None else None
    out = [o for k, o in sorted(seen.items()) if len(o.nodes) >= 2 and (wanted is None or k in wanted)]
    for o in out:
        o.nodes.sort()
    return out


def cache(found: list[Outage], before: dict, fresh: bool) -> dict:
    """What the suspect-mounts record keeps of the outages for a hook that reads no node
    list: this run's, when it read the cluster, else the earlier record's as it was."""
    from ..core.records import asdict
    if not fresh:
        return {k: before[k] for k in ("outages", "at") if k in before}
    return {"outages": [asdict(o) for o in found], "at": time.time()}


def cached(before: dict, mine: list[list[str]], max_age: float) -> list[Outage]:
    """The outages a health check found lately (at most `max_age` ago) among `mine`."""
    if time.time() - float(before.get("at") or 0) > max_age:
        return []
    keys = {(m[0], m[1]) for m in mine}
    out = []
    for o in before.get("outages") or []:
        if isinstance(o, dict) and (o.get("source"), o.get("fstype")) in keys:
            out.append(Outage(source=str(o["source"]), fstype=str(o["fstype"]), mountpoint=str(o.get("mountpoint") or ""),
                              nodes=[str(n) for n in o.get("nodes") or []], since=str(o.get("since") or "")))
    return out


def spared(actions: list[Action], findings: list[Finding], found: list[Outage]) -> tuple[list[Action], list[tuple]]:
    """(the actions left, [(action, why)] taken out): no reboot and no recovery for a
    mount in an outage. A reboot asked for several places stays when any of them is not
    in the outage (the node's own fault is still there)."""
    keys = {o.key: o for o in found}
    by_incident = {}
    for f in findings:
        m = mount_of(f)
        if m is not None:
            by_incident[f.incident or f.target] = m
    kept, dropped = [], []
    for a in actions:
        if a.kind not in ("reboot", "recover"):
            kept.append(a)
            continue
        places = [by_incident.get(i) for i in (a.incident or "").split("+")]
        if a.kind == "recover" and a.recovery is not None and not all(places):
            places = _by_mountpoint(findings, a.recovery.mountpoint) or places
        outs = [keys.get(p[:2]) if p is not None else None for p in places]
        first = outs[0] if outs else None
        if first is not None and all(o is not None for o in outs):
            dropped.append((a, f"{first.line()}: no {'reboot' if a.kind == 'reboot' else 'recovery'} "
                               f"of {a.node} for it (its tasks end when the storage answers)"))
        else:
            kept.append(a)
    return kept, dropped


def _by_mountpoint(findings: list[Finding], point: str) -> list:
    return [m for m in (mount_of(f) for f in findings) if m is not None and m[2] == point][:1]


def covers(findings: list[Finding], found: list[Outage]) -> bool:
    """Is every failing finding about a mount in an outage? Then the drain is the
    storage's, and the node goes back in service once its runs pass."""
    keys = {o.key for o in found}
    failing = [f for f in findings if f.severity == FAIL]
    return bool(failing) and all((m := mount_of(f)) is not None and m[:2] in keys for f in failing)
