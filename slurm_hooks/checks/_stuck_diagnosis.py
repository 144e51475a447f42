"""What the node does about a stuck task: its finding, the stuck-task check's verdict.

checks/_stuck_waits.py finds what a stuck process waits on and whose that place is;
this module turns that into one finding: the node's fault (a drain, the job requeued,
at last a reboot: the kernel's ids proved a place of the node's), the job's own
problem (its user's mount, a place not proven the node's: told to the job, never a
drain), or nothing. A task proven to wait on the node's storage keeps that place while
it lives (state `stuck-places`, `place_of`), killed and in its exit path too, so
Slurm's `Kill task failed` is re-worded with it. A task on a mount whose own probe hung
in the same run is stuck at its second sighting (`corroborated`).
"""
from __future__ import annotations

from .. import TYPE_CHECKING
from ..core.model import FAIL, WARN, Finding
from ..core.reason import duration, printable, shorten_path
from ..host import procfs, waits
from ..host.jobs import JobRef
from ._stuck_reads import Stuck
from ._stuck_waits import Waits

if TYPE_CHECKING:
    from typing import Any

    from . import Context

CAUSE_LABEL = waits.CAUSE_LABEL


class Diagnosis(Waits):
    """Diagnoses stuck processes for the check `name`, with the stuck-task check's
    settings (its own section, which leftovers shares): their children are keyed by
    that name, and so are the findings."""

    def __init__(self, name: str, settings: Any, proc: str = procfs.PROC):
        super().__init__(name, settings, proc)
        # "pid:start" -> the node's place an earlier run proved (place_of): a task keeps it
        # while it lives, killed or not.
        self.places: dict[str, dict] = {}

    def _remembered(self, d: Stuck) -> None:
        """A task proven to wait on the node's storage, then killed (its job requeued),
        waits on in its exit path (flush, release, do_exit) with no system call and its
        descriptors going: nothing left proves its place, yet it is the same task (same
        pid, same start time) on the same mount. It keeps the place proven earlier,
        never one a user could name: only what an earlier run's kernel ids proved."""
        was = self.places.get(f"{d.sample.pid}:{d.sample.start}")
        if not was or d.cause in waits.NODE_CAUSES or d.mount_owner is not None:
            return
        if was.get("cause") not in waits.NODE_CAUSES:
            return
        then = str(was.get("syscall") or "")
        d.earlier = f"{then}()" if then and then not in ("page fault", "running") else (then or "stuck")
        d.how.append(f"placed on {was.get('mountpoint')} by an earlier run (same pid and start time); "
                     f"now {d.syscall or 'in no system call'}: its exit path")
        d.cause = str(was["cause"])
        d.file = d.file or str(was.get("file") or "")
        d.mountpoint, d.fstype = str(was.get("mountpoint") or ""), str(was.get("fstype") or "")
        d.mount_dev, d.source = str(was.get("mount_dev") or ""), str(was.get("source") or "")
        d.network = bool(was.get("network"))
        d.syscall = then
        if d.ref is None and was.get("job"):
            # Slurm moves the tasks it gave up killing out of the job's cgroup (22.05:
            # to the root): the job the cgroup named while the task was alive stays its.
            d.ref = JobRef(job=str(was["job"]), uid=d.sample.uid)
            d.how.append(f"job {d.ref.job} named by the job's cgroup in that run; Slurm has since moved "
                         "the task out of it")

    def corroborated(self, ctx: Context, watching: list, hung: dict, kernel: dict, out: list) -> list:
        """A task seen twice in D, proven (by the kernel's ids) to wait on a mount whose
        own probe hung in this run, needs no long grace: two witnesses agree. Its
        finding goes to `out`; the tasks still only watched are returned."""
        self.hung_devs |= set(hung)
        pending: dict[int, list] = {}
        for b, held in watching:
            pending.setdefault(b.pid, []).append((b, held))
        left = []
        promoted = set()
        for d in self.diagnose(ctx, pending, kernel):
            path = hung.get(d.mount_dev) if d.mount_dev else None
            if path is None or d.cause not in waits.NODE_CAUSES:
                continue
            d.how.append(f"corroborated: the probe of {path} on the same mount hung in this run")
            f = self.finding(ctx, d)
            if f is not None:
                f.detail = f"corroborated by the hung probe of {path}, before the grace; " + f.detail
                out.append(f)
                promoted.add(d.sample.pid)
        for b, held in watching:
            if b.pid not in promoted:
                left.append((b, held))
        return left

    def finding(self, ctx: Context, d: Stuck, after_end: bool = False) -> Finding | None:
        self._remembered(d)
        s, ref = d.sample, d.ref
        # User-chosen bytes, written out (\x1b) before any of them is shortened or joined.
        d.file, d.cmdline = printable(d.file), printable(d.cmdline)
        call = f"{d.syscall}()" if d.syscall and d.syscall not in ("page fault", "running") else (d.syscall or "the kernel")
        where = ""
        if d.file:
            where = f" on {shorten_path(d.file, 120)}"
            if d.fstype:
                where += f" ({d.fstype} {d.mountpoint})"
        elif d.wchan:
            where = f" at {d.wchan}"
        who = f"job {ref.job} " if ref else ""
        if ref and d.rank is not None:
            who += f"rank {d.rank} "
        elif ref and ref.task is not None:
            who += f"task {ref.task} "
        threads = f" ({len(d.tids)} threads)" if len(d.tids) > 1 else ""
        # The scheduler knows when the thread went to sleep; our own sightings (and the
        # kernel's hung-task line) only bound it from below.
        # (Its clock leaves out interrupt and stolen time: a little behind ours.)
        exact = d.blocked is not None and d.blocked >= d.seconds * 0.98 - 1
        d_seconds = max(d.blocked, d.seconds) if exact and d.blocked is not None else d.seconds
        held = ("still stuck after the job ended" if after_end
                else f"stuck for {duration(d_seconds, at_least=not exact)}")
        if d.sigkill:
            held += " (killed, still in D: unkillable)" if not d.earlier else " (killed, still in D)"
        if d.earlier:
            held += ", now in its exit path"
        own = d.mount_owner is not None
        mine = own and d.mount_owner == s.uid
        if own:
            kind = "FUSE mount" if d.fstype.startswith("fuse") else "mount"
            where += f" (a {kind} of uid {d.mount_owner}" + (", the task's own user)" if mine else ")")
        elif d.cause not in waits.NODE_CAUSES:
            where += f" (not the node's: {CAUSE_LABEL[d.cause]})"
        asleep = " (asleep, S)" if s.state == "S" else ""
        summary = f"{who}pid {s.pid}{threads} {held}{asleep} in {call}{where}"
        # The node reason must be stable across runs (no duration, nothing that changes
        # when the job ends) and short, with "stuck" in the 20 columns `sinfo -R` shows:
        # the pid comes last. `sinfo -R` is every user's to read: it names the mount, never
        # the file a user's task had open (that goes to the job's AdminComment and the
        # journal, which are not every user's).
        short_where = (f" on {shorten_path(d.mountpoint, 100)}" if d.file and d.mountpoint
                       else f" at {d.wchan}" if d.wchan else " on a file" if d.file else "")
        fs = f" ({d.fstype})" if d.fstype else ""
        reason = f"{'job ' + ref.job + ' ' if ref else ''}stuck in {call}{short_where}{fs}, pid {s.pid}"
        evidence = {
            "node": ctx.node, "job": ref.job if ref else None, "step": ref.step if ref else None,
            "task": ref.task if ref else None, "rank": d.rank, "pid": s.pid, "tids": d.tids,
            "start_ticks": s.start, "comm": s.comm, "uid": s.uid, "state": s.state, "seconds": round(d.seconds, 1),
            "d_seconds": round(d_seconds, 1), "d_at_least": not exact,
            "syscall": d.syscall, "syscall_nr": d.syscall_nr, "fd": d.fd, "file": d.file,
            "mountpoint": d.mountpoint, "fstype": d.fstype, "wchan": d.wchan, "stack": d.stack,
            "cause": d.cause, "cmdline": d.cmdline, "inspect": d.inspect, "kernel_log": d.kernel,
            "mount_owner": d.mount_owner, "attribution": d.how, "mount_dev": d.mount_dev,
            "sigkill_pending": d.sigkill, "source": d.source, "network": d.network,
            "placed_earlier": d.earlier or None,
        }
        detail = (f"cause: {CAUSE_LABEL[d.cause]}; comm {s.comm}; wchan {d.wchan or '?'}; "
                  f"stack {' < '.join(d.stack[:4]) or 'unreadable'}"
                  + (f"; kernel: {d.kernel}" if d.kernel else ""))
        incident = f"{ctx.node}:{s.pid}:{s.start}"
        if own:
            # The user's own storage: the job's problem. The node stays in service; the
            # job gets the diagnosis and, for the user's own mount, the configured action.
            if ref is None and self.settings.non_job_tasks == "ignore":
                return None
            action = self.settings.own_mount if mine else "comment"
            return Finding(check=self.name, target=f"{who}pid {s.pid}".strip(), status="stuck_own_mount",
                           severity=WARN, summary=summary, detail=detail, evidence=evidence,
                           job=ref.job if ref else None, incident=incident, reason=reason,
                           job_action=action if ref else "")
        if d.cause not in waits.NODE_CAUSES:
            # Nothing proves the node's storage, device or driver holds it (a vfork
            # parent, a ptrace stop, a pipe, a lock, a mount no id shows to be the node's):
            # the job's problem, told to the job. Never a drain, a reboot or a share of
            # the drain-storm breaker.
            if ref is None and self.settings.non_job_tasks == "ignore":
                return None
            return Finding(check=self.name, target=f"{who}pid {s.pid}".strip(), status="stuck_not_node",
                           severity=WARN, summary=summary, detail=detail, evidence=evidence,
                           job=ref.job if ref else None, incident=incident, reason=reason,
                           job_action=self.settings.not_node if ref else "")
        if ref is None:
            mode = self.settings.non_job_tasks
            if mode == "ignore":
                return None
            severity = FAIL if mode == "drain" else WARN
        else:
            severity = FAIL
        return Finding(check=self.name, target=f"{who}pid {s.pid}".strip(), status="stuck", severity=severity,
                       summary=summary, detail=detail, evidence=evidence,
                       job=ref.job if ref else None,
                       incident=incident, reason=reason,
                       # Asleep (S), it wakes for a signal: its job's requeue ends it, or the
                       # mount's own recovery; and a mount asleep on every node is an outage,
                       # which no reboot cures. Only a task in D asks for one.
                       needs_reboot=s.state != "S",
                       hard=True, resumable=False)


PLACE_FIELDS = ("cause", "file", "mountpoint", "fstype", "mount_dev", "source", "network", "syscall")


def place_of(f: Finding) -> dict | None:
    """What a later run needs to keep a stuck task's place once it lost the means to
    prove it (killed, in its exit path: no system call, its descriptors closing), keyed
    by pid and start time: None unless the kernel's ids proved the node's place."""
    ev = f.evidence
    if f.status != "stuck" or ev.get("cause") not in waits.NODE_CAUSES or not isinstance(ev.get("pid"), int):
        return None
    return {k: ev.get(k) for k in PLACE_FIELDS} | {"job": f.job}
