"""`slurm-hooks explain`, on a node: why is it drained, and what happened lately.

Read from the local journal and state only (no Slurm call is needed, so it works while
slurmctld is down): the drain slurm-hooks recorded, the run that decided it with its
full diagnosis, the actions taken for it since, and the last runs.
"""
from __future__ import annotations

import time

from .outcomes import Outcome
from .reason import clean_text

# The journal outcomes of a drain that took (or that Slurm took for a failed prolog).
DRAINED = (Outcome.DONE.value, Outcome.DEFERRED.value)



def explain(records: list[dict], node: str, drain: dict, runs: int = 10) -> str:
    mine = [r for r in records if r.get("node") == node and r.get("event", "run") == "run"]
    lines = [f"slurm-hooks explain: node {node}"]
    if drain:
        lines.append(f"drained by slurm-hooks since {_when(drain.get('at'))}: {drain.get('reason')}")
        lines.append("  auto-resume: " + ("yes, after passing runs (passed so far: "
                                         f"{drain.get('passes', 0)})" if drain.get("resumable")
                                         else "no: the cause needs a reboot or a human"))
        decided = _deciding_run(mine, drain.get("reason", ""))
        if decided is not None:
            lines.append(f"diagnosis ({decided.get('hook')} run of {decided.get('time')}):")
            lines += _diagnosis(decided)
            lines.append("actions for it:")
            lines += [f"  {a}" for a in _actions_since(mine, decided)]
        else:
            lines.append("the run that drained it is no longer in the journal")
    else:
        lines.append("not drained by slurm-hooks (no drain recorded in local state)")
    lines.append(f"last {min(runs, len(mine))} runs:")
    for r in mine[-runs:]:
        bad = [f["summary"] for c in r.get("checks", []) for f in c.get("findings", []) if f.get("severity") != "ok"]
        dry = " (dry run)" if r.get("dry_run") else ""
        lines.append(f"  {r.get('time')} {r.get('hook'):<11} {r.get('status'):<9} "
                     f"{r.get('duration', 0):6.2f}s  {'; '.join(bad)[:160]}{dry}")
    return clean_text("\n".join(lines))


def _when(t) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(float(t)))
    except (TypeError, ValueError):
        return "?"


def _deciding_run(runs: list[dict], reason: str) -> dict | None:
    for r in reversed(runs):
        for a in r.get("actions", []):
            if a.get("kind") == "drain" and a.get("reason") == reason and a.get("outcome") in DRAINED:
                return r
    return None


def _diagnosis(run: dict) -> list[str]:
    out = []
    for c in run.get("checks", []):
        for f in c.get("findings", []):
            if f.get("severity") != "fail":
                continue
            out.append(f"  {f['summary']}")
            if f.get("detail"):
                out.append(f"      {f['detail']}")
            ev = f.get("evidence", {})
            gpu = ev.get("gpu") if isinstance(ev.get("gpu"), dict) else {}
            for key in _explain_keys(f.get("check")):
                value = ev.get(key, gpu.get(key))
                if value not in (None, "", [], {}):
                    if isinstance(value, list) and key == "stack":
                        value = " < ".join(value[:6])
                    out.append(f"      {key}: {value}")
    return out


def _actions_since(runs: list[dict], first: dict) -> list[str]:
    out, seen = [], False
    for r in runs:
        seen = seen or r is first
        if not seen:
            continue
        for a in r.get("actions", []):
            target = f"job {a.get('job')}" if a.get("job") else f"node {a.get('node')}"
            msg = f" ({a['message']})" if a.get("message") else ""
            out.append(f"{r.get('time')} {a.get('kind')} {target}: {a.get('outcome')}{msg}")
    return out or ["none"]


def _explain_keys(check) -> tuple[str, ...]:
    """The evidence the check that made a finding says is worth showing, in order."""
    from .checks import check_class, names
    return check_class(check).explain_keys if check in names() else ()
