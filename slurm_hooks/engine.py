"""The run pipeline: checks -> correlation -> actuation -> the run's record.

`run()` runs the checks of one hook in hang-safe children, joins findings that explain
each other, and (for a hook that acts) hands the findings to actuation.py, which owns
the policy around Slurm: hysteresis, breaker, spool, ledger. Checks and policy save
into a staged state store; the run commits it only when it is a real health check,
prolog or epilog (`check` and `--dry-run` change nothing). The record it returns goes
to the sinks (sinks.py) from the entry points (cli.py, hooks.py).
"""
from __future__ import annotations

import os
import time

from . import __version__
from .checks import Context, for_hook, run_checks
from .model import FAIL, OK, WARN, ActionResult, CheckRun, Finding, worst
from .records import dataclass, field

TYPE_CHECKING = False          # not typing's: importing typing costs milliseconds
if TYPE_CHECKING:
    from .config import Config

HEALTHY, WARNING, UNHEALTHY = "healthy", "warning", "unhealthy"
STATUS_OF = {OK: HEALTHY, WARN: WARNING, FAIL: UNHEALTHY}
# The runs whose decisions are kept: a look (`check`) or a dry run keeps nothing.
COMMITTING = ("healthcheck", "prolog", "epilog")


@dataclass
class RunRecord:
    hook: str
    node: str
    config: str
    started: float
    duration: float = 0.0
    checks: list[CheckRun] = field(default_factory=list)
    actions: list[ActionResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dry_run: bool = False
    report_only: bool = False      # actions.report_only on a run that acts: nothing it decides is done
    job: str | None = None         # the job a prolog or epilog ran for
    # slurm-hooks' own local failures (errors.py): state, journal, lock, metrics, config
    # cache. Never a finding about the node: they drain nothing and fail no job.
    local_errors: list[str] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        return [f for c in self.checks for f in c.findings]

    @property
    def status(self) -> str:
        status = STATUS_OF[worst(f.severity for f in self.findings)]
        # Our own failure is reported as a warning of the run itself, never as more.
        return WARNING if status == HEALTHY and self.local_errors else status

    def exit_code(self) -> int:
        return 1 if self.status == UNHEALTHY else 0

    def to_json(self) -> dict:
        return {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
            "hook": self.hook, "node": self.node, "status": self.status,
            "duration": round(self.duration, 6), "version": __version__,
            "config": self.config, "dry_run": self.dry_run, "report_only": self.report_only, "job": self.job,
            "checks": [c.to_json() for c in self.checks],
            "actions": [a.to_json() for a in self.actions],
            "notes": self.notes, "warnings": self.warnings, "local_errors": self.local_errors,
        }


def node_name(cfg: Config) -> str:
    """$SLURMD_NODENAME (set by slurmd for every hook), else the configured name, else
    the short hostname. An explicit setting beats the hostname: an admin who wrote it
    knows the Slurm name better than a guess does."""
    return (os.environ.get("SLURMD_NODENAME") or cfg.node_name
            or os.uname().nodename.split(".", 1)[0])


def state_dir(cfg: Config, node: str) -> str:
    # One directory per node name: several slurmd (-N) on one host keep apart.
    return os.path.join(cfg.state_dir, node)


def run_locked(cfg: Config, hook: str, lock_timeout: float, **kw) -> RunRecord:
    """run() under the hook's lock on this node. Raises lock.Busy when another run
    holds it; an unusable lock file is our own local failure: run anyway, report it."""
    from .lock import HookLock, LockError
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
    from .runner import PYSPY_STATE, Runner, reap_finished
    from .state import StateStore

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
                       report_only=act and not dry_run and cfg.actions.report_only,
                       job=job.id if job else None)
    beside = None
    if hook == "healthcheck" and cfg.beside.command and not dry_run:   # it would act on its own
        from .beside import Beside
        beside = Beside(cfg.beside, ctx.runner)      # runs alongside our own checks
    record.checks = run_checks(ctx, names or for_hook(hook))
    _correlate(record.checks)
    others_failing = None
    if beside is not None:
        others_failing = beside.finish(ctx.notes)
    from .reason import printable
    record.notes = [printable(n) for n in ctx.notes]
    if act:
        from .actuation import take_actions
        record.actions = take_actions(cfg, node, record.findings, dry_run, state, hook, started=t0,
                                      others_failing=others_failing, notes=record.notes)
    reap_finished()
    if hook in COMMITTING and not dry_run:
        state.commit()
    record.warnings = state.warnings + children.warnings
    record.local_errors = state.errors + children.errors
    if cfg.cache_error:
        record.local_errors.append(cfg.cache_error)
    record.duration = time.monotonic() - t0
    return record


def _correlate(runs: list[CheckRun]) -> None:
    """Join findings of different checks that explain each other (correlate.py)."""
    from .correlate import correlate
    everything = [f for c in runs for f in c.findings]
    kept = {id(f) for f in correlate(everything)}
    for c in runs:
        c.findings = [f for f in c.findings if id(f) in kept]
