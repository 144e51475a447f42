"""Open a file only root can have put there, verified from `/` down.

A program root runs (a site check) is root's only if no one else could have changed
what its path leads to: every directory from `/` down, the file itself and each link on
the way. Checking the last directory alone leaves a user who owns a directory higher up
free to rename it between the check and the exec. So the walk:

- starts at `/` and opens one component at a time relative to the directory before
  (openat with O_PATH|O_NOFOLLOW), so no name is looked up twice;
- requires of every directory and of the file: owner root, no write bit for group or
  others (a sticky, world-writable /tmp is not root's alone: anyone can put a name in
  it), and a filesystem whose owner is not a user (a user's FUSE server says what it
  likes about who owns its files);
- resolves a symbolic link by hand (readlinkat in the directory verified so far) and
  goes on with its target, from `/` for an absolute one; a link inside a directory
  only root can write only root can have made;
- ends with the file opened without following links (O_NOFOLLOW), the descriptor the
  caller executes (fexecve), so what was verified is what runs.

It reads the filesystem, which may hang: call it only in a runner child.
"""
from __future__ import annotations

import os
import stat

from .mounts import MountTable

MAX_LINKS = 40                     # the kernel's own limit (ELOOP)


class Untrusted(Exception):
    """Why a path is not root's alone; the message names the component."""


def unsafe(st: os.stat_result) -> str:
    """Why a file or directory with this status is not root's alone, or ""."""
    if st.st_uid != 0:
        return f"owned by uid {st.st_uid}"
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_IWOTH:
        return f"world-writable (mode {mode:04o})"
    if mode & stat.S_IWGRP:
        # Even group root: a member added to it later is not root. A POSIX ACL that
        # lets anyone else write shows here too (its mask is the group bits).
        return f"group-writable (mode {mode:04o})"
    return ""


class _Walk:
    def __init__(self, mounts: MountTable | None):
        self.mounts = mounts
        self.user_devs: dict[int, int] = {}

    def check(self, fd: int, shown: str) -> os.stat_result:
        st = os.fstat(fd)
        why = unsafe(st)
        if not why:
            owner = self._fuse_owner(st.st_dev)
            if owner is not None:
                why = f"on a FUSE mount of uid {owner} (its server says who owns its files)"
        if why:
            raise Untrusted(f"{shown} is {why}")
        return st

    def _fuse_owner(self, dev: int) -> int | None:
        if self.mounts is None:
            self.mounts = MountTable.current()
            for m in self.mounts:
                if m.user_fuse:
                    major, _, minor = m.dev.partition(":")
                    try:
                        self.user_devs[os.makedev(int(major), int(minor))] = m.fuse_owner or -1
                    except ValueError:
                        continue
        return self.user_devs.get(dev)


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p and p != "."]


def open_root_only(path: str, directory: bool = False, mounts: MountTable | None = None) -> tuple[int, os.stat_result]:
    """(descriptor, status) of `path` (absolute), opened O_RDONLY|O_NOFOLLOW|O_CLOEXEC
    (O_DIRECTORY with `directory`) once every component from `/` and every link's
    target is root's alone. Raises Untrusted naming the first component that is not,
    FileNotFoundError (and other OSErrors) as the walk meets them."""
    if not path.startswith("/"):
        raise Untrusted(f"{path}: not an absolute path")
    walk = _Walk(mounts)
    root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    stack: list[tuple[int, str]] = [(root, "/")]     # verified directories, the last is the current
    try:
        walk.check(root, "/")
        pending = _parts(path)
        links = 0
        while pending:
            name = pending.pop(0)
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop()[0])
                continue
            parent, parent_shown = stack[-1]
            shown = parent_shown.rstrip("/") + "/" + name
            fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                os.close(fd)
                links += 1
                if links > MAX_LINKS:
                    raise Untrusted(f"{shown}: more than {MAX_LINKS} symbolic links")
                target = os.readlink(name, dir_fd=parent)
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop()[0])
                pending = _parts(target) + pending
                continue
            stack.append((fd, shown))
            st = walk.check(fd, shown)
            if pending and not stat.S_ISDIR(st.st_mode):
                raise Untrusted(f"{shown}: not a directory")
        last, shown = stack[-1]
        st = os.fstat(last)
        if directory and not stat.S_ISDIR(st.st_mode):
            raise Untrusted(f"{shown}: not a directory")
        # The O_PATH descriptor becomes one that reads and executes: reopened through
        # its /proc link, the same inode whatever its name has become since.
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
        if directory:
            flags |= os.O_DIRECTORY
        elif not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"{shown}: not a regular file")
        fd = os.open(f"/proc/self/fd/{last}", flags)
        st2 = os.fstat(fd)
        if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)
            raise Untrusted(f"{shown}: changed while it was opened")
        os.set_blocking(fd, True)
        return fd, st2
    finally:
        for fd, _ in stack:
            os.close(fd)
