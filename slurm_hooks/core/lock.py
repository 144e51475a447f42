"""One instance at a time per hook type on a node.

An flock() on a local file: the kernel drops it when the holder exits however it
exits, so a crashed run never leaves a stale lock. Probe children close every
inherited descriptor, so a probe stuck in the kernel does not hold the lock either.
"""
from __future__ import annotations

import fcntl
import os
import time

from .errors import LocalError


class Busy(Exception):
    """Another instance holds the lock; str() says which."""


class LockError(LocalError):
    """The lock file cannot be used at all (its directory is missing or read-only):
    our own local failure. The run goes on without it and reports it."""


class HookLock:
    def __init__(self, path: str, timeout: float):
        self.path = path
        self.timeout = timeout
        self.fd = -1

    def __enter__(self) -> "HookLock":
        try:
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise LockError(f"lock {self.path}: {e.strerror or e}; running without it") from None
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "?"
                    os.close(self.fd)
                    self.fd = -1
                    raise Busy(f"another run (pid {holder}) still holds {self.path} after "
                               f"{self.timeout:g}s") from None
                time.sleep(0.05)
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass          # the lock holds; only the holder's pid for the next message is lost
        return self

    def __exit__(self, *exc) -> None:
        if self.fd >= 0:
            os.close(self.fd)       # releases the lock
            self.fd = -1
