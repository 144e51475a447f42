"""What slurm.conf says, read from the file slurmd reads, asking slurmctld nothing.

A few of Slurm's settings decide how slurm-hooks waits (HealthCheckInterval: how long a
node waits for the others' word on a mount before it takes the trouble for its own),
and `scontrol show config` costs slurmctld two RPCs (the configuration and a ping of
the controllers) on every node that asks. The file is where slurmd itself reads them:
`slurm.conf` where `slurm.conf` in slurm-hooks' settings or SLURM_CONF says, else
Slurm's default, else the copy slurmd keeps of a configless cluster's. `Include`
lines are followed (globs, relative to the file's directory), a few levels deep.

The read runs in a hang-safe child (host/runner.py): a site may keep slurm.conf on a
shared filesystem, the very thing that may hang.
"""
from __future__ import annotations

import glob
import os

DEFAULTS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf", "/run/slurm/conf/slurm.conf",
            "/var/spool/slurmd/conf-cache/slurm.conf")
INCLUDE_DEPTH = 4
READ_MAX = 4 << 20
TIMEOUT = 3.0


def candidates(conf: str | None) -> list[str]:
    """Where slurm.conf is, in the order slurmd's tools look (the first that exists is it)."""
    given = conf or os.environ.get("SLURM_CONF")
    return [given] if given else list(DEFAULTS)


def settings(text: str) -> dict[str, str]:
    """`Key=Value` pairs of one slurm.conf text, keys lower-cased (Slurm reads them so),
    the first of each kept; NodeName, PartitionName and other per-entity lines apart."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip().lower()
        if key in ("nodename", "partitionname", "nodeset", "frontendname", "downnodes", "switchname"):
            continue
        out.setdefault(key, value.strip().split()[0] if value.strip() else "")
    return out


def includes(text: str, base: str) -> list[str]:
    out = []
    for line in text.splitlines():
        parts = line.split("#", 1)[0].split()
        if len(parts) == 2 and parts[0].lower() == "include":
            path = parts[1] if parts[1].startswith("/") else os.path.join(base, parts[1])
            out += sorted(glob.glob(path))
    return out


def read(progress, conf: str | None) -> dict[str, str]:
    """In a child: slurm.conf's settings (Include files followed), {} where none is found."""
    for path in candidates(conf):
        progress(path)
        if os.path.isfile(path):
            return _read(progress, path, 0)
    return {}


def _read(progress, path: str, depth: int) -> dict[str, str]:
    progress(path)
    try:
        with open(path, "rb") as f:
            text = f.read(READ_MAX).decode("utf-8", "replace")
    except OSError:
        return {}
    out = settings(text)
    if depth < INCLUDE_DEPTH:
        for inc in includes(text, os.path.dirname(path)):
            for k, v in _read(progress, inc, depth + 1).items():
                out.setdefault(k, v)
    return out


def health_check_interval(conf: str | None, runner) -> float | None:
    """slurmd's HealthCheckInterval, seconds (0: none runs), read in a child of
    `runner` (host/runner.py: a child stuck on the file is remembered, none started
    again while it lives); None where slurm.conf cannot be read in time."""
    found = read_settings(conf, runner)
    return None if found is None else interval_of(found)


def read_settings(conf: str | None, runner) -> dict[str, str] | None:
    """slurm.conf's settings, read in a child of `runner`; None where it cannot be read
    in time ({} where there is no slurm.conf)."""
    from ..host.runner import DONE, Task
    key = "slurm-conf"
    o = runner.run([Task(key, read, (conf,), TIMEOUT)])[key]
    if o.status != DONE or not isinstance(o.value, dict):
        return None
    return o.value


def interval_of(found: dict[str, str]) -> float | None:
    try:
        return float(found.get("healthcheckinterval") or 0)
    except ValueError:
        return None


# Slurm's defaults for what decides a requeued job's clock (slurm.conf(5)).
CRED_EXPIRE = 120
KILL_WAIT = 30
UNKILLABLE_STEP_TIMEOUT = 60
SCHED_INTERVAL = 60


def option(value: str, name: str) -> str | None:
    """`name=`'s value in a comma-separated option list (AuthInfo, SchedulerParameters);
    None where it is not set."""
    for part in value.split(","):
        key, eq, v = part.strip().partition("=")
        if eq and key.strip().lower() == name:
            return v.strip()
    return None


def _seconds(value: str | None, default: int) -> int:
    try:
        return int(str(value).split()[0]) if value not in (None, "") else default
    except ValueError:
        return default


def requeue_holds(found: dict[str, str]) -> list[int]:
    """How long Slurm holds a requeued job once it left COMPLETING (it adds a second):
    SchedulerParameters=requeue_delay from 25.11.0, else AuthInfo's cred_expire (the
    only one before 25.11), else Slurm's default 120. Both where both are set: which
    one applies depends on the running version (timings() says)."""
    cred = _seconds(option(found.get("authinfo", ""), "cred_expire"), CRED_EXPIRE)
    cred = cred if cred >= 5 else CRED_EXPIRE          # Slurm refuses less than 5 (cred.c)
    delay = option(found.get("schedulerparameters", ""), "requeue_delay")
    return sorted({cred} | ({_seconds(delay, cred)} if delay is not None else set()))


def timings(found: dict[str, str], version: str = "") -> dict[str, int | None]:
    """The Slurm settings a requeued job's clock is made of, seconds: KillWait,
    UnkillableStepTimeout, the requeue hold (requeue_delay only from 25.11), and the
    full scheduling pass's interval (sched_interval)."""
    cred = _seconds(option(found.get("authinfo", ""), "cred_expire"), CRED_EXPIRE)
    cred = cred if cred >= 5 else CRED_EXPIRE
    params = found.get("schedulerparameters", "")
    delay = option(params, "requeue_delay")
    major = tuple(int(x) for x in version.split(".")[:2] if x.isdigit()) if version else ()
    hold = _seconds(delay, cred) if delay is not None and (not major or major >= (25, 11)) else cred
    return {"kill_wait": _seconds(found.get("killwait"), KILL_WAIT),
            "unkillable_step_timeout": _seconds(found.get("unkillablesteptimeout"), UNKILLABLE_STEP_TIMEOUT),
            "hold": hold, "sched_interval": _seconds(option(params, "sched_interval"), SCHED_INTERVAL),
            "health_check_interval": _seconds(found.get("healthcheckinterval"), 0)}
