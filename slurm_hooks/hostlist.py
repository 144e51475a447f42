"""Slurm hostlists (`gpu[001-128],dgx[01-04]`, `rack[1-2]-n[01-16]`), in Python.

Expanded here, never by a shell or `scontrol show hostnames`: the configuration is read
by every hook on every node, and must not depend on a Slurm command (or a controller)
to know which settings apply. Zero padding follows Slurm: `[001-128]` gives `001`..`128`.
"""
from __future__ import annotations

import itertools
import re

MAX_HOSTS = 1_000_000
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_NAME = re.compile(r"^[A-Za-z0-9._-]*$")


class HostlistError(ValueError):
    """What is wrong with a hostlist, in words."""


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets."""
    items, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            if depth:
                raise HostlistError("nested '['")
            depth = 1
        elif ch == "]":
            if not depth:
                raise HostlistError("']' without '['")
            depth = 0
        if ch == "," and not depth:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise HostlistError("'[' without ']'")
    items.append("".join(cur))
    return items


def _ranges(body: str) -> list[str]:
    if not body:
        raise HostlistError("empty brackets '[]'")
    out: list[str] = []
    for part in body.split(","):
        m = _RANGE.match(part.strip())
        if not m:
            raise HostlistError(f"bad range {part!r} (want N or N-M, digits only)")
        lo, hi = m.group(1), m.group(2) if m.group(2) is not None else m.group(1)
        if int(hi) < int(lo):
            raise HostlistError(f"range {part!r} runs backwards")
        if int(hi) - int(lo) + 1 > MAX_HOSTS:
            raise HostlistError(f"range {part!r} is too large (more than {MAX_HOSTS} hosts)")
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        out.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
    return out


def _expand_item(item: str) -> list[str]:
    pieces = re.split(r"(\[[^\]]*\])", item)
    choices: list[list[str]] = []
    for piece in pieces:
        if piece.startswith("["):
            choices.append(_ranges(piece[1:-1]))
        else:
            if not _NAME.match(piece):
                raise HostlistError(f"bad character in {piece!r} (host names are letters, digits, '.', '_', '-')")
            choices.append([piece])
    total = 1
    for c in choices:
        total *= len(c)
        if total > MAX_HOSTS:
            raise HostlistError(f"{item!r} names more than {MAX_HOSTS} hosts")
    return ["".join(p) for p in itertools.product(*choices)]


def expand(text: str) -> list[str]:
    """Every host name `text` names, in order, without repeats."""
    if not isinstance(text, str) or not text.strip():
        raise HostlistError("empty hostlist")
    seen: dict[str, None] = {}
    for item in _split_top(text.strip()):
        item = item.strip()
        if not item:
            raise HostlistError("empty item (two commas in a row, or a trailing comma)")
        for host in _expand_item(item):
            seen[host] = None
            if len(seen) > MAX_HOSTS:
                raise HostlistError(f"names more than {MAX_HOSTS} hosts")
    return list(seen)
