"""The local journal: one JSON object per line, on local disk, rotated by size.

Each record is written with a single write() on an O_APPEND descriptor, under an
flock so a rotation and an append by concurrent hooks cannot interleave. Strings from
users (paths, process names) may hold bytes that are not UTF-8; they are replaced, so
every line stays valid JSON and valid UTF-8.

Events: one "run" line per run (every finding and action in full), and one "action"
line per action taken or attempted, so `grep '"event":"action"'` lists what was done.
"""
from __future__ import annotations

import fcntl
import json
import os


def encode(record: dict) -> bytes:
    line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
    return line.encode("utf-8", "replace") + b"\n"


def append(path: str, *records: dict, max_bytes: int = 10 << 20, keep: int = 5) -> str | None:
    """Append records; returns an error message instead of raising."""
    data = b"".join(encode(r) for r in records)
    try:
        os.makedirs(os.path.dirname(path) or ".", mode=0o750, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_size + len(data) > max_bytes and os.path.exists(path):
                os.close(fd)
                _rotate(path, keep)
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
                fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as e:
        return f"journal {path}: {e.strerror or e}"
    return None


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
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
