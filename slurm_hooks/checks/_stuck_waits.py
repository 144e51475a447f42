"""What a stuck task waits on, and whose that place is: the stuck-task check's diagnosis
up to its verdict (the finding is checks/_stuck_diagnosis.py's).

For each stuck process it starts the reads of checks/_stuck_reads.py in hang-safe
children, each keyed by the process it looks at (at most one child stuck per process,
ever): a look at its /proc files, one mount table per mount namespace, its memory (at
most INSPECT_STUCK_MAX such children stuck at once), the walk of a path argument
(host/waits.walk). At most DIAGNOSE_PER_RUN processes are diagnosed per run, those not
diagnosed longest first; the rest are counted and named in the next run.

Whose the wait is comes from the kernel's own ids alone (host/waits.py): a task on its
own user's FUSE mount, or on anything not proven to be the node's, is the job's
problem. Where a FUSE mount is among the places and fusectl is not mounted, it is
mounted first (host/fusectl.py): the verdict asks it whether a request waits there.
"""
from __future__ import annotations

import os
import time

from .. import TYPE_CHECKING
from ..core.reason import printable
from ..host import procfs, waits
from ..host.jobs import JobRef, of_pid
from ..host.mounts import MountTable
from ..host.runner import DONE, Task
from ._stuck_reads import (
    DIAGNOSE_PER_RUN,
    INSPECT_PER_RUN,
    INSPECT_STUCK_ALL,
    INSPECT_STUCK_MAX,
    TABLE_TIMEOUT,
    TABLES_PER_RUN,
    Stuck,
    _inspect,
    _look,
    _mount_view,
    _sigkill_pending,
    _table_from,
    fair,
    rank_from,
)

if TYPE_CHECKING:
    from typing import Any

    from . import Context


class Waits:
    """Finds what the stuck processes wait on, for the check `name`, with the stuck-task
    check's settings (its own section, which leftovers shares): their children are keyed
    by that name."""

    def __init__(self, name: str, settings: Any, proc: str = procfs.PROC):
        self.name = name
        self.settings = settings
        self.proc = proc
        self.deferred: list[int] = []       # stuck processes left for the next run
        self._stuck: dict[int | None, int] = {}
        self._host: MountTable | None = None
        self.hung_devs: set[str] = set()    # devices of the mounts whose probe hangs in this run
        self.fusectl = ""                   # what was done to have fusectl mounted, if anything

    def hung_probes(self, ctx: Context, outcomes: dict) -> dict[str, str]:
        """Device (major:minor) -> path of each filesystem probe that hung in this run, or
        is still stuck from an earlier one: the mount's own witness."""
        from ..host.runner import HUNG, STILL_HUNG
        out = {}
        for key, o in outcomes.items():
            if key.startswith("filesystem:") and o.status in (HUNG, STILL_HUNG) and key not in ctx.locked:
                path = key.split(":", 1)[1]
                m = ctx.mounts.holding(path)
                if m is not None and m.dev:
                    out[m.dev] = path
        return out

    def kernel_lines(self, ctx: Context, samples: list[procfs.TaskSample]) -> dict[int, tuple[str, float]]:
        """tid -> (the kernel's hung-task line, wall time the task has been blocked since).

        The kernel's own "blocked for more than N seconds" corroborates a sighting and
        says how long the task has been stuck at least, even on our first look at it.
        """
        from ..host import kmsg
        wanted = {s.tid: s for s in samples}
        ticks = procfs.boot_ticks()
        mono_now, wall_now = time.monotonic(), time.time()
        lines = {}
        for rec, m in kmsg.match(kmsg.read(path=ctx.config.kernel_log), "hung_task"):
            s = wanted.get(int(m.group("pid")))
            blocked_at = rec.usec / 1e6 - int(m.group("seconds"))
            # Same tid and comm, and a task that existed then (not a reused tid).
            if s is None or m.group("comm") != s.comm[:15] or s.start / ticks > blocked_at:
                continue
            lines[s.tid] = (rec.text, wall_now - (mono_now - blocked_at))
        return lines

    def _cgroup_ref(self, pid: int) -> JobRef | None:
        return of_pid(pid, self.proc)

    def ref(self, pid: int, uid: int) -> JobRef | None:
        """The job from the cgroup, when the cgroup's uid_U is the task's own uid: a
        task of one user in a cgroup named for another is nobody's job we act on."""
        ref = self._cgroup_ref(pid)
        if ref is not None and ref.uid is not None and ref.uid != uid:
            return None
        return ref

    def diagnose(self, ctx: Context, stuck: dict, kernel: dict) -> list[Stuck]:
        """Diagnoses the stuck processes (pid -> [(sample, seconds held)]), at most
        DIAGNOSE_PER_RUN of them, the longest held first; `self.deferred` counts the rest."""
        results: list[Stuck] = []
        listpids = None
        order = sorted(stuck.items(), key=lambda kv: (-max(h for _, h in kv[1]), kv[0]))
        # Fair to every user: the longest held of each uid first, then the next of each.
        # A user's own many stuck tasks (vfork parents, a stalled mount of theirs) never
        # keep another user's one from being diagnosed in this run.
        order = fair(order, lambda kv: kv[1][0][0].uid)
        cap = max(DIAGNOSE_PER_RUN, len({items[0][0].uid for _, items in order}))
        self.deferred = [pid for pid, _ in order[cap:]]
        for pid, items in order[:cap]:
            items.sort(key=lambda x: -x[1])
            first, held = items[0]
            named = self._cgroup_ref(pid)
            ref = self.ref(pid, first.uid)
            if named is None and self.settings.listpids_fallback:
                if listpids is None:
                    listpids = _listpids(ctx)
                ref = listpids.get(pid)
            if ref is not None and not ref.belongs_to(ctx.node):
                continue                          # another slurmd's job on this host
            d = Stuck(sample=first, tids=[b.tid for b, _ in items], seconds=held, ref=ref)
            d.kernel = next((kernel[b.tid][0] for b, _ in items if b.tid in kernel), "")
            results.append(d)
        if not results:
            return results
        looks = ctx.runner.run([Task(self._key("look", d), _look, (d.sample.pid, d.sample.tid, self.proc),
                                     self.settings.inspect_timeout) for d in results])
        for d in results:
            self._apply_look(d, looks.get(self._key("look", d)))
        self._read_memory_and_tables(ctx, results)
        # The host's own table, read after the tasks' tables: a device number compared
        # between them is never older on our side (a user's new mount on a number the
        # node's old one had is not taken for the node's).
        try:
            self._host = MountTable.current()
        except OSError:
            self._host = ctx.mounts
        self._walk(ctx, results)
        self._fusectl(ctx, results)
        for d in results:
            self._locate(ctx, d)
        return results

    def _fusectl(self, ctx: Context, results: list[Stuck]) -> None:
        """A FUSE mount among the places the kernel's ids name: the verdict asks fusectl
        whether a request waits on its connection (host/waits.py). Where nothing mounted
        fusectl, it is mounted first, once a run, and said in the run's notes; never by a
        look (`slurm-hooks check` changes nothing)."""
        if self.fusectl or ctx.behaviour.looks_only:
            return
        for d in results:
            table = d.table if d.table is not None else MountTable([])
            ids = [i for i in d.mnt_ids.values() if isinstance(i, int)]
            if isinstance(d.walk.get("mnt_id"), int):
                ids.append(d.walk["mnt_id"])
            named = [table.by_id(i) for i in ids] + [m for dev in d.devs for m in table.with_dev(dev)]
            if any(m is not None and m.is_fuse for m in named):
                from ..host import fusectl
                said = fusectl.ensure()
                self.fusectl = said or "mounted already"
                if said:
                    ctx.notes.append(said)
                return

    def _key(self, what: str, d: Stuck) -> str:
        # The uid last: the children left stuck are counted per user (_stuck_readers).
        return f"{self.name}:{what}:{d.sample.pid}:{d.sample.start}:{d.sample.uid}"

    def _stuck_readers(self, ctx: Context) -> dict[int | None, int]:
        """Our memory readers and path walkers stuck in the kernel, per uid of the task
        they looked at (None: a key without one). A user who makes every reader of
        theirs stick (a lock they hold, a mount of theirs) uses up their own share only."""
        out: dict[int | None, int] = {}
        for k in ctx.runner.stuck():
            if not k.startswith((f"{self.name}:inspect:", f"{self.name}:walk:")):
                continue
            parts = k.split(":")
            uid = int(parts[4]) if len(parts) > 4 and parts[4].lstrip("-").isdigit() else None
            out[uid] = out.get(uid, 0) + 1
        return out

    def _may_read(self, uid: int) -> str:
        """Why no more children may read a task of `uid` in this run, or ""."""
        stuck = self._stuck
        if stuck.get(uid, 0) >= INSPECT_STUCK_MAX:
            return f"{stuck[uid]} earlier readers of uid {uid}'s tasks are stuck in the kernel"
        total = sum(stuck.values())
        if total >= INSPECT_STUCK_ALL:
            return f"{total} earlier readers are stuck in the kernel"
        return ""

    def _apply_look(self, d: Stuck, o) -> None:
        if o is None or o.status != DONE or not isinstance(o.value, dict):
            # Its /proc files do not answer (a task in execve with a flush unanswered):
            # nothing read, nothing proven.
            d.look = f"{o.status}: {o.error} (at {o.step or 'start'})" if o is not None else "not run"
            return
        v = o.value
        if d.sample.start < 0 and isinstance(v.get("start"), int):
            d.sample.start = v["start"]
        call = v.get("call") or {}
        d.syscall, d.syscall_nr = str(call.get("name") or ""), call.get("nr")
        d.fds = [x for x in call.get("fds") or [] if isinstance(x, int)]
        d.dirfd = call.get("dirfd") if isinstance(call.get("dirfd"), int) else None
        if isinstance(call.get("fd"), int):
            d.fd, d.file = call["fd"], str(call.get("file") or "")
        d.addrs = [x for x in call.get("addrs") or [] if isinstance(x, int)]
        d.wchan = str(v.get("wchan") or "")
        d.stack = [str(x) for x in v.get("stack") or []]
        d.blocked = v.get("blocked") if isinstance(v.get("blocked"), (int, float)) else None
        d.mnt_ids = {int(k): m for k, m in (v.get("mnt_ids") or {}).items() if str(k).isdigit()}
        d.anon = {int(k): str(x) for k, x in (v.get("anon") or {}).items() if str(k).isdigit()}
        d.mntns = str(v.get("mntns") or "")
        d.links = {str(k): str(x) for k, x in (v.get("links") or {}).items()}

    def _read_memory_and_tables(self, ctx: Context, results: list[Stuck]) -> None:
        """The memory readers and one mount table per namespace, all at once."""
        self._stuck = self._stuck_readers(ctx)
        tasks: list[Task] = []
        for d in results:
            why = self._may_read(d.sample.uid)
            if d.look != "ok":
                d.inspect = "not read: its /proc files do not answer"
            elif why:
                d.inspect = f"not read: {why}"
            elif sum(1 for t in tasks if ":inspect:" in t.key) >= INSPECT_PER_RUN:
                d.inspect = f"not read: at most {INSPECT_PER_RUN} processes are read per run"
            else:
                tasks.append(Task(self._key("inspect", d), _inspect, (d.sample.pid, self.proc, d.addrs),
                                  self.settings.inspect_timeout))
        spaces: dict[str, list[Stuck]] = {}
        own = procfs.readlink("/proc/self/ns/mnt") or ""
        for d in results:
            if d.look != "ok":
                continue
            if own and d.mntns == own:
                # Our own mount namespace: the table is the one this run read already
                # (ids and devices alike), and no namespace read is spent on it.
                d.table, d.table_whole, d.table_count = ctx.mounts, True, len(list(ctx.mounts))
                continue
            spaces.setdefault(d.mntns or f"pid {d.sample.pid}", []).append(d)
        views: dict[str, str | None] = {}
        # Fair to every user: one namespace of each uid before a second of any.
        chosen = fair(list(spaces.items()), lambda kv: kv[1][0].sample.uid)
        per_run = max(TABLES_PER_RUN, len({ds[0].sample.uid for _, ds in chosen}))
        for ns, ds in chosen[:per_run]:
            ids = sorted({i for d in ds for i in d.mnt_ids.values() if isinstance(i, int)})
            key = f"{self.name}:mounts:{ns}"
            views[ns] = key
            # The devices of the file mappings are the memory reader's to say: a page
            # fault is placed by them, so a table sent in part keeps none of those.
            tasks.append(Task(key, _mount_view, (ds[0].sample.pid, self.proc, ids, []), TABLE_TIMEOUT))
        outcomes = ctx.runner.run(tasks) if tasks else {}
        for d in results:
            o = outcomes.get(self._key("inspect", d))
            if o is not None and o.status == DONE:
                v = o.value
                d.rank = rank_from(v)
                d.cmdline = v.get("cmdline", "")
                d.inspect = v.get("skipped") or "ok"
                d.devs = [x for x in v.get("devs", []) if isinstance(x, str)]
                d.path = next((p for p in v.get("paths", []) if p), None)
            elif o is not None:
                d.inspect = f"{o.status}: {o.error}"
        for ns, ds in spaces.items():
            view = views.get(ns)
            o = outcomes.get(view) if view else None
            for d in ds:
                if o is not None and o.status == DONE and isinstance(o.value, dict):
                    d.table, d.table_whole, d.table_count = _table_from(o.value)
                    d.table_cut = bool(o.value.get("cut"))
                else:
                    d.table = MountTable([])
                    d.table_whole = False
                    d.table_note = (f"its mount table was not read: {o.status}: {o.error}" if o is not None
                                    else f"its mount table was not read: at most {per_run} namespaces per run")
        for d in results:
            if d.table is None:
                d.table, d.table_whole = MountTable([]), False
                d.table_note = "its mount table was not read: its /proc files do not answer"

    def _walk(self, ctx: Context, results: list[Stuck]) -> None:
        """Resolves each path argument from the task's own root, cwd or dirfd, in children."""
        walks: list[tuple[Stuck, Task]] = []
        for d in results:
            path = d.path
            if not path or d.file:
                continue
            why = self._may_read(d.sample.uid)
            symbols = [d.wchan] + d.stack
            if waits.lock_wait(symbols) or waits.fault_part(d.stack) is not None:
                # Queued on a lock (the holder is the one waiting), or waiting in a page
                # fault (the place is the buffer's mapping): the path is not the place,
                # and a walk would only queue on the same lock.
                d.file = path if path.startswith("/") else os.path.join(d.links.get("cwd", ""), path)
                continue
            base = "root" if path.startswith("/") else ("cwd" if d.dirfd is None else f"fd/{d.dirfd}")
            # For people only: where the path leads is the walk's to say, not this string.
            d.file = path if base == "root" else os.path.join(d.links.get(base, ""), path)
            table = d.table if d.table is not None else MountTable([])
            if not d.table_whole:
                d.walk = {"end": "not resolved", "error": d.table_note or
                          f"its mount table holds {d.table_count} mounts: too many to walk a path through"}
            elif not why and len(walks) < INSPECT_PER_RUN:
                # Never into a user's own mount: reaching it is the answer, and its
                # server is theirs to stall (a walk stuck there is one reader fewer).
                theirs = sorted(m.mount_id for m in table
                                if waits.owner(m, table, self._host or ctx.mounts, d.sample.uid)[0] == "user")
                # Nor into a mount whose probe hangs: reaching it is the answer there too.
                hung = sorted(m.mount_id for m in table if m.dev and m.dev in self.hung_devs)
                walks.append((d, Task(self._key("walk", d), waits.walk,
                                      (d.sample.pid, self.proc, base, path, theirs, hung),
                                      self.settings.inspect_timeout)))
            else:
                d.walk = {"end": "not resolved", "error": why or f"at most {INSPECT_PER_RUN} per run"}
        if walks:
            done = ctx.runner.run([t for _, t in walks])
            for d, t in walks:
                o = done[t.key]
                if o.status == DONE and isinstance(o.value, dict):
                    d.walk = o.value
                else:
                    # It never came back: the mount it was looking in is the one that
                    # does not answer.
                    d.walk = {"mnt_id": waits.hung_at(o.step), "end": o.status}

    def _locate(self, ctx: Context, d: Stuck) -> None:
        """Whose the place is that the task waits on, from the kernel's ids alone (host/waits.py)."""
        pid = d.sample.pid
        table = d.table if d.table is not None else MountTable([])
        cut = d.table_cut
        candidates: list[tuple] = []
        for fd in d.fds:
            mid = d.mnt_ids.get(fd)
            how = f"fd {fd}: {printable(d.anon[fd])}, no mount (its fdinfo not read)" if fd in d.anon \
                else f"fd {fd}: mnt_id {mid}"
            candidates.append((table.by_id(mid) if mid is not None else None, how))
        symbols = [d.wchan] + d.stack
        fault = waits.fault_part(d.stack) if d.syscall != "page fault" else None
        if fault is not None:
            # A page fault inside the system call (the kernel copying a user buffer): the
            # task waits on the mapping the buffer lives in, not on what the call names.
            # Judged as any page fault is, by the frames above the fault and the devices
            # of the task's file mappings: a buffer in a file of the user's own mount is
            # theirs, whatever the call's descriptor is on.
            symbols = ([d.wchan] if d.wchan and d.wchan not in fault else []) + fault
            candidates = waits.fault_candidates(symbols, d.devs, table) if d.devs else []
        elif d.walk:
            mid = d.walk.get("mnt_id")
            how = f"path resolved from the task's root: {d.walk.get('end')}, mnt_id {mid}"
            if d.walk.get("error"):
                how += f" ({d.walk['error']})"
            candidates.append((table.by_id(mid) if isinstance(mid, int) else None, how))
        elif d.syscall == "page fault" and d.devs:
            candidates += waits.fault_candidates([d.wchan] + d.stack, d.devs, table)
        place = waits.attribute(symbols, candidates, table, self._host or ctx.mounts, d.sample.uid)
        if fault is not None:
            place.how.insert(0, "a page fault inside the system call: the place is the buffer's mapping")
        if d.look != "ok":
            place.how.append(f"its /proc files did not answer: {d.look}")
        if cut:
            place.how.append(f"its mountinfo is over {procfs.MOUNTINFO_MAX >> 20} MiB: read in part")
        if d.table_note:
            place.how.append(d.table_note)
        d.cause, d.how = place.cause, place.how
        if place.mount is not None:
            d.mountpoint, d.fstype, d.mount_dev = place.mount.mountpoint, place.mount.fstype, place.mount.dev
            d.source, d.network = place.mount.source, place.mount.is_network
        d.sigkill = _sigkill_pending(self.proc, pid, d.sample.tid)
        if place.cause == "user_mount":
            d.mount_owner = place.owner_uid


def _listpids(ctx: Context) -> dict[int, JobRef]:
    # scontrol whatever slurm.backend says: listpids reads this host's slurmstepd
    # sockets, there is no libslurm call for it (the pyslurm backend runs scontrol too).
    from ..slurm.api import SlurmError
    from ..slurm.scontrol import Slurm
    if ctx.behaviour.looks_only:
        return {}          # a look asks Slurm nothing: the cgroup alone names the job
    try:
        return Slurm(ctx.config.slurm).listpids(ctx.node)
    except SlurmError:
        return {}
