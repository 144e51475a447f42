"""Prometheus metrics through node_exporter's textfile collector.

The health check writes `slurm_hooks_NODE.prom` into the collector's directory: written
to a temporary name and renamed, so node_exporter never reads half a file. Names follow
Prometheus conventions (snake_case, base units, `_total` for counters, `_seconds`,
`_timestamp_seconds`), labels are escaped (paths are user controlled).

Series:
  slurm_hooks_healthy{node,hook}                           1 healthy or warning, 0 unhealthy
  slurm_hooks_drained{node,reason}                         1 while drained by slurm-hooks, else 0
  slurm_hooks_check_status{node,check}                     0 ok, 1 warning, 2 failing
  slurm_hooks_check_duration_seconds{node,check}
  slurm_hooks_filesystem_probe_ok{node,path,fstype}        1 ok or slow, 0 otherwise
  slurm_hooks_filesystem_probe_latency_seconds{node,path,fstype}   time to verdict
  slurm_hooks_filesystem_probe_info{node,path,status}      1 for the current verdict
  slurm_hooks_stuck_tasks{node,slurm_job}                  stuck processes (slurm_job="" outside jobs)
  slurm_hooks_gpu_health{node,gpu,pci}                     0 ok, 1 warning, 2 failing
  slurm_hooks_run_duration_seconds{node,hook}
  slurm_hooks_last_run_timestamp_seconds{node,hook}
  slurm_hooks_last_success_timestamp_seconds{node,hook}    last run that was not unhealthy
  slurm_hooks_actions_total{node,kind,outcome}             counter, kept across runs
  slurm_hooks_recoveries_total{node,mount,outcome}         counter: recovered, failed (act/recovery.py)
  slurm_hooks_storage_outage_nodes{node,source,fstype,mountpoint}   nodes the same suspect mount hangs on
  slurm_hooks_storage_outage_since_timestamp_seconds{node,source,fstype,mountpoint}   its first sighting
"""
from __future__ import annotations

import os
import stat

from .. import TYPE_CHECKING
from ..core.model import SEVERITY_ORDER

if TYPE_CHECKING:
    from ..core.model import RunRecord

# The run's own series; each check adds its own (its class's `series`), in between.
_HEAD = {
    "slurm_hooks_config_ok": ("gauge", "1 when the last run loaded its configuration; 0 when it could not "
                              "(nothing was checked: `slurm-hooks config check` says why)."),
    "slurm_hooks_healthy": ("gauge", "1 when the last run found the node healthy (warnings allowed), else 0."),
    "slurm_hooks_drained": ("gauge", "1 while slurm-hooks holds the node drained (its reason as a label), else 0."),
    "slurm_hooks_check_status": ("gauge", "Worst verdict of a check in the last run: 0 ok, 1 warning, 2 failing."),
    "slurm_hooks_check_duration_seconds": ("gauge", "Time the check took in the last run."),
}
_TAIL = {
    "slurm_hooks_run_duration_seconds": ("gauge", "Wall time of the last run."),
    "slurm_hooks_last_run_timestamp_seconds": ("gauge", "When the last run started (Unix time)."),
    "slurm_hooks_last_success_timestamp_seconds": ("gauge", "When the last run that was not unhealthy started."),
    "slurm_hooks_actions_total": ("counter", "Actions slurm-hooks took or tried, by kind and outcome."),
    "slurm_hooks_recoveries_total": ("counter", "Recoveries of a hung mount without a reboot, by mount and "
                                     "outcome (recovered, failed: the reboot follows)."),
    "slurm_hooks_storage_outage_nodes": ("gauge", "Nodes on which the same network mount (source, fstype) "
                                         "is suspect at once, this one among them: the storage's outage."),
    "slurm_hooks_storage_outage_since_timestamp_seconds": ("gauge", "When the outage's earliest node first "
                                                           "saw the mount suspect (Unix time)."),
}


_help: dict[str, tuple[str, str]] | None = None


def help_table(checks: list[str] | None = None) -> dict[str, tuple[str, str]]:
    """Series name -> (type, help): of every check, or of the `checks` named (the ones a
    run's record holds, the only ones with samples). Built when the metrics are written,
    not when this module is imported: every check's table imports every check, which a
    run has no use for beyond the checks it ran."""
    global _help
    if checks is None and _help is not None:
        return _help
    from ..checks import check_class, names
    out = dict(_HEAD)
    for name in (names() if checks is None else checks):
        out.update(check_class(name).series)
    out.update(_TAIL)
    if checks is None:
        _help = out
    return out


def __getattr__(name: str):
    if name == "HELP":
        return help_table()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def escape(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict) -> str:
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels.items()) + "}"


def render(record: RunRecord, counters: dict, last_success: float | None, drained: str | None = None,
           recoveries: dict | None = None, outages: list | None = None) -> str:
    node, hook = record.node, record.hook
    table = help_table([c.name for c in record.checks])
    samples: dict[str, list[tuple[dict, float]]] = {name: [] for name in table}

    def add(name, value, **labels):
        samples[name].append(({"node": node, **labels}, value))

    add("slurm_hooks_config_ok", 1, hook=hook)
    add("slurm_hooks_healthy", 0 if record.status == "unhealthy" else 1, hook=hook)
    add("slurm_hooks_drained", 1 if drained else 0, reason=drained or "")
    for c in record.checks:
        worst = max((SEVERITY_ORDER[f.severity] for f in c.findings), default=0)
        add("slurm_hooks_check_status", worst, check=c.name)
        add("slurm_hooks_check_duration_seconds", round(c.seconds, 6), check=c.name)
    from ..checks import check_class
    for c in record.checks:
        for name, labels, value in check_class(c.name).samples(c.findings):
            add(name, value, **labels)
    add("slurm_hooks_run_duration_seconds", round(record.duration, 6), hook=hook)
    add("slurm_hooks_last_run_timestamp_seconds", round(record.started, 3), hook=hook)
    if last_success is not None:
        add("slurm_hooks_last_success_timestamp_seconds", round(last_success, 3), hook=hook)
    for key, n in sorted(counters.items()):
        kind, _, outcome = key.partition(":")
        add("slurm_hooks_actions_total", n, kind=kind, outcome=outcome)
    for key, n in sorted((recoveries or {}).items()):
        mount, _, outcome = key.rpartition("|")
        add("slurm_hooks_recoveries_total", n, mount=mount, outcome=outcome)
    if outages:
        from ..decide.mount_incident import epoch
    for o in outages or []:
        where = {"source": o.source, "fstype": o.fstype, "mountpoint": o.mountpoint}
        add("slurm_hooks_storage_outage_nodes", len(o.nodes) + 1, **where)     # the others, and this one
        since = epoch(o.outage_since or o.since)
        if since is not None:
            add("slurm_hooks_storage_outage_since_timestamp_seconds", since, **where)

    out = []
    for name, (kind, text) in table.items():
        if not samples[name]:
            continue
        out.append(f"# HELP {name} {text}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in samples[name]:
            # repr: every digit. `:g` kept six, which put timestamps up to ~80 min off.
            out.append(f"{name}{_labels(labels)} {value!r}" if isinstance(value, float) else
                       f"{name}{_labels(labels)} {value}")
    return "\n".join(out) + "\n"


def render_config_error(node: str, hook: str, started: float) -> str:
    """The textfile of a run that could not load its configuration: it checked nothing,
    and says so at once (an alert on `slurm_hooks_config_ok == 0`), instead of leaving
    the last good run's series to go stale."""
    out = []
    for name, value in (("slurm_hooks_config_ok", 0), ("slurm_hooks_last_run_timestamp_seconds", round(started, 3))):
        kind, text = (_HEAD | _TAIL)[name]
        out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}",
                f"{name}{_labels({'node': node, 'hook': hook})} {value!r}"]
    return "\n".join(out) + "\n"


def directory_problem(directory: str) -> tuple[str, str] | None:
    """("missing" | "unsafe", what to tell the admin) for a textfile directory the health
    check cannot write to, else None. Checked before the run is journalled, so the
    journal line says why there are no metrics (node_exporter's directory is local disk:
    an lstat cannot hang)."""
    try:
        st = os.lstat(directory)
    except OSError as e:
        return ("missing", f"metrics off: prometheus_textfile_dir {directory}: {e.strerror or e}; create it "
                "(node_exporter's --collector.textfile.directory) or set prometheus_textfile_dir: null")
    if not stat.S_ISDIR(st.st_mode):
        return ("missing", f"metrics off: prometheus_textfile_dir {directory} is not a directory")
    if st.st_uid not in (0, os.geteuid()) or st.st_mode & stat.S_IWOTH:
        return ("unsafe", f"metrics {directory}: not written: the directory must belong to root and not be "
                f"writable by others (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})")
    return None


def write(directory: str, node: str, text: str) -> str | None:
    """Atomically replace DIRECTORY/slurm_hooks_NODE.prom; an error message or None.

    Root writes here, so the directory must be root's and not writable by others (a
    user who could write there could point our file at /etc/shadow with a symlink). The
    temporary file has a random name, is created exclusively and never follows a link,
    and everything is relative to the directory we checked.
    """
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in node)
    name = f"slurm_hooks_{safe}.prom"
    path = os.path.join(directory, name)
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        return f"metrics {directory}: {e.strerror or e}"
    tmp = f".{name}.{os.urandom(6).hex()}.tmp"
    created = False
    try:
        st = os.fstat(dfd)
        if st.st_uid not in (0, os.geteuid()) or st.st_mode & stat.S_IWOTH:
            return (f"metrics {directory}: not written: the directory must belong to root and "
                    f"not be writable by others (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                     dir_fd=dfd)
        created = True
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
            f.write(text)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        created = False
    except OSError as e:
        return f"metrics {path}: {e.strerror or e}"
    finally:
        if created:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
        os.close(dfd)
    return None


def update_recoveries(counters: dict, results) -> dict:
    """mount|outcome -> count, from this run's recover actions that were carried out."""
    out = dict(counters)
    for r in results:
        rec = getattr(r.action, "recovery", None)
        if r.action.kind != "recover" or rec is None or str(r.outcome) != "done":
            continue
        key = f"{rec.mountpoint}|{'recovered' if str(r.code) == 'recovered' else 'failed'}"
        out[key] = int(out.get(key, 0)) + 1
    return out


def update_counters(counters: dict, results) -> dict:
    out = dict(counters)
    for r in results:
        key = f"{r.action.kind}:{r.outcome}"
        out[key] = int(out.get(key, 0)) + 1
    return out
