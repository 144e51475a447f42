"""One concise line per run and per action to syslog (and so to journald).

Written straight to the syslog socket (a datagram per line, RFC 3164 framing), never
blocking: a missing or full socket loses the line, never the run.
"""
from __future__ import annotations

import os

from .. import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core.model import RunRecord

FACILITIES = {"user": 1, "daemon": 3, **{f"local{i}": 16 + i for i in range(8)}}
ERR, WARNING, NOTICE, INFO, DEBUG = 3, 4, 5, 6, 7


def send(lines: list[tuple[int, str]], socket_path: str = "/dev/log", facility: str = "daemon") -> None:
    if not lines:
        return
    import socket

    from ..core.reason import one_line
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    except OSError:
        return
    try:
        s.setblocking(False)
        for severity, text in lines:
            pri = FACILITIES.get(facility, 3) * 8 + severity
            msg = f"<{pri}>slurm-hooks[{os.getpid()}]: {one_line(text)}"
            try:
                s.sendto(msg.encode("utf-8", "replace")[:8192], socket_path)
            except OSError:
                return
    finally:
        s.close()


def lines_for(record: RunRecord) -> list[tuple[int, str]]:
    """The syslog lines of a run: its verdict, then each action."""
    from ..core.outcomes import Outcome, result_word
    bad = [f for f in record.findings if f.severity != "ok"]
    severity = {"healthy": INFO, "warning": WARNING, "unhealthy": WARNING}[record.status]
    what = "; ".join(f.summary for f in bad[:5]) or "all checks passed"
    job = f" job {record.job}" if record.job else ""
    out = [(severity, f"{record.hook} {record.node}{job} {record.status}: {what}")]
    for r in record.actions:
        level = ERR if r.outcome == Outcome.FAILED else (WARNING if r.outcome == Outcome.HELD else NOTICE)
        word = result_word(r.outcome, r.retry)     # the report's and the journal's word
        out.append((level, f"{word}: {r.action.describe()}" + (f" ({r.message})" if r.message else "")))
    return out
