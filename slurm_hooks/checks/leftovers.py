"""Leftovers of the job that just ended (epilog): its processes still alive.

By the time the epilog runs, Slurm has killed every task of the job. A process of the
job still alive then is one SIGKILL could not end: a task stuck in uninterruptible
sleep. Unless the node is drained now, the next job lands on a node where the old one
is wedged (and Slurm will later drain it anyway with the unhelpful "Kill task
failed"). Such a process is diagnosed exactly as the stuck-task check does (system
call, file, mount, cause) and drains the node; a leftover not in D is only reported.

Processes are found by their cgroup (this node's job_J), read from /proc/PID/cgroup,
and seen through their status: both answer for any process (host/procfs.py).

GPU processes (the prolog's "is this GPU free?", checks/_gpu_hooks.py) are sorted here
too: this job's, another job's, the MPS server's, or no job's. Which of them are
leftovers depends on whether the GPU is shared on purpose (Slurm shard or MPS).
"""
from __future__ import annotations

import os
import time

from .. import TYPE_CHECKING
from ..core.config import setting, switch
from ..core.model import STUCK_TASK, WARN, Finding
from ..core.records import dataclass
from ..host import procfs
from ..host.jobs import of_pid
from .stuck_tasks import NAME as STUCK_TASKS
from .stuck_tasks import STUCK_SERIES, stuck_samples
from .stuck_tasks import settings as stuck_settings

if TYPE_CHECKING:
    from ..core.config import Config
    from ..host.runner import Outcome as TaskOutcome
    from . import Context

NAME = "leftovers"
ORDER = 30
HOOKS = ("epilog",)


@dataclass
class LeftoversConfig:
    enabled: str = switch("After a job, look for its processes still running. auto is true.")


SECTIONS = {"leftovers": setting(kind="section", cls=LeftoversConfig,
                                 doc="What a job leaves behind (the epilog).")}


def settings(cfg: Config) -> LeftoversConfig:
    """This check's section of the configuration."""
    out: LeftoversConfig = getattr(cfg, "leftovers")
    return out


SETTLE = 0.3     # a task being killed right now gets this long to disappear


def job_pids(job: str, node: str, proc: str = procfs.PROC) -> list[int]:
    out = []
    for pid in procfs.list_pids(proc):
        ref = of_pid(pid, proc)
        if ref is not None and ref.job == job and ref.belongs_to(node):
            out.append(int(pid))
    return out


MPS_SERVER = "nvidia-cuda-mps-server"


def gpu_process_owner(pid: int, job: str, node: str, proc: str = procfs.PROC) -> tuple[str, str]:
    """(kind, label) of a process NVML lists on a GPU: kind is "this_job", "other_job",
    "mps_server" (NVIDIA's MPS server, which runs outside any job) or "no_job"."""
    ref = of_pid(pid, proc)
    if ref is not None and ref.belongs_to(node):
        if ref.job == job:
            return "this_job", f"pid {pid} (job {ref.job})"
        return "other_job", f"pid {pid} (job {ref.job})"
    # Its name from its status, which answers for any process (host/procfs.py).
    comm = procfs.parse_status(procfs.read_small(f"{proc}/{pid}/status") or b"").get("Name")
    if comm is not None and comm.strip() == MPS_SERVER[:15]:     # comm holds 15 characters
        return "mps_server", f"pid {pid} (MPS server)"
    return "no_job", f"pid {pid}"


class LeftoversCheck:
    name = NAME
    order, hooks = ORDER, HOOKS
    roles = (STUCK_TASK,)    # a job's task left stuck in D
    state: tuple[str, ...] = ()
    series = STUCK_SERIES
    explain_keys = ("job", "pid", "tids", "comm", "syscall", "file", "mountpoint", "fstype", "cause", "wchan", "stack")
    samples = staticmethod(stuck_samples)

    def __init__(self, proc: str = procfs.PROC):
        self.proc = proc

    def tasks(self, ctx: Context) -> list:
        return []

    def findings(self, ctx: Context, outcomes: dict[str, TaskOutcome]) -> list[Finding]:
        if ctx.job is None or settings(ctx.config).enabled == "false":
            return []
        pids = job_pids(ctx.job.id, ctx.node, self.proc)
        if not pids:
            return []
        time.sleep(SETTLE)
        from ._stuck_diagnosis import Diagnosis
        # Diagnosed exactly as the stuck-task check does, with its settings.
        diagnosis = Diagnosis(STUCK_TASKS, stuck_settings(ctx.config), self.proc)
        out = []
        for pid in pids:
            # Their status alone: a leftover in execve with a flush unanswered stalls
            # every reader of its stat (the diagnosis reads that in a child).
            samples = [s for s in (procfs.status_sample(pid, int(t), -1, self.proc) for t in _tids(self.proc, pid))
                       if s is not None]
            if not samples:
                continue                      # it ended meanwhile
            stuck = [s for s in samples if s.state == "D"]
            if stuck:
                for d in diagnosis.diagnose(ctx, {pid: [(s, 0.0) for s in stuck]}, {}):
                    f = diagnosis.finding(ctx, d, after_end=True)
                    if f is not None:
                        # The node's only where proven: otherwise it stays the job's.
                        f.check = NAME
                        if f.status == "stuck":
                            f.status = "stuck_after_job"
                        out.append(f)
            else:
                s = samples[0]
                out.append(Finding(NAME, f"pid {pid}", "left_running", WARN,
                                   f"job {ctx.job.id} left pid {pid} ({s.comm}) running after it ended",
                                   evidence={"pid": pid, "comm": s.comm, "state": s.state, "job": ctx.job.id}))
        return out


def _tids(proc: str, pid: int) -> list[str]:
    try:
        return os.listdir(f"{proc}/{pid}/task")
    except OSError:
        return []


CHECK = LeftoversCheck
