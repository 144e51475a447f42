"""Which Slurm job a process belongs to, from its cgroup (no Slurm call needed).

Paths Slurm's cgroup plugins create, and what they name:
  cgroup v1:  <ctrl>:/slurm/uid_U/job_J/step_S[/task_T]
              <ctrl>:/slurm_<node>/uid_U/job_J/step_S[/task_T]     (several slurmd per host)
  cgroup v2:  0::/system.slice/slurmstepd.scope/job_J/step_S/user/task_T
              0::/system.slice/<node>_slurmstepd.scope/job_J/...   (several slurmd per host)
S is a number or batch, extern, interactive (and older names such as
"4294967292"-style special ids in text form). When cgroups say nothing (proctrack
linuxproc or pgid), `scontrol listpids` is the fallback (slurm.py).

Only those roots count. A user may own cgroups of their own (systemd delegates
`user@UID.service` to them) and can build `.../slurm/uid_0/job_J/step_0` inside it; a
path is a Slurm job's only where Slurm's plugins create it: v1 at the root of the
hierarchy, v2 under system.slice's slurmstepd scope. Even then the job is confirmed
with Slurm before anything is done to it (actions.py).
"""
from __future__ import annotations

from . import lazyre
from .records import dataclass

_V1 = lazyre.compile(r"/slurm(?:_(?P<node>[^/]+))?/uid_(?P<uid>\d+)/job_(?P<job>\d+)"
                 r"(?:/step_(?P<step>[^/\s]+))?(?:/task_(?P<task>\d+))?(?:/|$)")
_V2 = lazyre.compile(r"/system\.slice/(?:(?P<node>[^/]+)_)?slurmstepd\.scope/job_(?P<job>\d+)"
                 r"(?:/step_(?P<step>[^/\s]+))?(?:/user)?(?:/task_(?P<task>\d+))?(?:/|$)")


@dataclass(frozen=True)
class JobRef:
    job: str
    step: str | None = None
    task: str | None = None      # the step's local task id, when the cgroup says
    uid: int | None = None
    node: str | None = None      # the slurmd the cgroup belongs to, on multi-slurmd hosts

    def belongs_to(self, node: str) -> bool:
        return self.node is None or self.node == node


def from_cgroup(text: str) -> JobRef | None:
    """JobRef from /proc/PID/cgroup contents; None for a process outside any job."""
    best = None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        # match(), not search(): anchored at the root of the hierarchy.
        m = _V1.match(path) or _V2.match(path)
        if not m:
            continue
        d = m.groupdict()
        ref = JobRef(job=d["job"], step=d.get("step"), task=d.get("task"),
                     uid=int(d["uid"]) if d.get("uid") else None, node=d.get("node"))
        # Controllers may disagree in depth (freezer has task_T, cpuset may not):
        # keep the most precise.
        if best is None or _precision(ref) > _precision(best):
            best = ref
    return best


def _precision(ref: JobRef) -> int:
    return (ref.step is not None) + (ref.task is not None)


def parse_listpids(out: str) -> dict[int, JobRef]:
    """`scontrol listpids` output: PID JOBID STEPID LOCALID GLOBALID per line."""
    refs = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        step = parts[2] if parts[2] not in ("-", "") else None
        task = parts[3] if len(parts) > 3 and parts[3] not in ("-", "") else None
        refs[int(parts[0])] = JobRef(job=parts[1], step=step, task=task)
    return refs
