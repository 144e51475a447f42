"""Small JSON state files on local disk, written atomically.

State lives under /var/lib or /run, never on a filesystem we probe. A file that cannot
be parsed (a crash mid-edit on an old version, a hand edit, a foreign file) is set aside
under a new name with a warning and the state starts afresh: a health check that
crashes on its own state would stop protecting the node.
"""
from __future__ import annotations

import os
import time

from . import jsonio


class StateStore:
    def __init__(self, directory: str):
        self.directory = directory
        self.warnings: list[str] = []
        self._made = False

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name + ".json")

    def _ensure_dir(self) -> None:
        if not self._made:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            self._made = True

    def load(self, name: str, expect: type = dict):
        path = self.path(name)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return expect()
        try:
            value = jsonio.loads(data)
            if not isinstance(value, expect):
                raise ValueError(f"expected a JSON {expect.__name__}, got {type(value).__name__}")
            return value
        except ValueError as e:
            aside = f"{path}.corrupt-{int(time.time())}"
            try:
                os.replace(path, aside)
                where = f"moved to {aside}"
            except OSError as e2:
                where = f"could not move it aside: {e2}"
            self.warnings.append(f"state file {path} unreadable ({e}); {where}; starting afresh")
            return expect()

    def save(self, name: str, value, durable: bool = True) -> None:
        """Atomically replace the file; durable=False skips the fsync, for state that
        may be lost in a crash without harm (metrics)."""
        self._ensure_dir()
        path = self.path(name)
        tmp = f"{path}.tmp.{os.getpid()}"
        data = jsonio.dumps(value, sort_keys=True, separators=(",", ":")).encode()
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
