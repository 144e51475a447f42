"""`slurm-hooks job-report JOBID`: what every task of one job is doing on this node.

The per-node half of `slurm-hooks diagnose` (views/diagnose.py runs it on every node of the
job: as root over ssh through ClusterShell, outside the job, or as the job's owner
through `srun --overlap`), also usable by itself on a node. It must answer even
when a task of the job is stuck in the kernel, or in execve with a FUSE flush its user
never answers (every reader of its stat, wchan, syscall and links waits then): its own
process reads only the tasks' cgroup and status (host/procfs.py). The job's processes
are screened in a child first (collect_guarded: one that stalls is left out and named),
then collect() runs in a child with a deadline, and within it every read that may wait
on the target's memory runs in children of its own (host/runner.py):

- the environment (for the rank) and the command line: _stuck_reads.read_task_memory,
  anonymous memory only, each read bounded;
- CPU time over a short sample and resident memory: psutil, in a child (psutil reads
  /proc files too, but a library is no place to guess which reads are safe on a
  D-state task: it belongs behind a deadline, never in this process);
- the GPUs and the processes on them: NVML, only ever in a child (host/nvml.py);
- Python stacks of every thread: `py-spy dump --nonblocking`, an optional program run
  with a deadline. --nonblocking reads the target's memory without stopping it, so the
  job is never paused or slowed by being looked at. py-spy also reads the target's
  binary and maps, and blocks in the kernel with it when these lie on a stalled mount:
  one that stays stuck after its kill is remembered in the node's state (`stuck-pyspy`,
  keyed by the target's pid and start) and no py-spy is started again for that process.

Tasks are the job's processes found through their cgroup (host/jobs.py), so any launcher
counts (srun, mpirun, torchrun). The job's extern step (Slurm's own sleep) and the
step this collector itself runs in are not the job's work and are left out.

How long a thread without progress has been in D comes from the scheduler
(procfs.off_cpu_seconds: when it last ran); where that cannot be read, from the health
check's first sighting of it (its stuck-task state on this node), as a lower bound.

Everything a user controls (command lines, paths, Python function and file names)
goes through reason.printable before it is reported.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time

from .. import TYPE_CHECKING
from ..checks._stuck_reads import read_task_memory, syscall_of
from ..core.reason import printable
from ..core.records import asdict, dataclass, field
from ..host import procfs
from ..host.jobs import JobRef, of_pid
from ..host.mounts import MountTable, parse_mountinfo
from ..host.runner import DONE, PYSPY_STATE, Runner, Task

if TYPE_CHECKING:
    from ..core.state import StateStore

MAX_TASKS = 256              # processes of one job on one node that are looked at in detail
INSPECT_MAX = 64            # children reading environments at once
INSPECT_TIMEOUT = 2.0
NVML_TIMEOUT = 5.0
PYSPY_TIMEOUT = 3.0
RESAMPLE = 0.05             # how often a thread caught running is looked at again
FRAMES = 12                  # Python frames kept per thread
PYSPY_SEARCH = ("/usr/local/bin", "/usr/bin", "/opt/slurm-hooks/current/bin")


@dataclass
class ThreadInfo:
    tid: int
    comm: str
    state: str                      # R, S, D, ...
    wchan: str = ""
    syscall: str = ""
    file: str = ""
    fstype: str = ""
    mountpoint: str = ""
    progress: bool | None = None    # context switches changed during the sample (None: unknown)
    d_seconds: float | None = None  # how long in this D sleep, for a D thread without progress
    d_at_least: bool = False        # d_seconds is a lower bound (no scheduler clock to read)
    frames: list[str] = field(default_factory=list)   # Python frames, innermost first
    name: str = ""                  # Python thread name, from py-spy


@dataclass
class TaskInfo:
    pid: int
    ppid: int
    comm: str
    uid: int
    step: str | None
    local_task: str | None
    rank: str | None = None
    rank_var: str | None = None        # the variable the rank was read from (RANK, OMPI_COMM_WORLD_RANK, ...)
    local_rank: str | None = None
    cmdline: str = ""
    cpu_percent: float | None = None   # over the sample, all threads together
    # On a CPU or waiting in a run queue for one (schedstat), over the same sample: a
    # rank spinning on a crowded node gets little CPU but is runnable all the time.
    runnable_percent: float | None = None
    rss_mib: float | None = None       # resident memory (psutil, in the sampling child)
    threads: list[ThreadInfo] = field(default_factory=list)
    gpus: list[dict] = field(default_factory=list)     # index, utilization, memory_used_mib, used_mib
    python: bool = False
    stacks: str = ""                # "ok", or why there are none
    inspect: str = ""               # how reading the environment went


@dataclass
class NodeReport:
    node: str
    job: str
    tasks: list[TaskInfo] = field(default_factory=list)
    gpus: list[dict] = field(default_factory=list)
    pyspy: str = ""                 # py-spy's path, or "" when not installed
    notes: list[str] = field(default_factory=list)
    elapsed: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


def find_pyspy(setting: str = "auto") -> tuple[str | None, str]:
    """(py-spy's path or None, why none). `auto`: next to this Python (a virtualenv
    install), else in the usual places; HealthCheckProgram and srun steps may run
    without PATH, so none is relied on. A path: that program. `off`: none."""
    if setting == "off":
        return None, "Python stacks are switched off here (diagnose.pyspy: off)"
    if setting != "auto":
        if os.access(setting, os.X_OK):
            return setting, ""
        return None, f"py-spy not found at {printable(setting)} (diagnose.pyspy): no Python stacks"
    return _search_pyspy(), "py-spy is not installed here: no Python stacks (" + _pip() + " install 'py-spy>=0.3.14')"


def _pip() -> str:
    from .fanout import pip_of_this_installation
    return pip_of_this_installation()


def _search_pyspy() -> str | None:
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(here, os.X_OK):
        return here
    for d in PYSPY_SEARCH:
        p = os.path.join(d, "py-spy")
        if os.access(p, os.X_OK):
            return p
    return shutil.which("py-spy")


# A rank is what the job's own runtime numbers it: torchrun's RANK, the MPI library's
# rank; SLURM_PROCID only where no runtime numbers the process. Under `mpirun` in a
# batch script the ranks run as children of Open MPI's daemons (one srun step task per
# node, SLURM_PROCID 0..N-1): their SLURM_PROCID is their daemon's, not their rank.
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")


def program_rank(values: dict) -> tuple[str | None, str | None]:
    """(the variable, the rank) of a task, from what read_task_memory found."""
    for var in RANK_VARS:
        if values.get(var) not in (None, ""):
            return var, values[var]
    return None, None


def job_tasks(job: str, node: str, proc: str = procfs.PROC) -> list[tuple[int, JobRef]]:
    """(pid, JobRef) of the job's processes on this node, outside the extern step and
    outside the step this process runs in (the collector's own)."""
    own = of_pid("self", proc)
    me = os.getpid()
    out = []
    for name in procfs.list_pids(proc):
        pid = int(name)
        if pid == me:
            continue
        ref = of_pid(pid, proc)
        if ref is None or ref.job != job or not ref.belongs_to(node):
            continue
        if ref.step in (None, "extern"):
            continue            # slurmstepd itself (job level), and Slurm's extern step
        if own is not None and own.job == job and own.step == ref.step:
            continue
        out.append((pid, ref))
    return out


def _runnable_ns(pid: int) -> int | None:
    """Nanoseconds the process's threads have spent on a CPU or waiting in a run queue
    (/proc/PID/task/TID/schedstat: its first two fields); None where it cannot be read."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    total, read = 0, False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                on_cpu, queued = f.read().split()[:2]
            total += int(on_cpu) + int(queued)
            read = True
        except (OSError, ValueError):
            continue
    return total if read else None


def _cpu_sample(progress, pids: list[int], seconds: float) -> dict:
    """In a child: {"cpu": pid -> CPU percent over `seconds` (user + system, all
    threads), "runnable": pid -> percent of it on a CPU or queued for one,
    "rss_mib": pid -> resident memory}."""
    import psutil
    first, queued, rss = {}, {}, {}
    for pid in pids:
        try:
            p = psutil.Process(pid)
            t = p.cpu_times()
            first[pid] = t.user + t.system
            queued[pid] = _runnable_ns(pid)
            rss[str(pid)] = round(p.memory_info().rss / (1 << 20), 1)
        except psutil.Error:
            continue
    t0 = time.monotonic()
    time.sleep(seconds)
    out, runnable = {}, {}
    for pid, before in first.items():
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        took = max(time.monotonic() - t0, 1e-3)
        out[str(pid)] = round(100.0 * (t.user + t.system - before) / took, 1)
        now, then = _runnable_ns(pid), queued.get(pid)
        if now is not None and then is not None and now >= then:
            runnable[str(pid)] = round((now - then) / 1e7 / took, 1)
    return {"cpu": out, "runnable": runnable, "rss_mib": rss}


def _nvml(progress) -> dict:
    from ..host import nvml
    return nvml.collect(progress, processes=True)


def _place(t: ThreadInfo, pid: int, path: str, proc: str, tables: dict) -> None:
    """The file a blocked thread waits on, made absolute, and the mount holding it
    (from the task's own mount table: it may live in another mount namespace)."""
    if not path.startswith("/"):
        path = os.path.join(procfs.readlink(f"{proc}/{pid}/cwd") or "/", path)
    t.file = printable(path)
    table = tables.get(pid)
    if table is None:
        text = procfs.text(f"{proc}/{pid}/mountinfo")
        table = tables[pid] = MountTable(parse_mountinfo(text)) if text else MountTable([])
    m = table.holding(path.split(" (deleted)")[0])
    if m is not None:
        # A user's FUSE mount names its own type (`fuse.SUBTYPE`), escapes and all.
        t.fstype, t.mountpoint = printable(m.fstype), printable(m.mountpoint)


def _thread(pid: int, tid: int, proc: str, tables: dict) -> tuple[ThreadInfo | None, list[int]]:
    """A thread's state, kernel wait and system call, and the path arguments of that
    call that only its memory holds."""
    s = procfs.sample(pid, tid, proc)
    if s is None:
        return None, []
    t = ThreadInfo(tid=tid, comm=printable(s.comm), state=s.state,
                   wchan=(procfs.text(f"{proc}/{pid}/task/{tid}/wchan") or "").strip())
    if t.wchan == "0":
        t.wchan = ""
    call = syscall_of(pid, tid, proc)
    t.syscall = call.name
    if call.file and s.state == "D":
        _place(t, pid, call.file, proc, tables)
    else:
        t.file = printable(call.file)
    return t, call.addrs


def _is_python(pid: int, comm: str, proc: str) -> bool:
    exe = os.path.basename(procfs.readlink(f"{proc}/{pid}/exe") or "")
    return exe.startswith("python") or comm.startswith("python")


def _pyspy(pyspy: str, pid: int, start: int, timeout: float,
           runner: Runner) -> tuple[dict[int, tuple[str, list[str]]], str]:
    """tid -> (thread name, frames innermost first), and "ok" or why not. `start`: the
    target's start time, so that a stuck py-spy is remembered for this very process."""
    r = runner.command(f"jobreport:pyspy:{pid}:{start}",
                       [pyspy, "dump", "--nonblocking", "--json", "--pid", str(pid)], timeout,
                       {"PATH": "/usr/bin:/bin", "LANG": "C"})
    if r.not_started:
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(r.since))
        return {}, f"py-spy for pid {pid} is still stuck since {since} (py-spy pid {r.pid}): not started again"
    if r.stuck:
        return {}, (f"py-spy for pid {pid} gave no answer within {timeout:g}s and is stuck in the kernel "
                    f"(py-spy pid {r.pid}): not started again for this process")
    if not r.ok:
        return {}, printable(f"py-spy: {r.message()}")[:200]
    try:
        threads = json.loads(r.stdout)
    except ValueError:
        return {}, "py-spy: unreadable output"
    out = {}
    for th in threads if isinstance(threads, list) else []:
        try:
            tid = int(th.get("os_thread_id") or 0)
        except (TypeError, ValueError):
            continue
        frames = []
        for f in (th.get("frames") or [])[:FRAMES]:
            where = os.path.basename(str(f.get("short_filename") or f.get("filename") or "?"))
            frames.append(printable(f"{f.get('name', '?')} ({where}:{f.get('line', '?')})"))
        out[tid] = (printable(str(th.get("thread_name") or "")), frames)
    return out, "ok"


def collect(job: str, node: str, sample: float = 0.5, stacks: bool = True,
            deadline: float = 15.0, proc: str = procfs.PROC, pyspy_setting: str = "auto",
            sightings: dict | None = None, state: StateStore | None = None,
            exclude: tuple[int, ...] = ()) -> NodeReport:
    """`sightings`: the health check's stuck-task state here (key -> first_seen), for
    how long a D thread has been blocked where the scheduler's clock is not readable.
    `state`: the node's state, where py-spy children stuck in the kernel are kept.
    `exclude`: processes whose /proc files do not answer (screen()), left out."""
    started = time.monotonic()
    report = NodeReport(node=node, job=job)
    found = [(pid, ref) for pid, ref in job_tasks(job, node, proc) if pid not in exclude]
    for pid in exclude:
        report.notes.append(f"pid {pid}: its /proc files do not answer (a task in execve waiting on a "
                            "filesystem?): left out")
    if len(found) > MAX_TASKS:
        report.notes.append(f"{len(found)} processes in the job here; the first {MAX_TASKS} are read")
        found = found[:MAX_TASKS]
    infos: dict[int, TaskInfo] = {}
    for pid, ref in found:
        status = procfs.parse_status(procfs.read_small(f"{proc}/{pid}/status") or b"")
        try:
            uid = int(status.get("Uid", "-1").split()[0])
            ppid = int(status.get("PPid", "0"))
        except ValueError:
            uid, ppid = -1, 0
        if ref.uid is not None and ref.uid != uid:
            continue            # in a cgroup named for another user: not this job's task
        infos[pid] = TaskInfo(pid=pid, ppid=ppid, comm=printable(status.get("Name", "?")), uid=uid,
                              step=ref.step, local_task=ref.task)

    # Every thread's state, twice over the sample, to see which make progress.
    tables: dict = {}
    first: dict[tuple[int, int], tuple] = {}
    sampled_at = time.time()
    path_args: dict[int, list[tuple[ThreadInfo, int]]] = {}
    for pid, info in infos.items():
        for tid in _tids(pid, proc):
            s = procfs.sample(pid, tid, proc)
            t, addrs = _thread(pid, tid, proc, tables)
            if t is None or s is None:
                continue
            info.threads.append(t)
            first[(pid, tid)] = s.switches
            if addrs and t.state == "D" and not t.file:
                path_args.setdefault(pid, []).extend((t, a) for a in addrs)
        info.python = _is_python(pid, info.comm, proc)

    scanned = time.monotonic()
    runner = Runner()
    tasks = [Task("jobreport:cpu", _cpu_sample, (list(infos), sample), sample + 3.0),
             Task("jobreport:nvml", _nvml, (), NVML_TIMEOUT)]
    tasks += [Task(f"jobreport:inspect:{pid}", read_task_memory,
                   (pid, proc, tuple(a for _, a in path_args.get(pid, []))), INSPECT_TIMEOUT)
              for pid in list(infos)[:INSPECT_MAX]]
    if len(infos) > INSPECT_MAX:
        report.notes.append(f"environment read for the first {INSPECT_MAX} of {len(infos)} processes only")
    batch = runner.start(tasks)
    _rest_of_the_running(infos, proc, tables, scanned + sample)
    for pid, info in infos.items():
        for t in info.threads:
            s = procfs.sample(pid, t.tid, proc)
            if s is not None and (pid, t.tid) in first:
                t.progress = s.switches != first[(pid, t.tid)] or s.state == "R"
                if t.state == "D" and s.state == "D" and not t.progress:
                    _d_time(t, s, pid, proc, sightings or {}, time.time() - sampled_at)

    pyspy, why = find_pyspy(pyspy_setting) if stacks else (None, "")
    report.pyspy = pyspy or ""
    if stacks and pyspy is None:
        report.notes.append(why)
    stacks_runner = Runner(state, name=PYSPY_STATE)
    for pid, info in infos.items():
        if not stacks:
            info.stacks = "not asked for"
        elif not info.python:
            info.stacks = "not a Python process"
        elif pyspy is None:
            info.stacks = "no py-spy"
        else:
            left = deadline - (time.monotonic() - started) - 1.0
            if left <= 0.2:
                info.stacks = "no time left for stacks"
                continue
            target = procfs.sample(pid, pid, proc)
            if target is None:
                info.stacks = "gone"
                continue
            got, info.stacks = _pyspy(pyspy, pid, target.start, min(PYSPY_TIMEOUT, left), stacks_runner)
            for t in info.threads:
                if t.tid in got:
                    t.name, t.frames = got[t.tid]

    outcomes = runner.collect(batch)
    for pid, info in infos.items():
        o = outcomes.get(f"jobreport:inspect:{pid}")
        if o is not None and o.status == DONE:
            v = o.value
            var, rank = program_rank(v)
            info.rank, info.rank_var = (printable(rank), var) if rank is not None else (None, None)
            local = v.get("LOCAL_RANK") or v.get("SLURM_LOCALID")
            info.local_rank = printable(local) if local is not None else None
            info.cmdline = printable(v.get("cmdline", ""))[:300]
            info.inspect = printable(v.get("skipped") or "ok")
            for (t, _), path in zip(path_args.get(pid, []), v.get("paths") or []):
                if path and not t.file:
                    _place(t, pid, path, proc, tables)
        elif o is not None:
            info.inspect = printable(f"{o.status}: {o.error}")
    cpu = outcomes["jobreport:cpu"]
    if cpu.status == DONE:
        for pid, info in infos.items():
            info.cpu_percent = cpu.value["cpu"].get(str(pid))
            info.runnable_percent = cpu.value.get("runnable", {}).get(str(pid))
            info.rss_mib = cpu.value["rss_mib"].get(str(pid))
    else:
        # psutil's errors name the process (`name='...'`): the user's words.
        report.notes.append(printable(f"CPU sample: {cpu.status}: {cpu.error}"))
    _gpus(report, infos, outcomes["jobreport:nvml"])
    report.tasks = sorted(infos.values(), key=lambda t: t.pid)
    report.elapsed = round(time.monotonic() - started, 3)
    return report


def _rest_of_the_running(infos: dict[int, TaskInfo], proc: str, tables: dict, until: float) -> None:
    """Wait out the sample, looking again at the threads first caught running. A thread
    that polls (sleeps, wakes, looks, sleeps) or waits for a CPU on a loaded node is now
    and then caught awake: where it rests, it waits, and that is what it is doing. A
    thread that spins stays running, even when it is seen asleep for a moment (a lock
    handed between two busy threads): a quarter of the sample on a CPU is busy, on a
    loaded node too."""
    awake = [(pid, t) for pid, info in infos.items() for t in info.threads if t.state == "R"]
    ticks = {t.tid: procfs.cpu_ticks(pid, t.tid, proc) for pid, t in awake}
    began = time.monotonic()
    resting: dict[int, ThreadInfo] = {}
    while True:
        looking = [(pid, t) for pid, t in awake if t.tid not in resting]
        left = until - time.monotonic()
        if not looking or left <= 0:
            break
        time.sleep(min(RESAMPLE, left))
        for pid, t in looking:
            again, _ = _thread(pid, t.tid, proc, tables)
            if again is not None and again.state in ("S", "D") and again.syscall != "running":
                resting[t.tid] = again
    left = until - time.monotonic()
    if left > 0:
        time.sleep(left)
    window = (time.monotonic() - began) * procfs.boot_ticks()
    for pid, t in awake:
        again = resting.get(t.tid)
        before, after = ticks.get(t.tid), procfs.cpu_ticks(pid, t.tid, proc)
        if again is None or before is None or after is None or after - before > window / 4:
            continue
        t.state, t.wchan, t.syscall = again.state, again.wchan, again.syscall
        t.file, t.fstype, t.mountpoint = again.file, again.fstype, again.mountpoint


def _d_time(t: ThreadInfo, s: procfs.TaskSample, pid: int, proc: str, sightings: dict,
            sampled: float) -> None:
    """How long `t` has been in D: the scheduler's figure, else a lower bound from the
    health check's first sighting of this very task (same switch counts) or this
    collector's own sample."""
    seconds = procfs.off_cpu_seconds(pid, t.tid, proc)
    if seconds is not None:
        t.d_seconds = round(seconds, 1)
        return
    seen = sightings.get(s.key)
    bound = sampled
    if isinstance(seen, dict) and tuple(seen.get("switches") or ()) == s.switches:
        try:
            bound = max(bound, time.time() - float(seen["first_seen"]))
        except (KeyError, TypeError, ValueError):
            pass
    t.d_seconds, t.d_at_least = round(bound, 1), True


def _tids(pid: int, proc: str) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"{proc}/{pid}/task") if t.isdigit())
    except OSError:
        return []


def _gpus(report: NodeReport, infos: dict[int, TaskInfo], o) -> None:
    if o.status != DONE:
        report.notes.append(printable(f"NVML: {o.status} ({o.error}); GPUs unknown"))
        return
    v = o.value
    if v.get("init_error"):
        if v["init_error"] not in ("LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED"):
            report.notes.append(printable(f"NVML: {v['init_error']}"))
        return
    for g in v.get("gpus", []):
        entry = {"index": g.get("index"), "uuid": g.get("uuid"), "status": g.get("status"),
                 "utilization": g.get("utilization"), "memory_used_mib": g.get("memory_used_mib"),
                 "pids": []}
        for p in g.get("processes") or []:
            info = infos.get(p.get("pid"))
            if info is None:
                continue
            entry["pids"].append(info.pid)
            info.gpus.append({"index": g.get("index"), "utilization": g.get("utilization"),
                              "used_mib": p.get("used_mib"), "status": g.get("status")})
        report.gpus.append(entry)


def _sightings(cfg, node: str) -> dict:
    """The health check's stuck-task state on this node; {} when there is none or this
    user may not read it (job-report also runs as the job's owner)."""
    from ..checks.stuck_tasks import STATE
    from ..core.state import StateStore, state_dir
    try:
        with open(StateStore(state_dir(cfg, node)).path(STATE)) as f:
            value = json.load(f)
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


SCREEN_TIMEOUT = 2.0
SCREEN_TRIES = 3
SCREENED = ("stat", "wchan", "syscall", "mountinfo")


def _screen(progress, pids: list[int], proc: str) -> list[int]:
    """In a child: read what collect() reads of each process in this process, so that a
    process whose files stall is found in seconds (the runner names the file the child
    had open at its deadline), not at collect()'s own deadline."""
    for pid in pids:
        for name in SCREENED:
            procfs.read_small(f"{proc}/{pid}/{name}", size=256)
        for link in ("cwd", "exe"):
            procfs.readlink(f"{proc}/{pid}/{link}")
        for tid in _tids(pid, proc):
            for name in ("stat", "wchan", "syscall"):
                procfs.read_small(f"{proc}/{pid}/task/{tid}/{name}", size=256)
    return pids


def _stalled_pid(reading: list, proc: str) -> int | None:
    prefix = proc.rstrip("/") + "/"
    for path in reading:
        head = path[len(prefix):].split("/", 1)[0] if path.startswith(prefix) else ""
        if head.isdigit():
            return int(head)
    return None


def _collect_child(progress, job: str, node: str, kw: dict) -> dict:
    state = kw.get("state")
    report = collect(job, node, **kw)
    out = report.to_json()
    if state is not None:
        out["notes"] = list(out.get("notes") or []) + [printable(e) for e in state.errors]
    return out


def collect_guarded(job: str, node: str, deadline: float = 15.0, sample: float = 0.5,
                    proc: str = procfs.PROC, **kw) -> dict:
    """collect() as job-report runs it: never blocked by a process of the job. The
    job's processes are first screened in a child (their stat, wchan, syscall, links and
    mountinfo; a task in execve with a FUSE flush unanswered stalls every reader of
    those), those that stall are left out and named, and collect() itself runs in a
    child with a deadline. Returns the report's JSON."""
    runner = Runner()
    pids = [pid for pid, _ in job_tasks(job, node, proc)]
    exclude: list[int] = []
    for attempt in range(SCREEN_TRIES):
        key = f"jobreport:screen:{attempt}"
        o = runner.run([Task(key, _screen, ([p for p in pids if p not in exclude], proc), SCREEN_TIMEOUT)])[key]
        if o.status == DONE:
            break
        pid = _stalled_pid(o.reading, proc)
        if pid is None or pid in exclude:
            break
        exclude.append(pid)
    args = dict(kw, deadline=deadline, sample=sample, proc=proc, exclude=tuple(exclude))
    o = runner.run([Task("jobreport:collect", _collect_child, (job, node, args), deadline + sample + 10.0)])[
        "jobreport:collect"]
    if o.status == DONE and isinstance(o.value, dict):
        return o.value
    report = NodeReport(node=node, job=job)
    report.notes.append(printable(f"the report was not collected: {o.status}: {o.error} (at {o.step or 'start'})"))
    return report.to_json()


def main(cfg, job: str, node: str | None, as_json: bool, sample: float, stacks: bool,
         deadline: float) -> int:
    from ..core.config import node_name
    if not job.isdigit():
        print(f"slurm-hooks job-report: {printable(job)!r} is not a job id (a number)", file=sys.stderr)
        return 2
    from ..core.state import StateStore, state_dir
    node = node or node_name(cfg)
    state = StateStore(state_dir(cfg, node))
    # Run as the job's owner, it may not write the node's state: then a stuck py-spy is
    # not remembered, and the report says so (the state's errors join its notes).
    doc = collect_guarded(job, node, sample=sample, stacks=stacks, deadline=deadline,
                          pyspy_setting=cfg.diagnose.pyspy, sightings=_sightings(cfg, node), state=state)
    if as_json:
        # One line: diagnose reads one JSON document per node from srun's labelled output.
        print(json.dumps(doc, separators=(",", ":"), ensure_ascii=True))
    else:
        from .diagnose import render_node
        print(render_node(doc))
    return 0
