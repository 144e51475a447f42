"""The prolog and the epilog, as Slurm runs them.

Prolog (`slurm-hooks-prolog`): fast checks before the job starts: the filesystems (with
the hook's short deadline) and the GPUs allocated to the job, free of leftovers. On a
failure it exits non-zero: that is Slurm's own contract, and Slurm drains the node
("Prolog error") and requeues a batch job (held, unless SchedulerParameters has
nohold_on_prolog_fail) or cancels an srun/salloc or --no-requeue job. The precise
reason is recorded locally at once. Slurm's guide says a prolog or epilog should not
call Slurm commands, so nothing polls: a detached helper asks Slurm once, after a
back-off (`reason_delay`), about this one node and replaces the generic reason; if
Slurm had not drained it by then, the next health check does it.

Epilog (`slurm-hooks-epilog`): after the job: its processes still alive (stuck in D),
GPU memory still held with no process, the filesystems. A sick node is drained at once,
before the epilog returns, so the next job cannot land there; once slurmctld has taken
the drain (or the node was drained already, by Slurm after a failed prolog or by an
admin) the epilog exits 0. Only if slurmctld does not take it, the epilog exits non-zero
so that Slurm drains the node itself ("Epilog error"), and the helper and the next
health check put the precise reason in place. The epilog never reads the whole node
list: the drain-storm breaker is honoured from the health checks' latest view. Slurm
runs no epilog while a step of the job cannot be killed; the health check is what names
that task (over Slurm's "Kill task failed").

With `actions.report_only`, neither hook ever exits non-zero: a failing prolog would
make Slurm drain the node and requeue the job, which is an action.

Configuration errors never fail a job: a prolog or epilog that cannot read its
configuration runs no check, says so (stderr, which slurmd logs, and the journal) and
exits 0. A broken file pushed to every node must not drain the whole cluster.
"""
from __future__ import annotations

import os
import sys
import time

from .. import TYPE_CHECKING
from ..core.behaviour import behaviour
from ..core.config import node_name
from ..core.model import FAIL, UNHEALTHY, JobInfo, RunRecord
from ..core.state import state_dir
from . import engine

if TYPE_CHECKING:
    from ..checks._config import Config


def run_hook(cfg: Config, hook: str, dry_run: bool = False, as_json: bool = False) -> int:
    """The prolog or epilog. Our own local failure (state, journal, lock, metrics,
    configuration cache: core/errors.py) never fails the job: reported, then exit 0."""
    from ..core.errors import LocalError
    from ..sinks.record import report_local
    try:
        return _run_hook(cfg, hook, dry_run, as_json)
    except (LocalError, OSError) as e:
        report_local(cfg, hook, [f"{e}; no job held up"])
        return 0


def _run_hook(cfg: Config, hook: str, dry_run: bool, as_json: bool) -> int:
    from ..core.lock import Busy
    from ..sinks.record import record_and_show
    hook_cfg = getattr(cfg, hook)
    if not hook_cfg.enabled:
        return 0
    node = node_name(cfg)
    job = JobInfo.from_env(os.environ)
    try:
        record = engine.run_locked(cfg, hook, hook_cfg.lock_timeout, act=True,
                                   dry_run=dry_run, job=job, fs_timeout=hook_cfg.fs_timeout)
    except Busy as e:
        print(f"slurm-hooks {hook}: {e}; not checking this time", file=sys.stderr)
        return 0
    failed = record.status == UNHEALTHY
    if failed or record.actions:
        # Not on the healthy path: the enumerations cost milliseconds to build.
        from ..core.outcomes import Outcome
    drain = next((r for r in record.actions if r.action.kind == "drain"), None)
    if failed and cfg.actions.report_only:
        failed = False      # report only: no exit status that makes Slurm act
    if failed and drain is not None and drain.outcome == Outcome.HELD:
        failed = False      # the drain-storm breaker: report loudly, fail no job
    if failed and drain is not None and not dry_run:
        _after_failure(cfg, hook, node, job, record, drain)
    record_and_show(cfg, record, as_json)
    if not failed:
        return 0
    if behaviour(hook).drains_before_exit and drain is not None:
        if drain.outcome in (Outcome.DONE, Outcome.SKIPPED):
            # slurmctld answered and the node is out of service (by us, or already by Slurm
            # or an admin): a failing exit would only add Slurm's generic drain on top.
            return 0
        print(f"slurm-hooks {hook}: the drain did not go through ({drain.message or drain.code}); "
              "exit 1 so that Slurm drains the node itself", file=sys.stderr)
    return 1


def _after_failure(cfg: Config, hook: str, node: str, job, record: RunRecord, drain) -> None:
    """Keep the precise reason locally, and have it replace Slurm's generic one."""
    from ..act.actuation import remember_hook_failure
    from ..core.outcomes import Outcome
    from ..core.state import StateStore
    from ..host.runner import spawn_detached
    state = StateStore(state_dir(cfg, node))
    reason = drain.action.reason
    failing = [f for f in record.findings if f.severity == FAIL]
    remember_hook_failure(state, behaviour(hook), reason, drain.action.cause, job.id if job else None,
                          all(f.resumable for f in failing))
    record.local_errors += state.errors
    if behaviour(hook).acts_by_exit or drain.outcome not in (Outcome.DONE, Outcome.SKIPPED):
        spawn_detached(fix_reason, cfg, node, reason, behaviour(hook).generic_reason, getattr(cfg, hook).reason_delay,
                       drain.action.cause, hook)


def fix_reason(cfg: Config, node: str, reason: str, replaces: str, delay: float, cause: str = "",
               hook: str = "") -> None:
    """In a detached helper: after a back-off, ask Slurm once about this node and put
    the precise reason in place of its generic one. No polling, no node list (Slurm's
    prolog/epilog guide). If Slurm has not drained the node by then, the next health
    check replaces the reason when it has (the hook-failure record stays)."""
    from ..act.actions import execute
    from ..core.model import Action
    from ..core.outcomes import Code, Outcome
    from ..core.state import StateStore
    from ..slurm.connect import open_backend
    time.sleep(delay)
    slurm = open_backend(cfg.slurm, deadline=time.monotonic() + cfg.actions.deadline)
    action = Action("drain", node=node, reason=reason, replaces=replaces, replace_only=True, cause=cause)
    [result] = execute([action], slurm, cfg.reason_prefix, dry_run=False)
    _journal_followup(cfg, node, hook, result)
    if result.outcome in (Outcome.DONE, Outcome.SKIPPED) and result.code != Code.NOTHING_TO_REPLACE:
        state = StateStore(state_dir(cfg, node))
        try:
            os.unlink(state.path("hook-failure"))
        except OSError:
            pass


def _journal_followup(cfg: Config, node: str, hook: str, result) -> None:
    """The helper's re-wording in the journal, as an action line of the hook it follows
    (`followup`): explain shows it among the actions for the drain."""
    from ..sinks import journal
    line = dict(result.to_json(), event="action", time=time.strftime("%Y-%m-%dT%H:%M:%S%z"), node=node, hook=hook,
                followup=True)
    journal.append(cfg.journal, line, max_bytes=cfg.journal_max_bytes, keep=cfg.journal_keep)


def config_error(hook: str, error, path: str | None = None) -> int:
    """A hook that cannot read its configuration checks nothing and fails nothing: said
    on stderr (slurmd logs it), in syslog and in the default journal. Returns the hook's
    exit status for it (Behaviour.config_error_exit)."""
    from ..checks._config import default_config
    from ..core.config import journal_of
    from ..sinks import journal
    from ..sinks.record import report_local
    from ..sinks.syslog import ERR, send
    consequence = behaviour(hook).on_config_error
    print(f"slurm-hooks {hook}: configuration error, {consequence}:\n{error}", file=sys.stderr)
    defaults = default_config()
    send([(ERR, f"{hook}: configuration error, {consequence}: {error}")], defaults.syslog_socket,
         defaults.syslog_facility)
    err = journal.append(journal_of(path), {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "hook": hook,
                                            "node": os.environ.get("SLURMD_NODENAME"),
                                            "status": "config_error", "error": str(error)})
    if err:
        report_local(defaults, hook, [err])
    _config_error_metrics(hook, path)
    return behaviour(hook).config_error_exit


def _config_error_metrics(hook: str, path: str | None) -> None:
    """`slurm_hooks_config_ok 0` in the node's textfile (the directory the broken file
    names plainly, else the default), where the directory is there and safe: the
    health check only, which owns the node's textfile."""
    if not behaviour(hook).writes_metrics:
        return
    from ..core.config import textfile_dir_of
    from ..sinks import metrics
    directory = textfile_dir_of(path)
    if not directory or metrics.directory_problem(directory) is not None:
        return
    import socket
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    metrics.write(directory, node, metrics.render_config_error(node, hook, time.time()))
