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

The scan of /proc runs in a hang-safe child (procfs.scan_child), beside the other
checks' probes, and reads each task's `status` alone: a task in execve with a FUSE
flush its user never answers stalls every reader of its stat, wchan, syscall and stack,
never of its status, so no number of such processes blinds the scan. The start time of
the tasks found in D (a sighting's key, against a reused pid) is read from their stat
afterwards, in a child (procfs.start_times); a stat that stalls there names its
process, which is remembered (state `proc-stalls`, while it lives as the same process;
the oldest forgotten past STALLS_MAX), reported ("the /proc scan blocked on pid N") and
never read again; its sightings are matched by pid and tid. This process itself reads
only the tasks' status (procfs.status_sample).

The sightings kept between runs are bounded: at most STATE_THREADS threads of a process
and STATE_PROCESSES processes, the longest stuck first, one process of each uid before a
second of any.

This module is what every health check runs: the scan and the bookkeeping of
sightings. What a stuck task waits on, read with care for what its user controls, and
its finding are checks/_stuck_waits.py and checks/_stuck_diagnosis.py, imported only
once a task is seen in D.
"""
from __future__ import annotations

import os
import time

from .. import TYPE_CHECKING
from ..core.config import setting, switch
from ..core.model import OK, STUCK_TASK, WARN, Finding
from ..core.reason import printable
from ..core.records import dataclass
from ..host import procfs
from ..host.runner import DONE, HUNG, STILL_HUNG, Task

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
    scan_timeout: float = setting(3.0, kind="seconds",
                                  doc="Deadline of the child that scans /proc (each task's status, which no "
                                  "user can stall) and of each child reading wait channels. A read of a task's "
                                  "stat that stalls names that process: it is reported and never read again "
                                  "while it lives.")
    listpids_fallback: bool = setting(True, kind="bool",
                                      doc="Ask `scontrol listpids` which job a stuck process belongs "
                                      "to when its cgroup does not say (proctrack/linuxproc).")


SECTIONS = {"stuck_tasks": setting(kind="section", cls=StuckTasksConfig, doc="Tasks stuck in uninterruptible sleep.")}


def settings(cfg: Config) -> StuckTasksConfig:
    """This check's section of the configuration."""
    out: StuckTasksConfig = getattr(cfg, "stuck_tasks")
    return out



STATE = "stuck-tasks"
STALLS = "proc-stalls"
PLACES = "stuck-places"  # "pid:start" -> the node's place a stuck task was proven to wait on
PLACES_MAX = 256
# Above this many threads the scan is split over forked children, one per CPU.
PARALLEL_THREADS = 3000
START_TRIES = 2          # children a run reading start times, each without the process that stalled the last
STALLS_MAX = 64          # processes remembered as stalling a read of their stat
STATE_THREADS = 16       # sightings kept per process ...
STATE_PROCESSES = 256    # ... and processes kept in all


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
    state = (STATE, STALLS, PLACES)
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
        self._stalls: dict[int, dict] = {}
        self._parts = 1

    def diagnosis(self, ctx: Context) -> Diagnosis:
        """The diagnosis of stuck tasks, with this check's settings (loaded on first use)."""
        if self._diagnosis is None:
            from ._stuck_diagnosis import Diagnosis
            self._diagnosis = Diagnosis(NAME, settings(ctx.config), self.proc)
        return self._diagnosis

    # --- phase 1: the scan, in children started beside the other checks' probes ------
    def tasks(self, ctx: Context) -> list[Task]:
        cfg = settings(ctx.config)
        if cfg.enabled == "false":
            return []
        self._stalls = self._living_stalls(ctx)
        cpus = os.cpu_count() or 1
        self._parts = 1 if cpus < 2 or procfs.thread_count(self.proc) < PARALLEL_THREADS else min(cpus, 8)
        return [self._scan_task(cfg, i, 0) for i in range(self._parts)]

    def _scan_task(self, cfg: StuckTasksConfig, part: int, attempt: int) -> Task:
        key = f"{NAME}:scan:{part}" + (f":{attempt}" if attempt else "")
        return Task(key, procfs.scan_child, (self.proc, part, self._parts, frozenset(self._stalls)), cfg.scan_timeout)

    def _living_stalls(self, ctx: Context) -> dict[int, dict]:
        """The processes an earlier scan stalled on, while each is the same process."""
        out = {}
        for key, entry in ctx.state.load(STALLS).items():
            try:
                pid = int(key)
            except ValueError:
                continue
            if isinstance(entry, dict) and procfs.identity(pid, self.proc) == entry.get("id"):
                out[pid] = entry
        return out

    def _scanned(self, ctx: Context, cfg: StuckTasksConfig, outcomes: dict[str, TaskOutcome]) -> list:
        """Every part's rows (status alone: no user stalls them); a part that did not
        finish is said in the run's notes."""
        found: list = []
        for key, o in sorted(outcomes.items()):
            if not key.startswith(f"{NAME}:scan:"):
                continue
            if o.status == DONE and isinstance(o.value, list):
                found.extend(o.value)
            else:
                self._scan_note = f"part of the /proc scan did not finish: {o.status} {o.error}".strip()
        return found

    def _start_times(self, ctx: Context, cfg: StuckTasksConfig, rows: list) -> None:
        """Fills in the start time of each row found in D (the scan reads status alone),
        from its stat, in a child: a stat that stalls names its process, which is
        remembered (`proc-stalls`) and never read again while it lives; the rows it
        kept from their start time keep -1 for this run (their sightings are matched by
        pid and tid, _earlier). At most START_TRIES children a run, so no number of
        stalling processes costs more than that."""
        want = [[r[0], r[1]] for r in rows if r[0] not in self._stalls]
        starts: dict = {}
        for attempt in range(START_TRIES):
            if not want:
                break
            key = f"{NAME}:starts:{attempt}"
            o = ctx.runner.run([Task(key, procfs.start_times, (self.proc, want), min(cfg.scan_timeout, 1.0))])[key]
            if o.status == DONE and isinstance(o.value, dict):
                starts.update(o.value)
                break
            pid = self._stalled_on(o.reading)
            if pid is None:
                break
            self._stall(pid)
            want = [w for w in want if w[0] != pid]
        for r in rows:
            start = starts.get(f"{r[0]}/{r[1]}")
            if isinstance(start, int):
                r[4] = start

    def _stall(self, pid: int) -> None:
        """Remembers a process whose stat stalled a read of ours. Past STALLS_MAX the
        oldest is forgotten: it is read again (and remembered again) in a later run, the
        rest of the scan unaffected."""
        if pid in self._stalls:
            self._stalls[pid]["scans"] = int(self._stalls[pid].get("scans", 1)) + 1
            return
        if len(self._stalls) >= STALLS_MAX:
            oldest = min(self._stalls, key=lambda p: float(self._stalls[p].get("since") or 0))
            del self._stalls[oldest]
        self._stalls[pid] = {"id": procfs.identity(pid, self.proc), "since": time.time(), "scans": 1}

    def _stalled_on(self, reading: list) -> int | None:
        """The process whose /proc file a stalled scan child had open."""
        prefix = self.proc.rstrip("/") + "/"
        for path in reading:
            if path.startswith(prefix):
                head = path[len(prefix):].split("/", 1)[0]
                if head.isdigit():
                    return int(head)
        return None

    # --- phase 2: decide ------------------------------------------------------------
    def findings(self, ctx: Context, outcomes: dict[str, TaskOutcome]) -> list[Finding]:
        cfg = settings(ctx.config)
        if cfg.enabled == "false":
            return []
        found = self._scanned(ctx, cfg, outcomes)
        ours = {pid for pid, _ in _own_children(ctx)}
        # Our own children of this run (a probe in D during its fsync) are their check's,
        # and those the runner knows are stuck: known by pid (the scan reads no start time).
        mine = {o.pid for o in outcomes.values() if o.pid} | ctx.runner.running() | ours
        found = [row for row in found if row[0] not in mine]
        if found:
            self._start_times(ctx, cfg, found)
        stalls = self._stall_findings(ctx)
        for row in found:
            pid, tid, _comm, _state, start = row[:5]
            s = procfs.status_sample(pid, tid, start, self.proc)
            if s is not None and s.state == "D":
                if len(row) >= 7:
                    # The scan's own counts, from its time: the sample window started there.
                    s.voluntary, s.involuntary = row[5], row[6]
                self._seen.append(s)
        self._seen_at = min((row[7] for row in found if len(row) >= 8), default=time.monotonic())
        self._seen_wall = time.time() - (time.monotonic() - self._seen_at)
        previous = ctx.state.load(STATE)
        # A mount's own probe hung: its callers may be asleep (S) rather than in D.
        probe_hung = any(k.startswith("filesystem:") and o.status in (HUNG, STILL_HUNG) and k not in ctx.locked
                         for k, o in outcomes.items())
        if not self._seen and not previous and not probe_hung:
            if ctx.state.exists(PLACES):
                ctx.state.delete(PLACES)        # no task in D: none keeps a place
            if self._scan_note:
                ctx.notes.append(self._scan_note)
            return stalls
        seen = [(a, b) for a, b in self._resample(ctx, previous) if a.switches == b.switches]
        now = time.time()
        diagnosis = self.diagnosis(ctx)
        kernel = diagnosis.kernel_lines(ctx, [b for _, b in seen]) if seen else {}
        state: dict[str, dict] = {}
        watching: list[tuple[procfs.TaskSample, float]] = []
        stuck: dict[int, list[tuple[procfs.TaskSample, float]]] = {}
        for _, b in seen:
            entry = _earlier(previous, b)
            if entry and tuple(entry.get("switches", ())) == b.switches:
                first = float(entry["first_seen"])
            else:
                first = self._seen_wall       # new, or it moved since the last run
            if b.tid in kernel:
                first = min(first, kernel[b.tid][1])
            state[b.key] = {"first_seen": first, "switches": list(b.switches), "comm": b.comm, "uid": b.uid}
            held = now - first
            if held >= cfg.grace:
                stuck.setdefault(b.pid, []).append((b, held))
            else:
                watching.append((b, held))
        state = _bounded(state)
        if state or previous:
            ctx.state.save(STATE, state)

        out = stalls
        places = ctx.state.load(PLACES)
        diagnosis.places = places
        if probe_hung:
            # No walk of a stuck task's path goes into a mount whose probe hangs.
            diagnosis.hung_devs = set(diagnosis.hung_probes(ctx, outcomes))
        for d in diagnosis.diagnose(ctx, stuck, kernel):
            f = diagnosis.finding(ctx, d)
            if f is not None:
                out.append(f)
        for pid in diagnosis.deferred:
            # Not diagnosed in this run: its job is named all the same, so that no mount
            # is aborted under it meanwhile (decide/mount_incident.py: unplaced).
            b, held = max(stuck[pid], key=lambda x: x[1])
            ref = diagnosis.ref(pid, b.uid)
            if ref is not None and ref.belongs_to(ctx.node):
                out.append(Finding(check=NAME, target=f"pid {pid}", status="watching", severity=OK,
                                   summary=f"job {ref.job} pid {pid} stuck for {held:.0f}s: diagnosed in a later run",
                                   evidence={"pid": pid, "tid": b.tid, "seconds": round(held, 1)}, job=ref.job))
        if diagnosis.deferred:
            ctx.notes.append(f"{len(diagnosis.deferred)} more stuck processes are diagnosed in the next runs "
                             f"(pids {', '.join(map(str, diagnosis.deferred[:8]))}"
                             f"{' ...' if len(diagnosis.deferred) > 8 else ''})")
        hung = diagnosis.hung_probes(ctx, outcomes) if watching or probe_hung else {}
        if hung:
            watching = diagnosis.corroborated(ctx, watching + self._fs_sleepers(ctx, cfg, outcomes), hung,
                                              kernel, out)
        for b, held in watching:
            ref = diagnosis.ref(b.pid, b.uid)
            if ref is not None and not ref.belongs_to(ctx.node):
                continue
            if b.state != "D":
                # Asleep in a filesystem's wait while a probe hangs, not proven to wait on
                # its mount: no fault of anyone's; a job's is named (decide/mount_incident.py:
                # unplaced), so that no mount is aborted under it.
                if ref is not None:
                    out.append(Finding(check=NAME, target=f"pid {b.pid}", status="watching", severity=OK,
                                       summary=f"job {ref.job} pid {b.pid} tid {b.tid} ({printable(b.comm)}) asleep in a "
                                               "filesystem wait while a probe hangs, not placed on a mount",
                                       evidence={"pid": b.pid, "tid": b.tid, "seconds": round(held, 1)}, job=ref.job))
                continue
            who = f"job {ref.job} " if ref else ""
            out.append(Finding(check=NAME, target=f"pid {b.pid}", status="watching", severity=OK,
                               summary=f"{who}pid {b.pid} tid {b.tid} ({printable(b.comm)}) in D for {held:.0f}s "
                                       f"without progress (stuck after {cfg.grace:g}s)",
                               evidence={"pid": b.pid, "tid": b.tid, "seconds": round(held, 1)},
                               job=ref.job if ref else None))
        if self._scan_note:
            ctx.notes.append(self._scan_note)
        self._keep_places(ctx, places, out, {(b.pid, b.start) for _, b in seen})
        return out

    def _keep_places(self, ctx: Context, places: dict, out: list[Finding], alive: set) -> None:
        """Remember each task's proven place while the task lives (in D, or found again)."""
        from ._stuck_diagnosis import place_of
        kept = {k: v for k, v in places.items() if k in {f"{p}:{s}" for p, s in alive}}
        for f in out:
            place = place_of(f) if f.check == NAME else None
            if place is not None and isinstance(f.evidence.get("start_ticks"), int):
                kept[f"{f.evidence['pid']}:{f.evidence.get('start_ticks')}"] = place
        if len(kept) > PLACES_MAX:
            kept = dict(sorted(kept.items())[:PLACES_MAX])
        if kept != places:
            ctx.state.save(PLACES, kept)

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
            b = procfs.status_sample(a.pid, a.tid, a.start, self.proc)
            if b is not None and b.state == "D":
                out.append((a, b))
        return out

    def _fs_sleepers(self, ctx: Context, cfg: StuckTasksConfig, outcomes: dict) -> list[tuple]:
        """Threads asleep (S) in a filesystem's wait, looked for only while a mount's probe
        hangs: FUSE waits interruptibly once INIT is answered (a FUSE network client's
        reader), NFS, Lustre and CephFS often do. Each is sampled twice, `sample_window`
        apart; one whose switch counts did not move is handed to the corroboration, which
        keeps it only where the kernel's ids prove it waits on the hung probe's mount."""
        from ..host import waits
        key = f"{NAME}:scan-s"
        o = ctx.runner.run([Task(key, procfs.scan_child, (self.proc, 0, 1, frozenset(), "S"), cfg.scan_timeout)])[key]
        if o.status != DONE or not isinstance(o.value, list):
            self._scan_note = f"the scan for tasks asleep on a filesystem did not finish: {o.status}"
            return []
        ours = {pid for pid, _ in _own_children(ctx)}
        mine = {x.pid for x in outcomes.values() if x.pid} | ctx.runner.running() | {o.pid} | ours
        # The wait channels, one child per user: a user whose tasks' wait channels do not
        # answer (in execve, a FUSE flush unanswered) hides only their own sleepers.
        per_uid: dict[int, list] = {}
        for row in o.value:
            if row[0] not in mine and row[0] not in self._stalls:
                per_uid.setdefault(row[8] if len(row) > 8 else -1, []).append(row)
        tasks = [Task(f"{NAME}:scan-s:{uid}", waits.fs_waits, (self.proc, rows), cfg.scan_timeout)
                 for uid, rows in sorted(per_uid.items())]
        rows = []
        for k, r in (ctx.runner.run(tasks) if tasks else {}).items():
            if r.status == DONE and isinstance(r.value, list):
                rows.extend(r.value)
                continue
            pid = self._stalled_on(r.reading)
            if pid is not None:
                self._stall(pid)
            ctx.notes.append(f"the wait channels of uid {k.rsplit(':', 1)[1]}'s sleeping tasks did not answer "
                             f"({r.status}): those tasks are not looked at in this run")
        first = []
        for row in rows:
            pid, tid, _comm, _state, start = row[:5]
            s = procfs.status_sample(pid, tid, start, self.proc)
            if s is not None and s.state == "S":
                first.append(s)
        if not first:
            return []
        time.sleep(cfg.sample_window)
        out = []
        for a in first:
            b = procfs.status_sample(a.pid, a.tid, a.start, self.proc)
            if b is not None and b.state in ("S", "D") and b.switches == a.switches:
                out.append((b, cfg.sample_window))
        return out

    def _stall_findings(self, ctx: Context) -> list[Finding]:
        """One warning per process that stalls the scan; the state remembers them."""
        saved = ctx.state.load(STALLS)
        now = {str(pid): e for pid, e in self._stalls.items()}
        if now != saved:
            ctx.state.save(STALLS, now)
        out = []
        for pid, e in sorted(self._stalls.items()):
            st = procfs.parse_status(procfs.read_small(f"{self.proc}/{pid}/status") or b"")
            comm = printable(st.get("Name", "?"))
            uid = (st.get("Uid") or "?").split()[0]
            since = time.strftime("%H:%M:%S", time.localtime(float(e.get("since") or time.time())))
            ref = self.diagnosis(ctx).ref(pid, int(uid)) if uid.isdigit() else None
            out.append(Finding(check=NAME, target=f"pid {pid}", status="scan_blocked", severity=WARN,
                               summary=f"the /proc scan blocked on pid {pid} ({comm}, uid {uid}) since {since}: "
                                       "its stat does not answer; read through its status since",
                               evidence={"pid": pid, "comm": comm, "uid": uid, "since": e.get("since"),
                                         "scans_stalled": e.get("scans", 1), "job": ref.job if ref else None},
                               job=ref.job if ref else None))
        return out


def _earlier(previous: dict, b: procfs.TaskSample) -> dict | None:
    """The sighting kept for this task: by pid, tid and start time, or, where one of the
    two start times is unknown (-1: its stat was not read), by pid and tid alone."""
    entry = previous.get(b.key)
    if entry is not None:
        return entry
    head = f"{b.pid}/{b.tid}/"
    for key, e in previous.items():
        if key.startswith(head) and (b.start == -1 or key == head + "-1"):
            return e
    return None


def _bounded(state: dict[str, dict]) -> dict[str, dict]:
    """At most STATE_THREADS sightings per process and STATE_PROCESSES processes, the
    longest stuck first and fair to every user (one process of each uid before a second
    of any): a user with 100,000 threads in D does not grow the file, nor push another
    user's stuck task out of it (its grace clock would start again each run)."""
    from ._stuck_reads import fair
    per: dict[str, list[tuple[str, dict]]] = {}
    for key, entry in state.items():
        per.setdefault(key.split("/", 1)[0], []).append((key, entry))
    if len(per) <= STATE_PROCESSES and all(len(v) <= STATE_THREADS for v in per.values()):
        return state
    kept = []
    for items in per.values():
        items.sort(key=lambda kv: kv[1]["first_seen"])
        kept.append(items[:STATE_THREADS])
    kept.sort(key=lambda items: items[0][1]["first_seen"])
    kept = fair(kept, lambda items: items[0][1].get("uid", -1))
    return {k: e for items in kept[:STATE_PROCESSES] for k, e in items}


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
