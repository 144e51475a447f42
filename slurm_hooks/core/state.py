"""Small JSON state files on local disk, written atomically.

State lives under /var/lib or /run, never on a filesystem we probe. A file that cannot
be parsed (a crash mid-edit on an old version, a hand edit, a foreign file) is set aside
under a new name with a warning and the state starts afresh: a health check that
crashes on its own state would stop protecting the node.

A staged store (`staged=True`) is what a run hands its checks and its policy: reads see
what the run has saved so far, but nothing reaches the disk until `commit()`. The
engine commits only for a real health check, prolog or epilog; `slurm-hooks check` and
every `--dry-run` look at the node and change nothing (not the kernel-log cursor, not
the hysteresis counts, not a file set aside).
"""
from __future__ import annotations

import errno
import os
import time

from .. import TYPE_CHECKING
from . import jsonio
from .errors import LocalError

if TYPE_CHECKING:
    from typing import Any, Optional

    from .config import Config


class StateError(LocalError):
    """Local state could not be read or written (a full, read-only or missing disk)."""

    def __init__(self, message: str, denied: bool = False):
        super().__init__(message)
        self.denied = denied                # permission: another user's state


class StateStore:
    def __init__(self, directory: str, staged: bool = False):
        self.directory = directory
        self.staged = staged
        self.warnings: list[str] = []
        self.errors: list[str] = []      # our own local failures (core/errors.py): reported, never raised
        self.notes: list[str] = []       # what a look by a non-root user cannot read (root's state): no failure
        self._made = False
        self._pending: dict[str, Optional[tuple[bytes, bool]]] = {}   # name -> (data, durable); None: delete
        self._corrupt: list[str] = []

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name + ".json")

    def _ensure_dir(self) -> None:
        if not self._made:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            self._made = True

    def exists(self, name: str) -> bool:
        if name in self._pending:
            return self._pending[name] is not None
        return os.path.exists(self.path(name))

    def load(self, name: str, expect: type = dict) -> Any:
        path = self.path(name)
        if name in self._pending:
            staged = self._pending[name]
            return expect() if staged is None else jsonio.loads(staged[0])
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return expect()
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EPERM) and os.geteuid() != 0:
                # A look (check, --dry-run) by a user other than root: root's state is
                # root's; said once, not a failure of the node.
                self._root_only()
                return expect()
            self._failed(f"state file {path} not readable: {e.strerror or e}; starting afresh")
            return expect()
        try:
            value = jsonio.loads(data)
            if not isinstance(value, expect):
                raise ValueError(f"expected a JSON {expect.__name__}, got {type(value).__name__}")
            return value
        except ValueError as e:
            if self.staged:
                self._corrupt.append(path)
                self.warnings.append(f"state file {path} unreadable ({e}); starting afresh")
                return expect()
            self.warnings.append(f"state file {path} unreadable ({e}); {self._set_aside(path)}; starting afresh")
            return expect()

    @staticmethod
    def _set_aside(path: str) -> str:
        aside = f"{path}.corrupt-{int(time.time())}"
        try:
            os.replace(path, aside)
            return f"moved to {aside}"
        except OSError as e2:
            return f"could not move it aside: {e2}"

    def _failed(self, message: str) -> None:
        if message not in self.errors:
            self.errors.append(message)

    def save(self, name: str, value: Any, durable: bool = True) -> bool:
        """Atomically replace the file; durable=False skips the fsync, for state that
        may be lost in a crash without harm (metrics). Staged: kept until commit().
        False when it could not be written (the reason is in `errors`)."""
        data = jsonio.dumps(value, sort_keys=True, separators=(",", ":")).encode()
        if self.staged:
            self._pending[name] = (data, durable)
            return True
        return self._guarded(self._write, name, data, durable)

    def delete(self, name: str) -> bool:
        if self.staged:
            self._pending[name] = None
            return True
        return self._guarded(self._unlink, name)

    def commit(self) -> bool:
        """Write what was staged (a real run's decisions); False if any of it failed."""
        for path in self._corrupt:
            if os.path.exists(path):
                self._set_aside(path)
        self._corrupt = []
        pending, self._pending = self._pending, {}
        ok = True
        for name, staged in pending.items():
            if staged is None:
                ok = self._guarded(self._unlink, name) and ok
            else:
                ok = self._guarded(self._write, name, *staged) and ok
        return ok

    def _guarded(self, op, *args) -> bool:
        try:
            op(*args)
            return True
        except StateError as e:
            if e.denied and os.geteuid() != 0:
                self._root_only()           # a look by another user: root's state is root's
            else:
                self._failed(str(e))
            return False

    def _root_only(self) -> None:
        note = f"slurm-hooks' state ({self.directory}) is root's: this look as uid {os.geteuid()} runs without it"
        if note not in self.notes:
            self.notes.append(note)

    def _unlink(self, name: str) -> None:
        try:
            os.unlink(self.path(name))
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StateError(f"state file {self.path(name)} not removed: {e.strerror or e}",
                             denied=e.errno in (errno.EACCES, errno.EPERM)) from None

    def _write(self, name: str, data: bytes, durable: bool) -> None:
        path = self.path(name)
        tmp = f"{path}.tmp.{os.getpid()}"
        try:
            self._ensure_dir()
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise StateError(f"state file {path} not written: {e.strerror or e}",
                             denied=e.errno in (errno.EACCES, errno.EPERM)) from None


def state_dir(cfg: Config, node: str) -> str:
    # One directory per node name: several slurmd (-N) on one host keep apart.
    return os.path.join(cfg.state_dir, node)
