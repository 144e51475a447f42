"""Carrying out what a mount's incident asks (decide/mount_incident.py): the word this
node gives the others in its Comment, the health-check interval the scope waits for,
and the mount's recovery once Slurm says its jobs are gone.

Called by act/actuation.py, which owns the run's state files; nothing here decides.
"""
from __future__ import annotations

import time

from .. import TYPE_CHECKING
from ..core.model import ActionResult

if TYPE_CHECKING:
    from ..checks._config import Config
    from ..core.state import StateStore

# Where the health check keeps what it learned of Slurm's own settings (once a day).
SLURM_CONFIG = "slurm-config"
SLURM_CONFIG_KEEP = 86400.0
# With no HealthCheckInterval of Slurm's (0: slurmd runs none) and none set.
DEFAULT_INTERVAL = 60.0
# How long after this node's last word another node may still be counting on it: two
# intervals, and a run's own length (a probe's deadline, the Slurm calls) on top.
FRESH_SLACK = 15.0


def node_devs(cfg: Config) -> frozenset[str]:
    """The devices of the mounts the site marks as this node's own (`scope: node`): the
    configured `mountpoint`, else the mount that holds the path, from our own mount
    table (never a stat of a path that may hang). By device, as a recovery finds its
    mount: a task's namespace may show the same mount at another path."""
    marked = [fs for fs in cfg.filesystems if fs.scope == "node"]
    if not marked:
        return frozenset()
    from ..host.mounts import MountTable
    table = MountTable.current()
    found = [table.at(fs.mountpoint) if fs.mountpoint else table.holding(fs.path) for fs in marked]
    return frozenset(m.dev for m in found if m is not None and m.dev)


def interval(cfg: Config, state: StateStore) -> float:
    """One health-check interval: `outage.interval`, else slurmd's HealthCheckInterval
    as slurm.conf says it (slurm/conffile.py: no RPC; read once a day, kept in state),
    else DEFAULT_INTERVAL."""
    if cfg.outage.interval:
        return float(cfg.outage.interval)
    value = slurm_config(cfg, state).get("health_check_interval")
    return float(value) if isinstance(value, (int, float)) and value > 0 else DEFAULT_INTERVAL


def slurm_config(cfg: Config, state: StateStore) -> dict:
    """What slurm.conf says that slurm-hooks waits by (slurm/conffile.py: no RPC), read
    once a day and kept in state: health_check_interval (None: unreadable) and
    requeue_holds (the lengths of Slurm's requeue hold)."""
    saved = state.load(SLURM_CONFIG)
    now = time.time()
    if now - float(saved.get("at") or 0) >= SLURM_CONFIG_KEEP or "requeue_holds" not in saved:
        from ..host.runner import Runner
        from ..slurm.conffile import CRED_EXPIRE, interval_of, read_settings, requeue_holds
        found = read_settings(cfg.slurm.conf, Runner(state))
        saved = {"at": now, "health_check_interval": None if found is None else interval_of(found),
                 "requeue_holds": [CRED_EXPIRE] if found is None else requeue_holds(found)}
        state.save(SLURM_CONFIG, saved)
    return saved


def fresh_for(every: float) -> float:
    return 2 * every + FRESH_SLACK


def refresh_after(every: float) -> float:
    """How old this node's word may grow before its run writes it again: a little over
    one interval, so that every second run writes it (one update for two runs, not one
    each) and the others' reads still find it fresh: the run after next writes it at two
    intervals and the run's own length, within fresh_for."""
    return every + FRESH_SLACK / 3


def publish(node: str, entries: list, was: bool, results: list, held: list, actions: list, view, slurm,
            drained: bool, now: float, refresh: float) -> bool:
    """Make this node's word on its mounts (`entries`) the one its Comment holds; True
    while the Comment names mounts. A drain of ours that went through this run said it
    in its own update; otherwise the Comment is written when the word changed or grew
    older than `refresh` (another node counts it only while fresh), naming `held` while
    the breaker holds the node's drain back. Once nothing is named, a node not drained
    by us takes its word out again (a drain of ours takes it out with its resume)."""
    from ..core.outcomes import Outcome
    from ..core.reason import cause_with, is_our_cause, our_cause, without_our_cause
    from ..decide.mount_incident import needs_refresh, published
    from ..slurm.api import CAUSE_FIELD, SlurmError, node_is_drained
    if slurm is None:
        return was
    if any(r.action.kind == "drain" and r.action.node == node and r.outcome == Outcome.DONE and r.action.cause
           for r in results):
        return bool(entries)
    try:
        if view is not None and node in view.infos:
            info = view.infos[node]
            comment = info.get(CAUSE_FIELD, "")
            current = published(info)
            if not needs_refresh(current, entries, now, refresh):
                return bool(entries)
            drain = next((a for a in actions + [a for a, _ in held] if a.kind == "drain" and a.cause), None)
            ours = (drain.cause if drain is not None else "") or our_cause(comment)
            if not ours:
                return was           # no drain of ours to name them with (actions.drain off)
            text = f"{cause_with(ours, entries, held=not drained)} {without_our_cause(comment)}".strip()
            slurm.set_node_comment(node, text)
            return bool(entries)
        if not entries and was and not drained:
            info = slurm.node_state(node) or {}
            text = info.get(CAUSE_FIELD, "")
            if is_our_cause(text) and not node_is_drained(info):
                slurm.set_node_comment(node, without_our_cause(text))
            return False
    except SlurmError:
        return was
    return was if entries else False


# --- the mount's recovery --------------------------------------------------------------
def recoverable(cfg: Config) -> dict:
    """mountpoint -> Recovery for each configured mount with `recover` on (a method, or
    a remount for a dead mount), as mounted now (mountinfo only); never a user's FUSE
    mount, nor one below it."""
    from ..checks.filesystem import fs_timeout
    from ..core.model import Recovery
    from ..host.mounts import MountTable
    table = MountTable.current()
    out = {}
    for fs in cfg.filesystems:
        r = fs.recover
        if r.method == "none" and not r.remount:
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


def recover(cfg: Config, node: str, actions: list, slurm, state: StateStore, ledger: dict,
            dry_run: bool, report_only: bool, drain: dict, until: float | None = None) -> list:
    """Carry out the recoveries asked for (each once per incident), then resume the
    node and tell the jobs when one freed everything and the mount is back."""
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
        # Jobs first, by Slurm's word (actions.requeue_job off: the site lets such jobs
        # end as they end): the abort or force-unmount fails every call it frees, and a
        # job whose task dies of it while it runs here ends FAILED. A job that cannot be
        # requeued keeps the mount as it is until it ends.
        waiting = [j for j in r.jobs if cfg.actions.requeue_job and _runs_here(slurm, j, node)]
        # A job whose task this run could not place may be on the mount too: the
        # recovery waits for it as well.
        unsure = [j for j in r.unplaced if j not in r.jobs and cfg.actions.requeue_job and _runs_here(slurm, j, node)]
        if waiting or unsure:
            said = [f"job {', '.join(waiting)} still runs here with a task waiting on {r.mountpoint}"] if waiting else []
            if unsure:
                said.append(f"job {', '.join(unsure)} still runs here with a task this run could not place "
                            f"(it may wait on {r.mountpoint})")
            out.append(ActionResult(a, Outcome.FAILED, f"not started: Slurm says {'; '.join(said)}; the recovery "
                                    "waits until it is requeued or ended", retry=False, code=Code.JOBS_FIRST))
            continue
        # Inside the run's action deadline (slurmd kills the health check at 60 s): a
        # recovery that cannot fit is left whole for the next run, never cut short.
        need = (3 if r.dead else 4) * r.timeout + (0 if r.dead else r.wait)
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
        # By incident (once per incident) and, for a hang, by mount (what a later run's
        # probe of it decides on: recovered, or tried and the reboot follows).
        for k in a.keys + ([] if r.dead else [f"recover:{node}:{r.mountpoint}"]):
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
            follow.insert(0, Action("resume", node=node, reason=str(drain.get("reason", "")),
                                    down_ours=bool(drain.get("released"))))
        out += execute(follow, slurm, cfg.reason_prefix, dry_run, ledger)
    return out


def _runs_here(slurm, job: str, node: str) -> bool:
    """Does Slurm say the job still runs on this node (not requeued, ended, or being
    killed)? Where Slurm cannot say, it is taken to run: the recovery waits."""
    from ..slurm.api import SlurmError
    from .actions import job_runs_here
    if slurm is None:
        return True
    try:
        return bool(job_runs_here(slurm, job, node))
    except SlurmError:
        return True


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
