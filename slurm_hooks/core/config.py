"""Configuration: the settings' declarations, built-in defaults and the cache of
validated files; the YAML loader that validates everything is core/config_yaml.py,
imported only when a file is not in the cache.

This module holds the sections that are no check's (Slurm, policy, actions, the
hooks, ...). Each check declares its own section beside its class (its
module's SECTIONS: key -> setting()); the caller hands them in (`sections=`, the checks
layer's `sections()`), and a check's section is built only when it is first read, so a
run imports no check module it does not run.

Every setting is a dataclass field whose metadata says what it accepts, so the defaults,
the validation and the documentation test all read one table. The loader walks
PyYAML's node tree rather than the plain parsed data, because nodes know their line:
each problem is reported as `FILE:LINE: dotted.key: what is wrong`, all problems at
once, and the caller exits with status 2.

YAML is only imported when a file is read: a health check with no config file starts
faster.
"""
from __future__ import annotations

import errno
import os

from .. import TYPE_CHECKING
from .records import MISSING, dataclass, field, fields

if TYPE_CHECKING:
    from typing import Any, Callable

DEFAULT_PATH = "/etc/slurm-hooks/slurm-hooks.yaml"
ENV_VAR = "SLURM_HOOKS_CONFIG"
# Validated configurations are cached here (tmpfs, root only), keyed by the file's
# identity: importing and running YAML costs more than the rest of a healthy run.
CACHE_DIR = "/run/slurm-hooks"


class ConfigError(Exception):
    """One or more problems in a configuration file; str() has one per line."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def setting(default=MISSING, kind="str", doc="", **rules):
    """A dataclass field plus what the loader accepts for it.

    kind: str | path | int | seconds | number | bool | enum | strlist | section | list
    rules: choices (enum), min/max (numbers), item (class for list), cls (section),
    nullable (None allowed).
    """
    meta = dict(kind=kind, doc=doc, **rules)
    if kind == "section":
        return field(default_factory=rules["cls"], metadata=meta)
    if isinstance(default, (list, dict)):
        def copy(d: Any = default) -> Any:
            return type(d)(d)
        return field(default_factory=copy, metadata=meta)
    return field(default=default, metadata=meta)


def switch(doc: str, default: str = "auto"):
    """A check's enable switch, the same on every check: `auto` (what the check does by
    itself: e.g. the GPU check runs when a driver is there), `true` (it must run: the
    thing it checks must be there), `false` (never). YAML's true/false (yes/no, on/off)
    read as `true`/`false`, so a bool written for a switch means what it says."""
    return setting(default, kind="switch", doc=doc)


class Sections:
    """The configuration sections of the checks: key -> setting (a field whose metadata
    says what it accepts), found by `find(key)`: the sections of the module that declares
    `key` (importing only it), or with None every check's, in the checks' order.
    `identity()` changes whenever a declaring module does (the cache's key)."""

    def __init__(self, find: Callable[[str | None], dict], identity: Callable[[], list]):
        self.find = find
        self.identity = identity

    def all(self) -> dict:
        return self.find(None)

    def field(self, key: str):
        return self.find(key).get(key)


@dataclass
class SlurmConfig:
    bin_dir: str | None = setting(None, kind="path", nullable=True,
                                  doc="Directory holding scontrol (and squeue and sinfo). Default: the first of "
                                  "/usr/bin, /usr/local/bin, /opt/slurm/bin that has it. "
                                  "HealthCheckProgram runs with no PATH, so none is used.")
    conf: str | None = setting(None, kind="path", nullable=True,
                               doc="slurm.conf to use (passed to scontrol as SLURM_CONF). "
                               "Default: Slurm's own default or $SLURM_CONF.")
    timeout: float = setting(15.0, kind="seconds",
                             doc="Deadline of each scontrol call. An unreachable slurmctld "
                             "takes about 9 s to be reported by scontrol itself.")
    backend: str = setting("auto", kind="enum", choices=("auto", "scontrol", "pyslurm"),
                           doc="How Slurm is asked: `scontrol` (a program per call), or "
                           "`pyslurm` (libslurm through the pyslurm binding, in a child with "
                           "the same deadline). `auto`: pyslurm when it is installed and was "
                           "built for the running Slurm's major.minor (`scontrol --version`), "
                           "else scontrol; the choice and why are in `config show` and the "
                           "journal. `pyslurm` forces it and fails with a clear error on a "
                           "mismatch.")


@dataclass
class HostConfig:
    sysfs: str = setting("/sys", kind="path",
                         doc="Where sysfs is mounted. The fabric check reads class/infiniband and "
                         "class/net below it; a test or a replay points it at a tree laid out the same way.")


@dataclass
class HookConfig:
    enabled: bool = setting(True, kind="bool", doc="Run the checks in this hook.")
    fs_timeout: float = setting(3.0, kind="seconds",
                                doc="Deadline of the filesystem probes in this hook (short: a job "
                                "start or end waits for it).")
    lock_timeout: float = setting(2.0, kind="seconds",
                                  doc="How long to wait for another instance of this hook to finish "
                                  "before giving up (and letting the job go on).")
    gpu_memory_leak_mib: int = setting(1024, kind="int", min=1,
                                       doc="A GPU holding more memory than this with no process on it "
                                       "is a leftover of an earlier job.")
    reason_delay: float = setting(5.0, kind="seconds", max=300,
                                  doc="After a failure, a detached helper waits this long, then asks "
                                  "Slurm once (one node, never the node list) and puts the precise "
                                  "reason in place of Slurm's generic one (\"Prolog error\" after a "
                                  "prolog, \"Epilog error\" after an epilog). If "
                                  "Slurm has not drained the node by then, the next health check does it.")


@dataclass
class PolicyConfig:
    failures_to_drain: dict = setting({}, kind="map", key_kind="str", value={"kind": "int", "min": 1, "max": 1000},
                                      doc="Consecutive failing runs a check needs before it drains, per "
                                      "check: {filesystem: 2}. Default 1. Hard failures (a lost GPU, a "
                                      "stuck task) drain at once whatever this says.")
    resume_after: int = setting(3, kind="int", min=0, max=10000,
                                doc="Resume a node slurm-hooks drained once every check has passed "
                                "this many runs in a row. 0: never resume. Drains by anybody else, and "
                                "drains for a cause that needs a reboot or a human, are never resumed.")
    max_drained_nodes: int = setting(10, kind="int", min=0,
                                     doc="Drain-storm breaker: when this many nodes are already "
                                     "drained by slurm-hooks, further drains are only reported. 0: no "
                                     "limit by count.")
    max_drained_fraction: float = setting(0.1, kind="number", min=0, max=1,
                                          doc="The same as a share of the cluster's nodes; the larger "
                                          "of the two limits applies. 0: no limit by share.")
    spool_max_age: float = setting(86400.0, kind="seconds",
                                   doc="Actions Slurm could not take (slurmctld down) are kept and "
                                   "retried by later runs for at most this long.")
    lock_timeout: float = setting(5.0, kind="seconds",
                                  doc="How long a health check waits for the previous one to finish.")


@dataclass
class DiagnoseConfig:
    timeout: float = setting(20.0, kind="seconds",
                             doc="`slurm-hooks diagnose`: how long the whole job may take to answer; "
                             "a node that has not answered by then is reported as not answering.")
    sample: float = setting(0.5, kind="seconds",
                            doc="How long each task's CPU time and context switches are watched "
                            "for progress.")
    stacks: bool = setting(True, kind="bool",
                           doc="Read Python stacks with `py-spy dump --nonblocking` where py-spy "
                           "is installed (it never stops the job).")
    pyspy: str = setting("auto",
                         doc="py-spy on the nodes: `auto` (next to this Python, then /usr/local/bin, "
                         "/usr/bin, /opt/slurm-hooks/current/bin), a path, or `off`. Without it the report "
                         "says there are no Python stacks and why.")
    collector: list = setting([], kind="strlist",
                              doc="Command that runs `job-report` on the nodes, as a list "
                              "(`[/opt/slurm-hooks/bin/slurm-hooks]`). Default: this Python, isolated "
                              "(`-I`: no PYTHON* variables, no user site, not the caller's "
                              "directory), with this installation's package by its absolute path, "
                              "the same on every node.")
    on_requeue: bool = setting(True, kind="bool",
                               doc="Before the health check requeues a job for a stuck task, take "
                               "the job-wide picture and record its summary with the diagnosis.")
    on_requeue_timeout: float = setting(20.0, kind="seconds",
                                        doc="Deadline of that picture (the health check has 60 s "
                                        "in all).")
    fanout: str = setting("auto", kind="enum", choices=("auto", "clush", "srun"),
                          doc="How the collector reaches the job's nodes: `clush` (ClusterShell over "
                          "ssh as root, outside the job: the only way root reaches another user's job, "
                          "since Slurm creates a step in a job only for its owner), `srun` (`srun "
                          "--overlap` in the job, for its owner), `auto` (clush when the caller is root "
                          "and ClusterShell is installed, else srun).")
    ssh_user: str = setting("root", doc="clush: the user ssh logs in as on the nodes.")
    ssh_options: list = setting([], kind="strlist",
                                doc="clush: options given to ssh (`[-F, /etc/slurm-hooks/ssh_config]`, "
                                "`[-p, 2222]`), before slurm-hooks' own (BatchMode, ConnectTimeout).")
    ssh_connect_timeout: float = setting(5.0, kind="seconds", min=1,
                                         doc="clush: how long ssh may take to connect to a node (never "
                                         "more than the deadline).")
    fanout_width: int = setting(64, kind="int", min=1, max=4096,
                                doc="clush: how many nodes are reached at once (ClusterShell's fan-out "
                                "window).")


@dataclass
class ActionsConfig:
    drain: bool = setting(True, kind="bool",
                          doc="Drain the node when a check fails. false: report only.")
    comment_job: bool = setting(True, kind="bool",
                                doc="Record the diagnosis in the job's AdminComment (what was "
                                "there is kept).")
    requeue_job: bool = setting(True, kind="bool",
                                doc="Requeue a job with a stuck task, so its healthy nodes are freed "
                                "and it restarts elsewhere from its checkpoint.")
    requeue_fallback: str = setting("leave", kind="enum", choices=("leave", "cancel"),
                                    doc="For a job that cannot be requeued (--no-requeue, not a "
                                    "batch job): leave it running and report, or cancel it.")
    reboot: bool = setting(True, kind="bool",
                           doc="Ask Slurm to reboot the node once it is idle (`scontrol reboot "
                           "ASAP nextstate=DOWN`) when a task is stuck for good: only a reboot "
                           "clears it. The node stays DOWN after the boot until a health check "
                           "passes and slurm-hooks resumes it. Needs RebootProgram in slurm.conf.")
    release_after: float = setting(120.0, kind="seconds",
                                   doc="A node Slurm still holds COMPLETING this many seconds after "
                                   "slurm-hooks asked for its reboot (a task of the requeued job it cannot "
                                   "kill) is set DOWN with slurm-hooks' reason, so that Slurm lets go of "
                                   "the step and issues the reboot. Slurm 25.11 keeps such a node "
                                   "COMPLETING for as long as the task lives; 22.05 lets go by itself "
                                   "after UnkillableStepTimeout. Keep it above UnkillableStepTimeout "
                                   "(Slurm's default 60 s), so Slurm has given up first.")
    release_node: bool = setting(True, kind="bool",
                                 doc="After slurm-hooks requeued a job whose task on this node cannot "
                                 "die (killed, still in D, on a place the node owns), set the node DOWN "
                                 "with slurm-hooks' reason when that job is the only one Slurm has on it "
                                 "(running, completing or suspended), so that Slurm lets the job go: "
                                 "Slurm 25.11.6 and later hold such a job COMPLETING for as long as the "
                                 "task lives. Never with another job on the node, never in the storage's "
                                 "outage. The node comes back as after any drain of slurm-hooks' (its "
                                 "reboot, or its mount's recovery).")
    restart_now: bool = setting(False, kind="bool",
                                doc="Once a job slurm-hooks requeued has left COMPLETING and waits in "
                                "Slurm's requeue hold (Reason=BeginTime: cred_expire, or "
                                "SchedulerParameters=requeue_delay from 25.11), end the hold at once "
                                "(`scontrol update jobid=J StartTime=now`): one RPC, once per requeue, "
                                "never for a begin time the job's user set. Slurm's hold is there so the "
                                "old run's credential expires and its I/O is cleared before a new one "
                                "starts; a job whose old run still writes on a node it left may want it.")
    report_only: bool = setting(False, kind="bool",
                                doc="The one switch that turns every action off: no drain, comment, "
                                "requeue, cancel, reboot or resume; the prolog and epilog always exit "
                                "0. Findings and the actions that would have been taken are reported "
                                "and journaled. For rolling out.")
    deadline: float = setting(45.0, kind="seconds", max=58,
                              doc="Every Slurm call of a run ends by this many seconds after the run "
                              "started (slurmd kills the health check at 60 s); what is left is "
                              "spooled and taken by the next run.")


@dataclass
class OutageConfig:
    interval: float | None = setting(None, kind="seconds", nullable=True, min=1,
                                     doc="One health-check interval. A node that first sees a network "
                                     "mount in trouble waits this long for another node to name the same "
                                     "mount before it takes the trouble for its own fault (and requeues, "
                                     "recovers or reboots); another node's word counts while younger than "
                                     "two intervals. null: Slurm's HealthCheckInterval (read once a day), "
                                     "or 60 s where Slurm runs no periodic health check.")
    requeue_after: float = setting(1800.0, kind="number", min=0,
                                   doc="Seconds. In an outage of the storage, a job whose tasks wait on it is not "
                                   "requeued: it goes on by itself when the storage answers, and its "
                                   "AdminComment says it waited. A job still waiting this long after it "
                                   "was first seen waiting is requeued. 0: never. Default: the 30 minutes "
                                   "a training job's collectives wait by default.")


@dataclass
class BesideConfig:
    command: list = setting([], kind="strlist",
                            doc="Another health check to run beside slurm-hooks, as an argument list "
                            "(no shell): [/usr/sbin/nhc]. slurmd takes one HealthCheckProgram: "
                            "slurm-hooks-healthcheck runs this one at the same time as its own checks. "
                            "Empty: none.")
    name: str = setting("nhc", doc="Its name in reports and the journal.")
    timeout: float = setting(40.0, kind="seconds", max=55,
                             doc="Its deadline, seconds; killed (and left, if stuck) past it. Keep it "
                             "below slurmd's 60 s, and NHC's own -t below it.")


@dataclass
class Config:
    node_name: str | None = setting(None, nullable=True,
                                    doc="This node's Slurm name. Default: $SLURMD_NODENAME, "
                                    "else the short hostname.")
    reason_prefix: str = setting("slurm-hooks:",
                                 doc="Starts every job AdminComment slurm-hooks writes. Node reasons "
                                 "end in the mark `[slurm-hooks]` instead; one that starts with this "
                                 "prefix (set by an older release) is still read as ours. Must not be empty.")
    state_dir: str = setting("/var/lib/slurm-hooks", kind="path",
                             doc="Local directory for state between runs (one subdirectory "
                             "per node name). Never on a probed shared filesystem.")
    journal: str = setting("/var/log/slurm-hooks/journal.jsonl", kind="path",
                           doc="Local JSON-lines journal: one line per run, with every finding "
                           "and action.")
    journal_max_bytes: int = setting(10 << 20, kind="int", min=4096,
                                     doc="Size at which the journal is rotated (JOURNAL.1, .2, ...).")
    journal_keep: int = setting(5, kind="int", min=1, max=100,
                                doc="Rotated journal files kept.")
    syslog: bool = setting(True, kind="bool",
                           doc="Also send one concise line per run that found a problem or took "
                           "an action, and per action, to syslog (journald reads the same socket).")
    syslog_socket: str = setting("/dev/log", kind="path", doc="The syslog socket.")
    syslog_facility: str = setting("daemon", kind="enum",
                                   choices=("daemon", "user", "local0", "local1", "local2", "local3",
                                            "local4", "local5", "local6", "local7"),
                                   doc="Syslog facility.")
    kernel_log: str = setting("/dev/kmsg", kind="path",
                              doc="The kernel log, read for Xid events and hung-task lines (only "
                              "records of the kernel facility count). A file of /dev/kmsg records, "
                              "one per line, replays a captured log.")
    prometheus_textfile_dir: str | None = setting(
        "/var/lib/prometheus/node-exporter", kind="path", nullable=True,
        doc="Directory of node_exporter's textfile collector; the health check writes "
        "slurm_hooks_NODE.prom there (atomically). Written only if the directory exists, "
        "belongs to root and is not writable by others. null: off.")
    prolog: HookConfig = setting(kind="section", cls=HookConfig, doc="The prolog (slurm-hooks-prolog).")
    epilog: HookConfig = setting(kind="section", cls=HookConfig, doc="The epilog (slurm-hooks-epilog).")
    policy: PolicyConfig = setting(kind="section", cls=PolicyConfig,
                                   doc="When to drain, when to resume, and the drain-storm breaker.")
    actions: ActionsConfig = setting(kind="section", cls=ActionsConfig,
                                     doc="What slurm-hooks may do about what it finds.")
    outage: OutageConfig = setting(kind="section", cls=OutageConfig,
                                   doc="A network mount in trouble on many nodes at once: the storage's "
                                   "outage (docs/recovery.md).")
    slurm: SlurmConfig = setting(kind="section", cls=SlurmConfig, doc="How to reach Slurm.")
    diagnose: DiagnoseConfig = setting(kind="section", cls=DiagnoseConfig,
                                       doc="`slurm-hooks diagnose` and the job-wide picture taken "
                                       "before a requeue.")
    host: HostConfig = setting(kind="section", cls=HostConfig, doc="Where the host's kernel interfaces are.")
    beside: BesideConfig = setting(kind="section", cls=BesideConfig,
                                   doc="Another health check (NHC) run beside slurm-hooks.")
    node_groups: list = setting([], kind="groups",
                                doc="Settings for groups of nodes by Slurm hostlist: a list of "
                                "{nodes: gpu[001-128], settings: {...}}. Every group naming this node "
                                "applies, in order, over the settings above (sections merge, other "
                                "values are replaced).")

    # Where this configuration came from, for reports; not a setting.
    source: str = field(default="built-in defaults", metadata={"internal": True})
    # Why the validated configuration could not be cached (core/errors.py: our own local
    # failure, reported by the run), else "".
    cache_error: str = field(default="", metadata={"internal": True})
    # The checks' sections (Sections), and those read from the cache not yet built.
    sections: Any = field(default=None, metadata={"internal": True})
    raw: dict = field(default_factory=dict, metadata={"internal": True})

    def __eq__(self, other: object) -> bool:
        # Equal when every setting is, the checks' sections included (built if need be).
        if not isinstance(other, Config):
            return NotImplemented
        return as_dict(self) == as_dict(other)

    __hash__ = None  # type: ignore[assignment]

    if not TYPE_CHECKING:
        def __getattr__(self, name: str):
            # Only names not yet set get here: a check's section, built (from the cache's
            # data, else its defaults) the first time it is read.
            spec = None
            d = self.__dict__
            if not name.startswith("__") and d.get("sections") is not None:
                spec = d["sections"].field(name)
            if spec is None:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            raw = d["raw"].pop(name, MISSING)
            value = default_of(spec) if raw is MISSING else _value_from(spec, raw)
            d[name] = value
            return value


def config_path(explicit: str | None) -> str | None:
    """The file to read: --config, else $SLURM_HOOKS_CONFIG, else the default if present."""
    if explicit:
        return explicit
    env = os.environ.get(ENV_VAR)
    if env:
        return env
    return DEFAULT_PATH if os.path.exists(DEFAULT_PATH) else None


def journal_of(path: str | None) -> str:
    """The journal a broken configuration file names, if it names one plainly (an
    absolute path at the top level), else the default: where its error is journalled."""
    return plain_path(path, "journal", Config.journal) or Config.journal


def textfile_dir_of(path: str | None) -> str | None:
    """The metrics directory a broken configuration file names plainly (null: none),
    else the default: where `slurm_hooks_config_ok 0` is written."""
    return plain_path(path, "prometheus_textfile_dir", Config.prometheus_textfile_dir)


def plain_path(path: str | None, key: str, default):
    """A top-level absolute path (or null) a configuration file gives `key`, read plainly
    whether or not the file validates; `default` where it gives none."""
    if not path:
        return default
    try:
        import yaml
        with open(path, "rb") as f:
            doc = yaml.load(f.read(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except Exception:       # unreadable or not YAML: the default it is
        return default
    if not isinstance(doc, dict) or key not in doc:
        return default
    value = doc[key]
    if value is None:
        return None
    return value if isinstance(value, str) and value.startswith("/") else default


def load(path: str | None, cache_dir: str | None = CACHE_DIR, mount_kind=None,
         sections: Sections | None = None, parse=None) -> Config:
    """The configuration in `path`, from the cache while the file is unchanged, else
    `parse(text, path, mount_kind=, sections=)` (core/config_yaml.py's loads, handed in
    by the caller so that a run served from the cache never imports the validator).
    `mount_kind(path) -> fstype | None`: the filesystem type mounted at a path now
    (host.mounts.fstype_at, handed in by the entry points), so a recovery method that
    cannot work on it is refused at load; None: that one check is left out. `sections`:
    the checks' sections (None: none, and their keys are unknown settings)."""
    if path is None:
        return Config(sections=sections)
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            key = _cache_key(path, st, sections) + [_this_node_hint()]
            cached = _cache_get(cache_dir, path, key, sections)
            if cached is not None:
                return cached
            text = f.read()
    except OSError as e:
        raise ConfigError([f"{path}: cannot read: {e.strerror}"]) from None
    if parse is None:
        raise ValueError("load() of a file not in the cache needs parse= (core.config_yaml.loads)")
    cfg = parse(text, path, mount_kind=mount_kind, sections=sections)
    cfg.source = path
    _cache_put(cache_dir, path, key, cfg)
    return cfg


def _cache_key(path: str, st, sections: Sections | None) -> list:
    from .. import __version__
    # This module's own identity, the validator's and the declaring modules' too: a new
    # schema or new rules must not be served an old entry.
    me = os.stat(__file__)
    rules = os.stat(os.path.join(os.path.dirname(__file__), "config_yaml.py"))
    return [__version__, me.st_mtime_ns, me.st_size, rules.st_mtime_ns, rules.st_size,
            sections.identity() if sections else None,
            os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _cache_file(cache_dir: str, path: str) -> str:
    # The key inside the file holds the full path; a clash only costs a cache miss.
    return os.path.join(cache_dir, "config" + os.path.abspath(path).replace("/", "%")[-200:] + ".json")


def _cache_get(cache_dir: str | None, path: str, key: list, sections: Sections | None) -> Config | None:
    if not cache_dir:
        return None
    from . import jsonio
    try:
        with open(_cache_file(cache_dir, path), "rb") as f:
            entry = jsonio.loads(f.read())
        if entry.get("key") != key:
            return None
        data = entry["config"]
        cfg = _from_dict(Config, data)
        cfg.source = path
        cfg.sections = sections
        # The checks' sections are built when read (Config.__getattr__).
        cfg.raw = {k: v for k, v in data.items() if k not in _BASE}
        return cfg
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None   # no cache, a stale one, or a foreign file: read the YAML


def _cache_put(cache_dir: str | None, path: str, key: list, cfg: Config) -> None:
    if not cache_dir:
        return
    from . import jsonio
    target = _cache_file(cache_dir, path)
    tmp = f"{target}.{os.getpid()}.tmp"
    try:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        _prune(cache_dir)
        with open(tmp, "w") as f:
            f.write(jsonio.dumps({"key": key, "config": as_dict(cfg)}))
        os.replace(tmp, target)
    except OSError as e:
        # A user's own look (root's cache is root's) goes without the cache, unsaid.
        if not (e.errno in (errno.EACCES, errno.EPERM) and os.geteuid() != 0):
            cfg.cache_error = f"configuration cache {cache_dir}: {e.strerror or e}"
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _prune(cache_dir: str, max_age: float = 7 * 86400) -> None:
    """Drop entries of configuration files not read for a week (only on a cache miss)."""
    import time
    now = time.time()
    for name in os.listdir(cache_dir):
        if name.startswith("config") and name.endswith(".json"):
            full = os.path.join(cache_dir, name)
            try:
                if now - os.stat(full).st_atime > max_age and now - os.stat(full).st_mtime > max_age:
                    os.unlink(full)
            except OSError:
                pass


def _from_dict(cls, data: dict):
    """Rebuild a validated configuration from its as_dict() form (the cache)."""
    values = {}
    for f in fields(cls):
        if f.name not in data or f.metadata.get("internal") and f.name not in ("source", "cache_error"):
            continue
        values[f.name] = _value_from(f, data[f.name])
    return cls(**values)


def _value_from(f, v):
    kind = f.metadata.get("kind")
    if kind == "section":
        return _from_dict(f.metadata["cls"], v)
    if kind == "list":
        return [_from_dict(f.metadata["item"], item) for item in v]
    if kind == "map" and f.metadata.get("key_kind") == "int":
        return {int(k): x for k, x in v.items()}   # JSON turned the keys into strings
    return v


def default_of(f):
    """A setting's built-in default (a fresh one where the default is a factory)."""
    return f.default_factory() if f.default is MISSING else f.default


_BASE = {f.name for f in fields(Config)}


def as_dict(cfg: Config) -> dict:
    """Every setting's value, the checks' sections included, as plain data (the cache,
    `config show`)."""
    out = {f.name: _plain(getattr(cfg, f.name)) for f in fields(Config) if f.name not in ("sections", "raw")}
    if cfg.sections is not None:
        for key in cfg.sections.all():
            out[key] = _plain(getattr(cfg, key))
    return out


def _plain(v):
    from .records import asdict
    if hasattr(type(v), "__record_fields__"):
        return asdict(v)
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _this_node_hint() -> str:
    """What decides which node_groups apply, short of the file's own node_name."""
    return os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".", 1)[0]


# --- effective values ------------------------------------------------------------------
def iter_settings(cls=Config, prefix="", sections: Sections | None = None):
    """(dotted key, field) for every setting, for documentation and its test; at the
    top, the checks' sections (`sections`) come before node_groups."""
    top = [(f.name, f) for f in fields(cls) if not f.metadata.get("internal")]
    if sections is not None:
        at = next((i for i, (name, _) in enumerate(top) if name == "node_groups"), len(top))
        top[at:at] = list(sections.all().items())
    for name, f in top:
        key = f"{prefix}.{name}" if prefix else name
        yield key, f
        if f.metadata.get("kind") == "section":
            yield from iter_settings(f.metadata["cls"], key)
        elif f.metadata.get("kind") == "list":
            yield from iter_settings(f.metadata["item"], key + "[]")


def node_name(cfg: Config) -> str:
    """$SLURMD_NODENAME (set by slurmd for every hook), else the configured name, else
    the short hostname. An explicit setting beats the hostname: an admin who wrote it
    knows the Slurm name better than a guess does."""
    return (os.environ.get("SLURMD_NODENAME") or cfg.node_name
            or os.uname().nodename.split(".", 1)[0])
