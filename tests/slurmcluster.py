"""A real, throw-away Slurm cluster on loopback for the test-suite.

``SlurmCluster`` writes a private ``slurm.conf`` (and ``cgroup.conf``) into a
directory, starts ``slurmctld`` and one ``slurmd -N <node>`` per node on
127.0.0.1 with free TCP ports, and offers small helpers (``scontrol``,
``sbatch``, ``show_node``, ``wait_for`` ...) that later tests use to check
that the health check really drains nodes, requeues jobs and so on.
Nothing is mocked; every daemon runs as root.

Life cycle
    ``start()`` starts munged if no munged answers, then ``slurmctld -D -i``
    and each ``slurmd -D -N nX`` as foreground children of this process
    (own session, cwd = root; their pids are known exactly, no pid-file
    races) and polls until every node is IDLE: about 0.3 s here.  ``stop()``
    cancels the jobs, runs ``scontrol shutdown``, waits for the pids, kills
    what remains and every process of this cluster (``daemon_conf``:
    SLURM_CONF in the environment, or for slurmstepd - which slurmd starts
    with an empty environment - a cwd of root), and stops munged only if
    ``start()`` started it and no other Slurm daemon is alive.  0.1 s idle,
    about 3 s with a running srun step on the cgroup branch.  Daemons of
    other clusters (a crashed earlier run, the real system) are never
    touched; ``stale_daemons()`` lists them and ``start()`` warns about those
    whose slurm.conf no longer exists.

What ``scontrol reconfigure`` picks up (Slurm 22.05.8, measured)
    A running slurmd re-reads slurm.conf on ``scontrol reconfigure``:
    HealthCheckProgram (a new path is used from the next check on),
    HealthCheckInterval, HealthCheckNodeState, Prolog and Epilog all took
    effect without restarting slurmd (the health check ran ~2 s later with
    HealthCheckInterval=2).  slurmctld drives the periodic checks; slurmd runs
    its own configured program.  ``reconfigure()`` waits for ``scontrol show
    config`` and for each slurmd's "Log file re-opened" line (logged at
    SlurmdDebug=debug, the default here; at info slurmd logs nothing
    specific).  ``restart_slurmd()`` is for what slurm.conf(5) says needs a
    restart (ports, ProctrackType, TaskPlugin, SelectType, node definitions)
    and for tests that want slurmd's start-up health check.

Things to know when writing tests against it
    * HealthCheckProgram runs with only SLURMD_NODENAME in its environment
      (no PATH, no SLURM_CONF), so a plain ``scontrol`` in it would talk to
      /etc/slurm/slurm.conf; wrap programs with ``make_script()``.
    * A requeued job stays PENDING (Reason=BeginTime) for cred_expire+1 s;
      AuthInfo=cred_expire=10 makes that ~14 s instead of ~2 min.
    * scontrol calls while slurmctld is down or hung fail after 4-5 s
      (MessageTimeout=5 here; ~9 s with Slurm's defaults).
    * Debian's build logs "error: ... mpi/pmix ... can not load PMIx library"
      in every daemon at start and on every reconfigure: harmless noise, do
      not assert "no error: in the log".
    * Finished jobs stay visible to ``show_job()`` (MinJobAge=300).
"""

from __future__ import annotations

import atexit
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import psutil

# --------------------------------------------------------------------------
# scontrol -o "Key=Value Key=Value ..." parsing
# --------------------------------------------------------------------------

# A field boundary is a single space followed by something that looks like a
# key and an '='.  Keys in 22.05 contain letters, digits and '/', ':', '_'
# (e.g. "Socks/Node=", "NtasksPerN:B:S:C=", "MCS_label=").
_BOUNDARY = re.compile(r" +(?=[A-Za-z][A-Za-z0-9/:_.]*=)")

# Values of these keys are free text and may contain " word=...".
FREE_TEXT_KEYS = frozenset({
    "Reason", "Comment", "AdminComment", "Extra", "Command", "WorkDir",
    "StdErr", "StdIn", "StdOut", "JobName", "Features", "ActiveFeatures",
    "AvailableFeatures", "OS", "SystemComment",
})

# Keys that `scontrol -o show node` / `show job` print in 22.05.  A
# "Key=" token following a free-text value only starts a new field if the key
# is one of these; otherwise it is part of the free text.
KNOWN_KEYS = frozenset("""
NodeName Arch CoresPerSocket CPUAlloc CPUEfctv CPUTot CPULoad AvailableFeatures
ActiveFeatures Gres NodeAddr NodeHostName Port Version OS RealMemory
AllocMem FreeMem Sockets Boards State ThreadsPerCore TmpDisk Weight Owner
MCS_label Partitions BootTime SlurmdStartTime LastBusyTime ResumeAfterTime
CfgTRES AllocTRES CapWatts CurrentWatts AveWatts ExtSensorsJoules
ExtSensorsWatts ExtSensorsTemp Reason Comment AdminComment Extra
GresDrain GresUsed NextState InstanceId InstanceType CoreSpecCount
CPUSpecList MemSpecLimit
JobId ArrayJobId ArrayTaskId ArrayTaskThrottle HetJobId HetJobOffset JobName
UserId GroupId MCS_label Priority Nice Account QOS WCKey JobState Reason
Dependency Requeue Restarts BatchFlag Reboot ExitCode DerivedExitCode
RunTime TimeLimit TimeMin SubmitTime EligibleTime AccrueTime StartTime
EndTime Deadline SuspendTime SecsPreSuspend LastSchedEval Scheduler
Partition AllocNode:Sid ReqNodeList ExcNodeList NodeList BatchHost NumNodes
NumCPUs NumTasks CPUs/Task ReqB:S:C:T TRES Socks/Node NtasksPerN:B:S:C
CoreSpec MinCPUsNode MinMemoryNode MinMemoryCPU MinTmpDiskNode Features
DelayBoot OverSubscribe Contiguous Licenses Network Command WorkDir StdErr
StdIn StdOut Power TresPerNode TresPerJob TresPerSocket TresPerTask
MailUser MailType CpusPerTres MemPerTres TresBind TresFreq
NtasksPerTRES Reservation Container ContainerID Prolog Epilog
SubmitLine ReqTRES AllocTRES LicensesAlloc ResumeAfterTime
""".split())


def parse_kv_line(line: str) -> dict[str, str]:
    """Parse one ``scontrol -o show ...`` line into ``{key: value}``.

    Splits on `` (?=Key=)`` and then glues a piece back onto the previous
    value when it cannot be a real field:

    * its key was already seen on this line (e.g. ``Reason=x State=y``
      after the node's own ``State=``), or
    * the previous key holds free text (``Reason``, ``Comment``,
      ``AdminComment``, ``Command`` ...) and the key is not one scontrol
      prints.

    Values keep inner spaces and ``=`` (``AdminComment=a=b c=d``).  A free
    text that contains a *real* scontrol key that has not appeared yet
    (``Reason=see Comment=x``) is ambiguous and split; avoid that in tests.
    """
    line = line.strip()
    fields: dict[str, str] = {}
    value_start: dict[str, int] = {}
    prev: str | None = None
    starts = [0] + [m.end() for m in _BOUNDARY.finditer(line)]
    ends = [m.start() for m in _BOUNDARY.finditer(line)] + [len(line)]
    for start, end in zip(starts, ends):
        key, sep, _ = line[start:end].partition("=")
        is_field = bool(sep) and (
            prev is None
            or (key not in fields
                and (prev not in FREE_TEXT_KEYS or key in KNOWN_KEYS))
        )
        if is_field:
            prev = key
            value_start[key] = start + len(key) + 1
            fields[key] = line[value_start[key]:end]
        elif prev is not None:
            # glue the piece (and the original spacing) onto the previous value
            fields[prev] = line[value_start[prev]:end]
        # A leading piece that is not Key=... is not scontrol output: dropped.
    return fields


def parse_kv_output(text: str) -> list[dict[str, str]]:
    """Parse ``scontrol -o show ...`` output: one dict per record. A record is a line,
    except that 25.11 prints a newline inside a value (an AdminComment) as it is: a
    line that does not start a record continues the one before."""
    records: list[str] = []
    for ln in text.splitlines():
        if records and not re.match(r"(NodeName|JobId|PartitionName)=", ln):
            records[-1] += "\n" + ln
        elif ln.strip():
            records.append(ln)
    return [parse_kv_line(r) for r in records]


# --------------------------------------------------------------------------
# errors and small helpers
# --------------------------------------------------------------------------

class NotYet:
    """Falsy predicate result for ``wait_for`` that still shows what was seen
    (``wait_for`` puts its repr into the timeout message)."""

    def __init__(self, value: Any):
        self.value = value

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return repr(self.value)


class SlurmClusterError(RuntimeError):
    """The test cluster could not be set up, started or stopped."""


class SlurmCommandError(subprocess.CalledProcessError):
    """A Slurm client command failed; ``str()`` shows stdout and stderr."""

    def __str__(self) -> str:
        return (f"{' '.join(map(str, self.cmd))!r} exited {self.returncode}\n"
                f"stdout: {(self.stdout or '').strip()}\n"
                f"stderr: {(self.stderr or '').strip()}")


REQUIRED_BINARIES = ("slurmctld", "slurmd", "scontrol", "sbatch", "squeue",
                     "scancel", "srun", "munge", "unmunge", "munged")

_SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Node state flags that mean "not usable"; resume_all() clears them.
_BAD_FLAGS = ("DRAIN", "DOWN", "FAIL", "NOT_RESPONDING", "REBOOT", "INVAL",
              "MAINT", "POWER")


def _search_path() -> str:
    parts = os.environ.get("PATH", "").split(os.pathsep)
    for extra in _SBIN_PATH.split(":"):
        if extra not in parts:
            parts.append(extra)
    return os.pathsep.join(p for p in parts if p)


def find_binaries(names: Iterable[str] = REQUIRED_BINARIES, path: str | None = None) -> dict[str, str]:
    """Absolute paths of the Slurm/munge programs; fail clearly if missing."""
    path = path or _search_path()
    found = {n: shutil.which(n, path=path) for n in names}
    missing = sorted(n for n, p in found.items() if not p)
    if missing:
        raise SlurmClusterError(
            "Slurm test cluster needs " + ", ".join(missing) + " (not found in "
            f"{path}). On Debian/Ubuntu: apt-get install slurmctld slurmd "
            "slurm-client munge")
    return {n: str(p) for n, p in found.items()}


def cgroup_v1_freezer_mounted(mountinfo: str = "/proc/self/mountinfo") -> bool:
    """True if /sys/fs/cgroup/freezer is a cgroup v1 mount with 'freezer'."""
    try:
        text = Path(mountinfo).read_text()
    except OSError:
        return False
    for line in text.splitlines():
        pre, sep, post = line.partition(" - ")
        if not sep:
            continue
        fields, tail = pre.split(), post.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        mount_point, fstype, super_opts = fields[4], tail[0], tail[2]
        if (mount_point == "/sys/fs/cgroup/freezer" and fstype == "cgroup"
                and "freezer" in super_opts.split(",")):
            return True
    return False


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


_rng = random.SystemRandom()     # independent of tests seeding `random`


def port_range() -> tuple[int, int]:
    """The ports this session's clusters draw from: SLURM_HOOKS_TEST_PORTS=LOW-HIGH when
    sessions run side by side (tests/run.sh gives each its own), else 20000-32700."""
    given = os.environ.get("SLURM_HOOKS_TEST_PORTS", "")
    low, sep, high = given.partition("-")
    if given and not (sep and low.isdigit() and high.isdigit() and int(low) < int(high)):
        raise SlurmClusterError(f"SLURM_HOOKS_TEST_PORTS={given!r}: expected LOW-HIGH, e.g. 20000-26000")
    return (int(low), int(high)) if given else (20000, 32700)


def free_ports(count: int, low: int | None = None, high: int | None = None) -> list[int]:
    """``count`` distinct free TCP ports below the ephemeral range.

    Ports are drawn below Linux' default ephemeral range (32768-60999) so a
    client socket (srun, scontrol) cannot grab one between choosing and
    binding."""
    if low is None or high is None:
        low, high = port_range()
    ports: list[int] = []
    for _ in range(count * 200):
        port = _rng.randrange(low, high)
        if port not in ports and _port_is_free(port):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise SlurmClusterError(f"could not find {count} free TCP ports")


def _tail(path: Path, lines: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 200 * lines - 4096))
            data = f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"<{path}: {exc}>"
    return "\n".join(data.splitlines()[-lines:])


def _proc_env(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except (psutil.Error, OSError):
        return {}


def _alive(proc: psutil.Process | None) -> bool:
    if proc is None:
        return False
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_gone(procs: Iterable[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Poll until no process in ``procs`` is alive (zombies count as gone:
    pid 1 in some containers reaps orphans late); return the survivors."""
    deadline = time.monotonic() + timeout
    left = [p for p in procs if _alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if _alive(p)]
    return left


def daemon_conf(proc: psutil.Process) -> str:
    """The slurm.conf a Slurm process belongs to, '' if unknown.

    slurmctld/slurmd/job tasks carry SLURM_CONF in their environment when
    started by this module; slurmstepd gets an empty environment from slurmd
    but keeps slurmd's working directory, which ``SlurmCluster`` sets to its
    root (where slurm.conf lives)."""
    conf = _proc_env(proc).get("SLURM_CONF", "")
    if conf:
        return conf
    try:
        if proc.name() == "slurmstepd":
            candidate = os.path.join(proc.cwd(), "slurm.conf")
            return candidate
    except (psutil.Error, OSError):
        pass
    return ""


def stale_daemons(exclude_conf: str | None = None) -> list[tuple[int, str, str]]:
    """Live slurmctld/slurmd/slurmstepd processes on this host whose
    slurm.conf (see ``daemon_conf``) is not ``exclude_conf``.

    Returns ``(pid, name, conf or '')``.  For diagnostics and for deciding
    whether munged is still needed; this module never kills them."""
    out = []
    for p in psutil.process_iter(["pid", "name"]):
        name = p.info["name"] or ""
        if name not in ("slurmctld", "slurmd", "slurmstepd") or not _alive(p):
            continue
        conf = daemon_conf(p)
        if exclude_conf is None or conf != exclude_conf:
            out.append((p.info["pid"], name, conf))
    return out


# --------------------------------------------------------------------------
# the cluster
# --------------------------------------------------------------------------

class _Daemon:
    """One foreground daemon started by us (we own the Popen)."""

    def __init__(self, name: str, argv: list[str], env: Mapping[str, str],
                 out_path: Path, cwd: Path, wrapped: bool = False):
        self.name = name
        # A daemon run under `unshare --fork`: unshare blocks SIGTERM and waits for its
        # child, so signals go to the child and unshare ends when it does. Signalling
        # unshare instead would leave the old slurmd on its port while a new one starts.
        self.wrapped = wrapped
        with open(out_path, "ab") as out:
            self.popen = subprocess.Popen(
                argv, env=dict(env), cwd=str(cwd), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout: float) -> bool:
        try:
            self.popen.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def _target(self) -> int:
        if not self.wrapped:
            return self.pid
        try:
            with open(f"/proc/{self.pid}/task/{self.pid}/children") as f:
                children = f.read().split()
        except OSError:
            children = []
        return int(children[0]) if children else self.pid

    def send(self, sig: int) -> None:
        if self.alive():
            try:
                os.kill(self._target(), sig)
                if sig == signal.SIGKILL and self.wrapped:
                    os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


class SlurmCluster:
    """A private Slurm cluster on 127.0.0.1; see the module docstring.

    Attributes after construction:
      root, conf_path, cgroup_conf_path, nodes, cgroup (bool: the
      proctrack/cgroup + task/cgroup branch is used), proctrack, task_plugin,
      first_job_id, hostname.  After ``start()``: ctld_port, node_ports,
      pids ({"slurmctld": pid, "n1": pid, ...}), started_munge.
    """

    DEFAULT_CPUS = 2

    def __init__(self, root: os.PathLike | str, nodes: Sequence[str] = ("n1", "n2", "n3"),
                 conf_extra: str = "", *, cgroup: bool | None = None,
                 cpus: int = DEFAULT_CPUS, start_timeout: float = 30.0,
                 cluster_name: str = "hookstest", prefix: os.PathLike | str | None = None):
        self.root = Path(root).resolve()
        # A Slurm built from source (tests/build_slurm.sh) instead of Debian's: its
        # bin/ and sbin/ come first on every PATH this cluster uses.
        self.prefix = Path(prefix).resolve() if prefix else None
        # slurm.backend for the slurm-hooks configurations tests write (hooks_slurm()):
        # None leaves slurm-hooks' default (auto).
        self.backend: str | None = None
        self.nodes = tuple(nodes)
        if not self.nodes:
            raise ValueError("need at least one node")
        self.conf_extra = conf_extra
        self.initial_conf_extra = conf_extra
        self.cgroup = cgroup_v1_freezer_mounted() if cgroup is None else bool(cgroup)
        self.proctrack = "proctrack/cgroup" if self.cgroup else "proctrack/linuxproc"
        self.task_plugin = "task/cgroup" if self.cgroup else "task/none"
        self.cpus = cpus
        self.start_timeout = start_timeout
        self.cluster_name = cluster_name
        self.hostname = socket.gethostname().split(".")[0]
        # A random first job id keeps job ids (and so the job_<id> cgroups
        # under slurm_<node>/) distinct from those of other test clusters.
        self.first_job_id = _rng.randrange(1000, 9_000_000, 1000)
        self.conf_path = self.root / "slurm.conf"
        self.cgroup_conf_path = self.root / "cgroup.conf"
        self.log_dir = self.root / "log"
        self.job_dir = self.root / "jobs"
        self.ctld_port: int | None = None
        self.node_ports: dict[str, int] = {}
        self.started_munge = False
        self._munged: psutil.Process | None = None
        self._ctld: _Daemon | None = None
        self._slurmd: dict[str, _Daemon] = {}
        self._bins: dict[str, str] = {}
        self._started = False
        self._stopped = False

    # ------------------------------------------------------------ basics
    @property
    def path(self) -> str:
        """PATH for this cluster's programs: the built Slurm first, if any."""
        if self.prefix is None:
            return _search_path()
        return f"{self.prefix}/bin:{self.prefix}/sbin:{_search_path()}"

    @property
    def bin_dir(self) -> str | None:
        """Where scontrol lives for slurm-hooks' `slurm.bin_dir` (None: its default search)."""
        return str(self.prefix / "bin") if self.prefix is not None else None

    def binary(self, name: str) -> str:
        """Absolute path of one of this cluster's Slurm programs (scontrol, sinfo, ...)."""
        found = shutil.which(name, path=self.path)
        if not found:
            raise SlurmClusterError(f"{name} not found in {self.path}")
        return found

    @property
    def version(self) -> str:
        """The daemons' Slurm version, e.g. '22.05.8' or '25.11.7'."""
        return self.run("scontrol", "--version", timeout=10).stdout.split()[-1]

    def hooks_slurm(self, **extra) -> dict:
        """slurm-hooks' `slurm:` section for this cluster: its slurm.conf, its scontrol
        and the backend under test."""
        # bin_dir always: None (scontrol from the usual places) must override a test's own
        doc = {"conf": str(self.conf_path), "bin_dir": self.bin_dir}
        if self.backend is not None:
            doc["backend"] = self.backend
        doc.update(extra)
        return doc

    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm client commands (and jobs they submit)."""
        env = {"PATH": self.path, "SLURM_CONF": str(self.conf_path),
               "LANG": "C.UTF-8"}
        if "HOME" in os.environ:
            env["HOME"] = os.environ["HOME"]
        return env

    @property
    def pids(self) -> dict[str, int]:
        out = {}
        if self._ctld:
            out["slurmctld"] = self._ctld.pid
        out.update({n: d.pid for n, d in self._slurmd.items()})
        return out

    @property
    def nodelist(self) -> str:
        return ",".join(self.nodes)

    def run(self, *argv: str, check: bool = True, timeout: float = 30,
            input: str | None = None, cwd: os.PathLike | str | None = None,
            ) -> subprocess.CompletedProcess:
        """Run a Slurm client command (argv, no shell) against this cluster."""
        argv = [str(a) for a in argv]
        try:
            res = subprocess.run(argv, env=self.env, input=input, text=True,
                                 capture_output=True, timeout=timeout,
                                 cwd=str(cwd or self.job_dir))
        except subprocess.TimeoutExpired as exc:
            raise SlurmCommandError(-1, argv, exc.stdout, f"timed out after {timeout}s") from None
        if check and res.returncode != 0:
            raise SlurmCommandError(res.returncode, argv, res.stdout, res.stderr)
        return res

    def scontrol(self, *args: str, check: bool = True, timeout: float = 30,
                 ) -> subprocess.CompletedProcess:
        return self.run("scontrol", *args, check=check, timeout=timeout)

    # ------------------------------------------------------------ config
    def base_settings(self) -> dict[str, str]:
        """Global slurm.conf settings; conf_extra may override any of them."""
        r = self.root
        return {
            "ClusterName": self.cluster_name,
            "SlurmctldHost": f"{self.hostname}(127.0.0.1)",
            "SlurmctldPort": str(self.ctld_port),
            "SlurmUser": "root",
            "SlurmdUser": "root",
            "AuthType": "auth/munge",
            "CredType": "cred/munge",
            # cred_expire also is the delay before a requeued job may start
            # again (default 120 s): keep it short for requeue tests.
            "AuthInfo": "cred_expire=10",
            "StateSaveLocation": str(r / "state"),
            "SlurmdSpoolDir": str(r / "spool" / "%n"),
            "SlurmctldPidFile": str(r / "run" / "slurmctld.pid"),
            "SlurmdPidFile": str(r / "run" / "slurmd-%n.pid"),
            "SlurmctldLogFile": str(self.log_dir / "slurmctld.log"),
            "SlurmdLogFile": str(self.log_dir / "slurmd-%n.log"),
            "SlurmctldDebug": "info",
            "SlurmdDebug": "debug",
            "PlugStackConfig": str(r / "plugstack.conf"),
            "MailProg": "/bin/true",
            "ProctrackType": self.proctrack,
            "TaskPlugin": self.task_plugin,
            "MpiDefault": "none",
            "SwitchType": "switch/none",
            "JobAcctGatherType": "jobacct_gather/none",
            "AccountingStorageType": "accounting_storage/none",
            "JobCompType": "jobcomp/none",
            "SelectType": "select/cons_tres",
            "SelectTypeParameters": "CR_Core",
            "SlurmdParameters": "config_overrides",
            "SchedulerType": "sched/backfill",
            "SchedulerParameters": "sched_interval=1,bf_interval=1,sched_min_interval=0",
            "FirstJobId": str(self.first_job_id),
            "SlurmctldTimeout": "10",
            "SlurmdTimeout": "10",
            "MessageTimeout": "5",
            "InactiveLimit": "0",
            "Waittime": "0",
            "KillWait": "2",
            # Finished jobs stay visible to show_job() for the whole run
            # (purging happens on a ~60 s cycle anyway, so a small value only
            # makes show_job() of finished jobs flaky).
            "MinJobAge": "300",
            "ReturnToService": "2",
            "JobRequeue": "1",
            "HealthCheckInterval": "0",
        }

    def render_conf(self, conf_extra: str | None = None) -> str:
        extra = self.conf_extra if conf_extra is None else conf_extra
        settings = self.base_settings()
        lower = {k.lower(): k for k in settings}
        extra_lines = []
        for line in extra.splitlines():
            s = line.strip()
            if not s:
                continue
            key = s.split("=", 1)[0].strip().lower()
            if "=" in s and key in lower and not s.startswith("#"):
                del settings[lower.pop(key)]   # conf_extra overrides a default
            extra_lines.append(s)
        out = ["# generated by tests/slurmcluster.py"]
        out += [f"{k}={v}" for k, v in settings.items()]
        if extra_lines:
            out.append("# conf_extra")
            out += extra_lines
        for node in self.nodes:
            out.append(f"NodeName={node} NodeAddr=127.0.0.1 "
                       f"Port={self.node_ports[node]} CPUs={self.cpus} "
                       "RealMemory=1000 State=UNKNOWN")
        out.append(f"PartitionName=debug Nodes={self.nodelist} Default=YES "
                   "MaxTime=INFINITE State=UP")
        return "\n".join(out) + "\n"

    def write_config(self, conf_extra: str | None = None) -> None:
        if conf_extra is not None:
            self.conf_extra = conf_extra
        for d in (self.root, self.log_dir, self.job_dir, self.root / "state",
                  self.root / "run", *(self.root / "spool" / n for n in self.nodes)):
            d.mkdir(parents=True, exist_ok=True)
        (self.root / "plugstack.conf").touch()
        if self.cgroup:
            # CgroupAutomount is defunct from 24.11 on (an error in the log).
            automount = "CgroupAutomount=yes\n" if self.prefix is None else ""
            self.cgroup_conf_path.write_text(
                f"CgroupPlugin=cgroup/v1\n{automount}"
                "ConstrainCores=no\nConstrainRAMSpace=no\n"
                "ConstrainSwapSpace=no\nConstrainDevices=no\n")
        tmp = self.conf_path.with_suffix(".conf.tmp")
        tmp.write_text(self.render_conf())
        tmp.replace(self.conf_path)

    # ------------------------------------------------------------ munge
    def _munge_works(self) -> bool:
        try:
            cred = subprocess.run([self._bins["munge"], "-n"], capture_output=True,
                                  timeout=10)
            if cred.returncode != 0:
                return False
            dec = subprocess.run([self._bins["unmunge"]], input=cred.stdout,
                                 capture_output=True, timeout=10)
            return dec.returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False

    def _ensure_munge(self) -> None:
        if self._munge_works():
            return
        key = Path("/etc/munge/munge.key")
        if not key.exists():
            raise SlurmClusterError(f"{key} is missing (create it with `mungekey -c`)")
        rundir = Path("/run/munge")
        rundir.mkdir(parents=True, exist_ok=True)
        shutil.chown(rundir, "munge", "munge")
        res = subprocess.run(
            ["su", "-s", "/bin/sh", "munge", "-c", f"{self._bins['munged']} --force"],
            capture_output=True, text=True, timeout=30)
        if res.returncode != 0:
            raise SlurmClusterError(f"munged failed to start: {res.stderr.strip()}")
        self.wait_for(self._munge_works, 10, what="munged to answer")
        self.started_munge = True
        self._munged = self._find_munged()

    @staticmethod
    def _find_munged() -> psutil.Process | None:
        try:
            pid = int(Path("/run/munge/munged.pid").read_text().split()[0])
            return psutil.Process(pid)
        except (OSError, ValueError, IndexError, psutil.Error):
            pass
        for p in psutil.process_iter(["name"]):
            if p.info["name"] == "munged":
                return p
        return None

    def _stop_munge(self) -> None:
        if not self.started_munge:
            return
        self.started_munge = False
        proc, self._munged = self._munged, None
        if not _alive(proc):
            return
        others = stale_daemons(exclude_conf=str(self.conf_path))
        if others:
            warnings.warn(f"leaving munged (pid {proc.pid}) running: other Slurm "
                          f"daemons use it: {others}")
            return
        try:
            proc.terminate()
            if _wait_gone([proc], 5):
                proc.kill()
                _wait_gone([proc], 5)
        except psutil.Error:
            pass

    # ------------------------------------------------------------ start
    def start(self) -> "SlurmCluster":
        if self._started and not self._stopped:
            return self
        self._bins = find_binaries(path=self.path)
        if os.geteuid() != 0:
            raise SlurmClusterError("the Slurm test cluster must run as root "
                                    "(SlurmUser=root, SlurmdUser=root)")
        self._started, self._stopped = True, False
        atexit.register(self.stop)
        t0 = time.monotonic()
        try:
            # Daemons whose slurm.conf is gone are left over from a crashed
            # earlier run.  They are not ours: report, never kill.
            stale = [d for d in stale_daemons(exclude_conf=str(self.conf_path))
                     if d[2] and not os.path.exists(d[2])]
            if stale:
                warnings.warn("Slurm daemons of a vanished test cluster are still "
                              f"running (left alone; kill them by hand): {stale}")
            self._ensure_munge()
            ports = free_ports(1 + len(self.nodes))
            self.ctld_port = ports[0]
            self.node_ports = dict(zip(self.nodes, ports[1:]))
            self.write_config()
            self._start_ctld()
            for node in self.nodes:
                self._start_slurmd(node)
            remaining = max(1.0, self.start_timeout - (time.monotonic() - t0))
            self.wait_for(self._all_idle, remaining, what="all nodes IDLE",
                          check_daemons=True)
        except BaseException as exc:
            report = self.diagnostics()
            try:
                self.stop()
            finally:
                if isinstance(exc, Exception):
                    raise SlurmClusterError(f"Slurm test cluster did not start: {exc}\n"
                                            f"{report}") from exc
                raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _start_ctld(self) -> None:
        self._ctld = _Daemon("slurmctld", [self._bins["slurmctld"], "-D", "-i"],
                             self.env, self.log_dir / "slurmctld.stdout", self.root)

        def listening():
            self._check_daemons()
            with socket.socket() as s:
                s.settimeout(0.5)
                return s.connect_ex(("127.0.0.1", self.ctld_port)) == 0
        self.wait_for(listening, self.start_timeout, interval=0.05,
                      what=f"slurmctld to listen on port {self.ctld_port}")

    def stop_controller(self, timeout: float = 30) -> None:
        """Stop slurmctld only (the slurmd and their jobs go on), as in a controller
        outage; start_controller() brings it back with its saved state."""
        import signal as _signal
        self._ctld.send(_signal.SIGTERM)
        if not self._ctld.wait(timeout):
            self._ctld.send(_signal.SIGKILL)
            self._ctld.wait(5)

    def start_controller(self, timeout: float = 30) -> None:
        self._start_ctld()
        self.wait_for(lambda: self.scontrol("ping", check=False, timeout=10).returncode == 0,
                      timeout, what="slurmctld to answer ping")

    def _stop_slurmd(self, node: str) -> None:
        d = self._slurmd.get(node)
        if d is not None and d.alive():
            d.send(signal.SIGTERM)
            if not d.wait(15):
                d.send(signal.SIGKILL)
                d.wait(5)

    def _start_slurmd(self, node: str) -> None:
        self._slurmd[node] = _Daemon(
            node, [self._bins["slurmd"], "-D", "-N", node], self.env,
            self.log_dir / f"slurmd-{node}.stdout", self.root)

    def _check_daemons(self) -> None:
        dead = [d for d in self.daemons() if not d.alive()]
        if dead:
            raise SlurmClusterError(
                "daemon(s) exited: " + ", ".join(
                    f"{d.name} (pid {d.pid}, rc {d.popen.returncode})" for d in dead))

    def daemons(self) -> list[_Daemon]:
        return [d for d in (self._ctld, *self._slurmd.values()) if d is not None]

    def _all_idle(self) -> dict[str, str] | NotYet:
        states = {n: d.get("State", "?") for n, d in self.show_nodes(timeout=5).items()}
        if all(states.get(n) == "IDLE" for n in self.nodes):
            return states
        return NotYet(states)

    # ------------------------------------------------------------ stop
    def stop(self) -> None:
        """Stop everything this object started.  Idempotent."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        try:
            atexit.unregister(self.stop)
        except Exception:
            pass
        try:
            if self._ctld is not None and self._ctld.alive():
                try:
                    self.cancel_all(timeout=10)
                except (AssertionError, subprocess.SubprocessError):
                    pass
                self.scontrol("shutdown", check=False, timeout=15)
            deadline = time.monotonic() + 15
            for d in self.daemons():
                d.wait(max(0.1, deadline - time.monotonic()))
            for sig, grace in ((signal.SIGTERM, 3), (signal.SIGKILL, 5)):
                left = [d for d in self.daemons() if d.alive()]
                for d in left:
                    d.send(sig)
                for d in left:
                    d.wait(grace)
            self._kill_leftovers()
        finally:
            self._stop_munge()

    def leftover_processes(self) -> list[psutil.Process]:
        """Live processes of this cluster: daemons, slurmstepd, job tasks
        (anything whose ``daemon_conf`` is our slurm.conf)."""
        ours = str(self.conf_path)
        me = os.getpid()
        return [p for p in psutil.process_iter(["pid"])
                if p.pid != me and _alive(p) and daemon_conf(p) == ours]

    def _kill_leftovers(self) -> None:
        procs = self.leftover_processes()
        for p in procs:
            try:
                p.kill()
            except psutil.Error:
                pass
        _wait_gone(procs, 5)
        if procs and self.cgroup:
            self._remove_job_cgroups()

    def _remove_job_cgroups(self) -> None:
        """rmdir the (now empty) cgroup v1 job_<id> directories that killed
        slurmstepds left under /sys/fs/cgroup/*/slurm_<node>/uid_*/.  Only
        our node names and job ids; non-empty cgroups cannot be removed."""
        for node in self.nodes:
            for job_dir in Path("/sys/fs/cgroup").glob(f"*/slurm_{node}/uid_*/job_*"):
                try:
                    job_id = int(job_dir.name[4:])
                except ValueError:
                    continue
                if not self.first_job_id <= job_id < self.first_job_id + 1_000_000:
                    continue
                for d in sorted((p for p in job_dir.rglob("*") if p.is_dir()),
                                key=lambda p: len(p.parts), reverse=True) + [job_dir]:
                    try:
                        d.rmdir()
                    except OSError:
                        pass

    # ------------------------------------------------------------ restart
    def restart_slurmd(self, nodes: Iterable[str] | None = None, timeout: float = 30) -> None:
        """Restart the slurmd of ``nodes`` (all by default); wait until they
        have registered again (new SlurmdStartTime) and are responding."""
        nodes = list(self.nodes if nodes is None else nodes)
        before = {n: self.show_node(n).get("SlurmdStartTime", "") for n in nodes}
        # SlurmdStartTime has 1 s resolution: make sure the new one differs.
        self.wait_for(lambda: time.strftime("%Y-%m-%dT%H:%M:%S") not in before.values(),
                      2, interval=0.05, what="next second")
        for n in nodes:
            self._stop_slurmd(n)
        for n in nodes:
            self._start_slurmd(n)

        def registered():
            self._check_daemons()
            info = self.show_nodes(timeout=5)
            return all(info[n].get("SlurmdStartTime") != before[n]
                       and "NOT_RESPONDING" not in info[n].get("State", "")
                       and not info[n].get("State", "").startswith("DOWN")
                       for n in nodes)
        self.wait_for(registered, timeout, what=f"slurmd on {nodes} to re-register")

    def boot_slurmd(self, node: str, timeout: float = 90) -> None:
        """Restart ``node``'s slurmd as after a reboot of its host.

        slurmctld takes a reboot as done when slurmd registers with a boot time
        (from sysinfo(2)'s uptime) later than the reboot request.  The new slurmd
        runs in a time namespace whose boot clock starts at about zero, so it
        reports a boot time of now; nothing else about the host changes."""
        self._stop_slurmd(node)
        # slurmctld takes the reboot as done only for a boot time (whole seconds: now less
        # sysinfo's uptime, rounded up) after the moment it issued the reboot, which may
        # be just before this call (RebootProgram ran at once). The new boot clock
        # starts at up to 1 s and is read up to 1 s high, and the seconds are cut: 3.5 s
        # puts the reported boot time after the issue in every case.
        time.sleep(3.5)
        with open("/proc/uptime") as f:
            uptime = int(float(f.read().split()[0]))
        unshare = shutil.which("unshare", path=_search_path())
        self._slurmd[node] = _Daemon(
            node, [unshare, "--time", "--fork", "--kill-child=SIGTERM", f"--boottime=-{uptime}",
                   self._bins["slurmd"], "-D", "-N", node],
            self.env, self.log_dir / f"slurmd-{node}.stdout", self.root, wrapped=True)
        self.wait_for(lambda: "NOT_RESPONDING" not in self.node_state(node)
                      and "REBOOT_ISSUED" not in self.node_state(node),
                      timeout, what=f"slurmd {node} to register after its boot", check_daemons=True)

    def ensure_running(self) -> None:
        """Restart slurmctld/slurmd processes that died (e.g. a test killed one)."""
        if self._ctld is not None and not self._ctld.alive():
            self._start_ctld()
        dead = [n for n, d in self._slurmd.items() if not d.alive()]
        if dead:
            for n in dead:
                self._start_slurmd(n)
            self.wait_for(lambda: all("NOT_RESPONDING" not in self.node_state(n)
                                      for n in dead),
                          30, what=f"restarted slurmd {dead} to respond")

    # slurmd logs this (at SlurmdDebug=debug or higher) once it has re-read
    # slurm.conf after a REQUEST_RECONFIGURE; at info level it logs nothing
    # specific, so reconfigure() can only wait for slurmctld then.
    SLURMD_RECONFIG_MARKER = "Log file re-opened"
    _LOG_LEVELS = ("quiet", "fatal", "error", "info", "verbose", "debug",
                   "debug2", "debug3", "debug4", "debug5")

    def conf_value(self, key: str) -> str | None:
        """The value of ``key`` in the slurm.conf written last (None if unset)."""
        value = None
        for line in self.render_conf().splitlines():
            k, sep, v = line.partition("=")
            if sep and k.strip().lower() == key.lower():
                value = v.strip()
        return value

    def _slurmd_logs_reconfig(self) -> bool:
        level = (self.conf_value("SlurmdDebug") or "info").lower()
        return (level in self._LOG_LEVELS
                and self._LOG_LEVELS.index(level) >= self._LOG_LEVELS.index("debug"))

    def reconfigure(self, conf_extra: str, timeout: float = 30) -> None:
        """Rewrite slurm.conf with ``conf_extra`` and ``scontrol reconfigure``.

        Waits until slurmctld reports the new HealthCheck*/Prolog/Epilog/
        RebootProgram values (``scontrol show config``), every slurmd has
        logged that it re-read slurm.conf (needs SlurmdDebug>=debug, the
        default here) and no node is NOT_RESPONDING.  See the module
        docstring for which settings need ``restart_slurmd()`` instead."""
        offsets = {n: self._log_size(n) for n in self.nodes}
        self.write_config(conf_extra)
        self.scontrol("reconfigure", timeout=timeout)
        expect = {k: (self.conf_value(k) or "(null)")
                  for k in ("HealthCheckProgram", "Prolog", "Epilog", "RebootProgram")}
        interval = self.conf_value("HealthCheckInterval")
        if interval is not None:
            expect["HealthCheckInterval"] = f"{interval} sec"

        def ctld_loaded():
            cfg = self.show_config()
            # 25.11 takes several Prolog and Epilog (`Prolog[0] = ...`), and leaves them
            # out of `show config` when unset.
            return all(cfg.get(k, cfg.get(f"{k}[0]", "(null)")) == v for k, v in expect.items())
        self.wait_for(ctld_loaded, timeout, what=f"slurmctld to load {expect}")
        if self._slurmd_logs_reconfig():
            def slurmd_loaded():
                return all(self.SLURMD_RECONFIG_MARKER in self._log_since(n, offsets[n])
                           for n in self.nodes if self._slurmd[n].alive())
            self.wait_for(slurmd_loaded, timeout, interval=0.05,
                          what=f"slurmd to log {self.SLURMD_RECONFIG_MARKER!r}")
        self.wait_for(lambda: all("NOT_RESPONDING" not in d.get("State", "")
                                  for d in self.show_nodes(timeout=10).values()),
                      timeout, what="nodes responding after reconfigure")

    def _log_size(self, node: str | None) -> int:
        try:
            return self.log_path(node).stat().st_size
        except OSError:
            return 0

    def _log_since(self, node: str | None, offset: int) -> str:
        try:
            with open(self.log_path(node), "rb") as f:
                f.seek(offset)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def make_script(self, name: str, body: str) -> Path:
        """Write an executable /bin/sh script ``root/scripts/<name>``.

        slurmd runs HealthCheckProgram (environment: only SLURMD_NODENAME),
        Prolog and Epilog with almost no environment, so the script first
        exports this cluster's SLURM_CONF and a PATH with scontrol; without
        that, scontrol would look for /etc/slurm/slurm.conf."""
        d = self.root / "scripts"
        d.mkdir(parents=True, exist_ok=True)
        path = d / name
        path.write_text("#!/bin/sh\n"
                        f"export SLURM_CONF='{self.conf_path}'\n"
                        f"export PATH='{self.path}'\n" + body.lstrip("\n"))
        path.chmod(0o755)
        return path

    def show_config(self) -> dict[str, str]:
        """``scontrol show config`` as a dict (keys as printed, values stripped)."""
        out = {}
        for line in self.scontrol("show", "config", timeout=10).stdout.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                out[key.strip()] = value.strip()
        return out

    # ------------------------------------------------------------ queries
    def show_nodes(self, timeout: float = 30) -> dict[str, dict[str, str]]:
        res = self.scontrol("-o", "show", "node", timeout=timeout)
        return {d["NodeName"]: d for d in parse_kv_output(res.stdout) if "NodeName" in d}

    def show_node(self, name: str) -> dict[str, str]:
        res = self.scontrol("-o", "show", "node", name)
        recs = parse_kv_output(res.stdout)
        if not recs:
            raise KeyError(f"node {name} not found")
        return recs[0]

    def show_job(self, job_id: int | str) -> dict[str, str]:
        res = self.scontrol("-o", "show", "job", str(job_id))
        recs = parse_kv_output(res.stdout)
        if not recs:
            raise KeyError(f"job {job_id} not found")
        return recs[0]

    def node_state(self, name: str) -> str:
        """State as scontrol prints it, e.g. "IDLE", "IDLE+DRAIN", "MIXED+DRAIN"."""
        return self.show_node(name)["State"]

    def out_of_service_reason(self, name: str) -> str:
        """The node's reason while it is out of service (DRAIN, DOWN, FAIL, a reboot
        pending), else "": Slurm 25.11 keeps the last reason on a resumed node."""
        info = self.show_node(name)
        state = info.get("State", "")
        if any(f in state for f in ("DRAIN", "DOWN", "FAIL", "REBOOT", "MAINT")):
            return info.get("Reason", "")
        return ""

    def job_state(self, job_id: int | str) -> str:
        return self.show_job(job_id)["JobState"]

    def squeue(self) -> list[tuple[str, str]]:
        """(job id, state) of every job squeue lists (not finished ones)."""
        res = self.run("squeue", "-h", "-o", "%i %T", timeout=15)
        return [tuple(ln.split(None, 1)) for ln in res.stdout.splitlines() if ln.strip()]

    def sbatch(self, *args: str, script: str) -> int:
        """Submit ``script`` (a "#!/bin/sh" line is added if missing) with
        ``sbatch --parsable *args``; output goes to jobs/slurm-<id>.out."""
        if not script.startswith("#!"):
            script = "#!/bin/sh\n" + script
        res = self.run("sbatch", "--parsable", *args, input=script)
        return int(res.stdout.strip().split(";")[0])

    def job_output(self, job_id: int | str) -> str:
        path = self.job_dir / f"slurm-{job_id}.out"
        return path.read_text() if path.exists() else ""

    # ------------------------------------------------------------ cleanup
    def cancel_all(self, timeout: float = 30) -> None:
        """scancel every job and wait until squeue lists none."""
        jobs = self.squeue()
        if jobs:
            self.run("scancel", *(j[0] for j in jobs), check=False, timeout=15)
        def none_left():
            left = self.squeue()
            return NotYet(left) if left else True
        self.wait_for(none_left, timeout, what="all jobs to be gone from squeue")

    def resume_all(self, timeout: float = 30) -> None:
        """Undrain/resume every node and wait until none has a bad flag. A node drained
        again meanwhile is resumed again: a failed prolog's detached helper (which puts
        the precise reason in place of Slurm's) may have read the node just before."""
        def resume(nodes: dict) -> None:
            for name, info in nodes.items():
                state = info.get("State", "")
                if "REBOOT" in state:
                    self.scontrol("cancel_reboot", name, check=False)
                if any(f in state for f in ("DRAIN", "DOWN", "FAIL", "REBOOT")):
                    self.scontrol("update", f"nodename={name}", "state=resume", check=False)
                if "slurm-hooks:cause" in info.get("Comment", ""):
                    # A suspect mount a held node named: the next test starts with none.
                    self.scontrol("update", f"nodename={name}", "comment=", check=False)

        resume(self.show_nodes())

        def healthy():
            nodes = self.show_nodes(timeout=10)
            states = {n: d.get("State", "") for n, d in nodes.items()}
            if all(not any(f in s for f in _BAD_FLAGS) for s in states.values()):
                return states
            resume({n: d for n, d in nodes.items() if "DRAIN" in d.get("State", "")})
            return NotYet(states)
        self.wait_for(healthy, timeout, what="all nodes resumed")

    def reset(self) -> None:
        """Between tests: restart dead daemons, cancel jobs, restore the
        initial configuration, resume all nodes and empty their Comments (where a
        drain of slurm-hooks records its cause, and where a test plays an admin)."""
        self.ensure_running()
        self.cancel_all()
        if self.conf_extra != self.initial_conf_extra:
            self.reconfigure(self.initial_conf_extra)
        self.resume_all()
        self.clear_comments()
        self.wait_for(self._all_idle, 30, what="all nodes IDLE")

    def clear_comments(self) -> None:
        noted = [n for n, info in self.show_nodes().items() if info.get("Comment", "(null)") not in ("", "(null)")]
        if noted:
            self.scontrol("update", f"nodename={','.join(noted)}", "comment=", check=False)

    # ------------------------------------------------------------ polling / logs
    def wait_for(self, predicate: Callable[[], Any], timeout: float = 30,
                 interval: float = 0.2, what: str = "condition",
                 check_daemons: bool = False,
                 ignore: tuple[type[BaseException], ...] = (
                     subprocess.SubprocessError, KeyError, LookupError, OSError),
                 ) -> Any:
        """Poll ``predicate`` until it returns something truthy; return it.

        Exceptions in ``ignore`` (failed scontrol calls, unknown job ...) count
        as "not yet".  On timeout raise AssertionError naming ``what`` and the
        last value (or exception) seen.  ``check_daemons`` fails fast when one
        of our daemons has exited."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            if check_daemons:
                self._check_daemons()
            try:
                last = predicate()
                if last:
                    return last
            except ignore as exc:
                last = exc
            if time.monotonic() >= deadline:
                raise AssertionError(f"timed out after {timeout:.1f}s waiting for "
                                     f"{what}; last value: {last!r}")
            time.sleep(interval)

    def log_path(self, node: str | None = None) -> Path:
        return self.log_dir / ("slurmctld.log" if node is None else f"slurmd-{node}.log")

    def log_tail(self, node: str | None = None, lines: int = 40) -> str:
        """Last lines of slurmctld's log, or of slurmd's log for ``node``."""
        return _tail(self.log_path(node), lines)

    def diagnostics(self, lines: int = 25) -> str:
        parts = []
        for d in self.daemons():
            rc = d.popen.returncode
            parts.append(f"{d.name}: pid {d.pid} "
                         + ("running" if rc is None else f"exited rc={rc}"))
        for node in (None, *self.nodes):
            name = "slurmctld" if node is None else f"slurmd-{node}"
            parts.append(f"--- {name}.log (tail) ---\n{self.log_tail(node, lines)}")
            out = self.log_dir / f"{name}.stdout"
            if out.exists() and out.stat().st_size:
                parts.append(f"--- {name}.stdout (tail) ---\n{_tail(out, lines)}")
        return "\n".join(parts)

    def __enter__(self) -> "SlurmCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return (f"SlurmCluster(root={str(self.root)!r}, nodes={self.nodes!r}, "
                f"cgroup={self.cgroup}, pids={self.pids})")
