"""Reads of /proc for tasks that may be stuck in the kernel.

What the checker's own process may read of another process is only what was shown
never to block on it (SECURITY.md, "Reading other processes"): its `status` (and each
thread's), its `cgroup`, and the listings of /proc and /proc/PID/task. Everything else
blocks on a task a user can arrange: `stat`, `wchan`, `syscall`, `stack`, `io`, `maps`,
the `fd/N` and `ns/*` links wait while the task is in execve with a close-on-exec file
whose FUSE FLUSH is never answered; `fdinfo` of an epoll whose lock another thread holds
puts the reader in D; `cmdline`/`environ` take the mmap lock. Those are read only in
hang-safe children (host/runner.py): the scan of /proc (scan_child), and the look at a
stuck task (checks/_stuck_reads.py).

Every function takes the /proc root, so tests can point them at a captured tree.
"""
from __future__ import annotations

import os
import time

from ..core.records import dataclass

PROC = "/proc"
_O = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
PF_KTHREAD = 0x00200000


@dataclass
class TaskSample:
    """One sighting of a task in uninterruptible sleep."""
    pid: int
    tid: int
    start: int              # start time in clock ticks since boot: (pid, tid, start) is unique
    comm: str
    state: str
    voluntary: int = -1     # context switches: unchanged across samples = no progress
    involuntary: int = -1
    uid: int = -1

    @property
    def key(self) -> str:
        return f"{self.pid}/{self.tid}/{self.start}"

    @property
    def switches(self) -> tuple[int, int]:
        return self.voluntary, self.involuntary


def read_small(path: str, dir_fd: int | None = None, size: int = 8192) -> bytes | None:
    try:
        fd = os.open(path, _O, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def parse_stat(data: bytes) -> tuple[str, str, int] | None:
    """(comm, state, start ticks) from a stat line; comm may hold spaces and ')'."""
    open_ = data.find(b"(")
    close = data.rfind(b")")
    if open_ < 0 or close < 0:
        return None
    fields = data[close + 2:].split()
    try:
        return data[open_ + 1:close].decode("utf-8", "replace"), fields[0].decode(), int(fields[19])
    except (IndexError, ValueError):
        return None


def cpu_ticks(pid: int, tid: int, proc: str = PROC) -> int | None:
    """A thread's CPU time so far (user + system), in clock ticks; None if it is gone."""
    data = read_small(f"{proc}/{pid}/task/{tid}/stat")
    if data is None:
        return None
    try:
        fields = data[data.rfind(b")") + 2:].split()
        return int(fields[11]) + int(fields[12])
    except (IndexError, ValueError):
        return None


def is_kernel_thread(stat: bytes) -> bool:
    """Kernel threads (kworkers, jbd2, ...) sleep in D by design; jobs are user tasks."""
    try:
        return bool(int(stat[stat.rfind(b")") + 2:].split()[6]) & PF_KTHREAD)
    except (IndexError, ValueError):
        return False


def parse_status(data: bytes) -> dict[str, str]:
    out = {}
    for line in data.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key] = value.strip()
    return out


def _status_fields(data: bytes) -> tuple[bytes, int, bool, str, int, int, int]:
    """(state letter, threads, kernel thread, name, voluntary, involuntary switches, uid)
    from a status file's bytes, without parsing the rest of it."""
    def field(name: bytes) -> bytes:
        i = data.find(b"\n" + name + b":\t")
        if i < 0:
            return b""
        i += len(name) + 3
        j = data.find(b"\n", i)
        return data[i:j if j >= 0 else len(data)]
    name = data[6:data.find(b"\n")] if data.startswith(b"Name:\t") else b"?"
    kthread = field(b"Kthread") == b"1" if b"\nKthread:" in data else b"\nVmSize:" not in data
    try:
        threads = int(field(b"Threads") or 1)
    except ValueError:
        threads = 1
    uid = field(b"Uid").split(b"\t", 1)[0]
    return (field(b"State")[:1], threads, kthread, name.decode("utf-8", "replace"),
            _int(field(b"voluntary_ctxt_switches")), _int(field(b"nonvoluntary_ctxt_switches")),
            int(uid) if uid.isdigit() else -1)


def scan_pids(pids: list[str], proc: str = PROC, states: bytes = b"D",
              skip: frozenset[int] | set[int] = frozenset(), keep=None) -> list[list]:
    """Every thread of the given processes whose state is in `states`, found from the
    tasks' `status` alone.

    Returns [pid, tid, comm, state, start, voluntary, involuntary, when, uid] lists
    (JSON-friendly: the scan runs in a child and sends them over a pipe); `start` is -1
    here (start_times reads it, for the threads found only), `when` is CLOCK_MONOTONIC
    at the read. A process's status says how many threads it has: one (most processes)
    and that status is its only thread's, so its task directory is not listed, unless
    its leader is a zombie (it called pthread_exit): the one thread left is another.

    Only `status`: a task in execve with a FUSE flush its user never answers stalls
    every reader of its `stat`, `wchan`, `syscall` and `stack`, never of its `status`. So
    no user can stop this scan; a stat that stalls costs only the start times.
    `keep(pid, tid)`, when given, must also say yes, except for the processes in `skip`
    (an earlier read of theirs stalled; keep may read their stalling files).
    """
    found: list[list] = []
    for pid in pids:
        data = read_small(f"{proc}/{pid}/status")
        if data is None:
            continue      # the process ended
        state, threads, kthread, name, vol, invol, uid = _status_fields(data)
        if kthread:
            continue
        if threads == 1 and state not in (b"Z", b"X"):
            if state in states and (keep is None or (skip and int(pid) in skip) or keep(pid, pid)):
                found.append([int(pid), int(pid), name, state.decode(), -1, vol, invol, time.monotonic(), uid])
            continue
        try:
            tfd = os.open(f"{proc}/{pid}/task", _O | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            try:
                tids = os.listdir(tfd)
            except OSError:
                continue
            for tid in tids:
                data = read_small(tid + "/status", dir_fd=tfd, size=4096)
                if data is None:
                    continue
                # The state alone first: most threads are not in it, and the rest of
                # the fields are parsed only for those that are.
                i = data.find(b"\nState:\t")
                if i < 0 or not data[i + 8:i + 9] or data[i + 8:i + 9] not in states:
                    continue
                state, _, _, name, vol, invol, uid = _status_fields(data)
                if state in states and (keep is None or (skip and int(pid) in skip) or keep(pid, tid)):
                    found.append([int(pid), int(tid), name, state.decode(), -1, vol, invol, time.monotonic(), uid])
        finally:
            os.close(tfd)
    return found


def status_state(st: dict[str, str]) -> str:
    """The state letter of a parsed status ("D (disk sleep)" -> "D")."""
    return st.get("State", "?")[:1] or "?"


def scan_child(progress, proc: str = PROC, part: int = 0, parts: int = 1,
               skip: frozenset[int] | set[int] = frozenset(), states: str = "D") -> list[list]:
    """Runs in a hang-safe child: scan_pids over every process of /proc (those whose pid
    modulo `parts` is `part`)."""
    pids = [p for p in list_pids(proc) if parts == 1 or int(p) % parts == part]
    return scan_pids(pids, proc, states=states.encode(), skip=skip)


def start_times(progress, proc: str, tasks: list) -> dict[str, int]:
    """Runs in a hang-safe child: the start time (clock ticks since boot) of each
    [pid, tid], from its stat, as {"pid/tid": start}. A stat that stalls (a task in
    execve with a FUSE flush unanswered) leaves the child holding that file open: the
    runner reads it off the child at the deadline."""
    out: dict[str, int] = {}
    for pid, tid in tasks:
        data = read_small(f"{proc}/{pid}/task/{tid}/stat", size=1024)
        parsed = parse_stat(data) if data else None
        if parsed is not None:
            out[f"{pid}/{tid}"] = parsed[2]
    return out


def status_sample(pid: int, tid: int, start: int, proc: str = PROC) -> TaskSample | None:
    """A fresh sighting of one task from its status alone (safe on any task): state,
    name, context switches and uid; `start` is the scan's. None if it is gone."""
    data = read_small(f"{proc}/{pid}/task/{tid}/status")
    if data is None:
        return None
    st = parse_status(data)
    try:
        uid = int(st.get("Uid", "-1").split()[0])
    except ValueError:
        uid = -1
    return TaskSample(pid=pid, tid=tid, comm=st.get("Name", "?"), state=status_state(st), start=start,
                      voluntary=_int(st.get("voluntary_ctxt_switches")),
                      involuntary=_int(st.get("nonvoluntary_ctxt_switches")), uid=uid)


def identity(pid: int, proc: str = PROC) -> str | None:
    """Who a process is, from its status alone (name, parent, uids): enough to tell that
    a remembered pid still names the same process where its stat cannot be read."""
    data = read_small(f"{proc}/{pid}/status")
    if data is None:
        return None
    st = parse_status(data)
    return f"{st.get('PPid', '?')}:{st.get('Uid', '?').split()[0] if st.get('Uid') else '?'}:{st.get('Name', '?')}"


def list_pids(proc: str = PROC) -> list[str]:
    return [n for n in os.listdir(proc) if n.isdigit()]


def thread_count(proc: str = PROC) -> int:
    """Threads on the system, from /proc/loadavg's runnable/total field (one read)."""
    data = read_small(f"{proc}/loadavg") or b""
    try:
        return int(data.split()[3].split(b"/")[1])
    except (AttributeError, IndexError, ValueError):
        return 0


def sample(pid: int, tid: int, proc: str = PROC) -> TaskSample | None:
    """A fresh sighting of one task (state, switches), None if it is gone."""
    base = f"{proc}/{pid}/task/{tid}"
    stat = read_small(base + "/stat")
    status = read_small(base + "/status")
    if stat is None or status is None:
        return None
    parsed = parse_stat(stat)
    if parsed is None:
        return None
    st = parse_status(status)
    try:
        uid = int(st.get("Uid", "-1").split()[0])
    except ValueError:
        uid = -1
    return TaskSample(pid=pid, tid=tid, comm=parsed[0], state=parsed[1], start=parsed[2],
                      voluntary=_int(st.get("voluntary_ctxt_switches")),
                      involuntary=_int(st.get("nonvoluntary_ctxt_switches")), uid=uid)


def _int(v) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


def text(path: str) -> str | None:
    data = read_small(path, size=65536)
    return None if data is None else data.decode("utf-8", "replace")


def readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def syscall_line(pid: int, tid: int, proc: str = PROC) -> list[str] | None:
    """/proc/PID/task/TID/syscall split: [nr, arg0..arg5, sp, pc], ['running'], or
    ['-1', sp, pc] for a task blocked outside a system call (a page fault)."""
    t = text(f"{proc}/{pid}/task/{tid}/syscall")
    return t.split() if t else None


def stack(pid: int, tid: int, proc: str = PROC, frames: int = 8) -> list[str]:
    """Top kernel stack frames, symbol names only (root only; empty otherwise)."""
    t = text(f"{proc}/{pid}/task/{tid}/stack") or ""
    out = []
    for line in t.splitlines():
        sym = line.split("] ", 1)[-1].split("+", 1)[0].strip()
        if sym:
            out.append(sym)
        if len(out) >= frames:
            break
    return out


def boot_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def _exec_start_ms(path: str) -> float | None:
    """`se.exec_start` of a /proc/.../sched file: the scheduler's clock (ms) when the
    task last ran (kept while it runs). Present with CONFIG_SCHED_DEBUG, which
    distribution kernels enable; CONFIG_SCHEDSTATS is not needed for it."""
    data = read_small(path)
    if not data:
        return None
    for line in data.split(b"\n", 8):
        if line.startswith(b"se.exec_start"):
            try:
                return float(line.split(b":", 1)[1])
            except (IndexError, ValueError):
                return None
    return None


def off_cpu_seconds(pid: int, tid: int, proc: str = PROC) -> float | None:
    """How long the thread has not run, by the scheduler; None when unknown.

    A task enters a sleep only while running, so a thread in D now that has not run
    for N seconds has been in this one D sleep for N seconds: its `se.exec_start` is
    when it went to sleep. That clock (the runqueue's task clock) leaves out time spent
    in interrupts and, in a virtual machine, time stolen by the host, so it is compared
    with our own thread's `se.exec_start` (now, on the same clock), not with
    CLOCK_MONOTONIC, which runs ahead of it (here by 20 s after 3 hours up). Reads
    only the sched files, which never touch the target's memory."""
    then = _exec_start_ms(f"{proc}/{pid}/task/{tid}/sched")
    if then is None:
        return None
    # Each CPU's runqueue has its own task clock, and what they leave out differs per
    # CPU (seconds apart after hours up): read ours on the CPU the thread last ran on.
    cpu = _last_cpu(f"{proc}/{pid}/task/{tid}/stat") if proc == PROC else None
    now = _exec_start_on(cpu, f"{proc}/thread-self/sched")
    if now is None:
        return None
    return max(0.0, (now - then) / 1000.0)


def _last_cpu(path: str) -> int | None:
    try:
        with open(path, "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[36])          # field 39 of stat(5): the CPU it last ran on
    except (OSError, IndexError, ValueError):
        return None


def _exec_start_on(cpu: int | None, path: str) -> float | None:
    """Our own exec_start, on `cpu` when we may run there (then back where we were)."""
    if cpu is None:
        return _exec_start_ms(path)
    try:
        allowed = os.sched_getaffinity(0)
        if cpu not in allowed:
            return _exec_start_ms(path)
        os.sched_setaffinity(0, {cpu})      # moves this thread there before it returns
    except OSError:
        return _exec_start_ms(path)
    try:
        return _exec_start_ms(path)
    finally:
        try:
            os.sched_setaffinity(0, allowed)
        except OSError:
            pass


def boot_id() -> str:
    """This boot's identity: a kernel-log cursor or a count is only valid within one boot."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


# No real host comes near this: 16 MiB of mountinfo is some 100,000 mounts.
MOUNTINFO_MAX = 16 << 20


def read_whole(path: str, limit: int) -> tuple[bytes | None, bool]:
    """(contents, cut): a /proc file read to its end or to `limit` bytes, whichever is
    first. /proc answers a page or so per read, so one read is never the whole file;
    a table read in part leaves out whatever a user pushed past the cut."""
    try:
        fd = os.open(path, _O)
    except OSError:
        return None, False
    chunks: list[bytes] = []
    got = 0
    try:
        while got < limit:
            chunk = os.read(fd, min(limit - got, 1 << 16))
            if not chunk:
                return b"".join(chunks), False
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks), bool(os.read(fd, 1))
    except OSError:
        return (b"".join(chunks) or None), False
    finally:
        os.close(fd)


def mnt_id(pid: int, fd: int, proc: str = PROC) -> int | None:
    """The kernel's id of the mount an open descriptor lives on (fdinfo's mnt_id): the
    mount itself, whatever the descriptor's path string says (a symlink, a lazy
    unmount, a rename). fdinfo is answered from the open file, never its filesystem."""
    return fd_ids(pid, fd, proc)[0]


def fd_ids(pid: int, fd: int, proc: str = PROC) -> tuple[int | None, int | None]:
    """(mnt_id, inode) of an open descriptor, from its fdinfo (see mnt_id)."""
    return fdinfo_ids(read_small(f"{proc}/{pid}/fdinfo/{fd}", size=4096) or b"")


def fdinfo_ids(data: bytes) -> tuple[int | None, int | None]:
    """(mnt_id, inode) from an fdinfo's text, each None where it is missing (the kernel
    writes `ino:` from 5.14 on) or not a number."""
    found: dict[bytes, int | None] = {}
    for line in data.splitlines():
        key, _, value = line.partition(b":")
        if key in (b"mnt_id", b"ino") and key not in found:
            try:
                found[key] = int(value)
            except ValueError:
                found[key] = None
    return found.get(b"mnt_id"), found.get(b"ino")
    return None
