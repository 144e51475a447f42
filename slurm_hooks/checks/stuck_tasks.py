"""Stuck tasks: threads in uninterruptible sleep (D) that make no progress.

Why not flag every D task: D is also the normal state of a thread waiting for a disk
read, for a few milliseconds. A task is stuck when it stays in D with unchanged
voluntary and involuntary context-switch counts for at least `grace` seconds. The
first sighting of each task (keyed by pid, tid and start time, so a reused pid is a
new task) is kept in local state, so a grace longer than the health-check interval
works across runs; entries of tasks that ended or moved on are forgotten. A task whose
counts change is making progress and is never stuck.

Every thread is scanned (/proc/PID/task/TID), not only the leader: `ps` shows `Dl`
when the leader of a multi-threaded process is in D, but a non-leader thread stuck in
write() leaves the leader in S.

Attribution comes from the task's cgroup (host/jobs.py); on a host running several slurmd
(-N), only tasks under this node's cgroup count. Our own stuck probe children are
already reported by their check and skipped here: known by the runner's registry (pid
and start time), never by a name, which any process can take.

A task stuck on a FUSE mount its own user made (fusermount3 records the user's uid; a
mount in a user namespace of their own is theirs too) is the job's problem, not the
node's: the finding says so and asks only for an action on that job
(`stuck_tasks.own_mount`), never a drain or a reboot. So is any task the kernel's own ids
do not prove to wait on the node's storage, devices or GPU driver (host/waits.py):
`stuck_tasks.not_node`.

This module is what every health check runs: the scan and the bookkeeping of
sightings. What a stuck task waits on, read with care for what its user controls, and
its finding are checks/_stuck_diagnosis.py, imported only once a task is seen in D.
"""
from __future__ import annotations

import os
import time

from .. import TYPE_CHECKING
from ..core.config import setting, switch
from ..core.model import OK, STUCK_TASK, Finding
from ..core.records import dataclass
from ..host import procfs
from ..host.runner import DONE, Task

if TYPE_CHECKING:
    from ..core.config import Config
    from ..host.runner import Outcome as TaskOutcome
    from . import Context
    from ._stuck_diagnosis import Diagnosis

NAME = "stuck_tasks"
ORDER = 20
HOOKS = ("check", "healthcheck")


@dataclass
class StuckTasksConfig:
    enabled: str = switch("Look for tasks (any thread) stuck in uninterruptible sleep (D). "
                          "auto is true.")
    grace: float = setting(120.0, kind="seconds",
                           doc="A task counts as stuck after this long in D with no progress "
                           "(unchanged context-switch counts), remembered across runs.")
    sample_window: float = setting(1.0, kind="seconds",
                                   doc="When D tasks not seen before are found, sample them again "
                                   "this much later in the same run, to tell a stuck task from one "
                                   "doing slow I/O.")
    inspect_timeout: float = setting(2.0, kind="seconds",
                                     doc="Deadline of the child that reads a stuck process's "
                                     "environment (for its rank), command line and path arguments.")
    non_job_tasks: str = setting("warn", kind="enum", choices=("ignore", "warn", "drain"),
                                 doc="What a stuck task outside any Slurm job does: nothing, a "
                                 "warning in the report, or drain the node.")
    own_mount: str = setting("comment", kind="enum", choices=("comment", "cancel", "requeue"),
                             doc="A job task stuck on a FUSE mount its own user made is the job's "
                             "problem, not the node's: never a drain or a reboot. `comment`: record "
                             "the diagnosis on the job (AdminComment, journal); `cancel` or `requeue` "
                             "the job as well.")
    not_node: str = setting("comment", kind="enum", choices=("comment", "cancel", "requeue"),
                            doc="A job task stuck where nothing proves the node at fault (a vfork "
                            "parent, a ptrace stop, a pipe or lock, a mount no kernel id shows to be "
                            "the node's) is the job's problem: never a drain or a reboot. `comment`: "
                            "record the diagnosis on the job; `cancel` or `requeue` the job as well.")
    listpids_fallback: bool = setting(True, kind="bool",
                                      doc="Ask `scontrol listpids` which job a stuck process belongs "
                                      "to when its cgroup does not say (proctrack/linuxproc).")


SECTIONS = {"stuck_tasks": setting(kind="section", cls=StuckTasksConfig, doc="Tasks stuck in uninterruptible sleep.")}


def settings(cfg: Config) -> StuckTasksConfig:
    """This check's section of the configuration."""
    out: StuckTasksConfig = getattr(cfg, "stuck_tasks")
    return out



STATE = "stuck-tasks"
# Above this many threads the scan is split over forked children, one per CPU.
PARALLEL_THREADS = 3000


def _scan_chunk(progress, pids: list[str], proc: str) -> list:
    return procfs.scan_pids(pids, proc)


STUCK_SERIES = {"slurm_hooks_stuck_tasks": ("gauge", "Processes with a task stuck in uninterruptible sleep, per job.")}


def stuck_samples(findings: list[Finding]) -> list[tuple[str, dict, float]]:
    """slurm_hooks_stuck_tasks{slurm_job}: processes stuck in D, per Slurm job ("" outside
    jobs). `slurm_job`, not `job`, which the scrape's own label would clash with."""
    per_job: dict[str, int] = {}
    for f in findings:
        if f.status in ("stuck", "stuck_after_job"):
            per_job[f.job or ""] = per_job.get(f.job or "", 0) + 1
    return [("slurm_hooks_stuck_tasks", {"slurm_job": job}, n) for job, n in sorted(per_job.items())]


class StuckTasksCheck:
    name = NAME
    order, hooks = ORDER, HOOKS
    roles = (STUCK_TASK,)
    state = (STATE,)
    series = STUCK_SERIES
    explain_keys = ("job", "step", "rank", "pid", "tids", "comm", "seconds", "syscall", "file", "mountpoint",
                    "fstype", "cause", "wchan", "stack", "cmdline", "kernel_log", "idle_gpu")
    samples = staticmethod(stuck_samples)

    def __init__(self, proc: str = procfs.PROC):
        self.proc = proc
        self._seen: list[procfs.TaskSample] = []
        self._seen_at = 0.0      # monotonic time of the scan
        self._seen_wall = 0.0
        self._scan_note = ""
        self._diagnosis: Diagnosis | None = None

    def diagnosis(self, ctx: Context) -> Diagnosis:
        """The diagnosis of stuck tasks, with this check's settings (loaded on first use)."""
        if self._diagnosis is None:
            from ._stuck_diagnosis import Diagnosis
            self._diagnosis = Diagnosis(NAME, settings(ctx.config), self.proc)
        return self._diagnosis

    # --- phase 1: scan (runs before the other checks' children are collected) --------
    def tasks(self, ctx: Context) -> list[Task]:
        cfg = settings(ctx.config)
        if cfg.enabled == "false":
            return []
        found = self._scan(ctx)
        self._seen_at, self._seen_wall = time.monotonic(), time.time()
        if not found:
            return []
        ours = _own_children(ctx)
        running = ctx.runner.running()   # this run's probes, started before the scan
        for pid, tid, _comm, _state, start in found:
            if (pid, start) in ours or pid in running:
                continue                 # our own probe: its check reports it
            s = procfs.sample(pid, tid, self.proc)
            if s is not None and s.state == "D":
                self._seen.append(s)
        return []

    def _scan(self, ctx: Context) -> list:
        pids = procfs.list_pids(self.proc)
        cpus = os.cpu_count() or 1
        if cpus < 2 or procfs.thread_count(self.proc) < PARALLEL_THREADS:
            return procfs.scan_pids(pids, self.proc)
        n = min(cpus, 8)
        chunks = [pids[i::n] for i in range(n)]
        batch = ctx.runner.start([Task(f"{NAME}:scan:{i}", _scan_chunk, (chunk, self.proc), 10.0)
                                  for i, chunk in enumerate(chunks[1:], 1)])
        found = procfs.scan_pids(chunks[0], self.proc)
        for o in ctx.runner.collect(batch).values():
            if o.status == DONE:
                found.extend(o.value)
            else:
                self._scan_note = f"part of the /proc scan failed: {o.error}"
        return found

    # --- phase 2: decide ------------------------------------------------------------
    def findings(self, ctx: Context, outcomes: dict[str, TaskOutcome]) -> list[Finding]:
        cfg = settings(ctx.config)
        if cfg.enabled == "false":
            return []
        previous = ctx.state.load(STATE)
        if not self._seen and not previous:
            return []
        seen = [(a, b) for a, b in self._resample(ctx, previous) if a.switches == b.switches]
        now = time.time()
        diagnosis = self.diagnosis(ctx)
        kernel = diagnosis.kernel_lines(ctx, [b for _, b in seen]) if seen else {}
        state: dict[str, dict] = {}
        watching: list[tuple[procfs.TaskSample, float]] = []
        stuck: dict[int, list[tuple[procfs.TaskSample, float]]] = {}
        for _, b in seen:
            entry = previous.get(b.key)
            if entry and tuple(entry.get("switches", ())) == b.switches:
                first = float(entry["first_seen"])
            else:
                first = self._seen_wall       # new, or it moved since the last run
            if b.tid in kernel:
                first = min(first, kernel[b.tid][1])
            state[b.key] = {"first_seen": first, "switches": list(b.switches), "comm": b.comm}
            held = now - first
            if held >= cfg.grace:
                stuck.setdefault(b.pid, []).append((b, held))
            else:
                watching.append((b, held))
        if state or previous:
            ctx.state.save(STATE, state)

        out = []
        for d in diagnosis.diagnose(ctx, stuck, kernel):
            f = diagnosis.finding(ctx, d)
            if f is not None:
                out.append(f)
        hung = diagnosis.hung_probes(ctx, outcomes) if watching else {}
        if hung:
            watching = diagnosis.corroborated(ctx, watching, hung, kernel, out)
        for b, held in watching:
            ref = diagnosis.ref(b.pid, b.uid)
            if ref is not None and not ref.belongs_to(ctx.node):
                continue
            who = f"job {ref.job} " if ref else ""
            out.append(Finding(check=NAME, target=f"pid {b.pid}", status="watching", severity=OK,
                               summary=f"{who}pid {b.pid} tid {b.tid} ({b.comm}) in D for {held:.0f}s "
                                       f"without progress (stuck after {cfg.grace:g}s)",
                               evidence={"pid": b.pid, "tid": b.tid, "seconds": round(held, 1)},
                               job=ref.job if ref else None))
        if self._scan_note:
            ctx.notes.append(self._scan_note)
        return out

    def _resample(self, ctx: Context, previous) -> list[tuple]:
        """[(first sample this run or None, fresh sample)] for tasks still in D.

        Tasks never seen before get a second look `sample_window` after the first, so
        a run by itself tells a stuck task from one doing slow I/O.
        """
        cfg = settings(ctx.config)
        fresh = [s for s in self._seen if s.key not in previous]
        if fresh:
            wait = cfg.sample_window - (time.monotonic() - self._seen_at)
            if wait > 0:
                time.sleep(wait)
        out = []
        for a in self._seen:
            b = procfs.sample(a.pid, a.tid, self.proc)
            if b is not None and b.state == "D" and b.start == a.start:
                out.append((a, b))
        return out


def _own_children(ctx: Context) -> set[tuple[int, int]]:
    """(pid, start ticks) of our children the runner knows are stuck in the kernel."""
    out = set()
    for entry in ctx.runner.stuck().values():
        try:
            out.add((int(entry["pid"]), int(entry["start"])))
        except (KeyError, TypeError, ValueError):
            continue
    return out


CHECK = StuckTasksCheck
