"""Filesystem check: does each path a node depends on still answer?

A buffered write() succeeds against a dead server (it only fills the page cache), so
the write probe creates a file, writes a payload, fsyncs it (the round trip that
reaches the server), drops the cached pages, reads it back, compares and unlinks.
Each step is reported to the parent before it starts, so a hang names the step that
hung: "create" points at the metadata server, "fsync" at the data path.

The parent only reads /proc/self/mountinfo: it finds the mount holding each path by
string prefix and never stats the path itself. Everything that touches the path runs
in a hang-safe child (host/runner.py).

Each probe works in a directory of its own below the probed path (`.slurm-hooks`,
root's, 0700, made by the first write probe): no user can list it or hold its lock. A
user who can read a directory can hold that directory's lock (a system call whose
buffer they stall in a page fault, on a FUSE mount of theirs, keeps it), and a create
in it queues behind them; so the probes never create or list in the probed directory
itself. A probe past its deadline whose own kernel stack shows it queued on a lock
(host/waits.lock_wait) is `locked`: someone holds it, the storage is not proven slow.

Verdicts: ok, slow (succeeded above warn_after), hung (deadline), locked (past the
deadline, queued on a lock another task holds: a warning), error (with the errno
name), full (ENOSPC or EDQUOT on node-local scratch), missing (the mount that should
be there is not).

A full node-local scratch (/tmp, /dev/shm, a local disk) is what a job's own files do
to a healthy node: in the health check it is a resumable failure (the drain is lifted
once space is back), and in the prolog and epilog only a warning, so that no job is
held up, and no node drained, by an earlier job's files. Full network storage stays an
error, as does any other errno.
"""
from __future__ import annotations

import errno
import os
import time

from .. import TYPE_CHECKING
from ..core.config import setting, switch
from ..core.model import FAIL, MOUNT_PROBE, OK, WARN, Finding
from ..core.records import dataclass
from ..host.mounts import normalise
from ..host.runner import DONE, HUNG, STILL_HUNG, Task

if TYPE_CHECKING:
    from ..core.behaviour import Behaviour
    from ..core.config import Config
    from ..host.runner import Outcome as TaskOutcome
    from . import Context

NAME = "filesystem"
ORDER = 10
HOOKS = ("check", "healthcheck", "prolog", "epilog")


@dataclass
class RecoverConfig:
    method: str = setting("none", kind="enum", choices=("none", "fuse-abort", "nfs-force-unmount", "command"),
                          doc="How to free tasks stuck on this mount without a reboot, once it is proven "
                          "hung and its job was ended: `fuse-abort` (write 1 to the FUSE connection's "
                          "fusectl `abort`: every pending request fails, its callers wake), "
                          "`nfs-force-unmount` (`umount -f`: pending RPCs of a hard mount fail with "
                          "EIO), `command` (the site's own, `recover.command`), `none`: reboot as before.")
    command: list = setting([], kind="strlist",
                            doc="method `command`: argv, absolute program path; `{mountpoint}` and "
                            "`{source}` are replaced. Run in a child with a deadline (filesystem "
                            "timeout), never through a shell.")
    remount: list = setting([], kind="strlist",
                            doc="argv that brings the mount back after the dead one is detached "
                            "(`umount -l`), placeholders as for command. Empty: nothing is run "
                            "(autofs or a systemd mount unit brings it back). Set, it also "
                            "remounts a dead mount (every probe fails at once with ENOTCONN, "
                            "ESTALE or EIO on consecutive runs: its client died, as after a "
                            "restart of the storage), whatever `method` says; a dead mount without "
                            "it is this node's fault to reboot, unless every node finds it dead.")
    wait: float = setting(10.0, kind="seconds",
                          doc="How long the stuck tasks and probes on the mount get to go after the "
                          "recovery, polled, within the run's action deadline. Tasks still there: "
                          "the reboot, saying recovery was tried.")


@dataclass
class FilesystemConfig:
    path: str = setting(kind="path", doc="Directory to probe. The write probe creates, writes, "
                        "fsyncs, reads back and removes a small file in it.")
    mountpoint: str | None = setting(None, kind="path", nullable=True,
                                     doc="Mount that must be present for this path (e.g. /home "
                                     "for /home/.probe). Absent from the mount table: `missing`. "
                                     "Default: not required, the path's own mount is used.")
    fstype: str | None = setting(None, nullable=True,
                                 doc="Expected filesystem type of that mount (nfs4, lustre, gpfs, "
                                 "...). Another type is reported as `missing`.")
    mode: str = setting("write", kind="enum", choices=("write", "read"),
                        doc="write: create+write+fsync+read back+unlink, in the probes' own directory "
                        "below the path (.slurm-hooks, root's, 0700). read: statfs, and read that "
                        "directory where one exists, for mounts a node must not write to.")
    timeout: float | None = setting(None, kind="seconds", nullable=True,
                                    doc="Deadline for the probe. Default: filesystem_defaults.timeout.")
    warn_after: float | None = setting(None, kind="seconds", nullable=True,
                                       doc="Latency above which the verdict is `slow`. "
                                       "Default: filesystem_defaults.warn_after.")
    payload_bytes: int | None = setting(None, kind="int", min=1, max=16 << 20, nullable=True,
                                        doc="Bytes written and read back. "
                                        "Default: filesystem_defaults.payload_bytes.")
    required: bool = setting(True, kind="bool",
                             doc="A failure drains the node (true) or is only reported (false).")
    scope: str = setting("shared", kind="enum", choices=("shared", "node"),
                         doc="Whose the storage is. shared: a network mount's hang seen on other "
                         "nodes too is the storage's outage (no reboot or recovery for it; "
                         "docs/recovery.md). node: this node's own (a per-node FUSE client or export "
                         "under the same name everywhere): a hang on the mount that holds this path "
                         "is always this node's fault.")
    recover: RecoverConfig = setting(kind="section", cls=RecoverConfig,
                                     doc="Recovery without a reboot (opt-in): docs/recovery.md.")

    def validate(self, v, node, prefix: str) -> None:
        """Rules that span several settings (the loader calls it with itself as v)."""
        fs = self
        if fs.timeout is not None and fs.warn_after is not None and fs.warn_after >= fs.timeout:
            v.fail(v.key_node(node, "warn_after"), f"{prefix}.warn_after",
                      f"must be below timeout ({fs.timeout:g}s), got {fs.warn_after:g}")
        r = fs.recover
        where = v.key_node(v.value_node(node, "recover"), "method")
        if r.method == "command" and not r.command:
            v.fail(where, f"{prefix}.recover.command", "method command needs the command (an argv list)")
        for key, argv in (("command", r.command), ("remount", r.remount)):
            if argv and not argv[0].startswith("/"):
                v.fail(v.key_node(v.value_node(node, "recover"), key), f"{prefix}.recover.{key}",
                          f"the program must be an absolute path (HealthCheckProgram has no PATH), got {argv[0]!r}")
        if r.method in ("fuse-abort", "nfs-force-unmount"):
            kind = fs.fstype or (v.mount_kind(fs.mountpoint or fs.path) if v.mount_kind else None)
            want = "fuse" if r.method == "fuse-abort" else "nfs"
            if kind is not None and not kind.startswith(want):
                v.fail(where, f"{prefix}.recover.method",
                          f"{r.method} needs a{' FUSE' if want == 'fuse' else 'n NFS'} mount, but {fs.path} "
                          f"is on {kind}")


@dataclass
class FilesystemDefaults:
    enabled: str = switch("Probe filesystems. auto and true: the configured paths, else local "
                          "scratch and the discovered network mounts. false: never.")
    timeout: float = setting(10.0, kind="seconds",
                             doc="Deadline of a filesystem probe, in seconds. All paths are "
                             "probed at once, so a run with every path hung ends after about "
                             "this long. Keep it well below slurmd's 60 s kill.")
    warn_after: float = setting(2.0, kind="seconds",
                                doc="Latency above which a probe that succeeded is `slow`.")
    payload_bytes: int = setting(4096, kind="int", min=1, max=16 << 20,
                                 doc="Bytes written, fsynced and read back by the write probe.")
    discover_network_mounts: bool = setting(
        True, kind="bool",
        doc="When `filesystems` is empty: also probe (read mode) every network or FUSE "
        "mount found in the mount table.")


SECTIONS = {
    "filesystems": setting([], kind="list", item=FilesystemConfig, unique="path",
                           doc="Paths to probe. Empty: /tmp and /dev/shm (write) plus, "
                           "with discover_network_mounts, every network mount (read)."),
    "filesystem_defaults": setting(kind="section", cls=FilesystemDefaults,
                                   doc="Defaults for every filesystems entry."),
}


def paths(cfg: Config) -> list[FilesystemConfig]:
    """The configured paths (this check's `filesystems`)."""
    out: list[FilesystemConfig] = getattr(cfg, "filesystems")
    return out


def defaults(cfg: Config) -> FilesystemDefaults:
    """This check's `filesystem_defaults`."""
    out: FilesystemDefaults = getattr(cfg, "filesystem_defaults")
    return out



def fs_timeout(cfg: Config, fs: FilesystemConfig) -> float:
    return fs.timeout if fs.timeout is not None else defaults(cfg).timeout


def fs_warn_after(cfg: Config, fs: FilesystemConfig) -> float:
    return fs.warn_after if fs.warn_after is not None else defaults(cfg).warn_after


def fs_payload(cfg: Config, fs: FilesystemConfig) -> int:
    return fs.payload_bytes if fs.payload_bytes is not None else defaults(cfg).payload_bytes


DEFAULT_LOCAL = ("/tmp", "/dev/shm")
STACK_TIMEOUT = 1.0      # the read of a hung probe's kernel stack
# The world-writable scratch directories every job can fill, on whatever holds them
# (a diskless node's /tmp may sit on its NFS root).
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
# What a step that ran out of room says: no space (blocks or inodes), or over a quota.
FULL_ERRNOS = ("ENOSPC", "EDQUOT")
# The runs made for a job: there a full scratch holds the earlier job's files.


@dataclass
class Target:
    path: str
    mode: str
    timeout: float
    warn_after: float
    payload: int
    required: bool
    mountpoint: str | None
    fstype: str | None
    origin: str              # "configured" or why a default was chosen
    scratch: bool = False    # node-local scratch: full is a job's doing (local_scratch)


def local_scratch(path: str, mounts) -> bool:
    """Whether `path` is node-local scratch, where running out of space or inodes is
    what jobs' files do, not a fault of the node.

    Decided from the mount table alone (the parent never touches the path): the mount
    holding the path is a node-local filesystem (tmpfs, ext4, xfs, btrfs, ...: neither
    network nor FUSE), or the path is in /tmp, /var/tmp or /dev/shm on the filesystem
    that holds that directory itself. The paths are the admin's (configuration) or
    ours (the defaults); what a user controls is mounts, and a user's own FUSE mount
    never counts: its ENOSPC may be made up."""
    m = mounts.holding(path)
    if m is None or mounts.user_owned(m):
        return False
    if not (m.is_network or m.is_fuse):
        return True
    p = normalise(path)
    return any((p == d or p.startswith(d + "/")) and mounts.holding(d) is m for d in SCRATCH_DIRS)


def targets(cfg: Config, mounts) -> list[Target]:
    d = defaults(cfg)
    if paths(cfg):
        return [Target(path=normalise(fs.path), mode=fs.mode,
                       timeout=fs_timeout(cfg, fs), warn_after=fs_warn_after(cfg, fs),
                       payload=fs_payload(cfg, fs), required=fs.required,
                       mountpoint=fs.mountpoint, fstype=fs.fstype, origin="configured",
                       scratch=local_scratch(fs.path, mounts))
                for fs in paths(cfg)]
    out = [Target(path=p, mode="write", timeout=d.timeout, warn_after=d.warn_after,
                  payload=d.payload_bytes, required=True, mountpoint=None, fstype=None,
                  origin="default: local scratch", scratch=local_scratch(p, mounts))
           for p in DEFAULT_LOCAL if mounts.holding(p) is not None]
    if d.discover_network_mounts:
        for m in mounts:
            # Only the node's own mounts: a user's FUSE mount (fusermount3) is theirs to
            # break, and root gets EACCES there anyway.
            if m.is_network and not mounts.user_owned(m):
                out.append(Target(path=m.mountpoint, mode="read", timeout=d.timeout,
                                  warn_after=d.warn_after, payload=d.payload_bytes, required=True,
                                  mountpoint=m.mountpoint, fstype=None,
                                  origin=f"default: {m.fstype} mount found in the mount table"))
    return out


# --- what runs in the child -----------------------------------------------------------
def _oserror(step: str, e: OSError) -> dict:
    name = errno.errorcode.get(e.errno or 0, str(e.errno))
    return {"ok": False, "step": step, "errno": name, "message": e.strerror or str(e)}


def _begin(progress, step: str) -> tuple[str, float]:
    """Say which step starts (a hang then names it); (step, its start time)."""
    progress(step)
    return step, time.monotonic()


# The probes' own directory below each probed path: root's, 0700. No user can list it,
# create in it or hold its lock, so a probe's create, write, read and unlink there wait
# on the storage alone. A user can hold the lock of a directory they may read (a
# system call whose buffer they stall in a page fault holds it), and an O_CREAT in that
# directory queues behind them: the probes never create in the probed directory itself.
OWN_DIR = ".slurm-hooks"
# Who root's files belong to on a root-squashed network export (nobody).
SQUASHED = 65534
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _ours(fd: int) -> str:
    """Why the directory open at fd is not the probes' own, or ""."""
    import stat as st_
    st = os.fstat(fd)
    if not st_.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_uid not in (0, SQUASHED):
        return f"owned by uid {st.st_uid}"
    if st.st_mode & 0o077:
        return f"mode {st.st_mode & 0o7777:04o}"
    return ""


def own_dir(directory: str, create: bool) -> tuple[int | None, str, str]:
    """(descriptor of the probes' own directory below `directory`, note, the name of a
    directory made for this run alone, to remove after). Made 0700 if
    absent and `create`. One that is not root's alone (a user made the name first) is
    left alone: the write probe then works in a fresh directory of its own made for this
    run (mkdir: a name no one else can have), the read probe reads none; the note says so."""
    base = os.open(directory, _DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        fd = -1
        try:
            try:
                fd = os.open(OWN_DIR, _DIR_FLAGS, dir_fd=base)
            except FileNotFoundError:
                if not create:
                    return None, "", ""
                try:
                    os.mkdir(OWN_DIR, 0o700, dir_fd=base)
                except FileExistsError:
                    pass
                fd = os.open(OWN_DIR, _DIR_FLAGS, dir_fd=base)
            why = _ours(fd)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            why = "not a directory"
        if not why:
            return fd, "", ""
        if fd >= 0:
            os.close(fd)
        note = f"{directory}/{OWN_DIR} is not the probes' own ({why})"
        if not create:
            return None, note, ""
        name = f"{OWN_DIR}.{os.urandom(6).hex()}"
        os.mkdir(name, 0o700, dir_fd=base)
        fd = os.open(name, _DIR_FLAGS, dir_fd=base)
        return fd, note + f": a directory of this run's, {name}", name
    finally:
        os.close(base)


def probe_write(progress, directory: str, size: int, node: str) -> dict:
    token = os.urandom(6).hex()
    name = f"probe.{node}.{os.getpid()}.{token}"
    payload = (token.encode() * (size // len(token) + 1))[:size]
    steps: dict[str, float] = {}
    failure: dict | None = None
    created = False
    fd = own = -1
    note = temp = ""
    step = "create"
    t_all = time.monotonic()
    try:
        t = _begin(progress, step)[1]
        # Metadata, all of it "create": our own directory looked up (made the first
        # time), then a new file of our own with a random name in it, a directory only
        # root can use. The read-back uses the same descriptor.
        got, note, temp = own_dir(directory, create=True)
        own = got if got is not None else -1
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=own)
        created = True
        steps[step] = time.monotonic() - t
        step, t = _begin(progress, "write")
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
        steps[step] = time.monotonic() - t
        step, t = _begin(progress, "fsync")
        os.fsync(fd)
        steps[step] = time.monotonic() - t
        step, t = _begin(progress, "read")
        try:
            # Drop our own cached copy so the read has a chance to go to the server.
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass
        chunks, got_bytes = [], 0
        while got_bytes < size:
            chunk = os.pread(fd, size - got_bytes, got_bytes)
            if not chunk:
                break
            chunks.append(chunk)
            got_bytes += len(chunk)
        steps[step] = time.monotonic() - t
        if b"".join(chunks) != payload:
            return {"ok": False, "step": "read", "errno": "mismatch",
                    "message": f"read back {got_bytes} bytes that differ from the {size} written"}
        os.close(fd)
        fd = -1
        step, t = _begin(progress, "unlink")
        os.unlink(name, dir_fd=own)
        created = False
        steps[step] = time.monotonic() - t
    except OSError as e:
        failure = _oserror(step, e)
    finally:
        if fd >= 0:
            os.close(fd)
        if created:
            try:
                os.unlink(name, dir_fd=own)
            except OSError:
                pass
        if own >= 0:
            os.close(own)
        if temp:
            try:
                os.rmdir(os.path.join(directory, temp))
            except OSError:
                pass
    if failure is not None:
        if failure["errno"] in FULL_ERRNOS:
            failure["space"] = _space(directory)      # once our own file is gone
        if note:
            failure["note"] = note
        return failure
    out = {"ok": True, "latency": time.monotonic() - t_all, "steps": steps}
    if note:
        out["note"] = note
    return out


def _space(directory: str) -> dict:
    """What is left, as root sees it (root may use ext4's reserved blocks): free bytes,
    free and total inodes (0 total: the filesystem counts none, btrfs)."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return {}
    return {"free_bytes": st.f_bfree * st.f_frsize, "size_bytes": st.f_blocks * st.f_frsize,
            "free_inodes": st.f_ffree, "inodes": st.f_files}


def probe_read(progress, directory: str) -> dict:
    """statfs (the storage's answer, no lock taken), the directory opened (a round trip
    of its own on network and FUSE mounts, the lookup of a cached name), and the probes'
    own directory read where an admin or a write probe made one: never a directory a
    user can lock, whose readdir would queue behind them."""
    steps: dict[str, float] = {}
    step = "statfs"
    t_all = time.monotonic()
    note = ""
    try:
        t = _begin(progress, step)[1]
        os.statvfs(directory)
        steps[step] = time.monotonic() - t
        step, t = _begin(progress, "readdir")
        own, note, _ = own_dir(directory, create=False)
        if own is not None:
            try:
                with os.scandir(own) as it:
                    for _ in it:
                        break
            finally:
                os.close(own)
        steps[step] = time.monotonic() - t
    except OSError as e:
        return _oserror(step, e)
    out = {"ok": True, "latency": time.monotonic() - t_all, "steps": steps}
    if note:
        out["note"] = note
    return out


def probe_stack(progress, pid: int) -> list[str]:
    """Runs in a hang-safe child: the kernel stack of one of our probe children left in
    the kernel past its deadline (symbols, top first)."""
    from ..host import procfs
    return procfs.stack(pid, pid, procfs.PROC, 64)


# --- the check -----------------------------------------------------------------------
class FilesystemCheck:
    name = NAME
    order, hooks = ORDER, HOOKS
    roles = (MOUNT_PROBE,)
    state: tuple[str, ...] = ()       # a stuck probe is the runner's to remember
    series = {
        "slurm_hooks_filesystem_probe_ok": ("gauge", "1 when the filesystem probe of the path succeeded (ok or slow)."),
        "slurm_hooks_filesystem_probe_latency_seconds": ("gauge", "Time to the probe's verdict (the deadline when hung)."),
        "slurm_hooks_filesystem_probe_info": ("gauge", "The probe's verdict, as a label (ok, slow, hung, locked, "
                                              "error, full, missing)."),
    }
    explain_keys = ("mountpoint", "fstype", "mode", "step", "errno", "free_bytes", "free_inodes",
                    "latency", "timeout", "since")

    @staticmethod
    def samples(findings: list[Finding]) -> list[tuple[str, dict, float]]:
        out: list[tuple[str, dict, float]] = []
        for f in findings:
            fstype = f.evidence.get("fstype") or ""
            out.append(("slurm_hooks_filesystem_probe_ok", {"path": f.target, "fstype": fstype},
                        1 if f.status in ("ok", "slow") else 0))
            latency = f.evidence.get("latency", f.evidence.get("elapsed"))
            if latency is not None:
                out.append(("slurm_hooks_filesystem_probe_latency_seconds", {"path": f.target, "fstype": fstype},
                            float(latency)))
            out.append(("slurm_hooks_filesystem_probe_info", {"path": f.target, "status": f.status}, 1))
        return out

    def __init__(self):
        self._targets: list[Target] = []
        self._problems: dict[str, Finding] = {}

    @staticmethod
    def key(path: str) -> str:
        return f"{NAME}:{path}"

    def tasks(self, ctx: Context) -> list[Task]:
        if defaults(ctx.config).enabled == "false":
            self._targets = []
            return []
        mounts = ctx.mounts
        self._targets = targets(ctx.config, mounts)
        if ctx.fs_timeout is not None:
            for t in self._targets:
                t.timeout = min(t.timeout, ctx.fs_timeout)
                t.warn_after = min(t.warn_after, t.timeout)
        if not paths(ctx.config):
            ctx.notes.append(_default_note(self._targets))
        tasks = []
        for t in self._targets:
            problem = self._mount_problem(t, mounts)
            if problem:
                self._problems[t.path] = problem
                continue
            if t.mode == "write":
                task = Task(self.key(t.path), probe_write, (t.path, t.payload, ctx.node), t.timeout)
            else:
                task = Task(self.key(t.path), probe_read, (t.path,), t.timeout)
            tasks.append(task)
        return tasks

    def _mount_problem(self, t: Target, mounts) -> Finding | None:
        if t.mountpoint:
            m = mounts.at(t.mountpoint)
            if m is None:
                want = f", expected {t.fstype}" if t.fstype else ""
                return self._finding(t, "missing", f"fs {t.path} not mounted ({t.mountpoint} absent{want})",
                                     detail=f"{t.mountpoint} is not in /proc/self/mountinfo",
                                     evidence={"mountpoint": t.mountpoint})
        else:
            m = mounts.holding(t.path)
        if t.fstype and m is not None and m.fstype != t.fstype:
            return self._finding(t, "missing",
                                 f"fs {t.path} on {m.fstype} {m.mountpoint}, expected {t.fstype}",
                                 detail="the expected filesystem is not mounted there",
                                 evidence={"mountpoint": m.mountpoint, "fstype": m.fstype})
        return None

    def _finding(self, t: Target, status: str, summary: str, detail: str = "",
                 evidence: dict | None = None, for_job: bool = False, severity: str | None = None) -> Finding:
        if severity is not None:
            pass
        elif status == "ok":
            severity = OK
        elif status == "slow" or not t.required or (status == "full" and for_job):
            severity = WARN
        else:
            severity = FAIL
        ev = {"mode": t.mode, "origin": t.origin, "timeout": t.timeout}
        ev.update(evidence or {})
        return Finding(check=NAME, target=t.path, status=status, severity=severity,
                       summary=summary, detail=detail, evidence=ev)

    def findings(self, ctx: Context, outcomes: dict[str, TaskOutcome]) -> list[Finding]:
        out = []
        locks = self._locks(ctx, outcomes)
        for t in self._targets:
            if t.path in self._problems:
                out.append(self._problems[t.path])
                continue
            m = ctx.mounts.at(t.mountpoint) if t.mountpoint else ctx.mounts.holding(t.path)
            fstype = m.fstype if m else "?"
            where = {"mountpoint": m.mountpoint if m else None, "fstype": fstype,
                     # What the other nodes know the same storage by, and what this node
                     # knows the mount by (decide/mount_incident.py).
                     "source": m.source if m else None, "network": bool(m and m.is_network),
                     "dev": m.dev if m else None}
            o = outcomes[self.key(t.path)]
            if self.key(t.path) in locks:
                out.append(self._locked(t, o, fstype, where, locks[self.key(t.path)]))
                continue
            out.append(self._verdict(t, o, fstype, where, ctx.behaviour))
        return out

    def _locks(self, ctx: Context, outcomes: dict[str, TaskOutcome]) -> dict[str, list[str]]:
        """key -> kernel stack, of each probe past its deadline that waits on a lock
        (host/waits.lock_wait): read of our probe child left in the kernel, in a child
        of its own. A probe that died of the kill waited killably: the storage's wait."""
        from ..host import procfs
        tasks = []
        for t in self._targets:
            o = outcomes.get(self.key(t.path))
            if o is None or o.status not in (HUNG, STILL_HUNG) or not o.pid:
                continue
            if procfs.read_small(f"{procfs.PROC}/{o.pid}/status", size=64) is None:
                continue
            tasks.append(Task(f"{NAME}:stack:{t.path}", probe_stack, (o.pid,), STACK_TIMEOUT))
        if not tasks:
            return {}
        # Only past a deadline: a healthy run never loads it.
        from ..host import waits
        found = {}
        for key, o in ctx.runner.run(tasks).items():
            stack = o.value if o.status == DONE and isinstance(o.value, list) else []
            if stack and waits.lock_wait([str(x) for x in stack]):
                probe = self.key(key.split(":", 2)[2])
                found[probe] = [str(x) for x in stack]
                ctx.locked.add(probe)
        return found

    def _locked(self, t: Target, o, fstype: str, where: dict, stack: list[str]) -> Finding:
        """A probe queued on a lock another task holds: not the storage's fault (a user
        who can read a directory can hold its lock, from a system call whose buffer they
        stall). A warning, never a drain, an outage suspect, a recovery or a reboot."""
        step = o.step or t.mode
        ev = dict(where, pid=o.pid, elapsed=round(o.elapsed, 6), step=step, since=o.since, stack=stack[:8],
                  lock=True)
        top = next((s for s in stack if not s.startswith(("__schedule", "schedule"))), "?")
        return self._finding(t, "locked",
                             f"fs {t.path} probe waits on a lock >{t.timeout:g}s ({step}, {fstype})",
                             detail=(f"the probe (pid {o.pid}) is queued on a lock in {top}, held by another "
                                     "task (the kernel does not name it), not waiting on the storage; a task "
                                     "holding a directory's lock is its own user's doing: not a drain"),
                             evidence=ev, severity=WARN)

    def _verdict(self, t: Target, o, fstype: str, where: dict, behaviour: Behaviour | None = None) -> Finding:
        ev = dict(where, pid=o.pid, elapsed=round(o.elapsed, 6))
        if o.status in (HUNG, STILL_HUNG):
            step = o.step or t.mode
            # The latency of a hung probe is its deadline (the metric's word), whatever
            # time has passed since the probe that is still stuck started.
            ev.update(step=step, since=o.since, latency=float(t.timeout))
            detail = o.error
            if o.status == STILL_HUNG:
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(o.since))
                detail = f"still hung since {stamp} (probe pid {o.pid} stuck in the kernel)"
            # What and where first: `sinfo -R` shows a reason's first 20 characters.
            return self._finding(t, "hung", f"fs {t.path} hung >{t.timeout:g}s ({step}, {fstype})",
                                 detail=detail, evidence=ev)
        if o.status != DONE:
            return self._finding(t, "error", f"fs {t.path} probe failed ({fstype})",
                                 detail=o.error, evidence=ev)
        v = o.value
        if not v.get("ok") and t.scratch and v["errno"] in FULL_ERRNOS:
            return self._full(t, v, fstype, ev, behaviour)
        if not v.get("ok") and v["errno"] == "EACCES" and os.geteuid() != 0:
            # An admin's look as another user (`check` as non-root): the probe's file is
            # root's to write; the health check runs as root. Not the node's fault.
            ev.update(step=v["step"], errno=v["errno"], uid=os.geteuid())
            return self._finding(t, "not_probed", f"fs {t.path} not probed: uid {os.geteuid()} may not "
                                 f"{v['step']} there ({fstype}); the health check runs as root",
                                 detail=v.get("message", ""), evidence=ev, severity=OK)
        if not v.get("ok"):
            ev.update(step=v["step"], errno=v["errno"])
            return self._finding(t, "error", f"fs {t.path} {v['step']} failed {v['errno']} ({fstype})",
                                 detail=v.get("message", ""), evidence=ev)
        latency = float(v["latency"])
        ev.update(latency=round(latency, 6), steps=v.get("steps", {}))
        if latency > t.warn_after:
            return self._finding(t, "slow", f"fs {t.path} slow {latency:.1f}s > {t.warn_after:g}s ({fstype})",
                                 detail=_steps(v), evidence=ev)
        return self._finding(t, "ok", f"fs {t.path} ok {latency * 1000:.1f}ms ({fstype})",
                             detail=_steps(v), evidence=ev)

    def _full(self, t: Target, v: dict, fstype: str, ev: dict, behaviour: Behaviour | None) -> Finding:
        """Node-local scratch out of room: jobs' files, not a sick node. Never hard,
        never a reboot: a drain for it is lifted by the health checks once space is
        back (policy.resume_after passing runs); the prolog and epilog only warn."""
        space = v.get("space") or {}
        name = v["errno"]
        if name == "EDQUOT":
            what = "over quota"
        elif space.get("inodes") and space.get("free_inodes") == 0:
            what = "out of inodes"
        else:
            what = "full"
        ev.update(step=v["step"], errno=name, scratch=True, **space)
        left = ""
        if space:
            left = (f"{_size(space['free_bytes'])} of {_size(space['size_bytes'])} free"
                    + (f", {space['free_inodes']} of {space['inodes']} inodes free" if space["inodes"] else ""))
        where = f"node-local scratch ({fstype} on {ev.get('mountpoint')})"
        for_job = behaviour is not None and behaviour.for_job
        if behaviour is not None and for_job:
            then = (f"not failing the {behaviour.name}: jobs' files fill it; the health check drains the node "
                    "resumably if it stays full")
        else:
            then = ("jobs' files fill it: a resumable drain, lifted once space is back "
                    "(policy.resume_after passing health checks)")
        detail = "; ".join(filter(None, [f"{v['step']}: {v.get('message', '')}", where, left, then]))
        f = self._finding(t, "full", f"fs {t.path} {what} ({name})", detail=detail, evidence=ev, for_job=for_job)
        f.resumable, f.hard, f.needs_reboot = True, False, False
        return f


def _default_note(chosen: list[Target]) -> str:
    local = [t.path for t in chosen if t.mode == "write"]
    remote = [t.path for t in chosen if t.mode == "read"]
    return ("no filesystems configured: probing local scratch " + (", ".join(local) or "(none)")
            + " (write) and network mounts from the mount table: " + (", ".join(remote) or "none found")
            + " (read). List the paths this node depends on under `filesystems:`.")


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size, unit = float(n), "B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024:
            break
    return f"{size:.1f} {unit}"


def _steps(v: dict) -> str:
    return ", ".join(f"{k} {s * 1000:.1f}ms" for k, s in v.get("steps", {}).items())


CHECK = FilesystemCheck
