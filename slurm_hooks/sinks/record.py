"""The sinks of a run: the journal (a run line and a line per action), syslog, and the
Prometheus textfile with its kept counters. Run by the entry points after the run;
a failure of any of them is our own local failure (core/errors.py), reported, never fatal.
"""
from __future__ import annotations

import time

from .. import TYPE_CHECKING
from ..core.behaviour import behaviour
from ..core.model import HEALTHY, UNHEALTHY, RunRecord
from ..core.state import state_dir

if TYPE_CHECKING:
    from ..checks._config import Config
    from ..core.state import StateStore

STATE = ("metrics",)        # the counters and last success the textfile carries across runs


def record_and_show(cfg: Config, record: RunRecord, as_json: bool) -> None:
    """A run's last steps in every entry point that acts: into the sinks, then its
    report (or the record as JSON) on stdout."""
    from . import report
    record_run(cfg, record)
    print(report.render_json(record) if as_json else report.render(record))


def record_run(cfg: Config, record: RunRecord) -> None:
    """The sinks: journal (a run line and a line per action), syslog, Prometheus."""
    from .journal import append
    # A prolog or epilog writes no textfile: it only adds its actions to the counters
    # the health check's textfile carries. Without actions it has nothing to keep.
    metrics_ok = bool(record.actions or behaviour(record.hook).writes_metrics) and _metrics_directory(cfg, record)
    if cfg.syslog and (record.status != HEALTHY or record.actions) and not _socket_there(cfg.syslog_socket):
        record.warnings.append(f"syslog: {cfg.syslog_socket} does not exist (no syslog daemon listens): nothing "
                               "was sent to syslog; the journal has it all (or set syslog: false)")
    run = dict(record.to_json(), event="run")
    actions = [dict(r.to_json(), event="action", time=run["time"], node=record.node, hook=record.hook,
                    run_job=record.job) for r in record.actions]
    err = append(cfg.journal, run, *actions, max_bytes=cfg.journal_max_bytes, keep=cfg.journal_keep)
    if err:
        record.local_errors.append(err)
    if metrics_ok:
        _metrics(cfg, record)
    if cfg.syslog and (record.status != HEALTHY or record.actions):
        # Healthy runs without actions stay in the journal: every node every interval
        # at debug level would only crowd syslog.
        from .syslog import lines_for, send
        send(lines_for(record), cfg.syslog_socket, cfg.syslog_facility)
    if record.local_errors:
        report_local(cfg, record.hook, record.local_errors)


def _socket_there(path: str) -> bool:
    """Whether syslog's socket exists (/dev/log: local, an lstat cannot hang)."""
    import os
    import stat
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def _metrics_directory(cfg: Config, record: RunRecord) -> bool:
    """Whether the textfile can be written; if not, why goes into the run's record (a
    missing directory is a warning, one open to others our own local failure), never
    silence. Only the runs that write metrics ask."""
    if not cfg.prometheus_textfile_dir or record.dry_run or not behaviour(record.hook).commits:
        return False   # off; or a look or a dry run, which is not what happened on the node
    from .metrics import directory_problem
    problem = directory_problem(cfg.prometheus_textfile_dir)
    if problem is None:
        return True
    kind, text = problem
    if behaviour(record.hook).writes_metrics:
        (record.warnings if kind == "missing" else record.local_errors).append(text)
    # An unsafe directory still keeps the counters (write() refuses the file itself):
    # they are right again the moment the directory is fixed.
    return kind == "unsafe"


def _metrics(cfg: Config, record: RunRecord) -> None:
    # Counters and the last success only feed the textfile: with no node_exporter
    # directory there is nothing to keep, and a healthy run writes no state for it.
    from ..core.state import StateStore
    state = StateStore(state_dir(cfg, record.node))
    try:
        _write_metrics(cfg, record, state)
    finally:
        record.local_errors += [e for e in state.errors if e not in record.local_errors]


def _write_metrics(cfg: Config, record: RunRecord, state: StateStore) -> None:
    saved = state.load("metrics")
    counters = saved.get("actions", {})
    recoveries = saved.get("recoveries", {})
    last_success = dict(saved.get("last_success", {}))
    if record.actions:
        from .metrics import update_counters, update_recoveries
        counters = update_counters(counters, record.actions)
        recoveries = update_recoveries(recoveries, record.actions)
    if record.status != UNHEALTHY and behaviour(record.hook).writes_metrics:
        last_success[record.hook] = record.started      # only a textfile shows it
    new = {"actions": counters, "last_success": last_success}
    if recoveries:
        new["recoveries"] = recoveries
    if new != saved:
        state.save("metrics", new, durable=False)
    if behaviour(record.hook).writes_metrics:
        from .metrics import render, write
        err = write(cfg.prometheus_textfile_dir or "", record.node,
                    render(record, counters, last_success.get(record.hook),
                           drained=state.load("drain").get("reason"), recoveries=recoveries,
                           outages=_outages(record, state)))
        if err and err not in record.local_errors:
            record.local_errors.append(err)


def _outages(record: RunRecord, state) -> list:
    """The storage's outages (and restarts) this run found, as the mount incidents keep
    them (decide/mount_incident.py); none on a run with nothing failing."""
    if record.status != UNHEALTHY:
        return []
    from ..act.actuation import BREAKER_FRESH, INCIDENTS
    from ..decide.mount_incident import OUTAGE, RESTART, fresh
    return [i for i in fresh(state.load(INCIDENTS), BREAKER_FRESH, time.time()) if i.scope in (OUTAGE, RESTART)]


def report_local(cfg: Config, hook: str, errors: list[str]) -> None:
    """stderr (slurmd logs it) and syslog (the journal may be what failed)."""
    import sys

    from .syslog import ERR, send
    for e in errors:
        print(f"slurm-hooks {hook}: local failure: {e}", file=sys.stderr)
    if cfg.syslog:
        send([(ERR, f"{hook}: local failure: {e}") for e in errors], cfg.syslog_socket, cfg.syslog_facility)
