"""The GPU part of the prolog and the epilog: the job's GPUs only, and what earlier jobs
left on them.

Which GPUs are the job's: Slurm names them in SLURM_JOB_GPUS by device minor number (the
N of /dev/nvidiaN, what its gres.conf `File=` lines and NVML's autodetection count),
and CUDA_VISIBLE_DEVICES may name them by UUID. NVML's own index is another numbering,
whose order NVML does not guarantee and which differs from Slurm's on real systems
(Slurm's gres guide calls the mapping nondeterministic): a GPU is matched by minor
number, UUID or PCI bus id, never by NVML index. A job given no GPU checks none.

A process on the job's GPU is a leftover when it is not this job's, unless the GPU is
shared on purpose: a job given a Slurm `shard` (SLURM_SHARDS_ON_NODE) or MPS share
(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) lands on GPUs that other jobs' processes and the MPS
server use by design (checks/leftovers.py decides whose a GPU process is).
"""
from __future__ import annotations

from .. import TYPE_CHECKING
from ..core.model import FAIL, OK, WARN, Finding
from ..host import xid as xidmod
from ._gpu_health import health

if TYPE_CHECKING:
    from . import Context
    from ._gpu_config import GpuConfig

NAME = "gpu"


def given_none(ctx: Context) -> Finding | None:
    """The finding for a job given no GPU (nothing to ask NVML), else None."""
    job = ctx.job
    if job is not None and job.gpus:
        return None
    what = f"job {job.id}" if job is not None else "no job"
    return Finding(NAME, "gpus", "ok", OK, f"gpu: {what} was given no GPU: none checked")


def match(gpus: list[dict], wanted: list[str]) -> tuple[list[dict], list[str]]:
    """(the GPUs named by `wanted`, the names that match no GPU)."""
    mine, unmatched = [], []
    for name in wanted:
        found = [g for g in gpus if _names(g, name)]
        if found:
            mine += [g for g in found if g not in mine]
        else:
            unmatched.append(name)
    return mine, unmatched


def _names(g: dict, name: str) -> bool:
    if name.isdigit():
        return g.get("minor") is not None and int(g["minor"]) == int(name)
    if name.startswith("GPU-"):
        # CUDA accepts a unique prefix of the UUID.
        return bool(g.get("uuid")) and g["uuid"].startswith(name)
    if ":" in name:
        try:
            return g.get("pci") == xidmod.normalise_pci(name)
        except (ValueError, IndexError):
            return False
    return False


def hook_findings(ctx: Context, cfg: GpuConfig, gpus: list[dict], v: dict) -> list[Finding]:
    from .leftovers import gpu_process_owner
    job = ctx.job
    assert job is not None          # given_none() stops a run without a job before NVML
    mine, unmatched = match(gpus, job.gpus or [])
    if unmatched:
        # A GPU that could not be read cannot say its minor number: it may be the one.
        mine += [g for g in gpus if g["status"] != "ok" and g.get("minor") is None and g not in mine]
    hook_cfg = ctx.config.prolog if ctx.behaviour.before_job else ctx.config.epilog
    out = []
    if unmatched:
        out.append(Finding(NAME, "gpus", "unmatched", WARN,
                           f"gpu: job {job.id}'s GPU(s) {', '.join(unmatched)} match no GPU's minor number, "
                           f"UUID or PCI id on this node", evidence={"wanted": job.gpus, "unmatched": unmatched}))
    for g in mine:
        out += health(cfg, g, None, {}, {})
        if g["status"] != "ok":
            continue
        who = f"gpu {g['index']} ({g.get('pci') or '?'})"
        procs = list({p["pid"]: p for p in (g.get("processes") or []) + (g.get("mps_processes") or [])}.values())
        if ctx.behaviour.before_job:
            left = [(p["pid"], label) for p in procs
                    for kind, label in [gpu_process_owner(p["pid"], job.id, ctx.node)]
                    if kind == "no_job" or (kind in ("other_job", "mps_server") and not job.shared)]
            if left:
                users = ", ".join(label for _, label in left[:4])
                out.append(Finding(NAME, who, "in_use", FAIL,
                                   f"{who} still in use by {users} before job {job.id} starts",
                                   evidence=dict(g, leftovers=[pid for pid, _ in left]),
                                   reason=f"{who} still in use by {users}",
                                   incident=f"gpu-busy:{g.get('pci')}", hard=True, resumable=False))
                continue
        held = _held_mib(g)
        if not procs and held is not None and held > hook_cfg.gpu_memory_leak_mib:
            out.append(Finding(NAME, who, "memory_held", FAIL,
                               f"{who} holds {held} MiB with no process on it (left by an earlier job)",
                               evidence=dict(g), reason=f"{who} holds {held} MiB with no process",
                               incident=f"gpu-leak:{g.get('pci')}", hard=True, resumable=False))
    if not [f for f in out if f.severity != OK]:
        shared = f", shared ({job.shared})" if job.shared else ""
        out.append(Finding(NAME, "gpus", "ok", OK,
                           f"gpu: the job's {len(mine)} GPU(s) healthy and free{shared} "
                           f"(driver {v.get('driver') or '?'})",
                           evidence={"gpus": mine, "wanted": job.gpus}))
    return out


def _held_mib(g: dict) -> int | None:
    """Memory allocated on the GPU, not counting what the driver and firmware reserve
    (NVML's v2 memory query). None where it means nothing: a GPU whose memory is a NUMA
    node of the system (GH200, GB200) keeps pages allocated after a process ends, and
    that is not a leftover."""
    if g.get("numa_node") is not None:
        return None
    return g.get("memory_used_mib")
