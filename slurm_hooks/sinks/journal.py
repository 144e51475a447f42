"""The local journal: one JSON object per line, on local disk, rotated by size.

Each record is written with a single write() on an O_APPEND descriptor. The prolog,
epilog and health check of a node append at the same time, so every append holds an
flock on a separate lock file (JOURNAL.lock) and opens the journal only once it holds
it: a rotation then happens under the same lock, and nobody is left writing into a
file that was just rotated away (or dropped at the end of the rotation). Should the
lock not come within LOCK_WAIT (a holder stuck on a sick disk), the record is appended
without rotating: late rotation loses nothing, a lost record would. Strings from
users (paths, process names) may hold bytes that are not UTF-8; they are replaced, so
every line stays valid JSON and valid UTF-8.

Events: one "run" line per run (every finding and action in full), and one "action"
line per action taken or attempted, so `grep '"event":"action"'` lists what was done.
"""
from __future__ import annotations

import fcntl
import os
import time

from ..core import jsonio


def encode(record: dict) -> bytes:
    line = jsonio.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
    return line.encode("utf-8", "replace") + b"\n"


LOCK_WAIT = 2.0


def append(path: str, *records: dict, max_bytes: int = 10 << 20, keep: int = 5) -> str | None:
    """Append records; returns an error message instead of raising."""
    data = b"".join(encode(r) for r in records)
    lfd = fd = -1
    try:
        os.makedirs(os.path.dirname(path) or ".", mode=0o750, exist_ok=True)
        lfd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        locked = _lock(lfd)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        size = os.fstat(fd).st_size
        if locked and size and size + len(data) > max_bytes:
            os.close(fd)
            fd = -1
            _rotate(path, keep)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        os.write(fd, data)
    except OSError as e:
        return f"journal {path}: {e.strerror or e}"
    finally:
        if fd >= 0:
            os.close(fd)
        if lfd >= 0:
            os.close(lfd)           # and with it the lock
    return None


def _lock(fd: int) -> bool:
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)


def _rotate(path: str, keep: int) -> None:
    for i in range(keep - 1, 0, -1):
        if os.path.exists(f"{path}.{i}"):
            os.replace(f"{path}.{i}", f"{path}.{i + 1}")
    os.replace(path, f"{path}.1")


def read(path: str, limit: int | None = None, rotated: bool = True) -> list[dict]:
    """The last `limit` records (all when None), oldest first, across rotated files;
    lines that do not parse are skipped."""
    files = [path]
    if rotated:
        i = 1
        while os.path.exists(f"{path}.{i}"):
            files.insert(0, f"{path}.{i}")
            i += 1
    lines: list[bytes] = []
    for name in files:
        try:
            with open(name, "rb") as f:
                lines.extend(f.read().splitlines())
        except OSError:
            continue
    if limit is not None:
        lines = lines[-limit:]
    out = []
    for line in lines:
        try:
            out.append(jsonio.loads(line))
        except ValueError:
            continue
    return out
