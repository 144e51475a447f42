"""Filesystem check: does each path a node depends on still answer?

A buffered write() succeeds against a dead server (it only fills the page cache), so
the write probe creates a file, writes a payload, fsyncs it (the round trip that
reaches the server), drops the cached pages, reads it back, compares and unlinks.
Each step is reported to the parent before it starts, so a hang names the step that
hung: "create" points at the metadata server, "fsync" at the data path.

The parent only reads /proc/self/mountinfo: it finds the mount holding each path by
string prefix and never stats the path itself. Everything that touches the path runs
in a hang-safe child (runner.py).

Verdicts: ok, slow (succeeded above warn_after), hung (deadline), error (with the
errno name), missing (the mount that should be there is not).
"""
from __future__ import annotations

import errno
import os
import time

from .. import config as cfgmod
from ..model import FAIL, OK, WARN, Finding
from ..mounts import normalise
from ..records import dataclass
from ..runner import DONE, HUNG, STILL_HUNG, Task

NAME = "filesystem"
DEFAULT_LOCAL = ("/tmp", "/dev/shm")


@dataclass
class Target:
    path: str
    mode: str
    timeout: float
    warn_after: float
    payload: int
    required: bool
    mountpoint: str | None
    fstype: str | None
    origin: str              # "configured" or why a default was chosen


def targets(cfg, mounts) -> list[Target]:
    d = cfg.filesystem_defaults
    if cfg.filesystems:
        return [Target(path=normalise(fs.path), mode=fs.mode,
                       timeout=cfgmod.fs_timeout(cfg, fs), warn_after=cfgmod.fs_warn_after(cfg, fs),
                       payload=cfgmod.fs_payload(cfg, fs), required=fs.required,
                       mountpoint=fs.mountpoint, fstype=fs.fstype, origin="configured")
                for fs in cfg.filesystems]
    out = [Target(path=p, mode="write", timeout=d.timeout, warn_after=d.warn_after,
                  payload=d.payload_bytes, required=True, mountpoint=None, fstype=None,
                  origin="default: local scratch")
           for p in DEFAULT_LOCAL if mounts.holding(p) is not None]
    if d.discover_network_mounts:
        for m in mounts:
            # Only the node's own mounts: a user's FUSE mount (fusermount3) is theirs to
            # break, and root gets EACCES there anyway.
            if m.is_network and not mounts.user_owned(m):
                out.append(Target(path=m.mountpoint, mode="read", timeout=d.timeout,
                                  warn_after=d.warn_after, payload=d.payload_bytes, required=True,
                                  mountpoint=m.mountpoint, fstype=None,
                                  origin=f"default: {m.fstype} mount found in the mount table"))
    return out


# --- what runs in the child -----------------------------------------------------------
def _oserror(step: str, e: OSError) -> dict:
    name = errno.errorcode.get(e.errno, str(e.errno))
    return {"ok": False, "step": step, "errno": name, "message": e.strerror or str(e)}


def probe_write(progress, directory: str, size: int, node: str) -> dict:
    token = os.urandom(6).hex()
    path = os.path.join(directory, f".slurm-hooks-probe.{node}.{os.getpid()}.{token}")
    payload = (token.encode() * (size // len(token) + 1))[:size]
    steps: dict[str, float] = {}
    created = False
    fd = -1
    step = "create"
    t_all = time.monotonic()
    try:
        t = time.monotonic(); progress(step)
        # A new file of our own with a random name: never follows or reuses what a user
        # may have placed in a shared directory. The read-back uses the same descriptor,
        # so a name swapped in between cannot redirect it.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        created = True
        steps[step] = time.monotonic() - t
        step = "write"; t = time.monotonic(); progress(step)
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
        steps[step] = time.monotonic() - t
        step = "fsync"; t = time.monotonic(); progress(step)
        os.fsync(fd)
        steps[step] = time.monotonic() - t
        step = "read"; t = time.monotonic(); progress(step)
        try:
            # Drop our own cached copy so the read has a chance to go to the server.
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass
        chunks, got = [], 0
        while got < size:
            chunk = os.pread(fd, size - got, got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        steps[step] = time.monotonic() - t
        if b"".join(chunks) != payload:
            return {"ok": False, "step": "read", "errno": "mismatch",
                    "message": f"read back {got} bytes that differ from the {size} written"}
        os.close(fd)
        fd = -1
        step = "unlink"; t = time.monotonic(); progress(step)
        os.unlink(path)
        created = False
        steps[step] = time.monotonic() - t
    except OSError as e:
        return _oserror(step, e)
    finally:
        if fd >= 0:
            os.close(fd)
        if created:
            try:
                os.unlink(path)
            except OSError:
                pass
    return {"ok": True, "latency": time.monotonic() - t_all, "steps": steps}


def probe_read(progress, directory: str) -> dict:
    steps: dict[str, float] = {}
    step = "statfs"
    t_all = time.monotonic()
    try:
        t = time.monotonic(); progress(step)
        os.statvfs(directory)
        steps[step] = time.monotonic() - t
        step = "readdir"; t = time.monotonic(); progress(step)
        with os.scandir(directory) as it:
            for _ in it:
                break
        steps[step] = time.monotonic() - t
    except OSError as e:
        return _oserror(step, e)
    return {"ok": True, "latency": time.monotonic() - t_all, "steps": steps}


# --- the check -----------------------------------------------------------------------
class FilesystemCheck:
    name = NAME

    def __init__(self):
        self._targets: list[Target] = []
        self._problems: dict[str, Finding] = {}

    @staticmethod
    def key(path: str) -> str:
        return f"{NAME}:{path}"

    def tasks(self, ctx) -> list[Task]:
        mounts = ctx.mounts
        self._targets = targets(ctx.config, mounts)
        if ctx.fs_timeout is not None:
            for t in self._targets:
                t.timeout = min(t.timeout, ctx.fs_timeout)
                t.warn_after = min(t.warn_after, t.timeout)
        if not ctx.config.filesystems:
            ctx.notes.append(_default_note(self._targets))
        tasks = []
        for t in self._targets:
            problem = self._mount_problem(t, mounts)
            if problem:
                self._problems[t.path] = problem
                continue
            if t.mode == "write":
                task = Task(self.key(t.path), probe_write, (t.path, t.payload, ctx.node), t.timeout)
            else:
                task = Task(self.key(t.path), probe_read, (t.path,), t.timeout)
            tasks.append(task)
        return tasks

    def _mount_problem(self, t: Target, mounts) -> Finding | None:
        if t.mountpoint:
            m = mounts.at(t.mountpoint)
            if m is None:
                want = f", expected {t.fstype}" if t.fstype else ""
                return self._finding(t, "missing", f"fs {t.path} not mounted ({t.mountpoint} absent{want})",
                                     detail=f"{t.mountpoint} is not in /proc/self/mountinfo",
                                     evidence={"mountpoint": t.mountpoint})
        else:
            m = mounts.holding(t.path)
        if t.fstype and m is not None and m.fstype != t.fstype:
            return self._finding(t, "missing",
                                 f"fs {t.path} on {m.fstype} {m.mountpoint}, expected {t.fstype}",
                                 detail="the expected filesystem is not mounted there",
                                 evidence={"mountpoint": m.mountpoint, "fstype": m.fstype})
        return None

    def _finding(self, t: Target, status: str, summary: str, detail: str = "",
                 evidence: dict | None = None) -> Finding:
        if status == "ok":
            severity = OK
        elif status == "slow" or not t.required:
            severity = WARN
        else:
            severity = FAIL
        ev = {"mode": t.mode, "origin": t.origin, "timeout": t.timeout}
        ev.update(evidence or {})
        return Finding(check=NAME, target=t.path, status=status, severity=severity,
                       summary=summary, detail=detail, evidence=ev)

    def findings(self, ctx, outcomes) -> list[Finding]:
        out = []
        for t in self._targets:
            if t.path in self._problems:
                out.append(self._problems[t.path])
                continue
            m = ctx.mounts.at(t.mountpoint) if t.mountpoint else ctx.mounts.holding(t.path)
            fstype = m.fstype if m else "?"
            where = {"mountpoint": m.mountpoint if m else None, "fstype": fstype}
            o = outcomes[self.key(t.path)]
            out.append(self._verdict(t, o, fstype, where))
        return out

    def _verdict(self, t: Target, o, fstype: str, where: dict) -> Finding:
        ev = dict(where, pid=o.pid, elapsed=round(o.elapsed, 6))
        if o.status in (HUNG, STILL_HUNG):
            step = o.step or t.mode
            ev.update(step=step, since=o.since)
            detail = o.error
            if o.status == STILL_HUNG:
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(o.since))
                detail = f"still hung since {stamp} (probe pid {o.pid} stuck in the kernel)"
            return self._finding(t, "hung", f"fs {t.path} {step} hung >{t.timeout:g}s ({fstype})",
                                 detail=detail, evidence=ev)
        if o.status != DONE:
            return self._finding(t, "error", f"fs {t.path} probe failed ({fstype})",
                                 detail=o.error, evidence=ev)
        v = o.value
        if not v.get("ok"):
            ev.update(step=v["step"], errno=v["errno"])
            return self._finding(t, "error", f"fs {t.path} {v['step']} failed {v['errno']} ({fstype})",
                                 detail=v.get("message", ""), evidence=ev)
        latency = float(v["latency"])
        ev.update(latency=round(latency, 6), steps=v.get("steps", {}))
        if latency > t.warn_after:
            return self._finding(t, "slow", f"fs {t.path} slow {latency:.1f}s > {t.warn_after:g}s ({fstype})",
                                 detail=_steps(v), evidence=ev)
        return self._finding(t, "ok", f"fs {t.path} ok {latency * 1000:.1f}ms ({fstype})",
                             detail=_steps(v), evidence=ev)


def _default_note(chosen: list[Target]) -> str:
    local = [t.path for t in chosen if t.mode == "write"]
    remote = [t.path for t in chosen if t.mode == "read"]
    return ("no filesystems configured: probing local scratch " + (", ".join(local) or "(none)")
            + " (write) and network mounts from the mount table: " + (", ".join(remote) or "none found")
            + " (read). List the paths this node depends on under `filesystems:`.")


def _steps(v: dict) -> str:
    return ", ".join(f"{k} {s * 1000:.1f}ms" for k, s in v.get("steps", {}).items())


CHECK = FilesystemCheck
