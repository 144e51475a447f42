"""What a stuck task waits on, and its finding: the stuck-task check's diagnosis.

Imported only when a run sees a task in D (checks/stuck_tasks.py, checks/leftovers.py):
a healthy run's scan finds none and never loads it, nor what it needs (host/waits.py,
host/syscalls.py, host/jobs.py, the kernel log).

This process reads nothing of a stuck task but its `status` and `cgroup` (host/procfs.py
says why). Everything else is read in hang-safe children, with deadlines, each keyed by
the process it looks at (at most one child stuck per process, ever):
- a look (`_look`): its stat, system call, wchan, kernel stack, scheduler times, the
  links and mount ids (fdinfo) of the descriptors its call names (never an
  anon_inode's: an epoll's fdinfo waits on its lock) and its mount namespace;
- one mount table per mount namespace (`_mount_view`), read whole up to 16 MiB, sent
  back whole when it is small, else only the mounts the tasks' ids name;
- its memory (`_inspect`): the environment (for the rank), the command line and path
  arguments, only inside anonymous readable mappings (a page of a file on a FUSE
  mount the user can stall would hang the reader), every read bounded, and at most
  INSPECT_STUCK_MAX such children stuck at once;
- the walk of a path argument (host/waits.walk).
At most DIAGNOSE_PER_RUN processes are diagnosed per run, those not diagnosed longest
first; the rest are counted and named in the next run.

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
DIAGNOSE_PER_RUN = 16       # stuck processes diagnosed per run; the rest wait for the next
TABLES_PER_RUN = 4          # mount namespaces whose table one run reads
TABLE_WHOLE = 4096          # a task's table up to this many mounts comes back whole
TABLE_TIMEOUT = 5.0         # 16 MiB of mountinfo takes about 0.6 s of CPU to parse


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
    table_whole: bool = False           # the whole table came back (a path can be walked through it)
    table_count: int = 0
    table_note: str = ""                # why the table was not read
    addrs: list[int] = field(default_factory=list)  # path arguments' addresses in its memory
    path: str | None = None             # the path argument, as read from its memory
    sigkill: bool = False               # a SIGKILL is pending and the task is still in D
    mnt_ids: dict = field(default_factory=dict)     # descriptor -> the kernel's mount id (fdinfo)
    anon: dict = field(default_factory=dict)        # descriptor -> its anon_inode link (no mount)
    mntns: str = ""                     # its mount namespace (ns/mnt link)
    links: dict = field(default_factory=dict)       # cwd and the dirfd's link, for people
    look: str = "ok"                    # how the look at its /proc files went
    source: str = ""                    # the proven mount's source (what other nodes know it by)
    network: bool = False               # the proven mount is a network filesystem's
    earlier: str = ""                   # placed by an earlier run: what it was doing then


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


def _look(progress, pid: int, tid: int, proc: str) -> dict:
    """Runs in a hang-safe child: what the kernel says of one stuck thread. Each of
    these files blocks while the task is in execve with a FUSE flush unanswered, and a
    descriptor's fdinfo blocks on an epoll's lock: here that costs a child, not the run."""
    out: dict = {}
    progress("stat")
    stat = procfs.read_small(f"{proc}/{pid}/task/{tid}/stat", size=1024)
    parsed = procfs.parse_stat(stat) if stat else None
    if parsed is not None:
        out["comm"], out["state"], out["start"] = parsed
    progress("syscall")
    call = syscall_of(pid, tid, proc)
    out["call"] = {"name": call.name, "nr": call.nr, "fd": call.fd, "file": call.file, "addrs": call.addrs,
                   "fds": call.fds, "dirfd": call.dirfd}
    progress("wchan")
    out["wchan"] = (procfs.text(f"{proc}/{pid}/task/{tid}/wchan") or "").strip()
    progress("stack")
    out["stack"] = procfs.stack(pid, tid, proc)
    progress("sched")
    out["blocked"] = procfs.off_cpu_seconds(pid, tid, proc)
    progress("fdinfo")
    mids: dict[str, int | None] = {}
    anon: dict[str, str] = {}
    for fd in call.fds:
        link = procfs.readlink(f"{proc}/{pid}/fd/{fd}") or ""
        # An epoll, eventfd or other anonymous inode is no storage, and an epoll's fdinfo
        # waits on its lock, which another thread of the task may hold forever.
        if link.startswith("anon_inode:"):
            mids[str(fd)], anon[str(fd)] = None, link
        else:
            mids[str(fd)] = procfs.mnt_id(pid, fd, proc)
    out["mnt_ids"], out["anon"] = mids, anon
    progress("links")
    out["mntns"] = procfs.readlink(f"{proc}/{pid}/ns/mnt") or ""
    links = {"cwd": procfs.readlink(f"{proc}/{pid}/cwd") or ""}
    if call.dirfd is not None:
        links[f"fd/{call.dirfd}"] = procfs.readlink(f"{proc}/{pid}/fd/{call.dirfd}") or ""
    out["links"] = links
    return out


def _mount_row(m, owner: int | None) -> list:
    return [m.mount_id, m.mountpoint, m.fstype, m.source, m.options, m.super_options, m.dev, owner]


def _mount_view(progress, pid: int, proc: str, ids: list, devs: list) -> dict:
    """Runs in a hang-safe child: the mount table of `pid`'s namespace, read whole (up
    to MOUNTINFO_MAX), sent back whole when it holds at most TABLE_WHOLE mounts, else only
    the mounts `ids` and `devs` name, each with the owner the whole table gives it. A user
    who makes 100,000 mounts costs this child, once per namespace and run, not the run."""
    from ..host.mounts import Mount
    progress("mountinfo")
    data, cut = procfs.read_whole(f"{proc}/{pid}/mountinfo", procfs.MOUNTINFO_MAX)
    progress("parse")
    mounts = parse_mountinfo(data.decode("utf-8", "surrogateescape")) if data else []
    table = MountTable(mounts)
    whole = len(mounts) <= TABLE_WHOLE
    keep: list[Mount]
    if whole:
        keep = mounts
    else:
        found = [table.by_id(i) for i in ids if isinstance(i, int)]
        keep = [m for m in found if m is not None]
        for dev in devs:
            keep.extend(table.with_dev(dev)[:8])
    return {"mounts": [_mount_row(m, table.user_owner(m)) for m in keep], "whole": whole,
            "count": len(mounts), "cut": cut}


def _table_from(view: dict) -> tuple[MountTable, bool, int]:
    """(table, whole, mounts in all) from a _mount_view answer."""
    from ..host.mounts import Mount
    mounts, owners = [], {}
    for row in view.get("mounts", []):
        try:
            m = Mount(mount_id=int(row[0]), mountpoint=str(row[1]), fstype=str(row[2]), source=str(row[3]),
                      options=str(row[4]), super_options=str(row[5]), dev=str(row[6]))
        except (IndexError, TypeError, ValueError):
            continue
        mounts.append(m)
        owners[m.mount_id] = row[7] if isinstance(row[7], int) else None
    whole = bool(view.get("whole"))
    return MountTable(mounts, None if whole else owners), whole, int(view.get("count") or len(mounts))


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
        self.deferred: list[int] = []       # stuck processes left for the next run
        self._inspect_stuck = 0
        self._host: MountTable | None = None
        self.hung_devs: set[str] = set()    # devices of the mounts whose probe hangs in this run
        # "pid:start" -> the node's place an earlier run proved (place_of): a task keeps it
        # while it lives, killed or not.
        self.places: dict[str, dict] = {}

    def _remembered(self, d: Stuck) -> None:
        """A task proven to wait on the node's storage, then killed (its job requeued),
        waits on in its exit path (flush, release, do_exit) with no system call and its
        descriptors going: nothing left proves its place, yet it is the same task (same
        pid, same start time) on the same mount. It keeps the place proven earlier,
        never one a user could name: only what an earlier run's kernel ids proved."""
        was = self.places.get(f"{d.sample.pid}:{d.sample.start}")
        if not was or d.cause in waits.NODE_CAUSES or d.mount_owner is not None:
            return
        if was.get("cause") not in waits.NODE_CAUSES:
            return
        then = str(was.get("syscall") or "")
        d.earlier = f"{then}()" if then and then not in ("page fault", "running") else (then or "stuck")
        d.how.append(f"placed on {was.get('mountpoint')} by an earlier run (same pid and start time); "
                     f"now {d.syscall or 'in no system call'}: its exit path")
        d.cause = str(was["cause"])
        d.file = d.file or str(was.get("file") or "")
        d.mountpoint, d.fstype = str(was.get("mountpoint") or ""), str(was.get("fstype") or "")
        d.mount_dev, d.source = str(was.get("mount_dev") or ""), str(was.get("source") or "")
        d.network = bool(was.get("network"))
        d.syscall = then
        if d.ref is None and was.get("job"):
            # Slurm moves the tasks it gave up killing out of the job's cgroup (22.05:
            # to the root): the job the cgroup named while the task was alive stays its.
            d.ref = JobRef(job=str(was["job"]), uid=d.sample.uid)
            d.how.append(f"job {d.ref.job} named by the job's cgroup in that run; Slurm has since moved "
                         "the task out of it")

    def corroborated(self, ctx: Context, watching: list, hung: dict, kernel: dict, out: list) -> list:
        """A task seen twice in D, proven (by the kernel's ids) to wait on a mount whose
        own probe hung in this run, needs no long grace: two witnesses agree. Its
        finding goes to `out`; the tasks still only watched are returned."""
        self.hung_devs |= set(hung)
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
        """Diagnoses the stuck processes (pid -> [(sample, seconds held)]), at most
        DIAGNOSE_PER_RUN of them, the longest held first; `self.deferred` counts the rest."""
        results: list[Stuck] = []
        listpids = None
        order = sorted(stuck.items(), key=lambda kv: (-max(h for _, h in kv[1]), kv[0]))
        self.deferred = [pid for pid, _ in order[DIAGNOSE_PER_RUN:]]
        for pid, items in order[:DIAGNOSE_PER_RUN]:
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
            results.append(d)
        if not results:
            return results
        looks = ctx.runner.run([Task(self._key("look", d), _look, (d.sample.pid, d.sample.tid, self.proc),
                                     self.settings.inspect_timeout) for d in results])
        for d in results:
            self._apply_look(d, looks.get(self._key("look", d)))
        self._read_memory_and_tables(ctx, results)
        # The host's own table, read after the tasks' tables: a device number compared
        # between them is never older on our side (a user's new mount on a number the
        # node's old one had is not taken for the node's).
        try:
            self._host = MountTable.current()
        except OSError:
            self._host = ctx.mounts
        self._walk(ctx, results)
        for d in results:
            self._locate(ctx, d)
        return results

    def _key(self, what: str, d: Stuck) -> str:
        return f"{self.name}:{what}:{d.sample.pid}:{d.sample.start}"

    def _apply_look(self, d: Stuck, o) -> None:
        if o is None or o.status != DONE or not isinstance(o.value, dict):
            # Its /proc files do not answer (a task in execve with a flush unanswered):
            # nothing read, nothing proven.
            d.look = f"{o.status}: {o.error} (at {o.step or 'start'})" if o is not None else "not run"
            return
        v = o.value
        if d.sample.start < 0 and isinstance(v.get("start"), int):
            d.sample.start = v["start"]
        call = v.get("call") or {}
        d.syscall, d.syscall_nr = str(call.get("name") or ""), call.get("nr")
        d.fds = [x for x in call.get("fds") or [] if isinstance(x, int)]
        d.dirfd = call.get("dirfd") if isinstance(call.get("dirfd"), int) else None
        if isinstance(call.get("fd"), int):
            d.fd, d.file = call["fd"], str(call.get("file") or "")
        d.addrs = [x for x in call.get("addrs") or [] if isinstance(x, int)]
        d.wchan = str(v.get("wchan") or "")
        d.stack = [str(x) for x in v.get("stack") or []]
        d.blocked = v.get("blocked") if isinstance(v.get("blocked"), (int, float)) else None
        d.mnt_ids = {int(k): m for k, m in (v.get("mnt_ids") or {}).items() if str(k).isdigit()}
        d.anon = {int(k): str(x) for k, x in (v.get("anon") or {}).items() if str(k).isdigit()}
        d.mntns = str(v.get("mntns") or "")
        d.links = {str(k): str(x) for k, x in (v.get("links") or {}).items()}

    def _read_memory_and_tables(self, ctx: Context, results: list[Stuck]) -> None:
        """The memory readers and one mount table per namespace, all at once."""
        inspect_stuck = sum(1 for k in ctx.runner.stuck() if k.startswith((f"{self.name}:inspect:", f"{self.name}:walk:")))
        self._inspect_stuck = inspect_stuck
        tasks: list[Task] = []
        for d in results:
            if d.look != "ok":
                d.inspect = "not read: its /proc files do not answer"
            elif inspect_stuck >= INSPECT_STUCK_MAX:
                d.inspect = f"not read: {inspect_stuck} earlier readers are stuck in the kernel"
            elif sum(1 for t in tasks if ":inspect:" in t.key) >= INSPECT_PER_RUN:
                d.inspect = f"not read: at most {INSPECT_PER_RUN} processes are read per run"
            else:
                tasks.append(Task(self._key("inspect", d), _inspect, (d.sample.pid, self.proc, d.addrs),
                                  self.settings.inspect_timeout))
        spaces: dict[str, list[Stuck]] = {}
        for d in results:
            if d.look == "ok":
                spaces.setdefault(d.mntns or f"pid {d.sample.pid}", []).append(d)
        views: dict[str, str | None] = {}
        for ns, ds in list(spaces.items())[:TABLES_PER_RUN]:
            ids = sorted({i for d in ds for i in d.mnt_ids.values() if isinstance(i, int)})
            key = f"{self.name}:mounts:{ns}"
            views[ns] = key
            # The devices of the file mappings are the memory reader's to say: a page
            # fault is placed by them, so a table sent in part keeps none of those.
            tasks.append(Task(key, _mount_view, (ds[0].sample.pid, self.proc, ids, []), TABLE_TIMEOUT))
        outcomes = ctx.runner.run(tasks) if tasks else {}
        for d in results:
            o = outcomes.get(self._key("inspect", d))
            if o is not None and o.status == DONE:
                v = o.value
                d.rank = rank_from(v)
                d.cmdline = v.get("cmdline", "")
                d.inspect = v.get("skipped") or "ok"
                d.devs = [x for x in v.get("devs", []) if isinstance(x, str)]
                d.path = next((p for p in v.get("paths", []) if p), None)
            elif o is not None:
                d.inspect = f"{o.status}: {o.error}"
        for ns, ds in spaces.items():
            view = views.get(ns)
            o = outcomes.get(view) if view else None
            for d in ds:
                if o is not None and o.status == DONE and isinstance(o.value, dict):
                    d.table, d.table_whole, d.table_count = _table_from(o.value)
                    d.table_cut = bool(o.value.get("cut"))
                else:
                    d.table = MountTable([])
                    d.table_whole = False
                    d.table_note = (f"its mount table was not read: {o.status}: {o.error}" if o is not None
                                    else f"its mount table was not read: at most {TABLES_PER_RUN} namespaces per run")
        for d in results:
            if d.table is None:
                d.table, d.table_whole = MountTable([]), False
                d.table_note = "its mount table was not read: its /proc files do not answer"

    def _walk(self, ctx: Context, results: list[Stuck]) -> None:
        """Resolves each path argument from the task's own root, cwd or dirfd, in children."""
        inspect_stuck = self._inspect_stuck
        walks: list[tuple[Stuck, Task]] = []
        for d in results:
            path = d.path
            if not path or d.file:
                continue
            base = "root" if path.startswith("/") else ("cwd" if d.dirfd is None else f"fd/{d.dirfd}")
            # For people only: where the path leads is the walk's to say, not this string.
            d.file = path if base == "root" else os.path.join(d.links.get(base, ""), path)
            table = d.table if d.table is not None else MountTable([])
            if not d.table_whole:
                d.walk = {"end": "not resolved", "error": d.table_note or
                          f"its mount table holds {d.table_count} mounts: too many to walk a path through"}
            elif inspect_stuck < INSPECT_STUCK_MAX and len(walks) < INSPECT_PER_RUN:
                # Never into a user's own mount: reaching it is the answer, and its
                # server is theirs to stall (a walk stuck there is one reader fewer).
                theirs = sorted(m.mount_id for m in table
                                if waits.owner(m, table, self._host or ctx.mounts, d.sample.uid)[0] == "user")
                # Nor into a mount whose probe hangs: reaching it is the answer there too.
                hung = sorted(m.mount_id for m in table if m.dev and m.dev in self.hung_devs)
                walks.append((d, Task(self._key("walk", d), waits.walk,
                                      (d.sample.pid, self.proc, base, path, theirs, hung),
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

    def _locate(self, ctx: Context, d: Stuck) -> None:
        """Whose the place is that the task waits on, from the kernel's ids alone (host/waits.py)."""
        pid = d.sample.pid
        table = d.table if d.table is not None else MountTable([])
        cut = d.table_cut
        candidates: list[tuple] = []
        for fd in d.fds:
            mid = d.mnt_ids.get(fd)
            how = f"fd {fd}: {printable(d.anon[fd])}, no mount (its fdinfo not read)" if fd in d.anon \
                else f"fd {fd}: mnt_id {mid}"
            candidates.append((table.by_id(mid) if mid is not None else None, how))
        if d.walk:
            mid = d.walk.get("mnt_id")
            how = f"path resolved from the task's root: {d.walk.get('end')}, mnt_id {mid}"
            if d.walk.get("error"):
                how += f" ({d.walk['error']})"
            candidates.append((table.by_id(mid) if isinstance(mid, int) else None, how))
        elif d.syscall == "page fault" and d.devs:
            candidates += waits.fault_candidates([d.wchan] + d.stack, d.devs, table)
        place = waits.attribute([d.wchan] + d.stack, candidates, table, self._host or ctx.mounts, d.sample.uid)
        if d.look != "ok":
            place.how.append(f"its /proc files did not answer: {d.look}")
        if cut:
            place.how.append(f"its mountinfo is over {procfs.MOUNTINFO_MAX >> 20} MiB: read in part")
        if d.table_note:
            place.how.append(d.table_note)
        d.cause, d.how = place.cause, place.how
        if place.mount is not None:
            d.mountpoint, d.fstype, d.mount_dev = place.mount.mountpoint, place.mount.fstype, place.mount.dev
            d.source, d.network = place.mount.source, place.mount.is_network
        d.sigkill = _sigkill_pending(self.proc, pid, d.sample.tid)
        if place.cause == "user_mount":
            d.mount_owner = place.owner_uid

    def finding(self, ctx: Context, d: Stuck, after_end: bool = False) -> Finding | None:
        self._remembered(d)
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
            held += " (killed, still in D: unkillable)" if not d.earlier else " (killed, still in D)"
        if d.earlier:
            held += ", now in its exit path"
        own = d.mount_owner is not None
        mine = own and d.mount_owner == s.uid
        if own:
            kind = "FUSE mount" if d.fstype.startswith("fuse") else "mount"
            where += f" (a {kind} of uid {d.mount_owner}" + (", the task's own user)" if mine else ")")
        elif d.cause not in waits.NODE_CAUSES:
            where += f" (not the node's: {CAUSE_LABEL[d.cause]})"
        asleep = " (asleep, S)" if s.state == "S" else ""
        summary = f"{who}pid {s.pid}{threads} {held}{asleep} in {call}{where}"
        # The node reason must be stable across runs (no duration) and short, with "stuck"
        # in the 20 columns `sinfo -R` shows: the pid comes last.
        short_where = f" on {shorten_path(d.file, 100)}" if d.file else (f" at {d.wchan}" if d.wchan else "")
        fs = f" ({d.fstype})" if d.fstype else ""
        reason = (f"{'job ' + ref.job + ' ' if ref else ''}{'left ' if after_end else ''}"
                  f"stuck in {call}{short_where}{fs}, pid {s.pid}")
        evidence = {
            "node": ctx.node, "job": ref.job if ref else None, "step": ref.step if ref else None,
            "task": ref.task if ref else None, "rank": d.rank, "pid": s.pid, "tids": d.tids,
            "start_ticks": s.start, "comm": s.comm, "uid": s.uid, "state": s.state, "seconds": round(d.seconds, 1),
            "d_seconds": round(d_seconds, 1), "d_at_least": not exact,
            "syscall": d.syscall, "syscall_nr": d.syscall_nr, "fd": d.fd, "file": d.file,
            "mountpoint": d.mountpoint, "fstype": d.fstype, "wchan": d.wchan, "stack": d.stack,
            "cause": d.cause, "cmdline": d.cmdline, "inspect": d.inspect, "kernel_log": d.kernel,
            "mount_owner": d.mount_owner, "attribution": d.how, "mount_dev": d.mount_dev,
            "sigkill_pending": d.sigkill, "source": d.source, "network": d.network,
            "placed_earlier": d.earlier or None,
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
                       incident=incident, reason=reason,
                       # Asleep (S), it wakes for a signal: its job's requeue ends it, or the
                       # mount's own recovery; and a mount asleep on every node is an outage,
                       # which no reboot cures. Only a task in D asks for one.
                       needs_reboot=s.state != "S",
                       hard=True, resumable=False)


PLACE_FIELDS = ("cause", "file", "mountpoint", "fstype", "mount_dev", "source", "network", "syscall")


def place_of(f: Finding) -> dict | None:
    """What a later run needs to keep a stuck task's place once it lost the means to
    prove it (killed, in its exit path: no system call, its descriptors closing), keyed
    by pid and start time: None unless the kernel's ids proved the node's place."""
    ev = f.evidence
    if f.status != "stuck" or ev.get("cause") not in waits.NODE_CAUSES or not isinstance(ev.get("pid"), int):
        return None
    return {k: ev.get(k) for k in PLACE_FIELDS} | {"job": f.job}


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
