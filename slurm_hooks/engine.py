"""One run of slurm-hooks: checks -> policy -> Slurm backend -> sinks.

Only this module (through the hook entry points) talks to Slurm and writes the
journal; checks stay free of side effects.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from . import __version__
from .checks import Context, run_checks
from .model import FAIL, OK, WARN, ActionResult, CheckRun, Finding, worst

HEALTHY, WARNING, UNHEALTHY = "healthy", "warning", "unhealthy"
STATUS_OF = {OK: HEALTHY, WARN: WARNING, FAIL: UNHEALTHY}
DEFAULT_CHECKS = ["filesystem", "stuck_tasks", "gpu"]


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

    @property
    def findings(self) -> list[Finding]:
        return [f for c in self.checks for f in c.findings]

    @property
    def status(self) -> str:
        return STATUS_OF[worst(f.severity for f in self.findings)]

    def exit_code(self) -> int:
        return 1 if self.status == UNHEALTHY else 0

    def to_json(self) -> dict:
        return {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
            "hook": self.hook, "node": self.node, "status": self.status,
            "duration": round(self.duration, 6), "version": __version__,
            "config": self.config, "dry_run": self.dry_run,
            "checks": [c.to_json() for c in self.checks],
            "actions": [a.to_json() for a in self.actions],
            "notes": self.notes, "warnings": self.warnings,
        }


def node_name(cfg) -> str:
    """$SLURMD_NODENAME (set by slurmd for every hook), else the configured name, else
    the short hostname. An explicit setting beats the hostname: an admin who wrote it
    knows the Slurm name better than a guess does."""
    return (os.environ.get("SLURMD_NODENAME") or cfg.node_name
            or os.uname().nodename.split(".", 1)[0])


def state_dir(cfg, node: str) -> str:
    # One directory per node name: several slurmd (-N) on one host keep apart.
    return os.path.join(cfg.state_dir, node)


def run(cfg, hook: str, names: list[str] | None = None, act: bool = False,
        dry_run: bool = False) -> RunRecord:
    from .runner import Runner, reap_finished
    from .state import StateStore

    started = time.time()
    t0 = time.monotonic()
    node = node_name(cfg)
    state = StateStore(state_dir(cfg, node))
    ctx = Context(cfg, node, state, Runner(state), hook=hook)
    record = RunRecord(hook=hook, node=node, config=cfg.source, started=started, dry_run=dry_run)
    record.checks = run_checks(ctx, names or DEFAULT_CHECKS)
    _correlate(record.checks)
    record.notes = ctx.notes
    if act:
        record.actions = take_actions(cfg, node, record.findings, dry_run, state)
    reap_finished()
    record.warnings = state.warnings
    record.duration = time.monotonic() - t0
    return record


def _correlate(runs: list[CheckRun]) -> None:
    """Join findings of different checks that explain each other (correlate.py)."""
    from .correlate import correlate
    everything = [f for c in runs for f in c.findings]
    kept = {id(f) for f in correlate(everything)}
    for c in runs:
        c.findings = [f for f in c.findings if id(f) in kept]


def take_actions(cfg, node: str, findings: list[Finding], dry_run: bool, state) -> list[ActionResult]:
    if not any(f.severity == FAIL for f in findings) and not os.path.exists(state.path("actions-done")):
        return []
    from .actions import LEDGER, execute
    from .policy import decide
    from .slurm import Slurm
    ledger = state.load(LEDGER)
    actions = decide(findings, node, cfg.reason_prefix, cfg.actions, ledger)
    results = execute(actions, None if dry_run else Slurm(cfg.slurm), cfg.reason_prefix, dry_run, ledger)
    ledger = _refresh_ledger(ledger, findings)
    if not dry_run:
        state.save(LEDGER, ledger)
    return results


# How long the ledger remembers an incident no finding has named. A stuck task can drop
# out of the findings for a while (a SIGKILL wakes it for a moment and its clock
# restarts) without being a new incident; a new stuck task has a new identity anyway.
LEDGER_KEEP = 6 * 3600


def _refresh_ledger(ledger: dict, findings: list[Finding]) -> dict:
    now = time.time()
    live = {f.incident for f in findings if f.incident}
    out = {}
    for key, entry in ledger.items():
        if not isinstance(entry, dict) or "done" not in entry:
            continue                       # an unreadable entry: forget it
        if key.split(":", 2)[-1] in live:
            entry = dict(entry, seen=now)
        if now - float(entry.get("seen", entry["done"])) < LEDGER_KEEP:
            out[key] = entry
    return out


def record_run(cfg, record: RunRecord) -> None:
    from .journal import append
    err = append(cfg.journal, record.to_json())
    if err:
        record.warnings.append(err)
