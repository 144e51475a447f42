"""Recovery without a reboot: free the tasks stuck on a hung mount the kernel's own way.

Only a reboot clears a task stuck for good in D, unless the filesystem it waits on
offers a way to fail its pending requests:

- FUSE: writing 1 to /sys/fs/fuse/connections/N/abort (fusectl) fails every request
  of the connection; its callers wake with ENOTCONN and can die. N is the kernel's
  dev_t of the mount's superblock (waits.fusectl_name: the minor for `fuse`, not for
  `fuseblk`), from mountinfo: the mount itself is never touched.
- NFS: `umount -f` fails the pending RPCs of a hard mount with EIO.
- Anything else (Lustre eviction, GPFS): the site's own command.
- A dead mount (its client gone: every call fails at once with ENOTCONN or ESTALE) has
  nothing waiting on it: it is only detached and mounted again.

Then the dead mount is detached (`umount -l`) and brought back (`remount`, or autofs or
a systemd mount unit), and the filesystem's own probe must pass. Each step runs in a
hang-safe child with a deadline (host/runner.py); the stuck tasks are polled by pid and start
time in /proc, never waited for. A recovery that leaves a task alive, or a mount that
does not come back healthy, says so: the reboot follows, saying recovery was tried.
A task that lives on after the abort is freed all the same once it no longer waits (no
longer in D): what its job does with the failed call is the job's.

decide/mount_incident.py decides when (`recoveries`, `govern`): a mount proven hung, found by the proven
device, never a user's own, once per incident, on a node we drained, never in `check`
or `--dry-run`. Just before acting, one reading of the mount table must show that same
device at the mount point, the node's: anything else is refused, saying why.
"""
from __future__ import annotations

import os
import time

from .. import TYPE_CHECKING
from ..core.records import dataclass, field
from ..host import procfs
from ..host.fusectl import FUSECTL
from ..host.runner import DONE, Runner, Task

if TYPE_CHECKING:
    from ..core.model import Recovery
    from ..host.mounts import Mount

UMOUNT = ("/usr/bin/umount", "/bin/umount")
POLL = 0.1


@dataclass
class Outcome:
    """What the recovery did, step by step, for the journal and the job's comment."""
    recovered: bool = False
    freed: int = 0                              # stuck tasks that could go
    probes: int = 0                             # our own stuck probes that could go
    left: list = field(default_factory=list)    # [pid, start] still there
    steps: list = field(default_factory=list)   # "abort: done", "remount: failed: ...", ...

    def summary(self, r: Recovery) -> str:
        if self.recovered and r.dead:
            return f"remounted without reboot ({r.mountpoint}: dead, its client gone)"
        if self.recovered:
            n = f"{self.freed} task{'s' if self.freed != 1 else ''} freed"
            if self.probes:
                n += f", {self.probes} stuck probe{'s' if self.probes != 1 else ''} gone"
            return f"recovered without reboot ({r.method} {r.mountpoint}, {n})"
        return f"recovery tried ({r.method} {r.mountpoint}): " + "; ".join(self.steps)


def _abort(progress, path: str) -> str:
    progress("abort")
    with open(path, "w") as f:
        f.write("1")
    return "aborted"


def _run_argv(progress, argv: list) -> dict:
    """A program of the site's or umount, its output bounded and never ours to inherit."""
    import subprocess
    progress(os.path.basename(argv[0]))
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, check=False)
    return {"rc": r.returncode, "out": r.stdout[-400:].decode("utf-8", "replace")}


def _argv(template: list, r: Recovery, source: str) -> list:
    return [a.replace("{mountpoint}", r.mountpoint).replace("{source}", source) for a in template]


def _umount() -> str:
    return next((p for p in UMOUNT if os.path.exists(p)), UMOUNT[0])


def _live_mount(r: Recovery) -> tuple[Mount | None, str]:
    """The mount at r.mountpoint as the kernel lists it now, if it is the one we were
    asked about: (mount, ""); (None, "") where nothing is mounted there any more; (None,
    why) where something else is, refused. Everything is judged from one reading
    of the mount table: the device, the owner and the kind, and the fusectl name comes
    from the same entry."""
    from ..host.mounts import MountTable
    table = MountTable.current()
    m = table.at(r.mountpoint)
    if m is None:
        return None, ""
    if not r.dev or m.dev != r.dev:
        return None, (f"refused: {r.mountpoint} is device {m.dev}, not {r.dev or 'the one'} the stuck "
                      "tasks were proven to wait on")
    owner = table.user_owner(m)
    if owner is not None:
        return None, f"refused: {r.mountpoint} is a FUSE mount of uid {owner}, not the node's"
    if r.method == "fuse-abort" and not m.is_fuse:
        return None, f"refused: {r.mountpoint} is {m.fstype}, not FUSE"
    return m, ""


def _mounted_at(point: str):
    from ..host.mounts import MountTable
    return MountTable.current().at(point)


def _step(runner: Runner, key: str, func, args: tuple, timeout: float) -> tuple[bool, str]:
    o = runner.run([Task(key, func, args, timeout)])[key]
    if o.status != DONE:
        return False, f"{o.status}" + (f" at {o.step}" if o.step else "") + (f": {o.error}" if o.error else "")
    v = o.value
    if isinstance(v, dict) and v.get("rc"):
        return False, f"exit {v['rc']}: {v.get('out', '').strip()[:200]}"
    return True, "done"


ALIVE_TIMEOUT = 2.0


def _present(tasks: list, stuck_only: bool = False) -> list:
    """The tasks whose process is still there and no zombie, by its status alone: this
    process reads nothing else of a stuck task (a task in execve with a flush of the
    very mount being recovered stalls every reader of its stat). `stuck_only`: only
    those still in D. A freed task may well live on (its call failed, it handles the
    error, or Slurm's SIGKILL takes it a moment later): what counts is that it no
    longer waits."""
    left = []
    for pid, start in tasks:
        st = procfs.parse_status(procfs.read_small(f"/proc/{pid}/status") or b"")
        state = procfs.status_state(st) if st else ""
        if st and state not in ("Z", "X") and (not stuck_only or state == "D"):
            left.append([pid, start])
    return left


def _waiting(tasks: list, probes: list) -> list:
    """What still holds the mount: the stuck tasks still in D, our own probes still there."""
    return _present(tasks, stuck_only=True) + _present(probes)


def _starts(progress, tasks: list) -> dict:
    """In a child: each task's start time from its stat (None where it is gone)."""
    out = {}
    for pid, _ in tasks:
        progress(f"pid {pid}")
        st = procfs.read_small(f"/proc/{pid}/stat")
        parsed = procfs.parse_stat(st) if st else None
        out[str(pid)] = parsed[2] if parsed is not None else None
    return out


def _alive(tasks: list, runner: Runner | None = None) -> list:
    """The tasks still alive: present by their status, and the same process by the start
    time a child reads (a reused pid is another process). A stat that does not answer
    leaves the task counted alive, as far as anyone knows."""
    maybe = _present(tasks)
    if not maybe:
        return []
    o = (runner or Runner()).run([Task("recover:alive", _starts, (maybe,), ALIVE_TIMEOUT)])["recover:alive"]
    if o.status != DONE or not isinstance(o.value, dict):
        return maybe
    return [[pid, start] for pid, start in maybe if o.value.get(str(pid)) == start]


def recover(r: Recovery, runner: Runner, probe, fusectl: str = FUSECTL) -> Outcome:
    """Carry out one recovery; `probe()` runs the filesystem's own probe of r.probe and
    says (passed, verdict). A dead mount (`r.dead`: every call fails at once, its client
    gone) has nothing waiting on it: it is only detached and mounted again."""
    from ..host import fusectl as control
    from ..host.waits import fusectl_name
    out = Outcome()
    m, refused = _live_mount(r)
    if refused:
        out.steps.append(refused)
        return out
    if m is None and not r.dead:
        out.steps.append(f"{r.mountpoint} (device {r.dev}) is no longer mounted: nothing to recover")
        out.left = _alive(_waiting(r.tasks, []), runner)
        out.freed = len(r.tasks) - len(out.left)
        return out
    key = f"recover:{r.mountpoint}"
    if m is not None and not r.dead:
        if r.method == "fuse-abort":
            said = control.ensure(fusectl)
            if said:
                out.steps.append(said)
            ok, what = _step(runner, key + ":abort", _abort, (f"{fusectl}/{fusectl_name(m)}/abort",), r.timeout)
        elif r.method == "nfs-force-unmount":
            ok, what = _step(runner, key + ":umount-f", _run_argv, ([_umount(), "-f", r.mountpoint],), r.timeout)
        else:
            ok, what = _step(runner, key + ":command", _run_argv, (_argv(r.command, r, m.source),), r.timeout)
        out.steps.append(f"{r.method}: {what}")
        deadline = time.monotonic() + r.wait
        left = _waiting(r.tasks, r.probes)
        while left and time.monotonic() < deadline:
            time.sleep(POLL)
            left = _waiting(r.tasks, r.probes)
        left = _alive(left, runner)
        out.left = left
        out.freed = len([t for t in r.tasks if t not in left])
        out.probes = len([t for t in r.probes if t not in left])
        if left:
            out.steps.append(f"{len(left)} of {len(r.tasks) + len(r.probes)} stuck tasks still stuck after "
                             f"{r.wait:g}s (pid {', '.join(str(p) for p, _ in left[:5])})")
            return out
    if r.remount:
        if _live_mount(r)[0] is not None:
            _step(runner, key + ":detach", _run_argv, ([_umount(), "-l", r.mountpoint],), r.timeout)
        source = m.source if m is not None else ""
        ok, what = _step(runner, key + ":remount", _run_argv, (_argv(r.remount, r, source),), r.timeout)
        if ok and _mounted_at(r.mountpoint) is None:
            ok, what = False, f"done, but nothing is mounted at {r.mountpoint}"
        out.steps.append(f"remount: {what}")
        if not ok:
            return out
    passed, verdict = probe()
    out.steps.append(f"probe: {verdict}")
    out.recovered = passed
    return out
