"""What a stuck task waits on, and its finding: the stuck-task check's diagnosis.

Imported only when a run sees a task in D (checks/stuck_tasks.py, checks/leftovers.py):
a healthy run's scan finds none and never loads it, nor what it needs (host/waits.py,
host/syscalls.py, host/jobs.py, the kernel log).

Reads of a stuck task from this process are limited to files the kernel answers
without the target's memory map (host/procfs.py). The environment (for the rank), the
command line and path arguments live in the target's memory: a hang-safe child reads
them, with a deadline, only inside anonymous readable mappings (a page of a file on a
FUSE mount the user can stall would hang the reader), every read bounded, and at most
INSPECT_STUCK_MAX such children stuck at once.

Whose the wait is comes from the kernel's own ids alone (host/waits.py): a task on its
own user's FUSE mount, or on anything not proven to be the node's, is the job's
problem and is told to the job, never a drain or a reboot.
"""
from __future__ import annotations

import os
import time

from .. import TYPE_CHECKING
from ..core.model import FAIL, WARN, Finding
from ..core.reason import duration, printable, shorten_path
from ..core.records import dataclass, field
from ..host import procfs, syscalls, waits
from ..host.jobs import JobRef, of_pid
from ..host.mounts import MountTable, parse_mountinfo
from ..host.runner import DONE, Task

if TYPE_CHECKING:
    from typing import Any

    from . import Context

CAUSE_LABEL = waits.CAUSE_LABEL
ENVIRON_MAX = 128 << 10     # a user can point their environment at gigabytes (PR_SET_MM_MAP)
CMDLINE_MAX = 4096
PATH_MAX = 4096
MAPS_MAX = 4 << 20
INSPECT_PER_RUN = 16        # processes whose memory one run reads
INSPECT_STUCK_MAX = 4       # inspect children left stuck in the kernel before we stop trying


@dataclass
class Stuck:
    """One process with one or more stuck threads, and everything known about it."""
    sample: procfs.TaskSample           # the first stuck thread seen
    tids: list[int]
    seconds: float
    ref: JobRef | None
    syscall: str = ""
    syscall_nr: int | None = None
    fd: int | None = None
    file: str = ""
    mountpoint: str = ""
    fstype: str = ""
    wchan: str = ""
    stack: list[str] = field(default_factory=list)
    cause: str = "other"
    blocked: float | None = None       # seconds in this D sleep by the scheduler (None: unreadable)
    rank: str | None = None
    cmdline: str = ""
    inspect: str = ""                   # how reading the process's memory went
    kernel: str = ""                    # the kernel's own hung-task line, when present
    mount_owner: int | None = None      # uid whose mount it waits on, if a user's
    fds: list[int] = field(default_factory=list)    # every descriptor the call waits on
    dirfd: int | None = None            # the directory a relative path argument starts from
    devs: list[str] = field(default_factory=list)   # devices of its file mappings (maps)
    walk: dict = field(default_factory=dict)        # how resolving its path argument went
    how: list[str] = field(default_factory=list)    # how the place was proven, or why not
    mount_dev: str = ""                 # the proven mount's device (major:minor)
    table: MountTable | None = None     # its own mount table, read whole
    table_cut: bool = False
    sigkill: bool = False               # a SIGKILL is pending and the task is still in D


def _anonymous(maps: bytes) -> list[tuple[int, int]]:
    """Readable mappings backed by no file ([heap], [stack], anonymous memory), from
    /proc/PID/maps: reading those can fault in nothing but memory."""
    out = []
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5 or not parts[1].startswith(b"r"):
            continue
        name = parts[5].strip() if len(parts) > 5 else b""
        if parts[4] != b"0" or (name and name not in (b"[heap]", b"[stack]")):
            continue
        lo, _, hi = parts[0].partition(b"-")
        try:
            out.append((int(lo, 16), int(hi, 16)))
        except ValueError:
            continue
    return out


def _within(ranges: list[tuple[int, int]], start: int, end: int) -> bool:
    return end > start and any(lo <= start and end <= hi for lo, hi in ranges)


def _read_bounded(path: str, limit: int) -> bytes:
    """At most limit bytes (/proc files answer a page or so per read)."""
    chunks, got = [], 0
    with open(path, "rb", buffering=0) as f:
        while got < limit:
            chunk = f.read(min(limit - got, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    return b"".join(chunks)


def _inspect(progress, pid: int, proc: str, addrs: list[int]) -> dict:
    """Runs in a hang-safe child: reads what lives in the target's memory.

    Only anonymous memory is read, each read bounded: the environment and the command
    line only when the ranges the kernel's stat gives for them lie in anonymous
    mappings (PR_SET_MM_MAP lets a process point them anywhere, at a file on a FUSE
    mount it can stall included), a path argument only inside an anonymous mapping.
    """
    out: dict = {}
    progress("maps")
    maps = _read_bounded(f"{proc}/{pid}/maps", MAPS_MAX)
    anon = _anonymous(maps)
    out["devs"] = waits.mapping_devs(maps)
    stat = _read_bounded(f"{proc}/{pid}/stat", 4096)
    fields = stat[stat.rfind(b")") + 2:].split()
    try:
        arg_start, arg_end, env_start, env_end = (int(x) for x in fields[45:49])
    except ValueError:
        arg_start = arg_end = env_start = env_end = 0
    skipped = []
    progress("environ")
    if env_start == env_end:
        pass                        # no environment (or the kernel would not say where)
    elif _within(anon, env_start, env_end):
        data = _read_bounded(f"{proc}/{pid}/environ", ENVIRON_MAX)
        env = dict(item.split(b"=", 1) for item in data.split(b"\0") if b"=" in item)
        for key in (b"RANK", b"SLURM_PROCID", b"OMPI_COMM_WORLD_RANK", b"PMI_RANK", b"LOCAL_RANK",
                    b"SLURM_LOCALID", b"SLURM_JOB_ID"):
            if key in env:
                out[key.decode()] = env[key].decode("utf-8", "replace")
    else:
        skipped.append("environment")
    progress("cmdline")
    # The kernel reads on into the environment when the command line does not end in
    # NUL (setproctitle): both ranges must be safe.
    if _within(anon, arg_start, arg_end) and (env_start == env_end or _within(anon, env_start, env_end)):
        data = _read_bounded(f"{proc}/{pid}/cmdline", CMDLINE_MAX)
        out["cmdline"] = data.replace(b"\0", b" ").decode("utf-8", "replace").strip()
    else:
        skipped.append("command line")
    paths: list[str | None] = []
    if addrs:
        progress("mem")
        with open(f"{proc}/{pid}/mem", "rb", buffering=0) as mem:
            for addr in addrs:
                hi = next((h for lo, h in anon if lo <= addr < h), None)
                if hi is None:
                    paths.append(None)
                    skipped.append("path argument")
                    continue
                try:
                    mem.seek(addr)
                    data = mem.read(min(hi - addr, PATH_MAX))
                    paths.append(os.fsdecode(data.split(b"\0", 1)[0]))
                except (OSError, ValueError, OverflowError):
                    paths.append(None)
    out["paths"] = paths
    if skipped:
        out["skipped"] = ", ".join(skipped) + " not in anonymous memory: not read"
    return out


@dataclass
class Syscall:
    """What a thread is doing in the kernel, from /proc/PID/task/TID/syscall."""
    name: str = ""                  # "read", "running", "page fault", or "" (unknown)
    nr: int | None = None
    fd: int | None = None
    file: str = ""                  # the file behind fd (a link the kernel answers)
    addrs: list[int] = field(default_factory=list)   # path arguments, in the task's memory
    fds: list[int] = field(default_factory=list)     # every descriptor it waits on
    dirfd: int | None = None        # where a relative path argument starts (None: the cwd)


def syscall_of(pid: int, tid: int, proc: str = procfs.PROC) -> Syscall:
    """The system call a thread is in and the file it concerns. Reads only what the
    kernel answers without the target's memory: safe on a stuck task."""
    out = Syscall()
    line = procfs.syscall_line(pid, tid, proc)
    if not line:
        return out
    if line[0] == "running":
        out.name = "running"
        return out
    try:
        nr = int(line[0])
    except ValueError:
        return out
    if nr < 0:
        out.name = "page fault"         # blocked outside a system call
        return out
    out.nr, out.name = nr, syscalls.name(nr)
    args = [int(a, 16) for a in line[1:7]]
    fd, addr = syscalls.file_args(out.name, args)
    out.fds = syscalls.fds_of(out.name, args)
    if out.fds:
        out.fd = out.fds[0]
        out.file = procfs.readlink(f"{proc}/{pid}/fd/{out.fd}") or ""
    if addr:
        out.addrs = [addr]
        out.dirfd = fd
    return out


def read_task_memory(progress, pid: int, proc: str = procfs.PROC, addrs: tuple = ()) -> dict:
    """Rank variables of the environment, the command line and the given path
    arguments of a process, read only from its anonymous memory, each read bounded.

    Runs in a hang-safe child (runner.Task), never in the checker itself. Keys:
    RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, LOCAL_RANK, SLURM_LOCALID,
    SLURM_JOB_ID (those present), cmdline, paths, skipped (what was not read and why).
    """
    return _inspect(progress, pid, proc, list(addrs))


def rank_from(values: dict) -> str | None:
    """The global rank among read_task_memory's values, by the launchers' precedence."""
    return (values.get("RANK") or values.get("SLURM_PROCID") or values.get("OMPI_COMM_WORLD_RANK")
            or values.get("PMI_RANK"))


class Diagnosis:
    """Diagnoses stuck processes for the check `name`, with the stuck-task check's
    settings (its own section, which leftovers shares): their children are keyed by
    that name, and so are the findings."""

    def __init__(self, name: str, settings: Any, proc: str = procfs.PROC):
        self.name = name
        self.settings = settings
        self.proc = proc

    def corroborated(self, ctx: Context, watching: list, hung: dict, kernel: dict, out: list) -> list:
        """A task seen twice in D, proven (by the kernel's ids) to wait on a mount whose
        own probe hung in this run, needs no long grace: two witnesses agree. Its
        finding goes to `out`; the tasks still only watched are returned."""
        pending: dict[int, list] = {}
        for b, held in watching:
            pending.setdefault(b.pid, []).append((b, held))
        left = []
        promoted = set()
        for d in self.diagnose(ctx, pending, kernel):
            path = hung.get(d.mount_dev) if d.mount_dev else None
            if path is None or d.cause not in waits.NODE_CAUSES:
                continue
            d.how.append(f"corroborated: the probe of {path} on the same mount hung in this run")
            f = self.finding(ctx, d)
            if f is not None:
                f.detail = f"corroborated by the hung probe of {path}, before the grace; " + f.detail
                out.append(f)
                promoted.add(d.sample.pid)
        for b, held in watching:
            if b.pid not in promoted:
                left.append((b, held))
        return left

    def hung_probes(self, ctx: Context, outcomes: dict) -> dict[str, str]:
        """Device (major:minor) -> path of each filesystem probe that hung in this run, or
        is still stuck from an earlier one: the mount's own witness."""
        from ..host.runner import HUNG, STILL_HUNG
        out = {}
        for key, o in outcomes.items():
            if key.startswith("filesystem:") and o.status in (HUNG, STILL_HUNG):
                path = key.split(":", 1)[1]
                m = ctx.mounts.holding(path)
                if m is not None and m.dev:
                    out[m.dev] = path
        return out

    def kernel_lines(self, ctx: Context, samples: list[procfs.TaskSample]) -> dict[int, tuple[str, float]]:
        """tid -> (the kernel's hung-task line, wall time the task has been blocked since).

        The kernel's own "blocked for more than N seconds" corroborates a sighting and
        says how long the task has been stuck at least, even on our first look at it.
        """
        from ..host import kmsg
        wanted = {s.tid: s for s in samples}
        ticks = procfs.boot_ticks()
        mono_now, wall_now = time.monotonic(), time.time()
        lines = {}
        for rec, m in kmsg.match(kmsg.read(path=ctx.config.kernel_log), "hung_task"):
            s = wanted.get(int(m.group("pid")))
            blocked_at = rec.usec / 1e6 - int(m.group("seconds"))
            # Same tid and comm, and a task that existed then (not a reused tid).
            if s is None or m.group("comm") != s.comm[:15] or s.start / ticks > blocked_at:
                continue
            lines[s.tid] = (rec.text, wall_now - (mono_now - blocked_at))
        return lines

    def _cgroup_ref(self, pid: int) -> JobRef | None:
        return of_pid(pid, self.proc)

    def ref(self, pid: int, uid: int) -> JobRef | None:
        """The job from the cgroup, when the cgroup's uid_U is the task's own uid: a
        task of one user in a cgroup named for another is nobody's job we act on."""
        ref = self._cgroup_ref(pid)
        if ref is not None and ref.uid is not None and ref.uid != uid:
            return None
        return ref

    def diagnose(self, ctx: Context, stuck: dict, kernel: dict) -> list[Stuck]:
        results: list[Stuck] = []
        tasks: list[Task | None] = []
        listpids = None
        inspect_stuck = sum(1 for k in ctx.runner.stuck() if k.startswith((f"{self.name}:inspect:", f"{self.name}:walk:")))
        for pid, items in sorted(stuck.items()):
            items.sort(key=lambda x: -x[1])
            first, held = items[0]
            named = self._cgroup_ref(pid)
            ref = self.ref(pid, first.uid)
            if named is None and self.settings.listpids_fallback:
                if listpids is None:
                    listpids = _listpids(ctx)
                ref = listpids.get(pid)
            if ref is not None and not ref.belongs_to(ctx.node):
                continue                          # another slurmd's job on this host
            d = Stuck(sample=first, tids=[b.tid for b, _ in items], seconds=held, ref=ref)
            d.kernel = next((kernel[b.tid][0] for b, _ in items if b.tid in kernel), "")
            addrs = self._syscall(d, first.pid, first.tid)
            d.wchan = (procfs.text(f"{self.proc}/{pid}/task/{first.tid}/wchan") or "").strip()
            d.blocked = procfs.off_cpu_seconds(pid, first.tid, self.proc)
            d.stack = procfs.stack(pid, first.tid, self.proc)
            results.append(d)
            if inspect_stuck >= INSPECT_STUCK_MAX:
                d.inspect = f"not read: {inspect_stuck} earlier readers are stuck in the kernel"
                tasks.append(None)
            elif len([t for t in tasks if t]) >= INSPECT_PER_RUN:
                d.inspect = f"not read: at most {INSPECT_PER_RUN} processes are read per run"
                tasks.append(None)
            else:
                tasks.append(Task(f"{self.name}:inspect:{pid}:{first.start}", _inspect,
                                  (pid, self.proc, addrs), self.settings.inspect_timeout))
        live = [t for t in tasks if t]
        outcomes = ctx.runner.run(live) if live else {}
        walks: list[tuple[Stuck, Task]] = []
        for d, task in zip(results, tasks):
            o = outcomes.get(task.key) if task is not None else None
            path = None
            if o is not None and o.status == DONE:
                v = o.value
                d.rank = rank_from(v)
                d.cmdline = v.get("cmdline", "")
                d.inspect = v.get("skipped") or "ok"
                d.devs = [x for x in v.get("devs", []) if isinstance(x, str)]
                path = next((p for p in v.get("paths", []) if p), None)
            elif o is not None:
                d.inspect = f"{o.status}: {o.error}"
            if path and not d.file:
                base = "root" if path.startswith("/") else ("cwd" if d.dirfd is None else f"fd/{d.dirfd}")
                # For people only: where the path leads is the walk's to say, not this string.
                d.file = path if base == "root" else os.path.join(
                    procfs.readlink(f"{self.proc}/{d.sample.pid}/{base}") or "", path)
                if inspect_stuck < INSPECT_STUCK_MAX and len(walks) < INSPECT_PER_RUN:
                    # Never into a user's own mount: reaching it is the answer, and its
                    # server is theirs to stall (a walk stuck there is one reader fewer).
                    theirs = sorted(m.mount_id for m in self._table(d)
                                    if waits.owner(m, self._table(d), ctx.mounts, d.sample.uid)[0] == "user")
                    walks.append((d, Task(f"{self.name}:walk:{d.sample.pid}:{d.sample.start}", waits.walk,
                                          (d.sample.pid, self.proc, base, path, theirs),
                                          self.settings.inspect_timeout)))
                else:
                    d.walk = {"end": "not resolved", "error": f"{inspect_stuck} earlier readers are stuck"
                              if inspect_stuck >= INSPECT_STUCK_MAX else f"at most {INSPECT_PER_RUN} per run"}
        if walks:
            done = ctx.runner.run([t for _, t in walks])
            for d, t in walks:
                o = done[t.key]
                if o.status == DONE and isinstance(o.value, dict):
                    d.walk = o.value
                else:
                    # It never came back: the mount it was looking in is the one that
                    # does not answer.
                    d.walk = {"mnt_id": waits.hung_at(o.step), "end": o.status}
        for d in results:
            self._locate(ctx, d)
        return results

    def _syscall(self, d: Stuck, pid: int, tid: int) -> list[int]:
        call = syscall_of(pid, tid, self.proc)
        d.syscall, d.syscall_nr = call.name, call.nr
        d.fds, d.dirfd = call.fds, call.dirfd
        if call.fd is not None:
            d.fd, d.file = call.fd, call.file
        return call.addrs

    def _table(self, d: Stuck) -> MountTable:
        """The task's own mount table, read whole once (procfs.read_whole)."""
        if d.table is None:
            data, d.table_cut = procfs.read_whole(f"{self.proc}/{d.sample.pid}/mountinfo", procfs.MOUNTINFO_MAX)
            d.table = MountTable(parse_mountinfo(data.decode("utf-8", "surrogateescape"))) if data else MountTable([])
        return d.table

    def _locate(self, ctx: Context, d: Stuck) -> None:
        """Whose the place is that the task waits on, from the kernel's ids alone (host/waits.py)."""
        pid = d.sample.pid
        table = self._table(d)
        cut = d.table_cut
        candidates: list[tuple] = []
        for fd in d.fds:
            mid = procfs.mnt_id(pid, fd, self.proc)
            candidates.append((table.by_id(mid) if mid is not None else None, f"fd {fd}: mnt_id {mid}"))
        if d.walk:
            mid = d.walk.get("mnt_id")
            how = f"path resolved from the task's root: {d.walk.get('end')}, mnt_id {mid}"
            candidates.append((table.by_id(mid) if isinstance(mid, int) else None, how))
        elif d.syscall == "page fault" and d.devs:
            candidates += waits.fault_candidates([d.wchan] + d.stack, d.devs, table)
        place = waits.attribute([d.wchan] + d.stack, candidates, table, ctx.mounts, d.sample.uid)
        if cut:
            place.how.append(f"its mountinfo is over {procfs.MOUNTINFO_MAX >> 20} MiB: read in part")
        d.cause, d.how = place.cause, place.how
        if place.mount is not None:
            d.mountpoint, d.fstype, d.mount_dev = place.mount.mountpoint, place.mount.fstype, place.mount.dev
        d.sigkill = _sigkill_pending(self.proc, pid, d.sample.tid)
        if place.cause == "user_mount":
            d.mount_owner = place.owner_uid

    def finding(self, ctx: Context, d: Stuck, after_end: bool = False) -> Finding | None:
        s, ref = d.sample, d.ref
        # User-chosen bytes, written out (\x1b) before any of them is shortened or joined.
        d.file, d.cmdline = printable(d.file), printable(d.cmdline)
        call = f"{d.syscall}()" if d.syscall and d.syscall not in ("page fault", "running") else (d.syscall or "the kernel")
        where = ""
        if d.file:
            where = f" on {shorten_path(d.file, 120)}"
            if d.fstype:
                where += f" ({d.fstype} {d.mountpoint})"
        elif d.wchan:
            where = f" at {d.wchan}"
        who = f"job {ref.job} " if ref else ""
        if ref and d.rank is not None:
            who += f"rank {d.rank} "
        elif ref and ref.task is not None:
            who += f"task {ref.task} "
        threads = f" ({len(d.tids)} threads)" if len(d.tids) > 1 else ""
        # The scheduler knows when the thread went to sleep; our own sightings (and the
        # kernel's hung-task line) only bound it from below.
        # (Its clock leaves out interrupt and stolen time: a little behind ours.)
        exact = d.blocked is not None and d.blocked >= d.seconds * 0.98 - 1
        d_seconds = max(d.blocked, d.seconds) if exact and d.blocked is not None else d.seconds
        held = ("still stuck after the job ended" if after_end
                else f"stuck for {duration(d_seconds, at_least=not exact)}")
        if d.sigkill:
            held += " (killed, still in D: unkillable)"
        own = d.mount_owner is not None
        mine = own and d.mount_owner == s.uid
        if own:
            kind = "FUSE mount" if d.fstype.startswith("fuse") else "mount"
            where += f" (a {kind} of uid {d.mount_owner}" + (", the task's own user)" if mine else ")")
        elif d.cause not in waits.NODE_CAUSES:
            where += f" (not the node's: {CAUSE_LABEL[d.cause]})"
        summary = f"{who}pid {s.pid}{threads} {held} in {call}{where}"
        # The node reason must be stable across runs (no duration) and short, with "stuck"
        # in the 20 columns `sinfo -R` shows: the pid comes last.
        short_where = f" on {shorten_path(d.file, 100)}" if d.file else (f" at {d.wchan}" if d.wchan else "")
        fs = f" ({d.fstype})" if d.fstype else ""
        reason = (f"{'job ' + ref.job + ' ' if ref else ''}{'left ' if after_end else ''}"
                  f"stuck in {call}{short_where}{fs}, pid {s.pid}")
        evidence = {
            "node": ctx.node, "job": ref.job if ref else None, "step": ref.step if ref else None,
            "task": ref.task if ref else None, "rank": d.rank, "pid": s.pid, "tids": d.tids,
            "start_ticks": s.start, "comm": s.comm, "uid": s.uid, "seconds": round(d.seconds, 1),
            "d_seconds": round(d_seconds, 1), "d_at_least": not exact,
            "syscall": d.syscall, "syscall_nr": d.syscall_nr, "fd": d.fd, "file": d.file,
            "mountpoint": d.mountpoint, "fstype": d.fstype, "wchan": d.wchan, "stack": d.stack,
            "cause": d.cause, "cmdline": d.cmdline, "inspect": d.inspect, "kernel_log": d.kernel,
            "mount_owner": d.mount_owner, "attribution": d.how, "mount_dev": d.mount_dev,
            "sigkill_pending": d.sigkill,
        }
        detail = (f"cause: {CAUSE_LABEL[d.cause]}; comm {s.comm}; wchan {d.wchan or '?'}; "
                  f"stack {' < '.join(d.stack[:4]) or 'unreadable'}"
                  + (f"; kernel: {d.kernel}" if d.kernel else ""))
        incident = f"{ctx.node}:{s.pid}:{s.start}"
        if own:
            # The user's own storage: the job's problem. The node stays in service; the
            # job gets the diagnosis and, for the user's own mount, the configured action.
            if ref is None and self.settings.non_job_tasks == "ignore":
                return None
            action = self.settings.own_mount if mine else "comment"
            return Finding(check=self.name, target=f"{who}pid {s.pid}".strip(), status="stuck_own_mount",
                           severity=WARN, summary=summary, detail=detail, evidence=evidence,
                           job=ref.job if ref else None, incident=incident, reason=reason,
                           job_action=action if ref else "")
        if d.cause not in waits.NODE_CAUSES:
            # Nothing proves the node's storage, device or driver holds it (a vfork
            # parent, a ptrace stop, a pipe, a lock, a mount no id shows to be the node's):
            # the job's problem, told to the job. Never a drain, a reboot or a share of
            # the drain-storm breaker.
            if ref is None and self.settings.non_job_tasks == "ignore":
                return None
            return Finding(check=self.name, target=f"{who}pid {s.pid}".strip(), status="stuck_not_node",
                           severity=WARN, summary=summary, detail=detail, evidence=evidence,
                           job=ref.job if ref else None, incident=incident, reason=reason,
                           job_action=self.settings.not_node if ref else "")
        if ref is None:
            mode = self.settings.non_job_tasks
            if mode == "ignore":
                return None
            severity = FAIL if mode == "drain" else WARN
        else:
            severity = FAIL
        return Finding(check=self.name, target=f"{who}pid {s.pid}".strip(), status="stuck", severity=severity,
                       summary=summary, detail=detail, evidence=evidence,
                       job=ref.job if ref else None,
                       incident=incident, reason=reason, needs_reboot=True,
                       hard=True, resumable=False)


def _sigkill_pending(proc: str, pid: int, tid: int) -> bool:
    """A SIGKILL is pending for the thread (its own or its process's set) and it is still
    in D: the unkillable kind, which neither ending its job nor a signal will end. A
    killable wait would have died by now."""
    data = procfs.read_small(f"{proc}/{pid}/task/{tid}/status")
    st = procfs.parse_status(data or b"")
    try:
        pending = int(st.get("SigPnd", "0"), 16) | int(st.get("ShdPnd", "0"), 16)
    except ValueError:
        return False
    return bool(pending & (1 << 8))             # bit 9 - 1: SIGKILL


def _listpids(ctx: Context) -> dict[int, JobRef]:
    # scontrol whatever slurm.backend says: listpids reads this host's slurmstepd
    # sockets, there is no libslurm call for it (the pyslurm backend runs scontrol too).
    from ..slurm.api import SlurmError
    from ..slurm.scontrol import Slurm
    if ctx.behaviour.looks_only:
        return {}          # a look asks Slurm nothing: the cgroup alone names the job
    try:
        return Slurm(ctx.config.slurm).listpids(ctx.node)
    except SlurmError:
        return {}
