"""The run pipeline: checks -> correlation -> actuation -> the run's record.

`run()` runs the checks of one hook in hang-safe children, joins findings that explain
each other, and (for a hook that acts) hands the findings to act/actuation.py, which owns
the policy around Slurm: hysteresis, breaker, spool, ledger. Checks and policy save
into a staged state store; the run commits it only when it is a real health check,
prolog or epilog (`check` and `--dry-run` change nothing). The record it returns goes
to the sinks (sinks/record.py) from the entry points (cli.py, run/hooks.py).
"""
from __future__ import annotations

import os
import time

from .. import TYPE_CHECKING
from ..checks import Context, for_hook, run_checks
from ..core.config import node_name
from ..core.model import OK, CheckRun, RunRecord
from ..core.state import state_dir

if TYPE_CHECKING:
    from ..checks._config import Config

def run_locked(cfg: Config, hook: str, lock_timeout: float, **kw) -> RunRecord:
    """run() under the hook's lock on this node. Raises lock.Busy when another run
    holds it; an unusable lock file is our own local failure: run anyway, report it."""
    from ..core.lock import HookLock, LockError
    lock = HookLock(os.path.join(state_dir(cfg, node_name(cfg)), f"{hook}.lock"), lock_timeout)
    try:
        lock.__enter__()
    except LockError as e:
        record = run(cfg, hook, **kw)
        record.local_errors.insert(0, str(e))
        return record
    try:
        return run(cfg, hook, **kw)
    finally:
        lock.__exit__(None, None, None)


def run(cfg: Config, hook: str, names: list[str] | None = None, act: bool = False,
        dry_run: bool = False, job=None, fs_timeout: float | None = None) -> RunRecord:
    from ..core.state import StateStore
    from ..host.runner import PYSPY_STATE, Runner, reap_finished

    started = time.time()
    t0 = time.monotonic()
    node = node_name(cfg)
    directory = state_dir(cfg, node)
    # Checks and policy save into a staged store: what they would keep. Only a real run
    # commits it; `check` and --dry-run leave the node's state as it was. The runner's
    # record of its own stuck children is the exception: it is a fact about processes
    # this run left behind, and forgetting it would start a second stuck probe.
    state = StateStore(directory, staged=True)
    children = StateStore(directory)
    # job-report's py-spy children stuck in the kernel are ours too: never a job's stuck task.
    ctx = Context(cfg, node, state, Runner(children, others=(PYSPY_STATE,)), hook=hook, job=job,
                  fs_timeout=fs_timeout)
    record = RunRecord(hook=hook, node=node, config=cfg.source, started=started, dry_run=dry_run,
                       report_only=act and cfg.actions.report_only,
                       job=job.id if job else None)
    beside = None
    if ctx.behaviour.tends_node and cfg.beside.command and not dry_run:   # it would act on its own
        from .beside import Beside
        beside = Beside(cfg.beside, ctx.runner)      # runs alongside our own checks
    # site_checks.entry_points is read here, before any other package's check is found,
    # let alone imported: off, a named one is refused (cli.py) and none runs.
    record.checks = run_checks(ctx, names or for_hook(hook, cfg))
    _correlate(record.checks)
    others_failing = None
    if beside is not None:
        others_failing = beside.finish(ctx.notes)
    from ..core.reason import printable
    record.notes = [printable(n) for n in ctx.notes]
    if act:
        from ..act.actuation import take_actions
        record.actions = take_actions(cfg, node, record.findings, dry_run, state, hook, started=t0,
                                      others_failing=others_failing, notes=record.notes, picture=_job_picture)
    reap_finished()
    if ctx.behaviour.commits and not dry_run:
        state.commit()
    record.notes += [n for n in state.notes if n not in record.notes]
    record.warnings = state.warnings + children.warnings
    record.local_errors = state.errors + children.errors
    if cfg.cache_error:
        record.local_errors.append(cfg.cache_error)
    record.duration = time.monotonic() - t0
    return record


def _correlate(runs: list[CheckRun]) -> None:
    """Join findings of different checks that explain each other (decide/correlate.py).
    What explains what is a problem (a warning or a failure): a run of nothing but OK
    findings has nothing to join, and a healthy run does not import the joiners."""
    everything = [f for c in runs for f in c.findings]
    if all(f.severity == OK for f in everything):
        return
    from ..decide.correlate import correlate
    kept = {id(f) for f in correlate(everything)}
    for c in runs:
        c.findings = [f for f in c.findings if id(f) in kept]


def _job_picture(cfg: Config, job: str, timeout: float) -> str:
    # Imported only when a job is about to be requeued: never on the healthy path.
    from ..views.diagnose import capture
    return capture(cfg, job, timeout)
