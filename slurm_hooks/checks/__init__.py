"""Checks: one module per check, each behind the same small interface.

A check is a class with a `name` and two methods:

    tasks(ctx) -> list[runner.Task]
        Work that may block on a suspect resource (a filesystem, the GPU driver). The
        framework runs the tasks of every check at once in hang-safe children, so the
        whole run is as long as the slowest deadline, not the sum of them.
    findings(ctx, outcomes) -> list[Finding]
        Turns the task outcomes (and safe reads done in the parent) into findings.

Checks never spawn processes themselves and never talk to Slurm or write the journal:
they can run alone (`slurm-hooks check NAME`) with no side effects. The framework times
every check the same way and turns a crashing check into a finding, not a crash.
"""
from __future__ import annotations

import time

from ..model import WARN, CheckRun, Finding

# name -> module. Modules are imported only when their check runs, to keep the
# health check's start-up cost down.
REGISTRY = {
    "filesystem": "slurm_hooks.checks.filesystem",
    "stuck_tasks": "slurm_hooks.checks.stuck_tasks",
    "gpu": "slurm_hooks.checks.gpu",
    "leftovers": "slurm_hooks.checks.leftovers",
}


class Context:
    """What a check may read: configuration, node identity, mounts, local state."""

    def __init__(self, config, node: str, state, runner, hook: str = "check", job=None,
                 fs_timeout: float | None = None):
        self.config = config
        self.node = node
        self.state = state
        self.runner = runner
        self.hook = hook             # check, healthcheck, prolog or epilog
        self.job = job               # hooks.JobInfo in the prolog and epilog
        self.fs_timeout = fs_timeout  # a hook's shorter filesystem deadline
        self.notes: list[str] = []   # things a reader of the report should know
        self._mounts = None

    @property
    def mounts(self):
        if self._mounts is None:
            from ..mounts import MountTable
            self._mounts = MountTable.current()
        return self._mounts


def load(name: str):
    try:
        # __import__ rather than importlib.import_module: importlib imports warnings.
        module = __import__(REGISTRY[name], fromlist=["CHECK"])
    except KeyError:
        raise ValueError(f"unknown check {name!r}; known: {', '.join(sorted(REGISTRY))}") from None
    return module.CHECK()


def run_checks(ctx: Context, names: list[str]) -> list[CheckRun]:
    checks, spent, errors = [], {}, {}
    batch = None
    for name in names:
        t0 = time.monotonic()
        check = load(name)
        checks.append(check)
        try:
            tasks = check.tasks(ctx)
        except Exception:
            errors[name] = _trace()
            tasks = []
        if tasks:
            # Started at once: the next checks' own work (the /proc scan) then overlaps
            # these children, which mostly wait on the kernel (an fsync, the driver).
            batch = ctx.runner.start(tasks, batch)
        spent[name] = time.monotonic() - t0

    outcomes = ctx.runner.collect(batch) if batch is not None else {}

    runs = []
    for check in checks:
        t0 = time.monotonic()
        findings: list[Finding] = []
        error = errors.get(check.name)
        if error is None:
            try:
                findings = check.findings(ctx, outcomes)
            except Exception:
                error = _trace()
        if error is not None:
            last = error.strip().splitlines()[-1]
            # A bug in a check must not drain nodes: report it loudly, act on nothing.
            findings.append(Finding(check=check.name, target=check.name, status="unknown",
                                    severity=WARN, summary=f"{check.name} check crashed: {last}",
                                    detail=error))
        task_time = max((o.elapsed for k, o in outcomes.items()
                         if k.startswith(check.name + ":")), default=0.0)
        runs.append(CheckRun(name=check.name, findings=findings,
                             seconds=spent[check.name] + time.monotonic() - t0 + task_time,
                             error=error))
    return runs


def _trace() -> str:
    import traceback
    return traceback.format_exc(limit=3)
