"""What a stuck task's /proc says, read in hang-safe children: the stuck-task check's reads.

Imported only when a run sees a task in D (checks/stuck_tasks.py, checks/leftovers.py):
a healthy run's scan finds none and never loads it, nor what it needs (host/waits.py,
host/syscalls.py, host/jobs.py, the kernel log).

This process reads nothing of a stuck task but its `status` and `cgroup` (host/procfs.py
says why). Everything else is read by the functions here, each in a hang-safe child
with a deadline (checks/_stuck_waits.py starts them):
- a look (`_look`): its stat, system call, wchan, kernel stack, scheduler times, the
  links and mount ids (fdinfo) of the descriptors its call names (never an
  anon_inode's: an epoll's fdinfo waits on its lock) and its mount namespace;
- one mount table per mount namespace (`_mount_view`), read whole up to 16 MiB, sent
  back whole when it is small, else only the mounts the tasks' ids name;
- its memory (`_inspect`): the environment (for the rank), the command line and path
  arguments, only inside anonymous readable mappings (a page of a file on a FUSE
  mount the user can stall would hang the reader), every read bounded.
What was read is kept on one `Stuck` per process, which the diagnosis fills in and
the finding is made from.
"""
from __future__ import annotations

import os

from ..core.records import dataclass, field
from ..host import procfs, syscalls, waits
from ..host.jobs import JobRef
from ..host.mounts import MountTable, parse_mountinfo

CAUSE_LABEL = waits.CAUSE_LABEL
ENVIRON_MAX = 128 << 10     # a user can point their environment at gigabytes (PR_SET_MM_MAP)
CMDLINE_MAX = 4096
PATH_MAX = 4096
MAPS_MAX = 4 << 20
INSPECT_PER_RUN = 16        # processes whose memory one run reads
INSPECT_STUCK_MAX = 4       # inspect children left stuck in the kernel, per uid, before we stop trying
INSPECT_STUCK_ALL = 32      # ... and in all
DIAGNOSE_PER_RUN = 16       # stuck processes diagnosed per run; the rest wait for the next
TABLES_PER_RUN = 4          # mount namespaces whose table one run reads
TABLE_WHOLE = 4096          # a task's table up to this many mounts comes back whole
TABLE_TIMEOUT = 5.0         # 16 MiB of mountinfo takes about 0.6 s of CPU to parse
# Kernel stack frames read of a stuck thread: all of them in practice (the kernel
# prints at most 64). A page fault inside a system call fills the top frames with the
# fault's own; the filesystem whose code is waiting may lie far below.
STACK_FRAMES = 64


def fair(items: list, key) -> list:
    """`items` (already in order of preference) taken round-robin by key(item): the
    first of each key, then the second of each, and so on. A cap on the result then
    leaves out no key while another has more than one in: one user's many stuck tasks
    never crowd out another user's one."""
    groups: dict = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    out: list = []
    depth = 0
    while len(out) < len(items):
        for group in groups.values():
            if depth < len(group):
                out.append(group[depth])
        depth += 1
    return out


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
    out["stack"] = procfs.stack(pid, tid, proc, STACK_FRAMES)
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
