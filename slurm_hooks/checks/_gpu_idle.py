"""A GPU idle while the other GPUs of its job are busy.

In the incident, seven GPUs of a job spun at 100 % in a barrier while the eighth sat at
0 %: its rank was stuck in the kernel. But healthy jobs look the same for minutes: rank 0
writing a full checkpoint while the others wait in a barrier, trainer GPUs waiting for
rollout GPUs in reinforcement learning, a data loader that stalls. So the sighting alone
never drains and never touches the job:

- each run that sees it records since when it has been seen without a break (a run that
  does not see it starts it over, and so does a gap of more than GAP seconds, or of the
  window if longer, between two runs: nobody looked in between);
- until it has lasted `gpu.idle.window` seconds it is reported as pending (severity ok),
  after that as a warning;
- tied to a task of the same process stuck in D, correlate() below makes it one diagnosis
  with the stuck task, at once, and that one fails: the stuck task is the fault.
"""
from __future__ import annotations

import time

from .. import TYPE_CHECKING
from ..core.model import FAIL, OK, WARN, Finding

if TYPE_CHECKING:
    from . import Context
    from ._gpu_config import GpuIdleConfig

NAME = "gpu"
GAP = 600.0


def idle_findings(ctx: Context, idle_cfg: GpuIdleConfig, gpus: list[dict], jobs: dict) -> list[Finding]:
    history = ctx.state.load("gpu-idle")
    now = time.time()
    seen_now: dict = {}
    out = []
    by_job: dict[str, list[dict]] = {}
    for g in gpus:
        if g["index"] in jobs and g.get("utilization") is not None:
            by_job.setdefault(jobs[g["index"]][0].job, []).append(g)
    for job, members in by_job.items():
        busy = [g for g in members if g["utilization"] >= idle_cfg.busy_utilization]
        if len(members) < 2 or not busy:
            continue
        top_power = max((g.get("power_w") or 0) for g in busy)
        for g in members:
            if g["utilization"] > idle_cfg.idle_utilization:
                continue
            if g.get("power_w") is not None and top_power and g["power_w"] > idle_cfg.idle_power_ratio * top_power:
                continue
            key = g.get("uuid") or g.get("pci") or str(g["index"])
            last = history.get(key, {})
            since = float(last["since"]) if (last.get("job") == job and "since" in last
                                             and now - float(last.get("last", 0)) <= max(GAP, idle_cfg.window)) else now
            seen_now[key] = {"job": job, "since": since, "last": now}
            lasted = now - since
            ref, pids = jobs[g["index"]]
            who = f"gpu {g['index']} ({g.get('pci') or '?'})"
            confirmed = lasted >= idle_cfg.window
            out.append(Finding(
                NAME, who, "idle_while_busy", WARN if confirmed else OK,
                f"{who} idle ({g['utilization']}%, {g.get('power_w') or 0:.0f}W) for {lasted:.0f}s while "
                f"{len(busy)} other GPU(s) of job {job} are busy; its process: pid {', '.join(map(str, pids))}"
                + ("" if confirmed else f" (a warning after {idle_cfg.window:g}s)"),
                evidence={"gpu": g, "pids": pids, "busy": [b["index"] for b in busy], "since": since,
                          "seconds": round(lasted, 1), "window": idle_cfg.window},
                job=job, reason=f"{who} idle while job {job} busy (pid {pids[0]})",
                incident=f"gpu-idle:{key}:{job}"))
    if seen_now or history:
        ctx.state.save("gpu-idle", seen_now)
    return out


# The stuck-task check's finding that can explain an idle GPU: its process stuck in D.
STUCK_CHECK, STUCK_STATUS = "stuck_tasks", "stuck"


def correlate(findings: list[Finding]) -> list[Finding]:
    """The incident's signature, joined: seven GPUs of a job at 100 % (NCCL spinning in
    a barrier), one at 0 %, and that GPU's process stuck in D in write() on a frozen
    filesystem. Reported apart, they point an admin at the GPU; joined, they say the GPU
    idles because its process is blocked in the kernel. An idle GPU alone is never a
    failure; tied to a stuck task of its processes it becomes part of that task's
    finding, which fails at once, whatever the idle GPU's own window says."""
    for f in findings:
        if f.check == NAME and f.status == "idle_while_busy" and f.severity == FAIL:
            f.severity = WARN               # never a failure by itself
    stuck_by_pid = {f.evidence.get("pid"): f for f in findings
                    if f.check == STUCK_CHECK and f.status == STUCK_STATUS}
    if not stuck_by_pid:
        return findings
    out = []
    for f in findings:
        if f.check == NAME and f.status == "idle_while_busy":
            stuck = next((stuck_by_pid[p] for p in f.evidence.get("pids", []) if p in stuck_by_pid), None)
            if stuck is not None:
                busy = len(f.evidence.get("busy", []))
                stuck.summary += (f"; {f.target} idles because of it while {busy} other GPU(s) of "
                                  f"job {f.job} are busy (the GPU is not the fault)")
                stuck.evidence["idle_gpu"] = f.evidence.get("gpu")
                stuck.evidence["idle_seconds"] = f.evidence.get("seconds")
                stuck.severity = FAIL
                continue                    # the GPU finding is now part of the stuck one
        out.append(f)
    return out
