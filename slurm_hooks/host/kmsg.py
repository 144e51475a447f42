"""The kernel log, read from /dev/kmsg without ever blocking.

Opened with O_NONBLOCK, /dev/kmsg returns one record per read(), `prio,seq,usec,flags;text`,
until EAGAIN. EPIPE means older records were overwritten before we read them; reading
simply goes on. `seq` is the position: a reader that wants "what is new since the last
run" keeps the last seq it saw (with the boot id, since seq restarts at boot).

What the log means is data, not code: MATCHERS is a table of (event, pattern, what it
means, a real line), tested against its own sample lines.

Users can put text into kernel records: the segfault line ends with the name of the file
mapped at the crash address, and a program can write to /dev/kmsg. So a matcher only
sees records of the kernel facility (userspace writes are forced to another facility by
the kernel), and matches at the start of the message, never in the middle: a forged
`NVRM: Xid ...` file name sits after `segfault at ... in `.

A regular file of records, one `prio,seq,usec,flags;text` per line, reads the same way
(the `kernel_log` setting): for replaying a log captured on another machine.
"""
from __future__ import annotations

import errno
import os
import stat

from ..core import lazyre
from ..core.records import dataclass

KMSG = "/dev/kmsg"


@dataclass(frozen=True)
class Record:
    seq: int
    usec: int          # microseconds since boot (CLOCK_MONOTONIC-like)
    prio: int          # the level, 0 (emerg) to 7 (debug)
    text: str
    facility: int = 0  # 0: the kernel itself; userspace writes are 1 (user) or more

    @property
    def from_kernel(self) -> bool:
        return self.facility == 0


@dataclass(frozen=True)
class Matcher:
    event: str
    # The literal start every message it matches has: a record is tried against the
    # pattern only when its text starts so, so a healthy node's log of thousands of
    # records compiles no pattern and imports no `re` (lazyre).
    start: str
    pattern: lazyre.LazyPattern
    meaning: str
    sample: str


MATCHERS = [
    Matcher("hung_task", "INFO: task ",
            lazyre.compile(r"INFO: task (?P<comm>.+?):(?P<pid>\d+) blocked for more than (?P<seconds>\d+) seconds"),
            "the kernel's hung-task detector saw this task in uninterruptible sleep",
            "INFO: task python:280058 blocked for more than 122 seconds."),
    Matcher("xid", "NVRM: Xid (",
            lazyre.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
                           r"\): "
                           r"(?P<xid>\d+)(?:, pid=(?P<pid>\d+|'?<unknown>'?))?(?:, name=(?P<name>[^,]*))?,?\s*(?P<msg>.*)"),
            "the NVIDIA driver reports an Xid event for the GPU at this PCI address (host/xid.py classifies it)",
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."),
    # The same on a MIG GPU: the driver names the GPU instance after the bus id.
    Matcher("xid", "NVRM: Xid (",
            lazyre.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
                           r" GPU-I:(?P<gi>\d+)\): "
                           r"(?P<xid>\d+)(?:, pid=(?P<pid>\d+|'?<unknown>'?))?(?:, name=(?P<name>[^,]*))?,?\s*(?P<msg>.*)"),
            "an Xid event on a MIG GPU, naming the GPU instance (GPU-I) it happened in",
            "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=2407, name=python3, Contained: SM (0x1). RST: No, D-RST: No"),
]


def parse_record(raw: bytes) -> Record | None:
    head, sep, body = raw.partition(b";")
    if not sep:
        return None
    parts = head.split(b",")
    try:
        prio, seq, usec = int(parts[0]), int(parts[1]), int(parts[2])
    except (IndexError, ValueError):
        return None
    # Continuation lines (" KEY=value") follow the message after a newline.
    text = body.split(b"\n", 1)[0].decode("utf-8", "replace")
    return Record(seq=seq, usec=usec, prio=prio & 7, text=text, facility=prio >> 3)


# A captured log file is read up to this size (the kernel's own buffer is far smaller).
FILE_LIMIT = 64 << 20


def read(after_seq: int = -1, path: str = KMSG, limit: int = 100000) -> list[Record]:
    """Every record with seq > after_seq still in the kernel's buffer (or the file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return []
    out = []
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return _read_file(fd, after_seq, limit)
        for _ in range(limit):
            try:
                raw = os.read(fd, 16384)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:     # overwritten records: skip ahead
                    continue
                break
            if not raw:
                break
            rec = parse_record(raw)
            if rec is not None and rec.seq > after_seq:
                out.append(rec)
    finally:
        os.close(fd)
    return out


def _read_file(fd: int, after_seq: int, limit: int) -> list[Record]:
    data = b""
    while len(data) < FILE_LIMIT:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        data += chunk
    out = []
    for line in data.split(b"\n"):
        rec = parse_record(line)
        if rec is not None and rec.seq > after_seq:
            out.append(rec)
            if len(out) >= limit:
                break
    return out


def match(records: list[Record], event: str):
    """(record, match) for every kernel record that a matcher of `event` recognises at
    the start of its message."""
    matchers = [m for m in MATCHERS if m.event == event]
    for rec in records:
        if not rec.from_kernel:
            continue
        for m in matchers:
            if not rec.text.startswith(m.start):
                continue
            found = m.pattern.match(rec.text)
            if found:
                yield rec, found
