"""Actuation: findings in, Slurm actions carried out (or spooled), local records kept.

Around the pure policy (decide/policy.py) and the Slurm backend (act/actions.py, slurm/scontrol.py):
- hysteresis counts, and the healthy fast path that asks Slurm nothing;
- the drain-storm breaker (decide/breaker.py): read the cluster before a drain, re-read after
  it; a prolog or epilog honours the health checks' latest view instead;
- the spool (act/spool.py): actions slurmctld did not take wait for the next run;
- the ledger (act/ledger.py): job and reboot actions once per incident;
- the way back after a reboot slurm-hooks asked for (act/after_reboot.py);
- the prolog's special case (Slurm drains on its non-zero exit).
Everything it keeps goes through the run's staged state store: a dry run keeps nothing.
"""
from __future__ import annotations

import time

from .. import TYPE_CHECKING
from ..checks import has_role
from ..core.behaviour import behaviour
from ..core.model import FAIL, MOUNT_PROBE, ActionResult, Finding

if TYPE_CHECKING:
    from ..checks._config import Config
    from ..core.state import StateStore

BREAKER_FRESH = 600.0
# The state files actuation keeps; it alone reads and writes them; act/spool.py,
# act/ledger.py and act/after_reboot.py decide over their contents, and are imported
# only past the healthy fast path (together 0.5 ms of every run otherwise).
SPOOL, LEDGER = "spool", "actions-done"
# The node's suspect mounts (decide/outage.py), and whether its Comment names them.
SUSPECTS = "suspects"
STATE = ("failures", "drain", SPOOL, LEDGER, "hook-failure", "reboot", "boot", "breaker", SUSPECTS)


def take_actions(cfg: Config, node: str, findings: list[Finding], dry_run: bool, state: StateStore,
                 hook: str = "healthcheck", started: float | None = None,
                 others_failing: str | None = None, notes: list[str] | None = None,
                 picture=None, open_backend=None) -> list[ActionResult]:
    """Policy, breaker, spool and ledger around the Slurm backend (see act/actions.py).

    `picture(cfg, job, timeout) -> str`: the job-wide picture of a job about to be
    requeued (views.diagnose.capture, handed down by the run: this layer does not
    reach up for it); None: no picture.

    `started`: the run's start (monotonic): every Slurm call ends by
    `actions.deadline` seconds after it, and what is left is spooled. `others_failing`:
    another health check run beside this one (NHC) failed, so nothing is resumed.
    `open_backend(cfg.slurm, deadline)`: how the run reaches Slurm (slurm.connect's by
    default; a test hands in slurm/fake.py's `FakeSlurm.open`)."""
    counts = new_counts = state.load("failures")
    if counts or any(f.severity == FAIL for f in findings):     # else nothing to count or reset
        from ..decide import policy
        new_counts, waiting = policy.hysteresis(findings, counts, cfg.policy.failures_to_drain)
        policy.hold_back(waiting)
        if new_counts != counts:
            state.save("failures", new_counts)
    run = behaviour(hook)
    drain = state.load("drain")
    spooled = state.load(SPOOL, list)
    hook_failure = state.load("hook-failure") if run.tends_node else {}
    reboot = state.load("reboot") if run.tends_node else {}
    new_boot = run.tends_node and not dry_run and _new_boot(state)
    failing = any(f.severity == FAIL or f.job_action for f in findings)
    if not failing and not drain and not spooled and not hook_failure and not reboot and not new_boot \
            and not state.load("actions-done") and not state.exists(SUSPECTS):
        return []          # the healthy fast path: no Slurm call (an empty ledger has nothing to expire)

    from ..core.model import Action
    from ..core.outcomes import Code, Outcome
    from ..decide import outage as outage_of
    from ..decide import policy
    from . import after_reboot, spool
    from . import ledger as ledger_of
    from .actions import execute
    report_only = cfg.actions.report_only
    ledger = state.load(LEDGER)
    before = state.load(SUSPECTS)
    mine = outage_of.suspects(findings, {f"{m[0]} {m[1]}": m[3] for m in before.get("mounts", [])
                                         if isinstance(m, list) and len(m) >= 4},
                              node_points=_node_points(cfg))
    actions = policy.decide(findings, node, cfg.reason_prefix, cfg.actions, ledger, cfg.stuck_tasks.grace,
                            suspects=mine)
    if run.acts_by_exit:
        return _prolog_actions(actions, state, dry_run, report_only)
    if run.tends_node and _may_recover(cfg, actions, findings):
        actions = policy.recoveries(actions, findings, ledger, _recoverable(cfg), new_counts, bool(drain))
    for a in actions:
        if a.kind == "drain":
            a.replaces = "|".join(filter(None, [run.generic_reason, hook_failure.get("replaces", "")]))
    if hook_failure and not any(a.kind == "drain" for a in actions):
        actions.insert(0, Action("drain", node=node, reason=hook_failure.get("reason", ""),
                                 replaces=hook_failure.get("replaces", ""), replace_only=True,
                                 cause=str(hook_failure.get("cause") or "")))
    resume, drain = policy.resume_decision(findings, drain, node, cfg.policy.resume_after)
    if others_failing:
        # Never resume while another tool fails the node: it would drain it again, and
        # the node would flap between the two.
        resume, drain = None, (dict(drain, passes=0) if drain else drain)
    slurm = None
    if not dry_run and not report_only:
        if open_backend is None:
            from ..slurm.connect import open_backend
        slurm = open_backend(cfg.slurm, None if started is None else started + cfg.actions.deadline)
        if notes is not None and slurm.choice is not None:
            notes.append(slurm.choice.note())
    if slurm is not None and picture is not None:
        _job_picture(cfg, actions, slurm, picture)
    held, view = _breaker(cfg, node, actions, slurm, dry_run, state, hook)
    actions = [a for a in actions if not any(a is h for h, _ in held)]
    # The same mount suspect on other nodes: the storage's outage, not this node's fault.
    # An epilog reads no node list (Slurm's guide): it honours the health check's last
    # finding, as it honours the breaker's.
    found = (outage_of.outages(view.infos, node, mine) if view is not None
             else outage_of.cached(before, mine, BREAKER_FRESH)) if mine else []
    spared: list = []
    if found:
        actions, spared = outage_of.spared(actions, findings, found)
        if notes is not None:
            notes += [o.line() for o in found]
    published = _publish(node, mine, before, held, actions, view, slurm, bool(drain))
    if (reboot or new_boot) and slurm is not None:
        after, reboot = after_reboot.after_reboot(slurm, node, cfg.reason_prefix, reboot, failing or bool(others_failing),
                                      cfg.policy.resume_after, cfg.actions.release_after)
        if after is not None:
            resume = after          # the resume after the boot, or the DOWN that lets Slurm reboot
    if resume is not None:
        actions.append(resume)
    queue = spool.merge(spooled, actions, cfg.policy.spool_max_age) if not report_only else actions
    results = [ActionResult(a, Outcome.HELD, why, code=Code.BREAKER) for a, why in held]
    results += [ActionResult(a, Outcome.HELD, why, code=Code.OUTAGE) for a, why in spared]
    recovering = [a for a in queue if a.kind == "recover"]
    queue = [a for a in queue if a.kind != "recover"]
    results += execute(queue, slurm, cfg.reason_prefix, dry_run, ledger, report_only=report_only)
    if recovering:
        until = None if started is None else started + cfg.actions.deadline
        results += _recover(cfg, node, recovering, slurm, state, ledger, dry_run, report_only, drain, until)
    from ..decide.breaker import can_overflow
    if held == [] and slurm is not None and run.tends_node and \
            (view is None or can_overflow(view, cfg.policy)):
        # Only the health check re-reads the cluster: a prolog or epilog never reads the
        # node list (Slurm's guide), it honours the health checks' last view instead.
        results = _breaker_recheck(cfg, node, results, slurm, state)

    if not dry_run and not report_only:
        state.save(LEDGER, ledger_of.refresh(ledger, findings))
        # Actions Slurm could not take (unreachable, or no time left) wait in the spool;
        # everything else is final.
        waiting_now = spool.entries(spooled, results)
        if waiting_now or spooled:
            state.save(SPOOL, waiting_now)
        drain = drain_record(drain, results, findings, node)
        if drain and found and outage_of.covers(findings, found):
            # The storage's outage drained it: back in service once its runs pass.
            drain = dict(drain, resumable=True)
        if mine or published:
            state.save(SUSPECTS, {"mounts": mine, "published": published,
                                  **outage_of.cache(found, before, view is not None)})
        elif before:
            state.delete(SUSPECTS)
        if hook_failure and any(r.action.kind == "drain" and r.outcome in (Outcome.DONE, Outcome.SKIPPED)
                                for r in results):
            state.delete("hook-failure")      # the precise reason is in place (or moot)
        if drain or state.exists("drain"):
            state.save("drain", drain)
        reboot = after_reboot.record(reboot, results)
        if reboot or state.exists("reboot"):
            state.save("reboot", reboot)
    return results


def _node_points(cfg: Config) -> frozenset[str]:
    """The mountpoints of the storage the site marks as this node's own (`scope: node`):
    the configured `mountpoint`, else the mount that holds the path, from our own mount
    table (never a stat of a path that may hang)."""
    marked = [fs for fs in cfg.filesystems if fs.scope == "node"]
    if not marked:
        return frozenset()
    from ..host.mounts import MountTable, normalise
    table = MountTable.current() if any(not fs.mountpoint for fs in marked) else None
    held = [normalise(fs.mountpoint) if fs.mountpoint else getattr(table and table.holding(fs.path), "mountpoint", None)
            for fs in marked]
    return frozenset(p for p in held if p)


def _publish(node: str, mine: list, before: dict, held: list, actions: list, view, slurm, drained: bool) -> bool:
    """Make the node's suspect mounts visible to the other nodes (decide/outage.py);
    True while its Comment names them. A drain of ours names them in its own update; a
    node the breaker holds back sets its Comment itself, once per change of the set;
    once nothing is suspect, a node not drained by us takes them out again (a drain of
    ours takes them out with its resume)."""
    from ..core.reason import is_our_cause, without_our_cause
    from ..decide.outage import published
    from ..slurm.api import CAUSE_FIELD, SlurmError, node_is_drained
    was = bool(before.get("published"))
    if slurm is None:
        return was
    try:
        if mine:
            drain = next((a for a, _ in held if a.kind == "drain"), None)
            if drain is None or view is None or node not in view.infos:
                # Drained (now, or before) the cause names them; without a drain (off) nothing does.
                return was or drained or any(a.kind == "drain" for a in actions)
            info = view.infos[node]
            if [m[:3] for m in published(info)] != [m[:3] for m in mine]:
                text = f"{drain.cause} {without_our_cause(info.get(CAUSE_FIELD, ''))}".strip()
                slurm.set_node_comment(node, text)
                # What the node now is, for the rest of the run: no lookup of it again.
                slurm.prime_node({**info, CAUSE_FIELD: text})
            return True
        if was and not drained:
            info = slurm.node_state(node) or {}
            text = info.get(CAUSE_FIELD, "")
            if is_our_cause(text) and not node_is_drained(info):
                slurm.set_node_comment(node, without_our_cause(text))
    except SlurmError:
        return was
    return False


def _new_boot(state: StateStore) -> bool:
    """True once per boot: a node whose state_dir did not survive the reboot (diskless)
    must still learn from Slurm that it is DOWN after a reboot of ours."""
    from ..host.procfs import boot_id
    now = boot_id()
    if state.load("boot").get("id") == now:
        return False
    state.save("boot", {"id": now})
    return True


def _prolog_actions(actions, state: StateStore, dry_run: bool, report_only: bool = False) -> list[ActionResult]:
    """The prolog takes no action itself: Slurm drains the node and requeues the job
    when it exits non-zero, and a detached helper sets the precise reason (run/hooks.py).
    The breaker is honoured from the health checks' latest cluster view: the prolog
    must not wait on slurmctld to ask."""
    from ..core.outcomes import Code, Outcome
    drains = [a for a in actions if a.kind == "drain"]
    if report_only:
        return [ActionResult(a, Outcome.REPORT_ONLY, "report only (actions.report_only): not done",
                             code=Code.REPORT_ONLY) for a in drains]
    held = _cached_breaker(state)
    if drains and held:
        return [ActionResult(a, Outcome.HELD, held, code=Code.BREAKER) for a in drains]
    if dry_run:
        return [ActionResult(a, Outcome.DRY_RUN, "dry run: not done", code=Code.DRY_RUN) for a in drains]
    return [ActionResult(a, Outcome.DEFERRED, "Slurm drains the node when the prolog fails; "
                         "the precise reason follows", code=Code.LEFT_TO_SLURM) for a in drains]


# The picture may take at most this share of what is left of the run's action time:
# the drain, comment and requeue it precedes must still fit before slurmd's kill.
PICTURE_SHARE = 0.5


def remember_hook_failure(state: StateStore, run, reason: str, cause: str, job: str | None,
                          resumable: bool) -> None:
    """A prolog or epilog failed: the drain is Slurm's (its generic reason) or ours
    without the health check's follow-up yet. What the next health check needs to put
    the precise reason in place and, later, to resume: actuation's own state files,
    written here and nowhere else."""
    now = time.time()
    state.save("hook-failure", {"hook": run.name, "reason": reason, "cause": cause, "at": now, "job": job,
                                "replaces": run.generic_reason})
    # A node drained already (an earlier failure, a drain of ours) keeps the drain's time.
    since = (state.load("drain") or {}).get("at") or now
    state.save("drain", {"reason": reason, "resumable": resumable, "passes": 0, "at": since})


def _job_picture(cfg: Config, actions, slurm, capture) -> None:
    """Before a job is requeued, the job-wide picture (views/diagnose.py) joins the diagnosis
    recorded on it, so the post-mortem shows what the other ranks were doing. It lives
    inside the run's action deadline: at most half of what is left of it."""
    jobs = sorted({a.job for a in actions if a.kind == "requeue" and a.job})
    if not jobs:
        return
    for job in jobs:
        limit = cfg.diagnose.on_requeue_timeout
        deadline = getattr(slurm, "deadline", None)
        if deadline is not None:
            limit = min(limit, (deadline - time.monotonic()) * PICTURE_SHARE)
        if limit < 1:
            break                    # no time left for it: the requeue comes first
        line = capture(cfg, job, limit)
        for a in actions:
            if line and a.job == job and a.kind in ("comment", "requeue"):
                a.text = f"{a.text}; {line}" if a.text else line


def _cached_breaker(state: StateStore) -> str | None:
    breaker = state.load("breaker")
    if breaker.get("open") and time.time() - float(breaker.get("at", 0)) < BREAKER_FRESH:
        return breaker.get("why", "drain-storm breaker open")
    return None


def _breaker(cfg: Config, node: str, actions, slurm, dry_run: bool, state: StateStore, hook: str = "healthcheck") -> tuple:
    """([(action, why)] for the actions the drain-storm breaker holds back, the cluster
    view it read or None)."""
    # A job's own problem (job_only) costs the node nothing and is never held back.
    risky = [a for a in actions if a.kind in ("drain", "reboot", "requeue")
             and not a.replace_only and not a.job_only]
    if not risky or dry_run or slurm is None:
        return [], None
    if not behaviour(hook).tends_node:
        # A prolog or epilog never reads the whole node list (Slurm's guide: hooks
        # should not call Slurm commands): it honours the health checks' last view.
        why = _cached_breaker(state)
        return ([(a, why) for a in risky] if why else []), None
    from ..decide.breaker import cluster_view, verdict
    from ..slurm.api import SlurmError
    try:
        view = cluster_view(slurm, cfg.reason_prefix)
    except SlurmError:
        return [], None        # no view: the drain itself will fail and be spooled
    from ..decide.breaker import step_back
    back = step_back(view, node, cfg.policy)
    if back:
        # Drained in a storm by a run that read the cluster before the others drained.
        try:
            _step_back(slurm, view, node, next((a.cause for a in risky if a.kind == "drain"), ""))
        except SlurmError:
            return [], view
        state.save("breaker", {"open": True, "why": back, "at": time.time()})
        return [(a, back) for a in risky], view
    if node in view.infos:
        slurm.prime_node(view.infos[node])      # the drain's own node lookup: no second RPC
    why = None if node in view.ours else verdict(view, node, cfg.policy)
    state.save("breaker", {"open": bool(why), "why": why or "", "at": time.time()})
    return ([(a, why) for a in risky] if why else []), view


def _breaker_recheck(cfg: Config, node: str, results: list, slurm, state: StateStore) -> list:
    """Simultaneous health checks all pass the breaker's check, then all drain: after
    our own drain, read the cluster again and step back when beyond the limit in the
    breaker's stable order (decide/breaker.py)."""
    from ..core.outcomes import Code, Outcome
    from ..decide.breaker import cluster_view, settle, step_back
    from ..slurm.api import MIN_CALL, SlurmError
    drained = [r for r in results if r.action.kind == "drain" and r.action.node == node
               and r.outcome == Outcome.DONE and not r.action.replace_only]
    if not drained:
        return results
    wait = settle(time.time())
    if slurm.deadline is None or time.monotonic() + wait + MIN_CALL < slurm.deadline:
        time.sleep(wait)         # every drain that sorts ahead of ours is visible after it
    try:
        view = cluster_view(slurm, cfg.reason_prefix)
        why = step_back(view, node, cfg.policy)
        if why:
            _step_back(slurm, view, node, drained[0].action.cause)
    except SlurmError:
        return results          # the drain stands; the next run re-reads
    if not why:
        return results
    state.save("breaker", {"open": True, "why": why, "at": time.time()})
    return [ActionResult(r.action, Outcome.HELD, why, code=Code.BREAKER) if r in drained else r for r in results]


def _step_back(slurm, view, node: str, keep: str = "") -> None:
    """Resume our own drain, emptying the cause it recorded in the same update; `keep`:
    a cause naming the node's suspect mounts, which stays for the others to read
    (decide/outage.py): a node that stepped back is still a witness of the outage."""
    from ..core.reason import is_our_cause, read_cause, without_our_cause
    from ..slurm.api import CAUSE_FIELD
    text = view.infos.get(node, {}).get(CAUSE_FIELD, "")
    keep = keep if (read_cause(keep) or {}).get("mounts") else ""
    if is_our_cause(text) or keep:
        slurm.release(node, "RESUME", f"{keep} {without_our_cause(text)}".strip())
    else:
        slurm.resume(node)


# --- recovery without a reboot (act/recovery.py) --------------------------------------------
def _may_recover(cfg: Config, actions: list, findings: list[Finding]) -> bool:
    if not any(fs.recover.method != "none" for fs in cfg.filesystems):
        return False
    return any(a.kind == "reboot" for a in actions) or any(
        f.severity == FAIL and has_role(f.check, MOUNT_PROBE) for f in findings)


def _recoverable(cfg: Config) -> dict:
    """mountpoint -> Recovery for each configured mount with `recover` on, as mounted now
    (mountinfo only); never a user's FUSE mount, nor one below it."""
    from ..checks.filesystem import fs_timeout
    from ..core.model import Recovery
    from ..host.mounts import MountTable
    table = MountTable.current()
    out = {}
    for fs in cfg.filesystems:
        r = fs.recover
        if r.method == "none":
            continue
        m = table.at(fs.mountpoint) if fs.mountpoint else table.holding(fs.path)
        if m is not None and table.user_owner(m) is not None:
            continue
        # A mount that is gone (detached by a recovery whose remount failed) still has
        # its entry: what was tried on it decides about the reboot.
        point = m.mountpoint if m is not None else (fs.mountpoint or fs.path)
        out[point] = Recovery(mountpoint=point, dev=m.dev if m is not None else "", method=r.method,
                              command=list(r.command), remount=list(r.remount), wait=r.wait,
                              timeout=fs_timeout(cfg, fs), probe=fs.path, probe_mode=fs.mode)
    return out


def _recover(cfg: Config, node: str, actions: list, slurm, state: StateStore, ledger: dict,
             dry_run: bool, report_only: bool, drain: dict, until: float | None = None) -> list:
    """Carry out the recoveries policy asked for (each once per incident), then resume
    the node and tell the jobs when one freed everything and the mount is back."""
    from ..core.model import Action
    from ..core.outcomes import Code, Outcome
    from ..host.runner import Runner
    from . import recovery
    from .actions import execute
    out: list[ActionResult] = []
    for a in actions:
        if any(k in ledger for k in a.keys):
            out.append(ActionResult(a, Outcome.SKIPPED, "already tried for this incident", code=Code.ALREADY_DONE))
            continue
        if report_only or dry_run:
            out.append(ActionResult(a, Outcome.REPORT_ONLY if report_only else Outcome.DRY_RUN,
                                    "report only (actions.report_only): not done" if report_only
                                    else "dry run: not done",
                                    code=Code.REPORT_ONLY if report_only else Code.DRY_RUN))
            continue
        r = a.recovery
        # (actions.requeue_job off: the site lets such jobs end as they end.)
        waiting = [j for j in r.jobs if cfg.actions.requeue_job and not _job_handled(ledger, j)]
        if waiting:
            # Jobs first: the abort or force-unmount fails every call it frees, and a
            # job whose task dies of it before Slurm requeued it ends FAILED.
            out.append(ActionResult(a, Outcome.FAILED, f"not started: job {', '.join(waiting)} has a task waiting on "
                                    f"{r.mountpoint} and was not requeued or ended yet; the next run recovers",
                                    retry=False, code=Code.JOBS_FIRST))
            continue
        # Inside the run's action deadline (slurmd kills the health check at 60 s): a
        # recovery that cannot fit is left whole for the next run, never cut short.
        need = 4 * r.timeout + r.wait      # method, detach, remount, probe: each its deadline
        if until is not None and until - time.monotonic() < need:
            out.append(ActionResult(a, Outcome.FAILED, f"not started: {need:g}s needed, less left in this run "
                                    "(actions.deadline); the next run tries", retry=False, code=Code.OUT_OF_TIME))
            continue
        runner = Runner(state)
        # Our own probes stuck on the mount must go as well.
        r.probes = [[int(e["pid"]), int(e["start"])] for k, e in runner.stuck().items()
                    if k == f"filesystem:{r.probe}" and "pid" in e and "start" in e]
        # The probe gets a runner of its own: the registry above was read while the
        # stuck probes still lived, and they are gone now.
        done = recovery.recover(r, runner, lambda: _probe(Runner(state), r, node))
        now = time.time()
        # By incident (once per incident) and by mount (what a later run's probe of it
        # decides on: recovered, or tried and the reboot follows).
        for k in a.keys + [f"recover:{node}:{r.mountpoint}"]:
            ledger[k] = {"done": now, "seen": now, "recovered": done.recovered}
        out.append(ActionResult(a, Outcome.DONE, done.summary(r),
                                code=Code.RECOVERED if done.recovered else Code.NOT_RECOVERED))
        if slurm is None:
            continue
        note = f"{cfg.reason_prefix} node {node}: {done.summary(r)}"
        # Its own incident key: the diagnosis was recorded on the job already, this is news.
        told = "+".join(f"{i}/recovery" for i in (a.incident or r.mountpoint).split("+"))
        follow = [Action("comment", node=node, job=j, text=note, incident=told, ran_here=True)
                  for j in r.jobs]
        if done.recovered:
            follow.insert(0, Action("resume", node=node, reason=str(drain.get("reason", ""))))
        out += execute(follow, slurm, cfg.reason_prefix, dry_run, ledger)
    return out


def _job_handled(ledger: dict, job: str) -> bool:
    """A requeue or cancel of the job was done (or found it not requeueable), in this run
    or an earlier one: the ledger's job actions are keyed KIND:JOB:INCIDENT."""
    return any(k.startswith((f"requeue:{job}:", f"cancel:{job}:")) for k in ledger)


def _probe(runner, r, node: str) -> tuple[bool, str]:
    from ..checks.filesystem import probe_read, probe_write
    from ..host.runner import DONE, Task
    key = f"filesystem:{r.probe}"
    task = (Task(key, probe_write, (r.probe, 4096, node), r.timeout) if r.probe_mode == "write"
            else Task(key, probe_read, (r.probe,), r.timeout))
    o = runner.run([task])[key]
    if o.status == DONE and isinstance(o.value, dict) and o.value.get("ok"):
        return True, f"ok in {float(o.value.get('latency', 0)):.2f}s"
    if o.status == DONE and isinstance(o.value, dict):
        return False, f"{o.value.get('step', '?')} failed: {o.value.get('errno', '')} {o.value.get('message', '')}".strip()
    return False, f"{o.status}" + (f" at {o.step}" if o.step else "")


def drain_record(drain: dict, results, findings: list[Finding], node: str) -> dict:
    """Our local note of why we drained this node (for auto-resume)."""
    from ..core.outcomes import Code, Outcome
    # The mount a stuck task held came back without a reboot: the drain for it may be
    # resumed as any resumable one is (at once, or after passing runs).
    if any(r.action.kind == "recover" and r.code == Code.RECOVERED for r in results):
        if any(r.action.kind == "resume" and r.outcome == Outcome.DONE for r in results):
            return {}
        return dict(drain, resumable=True) if drain else drain
    for r in results:
        a = r.action
        if a.kind == "drain" and a.node == node and (r.outcome == Outcome.DONE or r.code == Code.ALREADY_DRAINED):
            failing = [f for f in findings if f.severity == FAIL]
            resumable = all(f.resumable for f in failing) and bool(failing)
            keep = drain if drain.get("reason") == a.reason else {}
            # Since when the node is out of service: a re-worded reason of ours does not
            # put it back in service, so the drain's own time stays.
            return {"reason": a.reason, "resumable": resumable and keep.get("resumable", True),
                    "passes": 0, "at": drain.get("at") or time.time()}
        if a.kind == "drain" and r.code == Code.FOREIGN_DRAIN:
            return {}          # an admin's drain now: not ours to resume
        if a.kind == "resume" and r.outcome in (Outcome.DONE, Outcome.SKIPPED):
            return {}
    return drain


