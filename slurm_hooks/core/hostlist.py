"""Slurm hostlists ("n[1-3,7],gpu[001-002]-ib") expanded in Python: no `scontrol show
hostnames` call, no shell."""
from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
LIMIT = 1 << 16          # names one expression may stand for


def natural_key(name: str) -> list:
    """Sort key of a node name in the order people count: n2 before n10."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


class HostlistError(ValueError):
    pass


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    out, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in {text!r}")
        elif c == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"unbalanced '[' in {text!r}")
    out.append(text[start:])
    return [p for p in (x.strip() for x in out) if p]


def _expand_one(name: str) -> list[str]:
    m = re.search(r"\[([^\[\]]*)\]", name)
    if m is None:
        return [name]
    head, tail = name[:m.start()], name[m.end():]
    values: list[str] = []
    for part in m.group(1).split(","):
        r = _RANGE.match(part.strip())
        if r is None:
            raise HostlistError(f"bad range {part!r} in {name!r}")
        lo, hi = r.group(1), r.group(2) or r.group(1)
        if int(hi) < int(lo):
            raise HostlistError(f"range {part!r} runs backwards in {name!r}")
        if int(hi) - int(lo) > LIMIT:
            raise HostlistError(f"range {part!r} in {name!r} is too large")
        width = len(lo) if lo.startswith("0") else 0
        values.extend(f"{n:0{width}d}" for n in range(int(lo), int(hi) + 1))
    out = []
    for v in values:
        out.extend(_expand_one(head + v + tail))
        if len(out) > LIMIT:
            raise HostlistError(f"{name!r} stands for more than {LIMIT} names")
    return out


def expand(hostlist: str) -> list[str]:
    """Every name a Slurm hostlist stands for, in order."""
    out: list[str] = []
    for part in _split_top(hostlist or ""):
        out.extend(_expand_one(part))
    return out


def contains(hostlist: str, name: str) -> bool:
    try:
        return name in expand(hostlist)
    except HostlistError:
        return False
