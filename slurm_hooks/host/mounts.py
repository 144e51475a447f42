"""Mount table from /proc/self/mountinfo.

The parent process never stats, statfs or realpaths a path that may sit on a hung
filesystem: any of those can put it in uninterruptible sleep. Reading mountinfo is safe
(the kernel answers from its own tables), so every "which mount holds this path"
question is answered here, by string prefix.
"""
from __future__ import annotations

import os

from ..core.records import dataclass

# Filesystems whose health depends on a server or a network. Used to pick sensible
# default probes and to classify what a stuck task is waiting on.
NETWORK_FSTYPES = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph",
    "glusterfs", "panfs", "wekafs", "orangefs", "pvfs2", "afs", "9p", "ocfs2", "gfs2",
    "fuse", "fuseblk", "virtiofs", "davfs", "cvmfs", "quobyte", "vboxsf", "xrootd",
})
# FUSE subtypes that are local helpers rather than storage a job depends on.
LOCAL_FUSE = frozenset({"fuse.lxcfs", "fuse.portal", "fuse.gvfsd-fuse", "fuse.snapfuse",
                        "fuse.xdg-document-portal", "fuse.appimagefuse", "fuse.kio-fuse"})


@dataclass(frozen=True)
class Mount:
    mount_id: int
    mountpoint: str
    fstype: str
    source: str
    options: str          # per-mount options (ro, nosuid, ...)
    super_options: str
    dev: str = ""         # the superblock's device, major:minor (st_dev of every file on it)

    @property
    def is_fuse(self) -> bool:
        return self.fstype in ("fuse", "fuseblk") or self.fstype.startswith(("fuse.", "fuseblk."))

    @property
    def fuse_owner(self) -> int | None:
        """The uid that mounted a FUSE filesystem (its `user_id=`); None if not FUSE."""
        if not self.is_fuse:
            return None
        for opt in self.super_options.split(","):
            if opt.startswith("user_id="):
                try:
                    return int(opt[8:])
                except ValueError:
                    break
        return -1      # FUSE without a readable owner: not known to be root's

    @property
    def user_fuse(self) -> bool:
        """A FUSE mount some user made for themselves (fusermount3 records their uid):
        their storage, not the node's; without allow_other even root cannot enter it."""
        owner = self.fuse_owner
        return owner is not None and owner != 0

    @property
    def is_network(self) -> bool:
        if self.fstype in LOCAL_FUSE:
            return False
        base = self.fstype.split(".", 1)[0]
        return self.fstype in NETWORK_FSTYPES or base in NETWORK_FSTYPES


def _unescape(field: str) -> str:
    # The kernel escapes space, tab, newline and backslash in paths as \ooo octal.
    if "\\" not in field:
        return field
    out = []
    i = 0
    while i < len(field):
        c = field[i]
        if c == "\\" and i + 3 < len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    mounts = []
    for line in text.splitlines():
        parts = line.split(" ")
        try:
            sep = parts.index("-", 6)
            mounts.append(Mount(
                mount_id=int(parts[0]),
                mountpoint=_unescape(parts[4]),
                options=parts[5],
                fstype=parts[sep + 1],
                source=_unescape(parts[sep + 2]),
                super_options=parts[sep + 3] if len(parts) > sep + 3 else "",
                dev=parts[2],
            ))
        except (ValueError, IndexError):
            continue   # a malformed line says nothing about the mounts we care about
    return mounts


def read_mounts(path: str = "/proc/self/mountinfo") -> list[Mount]:
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return parse_mountinfo(f.read())


def normalise(path: str) -> str:
    # Pure string normalisation: resolving symlinks would touch the filesystem.
    return os.path.normpath("/" + path.lstrip("/")) if path else "/"


class MountTable:
    def __init__(self, mounts: list[Mount], owners: dict[int, int | None] | None = None):
        # Later entries shadow earlier ones on the same mountpoint (stacked mounts).
        self._by_point: dict[str, Mount] = {}
        self._by_id: dict[int, Mount] = {}
        self._by_dev: dict[str, list[Mount]] | None = None    # built on first use
        for m in mounts:
            self._by_point[m.mountpoint] = m
            self._by_id[m.mount_id] = m
        # Owners worked out where the whole table was read (a task's table too large to
        # send whole keeps only some mounts, each with the owner its whole table gave).
        self._owners = owners or {}

    @property
    def count(self) -> int:
        return len(self._by_id)

    @classmethod
    def current(cls) -> "MountTable":
        return cls(read_mounts())

    def __iter__(self):
        return iter(self._by_point.values())

    def user_owner(self, m: Mount) -> int | None:
        """The uid whose own FUSE mount m is, or sits below (root cannot enter those);
        None for the node's own mounts."""
        if m.mount_id in self._owners:
            return self._owners[m.mount_id]
        p = m.mountpoint
        while True:
            holder = self._by_point.get(p)
            if holder is not None and holder.user_fuse:
                return holder.fuse_owner
            if p == "/":
                return None
            p = os.path.dirname(p)

    def user_owned(self, m: Mount) -> bool:
        return self.user_owner(m) is not None

    def by_id(self, mount_id: int) -> Mount | None:
        """The mount with this id (the kernel's mnt_id, as fdinfo gives it), shadowed or not."""
        return self._by_id.get(mount_id)

    def with_dev(self, dev: str) -> list[Mount]:
        """Every mount of the superblock with this device number (bind mounts included),
        by an index: a table of 100,000 mounts answers in one lookup, not a walk."""
        if self._by_dev is None:
            self._by_dev = {}
            for m in self._by_id.values():
                self._by_dev.setdefault(m.dev, []).append(m)
        return list(self._by_dev.get(dev, ()))

    def at(self, mountpoint: str) -> Mount | None:
        """The mount whose mountpoint is exactly this path, if any."""
        return self._by_point.get(normalise(mountpoint))

    def holding(self, path: str) -> Mount | None:
        """The mount that holds path: longest mountpoint that is a prefix of it."""
        p = normalise(path)
        while True:
            m = self._by_point.get(p)
            if m is not None:
                return m
            if p == "/":
                return None
            p = os.path.dirname(p)


def fstype_at(path: str) -> str | None:
    """The filesystem type of the mount found right at `path` (a mountpoint, or the
    probed path itself) now, from mountinfo: nothing is touched. None where unknown: a
    mount that is down at load must not make the configuration unloadable."""
    try:
        table = MountTable.current()
    except OSError:
        return None
    m = table.at(path)
    return m.fstype if m is not None else None
