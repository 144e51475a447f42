"""`slurm-hooks explain`, on a node: why is it drained, and what happened lately.

Read from the local journal and state only (no Slurm call is needed, so it works while
slurmctld is down): the drain slurm-hooks recorded, the run that decided it with its
full diagnosis, the actions taken for it since, and the last runs.
"""
from __future__ import annotations

import time

from ..core.outcomes import Outcome
from ..core.reason import clean_text

# The journal outcomes of a drain that took (or that Slurm took for a failed prolog).
DRAINED = (Outcome.DONE.value, Outcome.DEFERRED.value)



def node_runs(records: list[dict], node: str) -> list[dict]:
    """The node's runs. A run that could not read its configuration names the node only
    when slurmd set SLURMD_NODENAME; the journal is local, so one naming none is this
    host's too: hiding it would hide the very runs that checked nothing."""
    return [r for r in records if r.get("event", "run") == "run"
            and (r.get("node") == node or (r.get("node") is None and r.get("status") == "config_error"))]


# What a run's notes say of a mount the cluster shares trouble with (decide/mount_incident.py).
SHARED_SCOPE = ("outage of ", "storage restart: ")


# The checks whose findings have a mount behind them: only their drains have a scope
# (this node's, or the storage's) and a mount's recovery.
MOUNT_CHECKS = ("filesystem", "stuck_tasks")


def in_service(drain: dict, slurm_now: dict | None) -> str | None:
    """What Slurm says now of a node whose drain of ours is recorded locally, where it
    is back in service by another hand (`scontrol update state=resume`, `slurm-hooks
    resume` from another host): its state; None while our drain stands, or unasked."""
    from ..slurm.api import foreign_states, node_is_drained
    if not drain or not slurm_now or "State" not in slurm_now:
        return None
    # The state alone: Slurm 25.11 keeps a node's last reason, ours too, once an admin
    # resumed it. Our own DOWN (release_node) is a foreign state here: still ours.
    if node_is_drained(slurm_now) or foreign_states(slurm_now):
        return None
    return str(slurm_now.get("State", "?"))


def explain(records: list[dict], node: str, drain: dict, runs: int = 10, incidents: list | None = None,
            report_only: bool = False, slurm_now: dict | None = None) -> str:
    """`incidents`: the mounts' incidents the health check keeps (decide/mount_incident.py):
    each one's story, step by step, is told after the drain. `slurm_now`: the node's
    record in Slurm now ({"error": ...} where Slurm did not answer; None: not asked),
    which the local record of our drain is checked against."""
    mine = node_runs(records, node)
    lines = [f"slurm-hooks explain: node {node}"]
    back = in_service(drain, slurm_now)
    if back is not None:
        decided = _deciding_run(mine, drain.get("reason", ""))
        lines.append(f"not drained: Slurm has the node in service ({back}); slurm-hooks drained it at "
                     f"{_when(drain.get('at'))} ({drain.get('reason')}), and it was resumed since by another "
                     "hand (an acting health check forgets that drain at its next run)")
        if decided is not None:
            lines.append(f"diagnosis of that drain ({decided.get('hook')} run of {decided.get('time')}):")
            lines += _diagnosis(decided)
    elif drain:
        decided = _deciding_run(mine, drain.get("reason", ""))
        lines.append(f"{_who_drained(decided, drain.get('reason', ''))} since {_when(drain.get('at'))}: "
                     f"{drain.get('reason')}")
        if slurm_now and slurm_now.get("error"):
            lines.append(f"  (the local record: Slurm did not answer: {str(slurm_now['error'])[:160]})")
        if report_only:
            lines.append("  auto-resume: no: report-only (actions.report_only) resumes nothing; "
                         "`slurm-hooks resume` does")
        else:
            lines.append("  auto-resume: " + ("yes, after passing runs (passed so far: "
                                             f"{drain.get('passes', 0)})" if drain.get("resumable")
                                             else "no: the cause needs a reboot or a human"))
        # The scope: this node's fault, or the storage's outage or restart
        # (decide/mount_incident.py), as the latest run found it; jobs first, then the
        # mount, then the node. (The last failing run's word: passing runs after it say
        # nothing of the cause.)
        failing: dict = next((r for r in reversed(mine) if r.get("status") == "unhealthy"), {})
        scope = [n for n in failing.get("notes", []) if str(n).startswith(SHARED_SCOPE)]
        checks = {f.get("check") for c in (decided or failing).get("checks", []) for f in c.get("findings", [])
                  if f.get("severity") == "fail"}
        if checks and not checks & set(MOUNT_CHECKS):
            lines.append(f"  scope: this node ({', '.join(sorted(str(c) for c in checks))}: no mount behind it)")
        else:
            lines.append("  scope: " + ("; ".join(scope) + ": the storage's, not this node's (no reboot or recovery "
                                    "for it; the jobs wait for it, the node resumes once it answers)" if scope
                                        else "this node (jobs first, then the mount's recovery, then a reboot)"))
        if decided is not None:
            lines.append(f"diagnosis ({decided.get('hook')} run of {decided.get('time')}):")
            lines += _diagnosis(decided)
            lines.append("actions for it:")
            lines += [f"  {a}" for a in _actions_since(mine, decided, _followups(records, node),
                                                          drain.get("reason", ""))]
    else:
        lines.append("not drained by slurm-hooks (no drain recorded in local state)")
    for i in incidents or []:
        lines.append(f"mount: {i.line()}" + (" (answered)" if i.answered else ""))
        lines += [f"  {_when(t)} {what}" for t, what in i.steps]
    shown = _last(mine, runs)
    if not mine:
        lines.append("no run of slurm-hooks on this node in the journal yet: the health check may not have run "
                     "(slurm.conf's HealthCheckProgram and HealthCheckInterval), or writes another journal")
    lines.append(f"last {len(shown)} runs:")
    for r in shown:
        lines.append(_run_line(r))
        # What the run decided, done or not: in report-only mode this is what the
        # rollout asks admins to read before they turn actions on.
        lines += [f"      {_action_text(a)}" for a in r.get("actions", [])]
    return clean_text("\n".join(lines))


def explain_json(records: list[dict], node: str, drain: dict, runs: int = 10, incidents: list | None = None) -> dict:
    """What explain() says, as one document for scripts."""
    from ..core.records import asdict
    mine = node_runs(records, node)
    decided = _deciding_run(mine, drain.get("reason", "")) if drain else None
    return {"node": node, "drain": drain or None, "mounts": [asdict(i) for i in incidents or []],
            "deciding_run": decided, "runs": _last(mine, runs)}


def _last(runs: list[dict], n: int) -> list[dict]:
    return runs[-n:] if n > 0 else []      # runs[-0:] would be every run


def _run_line(r: dict) -> str:
    if r.get("status") == "config_error":
        error = str(r.get("error", "")).splitlines()
        why = "; ".join(error[:2])[:160]
        return f"  {r.get('time')} {r.get('hook', '?'):<11} config_error nothing checked or done: {why}"
    bad = [f["summary"] for c in r.get("checks", []) for f in c.get("findings", []) if f.get("severity") != "ok"]
    mode = " (dry run)" if r.get("dry_run") else (" (report only)" if r.get("report_only") else "")
    return (f"  {r.get('time')} {r.get('hook', '?'):<11} {r.get('status', '?'):<9} "
            f"{r.get('duration', 0):6.2f}s  {'; '.join(bad)[:160]}{mode}")


def _action_text(a: dict) -> str:
    from ..core.outcomes import result_word
    word = a.get("result") or result_word(a.get("outcome", "?"), bool(a.get("retry")))
    target = f"job {a.get('job')}" if a.get("job") else f"node {a.get('node')}"
    return f"{word}: {a.get('kind')} {target}" + (f": {a['reason']}" if a.get("reason") else "")


def plain_settings(path: str | None) -> dict:
    """node_name and state_dir as a configuration file that does not validate still
    gives them plainly at its top level: explain must find the node and its state."""
    try:
        import yaml
        with open(path or "", "rb") as f:
            doc = yaml.load(f.read(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except Exception:       # unreadable or not YAML: the defaults it is
        return {}
    if not isinstance(doc, dict):
        return {}
    out = {}
    if isinstance(doc.get("node_name"), str) and doc["node_name"].strip():
        out["node_name"] = doc["node_name"].strip()
    if isinstance(doc.get("state_dir"), str) and doc["state_dir"].startswith("/"):
        out["state_dir"] = doc["state_dir"]
    return out


def _when(t) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(float(t)))
    except (TypeError, ValueError):
        return "?"


def _who_drained(run: dict | None, reason: str) -> str:
    """Who took the node out, as the journal shows it: slurm-hooks' own drain, or Slurm's
    after a failing prolog (slurm-hooks left the drain to Slurm, and only re-words its
    generic reason)."""
    if run is None:
        return "drain recorded by slurm-hooks (the run that drained it is no longer in the journal)"
    drain = next(a for a in run.get("actions", []) if a.get("kind") == "drain" and a.get("reason") == reason)
    if drain.get("outcome") == Outcome.DEFERRED.value:
        from ..core.behaviour import BEHAVIOURS
        hook = run.get("hook", "?")
        generic = BEHAVIOURS[hook].generic_reason.split("|")[0] if hook in BEHAVIOURS else ""
        return (f"drained by Slurm (its own `{generic or 'drain'}` when slurm-hooks' {hook} failed; "
                "slurm-hooks puts its precise reason in place)")
    if drain.get("code") == "replaced_generic":
        # The health check found Slurm's own drain (`Prolog error`, `Kill task failed`)
        # and put the precise reason over it: the reason is ours, the drain Slurm's.
        return f"drained by Slurm, its reason re-worded by slurm-hooks ({drain.get('message') or 'generic reason'})"
    return "drained by slurm-hooks"


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
            # A check may group evidence in a mapping (the GPU check: the GPU's own).
            nested = [v for v in ev.values() if isinstance(v, dict)]
            for key in _explain_keys(f.get("check"), ev):
                value = ev.get(key, next((n[key] for n in nested if key in n), None))
                if value not in (None, "", [], {}):
                    if isinstance(value, list) and key == "stack":
                        value = " < ".join(value[:6])
                    out.append(f"      {_shown(key, value, ev)}")
    return out


def _shown(key: str, value, ev: dict) -> str:
    """One line of evidence as people read it: a time as a time (not an epoch), and a
    task's time in D as the same figure its summary says."""
    from ..core.reason import duration
    if key == "since" and isinstance(value, (int, float)) and value > 1e9:
        return f"since: {_when(value)}"
    if key == "seconds" and "d_seconds" in ev:
        return f"stuck for: {duration(float(ev['d_seconds']), at_least=bool(ev.get('d_at_least')))}"
    return f"{key}: {value}"


def _followups(records: list[dict], node: str) -> list[dict]:
    """Action lines written outside a run: the prolog's detached helper putting the
    precise reason in place of Slurm's generic one (run/hooks.py: fix_reason)."""
    return [r for r in records if r.get("event") == "action" and r.get("followup") and r.get("node") == node]


def _incidents_of(a: dict) -> set[str]:
    """The incidents an action is about (`a+b`; a job's follow-ups carry `/completing`)."""
    return {i.split("/")[0] for i in str(a.get("incident") or "").split("+") if i}


def _of_this_drain(a: dict, incidents: set[str], jobs: set[str], reason: str) -> bool:
    """An action of a later run that belongs to the drain being explained: about one of
    its incidents or jobs, or the node's own drain, release and resume for it."""
    if _incidents_of(a) & incidents or (a.get("job") and str(a.get("job")) in jobs):
        return True
    return a.get("kind") in ("drain", "resume", "release", "down", "reboot", "cancel_reboot", "undrain") \
        and (not a.get("reason") or a.get("reason") == reason)


def _actions_since(runs: list[dict], first: dict, followups: list[dict] | None = None,
                   reason: str = "") -> list[str]:
    from ..core.outcomes import result_word
    timed: list[tuple[str, dict]] = []
    seen = False
    incidents = set().union(*[_incidents_of(a) for a in first.get("actions", [])])
    jobs = {str(a.get("job")) for a in first.get("actions", []) if a.get("job")}
    for r in runs:
        if r is first:
            seen = True
            timed += [(str(r.get("time")), a) for a in r.get("actions", [])]
        elif seen:
            # Later runs: only what they did about this drain, not the next incident's.
            timed += [(str(r.get("time")), a) for a in r.get("actions", [])
                      if _of_this_drain(a, incidents, jobs, reason)]
    timed += [(str(a.get("time")), a) for a in followups or [] if str(a.get("time")) >= str(first.get("time"))]
    out: list[tuple[str, str, int, str]] = []
    for when, a in sorted(timed, key=lambda t: t[0]):
        target = f"job {a.get('job')}" if a.get("job") else f"node {a.get('node')}"
        what = f"{a.get('kind')} {target}"
        if a.get("followup") and a.get("replace_only"):
            what = f"re-word {target}'s reason ({a.get('hook') or 'hook'}'s detached helper)"
        word = a.get("result") or result_word(a.get("outcome", "?"), bool(a.get("retry")))
        msg = str(a.get("message") or "")
        if msg.startswith(word):        # journals of older releases: the word said twice
            rest = msg[len(word):].strip()
            inner, _, tail = rest[1:].partition(")") if rest.startswith("(") else ("", "", rest)
            msg = f"{inner}{tail}".strip(" ;:")
        if msg.endswith(word):          # `report only (actions.report_only): not done`
            msg = msg[:-len(word)].strip(" ;:")
        line = f"{what}: {word}" + (f" ({msg})" if msg else "")
        if out and out[-1][1] == line:
            # The same word run after run (a job waiting on Slurm, a node held): once,
            # with how often and until when.
            since, _, times, _ = out[-1]
            out[-1] = (since, line, times + 1, when)
        else:
            out.append((when, line, 1, when))
    return [f"{when} {line}" + (f" [{n} runs, until {last}]" if n > 1 else "") for when, line, n, last in out] \
        or ["none"]


def _explain_keys(check, evidence: dict) -> tuple[str, ...]:
    """The evidence the check that made a finding says is worth showing, in order. Of
    another package's check, whose code is not run to read a journal (it may be off,
    `site_checks.entry_points: false`), the plain values it recorded."""
    from ..checks import check_class, registry
    if check in registry():
        return check_class(check).explain_keys
    return tuple(k for k, v in list(evidence.items())[:10] if isinstance(v, (str, int, float)))
