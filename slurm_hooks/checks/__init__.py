"""Checks: one module per check, each behind the same small interface (`Check`).

The list of checks lives here, in REGISTRY, and nowhere else: its order is the order
they run in, and each entry says which runs include the check by default (so choosing
the checks of a prolog imports no module it does not run). Each check class declares
the rest itself (`Check` below): the state files it keeps, its Prometheus series and
the evidence `slurm-hooks explain` shows, so sinks/metrics.py and views/explain.py never name a
check.

A check runs in two phases:

    tasks(ctx) -> list[runner.Task]
        Work that may block on a suspect resource (a filesystem, the GPU driver). The
        framework runs the tasks of every check at once in hang-safe children, so the
        whole run is as long as the slowest deadline, not the sum of them.
    findings(ctx, outcomes) -> list[Finding]
        Turns the task outcomes (and safe reads done in the parent) into findings.

Checks never spawn processes themselves, never talk to Slurm's write side and never
write the journal. What they save in `ctx.state` is what they would keep: the store is
staged and the engine commits it only for a real health check, prolog or epilog, so
`slurm-hooks check NAME` and every --dry-run change nothing. The framework times every
check the same way and turns a crashing check into a finding, not a crash.
"""
from __future__ import annotations

import time

from ..core.behaviour import behaviour
from ..core.model import WARN, CheckRun, Finding

TYPE_CHECKING = False          # not typing's: importing typing costs milliseconds
if TYPE_CHECKING:
    from typing import Protocol

    from ..core.config import Config
    from ..core.model import JobInfo
    from ..core.state import StateStore
    from ..host.mounts import MountTable
    from ..host.runner import Outcome, Runner, Task
else:
    Protocol = object          # a plain base at run time: the interface is for readers and mypy

# One Prometheus sample a check contributes: (series, labels besides `node`, value).
Sample = tuple[str, dict, float]


class Check(Protocol):
    """What every check is (node_exporter's collector, GPUd's component)."""
    name: str
    # State files (under state_dir/NODE/) the check keeps between runs.
    state: tuple[str, ...]
    # Its Prometheus series: name -> (type, help).
    series: dict[str, tuple[str, str]]
    # Evidence keys `slurm-hooks explain` shows for its failing findings, in order.
    explain_keys: tuple[str, ...]

    def tasks(self, ctx: Context) -> list[Task]: ...

    def findings(self, ctx: Context, outcomes: dict[str, Outcome]) -> list[Finding]: ...

    @staticmethod
    def samples(findings: list[Finding]) -> list[Sample]:
        """Its Prometheus samples from its findings of one run (no instance needed)."""
        ...


# name -> (module, the runs that include it by default). `check` with no name runs
# the checks marked "check"; a check can always be named.
REGISTRY: dict[str, tuple[str, tuple[str, ...]]] = {
    "filesystem": ("slurm_hooks.checks.filesystem", ("check", "healthcheck", "prolog", "epilog")),
    "stuck_tasks": ("slurm_hooks.checks.stuck_tasks", ("check", "healthcheck")),
    "leftovers": ("slurm_hooks.checks.leftovers", ("epilog",)),
    "gpu": ("slurm_hooks.checks.gpu", ("check", "healthcheck", "prolog", "epilog")),
    "fabric": ("slurm_hooks.checks.fabric", ("check", "healthcheck")),
    # Every run: each of the site's executables says in which runs it takes part.
    "site": ("slurm_hooks.checks.site", ("check", "healthcheck", "prolog", "epilog")),
}


def for_hook(hook: str) -> list[str]:
    """The checks a run of `hook` (check, healthcheck, prolog, epilog) includes; the
    other packages' checks (entry points) after the built-in ones, each of which says
    itself (`hooks`) in which runs it takes part."""
    return [name for name, (_, hooks) in REGISTRY.items() if hook in hooks] + plugins()


def plugins() -> list[str]:
    """Names of the checks other packages register (entry points), built-ins' excepted."""
    from .entry_points import discover
    return [name for name in discover() if name not in REGISTRY]


def names() -> list[str]:
    """Every check: the built-in ones, then the other packages'."""
    return list(REGISTRY) + plugins()


_plugin_classes: dict[str, type] = {}


def check_class(name: str) -> type[Check]:
    if name not in REGISTRY:
        from .entry_points import check_class as plugin_class
        from .entry_points import discover
        found = discover()
        if name in found:
            if name not in _plugin_classes:
                _plugin_classes[name] = plugin_class(name, found[name])
            return _plugin_classes[name]
        raise ValueError(f"unknown check {name!r}; known: {', '.join(sorted(names()))}")
    # __import__ rather than importlib.import_module: importlib imports warnings.
    module = __import__(REGISTRY[name][0], fromlist=["CHECK"])
    return module.CHECK


class Context:
    """What a check may read: configuration, node identity, mounts, local state."""

    def __init__(self, config: Config, node: str, state: StateStore, runner: Runner, hook: str = "check",
                 job: JobInfo | None = None, fs_timeout: float | None = None):
        self.config = config
        self.node = node
        self.state = state
        self.runner = runner
        self.hook = hook             # check, healthcheck, prolog or epilog
        self.behaviour = behaviour(hook)  # what this run may and must do (core/behaviour.py)
        self.job = job               # model.JobInfo in the prolog and epilog
        self.fs_timeout = fs_timeout  # a hook's shorter filesystem deadline
        self.notes: list[str] = []   # things a reader of the report should know
        self._mounts: MountTable | None = None

    @property
    def mounts(self) -> MountTable:
        if self._mounts is None:
            from ..host.mounts import MountTable
            self._mounts = MountTable.current()
        return self._mounts


def load(name: str) -> Check:
    return check_class(name)()


def run_checks(ctx: Context, names: list[str]) -> list[CheckRun]:
    checks: list[Check] = []
    spent: dict[str, float] = {}
    errors: dict[str, str] = {}
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
