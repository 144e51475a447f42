"""Where a stuck task waits, and whose that place is, proven by the kernel's own ids.

A task in D is the node's fault only when the place it waits on is proven to be the
node's. A path string proves nothing: a user makes /tmp/link lead into their own
stalled FUSE mount, passes an absolute path with a dirfd of /tmp, lazily unmounts
their mount after opening a file on it, or faults on a mapping of their own file. So
the place is found by ids the kernel gives:

- a descriptor: its mount is fdinfo's `mnt_id`, looked up in the task's mountinfo
  read whole (procfs.read_whole);
- a path argument: a deadline child resolves it from the task's own root, cwd or
  dirfd (/proc/PID/root, cwd, fd/N lead into the task's mount namespace), one
  component at a time, each symlink followed by hand from the task's root. Before each
  lookup the child reports the mount id of the directory it looks in, so a walk that
  hangs still names the mount it hung on;
- a page fault: the devices of the task's file mappings (the memory reader child reads
  /proc/PID/maps), of the filesystem the kernel stack names, each a mount of the task's
  own table (fault_candidates);
- the kernel stack and wchan: the filesystem family or the GPU driver. No user can
  mount NFS, Lustre, GPFS, BeeGFS, CIFS or Ceph, so their symbols alone are the node's;
  FUSE symbols say nothing of whose FUSE.

A mount is the node's when its superblock (device number) is mounted in the checker's
own mount namespace, and not as a user's FUSE mount nor below one. A FUSE mount named
must also have requests waiting on its connection, where fusectl tells
(/sys/fs/fuse/connections/N/waiting, fusectl_name). Everything else - a mount only in another
namespace, a detached mount, a place no id names, a stack that names a filesystem the
named mount is not, a wait on a lock another task holds - is not proven, and a task
waiting there is its job's problem: never a drain, never a reboot.
"""
from __future__ import annotations

import os

from ..core.records import dataclass, field
from . import procfs
from .fusectl import FUSECTL
from .mounts import Mount, MountTable

# Prefixes of kernel symbols, per family. The lock rule comes before every family
# (attribute): a task queued on a lock, the NVIDIA driver's semaphores included, waits
# on the task holding it, which may be stalled on anything of its user's.
FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gpu", ("nvidia", "nv_", "_nv0", "uvm_", "os_acquire_", "nvkms", "rm_")),
    ("nfs", ("nfs", "rpc_", "__rpc_", "xprt_")),
    ("lustre", ("ll_", "ptlrpc", "ldlm", "osc_", "mdc_", "lov_", "lmv_", "lnet")),
    ("gpfs", ("mmfs", "gpfs", "cxi")),
    ("beegfs", ("beegfs", "fhgfs")),
    ("cifs", ("cifs", "smb2_", "smb3_")),
    ("ceph", ("ceph",)),
    ("weka", ("wekafs", "weka_")),
    ("panfs", ("panfs", "pan_")),
    ("9p", ("p9_", "v9fs")),
    ("afs", ("afs_", "rxrpc")),
    ("orangefs", ("orangefs", "pvfs2")),
    ("cluster", ("ocfs2", "gfs2", "dlm_")),
    ("fuse", ("fuse_", "request_wait_answer")),
    ("local", ("ext4_", "jbd2", "xfs_", "btrfs_", "blk_", "bio_", "submit_bio", "nvme_", "scsi_",
               "dm_", "md_", "raid")),
)
# Filesystems no unprivileged user can mount, even in a user namespace of their own.
NODE_ONLY = frozenset({"nfs", "lustre", "gpfs", "beegfs", "cifs", "ceph", "weka", "panfs", "9p", "afs",
                       "orangefs", "cluster"})
FSTYPE_FAMILY = {"nfs": "nfs", "nfs4": "nfs", "lustre": "lustre", "gpfs": "gpfs", "beegfs": "beegfs",
                 "cifs": "cifs", "smb3": "cifs", "smbfs": "cifs", "ceph": "ceph", "wekafs": "weka",
                 "panfs": "panfs", "9p": "9p", "afs": "afs", "orangefs": "orangefs", "pvfs2": "orangefs",
                 "ocfs2": "cluster", "gfs2": "cluster", "virtiofs": "fuse"}
LOCAL_FSTYPES = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "vfat", "zfs", "jfs", "reiserfs"})
# A thread queued on a lock: the holder is the one waiting on something, and is
# diagnosed for itself.
LOCK_WAITS = ("rwsem_down_", "down_read", "down_write", "__mutex_lock", "mutex_lock", "percpu_down_",
              "__down", "down")
# VFS functions a thread sleeps in only on a directory's or inode's lock: the lock's
# own slow path (rwsem_down_*, a __sched function) is left out of /proc/PID/stack and
# wchan, so an O_CREAT queued on its directory's lock shows `path_openat` on top
# (open_last_lookups inlined), a getdents queued `iterate_dir`. A filesystem's own wait
# would show its frames above these.
VFS_LOCKS = frozenset({"path_openat", "open_last_lookups", "iterate_dir", "filename_create", "lookup_slow",
                       "__lookup_slow", "walk_component", "do_rmdir", "do_unlinkat", "do_renameat2",
                       "lock_rename", "lock_two_directories", "d_alloc_parallel", "do_truncate",
                       "vfs_fileattr_set"})
# Scheduler frames above the one that says why a thread sleeps.
SCHED_FRAMES = ("__schedule", "schedule", "schedule_timeout", "schedule_preempt_disabled",
                "io_schedule", "__switch_to", "__switch_to_asm", "preempt_schedule_common")
# The frames of a page fault taken inside a system call: the kernel copying from or to
# a user's buffer (copy_from_user, fault_in_iov_iter_*). What lies above the first of
# them (toward the top) is the fault's own wait, on the mapping the buffer lives in; a
# user who maps a file of their own stalled FUSE mount makes any system call wait there,
# holding what it took below (fault_part).
FAULT_FRAMES = ("asm_exc_page_fault", "exc_page_fault", "do_user_addr_fault", "handle_mm_fault",
                "__handle_mm_fault", "handle_page_fault", "do_page_fault", "do_mem_abort",
                "do_translation_fault", "el0_da", "el1_abort")
FAULT_IN = ("fault_in_", "copy_from_user", "copy_to_user", "_copy_from_user", "_copy_to_user",
            "raw_copy_", "rep_movs", "copy_user_", "__get_user", "__put_user", "strncpy_from_user",
            "filldir")
SYMLINK_MAX = 40
_PATH = getattr(os, "O_PATH", 0o10000000) | os.O_CLOEXEC

NODE_CAUSES = frozenset({"shared_filesystem", "local_filesystem", "gpu_driver"})
CAUSE_LABEL = {"shared_filesystem": "shared filesystem", "local_filesystem": "the node's local filesystem",
               "gpu_driver": "GPU driver", "user_mount": "the user's own mount",
               "unproven": "a place not proven to be the node's", "lock": "a lock another task holds",
               "other": "nothing of the node's (no filesystem or device)"}


@dataclass
class Place:
    """The verdict: what the task waits on and why that is (or is not) the node's."""
    cause: str = "other"
    mount: Mount | None = None
    owner_uid: int | None = None        # the user whose mount it is
    how: list[str] = field(default_factory=list)   # the evidence, in words

    @property
    def node_fault(self) -> bool:
        return self.cause in NODE_CAUSES


def families(symbols: list[str]) -> set[str]:
    out = set()
    for sym in symbols:
        s = sym.lower()
        for fam, prefixes in FAMILIES:
            if s.startswith(prefixes):
                out.add(fam)
                break
    return out


def fault_part(symbols: list[str]) -> list[str] | None:
    """The frames of a page fault's wait, when the stack shows a page fault taken inside
    a system call or in the kernel's copy of a user buffer: the frames above the fault's
    entry (toward the top). None when the stack shows no page fault."""
    for i, sym in enumerate(symbols):
        if sym.startswith(FAULT_FRAMES):
            return symbols[:i]
    return None


def lock_wait(symbols: list[str]) -> bool:
    """The first frame below the scheduler is a lock's slow path, or a VFS function
    that sleeps only on a lock (VFS_LOCKS)."""
    for sym in symbols:
        if sym in SCHED_FRAMES or sym.startswith("schedule"):
            continue
        return sym.startswith(LOCK_WAITS) or sym in VFS_LOCKS
    return False


def fstype_family(m: Mount) -> str:
    if m.is_fuse:
        return "fuse"
    if m.fstype in LOCAL_FSTYPES:
        return "local"
    return FSTYPE_FAMILY.get(m.fstype.split(".", 1)[0], "")


def owner(m: Mount, task_table: MountTable, host: MountTable, uid: int) -> tuple[str, int | None]:
    """("node" | "user", uid of the user): whose a mount of the task's mount table is.

    The node's only when its superblock is mounted in our own namespace, not as a
    user's FUSE mount nor below one: a mount only in another namespace (a user's in a
    user namespace of their own, where their FUSE mounts read user_id=0) is theirs."""
    theirs = task_table.user_owner(m)
    if theirs is not None:
        return "user", theirs
    same = host.with_dev(m.dev) if m.dev else []
    if not same:
        return "user", uid
    if all(host.user_owner(h) is not None for h in same):
        return "user", next(host.user_owner(h) for h in same)
    return "node", None


def fusectl_name(m: Mount) -> str | None:
    """The name of a FUSE mount's connection in fusectl: the kernel's own dev_t of its
    superblock, written whole (fs/fuse/control.c: "%u" of fc->dev, MKDEV(major, minor) =
    major << 20 | minor). For `fuse` the major is 0 and the name is the minor; for
    `fuseblk` (a block device's number) it is not. Not os.makedev: that is the encoding
    of stat(2), another number."""
    try:
        major, minor = (int(x) for x in m.dev.split(":", 1))
    except ValueError:
        return None
    return str((major << 20) | minor)


def fuse_waiting(m: Mount, fusectl: str = FUSECTL) -> int | None:
    """Requests waiting on a FUSE mount's connection (fusectl). None where fusectl is
    not mounted."""
    name = fusectl_name(m)
    if name is None:
        return None
    data = procfs.read_small(f"{fusectl}/{name}/waiting", size=64)
    try:
        return None if data is None else int(data)
    except ValueError:
        return None


def fault_candidates(symbols: list[str], devs: list[str], table: MountTable) -> list[tuple[Mount | None, str]]:
    """The places a page fault may wait on, for attribute: (mount or None, how found).

    A fault has no descriptor and no path: only the devices of the task's file
    mappings name where it may wait, and any mapping may be the one. So a mount is
    named only when the kernel stack shows its filesystem's code (a network or FUSE
    mount of that family), and every mapping device must be a mount of the task's own
    table, read once (`table`): a thread waiting for a page lock
    (folio_wait_bit_common < filemap_fault) shows no filesystem, and the device of a
    lazily unmounted FUSE mount of the user's names no mount at all. Either proves
    nothing (a None place), however many of the node's mounts the task also maps."""
    fams = families(symbols) - {"gpu"}
    if not fams:
        return [(None, "a page fault whose kernel stack shows no filesystem: the mapping it waits on is unknown")]
    out: list[tuple[Mount | None, str]] = []
    for dev in devs:
        same = table.with_dev(dev)
        if not same:
            out.append((None, f"a file mapping on device {dev}, a mount not in the task's table"))
            continue
        m = same[0]
        if (m.is_network or m.is_fuse) and fstype_family(m) in fams:
            out.append((m, f"a file mapping on device {dev}, {fstype_family(m)} as the kernel stack"))
    return out


def attribute(symbols: list[str], candidates: list[tuple[Mount | None, str]], task_table: MountTable,
              host: MountTable, uid: int, fusectl: str = FUSECTL) -> Place:
    """The verdict from the stack's symbols and the mounts the task's own ids named
    ((mount or None where the id named no mount of the task's table, how it was found))."""
    place = Place()
    fams = families(symbols)
    found = [m for m, _ in candidates if m is not None]
    place.how = [how for _, how in candidates]
    place.mount = found[0] if found else None
    if lock_wait(symbols):
        # Before any family: a lock of the GPU driver or of an NFS inode may be held by a
        # task stalled on its user's own mount. The holder is diagnosed for itself.
        place.cause = "lock"
        place.how.append("queued on a lock: the task holding it is the one waiting")
        return place
    if "gpu" in fams:
        place.cause = "gpu_driver"
        place.how.append("the kernel stack is in the GPU driver")
        return place
    node_only = fams & NODE_ONLY
    if node_only:
        place.cause = "shared_filesystem"
        place.how.append(f"the kernel stack is in {'/'.join(sorted(node_only))}, which no user can mount")
        # The place is a mount of that family, or none: a descriptor on another mount
        # (a user's own FUSE mount, its source name the user's) is not where it waits.
        place.mount = next((m for m in found if fstype_family(m) in node_only), None)
        return place
    if not candidates:
        place.cause = "unproven" if fams else "other"
        if fams:
            place.how.append(f"the kernel stack is in {'/'.join(sorted(fams))}, but no id names the mount")
        return place
    if len(found) < len(candidates):
        # Which of the places is the one is not known: none is named.
        place.cause, place.mount = "unproven", None
        place.how.append("not every place the task's ids name is a mount of its table (detached?)")
        return place
    for m in found:
        who, who_uid = owner(m, task_table, host, uid)
        if who == "user":
            place.cause, place.mount, place.owner_uid = "user_mount", m, who_uid
            return place
    kinds = {fstype_family(m) for m in found}
    wanted = fams & {"fuse", "local"}
    if wanted and not wanted <= kinds:
        # The kernel waits in FUSE (or a local filesystem) and the mount the ids name is none.
        place.cause = "unproven"
        place.how.append(f"the kernel stack is in {'/'.join(sorted(wanted))}, the named mount is not")
        return place
    fuse = [m for m in found if m.is_fuse]
    for m in fuse:
        waiting = fuse_waiting(m, fusectl)
        if waiting == 0:
            place.cause = "unproven"
            place.how.append(f"no request waits on the FUSE connection of {m.mountpoint} (fusectl)")
            return place
    network = [m for m in found if m.is_network and not m.is_fuse]
    if network and not {fstype_family(m) for m in network} & fams:
        # A descriptor on a network mount proves nothing by itself: the stack must show
        # that filesystem's code (read deep enough to see it, procfs.stack).
        place.cause, place.mount = "unproven", None
        place.how.append(f"the named mount is {network[0].fstype}, but the kernel stack shows none of its code")
        return place
    if any(m.is_network for m in found):
        place.cause = "shared_filesystem"
    elif kinds == {"local"} and "local" in fams:
        place.cause = "local_filesystem"
    else:
        # A local filesystem whose code the stack does not show, or a pseudo filesystem
        # (pipes, sockets, /proc, devices): nothing shows the node's storage waits.
        place.cause = "unproven" if kinds & {"local"} else "other"
    return place


# --- the path walk, in a hang-safe child ------------------------------------------------
def _mnt_of(fd: int) -> int | None:
    return procfs.mnt_id(os.getpid(), fd, "/proc")


def _where(fd: int) -> tuple[int | None, int | None] | None:
    """(mnt_id, inode) of one of our descriptors (fdinfo: the kernel's own answer, no
    filesystem asked); None where the kernel does not give both."""
    ids = procfs.fd_ids(os.getpid(), fd, "/proc")
    return None if None in ids else ids


SYS_OPENAT2 = 437            # the same number on every architecture (asm-generic)
RESOLVE_CACHED = 0x20
_openat2: list = []          # [the libc syscall function] once looked up, [None] where there is none


def _lookup(name: str, dir_fd: int) -> int:
    """One component, O_PATH|O_NOFOLLOW, from `dir_fd`: first from the dentry cache
    alone (openat2 with RESOLVE_CACHED: it never takes a directory's lock nor asks a
    server, so a user holding a directory's lock, or a stalled mount, cannot catch the
    walk there); a name not cached is looked up for real (os.open), which may wait."""
    if not _openat2:
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            _openat2.append(libc.syscall)
        except (OSError, AttributeError):
            _openat2.append(None)
    call = _openat2[0]
    if call is not None:
        import ctypes
        how = (ctypes.c_uint64 * 3)(_PATH | os.O_NOFOLLOW, 0, RESOLVE_CACHED)
        fd = call(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(dir_fd), os.fsencode(name), ctypes.byref(how),
                  ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err in (38, 22):             # ENOSYS, EINVAL: a kernel without openat2 or RESOLVE_CACHED
            _openat2[0] = None
        elif err != 11:                 # EAGAIN: not in the cache; anything else is the answer
            raise OSError(err, os.strerror(err), name)
    return os.open(name, _PATH | os.O_NOFOLLOW, dir_fd=dir_fd)


def walk(progress, pid: int, proc: str, start: str, path: str, stop: list | tuple = (),
         hung: list | tuple = ()) -> dict:
    """Runs in a hang-safe child: resolves `path` as the task would, from its root (an
    absolute path) or from `start` ("cwd" or "fd/N"), and returns the mount id of what
    it reaches ({"mnt_id", "end": found | missing | loop | error}).

    O_PATH opens only look names up: nothing is read or opened for real. Before each
    lookup the child reports `mnt N` for the directory it looks in: if the lookup never
    returns, the runner's last step names the mount that does not answer. A directory
    on a mount in `stop` (the user's own) ends the walk there: the place is found, and
    nothing of theirs is looked into. So does one on a mount in `hung` (whose probe is
    past its deadline): a lookup there would only leave one more child of ours stuck
    on it."""
    stops, hangs = set(stop), set(hung)
    root = os.open(f"{proc}/{pid}/root", _PATH | os.O_DIRECTORY)
    # based: the bottom of `above` (where the walk started, or an absolute link sent it)
    # is the task's root, so a `..` there, with nothing above, stays.
    top = _where(root)
    cur = os.dup(root) if path.startswith("/") else os.open(f"{proc}/{pid}/{start}", _PATH)
    based = path.startswith("/") or (top is not None and _where(cur) == top)
    parts = path.split("/")
    parts.reverse()
    above: list[int] = []
    links = 0
    while parts:
        name = parts.pop()
        if name in ("", "."):
            continue
        here = _mnt_of(cur)
        if here in stops:
            return {"mnt_id": here, "end": "user mount"}
        if here in hangs:
            return {"mnt_id": here, "end": "hung mount"}
        progress(f"mnt {here}")
        if name == "..":
            if above:
                os.close(cur)
                cur = above.pop()
                continue
            # `..` of the task's root is the root, as the kernel resolves it for the task
            # (a chroot's too); opened from here it would climb out into the host's tree.
            if based:
                continue
        try:
            nxt = _lookup(name, cur)
        except FileNotFoundError:
            return {"mnt_id": _mnt_of(cur), "end": "missing"}
        except OSError as e:
            return {"mnt_id": _mnt_of(cur), "end": "error", "error": e.strerror or str(e)}
        try:
            target = os.readlink("", dir_fd=nxt)
        except OSError:
            target = None
        if target is None:
            if name == "..":
                # Above where a relative walk started: nothing to go back to, and the
                # task's root may be reached this way (fdinfo tells it by its ids).
                os.close(cur)
                cur = nxt
                based = top is not None and _where(cur) == top
            else:
                above.append(cur)
                cur = nxt
            continue
        os.close(nxt)
        links += 1
        if links > SYMLINK_MAX:
            return {"mnt_id": _mnt_of(cur), "end": "loop"}
        rest = target.split("/")
        rest.reverse()
        parts.extend(rest)
        if target.startswith("/"):
            for fd in above:
                os.close(fd)
            above = []
            os.close(cur)
            cur, based = os.dup(root), True
    return {"mnt_id": _mnt_of(cur), "end": "found"}


# Families whose waits are a filesystem's: a thread asleep (S) in one of them, while a
# mount's own probe hangs, may be waiting on that mount (FUSE waits interruptibly once
# INIT is answered; NFS, Lustre and CephFS often do).
FS_FAMILIES = NODE_ONLY | {"fuse"}
SERVER_WAITS = ("fuse_dev_",)


def fs_wait(proc: str, pid, tid) -> bool:
    """The thread's wait channel is a filesystem's. A FUSE server waiting for the next
    request (fuse_dev_do_read) serves the mount; it does not wait on it."""
    wchan = (procfs.text(f"{proc}/{pid}/task/{tid}/wchan") or "").strip()
    return not wchan.startswith(SERVER_WAITS) and bool(families([wchan]) & FS_FAMILIES)


def fs_waits(progress, proc: str, rows: list) -> list[list]:
    """Runs in a hang-safe child: the scan rows (threads asleep) whose wait channel is a
    filesystem's. One such child per user: a wait channel that does not answer (a task
    of the user's in execve, its FUSE flush unanswered) stalls only that user's."""
    return [row for row in rows if fs_wait(proc, row[0], row[1])]


def scan_fs_waits(progress, proc: str = procfs.PROC, skip: frozenset[int] | set[int] = frozenset()) -> list[list]:
    """Every thread asleep (S) whose wait channel is a filesystem's, as procfs.scan_pids
    rows, but the processes in `skip`, in one process (the check runs the two halves,
    procfs.scan_child and fs_waits, in children of their own)."""
    pids = [p for p in procfs.list_pids(proc) if not (skip and int(p) in skip)]
    return fs_waits(progress, proc, procfs.scan_pids(pids, proc, states=b"S"))


def hung_at(step: str) -> int | None:
    """The mount id a walk that never returned was looking in (its last step)."""
    if step.startswith("mnt "):
        try:
            return int(step[4:])
        except ValueError:
            return None
    return None


def mapping_devs(maps: bytes) -> list[str]:
    """Device numbers (major:minor, as mountinfo writes them) of a process's file
    mappings, from /proc/PID/maps (hex there)."""
    out: list[str] = []
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5 or parts[4] == b"0":
            continue
        major, _, minor = parts[3].partition(b":")
        try:
            dev = f"{int(major, 16)}:{int(minor, 16)}"
        except ValueError:
            continue
        if dev not in out:
            out.append(dev)
    return out
