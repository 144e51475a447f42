"""The local journal: one JSON object per line, on local disk.

Each record is written with a single write() on an O_APPEND descriptor, so lines from
concurrent hooks do not interleave. Strings from users (paths, process names) may hold
bytes that are not UTF-8; they are replaced, so every line stays valid JSON and valid
UTF-8.
"""
from __future__ import annotations

import json
import os


def encode(record: dict) -> bytes:
    line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
    return line.encode("utf-8", "replace") + b"\n"


def append(path: str, record: dict) -> str | None:
    """Append one record; returns an error message instead of raising."""
    data = encode(record)
    try:
        os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as e:
        return f"journal {path}: {e.strerror or e}"
    return None


def read(path: str, limit: int | None = None) -> list[dict]:
    """The last `limit` records (all when None), skipping lines that do not parse."""
    try:
        with open(path, "rb") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    if limit is not None:
        lines = lines[-limit:]
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
