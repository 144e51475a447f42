"""Checks: one module per check, each behind the same small interface (`Check`).

There is no list of checks: every public module of this package is one (registry()
below), and declares itself where it runs (`ORDER`) and which runs include it by
default (`HOOKS`), and its configuration section beside its class (`SECTIONS`: key ->
core.config.setting(), validation included; `enabled: auto|true|false` on each; read
back through the module's own `settings()`). Each check class declares the rest itself
(`Check` below): the state files it keeps, its Prometheus series, the evidence
`slurm-hooks explain` shows, what its findings are to decisions (`roles`) and how they
join other checks' (`correlate`), so no module outside this package names a check.
Adding a check is adding its module. Private modules (`_name`) are helpers: the GPU
check's parts, other packages' checks, the assembled configuration (_config.py).

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

import os
import sys
import time

from .. import TYPE_CHECKING
from ..core.behaviour import behaviour
from ..core.model import WARN, CheckRun, Finding

if TYPE_CHECKING:
    from typing import Callable, Protocol

    from ..core.config import Config, Sections
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
    # Where it runs among the checks, and the runs that include it by default (a built-in
    # check's module says both as ORDER and HOOKS).
    order: int
    hooks: tuple[str, ...]
    # What its findings are, for decisions about a kind of finding (core.model's
    # MOUNT_PROBE, STUCK_TASK); most checks have none.
    roles: tuple[str, ...]
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

    # Optional, so not part of the Protocol: `correlate(findings) -> findings`, a
    # staticmethod given every finding of a run in which the check took part; it may
    # join findings of other checks that its own explain (or that explain its own), and
    # returns those that remain (decide/correlate.py).


# The package's check modules are found by listing its directory: a module whose name
# does not start with "_" is a check (helpers are private modules). Each declares, near
# its top and before its first class or function, `ORDER = N` (checks run in ascending
# order) and `HOOKS = (...)` (the runs that include it by default; `check` with no name
# runs those marked "check", a check can always be named). Those two lines are read as
# text, so choosing the checks of a prolog imports no module it does not run; a test
# holds the text to what each module says when imported.
_DIR = __file__.rpartition("/")[0]
_PACKAGE = __name__
_registry: dict[str, tuple[int, tuple[str, ...]]] | None = None


def registry() -> dict[str, tuple[int, tuple[str, ...]]]:
    """name -> (order, hooks) of every built-in check, in the order they run."""
    global _registry
    if _registry is None:
        found = []
        for entry in sorted(os.listdir(_DIR)):
            if entry.endswith(".py") and not entry.startswith("_"):
                got = declared(os.path.join(_DIR, entry))
                # None: not a check (a file an older version left behind, say): never run.
                if got is not None:
                    found.append((got[0], entry[:-3], got[1]))
        _registry = {name: (order, hooks) for order, name, hooks in sorted(found)}
    return _registry


def declared(path: str) -> tuple[int, tuple[str, ...]] | None:
    """A check module's `ORDER` and `HOOKS` lines, read without importing it; None
    for a module that does not declare both."""
    order: int | None = None
    hooks: tuple[str, ...] | None = None
    with open(path, "rb") as f:
        for line in f:
            if line.startswith((b"ORDER = ", b"HOOKS = ")):
                value = line[8:].split(b"#", 1)[0].decode()
                if line[0] == 79:       # "O"
                    order = int(value)
                else:
                    hooks = tuple(p.strip().strip("\"'") for p in value.strip().strip("()").split(",") if p.strip())
                if order is not None and hooks is not None:
                    break
            elif line.startswith((b"class ", b"def ", b"@")):
                break
    if order is None or hooks is None:
        return None
    return order, hooks


def for_hook(hook: str, cfg: Config | None = None) -> list[str]:
    """The checks a run of `hook` (check, healthcheck, prolog, epilog) includes; the
    other packages' checks (entry points) after the built-in ones, each of which says
    itself (`hooks`) in which runs it takes part, unless `cfg` turns them off."""
    return [name for name, (_, hooks) in registry().items() if hook in hooks] + plugins(cfg)


def plugins_on(cfg: Config | None) -> bool:
    """Whether other packages' checks are looked for at all (`site_checks.entry_points`;
    without a configuration, as for the documentation: yes). Read before anything of
    theirs is found or imported: off, none of their code runs as root."""
    return cfg is None or bool(getattr(cfg, "site_checks").entry_points)


def plugins(cfg: Config | None = None) -> list[str]:
    """Names of the checks other packages register (entry points), built-ins' excepted;
    none when `cfg` turns them off."""
    if not plugins_on(cfg):
        return []
    from ._entry_points import discover
    return [name for name in discover() if name not in registry()]


def names(cfg: Config | None = None) -> list[str]:
    """Every check: the built-in ones, then the other packages' (unless `cfg` turns
    them off)."""
    return list(registry()) + plugins(cfg)


_plugin_classes: dict[str, type] = {}


def check_class(name: str) -> type[Check]:
    if name not in registry():
        from ._entry_points import check_class as plugin_class
        from ._entry_points import discover
        found = discover()
        if name in found:
            if name not in _plugin_classes:
                _plugin_classes[name] = plugin_class(name, found[name])
            return _plugin_classes[name]
        raise ValueError(f"unknown check {name!r}; known: {', '.join(sorted(names()))}")
    # __import__ rather than importlib.import_module: importlib imports warnings.
    module = __import__(f"{_PACKAGE}.{name}", fromlist=["CHECK"])
    return module.CHECK


# --- the checks' configuration sections ------------------------------------------------
_sections: dict[str, dict] = {}       # module name -> its SECTIONS


def _module_sections(name: str) -> dict:
    if name not in _sections:
        module = __import__(f"{_PACKAGE}.{name}", fromlist=["SECTIONS"])
        _sections[name] = getattr(module, "SECTIONS", {})
    return _sections[name]


def _find(key: str | None) -> dict:
    """The sections of the check that declares `key` (None: of every check, in order).
    The modules already imported are asked first, and among them one whose name starts
    the key (filesystem: filesystems): a run reads the sections of the checks it runs,
    and imports no other."""
    if key is None:
        out: dict = {}
        for name in registry():
            out.update(_module_sections(name))
        return out
    loaded = sys.modules
    for name in sorted(registry(), key=lambda n: (f"{_PACKAGE}.{n}" not in loaded, not key.startswith(n))):
        found = _module_sections(name)
        if key in found:
            return found
    return {}


def _identity() -> list:
    """Of the modules that declare sections: what changes when one of them is edited."""
    out = []
    for name in registry():
        st = os.stat(os.path.join(_DIR, name + ".py"))
        out.append([name, st.st_mtime_ns, st.st_size])
    return out


_schema: Sections | None = None


def sections() -> Sections:
    """Every check's configuration sections, for core.config's loader."""
    global _schema
    if _schema is None:
        from ..core.config import Sections
        _schema = Sections(_find, _identity)
    return _schema


def has_role(name: str, role: str) -> bool:
    """Whether the built-in check `name` declares `role` (its class's `roles`), so a
    decision about mount probes or stuck tasks names no check. Imports only that check
    (which ran, to have a finding)."""
    return name in registry() and role in getattr(check_class(name), "roles", ())


def joiners(present: set[str]) -> list[Callable[[list[Finding]], list[Finding]]]:
    """The `correlate` of each check among `present` (check names of a run's findings)
    that has one: built-in checks in their order, then other packages' already loaded."""
    out = []
    for name in [n for n in registry() if n in present] + [n for n in _plugin_classes if n in present]:
        join = getattr(check_class(name), "correlate", None)
        if join is not None:
            out.append(join)
    return out


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
        # Task keys whose hang is a lock another task holds, not their target's fault
        # (the filesystem check's probes queued on a directory's lock): no other check
        # takes them for the storage's witness.
        self.locked: set[str] = set()
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
    # Every check's module is imported before the first child is forked: after a fork
    # each page the parent writes is copied, and an import writes many (about 1 ms
    # more per check imported with the probes alive, on two cores).
    for name in names:
        t0 = time.monotonic()
        checks.append(load(name))
        spent[name] = time.monotonic() - t0
    for name, check in zip(names, checks):
        t0 = time.monotonic()
        try:
            tasks = check.tasks(ctx)
        except Exception:
            errors[name] = _trace()
            tasks = []
        if tasks:
            # Started at once: the next checks' own work (the /proc scan) then overlaps
            # these children, which mostly wait on the kernel (an fsync, the driver).
            batch = ctx.runner.start(tasks, batch)
        spent[name] += time.monotonic() - t0

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
        # A child still stuck from an earlier run cost this run nothing: its age is not
        # this check's time (its elapsed counts from the earlier run's start).
        task_time = max((o.elapsed for k, o in outcomes.items()
                         if k.startswith(check.name + ":") and o.status != "still_hung"), default=0.0)
        runs.append(CheckRun(name=check.name, findings=findings,
                             seconds=spent[check.name] + time.monotonic() - t0 + task_time,
                             error=error))
    return runs


def _trace() -> str:
    import traceback
    return traceback.format_exc(limit=3)
