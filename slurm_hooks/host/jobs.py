"""Which Slurm job a process belongs to, from its cgroup (no Slurm call needed).

Paths Slurm's cgroup plugins create, and what they name:
  cgroup v1:  <ctrl>:/slurm/uid_U/job_J/step_S[/task_T]
              <ctrl>:/slurm_<node>/uid_U/job_J/step_S[/task_T]     (several slurmd per host)
  cgroup v2:  0::/system.slice/slurmstepd.scope/job_J/step_S/user/task_T
              0::/system.slice/<node>_slurmstepd.scope/job_J/...   (several slurmd per host)
              0::[/INIT]/SLICE/slurmstepd.scope/job_J/...          (CgroupSlice=, a container)
S is a number or batch, extern, interactive (and older names such as
"4294967292"-style special ids in text form). When cgroups say nothing (proctrack
linuxproc or pgid), `scontrol listpids` is the fallback (slurm/scontrol.py).

Only those roots count. A user may own cgroups of their own (systemd delegates
`user@UID.service` to them) and can build `.../slurm/uid_0/job_J/step_0` inside it; a
path is a Slurm job's only where Slurm's plugins create it: v1 at the root of the
hierarchy, v2 in the slurmstepd scope of a slice at the top of the init cgroup. Even
then the job is confirmed with Slurm before anything is done to it (act/actions.py).

cgroup/v2 puts that scope in cgroup.conf's CgroupSlice (system.slice unless set; 25.11
on) below the directory of PID 1's cgroup, unless PID 1 sits at the root: "" on a host,
/docker.slice/docker-ID.scope for slurmd in a container whose init is in init.scope
there. The same is done here with this namespace's PID 1, and any slice (or systemd's
nested slices, a-b.slice in a.slice) is taken rather than reading cgroup.conf, which
may lie on the shared filesystem: only root makes cgroups at that level, and a subtree
systemd delegates to a user lies below user@UID.service, which is no slice.
"""
from __future__ import annotations

from ..core import lazyre
from ..core.records import dataclass

_V1 = lazyre.compile(r"/slurm(?:_(?P<node>[^/]+))?/uid_(?P<uid>\d+)/job_(?P<job>\d+)"
                 r"(?:/step_(?P<step>[^/\s]+))?(?:/task_(?P<task>\d+))?(?:/|$)")
_V2 = lazyre.compile(r"(?:/[^/]+\.slice)+/(?:(?P<node>[^/]+)_)?slurmstepd\.scope/job_(?P<job>\d+)"
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


def from_cgroup(text: str, init: str = "") -> JobRef | None:
    """JobRef from /proc/PID/cgroup contents; None for a process outside any job.
    `init`: where cgroup/v2 roots its slices (init_root), "" on a host."""
    best = None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        # match(), not search(): anchored at the root of the hierarchy (v2: below init).
        m = _V1.match(path)
        if m is None and line.startswith("0::") and path.startswith(init + "/"):
            m = _V2.match(path[len(init):])
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


def of_pid(pid: int | str, proc: str = "/proc") -> JobRef | None:
    """The job of a process from its /proc/PID/cgroup (a read that is safe on any
    process, one in D state too); None outside any job or when it is gone."""
    from .procfs import text
    data = text(f"{proc}/{pid}/cgroup")
    return from_cgroup(data, init_root(proc)) if data else None


_INIT_ROOTS: dict[str, str] = {}


def init_root(proc: str = "/proc") -> str:
    """Where cgroup/v2 puts its slices, as Slurm finds it (_get_init_cg_path): the
    directory of PID 1's cgroup, or the root when PID 1 is there. Read once per process:
    PID 1 does not move."""
    root = _INIT_ROOTS.get(proc)
    if root is None:
        from .procfs import text
        root = ""
        for line in (text(f"{proc}/1/cgroup") or "").splitlines():
            if line.startswith("0::/"):
                path = line[3:].rstrip("/")
                root = path.rpartition("/")[0] if path else ""
        _INIT_ROOTS[proc] = root
    return root


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
