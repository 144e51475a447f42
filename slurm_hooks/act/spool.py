"""The spool: actions slurmctld did not take (unreachable, or no time left in the run)
wait in local state (actuation's `spool` file) for the next run, each once, oldest first, and expire after
policy.spool_max_age. A newer drain replaces a spooled one: it says more about the node
now. A spooled action is checked again before it is carried out (`due`): one whose fault
is gone by now is dropped, and the run says so."""
from __future__ import annotations

import time

from ..core.model import Action
from ..core.records import asdict


def _identity(a) -> tuple:
    return (a.kind, a.node, a.job, a.reason if a.kind in ("drain", "reboot") else "", a.incident)


def merge(spooled: list, actions: list, max_age: float) -> list:
    """Spooled actions first (oldest first), then new ones; each action once."""
    now = time.time()
    out, seen = [], set()
    for entry in spooled:
        try:
            a = Action(**entry["action"])
        except (TypeError, KeyError):
            continue
        if now - float(entry.get("at", now)) > max_age:
            continue
        if a.kind == "drain" and any(n.kind == "drain" for n in actions):
            continue           # a newer drain says more about the node now
        if _identity(a) not in seen:
            seen.add(_identity(a))
            out.append(a)
    for a in actions:
        if _identity(a) not in seen:
            seen.add(_identity(a))
            out.append(a)
    return out


def _spooled_at(spooled: list, action) -> float:
    for entry in spooled:
        if entry.get("action", {}).get("kind") == action.kind and \
                entry["action"].get("reason") == action.reason and entry["action"].get("job") == action.job:
            return float(entry.get("at", time.time()))
    return time.time()


def entries(spooled: list, results: list) -> list:
    """What the spool holds after a run: the actions it must try again, each with the
    time it was first spooled."""
    return [{"action": asdict(r.action), "at": _spooled_at(spooled, r.action)} for r in results if r.retry]


# What a spooled action needs to be still due: its fault (failing now), or none (healthy).
NEEDS_FAULT = ("drain", "reboot", "requeue", "cancel", "release", "recover")


def due(spooled: list, actions: list, max_age: float, findings: list) -> tuple[list, list]:
    """(the queue: merge()'s, less what is no longer due; the spooled actions dropped).
    A spooled drain waits for a run that still fails (a drain carried out after its fault
    went would keep the node out for nothing, and for good: its resumability is that of
    the findings that call for it); a reboot, requeue, cancel or release for an incident
    a finding still names; a resume for a run that passes. Comments are history, kept."""
    from ..core.model import FAIL
    queue = merge(spooled, actions, max_age)
    new = {_identity(a) for a in actions}
    failing = [f for f in findings if f.severity == FAIL or f.job_action]
    named = {f.incident or f.target for f in failing}
    kept: list = []
    gone: list = []
    for a in queue:
        if _identity(a) in new:
            kept.append(a)
            continue
        if a.kind == "drain" and not a.replace_only:
            ok = bool(failing)
        elif a.kind in NEEDS_FAULT:
            ok = any(i in named for i in (a.incident or "").split("+") if i) or (not a.incident and bool(failing))
        elif a.kind == "resume":
            ok = not failing
        else:
            ok = True
        (kept if ok else gone).append(a)
    return kept, gone
